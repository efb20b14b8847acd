"""``perceptlab stimuli ...``: stimulus preparation commands (package :mod:`stimuli`)."""
from __future__ import annotations

from .base import cli


@cli.group("stimuli")
def stimuli_group() -> None:
    """Prepare stimuli: amplification, zoom crops, pair designs, demo data."""
