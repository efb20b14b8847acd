"""What a stimulus file is, and its measures: the probe of the media layer.

A stimulus is an image or a video. :func:`probe` reads a file's header (an image's, through
Pillow) or demuxes it (a video's, through PyAV, which bundles FFmpeg: no system ``ffmpeg``) and
returns a :class:`MediaInfo`: its kind, size, codec, pixel format and byte count, and for a video
its frame rate, frame count and duration. The same fields describe every stimulus in a prepared
manifest (:func:`manifest_media`), so the server can say what a study shows without opening a file.

A video's duration is its frame count over its frame rate (the time its frames are shown), not the
container's duration field, which muxers round and pad differently.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

from .io import IMAGE_SUFFIXES, StimulusInputError, is_image_file

#: File name suffixes recognised as videos when scanning a folder (raw ``.yuv`` has no header: use ``.y4m``).
VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".y4m", ".mpg", ".mpeg", ".ts",
                            ".ivf"})

IMAGE, VIDEO = "image", "video"

# Pillow's modes as FFmpeg's pixel format names, so that images and videos use one vocabulary.
_PILLOW_PIX_FMT = {"RGB": "rgb24", "RGBA": "rgba", "L": "gray", "LA": "ya8", "P": "pal8", "1": "monob",
                   "I;16": "gray16le", "I;16B": "gray16be", "I;16L": "gray16le", "CMYK": "cmyk", "YCbCr": "yuv444p"}


class MediaError(StimulusInputError):
    """A stimulus file that cannot be probed or used (the message names the file)."""


@dataclass(frozen=True)
class MediaInfo:
    """What :func:`probe` measured of one file.

    Attributes
    ----------
    kind : str
        ``"image"`` or ``"video"``.
    width, height : int
        Pixels of the image or of every frame.
    codec : str
        FFmpeg's codec name for videos (``"h264"``, ``"vp9"``, ``"mpeg4"``), the lower-case Pillow
        format for images (``"png"``, ``"jpeg"``).
    pix_fmt : str
        FFmpeg's pixel format name (``"yuv420p"``, ``"rgb24"``, ``"rgb48"`` for 16-bit PNGs).
    bytes : int
        File size.
    duration_s, fps : float or None
        Videos only: frames / frame rate, and the frame rate (frames per second).
    n_frames : int or None
        Videos only: frames in the file (its video packets, counted by demuxing).
    """

    kind: str
    width: int
    height: int
    codec: str
    pix_fmt: str
    bytes: int
    duration_s: float | None = None
    fps: float | None = None
    n_frames: int | None = None

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict (an image's has no ``duration_s``, ``fps``, ``n_frames``)."""
        return {key: value for key, value in asdict(self).items() if value is not None}


def is_video_file(path: str | os.PathLike) -> bool:
    """True for a regular, non-hidden file with a video suffix (see :data:`VIDEO_SUFFIXES`)."""
    path = Path(path)
    return path.is_file() and not path.name.startswith(".") and path.suffix.lower() in VIDEO_SUFFIXES


def is_media_file(path: str | os.PathLike) -> bool:
    """True for an image or a video file (by suffix; see :func:`stimuli.io.is_image_file`)."""
    return is_image_file(path) or is_video_file(path)


def media_kind(path: str | os.PathLike) -> str | None:
    """``"image"``, ``"video"`` or None, by the file name's suffix."""
    suffix = Path(path).suffix.lower()
    return IMAGE if suffix in IMAGE_SUFFIXES else VIDEO if suffix in VIDEO_SUFFIXES else None


def folder_media_kind(folder: str | os.PathLike) -> str | None:
    """The kind of the stimulus files directly in ``folder`` (None: none there).

    Raises
    ------
    MediaError
        The folder holds images and videos: a content is one or the other.
    """
    folder = Path(folder)
    kinds = {media_kind(p) for p in folder.iterdir() if is_media_file(p)}
    if len(kinds) > 1:
        raise MediaError(f"{folder}: holds both images and videos; a content folder is one or the other")
    return kinds.pop() if kinds else None


def probe(path: str | os.PathLike) -> MediaInfo:
    """Measure an image or a video file (chosen by its suffix).

    Parameters
    ----------
    path : path
        The file.

    Returns
    -------
    MediaInfo

    Raises
    ------
    MediaError
        Missing, unreadable or not an image or video; a video without a video stream or frames.
    """
    kind = media_kind(path)
    if kind == IMAGE:
        return probe_image(path)
    if kind == VIDEO:
        return probe_video(path)
    raise MediaError(f"{path}: not an image or video file name (suffixes: "
                     f"{', '.join(sorted(IMAGE_SUFFIXES | VIDEO_SUFFIXES))})")


def probe_image(path: str | os.PathLike) -> MediaInfo:
    """:func:`probe` of an image: its header only (:func:`stimuli.io.read_image` decodes and checks it)."""
    from PIL import Image

    path = Path(path)
    try:
        size = path.stat().st_size
        with Image.open(path) as img:
            width, height, mode, fmt = img.width, img.height, img.mode, (img.format or "").lower()
            # Pillow opens 16-bit RGB PNGs as 8-bit RGB: the header's bit depth says what the file holds.
            deep = fmt == "png" and _png_bit_depth(path) == 16
    except OSError as exc:
        raise MediaError(f"{path}: not a readable image ({getattr(exc, 'strerror', None) or exc})") from None
    pix_fmt = "rgb48" if deep and mode in ("RGB", "RGBA") else _PILLOW_PIX_FMT.get(mode, mode.lower())
    return MediaInfo(IMAGE, width, height, fmt, pix_fmt, size)


def _png_bit_depth(path: Path) -> int | None:
    with path.open("rb") as handle:
        head = handle.read(25)
    return head[24] if head.startswith(b"\x89PNG\r\n\x1a\n") and len(head) == 25 else None


def probe_video(path: str | os.PathLike) -> MediaInfo:
    """:func:`probe` of a video: its first video stream, with its packets counted (no decoding)."""
    import av

    path = Path(path)
    try:
        size = path.stat().st_size
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise MediaError(f"{path}: has no video stream")
            stream = container.streams.video[0]
            context = stream.codec_context
            rate = frame_rate(stream, path)
            n_frames = sum(1 for packet in container.demux(stream) if packet.size)
            codec = context.name
            pix_fmt = context.format.name if context.format is not None else ""
            width, height = context.width, context.height
    except (av.FFmpegError, OSError) as exc:
        raise MediaError(f"{path}: not a readable video ({_reason(exc)})") from None
    if n_frames == 0 or width <= 0 or height <= 0:
        raise MediaError(f"{path}: a video without frames")
    return MediaInfo(VIDEO, width, height, codec, pix_fmt, size, duration_s=round(float(n_frames / rate), 6),
                     fps=round(float(rate), 6), n_frames=n_frames)


def frame_rate(stream, path: str | os.PathLike = "video") -> Fraction:
    """A video stream's frame rate as a fraction (its average rate, else FFmpeg's guess).

    Raises
    ------
    MediaError
        The container states no usable rate.
    """
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate is not None and rate > 0:
            return Fraction(rate).limit_denominator(1001 * 1000)
    raise MediaError(f"{path}: states no frame rate")


def _reason(exc: BaseException) -> str:
    """FFmpeg's or the OS's words for an error, without PyAV's repetition of the file name."""
    text = getattr(exc, "strerror", None) or str(exc)
    return text.split(":")[0].strip() if "'" in text else text


def manifest_media(scene_manifest: dict) -> dict:
    """What a prepared scene shows: ``{"kind", "stimuli": {stimulus name: fields}}``.

    ``stimuli`` maps ``"reference"`` and every candidate ID to the :class:`MediaInfo` fields
    recorded in the manifest. Image scenes (whose manifests predate the media layer and carry no
    ``media`` entries) give ``{"kind": "image", ...}`` with each stimulus's width and height.

    Parameters
    ----------
    scene_manifest : dict
        A scene's ``manifest.json`` (``"kind": "scene"``), as written by ``perceptlab stimuli prepare``.

    Returns
    -------
    dict
    """
    media = scene_manifest.get("media")
    if media is None:
        size = scene_manifest.get("image_size", {})
        plain = {"kind": IMAGE, "width": size.get("width"), "height": size.get("height")}
        names = ["reference", *(c["id"] for c in scene_manifest.get("candidates", []))]
        return {"kind": IMAGE, "stimuli": {name: dict(plain) for name in names}}
    stimuli = {"reference": scene_manifest["reference"]["media"]}
    stimuli.update({c["id"]: c["media"] for c in scene_manifest["candidates"]})
    return {"kind": media["kind"], "stimuli": stimuli}
