"""The rating paradigm's experimenter routes (``admin_blueprint``): its study page's download.

HTML downloads
    GET  /admin/studies/<slug>/ratings.csv   ?raw_worker_ids=1 &no_gold=1 &include_pilot=1

The study page itself (``rating/admin_study.html``) is rendered by the shared ``GET /admin/studies/<slug>``
with :meth:`Rating.dashboard_context` and refreshed from ``GET /admin/api/studies/<slug>/summary``
(:meth:`Rating.dashboard_summary`). Every route needs a logged-in experimenter and the session's CSRF token
on POST (:func:`server.admin_support.protect`).
"""
from __future__ import annotations

from flask import Blueprint
from werkzeug.exceptions import HTTPException

from ... import auth
from ...db import db_session
from ...admin_support import admin_error, csv_download, download_salt, flag, protect, study_or_404
from .export import RATINGS_COLUMNS, rating_rows

bp = Blueprint("rating_admin", __name__, url_prefix="/admin")
protect(bp)
bp.register_error_handler(HTTPException, admin_error)


@bp.get("/studies/<slug>/ratings.csv")
@auth.login_required
def ratings_csv(slug: str):
    """ratings.csv of a rating study (pseudonymised unless ``raw_worker_ids``; pilots only with ``include_pilot``)."""
    from analysis.formats import table_csv

    study = study_or_404(slug)
    raw = flag("raw_worker_ids")
    rows = rating_rows(db_session(), study.id, salt=download_salt(study, raw), include_gold=not flag("no_gold"),
                       include_pilot=flag("include_pilot"))
    return csv_download(table_csv(RATINGS_COLUMNS, rows), f"{slug}-ratings{'-raw-ids' if raw else ''}.csv")
