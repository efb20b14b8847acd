"""Opaque stimulus names and the index of the files a study may serve.

A worker's browser must learn nothing from a stimulus URL: not the scene, the method, whether an
image is gold or the reference, nor where the file lies on the server. So every file a study shows
is published under an opaque name::

    name = hex(HMAC-SHA256(key, relative path))[:32] + extension

where ``key`` is the study's own random salt (``Study.config["stimulus_salt"]``, made when the study
is created). Names are stable (the same path always gets the same name, across restarts and
server processes) and distinct (two paths never share a name: a collision is refused when the
index is built). The extension is kept only when it is a plain image type, so content types work
and it tells nothing.

Studies created before salts existed have none; their key is derived from the server's secret key
and the study slug (as worker pseudonyms are, see :func:`server.exports.study_salt`). Their names
therefore change if the secret key changes; such studies on S3 then need ``perceptlab storage
upload`` again.

The index (:class:`StimulusIndex`) holds exactly the files trials and worker pages show: each set's
reference image and crops and its overview, every stimulus's full image and crops, every motion
clip frame and the motion noise texture, read from the database rows. Nothing else (flow files,
manifests, other files in the folder) has a name, so nothing else is served or uploaded.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.orm import Session

from .models import Study
from .paradigms import paradigm_for

SALT_KEY = "stimulus_salt"  # in Study.config: 64 hex digits, the study's naming key
NAME_HEX_DIGITS = 32        # 128 bits: collisions are practically impossible (and refused anyway)
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".webp", ".avif", ".gif"})
# Video clips keep their container's suffix (and so their Content-Type, which Safari needs to play a Blob);
# every delivered clip of a study is MP4 (stimuli/video.py), so the suffix tells no clip from another.
VIDEO_EXTENSIONS = frozenset({".mp4", ".webm"})
OTHER_EXTENSION = ".bin"
_LEGACY_CONTEXT = b"perceptlab/stimulus-names/"


def new_salt() -> str:
    """A fresh random naming key for a new study (stored in ``Study.config[SALT_KEY]``)."""
    return secrets.token_hex(32)


def naming_key(config: dict, slug: str, secret_key: str) -> bytes:
    """The HMAC key of a study's stimulus names.

    Parameters
    ----------
    config : dict
        The study's ``Study.config``; its ``stimulus_salt`` is the key when present.
    slug : str
        The study slug (for the fallback key).
    secret_key : str
        The server's secret key: studies created before salts existed derive their key from it.
    """
    salt = config.get(SALT_KEY)
    if salt:
        return bytes.fromhex(salt)
    return hmac.new(secret_key.encode(), _LEGACY_CONTEXT + slug.encode(), hashlib.sha256).digest()


@lru_cache(maxsize=1 << 15)
def opaque_name(key: bytes, path: str) -> str:
    """The public name of ``path`` (relative to the study's stimulus root) under ``key``.

    A pure function, remembered for the most recent paths: every state of a worker's page names
    about a hundred images, and an HMAC for each cost more than the rest of the state together.
    """
    digest = hmac.new(key, path.encode(), hashlib.sha256).hexdigest()[:NAME_HEX_DIGITS]
    suffix = PurePosixPath(path).suffix.lower()
    return digest + (suffix if suffix in IMAGE_EXTENSIONS | VIDEO_EXTENSIONS else OTHER_EXTENSION)


def name_maker(study: Study, secret_key: str) -> Callable[[str], str]:
    """``path -> opaque name`` for one study."""
    key = naming_key(study.config, study.slug, secret_key)
    return lambda path: opaque_name(key, path)


def referenced_paths(session: Session, study: Study) -> list[str]:
    """Every stimulus path the study's trials and worker pages show, once each, in a stable order
    (its paradigm lists them: :meth:`~server.paradigms.core.Paradigm.stimulus_paths`)."""
    return list(dict.fromkeys(paradigm_for(study).stimulus_paths(session, study)))


@dataclass(frozen=True)
class StimulusIndex:
    """The files one study serves: opaque name -> path relative to ``root``."""

    study_id: int
    slug: str
    root: Path
    paths: dict[str, str]

    @classmethod
    def build(cls, session: Session, study: Study, secret_key: str) -> StimulusIndex:
        """Name every referenced file of ``study``; refuses two paths with one name."""
        name_of = name_maker(study, secret_key)
        paths: dict[str, str] = {}
        for path in referenced_paths(session, study):
            name = name_of(path)
            if paths.setdefault(name, path) != path:
                raise RuntimeError(f"study {study.slug}: {path!r} and {paths[name]!r} got the same name {name}")
        return cls(study_id=study.id, slug=study.slug, root=Path(study.stimulus_root), paths=paths)

    def path(self, name: str) -> str | None:
        """The relative path published as ``name``, or None when nothing is."""
        return self.paths.get(name)

    def items(self) -> Iterable[tuple[str, str]]:
        """(name, relative path) pairs, in the order the study lists them."""
        return self.paths.items()


class IndexCache:
    """One :class:`StimulusIndex` per study per process, built on first use (studies never change).

    Thread-safe: concurrent first requests may both build the index, but they build the same one and
    only the first is kept.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_slug: dict[str, StimulusIndex] = {}

    def get(self, session: Session, slug: str, secret_key: str) -> StimulusIndex | None:
        """The index of the study ``slug``, or None when there is no such study."""
        with self._lock:
            cached = self._by_slug.get(slug)
        if cached is not None:
            return cached
        study = session.scalar(select(Study).where(Study.slug == slug))
        if study is None:
            return None
        index = StimulusIndex.build(session, study, secret_key)
        with self._lock:
            return self._by_slug.setdefault(slug, index)


__all__ = [
    "SALT_KEY",
    "IndexCache",
    "StimulusIndex",
    "name_maker",
    "naming_key",
    "new_salt",
    "opaque_name",
    "referenced_paths",
]
