"""The rating scales: ACR, DCR and CCR as ITU-T P.910 and P.808 word them, and the CCR normalisation.

* **ACR** (absolute category rating): one image; 5 Excellent, 4 Good, 3 Fair, 2 Poor, 1 Bad.
* **DCR** (degradation category rating): the reference, then the test; the 5-point impairment scale
  5 Imperceptible, 4 Perceptible but not annoying, 3 Slightly annoying, 2 Annoying, 1 Very annoying.
* **CCR** (comparison category rating): two images, of which the server alone knows which is the
  reference (drawn per trial); -3 Much worse ... 3 Much better, answering how the SECOND image
  compares with the FIRST. Stored normalised: positive means the processed (test) image is better
  than the reference (:func:`normalise`).

With ``[rating] slider = true`` the same scale is continuous: any number within ``[min, max]`` of its
values, labels at the ticks.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...i18n import gettext

METHODS = ("acr", "dcr", "ccr")


def N_(text: str) -> str:
    """Mark ``text`` for the catalogs (server/i18n_catalogs.py's keyword): translated where it is shown."""
    return text


@dataclass(frozen=True)
class Scale:
    """A rating scale as the State sends it: ``values`` in the order shown, one label each."""

    method: str
    values: tuple[int, ...]
    labels: tuple[str, ...]
    questions: dict[str, str]   # "image" or "video" -> the default question

    @property
    def low(self) -> int:
        return min(self.values)

    @property
    def high(self) -> int:
        return max(self.values)

    def as_state(self, slider: bool, question: str = "", stimulus: str = "image") -> dict:
        """The State's ``scale`` object (a study's own ``question`` replaces the default one, which names the
        ``stimulus``: "image" or "video", :func:`server.paradigms.media.stimulus_word`)."""
        return {"method": self.method, "slider": slider, "values": list(self.values),
                "labels": [gettext(label) for label in self.labels],
                "question": question or gettext(self.questions[stimulus])}


SCALES: dict[str, Scale] = {
    "acr": Scale("acr", (5, 4, 3, 2, 1), (N_("Excellent"), N_("Good"), N_("Fair"), N_("Poor"), N_("Bad")),
                 {"image": N_("How would you rate the quality of this image?"),
                  "video": N_("How would you rate the quality of this video?")}),
    "dcr": Scale("dcr", (5, 4, 3, 2, 1),
                 (N_("Imperceptible"), N_("Perceptible but not annoying"), N_("Slightly annoying"), N_("Annoying"),
                  N_("Very annoying")),
                 {"image": N_("How does the second image compare with the reference?"),
                  "video": N_("How does the second video compare with the reference?")}),
    "ccr": Scale("ccr", (-3, -2, -1, 0, 1, 2, 3),
                 (N_("Much worse"), N_("Worse"), N_("Slightly worse"), N_("About the same"), N_("Slightly better"),
                  N_("Better"), N_("Much better")),
                 {"image": N_("How does the second image compare with the first?"),
                  "video": N_("How does the second video compare with the first?")}),
}


def scale_of(method: str) -> Scale:
    """The :class:`Scale` of ``method`` (``acr``, ``dcr`` or ``ccr``)."""
    return SCALES[method]


def valid_rating(method: str, slider: bool, value) -> bool:
    """Whether ``value`` (a parsed JSON number) is an answer on the study's scale: one of its values, or
    with the slider any finite number within its range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    scale = SCALES[method]
    if slider:
        return value == value and scale.low <= value <= scale.high  # value == value: not NaN
    if isinstance(value, float) and not value.is_integer():
        return False
    return int(value) in scale.values


def normalise(method: str, raw: float, reference_first: bool) -> float:
    """The stored rating of an answer ``raw`` on the scale shown.

    CCR asks how the second image compares with the first; when the reference was the second, the
    answer is about the reference against the test, and its sign is turned so that positive always
    means "the test is better than the reference". ACR and DCR answers are stored as given.
    """
    if method == "ccr" and not reference_first:
        return -raw
    return raw
