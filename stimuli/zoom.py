"""Artefact zooming (StudyMB 2.0, "Artefact zooming" and Fig. 7).

For a scene with reference ``I0`` and candidates ``I1..IN``:

1. ``E_avg = 1/N sum_n |I_n - I0|``, averaged over the colour channels too
   (one error value per pixel), then smoothed with a Gaussian of
   ``sigma = 20`` pixels (the paper's value);
2. the smoothed image is segmented with Otsu's threshold (``levels=2``) or
   multi-level Otsu (``levels >= 3``, "two or more parts"; the top class is
   kept); connected regions (8-neighbourhood) give bounding boxes;
3. boxes are ranked by the summed (unsmoothed) average error of their
   region, padded, grown around their centre to a minimum size and a fixed
   aspect ratio, shifted inside the image, merged when they overlap heavily,
   and the best ``top_k`` kept (``top_k = 0``: no crops);
4. a box that covers more than ``max_area`` (default :data:`MAX_CROP_AREA`, half) of the
   image is dropped: it would only repeat the full image beside it. Uniform distortions
   (JPEG, blur, noise over the whole frame) segment into one region spanning the image,
   whose box covers 75-100 % of it; a scene of such candidates gets no crops at all.

The crop files keep the native pixels; ``zoom`` (1.5 in the paper) is the
display magnification recorded with each box (``display_width`` /
``display_height``), so the browser scales the crop and no resampling blurs
the artefacts in the files.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from .io import StimulusInputError, check_rgb

#: A crop covering more than this fraction of the image's area is not offered (module docstring, step 4):
#: at the paper's 1.5x zoom such a crop is as large as the full image shown beside it, and shows nothing
#: the full image does not.
MAX_CROP_AREA = 0.5

#: Outline colours of the overview image (RGB), one per crop rank, repeating.
PALETTE = ((230, 25, 75), (0, 130, 200), (255, 225, 25), (60, 180, 75),
           (245, 130, 48), (145, 30, 180), (70, 240, 240), (240, 50, 230))


@dataclass(frozen=True)
class CropBox:
    """A zoom region: pixel box ``[x, x + width) x [y, y + height)`` of the full image."""

    x: int
    y: int
    width: int
    height: int
    zoom: float
    error_sum: float  # summed average error of the region(s) the box was grown from
    rank: int         # 1 = most degraded

    @property
    def slices(self) -> tuple[slice, slice]:
        """``(rows, columns)`` slices selecting the box from an image array."""
        return slice(self.y, self.y + self.height), slice(self.x, self.x + self.width)

    def to_dict(self) -> dict:
        """JSON-ready dict, with the display size ``round(size * zoom)`` added."""
        out = asdict(self)
        out["display_width"] = int(round(self.width * self.zoom))
        out["display_height"] = int(round(self.height * self.zoom))
        return out


def average_error(reference: np.ndarray, candidates: Iterable[np.ndarray]) -> np.ndarray:
    """Mean over candidates and colour channels of ``|I_n - I0|``, shape ``(H, W)``, float32.

    Candidates may be a generator: they are accumulated one at a time.
    """
    import cv2

    reference = check_rgb(reference, "reference")
    total = np.zeros(reference.shape, np.float64)
    count = 0
    for n, candidate in enumerate(candidates):
        candidate = check_rgb(candidate, f"candidate {n}")
        if candidate.shape != reference.shape or candidate.dtype != reference.dtype:
            raise StimulusInputError(f"candidate {n}: shape {candidate.shape} {candidate.dtype} differs from "
                                     f"reference {reference.shape} {reference.dtype}")
        cv2.accumulate(cv2.absdiff(candidate, reference), total)  # SIMD, no int16 temporaries
        count += 1
    if count == 0:
        raise StimulusInputError("average_error needs at least one candidate")
    return (total.sum(axis=2) / (3 * count)).astype(np.float32)


def smooth_error(error: np.ndarray, sigma: float = 20.0) -> np.ndarray:
    """Gaussian-smoothed error image (OpenCV, 4-sigma kernel, mirrored borders)."""
    import cv2

    if not sigma > 0:
        raise StimulusInputError(f"sigma must be > 0 pixels, got {sigma}")
    return cv2.GaussianBlur(np.asarray(error, np.float32), (0, 0), float(sigma), borderType=cv2.BORDER_REFLECT)


def segment_error(smoothed: np.ndarray, levels: int = 2) -> np.ndarray:
    """Boolean mask of the most degraded class of Otsu's (``levels=2``) or multi-Otsu segmentation.

    An error image without contrast (e.g. all candidates equal the reference) gives an empty mask.
    """
    from skimage.filters import threshold_multiotsu, threshold_otsu

    if levels < 2:
        raise StimulusInputError(f"levels must be >= 2 (Otsu splits into two or more parts), got {levels}")
    smoothed = np.asarray(smoothed)
    if float(smoothed.max() - smoothed.min()) <= 1e-6 * max(1.0, float(np.abs(smoothed).max())):
        return np.zeros(smoothed.shape, bool)
    threshold = None
    if levels > 2:
        try:
            threshold = threshold_multiotsu(smoothed, classes=levels)[-1]
        except ValueError:  # fewer distinct values than classes: two parts are all there is
            threshold = None
    if threshold is None:
        threshold = threshold_otsu(smoothed)
    return smoothed > threshold


def find_crop_boxes(error: np.ndarray, sigma: float = 20.0, top_k: int = 3, levels: int = 2,
                    pad: int = 16, min_size: tuple[int, int] = (160, 120), aspect: float = 4 / 3,
                    zoom: float = 1.5, max_overlap: float = 0.5, max_regions: int = 64,
                    max_area: float = MAX_CROP_AREA) -> list[CropBox]:
    """Zoom regions of an average error image (see the module docstring).

    Parameters
    ----------
    error : ndarray (H, W)
        Average absolute error, e.g. from :func:`average_error`.
    sigma : float
        Gaussian smoothing in pixels (StudyMB 2.0: 20).
    top_k : int
        Number of boxes kept (fewer when the segmentation has fewer regions); 0: none.
    levels : int
        Otsu classes: 2 = Otsu's threshold, >= 3 = multi-Otsu keeping the top class.
    pad : int
        Pixels added around each region's bounding box.
    min_size : (width, height)
        Smallest box; boxes are grown to it (and to ``aspect``) around their centre.
    aspect : float
        Width / height of every box (4/3 by default). A box that would exceed the
        image becomes the largest box of that aspect that fits.
    zoom : float
        Display magnification recorded in each box (StudyMB 2.0: 1.5).
    max_overlap : float
        Boxes whose intersection exceeds this fraction of the smaller box are merged.
    max_regions : int
        Only the ``max_regions`` regions with most error are considered (bounds the merging cost).
    max_area : float
        Boxes covering more than this fraction of the image are dropped (:data:`MAX_CROP_AREA`).

    Returns
    -------
    list of CropBox, rank 1 first; empty when the error image has no contrast, when every box would
    cover more than ``max_area`` of the image, or with ``top_k = 0``.
    """
    from scipy import ndimage

    _check_box_parameters(top_k, pad, min_size, aspect, zoom, max_overlap)
    if not 0 < max_area <= 1:
        raise StimulusInputError(f"max_area must be in (0, 1], got {max_area}")
    error = np.asarray(error, np.float32)
    if error.ndim != 2:
        raise StimulusInputError(f"error image must be 2-D (height, width), got shape {error.shape}")
    if top_k == 0:
        return []
    labels, n_regions = ndimage.label(segment_error(smooth_error(error, sigma), levels), structure=np.ones((3, 3)))
    if n_regions == 0:
        return []
    sums = ndimage.sum_labels(error, labels, index=np.arange(1, n_regions + 1))
    objects = ndimage.find_objects(labels)
    order = np.argsort(-sums, kind="stable")[:max_regions]
    height, width = error.shape
    geometry = dict(image_size=(width, height), min_size=min_size, aspect=aspect)
    boxes = [(_fit_box(_pad(objects[i], pad, width, height), **geometry), float(sums[i])) for i in order]
    boxes = _merge_overlapping(boxes, max_overlap, geometry)
    boxes = [(box, total) for box, total in boxes if box[2] * box[3] <= max_area * width * height]
    boxes.sort(key=lambda item: -item[1])
    return [CropBox(x, y, w, h, float(zoom), total, rank)
            for rank, ((x, y, w, h), total) in enumerate(boxes[:top_k], start=1)]


def _check_box_parameters(top_k: int, pad: int, min_size: tuple[int, int], aspect: float,
                          zoom: float, max_overlap: float) -> None:
    if top_k < 0:
        raise StimulusInputError(f"top_k must be >= 0 (0: no crops), got {top_k}")
    if pad < 0:
        raise StimulusInputError(f"pad must be >= 0 pixels, got {pad}")
    if len(min_size) != 2 or min(min_size) < 1:
        raise StimulusInputError(f"min_size must be (width, height) of at least 1 pixel, got {min_size}")
    if not aspect > 0:
        raise StimulusInputError(f"aspect (width / height) must be > 0, got {aspect}")
    if not zoom > 0:
        raise StimulusInputError(f"zoom must be > 0, got {zoom}")
    if not 0 < max_overlap <= 1:
        raise StimulusInputError(f"max_overlap must be in (0, 1], got {max_overlap}")


Box = tuple[int, int, int, int]  # x, y, width, height


def _pad(region: tuple[slice, slice], pad: int, width: int, height: int) -> Box:
    rows, cols = region
    x0, y0 = max(cols.start - pad, 0), max(rows.start - pad, 0)
    x1, y1 = min(cols.stop + pad, width), min(rows.stop + pad, height)
    return x0, y0, x1 - x0, y1 - y0


def _fit_box(box: Box, image_size: tuple[int, int], min_size: tuple[int, int], aspect: float) -> Box:
    """Grow ``box`` around its centre to ``min_size`` and ``aspect``, then shift it inside the image."""
    x, y, w, h = box
    image_w, image_h = image_size
    new_h = max(h, w / aspect, min_size[1], min_size[0] / aspect)
    new_w = new_h * aspect
    shrink = min(1.0, image_w / new_w, image_h / new_h)  # too big: largest box of this aspect that fits
    new_w = min(max(1, int(round(new_w * shrink))), image_w)
    new_h = min(max(1, int(round(new_h * shrink))), image_h)
    centre_x, centre_y = x + w / 2, y + h / 2
    new_x = int(np.clip(round(centre_x - new_w / 2), 0, image_w - new_w))
    new_y = int(np.clip(round(centre_y - new_h / 2), 0, image_h - new_h))
    return new_x, new_y, new_w, new_h


def _overlap_fraction(a: Box, b: Box) -> float:
    ix = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    iy = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    if ix <= 0 or iy <= 0:
        return 0.0
    return ix * iy / min(a[2] * a[3], b[2] * b[3])


def _union(a: Box, b: Box) -> Box:
    x0, y0 = min(a[0], b[0]), min(a[1], b[1])
    x1, y1 = max(a[0] + a[2], b[0] + b[2]), max(a[1] + a[3], b[1] + b[3])
    return x0, y0, x1 - x0, y1 - y0


def _merge_overlapping(boxes: list[tuple[Box, float]], max_overlap: float, geometry: dict) -> list[tuple[Box, float]]:
    """Merge pairs of boxes overlapping more than ``max_overlap`` until none do (sums add up)."""
    boxes = list(boxes)
    merged = True
    while merged:
        merged = False
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                if _overlap_fraction(boxes[i][0], boxes[j][0]) > max_overlap:
                    union = _fit_box(_union(boxes[i][0], boxes[j][0]), **geometry)
                    boxes[i] = (union, boxes[i][1] + boxes[j][1])
                    del boxes[j]
                    merged = True
                    break
            if merged:
                break
    return boxes


def crop(image: np.ndarray, box: CropBox) -> np.ndarray:
    """The box's pixels of ``image`` (a contiguous copy)."""
    rows, cols = box.slices
    return np.ascontiguousarray(image[rows, cols])


def find_scene_crops(reference: np.ndarray, candidates: Sequence[np.ndarray], **kwargs) -> list[CropBox]:
    """:func:`average_error` then :func:`find_crop_boxes` (keyword arguments go to the latter)."""
    return find_crop_boxes(average_error(reference, candidates), **kwargs)


def draw_overview(reference: np.ndarray, boxes: Sequence[CropBox]) -> np.ndarray:
    """8-bit RGB copy of ``reference`` with each box outlined in a palette colour and numbered by rank.

    Used on the instructions page to show where the zoomed parts come from.
    """
    import cv2

    reference = check_rgb(reference, "reference")
    canvas = (reference >> 8).astype(np.uint8) if reference.dtype == np.uint16 else reference.copy()
    canvas = np.ascontiguousarray(canvas)
    thickness = max(2, round(min(canvas.shape[:2]) / 160))
    font_scale = max(0.5, min(canvas.shape[:2]) / 400)
    for box in boxes:
        colour = PALETTE[(box.rank - 1) % len(PALETTE)]
        cv2.rectangle(canvas, (box.x, box.y), (box.x + box.width - 1, box.y + box.height - 1), colour, thickness)
        _draw_label(canvas, str(box.rank), box, colour, font_scale, thickness)
    return canvas


def _draw_label(canvas: np.ndarray, text: str, box: CropBox, colour: tuple[int, int, int],
                font_scale: float, thickness: int) -> None:
    import cv2

    font = cv2.FONT_HERSHEY_SIMPLEX
    (text_w, text_h), baseline = cv2.getTextSize(text, font, font_scale, max(1, thickness // 2))
    x0, y0 = box.x, box.y
    x1, y1 = x0 + text_w + 2 * thickness, y0 + text_h + baseline + 2 * thickness
    cv2.rectangle(canvas, (x0, y0), (x1, y1), colour, -1)  # filled tab so the number reads on any background
    ink = (0, 0, 0) if sum(colour) > 450 else (255, 255, 255)
    cv2.putText(canvas, text, (x0 + thickness, y1 - baseline - thickness), font, font_scale, ink,
                max(1, thickness // 2), cv2.LINE_AA)
