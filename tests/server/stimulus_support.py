"""What a stimulus URL must not give away, and which files a paired trial shows, for the stimulus-serving
tests on local folders and on S3.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

from server.models import Trial
from server.services import app_services


# What a path may give away: none of it may appear in a URL.
PATH_WORDS = ("gold", "degraded", "reference", "flow", "overview", "crop", "amplified", "original", "scene",
              "frame", "noise", "chelsea", "astronaut", "coffee", "farneback", "dis_", "true", "zero", "demo_")


def trial_paths(app, trial_id: str) -> dict[str, tuple[str, list[str]]]:
    """side -> (full, crops) of a paired trial, read from its rows."""
    with app_services(app).sessions() as session:
        trial = session.get(Trial, int(trial_id))
        pair = trial.pair
        a, b = pair.stimulus_a, pair.stimulus_b
        left, right = (a, b) if trial.left_is_a else (b, a)
        reference = pair.set.reference
        return {"reference": (reference["full"], reference["crops"]), "left": (left.full, left.crops["paths"]),
                "right": (right.full, right.crops["paths"])}
