"""Machine observers for the motion-matching experiment: OpenCV optical flow at the probes.

HuPerFlow (seed 003 §4) compares human responses with optical-flow models.
Two classical OpenCV methods are built in, run on the grey clip frames
``F -> F + 1`` of every probe and sampled bilinearly at ``(x, y)``:

``farneback``
    :func:`cv2.calcOpticalFlowFarneback` with OpenCV's documented example
    parameters (:data:`FARNEBACK_PARAMS`: pyramid scale 0.5, 3 levels,
    15 px window, 3 iterations, poly_n 5, poly_sigma 1.2);
``dis``
    :func:`cv2.DISOpticalFlow_create` with ``DISOPTICAL_FLOW_PRESET_MEDIUM``.

:func:`machine_predictions` gives rows for the model CSV that
``perceptlab analyze-motion --model`` reads; :func:`probe_image_gradient`
gives the image-gradient property of each probe (seed 003 §4: mean Sobel
gradient magnitude within ±40 px).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from .motion_clips import Clip, ClipManifest, ClipManifestError, bilinear_sample

#: ``cv2.calcOpticalFlowFarneback`` arguments after the flow: pyr_scale, levels, winsize, iterations,
#: poly_n, poly_sigma, flags (OpenCV's tutorial values).
FARNEBACK_PARAMS = (0.5, 3, 15, 3, 5, 1.2, 0)
MODELS = ("farneback", "dis")
PREDICTION_COLUMNS = ("clip_id", "probe_id", "model", "pred_u", "pred_v")


def _farneback(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.calcOpticalFlowFarneback(first, second, None, *FARNEBACK_PARAMS)


def _dis(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM).calc(first, second, None)


_ESTIMATORS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {"farneback": _farneback, "dis": _dis}


def read_grey_frame(path: Path) -> np.ndarray:
    """A clip frame as a uint8 grey image (16-bit frames scaled to 8 bits)."""
    import cv2

    from .io import ImageReadError, read_image

    try:
        image = read_image(path)
    except ImageReadError as error:
        raise ClipManifestError(str(error)) from None
    if image.dtype == np.uint16:
        image = (image.astype(np.float32) / 257.0).round().astype(np.uint8)
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)


def _check_models(models: Iterable[str]) -> list[str]:
    models = list(models)
    unknown = [m for m in models if m not in _ESTIMATORS]
    if unknown or not models:
        raise ValueError(f"models: unknown or none given ({', '.join(unknown) or 'none'}); "
                         f"available: {', '.join(MODELS)}")
    return list(dict.fromkeys(models))


def _probe_frames(clip: Clip) -> list[int]:
    return sorted({p.frame for p in clip.probes})


def machine_predictions(manifest: ClipManifest, models: Iterable[str] = MODELS, progress: bool = False
                        ) -> list[dict]:
    """Flow predicted by OpenCV models at every probe.

    Parameters
    ----------
    manifest : ClipManifest
        Clips and probes (:func:`stimuli.motion_clips.load_clip_manifest`).
    models : iterable of str
        Model names from :data:`MODELS`.
    progress : bool
        Show a progress bar (one step per clip frame pair and model).

    Returns
    -------
    list of dict
        One row per probe and model: ``{"clip_id", "probe_id", "model", "pred_u",
        "pred_v"}``, the model's flow from frame ``F`` to ``F + 1`` at the probe
        (bilinear); clips and probes in manifest order, models in the order given.
    """
    from tqdm import tqdm

    names = _check_models(models)
    total = sum(len(_probe_frames(c)) for c in manifest.clips) * len(names)
    predicted: dict[tuple[str, str, str], tuple[float, float]] = {}
    with tqdm(total=total, desc="machine flow", unit="frame", disable=not progress) as bar:
        for clip in manifest.clips:
            for frame in _probe_frames(clip):
                first = read_grey_frame(manifest.root / clip.frames[frame])
                second = read_grey_frame(manifest.root / clip.frames[frame + 1])
                for model in names:
                    flow = _ESTIMATORS[model](first, second)
                    for probe in (p for p in clip.probes if p.frame == frame):
                        u, v = bilinear_sample(flow, probe.x, probe.y)
                        predicted[clip.clip_id, probe.probe_id, model] = (float(u), float(v))
                    bar.update(1)
    return [{"clip_id": clip.clip_id, "probe_id": probe.probe_id, "model": model,
             "pred_u": predicted[clip.clip_id, probe.probe_id, model][0],
             "pred_v": predicted[clip.clip_id, probe.probe_id, model][1]}
            for clip in manifest.clips for probe in clip.probes for model in names]


def write_predictions_csv(path: str | os.PathLike[str], rows: list[dict]) -> Path:
    """Write prediction rows as CSV (``clip_id,probe_id,model,pred_u,pred_v``) atomically."""
    from .csv_safety import dict_csv_text
    from .io import write_bytes_atomic

    text = dict_csv_text(PREDICTION_COLUMNS, [{**row, "pred_u": f"{row['pred_u']:.6g}",
                                               "pred_v": f"{row['pred_v']:.6g}"} for row in rows])
    return write_bytes_atomic(Path(path), text.encode())


def gradient_magnitude(grey: np.ndarray) -> np.ndarray:
    """Sobel gradient magnitude (3 x 3 kernels) of a grey 0-255 image, float32."""
    import cv2

    grey = grey.astype(np.float32)
    return np.hypot(cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3))


def probe_image_gradient(manifest: ClipManifest, radius: int = 40) -> dict[tuple[str, str], float]:
    """Mean Sobel gradient magnitude around every probe (a flow property of seed 003 §4).

    Parameters
    ----------
    manifest : ClipManifest
        Clips and probes.
    radius : int
        Half side of the square window: pixels within ``±radius`` of the
        probe's nearest pixel, clipped to the image.

    Returns
    -------
    dict
        ``{(clip_id, probe_id): mean gradient magnitude}`` of clip frame ``F``
        (grey, 0-255 scale).
    """
    if isinstance(radius, bool) or int(radius) != radius or radius < 0:
        raise ValueError(f"radius: need a non-negative integer, got {radius!r}")
    result = {}
    for clip in manifest.clips:
        for frame in _probe_frames(clip):
            magnitude = gradient_magnitude(read_grey_frame(manifest.root / clip.frames[frame]))
            height, width = magnitude.shape
            for probe in (p for p in clip.probes if p.frame == frame):
                x, y = round(probe.x), round(probe.y)
                window = magnitude[max(0, y - radius):min(height, y + radius + 1),
                                   max(0, x - radius):min(width, x + radius + 1)]
                result[(clip.clip_id, probe.probe_id)] = float(window.mean())
    return result
