"""Experimenter pages for Amazon Mechanical Turk, under ``/admin/mturk``.

    GET  /admin/mturk/studies/<slug>             balance, HITs, MTurk assignments and the payment plan
    POST /admin/mturk/studies/<slug>/launch      form: assignments, per_hit, days, url; without confirm=1 it
                                                 only shows the cost and the marketplace (no MTurk call)
    POST /admin/mturk/studies/<slug>/notify      form: subject, message (sent to the study's workers)
    POST /admin/mturk/studies/<slug>/reconcile   fetch HITs and assignments from MTurk
    POST /admin/mturk/studies/<slug>/approve     form: assignment_id, or all_submitted=1
    POST /admin/mturk/studies/<slug>/reject      form: assignment_id, feedback
    POST /admin/mturk/studies/<slug>/bonus       pay the plan's unpaid bonuses of approved assignments
    POST /admin/mturk/studies/<slug>/expire      expire every HIT of the study

The marketplace is the sandbox unless the app config has ``MTURK_LIVE = True``; tests set
``MTURK_CLIENT_FACTORY`` (a callable ``live -> boto3 client``). Every POST needs the CSRF token;
the outcome of a POST is flashed on the study page it redirects to.
"""
from __future__ import annotations

from flask import (
    Blueprint,
    abort,
    current_app,
    flash,
    get_flashed_messages,
    redirect,
    render_template,
    request,
    url_for,
)
from sqlalchemy import select

from .. import auth
from ..db import db_session
from ..models import MTurkAssignment, MTurkHit, Study
from ..payments import submitted_for_approval
from .admin import pay_settings, protect, study_or_404

bp = Blueprint("admin_mturk", __name__, url_prefix="/admin/mturk")


protect(bp)


def _live() -> bool:
    return bool(current_app.config.get("MTURK_LIVE", False))


def _service():
    from ..mturk import MTurkService, check_credentials, instance_metadata_allowed, make_client

    factory = current_app.config.get("MTURK_CLIENT_FACTORY")
    if factory is None:
        metadata = instance_metadata_allowed(current_app.config["PERCEPTLAB"])
        check_credentials(use_instance_metadata=metadata)  # no network call unless metadata is allowed
        factory = lambda live: make_client(live=live, use_instance_metadata=metadata)
    return MTurkService(factory(_live()), db_session(), sandbox=not _live())


def _back(slug: str, message: str, ok: bool = True):
    flash(message, "ok" if ok else "error")
    return redirect(url_for("admin_mturk.study", slug=slug))


def _run(slug: str, action):
    """Run ``action(service, study) -> message``; MTurk errors come back as the page's message."""
    from botocore.exceptions import BotoCoreError, ClientError

    from ..mturk import MTurkError

    session = db_session()
    study = study_or_404(slug)
    try:
        message = action(_service(), study)
        session.commit()
        return _back(slug, message)
    except (MTurkError, ClientError, BotoCoreError) as exc:
        session.rollback()
        return _back(slug, f"MTurk: {exc}", ok=False)


def _mode() -> str:
    return "live" if _live() else "sandbox"


def _default_url() -> str:
    """The server's public URL when this request came over https (MTurk frames only https pages)."""
    root = request.url_root.rstrip("/")
    return root if root.lower().startswith("https://") else ""


def _balance() -> tuple[str | None, str | None]:
    """(balance, None) or (None, a readable reason why it could not be fetched)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from ..mturk import MTurkError

    try:
        return _service().balance(), None
    except MTurkError as exc:
        return None, str(exc)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        return None, f"MTurk refused {exc.operation_name}: {error.get('Code')}: {error.get('Message')}"
    except BotoCoreError as exc:
        hint = (" (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
                if "credential" in str(exc).lower() else "")
        return None, f"{exc}{hint}"


def _render(study: Study, **extra):
    from ..payments import payment_plan

    session = db_session()
    hits = list(session.scalars(select(MTurkHit).where(MTurkHit.study_id == study.id, MTurkHit.sandbox == (not _live()))
                                .order_by(MTurkHit.id)))
    assignments = list(session.scalars(select(MTurkAssignment).where(MTurkAssignment.study_id == study.id)
                                       .order_by(MTurkAssignment.submit_time, MTurkAssignment.id)))
    return render_template("admin_mturk_study.html", study=study, hits=hits, assignments=assignments,
                           plan=payment_plan(session, study, settings=pay_settings()), live=_live(),
                           messages=get_flashed_messages(with_categories=True),
                           user=auth.current_user(session).username, **extra)


@bp.get("/studies/<slug>")
@auth.login_required
def study(slug: str):
    from ..mturk import DEFAULT_PER_HIT

    study = study_or_404(slug)
    balance, balance_error = _balance()
    form = {"assignments": "", "per_hit": DEFAULT_PER_HIT, "days": 7, "url": _default_url()}
    return _render(study, balance=balance, balance_error=balance_error, form=form, confirm=None)


def _launch_form(study: Study) -> dict:
    """The launch form, checked: raises ValueError with a readable message."""
    from ..mturk import DEFAULT_PER_HIT, MTurkError, MTurkService

    form = request.form
    try:
        assignments = int(form.get("assignments", ""))
        per_hit = int(form.get("per_hit") or DEFAULT_PER_HIT)
        days = float(form.get("days") or 7)
    except ValueError:
        raise ValueError("Assignments and assignments per HIT must be whole numbers, days a number.") from None
    if assignments < 1 or per_hit < 1:
        raise ValueError("Assignments and assignments per HIT must be at least 1.")
    if not 0.01 <= days <= 365:
        raise ValueError("Days must be between 0.01 and 365.")
    url = (form.get("url") or "").strip() or _default_url()
    if not url:
        raise ValueError("The public https:// URL of this server is required (MTurk shows only https pages).")
    full_url = url.rstrip("/") if "/s/" in url else f"{url.rstrip('/')}/s/{study.slug}"
    try:
        MTurkService.external_question_xml(full_url)
    except MTurkError as exc:
        raise ValueError(str(exc)) from None
    return {"assignments": assignments, "per_hit": per_hit, "days": days, "url": url, "full_url": full_url}


@bp.post("/studies/<slug>/launch")
@auth.login_required
def launch(slug: str):
    """Without ``confirm``: the cost and the marketplace, to confirm (no MTurk call). With it: post the HITs."""
    import datetime as dt
    import uuid
    from ..payments import launch_cost, pay_unit

    study = study_or_404(slug)
    try:
        form = _launch_form(study)
    except ValueError as exc:
        return _back(slug, str(exc), ok=False)
    if request.form.get("confirm") != "1":
        pay = pay_unit(study)  # a page, a session: what the HIT reward and the bonuses pay for
        reward = pay.hit_reward
        extra = pay.most - pay.required
        confirm = {**form, "reward": reward, "mode": _mode(), "launch_id": uuid.uuid4().hex[:12],
                   "cost": launch_cost(reward, form["assignments"], form["per_hit"]),
                   "worst": launch_cost(reward, form["assignments"], form["per_hit"],
                                        expected_bonus_per_assignment=extra * pay.bonus),
                   "max_pages": pay.most}
        return _render(study, balance=None, balance_error=None, form=form, confirm=confirm)
    if request.form.get("mode") != _mode():
        return _back(slug, f"The marketplace is now {_mode()}, not the one you confirmed: review the launch again.",
                     ok=False)
    launch_id = (request.form.get("launch_id") or "").strip()
    if not launch_id or len(launch_id) > 12 or not launch_id.isalnum():
        launch_id = uuid.uuid4().hex[:12]

    def action(service, study):
        hits = service.launch(study, assignments_total=form["assignments"], url=form["full_url"],
                              per_hit=form["per_hit"], lifetime=dt.timedelta(days=form["days"]), launch_id=launch_id)
        return (f"{len(hits)} HIT(s) posted on the {'LIVE' if _live() else 'sandbox'} marketplace for "
                f"{form['assignments']} assignment(s) (launch ID {launch_id}; posting the same form again "
                "finishes an interrupted launch)")
    return _run(slug, action)


@bp.post("/studies/<slug>/notify")
@auth.login_required
def notify(slug: str):
    subject = (request.form.get("subject") or "").strip()
    message = (request.form.get("message") or "").strip()
    if not subject or not message:
        return _back(slug, "Notifying workers needs a subject and a message.", ok=False)
    if len(subject) > 200 or len(message) > 4096:
        return _back(slug, "MTurk allows at most 200 characters of subject and 4096 of message.", ok=False)

    def action(service, study):
        workers = service.study_worker_ids(study)
        if not workers:
            return "No MTurk workers in this study yet: nobody was notified."
        failures = service.notify(workers, subject, message)
        text = f"{len(workers) - len(failures)} of {len(workers)} worker(s) notified"
        if failures:
            shown = "; ".join(f"{f.get('WorkerId')}: {f.get('NotifyWorkersFailureMessage')}" for f in failures[:5])
            text += f" ({len(failures)} failed: {shown}{' ...' if len(failures) > 5 else ''})"
        return text
    return _run(slug, action)


@bp.post("/studies/<slug>/reconcile")
@auth.login_required
def reconcile(slug: str):
    def action(service, study):
        counts = service.reconcile(study, qualify=True)
        return f"{counts['hits']} HIT(s), {counts['assignments']} assignment(s) ({counts['new']} new)"
    return _run(slug, action)


@bp.post("/studies/<slug>/approve")
@auth.login_required
def approve(slug: str):
    def action(service, study):
        unearned: list[str] = []
        if request.form.get("all_submitted"):
            ids, unearned = submitted_for_approval(db_session(), study)
        else:
            ids = [_own_assignment(study, request.form.get("assignment_id", ""))]
        for assignment_id in ids:
            service.approve(assignment_id)
            db_session().commit()
        left = (f"; {len(unearned)} submitted without paid work left for you to review: {', '.join(unearned)}"
                if unearned else "")
        return f"{len(ids)} assignment(s) approved{left}"
    return _run(slug, action)


@bp.post("/studies/<slug>/reject")
@auth.login_required
def reject(slug: str):
    def action(service, study):
        assignment_id = _own_assignment(study, request.form.get("assignment_id", ""))
        return f"{assignment_id}: {service.reject(assignment_id, request.form.get('feedback', ''))}"
    return _run(slug, action)


@bp.post("/studies/<slug>/bonus")
@auth.login_required
def bonus(slug: str):
    from ..payments import payment_plan

    def action(service, study):
        rows = [r for r in payment_plan(db_session(), study).unpaid_bonuses() if r.mturk_status == "Approved"]
        for row in rows:
            service.grant_bonus(row.worker_id, row.assignment_id, row.bonus, row.bonus_reason, study=study)
        return f"{len(rows)} bonus(es) paid"
    return _run(slug, action)


@bp.post("/studies/<slug>/expire")
@auth.login_required
def expire(slug: str):
    def action(service, study):
        return f"{service.expire_study(study)} HIT(s) expired"
    return _run(slug, action)


def _own_assignment(study: Study, assignment_id: str) -> str:
    """Only assignments of this study (as reconciled) can be acted on from its page."""
    found = db_session().scalar(select(MTurkAssignment.assignment_id).where(
        MTurkAssignment.study_id == study.id, MTurkAssignment.assignment_id == assignment_id))
    if found is None:
        abort(404, description=f"No MTurk assignment {assignment_id!r} in this study (reconcile first).")
    return found
