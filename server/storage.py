"""Where stimulus files live and the URLs workers load them from.

The default is the local folder each study's manifests are in, served by the
``stimuli`` blueprint under ``/stimuli/<slug>/<path>``.
"""
from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote


class Storage(Protocol):
    def url(self, study_slug: str, path: str) -> str:
        """The URL a browser loads ``path`` (relative to the study's stimulus root) from."""


class LocalStorage:
    """Stimuli served by this server from the study's stimulus folder."""

    def url(self, study_slug: str, path: str) -> str:
        return f"/stimuli/{quote(study_slug)}/{quote(path)}"


def make_storage(config: dict[str, Any]) -> Storage:
    return LocalStorage()
