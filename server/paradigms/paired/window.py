"""The window a paired-comparison study needs: its trial page's views, chrome and three panels abreast.

The trial page (``experiment_ui/static/js/pc_trial.js``) shows one *view* at a time: the whole images, or
one zoom region, each as LEFT | REFERENCE | RIGHT, with instant switching (keys 1, 2, ...). A view's three
panels are one size: :func:`pc_views` gives it at scale 1 in CSS pixels (the prepared display size under
``fit``; one image pixel per device pixel at ``devicePixelRatio`` 1 under ``pixel_exact``). Around the
panels, the page's fixed chrome (:data:`PC_CHROME`, the same numbers perceptlab.css sets) takes room that
does not scale. :func:`window_needed` turns views into the smallest window at a scale factor
(:func:`server.paradigms.display.policy_factor`); the browser's twin is this package's ``static/window.js``
(served as ``/static/paradigms/pc/window.js``).

A set's views reduce to one :class:`~server.paradigms.display.Layout` (the widest view's three panels, the
tallest view's height, the chrome): what the shared device check of the entry pages computes with, at the
browser's own devicePixelRatio, without knowing paired comparison (:func:`pc_requirement`).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..display import LAPTOP_WINDOW, Layout, WindowRequirement, layout_window, policy_factor

PANELS = 3  # LEFT | REFERENCE | RIGHT, one size

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


def pc_layout(views: Sequence[Sequence[int]], chrome: dict[str, int] = PC_CHROME) -> Layout:
    """The :class:`~server.paradigms.display.Layout` of a set's views: the widest view's three panels side by
    side, the tallest view, and the chrome around them (the largest view of each axis decides it, as the
    views show one at a time)."""
    extra_w, extra_h = pc_chrome_size(len(views), chrome)
    return Layout(content=(PANELS * max(int(w) for w, _ in views), max(int(h) for _, h in views)),
                  chrome=(extra_w, extra_h))


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
        Width and height; window.js's ``windowNeeded`` computes the same from the same numbers.
    """
    return layout_window(pc_layout(views, chrome), factor, floor)


def pc_requirement(policy: str, min_image_scale: float, floor: Sequence[int],
                   sets: Iterable[tuple[int, int, Iterable[dict[str, Any]]]],
                   names: Sequence[str] | None = None) -> WindowRequirement:
    """The :class:`~server.paradigms.display.WindowRequirement` of a paired-comparison study with these sets
    ``(width, height, boxes)`` (``names``: the sets' names, for :attr:`WindowRequirement.too_large`)."""
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
    return WindowRequirement(min_window=min_window, policy=policy,
                             layouts=tuple(pc_layout(v) for v in views),
                             min_image_scale=min_image_scale, floor=(int(floor[0]), int(floor[1])),
                             too_large=tuple(too_large))


def manifest_sets(manifests: Iterable[dict[str, Any]]) -> list[tuple[int, int, list[dict[str, Any]]]]:
    """``(width, height, boxes)`` of every scene manifest (as ``stimuli prepare`` writes them)."""
    return [(m["image_size"]["width"], m["image_size"]["height"], list(m.get("crops", []))) for m in manifests]
