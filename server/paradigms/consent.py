"""The placeholders of a study's consent text: who runs the study, whom to ask, what it pays, how long it takes.

``{researcher}`` and ``{contact}`` come from the study file's ``[texts]`` table; ``{pay}`` is written from
the study's pay rules (:class:`~server.paradigms.core.PayUnit`); ``{time}`` is the time estimate, filled in
when the page is shown (:func:`server.worker_time.fill_time`); ``{medium}`` is what the study shows, "image" or
"video" (:func:`server.paradigms.media.stimulus_word`). The default consent texts use all five.

``perceptlab study create`` refuses a study whose consent uses ``{researcher}`` or ``{contact}`` without a
value (:func:`check_consent_filled`), and any ``{name}`` that is not a placeholder (a typo would reach
workers verbatim); studies made in code (the demo, tests) are not checked, and show
:data:`NOT_GIVEN` where a value is missing.
"""
from __future__ import annotations

import re
from decimal import Decimal

from ..i18n import gettext, ngettext
from .core import PayUnit
from .studyfile import StudyDefinitionError

STUDY_FILE_FIELDS = ("researcher", "contact")   # [texts] keys that fill the placeholders of their name
PLACEHOLDERS = STUDY_FILE_FIELDS + ("pay", "time", "medium")
NOT_GIVEN = "(not given)"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def used_placeholders(text: str) -> list[str]:
    """Names of the ``{name}`` placeholders in ``text``, in order of first use."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(text)))


def unfilled_fields(spec) -> list[str]:
    """The ``[texts]`` fields the spec's consent uses but leaves empty ("researcher", "contact")."""
    used = used_placeholders(spec.consent)
    return [name for name in STUDY_FILE_FIELDS if name in used and not getattr(spec, name).strip()]


def check_consent_filled(spec, where: str = "study file") -> None:
    """Raise :class:`StudyDefinitionError` naming every placeholder of the consent that has no value,
    and any unknown ``{name}``; the demo and tests skip this check."""
    unknown = [name for name in used_placeholders(spec.consent) if name not in PLACEHOLDERS]
    if unknown:
        raise StudyDefinitionError(
            f"{where}: [texts] consent has unknown placeholder(s) {', '.join('{' + n + '}' for n in unknown)} "
            f"(known: {', '.join('{' + n + '}' for n in PLACEHOLDERS)})")
    missing = unfilled_fields(spec)
    if missing:
        keys = ", ".join(f'{name} = "..."' for name in missing)
        raise StudyDefinitionError(
            f"{where}: the consent text names the {' and the '.join(missing)} but the study file leaves "
            f"{'them' if len(missing) > 1 else 'it'} empty: set [texts] {keys} (missing: {', '.join(missing)})")


def _dollars(amount: Decimal) -> str:
    return f"${amount.quantize(Decimal('0.01'))}"


def pay_phrase(pay: PayUnit) -> str:
    """The pay rules for workers, in the page's language: "$1.00 for 2 pages, and a bonus of $0.40 for each further
    page up to 10 pages in all"."""
    session = pay.name == "session"
    units = (ngettext("%(num)s session", "%(num)s sessions", pay.required) if session
             else ngettext("%(num)s page", "%(num)s pages", pay.required))
    text = gettext("%(amount)s for %(units)s", amount=_dollars(pay.hit_reward), units=units)
    if pay.bonus > 0 and pay.most > pay.required:
        further = (gettext("and a bonus of %(amount)s for each further session up to %(most)s sessions in all",
                           amount=_dollars(pay.bonus), most=pay.most) if session
                   else gettext("and a bonus of %(amount)s for each further page up to %(most)s pages in all",
                                amount=_dollars(pay.bonus), most=pay.most))
        text = f"{text}, {further}"
    return text


def fill_consent(text: str, spec, pay: PayUnit, medium: str = "image") -> str:
    """``text`` with ``{researcher}``, ``{contact}``, ``{pay}`` and ``{medium}`` filled in; ``{time}`` and other
    braces stay as written (:func:`server.worker_time.fill_time` fills the time)."""
    values = {name: getattr(spec, name).strip() or NOT_GIVEN for name in STUDY_FILE_FIELDS}
    values["pay"] = pay_phrase(pay)
    values["medium"] = medium
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text
