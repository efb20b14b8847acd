"""Worker pages: entry from a HIT or a plain link, consent, instructions, the trial app, the end."""
from __future__ import annotations

import hmac
import math

from flask import Blueprint, abort, current_app, jsonify, redirect, render_template, request, url_for
from sqlalchemy import select

from .. import payments
from ..db import db_session
from ..errors import ApiError, invalid
from ..i18n import choose_locale, force_locale, gettext, use_locale
from ..models import Assignment, Study
from ..paradigms import paradigm_for, viewing
from ..paradigms.core import (completion_info, reason_message, lock_assignment, spec_for, stop,
                              study_paradigm)
from ..paradigms.display_monitor import monitor_config
from ..paradigms.media import cannot_decode_reason, media_of, slow_connection_reason, stimulus_word
from ..paradigms.entry import PREVIEW_ASSIGNMENT
from ..paradigms.questionnaire import (MAX_FORM_BYTES, MAX_ITEMS, MAX_TEXT, pending_part, store_answers,
                                       study_parts, validate_answers)
from ..paradigms.recruiters import Recruiter, remember_entry
from ..paradigms.consent import fill_consent
from ..paradigms.stages import Stage
from ..pilot import PILOT_PLATFORM, pilot_entry
from ..tokens import BadToken, assignment_token, read_token
from ..worker_time import PaySettings, TimeEstimate, cached_time_estimate, fill_time
from ..refusals import add_entry_refusal, counted_entry_refusals
from .entry_limit import admission, request_fingerprint
from .stimuli import stimulus_urls

bp = Blueprint("worker", __name__)


def _study(slug: str) -> Study:
    study = db_session().scalar(select(Study).where(Study.slug == slug))
    if study is None:
        abort(404)
    return study


@bp.get("/s/<slug>")
def entry(slug: str):
    """MTurk's ExternalQuestion URL (with assignmentId, hitId, workerId, turkSubmitTo) or a plain link."""
    study = _study(slug)
    args = request.args
    session = db_session()
    paradigm = paradigm_for(study)
    spec = spec_for(session, study.id)
    locale = choose_locale(spec.languages, spec.default_language, query=args.get("lang"),
                           recruiter=args.get("locale"), accept_language=request.accept_languages)
    use_locale(locale)
    if args.get("assignmentId") == PREVIEW_ASSIGNMENT or ("hitId" in args and "assignmentId" not in args):
        return render_template("preview.html", study=study, spec=spec_for(session, study.id),
                               time_estimate=_time_estimate(session, study),
                               requirement=paradigm.window_requirement(session, study),
                               stimulus_url=stimulus_urls(study), paradigm_pages=paradigm.worker_pages,
                               **paradigm.examples(session, study))
    pilot = pilot_entry(current_app.config["SECRET_KEY"], study.slug, args.get("pilot"), args.get("simulated"))
    try:
        with counted_entry_refusals(session, study.id):  # a refused entry is counted by its reason code
            assignment, _ = _enter(session, study, paradigm, spec, pilot, args)
            if assignment.worker.locale is None or choose_locale(spec.languages, "", query=args.get("lang")):
                # a returning worker keeps theirs unless they ask for another
                assignment.worker.locale = locale
            session.commit()
    except BaseException:
        session.rollback()
        raise
    token = assignment_token(current_app.config["SECRET_KEY"], assignment)
    return redirect(url_for("worker.stage_page", token=token))


def _enter(session, study: Study, paradigm, spec, pilot, args) -> tuple[Assignment, bool]:
    """Enter ``study`` from the entry URL's ``args`` (MTurk, the experimenter's preview or a plain link)."""
    if "assignmentId" in args:
        # The same [entry] rules as plain links: access key, signature, a HIT of the study
        # (server/paradigms/entry.py, check_mturk_entry).
        return paradigm.enter(session, study, platform="mturk", worker_id=args.get("workerId"),
                              assignment_id=args.get("assignmentId"), hit_id=args.get("hitId"),
                              turk_submit_to=args.get("turkSubmitTo"), signature=args.get("sig"),
                              access_key=args.get("key"), pilot=pilot,
                              admit_new=admission(study, spec, "mturk", signed=pilot is not None),
                              fingerprint=request_fingerprint(study))
    if pilot is not None:  # the experimenter's preview: a new pilot participant (server/pilot.py)
        return paradigm.enter(session, study, platform=PILOT_PLATFORM, worker_id=None, pilot=pilot,
                              admit_new=admission(study, spec, PILOT_PLATFORM, signed=True),
                              fingerprint=request_fingerprint(study))
    # The study's [entry] rules decide which links admit (server/paradigms/entry.py), its recruiter
    # which parameters name the participant (server/paradigms/recruiters.py).
    recruiter = Recruiter.of(study.config)
    params = recruiter.check_entry(args)
    assignment, created = paradigm.enter(session, study, platform="link", worker_id=recruiter.participant(args),
                                         signature=args.get("sig"), access_key=args.get("key"),
                                         admit_new=admission(study, spec, "link"), fingerprint=request_fingerprint(study))
    remember_entry(assignment, params)
    return assignment, created


def assignment_of_token(token: str) -> Assignment:
    try:
        claims = read_token(current_app.config["SECRET_KEY"], token)
    except BadToken:
        raise ApiError(403, "bad_token", gettext("This link is not valid. Please open the task again from its HIT."))
    assignment = db_session().get(Assignment, claims.assignment_id)
    if assignment is None or not hmac.compare_digest(assignment.token_nonce, claims.nonce):
        raise ApiError(403, "bad_token", gettext("This link is no longer valid."))
    return assignment


@bp.get("/w/<token>/")
def stage_page(token: str):
    assignment = assignment_of_token(token)
    study = assignment.study
    session = db_session()
    paradigm = paradigm_for(study)
    spec = spec_for(session, study.id)
    locale = page_locale(session, assignment, spec)
    common = {"study": study, "spec": spec, "token": token, "assignment": assignment,
              "stimulus_url": stimulus_urls(study), "paradigm_pages": paradigm.worker_pages}
    stage = assignment.stage
    if stage in (Stage.CONSENT, Stage.INSTRUCTIONS):  # told before consent if this device cannot take part
        common["requirement"] = paradigm.window_requirement(session, study)
    if stage == Stage.CONSENT and viewing.pending(session, spec, assignment.worker_id, "consent"):
        return redirect(url_for("viewing.page", token=token))  # [viewing] checks before consent
    if stage == Stage.CONSENT:
        estimate = _time_estimate(session, study)
        # {researcher}, {contact}, {pay}, {medium}, {time}: in the language of the text they go into (the
        # default language's text where the study file has no translation)
        text_language = spec.text_language("consent", locale)
        with force_locale(text_language):
            consent = fill_consent(spec.text_in("consent", locale), spec, paradigm.pay_unit(spec),
                                   stimulus_word(media_of(study.config)))
            consent = fill_time(consent, estimate)
        return render_template("consent.html", paragraphs=_paragraphs(consent), text_language=text_language,
                               time_estimate=estimate, **common)
    part = pending_part(session, assignment, spec)
    if part is not None:  # before the instructions, or after the work and before the completion page
        return _questionnaire_page(assignment, spec, part, common)
    if stage == Stage.INSTRUCTIONS:
        # the study file's translation, else the paradigm's (e.g. no word of crops a study does not have)
        text = spec.translations.get(locale, {}).get("instructions") or paradigm.instructions(session, study, spec)
        return render_template("instructions.html", paragraphs=_paragraphs(text),
                               text_language=spec.text_language("instructions", locale),
                               **paradigm.examples(session, study), **common)
    if stage in paradigm.app_stages:  # the paradigm's browser app (pc/trials.html, motion/motion.html)
        # The display monitor (display_monitor.js) pauses trials whose window falls below this requirement.
        monitor = monitor_config(paradigm.window_requirement(session, study), spec)
        return render_template(paradigm.app_template, api_base=request.script_root + "/api/v1",
                               assignment_id=str(assignment.id), study_name=study.name, display_monitor=monitor,
                               **common)
    if stage == Stage.COMPLETED:
        return render_template("done.html", completion=completion_info(assignment),
                               auto_redirect=True, earnings=payments.assignment_earnings(study, assignment), **common)
    if stage == Stage.FULL:  # no work left before the required units: no code, no submit form (no_work_left)
        return render_template("full.html", message=reason_message(assignment), **common)
    # disqualified or stopped: why (the worker's status reason, or why the display was refused)
    return render_template("stopped.html", message=paradigm.stop_message(session, assignment),
                           completion=completion_info(assignment), **common)


def page_locale(session, assignment: Assignment, spec) -> str:
    """The language of this worker's pages (server/i18n.py), now in use: the one chosen at entry; a ``?lang=``
    among the study's languages switches it for good; a worker who entered before languages were stored
    gets the entry rules' choice (kept from then on)."""
    worker = assignment.worker
    switched = choose_locale(spec.languages, "", query=request.args.get("lang"))  # "" unless ?lang= names one
    if switched or worker.locale is None:
        chosen = switched or choose_locale(spec.languages, spec.default_language,
                                           accept_language=request.accept_languages)
        if chosen != worker.locale:
            worker.locale = chosen
            session.commit()
    return use_worker_locale(worker, spec)


def use_worker_locale(worker, spec) -> str:
    """Put the worker's stored language in use (a request that changes no choice: an answer, a refusal), or the
    study's default when it is not one of the study's languages; return it."""
    locale = worker.locale if worker.locale in spec.languages else spec.default_language
    use_locale(locale)
    return locale


def _time_estimate(session, study: Study) -> TimeEstimate:
    """How long a unit of pay takes (server/worker_time.py): the paradigm's pace, then the measured median."""
    return cached_time_estimate(session, study, PaySettings.from_config(current_app.config["SERVER"]))


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def _questionnaire_page(assignment: Assignment, spec, part: str, common: dict, answers: dict | None = None,
                        errors: dict | None = None, status: int = 200):
    return render_template("questionnaire.html", part=part, items=study_parts(spec)[part], answers=answers or {},
                           errors=errors or {}, **common), status


@bp.post("/w/<token>/questionnaire")
def questionnaire(token: str):
    """The answers of the part of the study's questionnaire the worker owes now (server/paradigms/questionnaire.py):
    stored and on to the next page (303), or 422 with each field's problem (the page again, or JSON
    ``{"error": "invalid_answers", "message", "fields": {item: problem}}`` for a client asking for JSON); nothing
    is stored then. 413 for a body above MAX_FORM_BYTES. A part already answered, or none owed: 303, nothing changes."""
    if (request.content_length or 0) > MAX_FORM_BYTES:
        raise ApiError(413, "too_large", f"the answers are limited to {MAX_FORM_BYTES} bytes")
    request.max_content_length = MAX_FORM_BYTES  # a body without a length (chunked) is cut off there too
    session = db_session()
    try:
        assignment = lock_assignment(session, assignment_of_token(token).id)
        spec = spec_for(session, assignment.study_id)
        use_worker_locale(assignment.worker, spec)  # the problems' language
        part = pending_part(session, assignment, spec)
        if part is not None:
            answers, errors = validate_answers(study_parts(spec)[part], request.form)
            if errors:
                session.rollback()
                if request.accept_mimetypes.best == "application/json":
                    return jsonify({"error": "invalid_answers", "message": gettext("Please check the marked answers."),
                                    "fields": errors}), 422
                common = {"study": assignment.study, "spec": spec, "token": token, "assignment": assignment,
                          "stimulus_url": stimulus_urls(assignment.study),
                          "paradigm_pages": paradigm_for(assignment.study).worker_pages}
                return _questionnaire_page(assignment, spec, part, common, answers=_given(request.form),
                                           errors=errors, status=422)
            store_answers(session, assignment, part, answers)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return redirect(url_for("worker.stage_page", token=token), code=303)


def _given(form) -> dict[str, list[str]]:
    """What the worker had entered, to show again beside the problems (capped as the form is)."""
    return {key: [v[:MAX_TEXT] for v in form.getlist(key)] for key in list(form)[:MAX_ITEMS * 2]}


def _advance(token: str, action: str):
    session = db_session()
    try:
        assignment = assignment_of_token(token)
        paradigm, spec = study_paradigm(session, assignment.study_id)
        if action == "instructions_done" and pending_part(session, assignment, spec) == "pre":
            return redirect(url_for("worker.stage_page", token=token), code=303)  # the questionnaire first
        paradigm.perform_action(session, lock_assignment(session, assignment.id), action)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return redirect(url_for("worker.stage_page", token=token), code=303)


@bp.post("/w/<token>/consent")
def consent(token: str):
    assignment = assignment_of_token(token)
    if viewing.pending(db_session(), spec_for(db_session(), assignment.study_id), assignment.worker_id, "consent"):
        return redirect(url_for("viewing.page", token=token), code=303)
    if request.form.get("agree") != "yes":
        return redirect(url_for("worker.stage_page", token=token), code=303)
    return _advance(token, "consent")


@bp.post("/w/<token>/instructions")
def instructions(token: str):
    assignment = assignment_of_token(token)
    if viewing.pending(db_session(), spec_for(db_session(), assignment.study_id), assignment.worker_id,
                       "instructions_done"):
        return redirect(url_for("viewing.page", token=token), code=303)  # [viewing] checks after the instructions
    return _advance(token, "instructions_done")


@bp.post("/w/<token>/unable")
def unable(token: str):
    """The consent page's entry checks found that this worker cannot take part (device_check.js): their
    connection is too slow for the study's clips (media.js ``connectionProblems``), or their browser cannot
    decode them (media.js ``decodingProblems``). Turned away before consent, with the reason on their record,
    which is also what the page tells them (the answer's ``message``).

    Body ``{"reason": "slow_connection", "measured_mbps": number or null}`` (null: the test file did not
    arrive in the time the minimum allows) or ``{"reason": "cannot_decode", "types": [MIME type, ...]}``
    (distinct types, each one the study's page asked about: WindowRequirement.decode). 400 for any other
    body; 409 after consent, for a study without that check, or for a speed that meets the minimum."""
    refusal = _unable_refusal(request.get_json(silent=True))
    session = db_session()
    try:
        assignment = lock_assignment(session, assignment_of_token(token).id)
        use_worker_locale(assignment.worker, spec_for(session, assignment.study_id))  # the reason's language
        requirement = paradigm_for(assignment.study).window_requirement(session, assignment.study)
        code, args = refusal(requirement, assignment.study)
        if assignment.stage != Stage.CONSENT:
            raise ApiError(409, "wrong_stage", "the entry checks turn workers away only before consent")
        stop(assignment, code, **args)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return jsonify({"stage": str(Stage.DISQUALIFIED), "message": reason_message(assignment), "code": code})


def _unable_refusal(body):
    """The check that ``/unable``'s ``body`` reports, as ``refusal(requirement, study) -> (code, args)`` (a
    reason code of server/reasons.py and its message's arguments).

    Raises
    ------
    ApiError
        400 for a body of neither shape; the refusal itself raises 409 where the study has no such check,
        and 400 for decode types its page never asked about.
    """
    kind = body.get("reason") if isinstance(body, dict) else None
    if kind == "slow_connection" and not set(body) - {"reason", "measured_mbps"}:
        measured = body.get("measured_mbps")
        if measured is None or (not isinstance(measured, bool) and isinstance(measured, (int, float))
                                and math.isfinite(measured) and measured >= 0):
            return lambda requirement, study: _slow_connection(requirement.min_mbps, measured)
    types = body.get("types") if isinstance(body, dict) else None
    if kind == "cannot_decode" and set(body) == {"reason", "types"} and isinstance(types, list) and types \
            and all(isinstance(t, str) for t in types) and len(set(types)) == len(types):
        return lambda requirement, study: _cannot_decode(requirement.decode, media_of(study.config), types)
    raise invalid('the body must be {"reason": "slow_connection", "measured_mbps": a non-negative number or null} '
                  'or {"reason": "cannot_decode", "types": [distinct MIME types the page checked]}')


def _slow_connection(needed: float, measured: float | None) -> tuple[str, dict]:
    if needed <= 0:
        raise ApiError(409, "no_connection_check", "this study does not check the connection")
    if measured is not None and measured >= needed:
        raise ApiError(409, "fast_enough", f"{measured:g} Mbit/s meets the study's {needed:g} Mbit/s")
    return slow_connection_reason(measured, needed)


def _cannot_decode(checked: tuple[str, ...], media: dict, types: list[str]) -> tuple[str, dict]:
    if not checked:
        raise ApiError(409, "no_decoding_check", "this study does not check decoding")
    if set(types) - set(checked):
        raise invalid(f"the study's page checks only {list(checked)}")
    return cannot_decode_reason(media, types)


# The device check's problems (device_check.js deviceProblems) the consent page reports for counting.
DEVICE_REFUSALS = {"phone": "device_phone", "tablet": "device_tablet", "screen_too_small": "screen_too_small",
                   "window_too_small": "window_too_small"}


@bp.post("/w/<token>/refused")
def refused(token: str):
    """The consent page's device check found a problem (body ``{"problem": "phone" | "tablet" | "screen_too_small"
    | "window_too_small"}``): counted for the study under its reason code (server/refusals.py), nothing stored on
    the worker's record (a window can still be enlarged). 204; 400 for another body; 409 after consent."""
    body = request.get_json(silent=True)
    code = DEVICE_REFUSALS.get(body.get("problem")) if isinstance(body, dict) and set(body) == {"problem"} \
        and isinstance(body.get("problem"), str) else None
    if code is None:
        raise invalid(f'the body must be {{"problem": one of {sorted(DEVICE_REFUSALS)}}}')
    session = db_session()
    try:
        assignment = assignment_of_token(token)
        if assignment.stage != Stage.CONSENT:
            raise ApiError(409, "wrong_stage", "the device check reports only before consent")
        add_entry_refusal(session, assignment.study_id, code)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return "", 204


@bp.post("/w/<token>/retry")
def retry(token: str):
    """A worker told the study is full tries again: reopened when work is free again, else the same page."""
    session = db_session()
    try:
        assignment = assignment_of_token(token)
        paradigm, _ = study_paradigm(session, assignment.study_id)
        paradigm.reopen_if_room(session, lock_assignment(session, assignment.id))
        session.commit()
    except BaseException:
        session.rollback()
        raise
    return redirect(url_for("worker.stage_page", token=token), code=303)
