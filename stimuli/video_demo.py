"""Demo video contents for a video study, made offline from pictures bundled with scikit-image.

Each content is a slow camera pan across one picture, written losslessly as ``reference.y4m``, and three
processed versions of it, each visibly worse than the reference in its own way: H.264 at a high CRF
(``compressed``), a Gaussian blur (``blurred``) and additive Gaussian noise (``noisy``). The folder is in the layout ``stimuli prepare`` and ``launch`` take for video
(``<out>/<content>/reference.y4m`` and its versions).
"""
from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: The pictures the contents pan across, in order (all bundled with scikit-image, RGB or grey).
PICTURES = ("astronaut", "coffee", "chelsea", "rocket", "coins", "camera")
#: The processed versions every content has (file stems, ``.mp4``).
DISTORTIONS = ("compressed", "blurred", "noisy")
MAX_CONTENTS = len(PICTURES)


@dataclass(frozen=True)
class VideoDemo:
    """What :func:`build_video_demo` wrote: the folder, its contents and each clip's frame geometry."""

    path: Path
    contents: list[str]
    width: int
    height: int
    fps: int
    frames: int


def _picture(name: str) -> np.ndarray:
    """A bundled picture as uint8 RGB."""
    import skimage.data

    image = np.asarray(getattr(skimage.data, name)())
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3].astype(np.uint8))


def pan_frames(picture: np.ndarray, width: int, height: int, n_frames: int) -> Iterator[np.ndarray]:
    """``n_frames`` RGB frames of ``width`` x ``height`` from a camera panning across ``picture``: the
    picture is scaled so that the frame covers 80 % of its height, and the view moves left to right by
    at most 2 pixels a frame (bilinear, so also by sub-pixel steps on a long clip), as a steady camera pan."""
    import cv2

    scale = height / (0.8 * picture.shape[0])
    scaled = cv2.resize(picture, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    if scaled.shape[1] < width + 2:  # a tall picture: widen it so that the pan has room
        scaled = cv2.resize(scaled, (width + 2, scaled.shape[0]), interpolation=cv2.INTER_CUBIC)
    step = min(2.0, (scaled.shape[1] - width - 1) / max(n_frames - 1, 1))  # at most 2 px a frame: smooth
    top = (scaled.shape[0] - height) / 2
    for k in range(n_frames):
        x = step * k
        shift = np.float32([[1, 0, -x], [0, 1, -top]])
        yield cv2.warpAffine(scaled, shift, (width, height), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)


def _blurred(frame: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.GaussianBlur(frame, (0, 0), 1.6)


def _noise(rng: np.random.Generator) -> Callable[[np.ndarray], np.ndarray]:
    def noisy(frame: np.ndarray) -> np.ndarray:
        return np.clip(frame + rng.normal(0.0, 14.0, frame.shape), 0, 255).astype(np.uint8)
    return noisy


def write_clip(path: Path, frames: list[np.ndarray], fps: int, codec: str = "rawvideo",
               options: dict[str, str] | None = None) -> None:
    """Encode RGB ``frames`` at ``fps`` with PyAV (yuv420p; ``rawvideo`` into ``.y4m`` is lossless)."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        stream.options = dict(options or {})
        for k, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = k
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def build_video_demo(out: str | Path, *, contents: int = 2, size: tuple[int, int] = (320, 180), fps: int = 25,
                     seconds: float = 2.0, seed: int = 0, overwrite: bool = False,
                     progress: Callable[[str], None] | None = None) -> VideoDemo:
    """Write ``contents`` demo contents into ``out`` (built in a temporary folder beside it and moved
    into place once complete, so ``out`` never holds half a demo).

    Parameters
    ----------
    out : path
        The folder to create: ``out/<picture>/reference.y4m``, ``compressed.mp4``, ``blurred.mp4``, ``noisy.mp4``.
    contents : int
        How many contents, 1 to :data:`MAX_CONTENTS` (one per picture of :data:`PICTURES`, in order).
    size : (int, int)
        Frame width and height in pixels; both even (4:2:0 video), each 64 to 1920.
    fps, seconds : int, float
        Frame rate (1-60) and length (0.2-20 s) of every clip.
    seed : int
        Seed of the noise; the same seed gives the same frames.
    overwrite : bool
        Replace ``out`` if it exists.
    progress : callable, optional
        Called with each content's name as it is written.

    Returns
    -------
    VideoDemo

    Raises
    ------
    ValueError
        A parameter out of its range.
    FileExistsError
        ``out`` exists and ``overwrite`` is false.
    """
    width, height = size
    if not 1 <= contents <= MAX_CONTENTS:
        raise ValueError(f"contents must be 1 to {MAX_CONTENTS}, got {contents}")
    if not (64 <= width <= 1920 and 64 <= height <= 1920) or width % 2 or height % 2:
        raise ValueError(f"size must be even, 64 to 1920 on each side, got {width}x{height}")
    if not 1 <= fps <= 60:
        raise ValueError(f"fps must be 1 to 60, got {fps}")
    if not 0.2 <= seconds <= 20:
        raise ValueError(f"seconds must be 0.2 to 20, got {seconds}")
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out}: already exists")
    n_frames = max(2, round(fps * seconds))
    rng = np.random.default_rng(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    names = list(PICTURES[:contents])
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}-") as building:
        staged = Path(building) / out.name  # made under the umask, unlike the temporary folder itself
        staged.mkdir()
        for name in names:
            folder = staged / name
            folder.mkdir()
            clean = list(pan_frames(_picture(name), width, height, n_frames))
            write_clip(folder / "reference.y4m", clean, fps)
            # A high CRF for visible blocking; the blurred and noisy versions at a near-lossless CRF,
            # so that each shows its own distortion.
            write_clip(folder / "compressed.mp4", clean, fps, "libx264", {"crf": "40", "preset": "medium"})
            write_clip(folder / "blurred.mp4", [_blurred(f) for f in clean], fps, "libx264", {"crf": "12"})
            noisy = _noise(rng)
            write_clip(folder / "noisy.mp4", [noisy(f) for f in clean], fps, "libx264", {"crf": "12"})
            if progress is not None:
                progress(name)
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    return VideoDemo(out, names, width, height, fps, n_frames)
