"""What a worker's screen must offer: the smallest inner browser window a study needs, and the device.

What every paradigm shares; each paradigm computes its own window from its own trial page's layout and
declares it through ``Paradigm.window_requirement`` (paired comparison: ``paired/window.py``; ratings:
``rating/study.py``; motion: ``motion/study.py``). One set of numbers serves the server and the browser
(``experiment_ui/static/js/display.js`` is the twin of this module):

* ``fit``: the images scale with the window, never above 1 (their display size) nor below the study's
  ``min_image_scale``; the window needed is the one at that smallest scale.
* ``pixel_exact``: one image pixel on one device pixel (CSS size = pixels / devicePixelRatio), zoom
  regions too (nothing is ever resampled); the window needed depends on the device's ratio, so the server
  states it for ratio 1 (the largest) and the browser applies its own ratio to the same numbers.

A page that scales images lays them out as a :class:`Layout`: content that scales (the images side by
side at scale 1) inside chrome that does not (bars, labels, padding). :func:`layout_window` is the window
a layout needs at a scale factor (:func:`policy_factor`).

Every paradigm declares what its pages need before consent (:class:`WindowRequirement`,
``Paradigm.window_requirement``): the entry pages (HIT preview, consent, instructions) state it and
check the window and the device in the browser (``experiment_ui/static/js/device_check.js``), which
applies the device's own ratio to the requirement's layouts.

The device rule is here too, once: which device classes (desktop, tablet, phone) a study admits follows from
its window (:meth:`WindowRequirement.devices`, which Prolific's device list, ``study show`` and the entry pages
use), and what class a device is follows from its input and its screen (:func:`device_class`; the entry pages
get the user agent's verdict and the threshold from the server, :meth:`WindowRequirement.to_page`).
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .media import PROBE_BYTES

POLICIES = ("fit", "pixel_exact")
# The inner window of the common laptops: a 1366x768 screen leaves about 1366x657 inside the browser.
LAPTOP_WINDOW = (1366, 657)

# The device classes a study may admit, from the most to the least capable.
DEVICE_CLASSES = ("desktop", "tablet", "phone")
# The inner window (CSS px) each small device class offers at the least, so that a study whose window fits it
# works on every device of the class: a 10" tablet in landscape (1024 x 768 less the browser's bars) and a
# small phone in portrait (360 x 640 less its bars).
TABLET_WINDOW = (1024, 690)
PHONE_WINDOW = (360, 560)
# A touch device whose screen's shorter side (CSS px) is below this is a phone, from it up a tablet:
# Android's own split (its sw600dp qualifier), with every phone (360-430) below and every tablet (7" 600,
# iPad mini 744, iPad 810+) above.
PHONE_SHORT_SIDE = 600
# Phones and tablets name themselves in their user agent (Android tablets omit "Mobile" but say "Android";
# iPadOS's Safari poses as a Mac and is caught by its touch-only input instead, :func:`device_class`).
MOBILE_USER_AGENT = re.compile(r"Mobi|Android|iPhone|iPod|iPad|Windows Phone", re.IGNORECASE)


def mobile_user_agent(headers: Mapping[str, str]) -> bool:
    """Whether a request's headers say it comes from a phone or a tablet: the ``Sec-CH-UA-Mobile`` client
    hint, or the ``User-Agent`` (:data:`MOBILE_USER_AGENT`)."""
    return headers.get("Sec-CH-UA-Mobile") == "?1" or bool(MOBILE_USER_AGENT.search(headers.get("User-Agent") or ""))


def device_class(mobile_ua: bool, touch_only: bool, screen: Sequence[int]) -> str:
    """The class of a device (one of :data:`DEVICE_CLASSES`): a desktop unless its user agent says mobile or
    it has a touch screen and no fine pointer; then a phone when its screen's shorter side is below
    :data:`PHONE_SHORT_SIDE`, else a tablet. device_check.js ``deviceClass`` applies the same rule to the
    numbers :meth:`WindowRequirement.to_page` gives it."""
    if not (mobile_ua or touch_only):
        return "desktop"
    return "phone" if min(screen) < PHONE_SHORT_SIDE else "tablet"


@dataclass(frozen=True)
class Layout:
    """What a trial page shows, in CSS px at scale 1 and devicePixelRatio 1: ``content`` scales with the
    policy's factor (the images side by side), ``chrome`` around it does not."""

    content: tuple[int, int]
    chrome: tuple[int, int]

    def to_page(self) -> list[int]:
        """``[content width, content height, chrome width, chrome height]`` (display.js ``layoutWindow``)."""
        return [*self.content, *self.chrome]


def layout_window(layout: Layout, factor: float, floor: Sequence[int] = (0, 0)) -> tuple[int, int]:
    """The smallest inner window (CSS px) that shows ``layout``'s content at ``factor`` of its size.

    Parameters
    ----------
    layout : Layout
        What the page shows.
    factor : float
        ``min_image_scale`` under ``fit``; ``1 / devicePixelRatio`` under ``pixel_exact`` (:func:`policy_factor`).
    floor : (width, height)
        The study's smallest window whatever its images (``min_window_width``, ``min_window_height``).

    Returns
    -------
    (int, int)
        Width and height; display.js's ``layoutWindow`` computes the same from the same numbers.
    """
    # Rounded to 1e-6 before the ceiling: 3 * 512 * 0.5 must give 768, not 769 from a binary fraction.
    width = math.ceil(round(layout.content[0] * factor, 6)) + layout.chrome[0]
    height = math.ceil(round(layout.content[1] * factor, 6)) + layout.chrome[1]
    return max(int(floor[0]), width), max(int(floor[1]), height)


def policy_factor(policy: str, min_image_scale: float, dpr: float = 1.0) -> float:
    """The scale the window must allow: ``min_image_scale`` (fit) or ``1 / dpr`` (pixel_exact)."""
    return 1.0 / dpr if policy == "pixel_exact" else min_image_scale


@dataclass(frozen=True)
class WindowRequirement:
    """What a study's worker pages need of the window and the device, before consent.

    ``min_window`` is in CSS px at devicePixelRatio 1. Under ``pixel_exact`` a device with a higher
    ratio needs less: ``layouts`` (one per geometry of what the trials show) let the entry page compute its
    own need with the twin of :func:`layout_window`.
    """

    min_window: tuple[int, int]
    policy: str = "fit"
    needs_mouse: bool = False          # a touch-only device cannot take part (motion: mouse movements)
    # A [viewing] check draws a credit card at its real size (distance, acuity: sections.ViewingParams.needs_card);
    # 85.6 mm is wider than a phone's screen held upright, so no phone can take part.
    needs_card: bool = False
    layouts: tuple[Layout, ...] = ()   # per geometry, for the browser's own ratio
    min_image_scale: float = 1.0
    floor: tuple[int, int] = (0, 0)
    # The sets (scenes) that alone need more than a laptop's window, with their need: what to change.
    too_large: tuple[tuple[str, tuple[int, int]], ...] = ()
    # Video studies: the MIME types (with codecs) the browser must decode, checked before consent
    # (server/paradigms/media.py decode_types; media.js decodingProblems).
    decode: tuple[str, ...] = ()
    # Video studies: the connection speed (Mbit/s) measured before consent must reach (media.needed_mbps;
    # media.js measureConnection, on the consent page); 0: no connection check.
    min_mbps: float = 0.0

    def fits(self, window: Sequence[int] = LAPTOP_WINDOW) -> bool:
        """Whether a window of this size (CSS px, ratio 1) is enough."""
        return self.min_window[0] <= window[0] and self.min_window[1] <= window[1]

    def devices(self) -> tuple[str, ...]:
        """The device classes the study admits (the one device rule): desktop always; a tablet or a phone when
        the study needs no mouse and its window fits the class's least window (:data:`TABLET_WINDOW`,
        :data:`PHONE_WINDOW`); no phone when a check needs a card drawn at its real size. Prolific's device
        list, ``study show`` and the entry pages' check use it."""
        if self.needs_mouse:
            return ("desktop",)
        small = (("tablet", TABLET_WINDOW),) + (() if self.needs_card else (("phone", PHONE_WINDOW),))
        return ("desktop", *(name for name, window in small if self.fits(window)))

    def describe(self) -> str:
        """"1212 x 571 CSS px (fit, images at 0.5 of their size or more)" for the CLI."""
        w, h = self.min_window
        if self.policy == "pixel_exact":
            how = "pixel_exact: one image pixel per device pixel; at devicePixelRatio 1, less on sharper screens"
        else:
            how = f"fit: images at {self.min_image_scale:g} of their display size or more"
        return f"{w} x {h} CSS px ({how})"

    def to_page(self, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The JSON the entry pages' device check reads (device_check.js): with the request's ``headers``,
        the device rule's data too (the admitted classes, whether the user agent is mobile, the phone
        threshold), so that the browser applies the server's rule rather than a copy of it."""
        rule = {} if headers is None else {"mobile_ua": mobile_user_agent(headers),
                                           "phone_short_side": PHONE_SHORT_SIDE}
        return {**rule, "devices": list(self.devices()), "min_window": list(self.min_window), "policy": self.policy,
                "needs_mouse": self.needs_mouse,
                "layouts": [layout.to_page() for layout in self.layouts],
                "min_image_scale": self.min_image_scale, "floor": list(self.floor), "decode": list(self.decode),
                "min_mbps": self.min_mbps, "probe_bytes": PROBE_BYTES}
