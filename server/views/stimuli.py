"""Stimulus files: their opaque URLs (both backends) and serving them from the local backend.

Only files in the study's :class:`~server.stimulus_index.StimulusIndex` are served, under their
opaque names; anything else (flow files, manifests, unreferenced files, path-style URLs, unknown
studies) is the same plain 404, so the route cannot be used to probe for studies or files.

A response tells no more than its bytes: no ``Content-Disposition`` (Flask's ``send_from_directory``
would name the file, e.g. ``worse.png`` or ``zero_flow.png``), no ``Last-Modified`` or ``Expires``
(file or request times), and an ``ETag`` that is a hash of the content (Flask's holds the file's
mtime and a checksum of its real path), so conditional GETs (304) and ranges still work.

Behind nginx with ``[storage] accel_redirect`` (:meth:`~server.storage.LocalStorage.internal_uri`), the app
only authorises: it answers a known name with its content ETag, ``Cache-Control`` and type, and an
``X-Accel-Redirect`` to nginx's ``internal`` location, which streams the file (sendfile, ranges) without
its own ``ETag`` or ``Last-Modified`` (``deploy/nginx/perceptlab.conf``). A matching ``If-None-Match`` is the
app's 304, as without nginx.
"""
from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from flask import Blueprint, Response, abort, current_app, request
from werkzeug.security import safe_join

from ..db import db_session
from ..models import Study
from ..paradigms.core import fixed_study_facts
from ..paradigms.media import PROBE_BYTES
from ..services import app_services
from ..stimulus_index import IndexCache, StimulusIndex, naming_key, opaque_name
from ..storage import LocalStorage, content_type

bp = Blueprint("stimuli", __name__)

MAX_AGE = 86400  # seconds; a name always means the same file of an immutable study
ETAG_BYTES = 16  # 128 bits of BLAKE2b
PROBE_SEED = 36  # the connection probe's bytes: fixed, so that every server sends the same file


@bp.get("/stimuli/<slug>/<name>")
def stimulus_file(slug: str, name: str):
    index = study_index(slug)
    path = index.path(name) if index is not None else None
    if path is None:
        abort(404)
    full = safe_join(str(index.root), path)  # still refuse a stored path that would leave the root
    if full is None:
        abort(404)
    storage = app_services().storage
    internal = storage.internal_uri(full) if isinstance(storage, LocalStorage) else None
    if internal is not None:
        return accel_response(Path(full), internal, content_type(name), request)
    try:
        data = Path(full).read_bytes()  # images of a few MB, clips of tens: nginx streams them when configured
    except OSError:
        abort(404)
    return content_response(data, content_type(name), request)


def accel_response(path: Path, internal: str, mimetype: str, incoming) -> Response:
    """The app's answer when nginx sends the file: its validators and type, and where nginx finds it.

    ``X-Accel-Redirect`` never reaches the browser (nginx consumes it); the bytes, their length and their
    ranges are nginx's."""
    try:
        etag = file_etag(path)
    except OSError:
        abort(404)
    response = Response(mimetype=mimetype)
    response.set_etag(etag)
    response.cache_control.public = True
    response.cache_control.max_age = MAX_AGE
    if incoming.if_none_match.contains(etag):
        response.status_code = 304
        return response
    response.headers["X-Accel-Redirect"] = internal
    return response


_ETAGS: dict[str, tuple[tuple[int, int, int], str]] = {}


def file_etag(path: Path) -> str:
    """:func:`content_etag` of the file at ``path``, hashed again only when its inode, size or mtime change
    (a clip is tens of MB; the app answers every request for it)."""
    status = path.stat()
    stamp = (status.st_ino, status.st_size, status.st_mtime_ns)
    known = _ETAGS.get(str(path))
    if known is None or known[0] != stamp:
        digest = hashlib.blake2b(digest_size=ETAG_BYTES)  # content_etag's, streamed
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
        known = _ETAGS[str(path)] = (stamp, digest.hexdigest())
    return known[1]


@bp.get("/media/connection-probe")
def connection_probe():
    """The connection check's test file (server/paradigms/media.py): random bytes of a known size, the same
    for every study and every request, never cached, naming nothing."""
    response = Response(_probe_bytes(), mimetype="application/octet-stream")
    response.cache_control.no_store = True
    return response


@lru_cache(maxsize=1)
def _probe_bytes() -> bytes:
    return random.Random(PROBE_SEED).randbytes(PROBE_BYTES)  # incompressible, made once per process


def content_response(data: bytes, mimetype: str, incoming) -> Response:
    """``data`` as a cacheable response whose only validator is its content's hash.

    Answers ``If-None-Match`` with 304 and ``Range`` with 206, like ``send_file``, but sends none of
    the headers that describe the file rather than its bytes (name, modification time, path checksum).
    """
    response = Response(data, mimetype=mimetype)
    response.set_etag(content_etag(data))
    response.cache_control.public = True
    response.cache_control.max_age = MAX_AGE
    return response.make_conditional(incoming, accept_ranges=True, complete_length=len(data))


def content_etag(data: bytes) -> str:
    """A strong validator made of the bytes alone: 128 bits of their BLAKE2b hash, hex."""
    return hashlib.blake2b(data, digest_size=ETAG_BYTES).hexdigest()


def study_index(slug: str) -> StimulusIndex | None:
    """The current app's index of the study ``slug`` (built once per process), or None."""
    cache = app_services().made("stimulus_index", IndexCache)
    return cache.get(db_session(), slug, current_app.config["SECRET_KEY"])


def stimulus_urls(study: Study) -> Callable[[str], str]:
    """``path -> URL`` for the stimuli of ``study``, from the configured storage backend.

    The one function templates (``stimulus_url``) and trial states use to make stimulus URLs.
    """
    return _urls(study.slug, naming_key(study.config, study.slug, current_app.config["SECRET_KEY"]))


def stimulus_urls_of(study_id: int) -> Callable[[str], str]:
    """:func:`stimulus_urls` of a study known by its ID: its slug and naming key, which never change,
    are read once per process (a worker's every state names its page's images)."""
    session = db_session()
    secret = current_app.config["SECRET_KEY"]
    known = fixed_study_facts(session, "stimulus_urls")
    found = known.get(study_id)
    if found is None or found[0] != secret:
        study = session.get(Study, study_id)
        found = known[study_id] = (secret, study.slug, naming_key(study.config, study.slug, secret))
    return _urls(found[1], found[2])


def _urls(slug: str, key: bytes) -> Callable[[str], str]:
    storage = app_services().storage
    return lambda path: storage.url(slug, opaque_name(key, path))
