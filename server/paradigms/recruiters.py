"""Where plain-link participants come from, and how they go back: the study file's ``[entry] recruiter``.

``link`` (default)
    ``/s/<slug>?participant=ID``; the end page shows a completion code to copy into the platform.
``prolific``
    Prolific's study URL:
    ``/s/<slug>?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}``.
    ``PROLIFIC_PID`` is the participant ID; ``STUDY_ID`` and ``SESSION_ID`` are stored with the assignment
    (``Assignment.entry_params``). The end page shows ``[entry] completion_code`` (the code of the Prolific
    study, required) and then sends the participant to ``https://app.prolific.com/submissions/complete?cc=CODE``.
``redirect``
    Any other platform: the end page sends the participant to ``[entry] redirect_url`` with ``{code}`` and
    ``{participant}`` filled in (URL-quoted; the template is checked at ``study create``).

MTurk HITs work whatever the recruiter (their own submit form). A study-wide ``completion_code`` replaces the
random code of each participant on the end page (the random one stays stored as a receipt). The code is shown
only once the assignment is completed (or stopped after paid units, :func:`server.paradigms.stages.earns_code`),
so it never reaches a browser before, and never reaches a participant who was disqualified (the quiz, the
motion screening), found the study full or left unfinished: :meth:`Recruiter.code` is None for them.
Whether a participant really completed is what ``perceptlab codes check`` and the dashboard's codes page
verify (:mod:`server.codes`).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from ..i18n import gettext
from ..errors import ApiError
from ..models import Assignment
from .stages import earns_code
from .studyfile import PROLIFIC_COMPLETE_URL

PROLIFIC_PARAMS = ("STUDY_ID", "SESSION_ID")
# Prolific's participant, study and session IDs: 24 hexadecimal digits today; letters and digits, at most 64,
# are admitted (a placeholder Prolific did not fill in, {{%PROLIFIC_PID%}}, is not).
PROLIFIC_ID = re.compile(r"[A-Za-z0-9]{1,64}")
REDIRECT_DELAY_SECONDS = 5  # the end page's countdown before it sends the participant back


@dataclass(frozen=True)
class Recruiter:
    """A study's ``[entry]`` recruiter settings (validated at ``study create``: studyfile.validate_recruiter)."""
    name: str = "link"            # link | prolific | redirect
    completion_code: str = ""     # "" = each assignment's own random code
    redirect_url: str = ""        # recruiter "redirect": a template with {code} and {participant}

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Recruiter:
        """The settings stored in ``Study.config`` (studies created before recruiters existed: ``link``)."""
        return cls(config.get("recruiter") or "link", config.get("completion_code") or "",
                   config.get("redirect_url") or "")

    def participant(self, args: Mapping[str, str]) -> str | None:
        """The participant ID of a plain-link entry: ``participant=``, else Prolific's ``PROLIFIC_PID``
        (Prolific studies read ``PROLIFIC_PID`` first)."""
        names = ("PROLIFIC_PID", "participant") if self.name == "prolific" else ("participant", "PROLIFIC_PID")
        return next((args.get(name) for name in names if args.get(name)), None)

    def check_entry(self, args: Mapping[str, str]) -> dict[str, str] | None:
        """Refuse a link this recruiter cannot have made; return its parameters to store with a new assignment
        (Prolific: ``STUDY_ID``, ``SESSION_ID``), or None.

        Raises
        ------
        ApiError
            403 ``participant_required`` (a Prolific study's link without ``PROLIFIC_PID``), 400
            ``invalid_request`` (a malformed parameter: never stored). The messages are written for the worker.
        """
        if self.name != "prolific":
            return None
        if not self.participant(args):
            raise ApiError(403, "participant_required",
                           gettext("This study link needs your Prolific ID. Please open the study from Prolific "
                                   "(the link ends with ?PROLIFIC_PID=...)."))
        params = {}
        for name in PROLIFIC_PARAMS:
            value = args.get(name)
            if value:
                if not PROLIFIC_ID.fullmatch(value):
                    raise ApiError(400, "invalid_request", f"{name} is malformed (letters and digits only, at most "
                                                           "64). Please open the study from Prolific.")
                params[name] = value
        return params or None

    def platform(self, platform: str) -> str:
        """The platform a participant came from: ``mturk``, ``prolific`` (the links of a Prolific study),
        or ``link``."""
        return "prolific" if platform == "link" and self.name == "prolific" else platform

    def code(self, assignment: Assignment) -> str | None:
        """The completion code the participant is shown: the study's ``completion_code`` (plain links), else the
        assignment's own random code; None unless the assignment earned one (:func:`~.stages.earns_code`:
        completed, or stopped after paid units), whatever is stored: a disqualified, full or unfinished
        participant never has the study-wide code."""
        if assignment.completion_code is None or not earns_code(assignment.stage, assignment.pages_completed):
            return None
        if assignment.platform != "mturk" and self.completion_code:
            return self.completion_code
        return assignment.completion_code

    def redirect(self, code: str, participant: str) -> tuple[str, str] | None:
        """``(URL, name of the place)`` the end page sends the participant to, or None (recruiter ``link``)."""
        if self.name == "prolific":
            return PROLIFIC_COMPLETE_URL.format(code=quote(code, safe="")), "Prolific"
        if self.name == "redirect" and self.redirect_url:
            url = self.redirect_url.format(code=quote(code, safe=""), participant=quote(participant, safe=""))
            return url, urlsplit(url).hostname or "the study's site"
        return None


def remember_entry(assignment: Assignment, params: dict[str, str] | None) -> None:
    """Store the recruiter's parameters on the assignment; the first values stay (a reload changes nothing)."""
    if params and not assignment.entry_params:
        assignment.entry_params = params


def code_completion(assignment: Assignment) -> dict[str, Any]:
    """The ``code`` completion of a plain-link assignment that earned one: the code to show and, for
    ``prolific`` and ``redirect`` studies, ``redirect_url``, ``redirect_to`` (a name for the link) and
    ``redirect_seconds`` (the end page's countdown). Called only once the assignment has its code."""
    recruiter = Recruiter.of(assignment.study.config)
    info: dict[str, Any] = {"mode": "code", "code": recruiter.code(assignment)}
    target = recruiter.redirect(info["code"], assignment.worker.external_id)
    if target is not None:
        info.update(redirect_url=target[0], redirect_to=target[1], redirect_seconds=REDIRECT_DELAY_SECONDS)
    return info
