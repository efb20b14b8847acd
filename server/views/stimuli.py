"""Stimulus files from the local storage backend, with long cache lifetimes (they never change)."""
from __future__ import annotations


from flask import Blueprint, abort, current_app, send_from_directory
from sqlalchemy import select

from ..app import db_session
from ..models import Study

bp = Blueprint("stimuli", __name__)


@bp.get("/stimuli/<slug>/<path:path>")
def stimulus_file(slug: str, path: str):
    root = _root(current_app._get_current_object(), slug)
    if root is None:
        abort(404)
    # send_from_directory refuses paths that leave the root ("../"), so a URL can only reach study files.
    return send_from_directory(root, path, max_age=86400)


def _root(app, slug: str) -> str | None:
    cache = app.extensions.setdefault("perceptlab.stimulus_roots", {})
    if slug not in cache:
        root = db_session().scalar(select(Study.stimulus_root).where(Study.slug == slug))
        if root is None:
            return None
        cache[slug] = root
    return cache[slug]
