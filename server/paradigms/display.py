"""What a worker's screen must offer: the smallest inner browser window a study needs, and the device.

One set of numbers serves the server and the browser. The paired-comparison trial page
(``experiment_ui/static/js/pc_trial.js``) shows one *view* at a time: the whole images, or one zoom
region, each as LEFT | REFERENCE | RIGHT, with instant switching (keys 1, 2, ...). A view's three
panels are one size: :func:`pc_views` gives it at scale 1 in CSS pixels (the prepared display size
under ``fit``; one image pixel per device pixel at ``devicePixelRatio`` 1 under ``pixel_exact``).
Around the panels, the page's fixed chrome (:data:`PC_CHROME`, the same numbers perceptlab.css sets)
takes room that does not scale. :func:`window_needed` turns views into the smallest window:

* ``fit``: the images scale with the window, never above 1 (their display size) nor below the
  study's ``min_image_scale``; the window needed is the one at that smallest scale.
* ``pixel_exact``: one image pixel on one device pixel (CSS size = pixels / devicePixelRatio), the
  zoom regions too (shown 1:1: nothing is ever resampled); the window needed depends on the device's
  ratio, so the server states it for ratio 1 (the largest) and the browser applies its own ratio to
  the same numbers (the State carries them; pc_trial.js and device_check.js have the twin of
  :func:`window_needed`).

Every paradigm declares what its pages need before consent (:class:`WindowRequirement`,
``Paradigm.window_requirement``): the entry pages (HIT preview, consent, instructions) state it and
check the window and the device in the browser (``experiment_ui/static/js/device_check.js``).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .media import PROBE_BYTES

POLICIES = ("fit", "pixel_exact")
# The inner window of the common laptops: a 1366x768 screen leaves about 1366x657 inside the browser.
LAPTOP_WINDOW = (1366, 657)

# The trial page's fixed chrome in CSS px (perceptlab.css sets these sizes; the State sends them):
PC_CHROME: dict[str, int] = {
    "bar": 45,      # .pc-bar: 44 px and its 1 px border
    "views": 36,    # .pc-views: the row of view buttons (whole images, region 1, ...), when a set has crops
    "label": 36,    # .pc-label (28 px) and the gap below it
    "pad": 8,       # .pc-trial padding (top, bottom, sides)
    "gap": 24,      # .pc-trial column gap (room for the rings)
    "margin": 2,    # kept free so that rounding never brings a scrollbar back
}


def pc_views(policy: str, width: int, height: int, boxes: Iterable[dict[str, Any]]) -> list[tuple[int, int]]:
    """Panel size (CSS px at scale 1, ratio 1) of each view of a paired-comparison set: the whole image,
    then each zoom region in rank order.

    Parameters
    ----------
    policy : str
        ``"fit"`` (crops at their prepared display size, the manifest's zoom) or ``"pixel_exact"``
        (crops at their pixel size, 1:1 like the whole images).
    width, height : int
        The set's image size (pixels).
    boxes : iterable of dict
        The set's crop boxes as the manifest stores them (``width``, ``height``, ``zoom``, ``rank``,
        ``display_width``, ``display_height``).
    """
    views = [(int(width), int(height))]
    for box in sorted(boxes, key=lambda b: b["rank"]):
        if policy == "pixel_exact":
            views.append((int(box["width"]), int(box["height"])))
        else:
            views.append((int(box.get("display_width", box["width"])), int(box.get("display_height", box["height"]))))
    return views


def pc_chrome_size(n_views: int, chrome: dict[str, int] = PC_CHROME) -> tuple[int, int]:
    """Width and height (CSS px) the trial page takes besides the three panels of a view."""
    width = 2 * chrome["pad"] + 2 * chrome["gap"] + chrome["margin"]
    height = (chrome["bar"] + (chrome["views"] if n_views > 1 else 0) + chrome["pad"] + chrome["label"]
              + chrome["pad"] + chrome["margin"])
    return width, height


def window_needed(views: Sequence[Sequence[int]], factor: float, floor: Sequence[int] = (0, 0),
                  chrome: dict[str, int] = PC_CHROME) -> tuple[int, int]:
    """The smallest inner window (CSS px) that shows every view of a set at ``factor`` of its panel size.

    Parameters
    ----------
    views : sequence of (width, height)
        Panel sizes of the set's views (:func:`pc_views`).
    factor : float
        ``min_image_scale`` under ``fit``; ``1 / devicePixelRatio`` under ``pixel_exact``.
    floor : (width, height)
        The study's smallest window whatever its images (``min_window_width``, ``min_window_height``).

    Returns
    -------
    (int, int)
        Width and height; pc_trial.js's ``windowNeeded`` computes the same from the same numbers.
    """
    extra_w, extra_h = pc_chrome_size(len(views), chrome)
    # Rounded to 1e-6 before the ceiling: 3 * 512 * 0.5 must give 768, not 769 from a binary fraction.
    width = max(math.ceil(round(3 * w * factor, 6)) for w, _ in views) + extra_w
    height = max(math.ceil(round(h * factor, 6)) for _, h in views) + extra_h
    return max(int(floor[0]), width), max(int(floor[1]), height)


def policy_factor(policy: str, min_image_scale: float, dpr: float = 1.0) -> float:
    """The scale the window must allow: ``min_image_scale`` (fit) or ``1 / dpr`` (pixel_exact)."""
    return 1.0 / dpr if policy == "pixel_exact" else min_image_scale


@dataclass(frozen=True)
class WindowRequirement:
    """What a study's worker pages need of the window and the device, before consent.

    ``min_window`` is in CSS px at devicePixelRatio 1. Under ``pixel_exact`` a device with a higher
    ratio needs less: ``views`` (each set's, once per geometry: :func:`pc_views`) let the entry page
    compute its own need with the twin of :func:`window_needed`.
    """

    min_window: tuple[int, int]
    policy: str = "fit"
    needs_mouse: bool = False          # a touch-only device cannot take part (motion: mouse movements)
    views: tuple[tuple[tuple[int, int], ...], ...] = ()  # per set, for the browser's own ratio
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
                "views": [[list(v) for v in set_views] for set_views in self.views],
                "min_image_scale": self.min_image_scale, "floor": list(self.floor), "chrome": PC_CHROME,
                "decode": list(self.decode), "min_mbps": self.min_mbps, "probe_bytes": PROBE_BYTES}


def pc_requirement(policy: str, min_image_scale: float, floor: Sequence[int],
                   sets: Iterable[tuple[int, int, Iterable[dict[str, Any]]]],
                   names: Sequence[str] | None = None) -> WindowRequirement:
    """The :class:`WindowRequirement` of a paired-comparison study with these sets ``(width, height, boxes)``
    (``names``: the sets' names, for :attr:`WindowRequirement.too_large`)."""
    factor = policy_factor(policy, min_image_scale)
    views: list[list[tuple[int, int]]] = []
    needs: list[tuple[int, int]] = []
    too_large = []
    for i, (width, height, boxes) in enumerate(sets):
        set_views = pc_views(policy, width, height, boxes)
        need = window_needed(set_views, factor, floor)
        if set_views not in views:  # sets of one geometry: once
            views.append(set_views)
            needs.append(need)
        if names is not None and (need[0] > LAPTOP_WINDOW[0] or need[1] > LAPTOP_WINDOW[1]):
            too_large.append((names[i], need))
    needs = needs or [(int(floor[0]), int(floor[1]))]
    min_window = (max(n[0] for n in needs), max(n[1] for n in needs))
    return WindowRequirement(min_window=min_window, policy=policy, views=tuple(tuple(v) for v in views),
                             min_image_scale=min_image_scale, floor=(int(floor[0]), int(floor[1])),
                             too_large=tuple(too_large))


def manifest_sets(manifests: Iterable[dict[str, Any]]) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """``(width, height, boxes)`` of every scene manifest (as ``stimuli prepare`` writes them)."""
    return [(m["image_size"]["width"], m["image_size"]["height"], list(m.get("crops", []))) for m in manifests]
