"""Scene folders of a classic image-quality study: pictures with JPEG, blur and noise at several strengths.

The demo (:mod:`stimuli.demo`) has interpolation artefacts; a researcher's own study often looks
like this instead: ordinary pictures, each distorted in a few ways at a few strengths. Scenes are
pictures that scikit-image ships (no download), cut to ``size``; each gets one candidate per
(distortion, strength), named like ``jpeg_q20`` or ``blur_s1.5``. The folder is what
:func:`stimuli.prepare.load_scene` reads (``reference.png`` plus candidates), so
``perceptlab stimuli prepare`` turns it into a study. Used to measure gold separability on
stimuli that are not the demo's (``benchmarks/gold_separability.py``).
"""
from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: Bundled scikit-image pictures used as scenes, in order.
PICTURES = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry")
#: (distortion, strengths): JPEG quality, Gaussian blur sigma (pixels), Gaussian noise sigma (grey levels).
DISTORTIONS = (("jpeg", (10, 20, 35, 60)), ("blur", (0.8, 1.5, 2.5)), ("noise", (4.0, 8.0, 16.0)))


def distort(image: np.ndarray, kind: str, strength: float, rng: np.random.Generator) -> np.ndarray:
    """``image`` (uint8 RGB) with one distortion: ``jpeg`` (quality), ``blur`` (sigma) or ``noise`` (sigma)."""
    if kind == "jpeg":
        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, format="JPEG", quality=int(strength))
        return np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")).copy()
    if kind == "blur":
        from scipy import ndimage

        return np.clip(np.rint(ndimage.gaussian_filter(image.astype(float), (strength, strength, 0))),
                       0, 255).astype(np.uint8)
    if kind == "noise":
        return np.clip(np.rint(image + rng.normal(0, strength, image.shape)), 0, 255).astype(np.uint8)
    raise ValueError(f"unknown distortion {kind!r}: use jpeg, blur or noise")


def candidate_name(kind: str, strength: float) -> str:
    """File stem of a candidate: ``jpeg_q20``, ``blur_s1.5``, ``noise_s8``."""
    label = "q" if kind == "jpeg" else "s"
    return f"{kind}_{label}{strength:g}"


def picture(name: str, size: tuple[int, int]) -> np.ndarray:
    """A bundled picture as uint8 RGB, resized to cover ``size`` (width, height) and centre-cropped."""
    import cv2
    import skimage.data

    image = np.asarray(getattr(skimage.data, name)())
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    image = image[:, :, :3]
    width, height = size
    scale = max(width / image.shape[1], height / image.shape[0])
    resized = cv2.resize(image, (max(width, round(image.shape[1] * scale)), max(height, round(image.shape[0] * scale))),
                         interpolation=cv2.INTER_AREA)
    top, left = (resized.shape[0] - height) // 2, (resized.shape[1] - width) // 2
    return np.ascontiguousarray(resized[top:top + height, left:left + width])


def build_distortion_scenes(out: str | Path, n_scenes: int = 4, size: tuple[int, int] = (320, 240),
                            distortions: Sequence[tuple[str, Sequence[float]]] = DISTORTIONS,
                            seed: int = 0) -> list[Path]:
    """Write ``n_scenes`` scene folders (``out/<picture>/reference.png`` and one PNG per candidate).

    Parameters
    ----------
    out : path
        Folder to write into (created; existing scene folders are overwritten file by file).
    n_scenes : int
        1 .. ``len(PICTURES)``.
    size : (int, int)
        Width and height of every picture.
    distortions : sequence of (kind, strengths)
    seed : int
        Seed of the noise.

    Returns
    -------
    list of Path
        The scene folders.
    """
    from .io import write_png

    if not 1 <= n_scenes <= len(PICTURES):
        raise ValueError(f"n_scenes must be in 1..{len(PICTURES)}, got {n_scenes}")
    rng = np.random.default_rng(seed)
    folders = []
    for name in PICTURES[:n_scenes]:
        folder = Path(out) / name
        folder.mkdir(parents=True, exist_ok=True)
        reference = picture(name, size)
        write_png(folder / "reference.png", reference)
        for kind, strengths in distortions:
            for strength in strengths:
                write_png(folder / f"{candidate_name(kind, strength)}.png", distort(reference, kind, strength, rng))
        folders.append(folder)
    return folders


__all__ = ["DISTORTIONS", "PICTURES", "build_distortion_scenes", "candidate_name", "distort", "picture"]
