"""Why a worker was turned away, stopped, refused or failed a check: one registry of reason codes.

Every ending that is not a completion has a code here, declared once: the short snake_case code that the
database (``worker.status_reason_code``, ``assignment.reason_code``, ``entry_refusal.code``), ``workers.csv``
(``reason_code``) and the dashboard's counts carry, the stage it leads to, and the message the worker reads,
marked for translation with :func:`~server.i18n._l` (``%(name)s`` placeholders filled from the arguments
the code was given). Adding a code is one line in :data:`REASONS`; ``docs/reasons.md`` lists them all
(``tests/server/test_reasons.py`` keeps it complete).

The stage is what the code leads to: ``disqualified`` (for good: the quiz, a check before consent, the
display), ``stopped`` (by a quality rule after some work), ``full`` (no work left for the worker) or None:
refused at entry, before any participant exists (those are counted per study and code in
``entry_refusal``, never stored per person).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask_babel import LazyString

from .i18n import _l
from .paradigms.stages import Stage

# A stored code's longest spelling (the columns' width).
MAX_CODE_LENGTH = 40


@dataclass(frozen=True)
class Reason:
    """One reason code: ``code``, the ``stage`` it leads to (None: refused at entry) and the worker's
    ``message`` (lazy gettext; ``%(name)s`` placeholders), with ``what`` for the experimenter's docs."""

    code: str
    stage: Stage | None
    message: LazyString
    what: str

    @property
    def msgid(self) -> str:
        """The message as written (English), with its placeholders."""
        return self.message._args[0]

    def english(self, args: dict[str, Any] | None = None) -> str:
        """The message in English with ``args`` filled in: what the worker's record keeps beside the code."""
        return _fill(self.msgid, args)

    def text(self, args: dict[str, Any] | None = None) -> str:
        """The message in the request's language (the worker's) with ``args`` filled in."""
        return _fill(str(self.message), args)


class _Args(dict):
    """A message's arguments; a placeholder the caller did not give reads "?" instead of failing the page."""

    def __missing__(self, key: str) -> str:
        return "?"


def _fill(message: str, args: dict[str, Any] | None) -> str:
    return message % _Args(args or {}) if "%(" in message else message


_D, _S, _F = Stage.DISQUALIFIED, Stage.STOPPED, Stage.FULL

REASONS: dict[str, Reason] = {r.code: r for r in (
    # -- during the work (the worker has a record)
    Reason("study_full", _F, _l("This study has no work left for you right now: every remaining task is taken by other "
                                "participants. Nothing was recorded for payment."), "no work left before the units the HIT requires"),
    Reason("quiz_failed", _D, _l("You answered %(correct)s of %(total)s quiz questions as expected; %(needed)s are "
                                 "needed. You cannot take part in this study."), "paired comparison: the quiz scored below [quality] accuracy_threshold"),
    Reason("training_failed", _D, _l("You answered %(correct)s of %(total)s training questions as expected; %(needed)s "
                                     "are needed. You cannot take part in this study."),
           "ratings: the training scored below [quality] accuracy_threshold"),
    Reason("gold_accuracy", _S, _l("Too many check questions were answered wrongly (%(wrong)s of %(total)s). Thank you "
                                   "for your time; you cannot continue with this study."), "hidden check accuracy fell below the threshold"),
    Reason("straight_lining", _S, _l("Every answer on %(pages)s pages was the same. Thank you for your time; you cannot "
                                     "continue with this study."), "ratings: [quality] straight_line_pages pages answered alike"),
    Reason("motion_screening", _D, _l("Your answers in the motion test did not follow the motion closely enough (r = %(r)s; "
                                      "%(needed)s is needed). Thank you for your time; you cannot continue with this study."),
           "motion: the RDK screening's r below screening_min_r"),
    Reason("refresh_too_slow", _D, _l("Your display refreshes %(hz)s times a second; this study needs at least %(needed)s. "
                                      "You cannot take part with this display."), "motion calibration: refresh rate too low"),
    Reason("refresh_irregular", _D, _l("Your display's refresh is irregular (%(late)s of the frames were late or early), so "
                                       "the clips cannot be shown with correct timing. Closing other programs and tabs may "
                                       "help in a new attempt."), "motion calibration: too many irregular frames"),
    Reason("slow_connection", _D, _l("Your internet connection is too slow for this study's videos: it loaded a test file at "
                                     "%(measured)s Mbit/s, and the videos need at least %(needed)s Mbit/s to load in time."),
           "video entry check: measured connection below [media] min_mbps"),
    Reason("connection_timeout", _D, _l("Your internet connection is too slow for this study's videos: it loaded a test file "
                                        "at less than %(needed)s Mbit/s, and the videos need at least %(needed)s Mbit/s to "
                                        "load in time."), "video entry check: the test file did not arrive in time"),
    Reason("cannot_decode", _D, _l("Your browser cannot play this study's videos: it cannot decode %(codecs)s. Try another "
                                   "browser, such as a current Chrome, Edge or Safari."), "video entry check: a codec the browser cannot decode"),
    Reason("display_changed", _S, _l("Your window or display changed during the task more often than this study allows. "
                                     "Thank you for your time; you cannot continue with this study."),
           "mid-trial display monitor: zoom, window or screen changed past the limit"),
    # -- the [viewing] checks (server/paradigms/viewing.py), before consent or after the instructions
    Reason("viewing_brightness", _D, _l("You did not count the faint shapes right, so your screen's brightness or contrast "
                                        "is too low to see the differences this study asks about. You cannot take part "
                                        "with this screen."), "[viewing] brightness: shapes near the background miscounted"),
    Reason("viewing_colour", _D, _l("You did not read the numbers in the coloured dots right. This study needs normal "
                                    "colour vision (or a screen that shows colours faithfully), so you cannot take part."),
           "[viewing] colour: generated pseudo-isochromatic plates misread"),
    Reason("viewing_acuity", _D, _l("You did not see the gaps of the small rings right. This study needs you to see fine "
                                    "detail at %(cm)s cm from the screen, so you cannot take part."),
           "[viewing] acuity: Landolt C gaps misread at the threshold"),
    Reason("viewing_distance", _D, _l("You sit about %(measured)s cm from the screen; this study needs about %(needed)s cm. "
                                      "You cannot take part from there."),
           "[viewing] distance: the blind-spot distance outside the tolerance"),
    Reason("simulated_gave_up", _S, _l("This simulated participant gave up: %(why)s"), "perceptlab simulate: a bot that gave up"),
    # -- the entry page's device check, in the browser (counted per study and code as it reports them: the worker
    # may fix a window, so nothing is stored on their record; device_check.js deviceProblems)
    Reason("device_phone", None, _l("This study cannot be done on a phone."), "device check: a phone, not admitted"),
    Reason("device_tablet", None, _l("This study cannot be done on a phone or tablet."),
           "device check: a tablet, not admitted"),
    Reason("screen_too_small", None, _l("This screen is too small for this study."),
           "device check: the screen cannot hold the window the study needs"),
    Reason("window_too_small", None, _l("Your browser window is too small for this study."),
           "device check: the window is smaller than the study needs (the worker may enlarge it)"),
    # -- at entry, before any participant exists (counted per study and code)
    Reason("study_stopped", None, _l("This study has all the participants it needs and takes no new ones. Thank you for "
                                     "your interest."), "entry refused: the study was stopped ([stopping] or by hand)"),
    Reason("study_paused", None, _l("This study is paused. Please try again later."), "entry refused: the study is paused"),
    Reason("participant_required", None, _l("This study link needs a participant ID. Please open the study from the "
                                            "recruiter's page."), "entry refused: a plain link without a participant ID"),
    Reason("bad_link", None, _l("This study link is not valid. Please open the study again from the recruiter's page."),
           "entry refused: signature or access key wrong"),
    Reason("unknown_hit", None, _l("This HIT does not belong to this study. Please open the task from its HIT on "
                                   "Mechanical Turk."), "entry refused: an MTurk HIT the study did not post"),
    Reason("bad_entry", None, _l("This study link is malformed. Please open the study again from the recruiter's page."),
           "entry refused: malformed parameters (400)"),
    Reason("rate_limited", None, _l("Too many entries came from your network in a short time. Please wait a minute and "
                                    "try again."), "entry refused: the per-address entry limit"),
)}


def viewing_reason(check: str, message: LazyString, what: str) -> Reason:
    """Register the code ``viewing_<check>`` (a failed viewing-condition check: disqualified before the
    work) for a check a plugin adds, and return it (the built-in checks' codes are in :data:`REASONS`)."""
    return register(Reason(f"viewing_{check}", Stage.DISQUALIFIED, message, what))


def register(reason: Reason) -> Reason:
    """Add ``reason`` to :data:`REASONS` (a code registered twice with other words is a programming error)."""
    known = REASONS.setdefault(reason.code, reason)
    if known != reason:
        raise ValueError(f"reason code {reason.code!r} is registered twice")
    if len(reason.code) > MAX_CODE_LENGTH:
        raise ValueError(f"reason code {reason.code!r} is longer than {MAX_CODE_LENGTH}")
    return known


def reason(code: str) -> Reason:
    """The registered reason ``code`` (KeyError: a code nobody registered, a programming error)."""
    return REASONS[code]


def reason_text(code: str | None, args: dict[str, Any] | None, fallback: str | None = None) -> str | None:
    """What the worker reads for ``code`` in their language; ``fallback`` (the stored English text) for a
    record without a known code (made before codes existed)."""
    known = REASONS.get(code) if code else None
    return known.text(args) if known is not None else fallback


def entry_code(error_code: str) -> str | None:
    """The reason code under which an entry refusal with the API error code ``error_code`` is counted
    (``invalid_request`` -> ``bad_entry``), or None for one that is not a turn-away."""
    if error_code == "invalid_request":
        return "bad_entry"
    found = REASONS.get(error_code)
    return found.code if found is not None and found.stage is None else None


def markdown_table() -> str:
    """The table of every registered code (docs/reasons.md holds it; its test keeps the two equal)."""
    lines = ["| code | leads to | when | the worker reads (English) |", "|---|---|---|---|"]
    for code, known in REASONS.items():
        stage = known.stage or "entry refused (counted, no participant)"
        message = known.msgid.replace("|", "\\|")
        lines.append(f"| `{code}` | {stage} | {known.what} | {message} |")
    return "\n".join(lines) + "\n"
