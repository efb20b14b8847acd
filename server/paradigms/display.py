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
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .media import PROBE_BYTES

POLICIES = ("fit", "pixel_exact")
# The inner window of the common laptops: a 1366x768 screen leaves about 1366x657 inside the browser.
LAPTOP_WINDOW = (1366, 657)


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

    def describe(self) -> str:
        """"1212 x 571 CSS px (fit, images at 0.5 of their size or more)" for the CLI."""
        w, h = self.min_window
        if self.policy == "pixel_exact":
            how = "pixel_exact: one image pixel per device pixel; at devicePixelRatio 1, less on sharper screens"
        else:
            how = f"fit: images at {self.min_image_scale:g} of their display size or more"
        return f"{w} x {h} CSS px ({how})"

    def to_page(self) -> dict[str, Any]:
        """The JSON the entry pages' device check reads (device_check.js)."""
        return {"min_window": list(self.min_window), "policy": self.policy, "needs_mouse": self.needs_mouse,
                "layouts": [layout.to_page() for layout in self.layouts],
                "min_image_scale": self.min_image_scale, "floor": list(self.floor), "decode": list(self.decode),
                "min_mbps": self.min_mbps, "probe_bytes": PROBE_BYTES}
