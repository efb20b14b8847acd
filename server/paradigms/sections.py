"""The study-file sections that paradigms working in pages of images or clips share, declared once as mixins
(as :mod:`server.paradigms.params` declares ``[study]``, ``[entry]``, ``[texts]``, ``[stopping]``, ``[mturk]``):

- :class:`PagesParams`, ``[pages]``: how many pages a worker does and what each pays (the count of trials on
  a page is the paradigm's own key: ``pairs_per_page``, ``ratings_per_page``);
- :class:`QualityParams`, ``[quality]``: the quiz, hidden known-answer trials and how long a page is held;
- :class:`DisplayParams`, ``[display]``: the display policy and the smallest window
  (:mod:`server.paradigms.display`);
- :class:`ViewingParams`, ``[viewing]``: the viewing-condition checks at entry (:mod:`server.paradigms.viewing`),
  which every paradigm's spec inherits, motion's too.

A spec inherits them (paired comparison and ratings do) and keeps a default of its own with
:func:`~server.paradigms.params.redeclare` (``quiz_size``: 5 gold pairs, 4 rating trials), never with a copy
of the section. Each mixin names its section as ``SHARED_SECTION``, so that the template shows it after the
paradigm's own sections (:func:`~server.paradigms.params.sections`); its rules between keys hold in every
spec that inherits it (``validate``, :func:`~server.paradigms.params.check_spec`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .display import POLICIES
from .params import Fail, param


@dataclass(frozen=True, kw_only=True)
class PagesParams:
    """``[pages]``: pages per worker and the pay per page (server/wages.py checks it against the wage floor)."""
    SHARED_SECTION: ClassVar[str] = "pages"
    min_pages: int = param(1, section="pages", low=1, doc="pages a worker must complete before submitting")
    max_pages: int = param(10, section="pages", low=1,
                           doc="cap on pages (and so on trials) per worker; at least min_pages")
    reward_per_page: str = param("1.50", section="pages", money=True,
                                 doc="the HIT: 1 page + consent, instructions, quiz")
    bonus_per_page: str = param("1.00", section="pages", money=True, doc="paid for every page after min_pages")

    def validate(self, fail: Fail) -> None:
        """At most as many pages as at least."""
        if self.max_pages < self.min_pages:
            fail(f"pages.max_pages ({self.max_pages}) is below pages.min_pages ({self.min_pages})")


@dataclass(frozen=True, kw_only=True)
class QualityParams:
    """``[quality]``: the quiz, the hidden known-answer trials and their threshold, and how long pages are held."""
    SHARED_SECTION: ClassVar[str] = "quality"
    quiz_size: int = param(5, section="quality", low=0,
                           doc="quiz trials with a known answer; failing the quiz disqualifies for good")
    gold_rate: float = param(0.1, section="quality", low=0, below=1,
                             doc="share of each page's trials that are hidden known-answer trials (at least one "
                                 "real trial must remain on a page)")
    accuracy_threshold: float = param(0.7, section="quality", above=0, high=1,
                                      doc="share of known-answer trials (quiz, hidden) that must be answered right")
    gold_min_answered: int = param(3, section="quality", low=0,
                                   doc="hidden known-answer trials answered before the threshold is applied")
    assignment_timeout_minutes: int = param(60, section="quality", low=1,
                                            doc="a page only polled (never answered) is held at most this long")
    reservation_minutes: int = param(
        5, section="quality", low=1,
        doc="an open page holds its trials' items this long after the worker's last answer or page load; then "
            "its unanswered items are offered to other workers too")


@dataclass(frozen=True, kw_only=True)
class DisplayParams:
    """``[display]``: how images and clips are scaled, and the smallest window (server/paradigms/display.py)."""
    SHARED_SECTION: ClassVar[str] = "display"
    policy: str = param(
        "fit", section="display", choices=POLICIES,
        doc='"fit": scaled to the window, never above the prepared display size (scale 1) nor below '
            'min_image_scale; "pixel_exact": one image pixel on one device pixel (devicePixelRatio applied), '
            "zoom regions too (1:1), nothing ever rescaled")
    min_image_scale: float = param(
        0.5, section="display", above=0, high=1,
        doc="fit: smaller than this, the trial is hidden and the worker asked for a larger window (1 = the "
            "display size)")
    min_window_width: int = param(1000, section="display", low=1,
                                  doc="smallest window inside (CSS pixels) whatever the images need: keeps phones "
                                      "out; 1366x768 and 1280x720 laptop screens give about 1366x657 and 1280x600")
    min_window_height: int = param(600, section="display", low=1, doc="see min_window_width")


# The [viewing] checks a study may run (server/paradigms/viewing.py), in the order they run, and when.
VIEWING_CHECKS = ("brightness", "colour", "distance", "acuity")
VIEWING_WHEN = ("before_consent", "after_instructions")


@dataclass(frozen=True, kw_only=True)
class ViewingParams:
    """``[viewing]``: the viewing-condition checks at entry, shared by every paradigm (server/paradigms/viewing.py
    draws, shows and scores them; docs/viewing.md gives each one's source). No checks by default."""
    SHARED_SECTION: ClassVar[str] = "viewing"
    SECTION_DOCS: ClassVar[dict[str, str]] = {
        "viewing": "Checks of the worker's screen and eyes at entry (docs/viewing.md). A worker who fails one is "
                   "told why and turned away; the results are columns of workers.csv."}
    checks: tuple[str, ...] = param(
        (), section="viewing", example=(),
        doc='which checks run, in this order: "brightness" (count shapes a few grey levels from a dark and a bright '
            'patch), "colour" (digits on generated pseudo-isochromatic plates), "distance" (the viewing distance '
            'from the blind spot, after a credit-card match), "acuity" (the gap of Landolt Cs sized from the card); '
            "empty = none")
    when: str = param("before_consent", section="viewing", choices=VIEWING_WHEN,
                      doc='"before_consent": the first page a worker sees; "after_instructions": between the '
                          "instructions and the task")
    distance_cm: float = param(60.0, section="viewing", low=30, high=150,
                               doc="the one viewing distance the worker is asked to keep (cm): acuity is sized "
                                   "for it, the distance check measures it")
    distance_tolerance: float = param(0.25, section="viewing", above=0, below=1,
                                      doc="distance: the measured distance may differ from distance_cm by this "
                                          "fraction of it")
    brightness_delta: int = param(5, section="viewing", low=1, high=60,
                                  doc="brightness: grey levels (of 255) between the shapes and their patch, darker "
                                      "patch (level 20) and brighter one (level 235)")
    brightness_errors: int = param(0, section="viewing", low=0, high=1,
                                   doc="brightness: patches (of 2) whose count may be wrong")
    colour_plates: int = param(2, section="viewing", low=1, high=8, doc="colour: plates shown")
    colour_errors: int = param(0, section="viewing", low=0,
                               doc="colour: plates that may be read wrong (fewer than colour_plates)")
    acuity_logmar: float = param(0.3, section="viewing", low=-0.3, high=1.0,
                                 doc="acuity: the Cs' gap in logMAR at distance_cm (0 = 1 arcminute, 20/20; "
                                     "0.3 = 2 arcminutes, 20/40); never drawn below 2 device pixels (then the "
                                     "logMAR tested is larger, and exported)")
    acuity_trials: int = param(5, section="viewing", low=1, high=20, doc="acuity: Cs shown")
    acuity_errors: int = param(1, section="viewing", low=0,
                               doc="acuity: gaps that may be named wrong (fewer than acuity_trials; with 4 "
                                   "directions, 4 of 5 right by guessing is 1.6 %)")

    def needs_card(self) -> bool:
        """Whether a check starts with the card drawn at its real size (distance, acuity): no phone can show it
        (the one device rule, display.WindowRequirement.devices)."""
        return bool({"distance", "acuity"} & set(self.checks))

    def validate(self, fail: Fail) -> None:
        """Known checks, each once; fewer allowed errors than items."""
        unknown = [c for c in self.checks if c not in VIEWING_CHECKS]
        if unknown or len(set(self.checks)) != len(self.checks):
            fail(f"viewing.checks must name distinct checks among {', '.join(VIEWING_CHECKS)}, got "
                 f"{list(self.checks)!r}")
        if self.colour_errors >= self.colour_plates:
            fail("viewing.colour_errors must be below viewing.colour_plates")
        if self.acuity_errors >= self.acuity_trials:
            fail("viewing.acuity_errors must be below viewing.acuity_trials")
