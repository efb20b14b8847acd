"""The ``[viewing]`` checks at entry, for every paradigm (the section: :class:`~server.paradigms.sections.ViewingParams`;
what each check measures, its pass rule and its source: docs/viewing.md).

What a worker must answer is drawn here, from a seed keyed with the server's secret, the study and the worker
(:func:`check_rng`): the shape counts of the brightness patches, the plates' digits, the Cs' gap directions.
The browser receives images only (:func:`check_image`, drawn by :mod:`stimuli.viewing` as PNGs of one size
per shape), posts what the worker saw, and this module scores it (:func:`record_answers`): a script can
neither read an answer from what it receives nor claim a pass. A failed check turns the worker away
(:func:`~server.paradigms.core.stop`) with a message saying why and the reason code ``viewing_<check>``
(:data:`REASON_CODES`); every result is a :class:`~server.models.ViewingResult` row, exported as workers.csv
columns (:func:`worker_columns`).

The card (px per mm) and, with the distance check, the blind spot are measured by the browser's shared
calibration modules and posted raw (:func:`record_screen`); the figures are :mod:`server.paradigms.screen`'s.

The checks run at one point (``when``): before consent they stand in for the consent page until passed; after
the instructions they stand between the instructions' button and the task. :func:`pending` says whether an
action (``consent``, ``instructions_done``) must wait for them; the worker pages and the API both ask it.
"""
from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from stimuli.viewing import (GAP_DIRECTIONS, PLATE_DIGITS, brightness_patch, colour_plate, landolt_c, stored_png)

from .. import validation as check
from ..errors import ApiError, invalid
from ..i18n import _
from ..models import Assignment, Study, ViewingResult, Worker
from .core import stop
from .screen import BLIND_SPOT_CM, blind_spot_distance, card_px_per_mm
from .sections import VIEWING_CHECKS, ViewingParams
from .stages import Stage

# The reason code of each failed check (server/reasons.py's registry is to name them; the code is stored in
# ViewingResult.check and passed to stop() with the message below).
REASON_CODES = {name: f"viewing_{name}" for name in VIEWING_CHECKS}
# The row holding the card's measure (px per mm, devicePixelRatio): no check of its own, needed by two.
SCREEN = "screen"
# The stage each `when` holds the worker at, and the action that waits for the checks there.
GATES = {"before_consent": (Stage.CONSENT, "consent"), "after_instructions": (Stage.INSTRUCTIONS, "instructions_done")}
BRIGHTNESS_LEVELS = (20, 235)       # the dark and the bright patch's grey levels (the shapes: +delta, -delta)
BRIGHTNESS_MAX_SHAPES = 6           # each patch holds 1 to 6 shapes
PATCH_PX = 240                      # side of a brightness patch and of a plate, in image pixels
MIN_GAP_DEVICE_PX = 2.0             # a C's gap is never drawn below this: a smaller one is not a C on a screen
MIN_CANVAS_PX = 24                  # the C's image: at least this, else 8 gaps (margin around its 5)
_STREAMS = {"brightness": 1, "colour": 2, "acuity": 3}


def checks_of(spec) -> tuple[str, ...]:
    """The study's checks in the order they run (:data:`~server.paradigms.sections.VIEWING_CHECKS`); none for a
    spec without the section."""
    chosen = getattr(spec, "checks", ()) if isinstance(spec, ViewingParams) else ()
    return tuple(c for c in VIEWING_CHECKS if c in chosen)


def needs_card(spec) -> bool:
    """Whether the checks need the card's px per mm (acuity sizes its Cs by it; distance turns sweeps into cm)."""
    return bool({"acuity", "distance"} & set(checks_of(spec)))


# ---------------------------------------------------------------- what the worker must answer

def check_rng(secret: str, study: Study, worker_id: int, check_name: str, index: int = -1) -> np.random.Generator:
    """The generator of one check's answers (``index`` -1) or of one image's layout: seeded with an HMAC of the
    server's ``secret`` over the study's seed and ID, the worker's ID and the check, so that the answers are
    the same on every request and nobody without the secret can compute them."""
    message = f"perceptlab/viewing/{study.id}/{study.seed}/{worker_id}/{check_name}/{index}".encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return np.random.default_rng([_STREAMS[check_name], int.from_bytes(digest[:16], "big")])


def brightness_counts(rng: np.random.Generator) -> list[int]:
    """Shapes in the dark and in the bright patch (each 1 to :data:`BRIGHTNESS_MAX_SHAPES`)."""
    return [int(n) for n in rng.integers(1, BRIGHTNESS_MAX_SHAPES + 1, size=2)]


def colour_digits(rng: np.random.Generator, plates: int) -> list[tuple[int, str]]:
    """Each plate's digit (no digit twice in a row) and confusion line (protan and deutan in turn, the first
    drawn)."""
    first_line = int(rng.integers(2))
    digits: list[tuple[int, str]] = []
    for k in range(plates):
        choices = [d for d in PLATE_DIGITS if not digits or d != digits[-1][0]]
        digits.append((int(rng.choice(choices)), ("protan", "deutan")[(first_line + k) % 2]))
    return digits


def gap_directions(rng: np.random.Generator, trials: int) -> list[str]:
    """Each C's gap direction, uniform over :data:`~stimuli.viewing.GAP_DIRECTIONS`."""
    return [GAP_DIRECTIONS[int(i)] for i in rng.integers(len(GAP_DIRECTIONS), size=trials)]


def expected(secret: str, study: Study, worker_id: int, check_name: str, spec) -> list[Any]:
    """The answers the worker should give to ``check_name`` (never sent to the browser)."""
    rng = check_rng(secret, study, worker_id, check_name)
    if check_name == "brightness":
        return brightness_counts(rng)
    if check_name == "colour":
        return [digit for digit, _ in colour_digits(rng, spec.colour_plates)]
    return gap_directions(rng, spec.acuity_trials)


def entry_fields(spec, token_base: str, study: Study, worker_id: int, simulated: bool) -> dict[str, Any]:
    """What the JSON API's entry adds for a study with checks (none without): ``viewing``, the checks' page
    configuration (:func:`page_config`, no answers) and, for a simulated participant (signed with the study's
    pilot signature, so its client holds the server's secret), ``draw``: the identifiers the answers are drawn
    from (:func:`check_rng`), which give nothing without the secret. ``perceptlab simulate`` answers with
    them (:func:`drawn_answers`)."""
    if not checks_of(spec):
        return {}
    fields: dict[str, Any] = {"config": page_config(spec, token_base)}
    if simulated:
        fields["draw"] = {"study_id": study.id, "study_seed": study.seed, "worker_id": worker_id}
    return {"viewing": fields}


@dataclass(frozen=True)
class _Drawn:
    """The study and spec fields :func:`expected` reads, rebuilt from an entry's ``viewing`` (a client's)."""
    id: int
    seed: int
    colour_plates: int
    acuity_trials: int


def drawn_answers(secret: str, viewing_fields: dict[str, Any], check_name: str) -> list[Any]:
    """The answers the server expects to ``check_name``, computed by a client holding the server's ``secret``
    from the entry's ``viewing`` fields (:func:`entry_fields`, with ``draw``): the same :func:`expected` the
    server scores with, so a simulated careful worker answers exactly what a careful person would."""
    draw, config = viewing_fields["draw"], viewing_fields["config"]
    drawn = _Drawn(int(draw["study_id"]), int(draw["study_seed"]), int(config["colour_plates"]),
                   int(config["acuity_trials"]))
    return expected(secret, drawn, int(draw["worker_id"]), check_name, drawn)  # type: ignore[arg-type]


# ---------------------------------------------------------------- acuity's size

@dataclass(frozen=True)
class AcuitySize:
    """A Landolt C's gap on this screen: in device pixels, and the logMAR that gap is at the stated distance."""
    gap_device_px: float
    logmar: float
    canvas_px: int


def acuity_size(logmar: float, distance_cm: float, px_per_mm: float, dpr: float) -> AcuitySize:
    """The gap of ``logmar`` at ``distance_cm`` on a screen of ``px_per_mm`` CSS px per mm and ``dpr`` device px
    per CSS px: MAR = 10^logMAR arcminutes, gap = distance x tan(MAR). Never below :data:`MIN_GAP_DEVICE_PX`;
    then the logMAR returned is the one actually tested (larger)."""
    device_px_per_mm = px_per_mm * dpr
    gap_mm = distance_cm * 10 * math.tan(math.radians(10 ** logmar / 60))
    gap = gap_mm * device_px_per_mm
    if gap < MIN_GAP_DEVICE_PX:
        gap = MIN_GAP_DEVICE_PX
        logmar = math.log10(math.degrees(math.atan(gap / device_px_per_mm / (distance_cm * 10))) * 60)
    return AcuitySize(gap, logmar, max(MIN_CANVAS_PX, math.ceil(8 * gap)))


# ---------------------------------------------------------------- images

def check_image(session: Session, secret: str, assignment: Assignment, spec, check_name: str, index: int) -> bytes:
    """The PNG of image ``index`` of ``check_name`` for this worker: brightness 0 (dark patch) and 1 (bright),
    plate 0 .. colour_plates - 1, C 0 .. acuity_trials - 1 (sized from the worker's card: :func:`record_screen`
    first). Images of one check and worker all have one size in bytes."""
    counts = {"brightness": 2, "colour": getattr(spec, "colour_plates", 0), "acuity": getattr(spec, "acuity_trials", 0)}
    if check_name not in checks_of(spec) or check_name not in counts or not 0 <= index < counts[check_name]:
        raise ApiError(404, "not_found", "no such image")
    study, worker_id = assignment.study, assignment.worker_id
    layout = check_rng(secret, study, worker_id, check_name, index)
    if check_name == "brightness":
        count = brightness_counts(check_rng(secret, study, worker_id, "brightness"))[index]
        background = BRIGHTNESS_LEVELS[index]
        delta = spec.brightness_delta if index == 0 else -spec.brightness_delta
        return stored_png(brightness_patch(count, background=background, delta=delta, size=PATCH_PX, rng=layout))
    if check_name == "colour":
        digit, line = colour_digits(check_rng(secret, study, worker_id, "colour"), spec.colour_plates)[index]
        return stored_png(colour_plate(digit, line, size=PATCH_PX, rng=layout))
    screen = _result(session, worker_id, SCREEN)
    if screen is None:
        raise ApiError(409, "wrong_stage", "the card is measured before the acuity check")
    size = acuity_size(spec.acuity_logmar, spec.distance_cm, screen.measures["px_per_mm"], screen.measures["dpr"])
    direction = gap_directions(check_rng(secret, study, worker_id, "acuity"), spec.acuity_trials)[index]
    return stored_png(landolt_c(size.gap_device_px, direction, canvas_px=size.canvas_px))


# ---------------------------------------------------------------- answers

def _result(session: Session, worker_id: int, check_name: str) -> ViewingResult | None:
    return session.scalar(select(ViewingResult).where(ViewingResult.worker_id == worker_id,
                                                      ViewingResult.check == check_name))


def _at_checks(assignment: Assignment, spec) -> None:
    """Answers are taken only while the worker stands at the checks' stage."""
    stage, _action = GATES[spec.when]
    if assignment.stage != stage or assignment.worker.status != "active":
        raise ApiError(409, "wrong_stage", f"the viewing checks are answered at stage {stage}")


def parse_answers(check_name: str, body: Any, spec) -> list[Any]:
    """The worker's answers to ``check_name`` from a body ``{"answers": [...]}``: brightness 2 counts (0-9),
    colour one digit (0-9) or null ("no digit") per plate, acuity one direction per C. 400 otherwise."""
    if not isinstance(body, dict) or set(body) != {"answers"} or not isinstance(body["answers"], list):
        raise invalid('the body must be {"answers": [...]}')
    answers = body["answers"]
    n = {"brightness": 2, "colour": spec.colour_plates, "acuity": spec.acuity_trials}[check_name]
    if len(answers) != n:
        raise invalid(f"answers must hold {n} entries")
    for a in answers:
        if check_name == "acuity":
            ok = a in GAP_DIRECTIONS
        else:
            ok = (a is None and check_name == "colour") or (type(a) is int and 0 <= a <= 9)
        if not ok:
            raise invalid(f"not an answer to the {check_name} check: {a!r}")
    return answers


def allowed_errors(check_name: str, spec) -> int:
    """How many items of ``check_name`` may be wrong for a pass."""
    return {"brightness": spec.brightness_errors, "colour": spec.colour_errors, "acuity": spec.acuity_errors,
            "distance": 0}[check_name]


def failure_message(check_name: str, measures: dict[str, Any] | None = None, spec=None) -> str:
    """What a worker who failed ``check_name`` reads (in their language)."""
    if check_name == "brightness":
        return _("You did not count the faint shapes right, so your screen's brightness or contrast is too low "
                 "to see the differences this study asks about. You cannot take part with this screen.")
    if check_name == "colour":
        return _("You did not read the numbers in the coloured dots right. This study needs normal colour vision "
                 "(or a screen that shows colours faithfully), so you cannot take part.")
    # The figures are formatted before the call: Babel skips an f-string inside a marked call.
    needed_cm = format(spec.distance_cm, "g")
    if check_name == "acuity":
        return _("You did not see the gaps of the small rings right. This study needs you to see fine detail at "
                 "%(cm)s cm from the screen, so you cannot take part.", cm=needed_cm)
    measured_cm = format(measures["distance_cm"], ".0f")
    return _("You sit about %(measured)s cm from the screen; this study needs about %(needed)s cm. You cannot "
             "take part from there.", measured=measured_cm, needed=needed_cm)


def _store(session: Session, assignment: Assignment, spec, check_name: str, answers: Any, errors: int, items: int,
           measures: dict[str, Any] | None) -> dict[str, Any]:
    """Store one check's result; turn the worker away when it failed. The answer the browser gets."""
    passed = errors <= allowed_errors(check_name, spec)
    session.add(ViewingResult(study_id=assignment.study_id, worker_id=assignment.worker_id, check=check_name,
                              answers={"answers": answers}, errors=errors, items=items, passed=passed,
                              measures=measures))
    session.flush()
    if not passed:
        message = failure_message(check_name, measures, spec)
        # Reason code REASON_CODES[check_name] (viewing_<check>): the ViewingResult row keeps it for now.
        stop(assignment, Stage.DISQUALIFIED, message)
        return {"passed": False, "reason": REASON_CODES[check_name], "message": message}
    return {"passed": True, "pending": list(pending_checks(session, spec, assignment.worker_id))}


def record_answers(session: Session, secret: str, assignment: Assignment, spec, check_name: str,
                   body: Any) -> dict[str, Any]:
    """Score and store the worker's answers to ``check_name`` (brightness, colour, acuity): the errors are
    answers that differ from :func:`expected`; a pass has at most the study's allowed errors. Answered once:
    a second body is a 409. ``{"passed": bool, ...}`` (a failure: its reason code and message)."""
    if check_name not in checks_of(spec) or check_name == "distance":
        raise ApiError(404, "not_found", "this study has no such check")
    _at_checks(assignment, spec)
    answers = parse_answers(check_name, body, spec)
    if _result(session, assignment.worker_id, check_name) is not None:
        raise ApiError(409, "answered", "this check is answered already")
    measures = None
    if check_name == "acuity":
        screen = _result(session, assignment.worker_id, SCREEN)
        if screen is None:
            raise ApiError(409, "wrong_stage", "the card is measured before the acuity check")
        size = acuity_size(spec.acuity_logmar, spec.distance_cm, screen.measures["px_per_mm"], screen.measures["dpr"])
        measures = {"logmar": round(size.logmar, 3), "gap_device_px": round(size.gap_device_px, 3)}
    truth = expected(secret, assignment.study, assignment.worker_id, check_name, spec)
    errors = sum(a != b for a, b in zip(answers, truth))
    return _store(session, assignment, spec, check_name, answers, errors, len(truth), measures)


def record_screen(session: Session, assignment: Assignment, spec, body: Any) -> dict[str, Any]:
    """Store the card's measure (the body of calibration.js's ``calibrationBody``: ``card_width_px``,
    ``card_height_px``, ``device_pixel_ratio`` and, with the distance check, ``blind_spot_px``; other fields
    are ignored) and score the distance check. The answer follows calibration.js's contract:
    ``{"accepted": bool, "reason": message}``."""
    if not needs_card(spec):
        raise ApiError(404, "not_found", "this study's checks do not measure the screen")
    _at_checks(assignment, spec)
    if not isinstance(body, dict):
        raise invalid("the body must be a JSON object")
    if _result(session, assignment.worker_id, SCREEN) is not None:
        raise ApiError(409, "answered", "the screen is measured already")
    width = check.number(body.get("card_width_px"), "card_width_px", *check.SIZE_PX)
    height = check.number(body.get("card_height_px"), "card_height_px", *check.SIZE_PX)
    dpr = check.number(body.get("device_pixel_ratio"), "device_pixel_ratio", *check.DEVICE_PIXEL_RATIO)
    px_per_mm = card_px_per_mm(width, height)
    measures: dict[str, Any] = {"px_per_mm": round(px_per_mm, 4), "dpr": dpr}
    distance = None
    if "distance" in checks_of(spec):
        sweeps = body.get("blind_spot_px")
        if not isinstance(sweeps, list) or not 1 <= len(sweeps) <= 20:
            raise invalid("blind_spot_px must be a list of 1 to 20 square-to-dot distances (px)")
        sweeps = [check.number(x, f"blind_spot_px[{k}]", *check.SIZE_PX) for k, x in enumerate(sweeps)]
        distance = blind_spot_distance(sweeps, px_per_mm)
        low, high = BLIND_SPOT_CM
        if not low <= distance <= high:
            raise invalid(f"blind_spot_px: the sweeps give {distance:.0f} cm; {low:g} to {high:g} cm is plausible")
        measures["distance_cm"] = round(distance, 2)
        measures["sweeps_px"] = sweeps
    session.add(ViewingResult(study_id=assignment.study_id, worker_id=assignment.worker_id, check=SCREEN,
                              answers={"card_px": [width, height]}, errors=0, items=0, passed=True,
                              measures=measures))
    if distance is None:
        return {"accepted": True}
    off = abs(distance - spec.distance_cm) / spec.distance_cm
    outcome = _store(session, assignment, spec, "distance", round(distance, 2), int(off > spec.distance_tolerance), 1,
                     {"distance_cm": round(distance, 2)})
    return {"accepted": outcome["passed"], **({"reason": outcome["message"]} if not outcome["passed"] else {})}


# ---------------------------------------------------------------- where the checks stand

def pending_checks(session: Session, spec, worker_id: int) -> tuple[str, ...]:
    """The study's checks this worker has not passed yet, in order."""
    chosen = checks_of(spec)
    if not chosen:
        return ()
    passed = set(session.scalars(select(ViewingResult.check).where(ViewingResult.worker_id == worker_id,
                                                                   ViewingResult.passed)))
    return tuple(c for c in chosen if c not in passed)


def pending(session: Session, spec, worker_id: int, action: str) -> bool:
    """Whether ``action`` (``consent``, ``instructions_done``) must wait for the worker's viewing checks."""
    chosen = checks_of(spec)
    return bool(chosen) and GATES[spec.when][1] == action and bool(pending_checks(session, spec, worker_id))


def page_config(spec, token_base: str) -> dict[str, Any]:
    """What the checks' page needs to run them (no answers): the checks, their counts and the distance."""
    return {"checks": list(checks_of(spec)), "base": token_base, "when": spec.when,
            "distance_cm": spec.distance_cm, "colour_plates": spec.colour_plates,
            "acuity_trials": spec.acuity_trials, "gap_directions": list(GAP_DIRECTIONS),
            "max_shapes": BRIGHTNESS_MAX_SHAPES}


# ---------------------------------------------------------------- export

WORKER_COLUMNS = ("viewing_passed", "viewing_failed", "viewing_brightness", "viewing_brightness_errors",
                  "viewing_colour", "viewing_colour_errors", "viewing_distance", "viewing_distance_cm",
                  "viewing_acuity", "viewing_acuity_errors", "viewing_acuity_logmar", "viewing_px_per_mm",
                  "viewing_dpr")


def worker_columns(session: Session, study: Study, spec) -> dict[int, dict[str, Any]]:
    """workers.csv's :data:`WORKER_COLUMNS` by worker (database ID), for a study with checks (blank where a
    worker did not get that far): each check 1 (passed) or 0, its errors, the distance measured (cm), the
    logMAR tested, the card's px per mm; ``viewing_passed`` 1 when every check passed, 0 when one failed
    (``viewing_failed`` names it)."""
    chosen = checks_of(spec)
    rows: dict[int, dict[str, Any]] = {}
    for r in session.scalars(select(ViewingResult).where(ViewingResult.study_id == study.id)):
        out = rows.setdefault(r.worker_id, dict.fromkeys(WORKER_COLUMNS, ""))
        measures = r.measures or {}
        if r.check == SCREEN:
            out["viewing_px_per_mm"], out["viewing_dpr"] = measures.get("px_per_mm", ""), measures.get("dpr", "")
            continue
        out[f"viewing_{r.check}"] = int(r.passed)
        if r.check == "distance":
            out["viewing_distance_cm"] = measures.get("distance_cm", "")
        else:
            out[f"viewing_{r.check}_errors"] = r.errors
        if r.check == "acuity":
            out["viewing_acuity_logmar"] = measures.get("logmar", "")
        if not r.passed:
            out["viewing_passed"], out["viewing_failed"] = 0, r.check
    for out in rows.values():
        if out["viewing_passed"] == "" and all(out[f"viewing_{c}"] == 1 for c in chosen):
            out["viewing_passed"] = 1
    return rows


# ---------------------------------------------------------------- the experimenter's study page

@dataclass(frozen=True)
class CheckCount:
    """One check's results on the study page: workers who passed it and who failed it."""
    name: str
    passed: int
    failed: int


@dataclass(frozen=True)
class ViewingSummary:
    """The ``[viewing]`` panel of the study page (``_admin_viewing.html``): per check the workers who passed and
    failed it, the median distance measured and the median logMAR the Cs tested (None when nobody got there).
    Pilot and simulated participants are left out, as from every dashboard figure."""
    checks: tuple[CheckCount, ...]
    workers: int
    passed_all: int
    median_distance_cm: float | None
    median_acuity_logmar: float | None
    when: str
    distance_cm: float


def dashboard_summary(session: Session, study: Study, spec) -> ViewingSummary | None:
    """:class:`ViewingSummary` of a study with checks (None without)."""
    chosen = checks_of(spec)
    if not chosen:
        return None
    rows = session.scalars(select(ViewingResult).join(Worker, Worker.id == ViewingResult.worker_id)
                           .where(ViewingResult.study_id == study.id, ~Worker.pilot))  # pilots count in no figure
    passed: dict[str, int] = dict.fromkeys(chosen, 0)
    failed: dict[str, int] = dict.fromkeys(chosen, 0)
    by_worker: dict[int, set[str]] = {}
    distances: list[float] = []
    logmars: list[float] = []
    for r in rows:
        if r.check == SCREEN or r.check not in passed:
            continue
        (passed if r.passed else failed)[r.check] += 1
        if r.passed:
            by_worker.setdefault(r.worker_id, set()).add(r.check)
        else:
            by_worker.setdefault(r.worker_id, set())
        measures = r.measures or {}
        if r.check == "distance" and measures.get("distance_cm") is not None:
            distances.append(float(measures["distance_cm"]))
        if r.check == "acuity" and measures.get("logmar") is not None:
            logmars.append(float(measures["logmar"]))
    median = lambda values: float(np.median(values)) if values else None  # noqa: E731
    return ViewingSummary(tuple(CheckCount(c, passed[c], failed[c]) for c in chosen), len(by_worker),
                          sum(set(chosen) <= done for done in by_worker.values()), median(distances), median(logmars),
                          spec.when, spec.distance_cm)
