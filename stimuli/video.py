"""Prepare video stimuli for delivery: probe, transcode (or remux), strip metadata, check.

A video content folder is laid out as an image scene folder: ``reference.<ext>`` and every other
video file a processed version (a candidate, whose ID is its file stem). All files of a content must
share resolution, frame rate and frame count (so duration); one line names the files that differ.

:func:`prepare_video_study` writes, per content, into ``out/<content>/``::

    manifest.json             the content (the image scene's keys, plus "media" entries per file)
    reference.mp4             the reference, as delivered
    original/<id>.mp4         each candidate, as delivered

and ``out/manifest.json`` over all contents (``"media": {"kind": "video", ...}``).

**Delivery format.** H.264 (x264, High profile), yuv420p 8-bit, in MP4 with its index first
(``movflags=+faststart``): what every major browser plays. Frames keep their number, size and order,
timed at the content's frame rate from 0; audio is dropped (stimuli are silent).

**The fidelity rule.** Transcoding must not change what is under test. Each file is encoded at the
constant rate factor ``crf`` (default 12, "visually lossless" is about 17), decoded back and compared
with the source's frames converted to yuv420p 8-bit (a 10-bit or 4:4:4 source loses exactly that
conversion, which the delivery format requires): every plane (Y, Cb, Cr) of every frame must be within
``min_psnr_db`` (default 45 dB) of the source's. A file below the bound is encoded again at a CRF 6
lower, down to CRF 1; a file that still misses it is an error. The manifest records the CRF each file
needed and its lowest PSNR, so the rule holds for every delivered file by construction.

**Keeping the encoding** (``keep_encoding``, for codec studies): the sources' bitstreams are copied
into MP4 unchanged but for encoder tags (H.264/HEVC SEI messages); the manifest marks the study
``"entry_decoding_check": true``: a worker's browser must show it can decode these codecs before consent.

**Metadata.** Every delivered file carries the same container and stream metadata: no title, comment,
encoder string (``Lavf``/``Lavc``, x264's settings message), creation time, handler name of its own or
file name survives (:func:`metadata_problems` checks the bytes and what FFmpeg reads back).

**Check clips** (hidden references, degraded gold) come out of the same encoder path:
:func:`write_check_clip`.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from .media import VIDEO, MediaError, MediaInfo, frame_rate, is_video_file, probe_video

DELIVERY_CODEC, DELIVERY_PIX_FMT, DELIVERY_CONTAINER = "h264", "yuv420p", "mp4"
DELIVERY_SUFFIX = ".mp4"
HANDLER_NAME = "VideoHandler"  # every delivered file's handler name (FFmpeg's default for video tracks)
MUX_OPTIONS = {"movflags": "+faststart",  # the index (moov) before the data: playback starts before the end arrives
               "fflags": "+bitexact"}     # no "Lavf..." encoder tag, no creation time
# SEI NAL units (H.264 type 6, HEVC 39/40) carry encoders' version and settings strings (x264's "core 164 ...").
_STRIP_SEI = {"h264": "filter_units=remove_types=6", "hevc": "filter_units=remove_types=39|40"}
#: Bitstreams --keep-encoding copies into MP4 (what MP4 holds and browsers may play).
KEEPABLE_CODECS = frozenset({"h264", "hevc", "vp9", "av1"})
#: Byte strings that name an encoder; none may appear in a delivered file.
ENCODER_STRINGS = (b"Lavf", b"Lavc", b"x264", b"x265", b"libvpx", b"libaom")
PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")
CRF_STEP = 6  # how much lower each further attempt's CRF is (x264: 6 CRF halves the quantiser step)


class VideoPrepareError(MediaError):
    """Bad input to :func:`prepare_video_study` (one line naming the files and values)."""


@dataclass(frozen=True)
class VideoParameters:
    """Everything that shapes prepared videos (stored in the manifests)."""

    crf: int = 12                # x264 constant rate factor of the first attempt (lower: better)
    preset: str = "medium"       # x264 speed/size trade-off (does not change the fidelity rule)
    min_psnr_db: float = 45.0    # every plane of every frame at least this close to the source's
    keep_encoding: bool = False  # copy the sources' bitstreams (codec studies) instead of transcoding
    degree: int = 6              # comparisons per candidate in the random regular pair design
    seed: int = 0                # seed of the pair design

    def validate(self) -> None:
        """Raise :class:`VideoPrepareError` naming the first bad parameter."""
        checks = [
            (isinstance(self.crf, int) and 1 <= self.crf <= 51, f"crf must be an integer in 1..51, got {self.crf}"),
            (self.preset in PRESETS, f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}"),
            (math.isfinite(self.min_psnr_db) and self.min_psnr_db > 0,
             f"min_psnr_db must be > 0 dB, got {self.min_psnr_db}"),
            (self.degree >= 2, f"degree must be >= 2 (a connected design), got {self.degree}"),
        ]
        for ok, message in checks:
            if not ok:
                raise VideoPrepareError(message)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class VideoContent:
    """A content folder: its reference and candidates (ID -> file) and what :func:`probe` measured."""

    scene_id: str
    reference: Path
    candidates: dict[str, Path]
    info: dict[str, MediaInfo]  # "reference" / candidate ID -> its probe

    @property
    def geometry(self) -> MediaInfo:
        return self.info["reference"]


# ---------------------------------------------------------------- loading contents

def load_content(folder: str | os.PathLike, reference: str | None = None) -> VideoContent:
    """Read a content folder: ``reference.*`` (or ``reference``) and the other video files as candidates.

    Every file is probed; resolution, frame rate and frame count must agree (:func:`check_consistent`).

    Raises
    ------
    VideoPrepareError, MediaError
        No or several references, fewer than two candidates, unreadable files, disagreeing files.
    """
    from .prepare import _check_id

    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if is_video_file(p))
    if reference is not None:
        named = [p for p in files if p.name == reference]
        what = reference
    else:
        named = [p for p in files if p.stem.lower() == "reference"]
        what = "reference.<ext>"
    if len(named) != 1:
        found = "none" if not named else ", ".join(p.name for p in named)
        raise VideoPrepareError(f"{folder}: expected exactly one reference video named {what}, found {found}")
    candidates = {}
    for path in files:
        if path != named[0]:
            if path.stem in candidates:
                raise VideoPrepareError(f"{folder}: several files give the candidate ID {path.stem!r}")
            candidates[_check_id(path.stem, "candidate ID")] = path
    if len(candidates) < 2:
        raise VideoPrepareError(f"{folder}: a content needs at least two candidate videos besides the reference, "
                                f"found {len(candidates)}")
    info = {"reference": probe_video(named[0]), **{i: probe_video(p) for i, p in candidates.items()}}
    content = VideoContent(_check_id(folder.name, "content ID"), named[0], candidates, info)
    check_consistent(folder, {content.reference.name: info["reference"],
                              **{p.name: info[i] for i, p in candidates.items()}})
    return content


def check_consistent(folder: str | os.PathLike, infos: dict[str, MediaInfo]) -> None:
    """Raise one line naming the files whose resolution, frame rate or duration differ within a content.

    Parameters
    ----------
    folder : path
        The content, for the message.
    infos : dict
        File name -> its probe; the first is the one the others are compared with (the reference).
    """
    measures = [("resolution", lambda m: f"{m.width}x{m.height}"),
                ("frame rate", lambda m: f"{m.fps:g} fps"),
                ("duration", lambda m: f"{m.duration_s:g} s ({m.n_frames} frames)")]
    first = next(iter(infos))
    for what, value in measures:
        values = {name: value(info) for name, info in infos.items()}
        differing = [name for name, v in values.items() if v != values[first]]
        if differing:
            listed = ", ".join(f"{name} {values[name]}" for name in [first, *differing])
            raise VideoPrepareError(f"{folder}: {what} differs within the content: {listed}")


# ---------------------------------------------------------------- frames

def source_frames(path: str | os.PathLike, info: MediaInfo | None = None) -> Iterator:
    """Decode a video's frames as yuv420p 8-bit ``av.VideoFrame``\\ s, in presentation order.

    Raises
    ------
    VideoPrepareError
        A frame is not where a constant frame rate puts it (variable rate, dropped frames), or the
        file decodes to another number of frames than it holds.
    """
    import av

    path = Path(path)
    info = info or probe_video(path)
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            rate = frame_rate(stream, path)
            start, n = None, 0
            for frame in container.decode(stream):
                if frame.time is not None:
                    start = frame.time if start is None else start
                    expected = start + n / rate
                    if abs(frame.time - expected) > 0.5 / rate:
                        raise VideoPrepareError(
                            f"{path}: frame {n} is shown at {frame.time:.3f} s, not {float(expected):.3f} s: a "
                            f"variable frame rate or dropped frames; convert it to a constant frame rate first")
                n += 1
                yield frame if frame.format.name == DELIVERY_PIX_FMT else frame.reformat(format=DELIVERY_PIX_FMT)
    except av.FFmpegError as exc:
        raise VideoPrepareError(f"{path}: cannot be decoded ({exc})") from None
    if n != info.n_frames:
        raise VideoPrepareError(f"{path}: decodes to {n} frames but holds {info.n_frames}")


def delivered_frames(path: str | os.PathLike) -> Iterator:
    """Decode a delivered file's frames (yuv420p)."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        yield from container.decode(stream)


def planes(frame) -> list[np.ndarray]:
    """A yuv420p frame's Y, Cb and Cr planes as uint8 arrays (without line padding)."""
    out = []
    for plane in frame.planes:
        data = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
        out.append(data[:, :plane.width])
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two 8-bit planes in dB (``inf`` when equal)."""
    mse = float(np.mean((a.astype(np.int32) - b.astype(np.int32)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def min_psnr(source: Iterable, delivered: Iterable) -> float:
    """Lowest PSNR over every plane of every frame pair (frames compared in order).

    Raises
    ------
    VideoPrepareError
        The two give different numbers of frames.
    """
    low, n_source, n_delivered = math.inf, 0, 0
    delivered = iter(delivered)
    for frame in source:
        n_source += 1
        other = next(delivered, None)
        if other is None:
            break
        n_delivered += 1
        for a, b in zip(planes(frame), planes(other), strict=True):
            low = min(low, psnr(a, b))
    n_delivered += sum(1 for _ in delivered)
    if n_source != n_delivered:
        raise VideoPrepareError(f"the delivered file has {n_delivered} frames, its source {n_source}")
    return low


# ---------------------------------------------------------------- writing delivered files

def encode_delivery(frames: Iterable, dst: str | os.PathLike, *, width: int, height: int, rate: Fraction,
                    crf: float = 12, preset: str = "medium") -> int:
    """Encode frames into a delivered MP4 (H.264 yuv420p, faststart, no identifying metadata).

    This is the one encoder path of every delivered video, check clips included.

    Parameters
    ----------
    frames : iterable of av.VideoFrame
        yuv420p frames of ``width`` x ``height``, in order; their own timing and picture types are
        ignored (frame ``n`` is shown at ``n / rate``; the encoder places its own key frames).
    dst : path
        The MP4 file to write.
    rate : Fraction
        Frame rate.
    crf : float
        x264's constant rate factor.
    preset : str
        x264's preset.

    Returns
    -------
    int
        Frames written.
    """
    import av
    from av.bitstream import BitStreamFilterContext
    from av.video.frame import PictureType

    if width % 2 or height % 2:
        raise VideoPrepareError(f"{width}x{height}: H.264 4:2:0 needs an even width and height; crop or pad the "
                                "sources by a pixel, or keep their encoding (--keep-encoding)")
    n = 0
    with av.open(str(dst), "w", format=DELIVERY_CONTAINER, options=dict(MUX_OPTIONS)) as out:
        stream = out.add_stream("libx264", rate=rate)
        stream.width, stream.height, stream.pix_fmt = width, height, DELIVERY_PIX_FMT
        stream.codec_context.time_base = 1 / rate
        stream.options = {"crf": f"{crf:g}", "preset": preset, "profile": "high"}
        stream.metadata["handler_name"] = HANDLER_NAME
        # The filter only drops NAL units: the stream's parameters stay the encoder's (out_stream would reset them).
        strip = BitStreamFilterContext(_STRIP_SEI["h264"], "h264")

        def mux(packets) -> None:
            for packet in packets:
                for kept in strip.filter(packet):
                    out.mux(kept)

        for frame in frames:
            frame.pts, frame.time_base = n, stream.codec_context.time_base
            frame.pict_type = PictureType.NONE  # a source's key frames would otherwise force ours
            mux(stream.encode(frame))
            n += 1
        mux(stream.encode(None))
        for kept in strip.filter(None):
            out.mux(kept)
    return n


def transcode(src: str | os.PathLike, dst: str | os.PathLike, info: MediaInfo, params: VideoParameters) -> dict:
    """Transcode one file under the fidelity rule (module docstring); return its ``encoding`` record.

    Raises
    ------
    VideoPrepareError
        Even CRF 1 leaves a frame below ``params.min_psnr_db``.
    """
    if info.width % 2 or info.height % 2:
        raise VideoPrepareError(f"{src}: {info.width}x{info.height}: H.264 4:2:0 needs an even width and height; "
                                "crop or pad the content's files by a pixel, or keep their encoding (--keep-encoding)")
    rate = Fraction(info.fps).limit_denominator(1001 * 1000)
    crf = params.crf
    while True:
        encode_delivery(source_frames(src, info), dst, width=info.width, height=info.height, rate=rate, crf=crf,
                        preset=params.preset)
        low = min_psnr(source_frames(src, info), delivered_frames(dst))
        if low >= params.min_psnr_db:
            return {"method": "transcoded", "crf": crf, "preset": params.preset,
                    "min_psnr_db": None if math.isinf(low) else round(low, 2),
                    "source_codec": info.codec, "source_pix_fmt": info.pix_fmt}
        if crf == 1:
            raise VideoPrepareError(f"{src}: even at CRF 1 a frame is only {low:.1f} dB from the source "
                                    f"(the bound is {params.min_psnr_db:g} dB); keep the encoding "
                                    f"(--keep-encoding) or lower --min-psnr")
        crf = max(1, crf - CRF_STEP)


def remux(src: str | os.PathLike, dst: str | os.PathLike, info: MediaInfo) -> dict:
    """Copy a source's video bitstream into a delivered MP4 (``keep_encoding``); return its ``encoding``.

    Raises
    ------
    VideoPrepareError
        A codec MP4 delivery does not take (:data:`KEEPABLE_CODECS`).
    """
    import av
    from av.bitstream import BitStreamFilterContext

    if info.codec not in KEEPABLE_CODECS:
        raise VideoPrepareError(f"{src}: --keep-encoding keeps only {', '.join(sorted(KEEPABLE_CODECS))} "
                                f"bitstreams (in MP4), not {info.codec}; transcode it (drop --keep-encoding)")
    with av.open(str(src)) as source, av.open(str(dst), "w", format=DELIVERY_CONTAINER,
                                              options=dict(MUX_OPTIONS)) as out:
        in_stream = source.streams.video[0]
        stream = out.add_stream_from_template(in_stream)
        for key in list(stream.metadata):
            del stream.metadata[key]
        stream.metadata["handler_name"] = HANDLER_NAME
        strip = BitStreamFilterContext(_STRIP_SEI[info.codec], in_stream) if info.codec in _STRIP_SEI else None
        for packet in source.demux(in_stream):
            if packet.dts is None and not packet.size:
                continue  # the demuxer's final empty packet
            for kept in (strip.filter(packet) if strip else [packet]):
                kept.stream = stream
                out.mux(kept)
        if strip:
            for kept in strip.filter(None):
                kept.stream = stream
                out.mux(kept)
    return {"method": "kept", "source_codec": info.codec, "source_pix_fmt": info.pix_fmt}


def metadata_problems(path: str | os.PathLike, names: Sequence[str] = ()) -> list[str]:
    """What in a delivered file could identify it: encoder strings, the given (source file) names,
    and container or stream metadata beyond what every delivered file carries.

    Parameters
    ----------
    path : path
        A delivered MP4.
    names : sequence of str
        Strings that must not appear in its bytes (e.g. its source's file name and stem).

    Returns
    -------
    list of str
        One phrase per problem; empty when the file is clean.
    """
    import av

    data = Path(path).read_bytes()
    problems = [f"holds {s.decode()!r}" for s in ENCODER_STRINGS if s in data]
    problems += [f"holds the name {n!r}" for n in names if n and n.encode() in data]
    with av.open(str(path)) as container:
        extra = set(container.metadata) - set(CONTAINER_METADATA)
        problems += [f"container metadata {k}={container.metadata[k]!r}" for k in sorted(extra)]
        for stream in container.streams:
            metadata = dict(stream.metadata)
            if metadata != STREAM_METADATA:
                problems.append(f"stream {stream.index} metadata {metadata}")
    return problems


#: What FFmpeg reads back from every delivered MP4: the brand boxes only ...
CONTAINER_METADATA = ("major_brand", "minor_version", "compatible_brands")
#: ... and a fixed handler name and the undetermined language per stream.
STREAM_METADATA = {"language": "und", "handler_name": HANDLER_NAME}


def deliver(src: Path, dst: Path, info: MediaInfo, params: VideoParameters) -> dict:
    """Write one delivered file (transcoded, or remuxed with ``keep_encoding``) and check its metadata.

    Returns
    -------
    dict
        The file's manifest fields: ``media`` (the delivered file's probe) and ``encoding``.
    """
    encoding = remux(src, dst, info) if params.keep_encoding else transcode(src, dst, info, params)
    if problems := metadata_problems(dst, [src.name, src.stem if len(src.stem) >= 4 else ""]):
        raise VideoPrepareError(f"{src}: the delivered file still identifies itself: {'; '.join(problems)}"
                                + ("; drop --keep-encoding to transcode it" if params.keep_encoding else ""))
    return {"media": probe_video(dst).to_dict(), "encoding": encoding}


# ---------------------------------------------------------------- check clips

def washed_out_blur(frame_rgb: np.ndarray, sigma: float = 4.0) -> np.ndarray:
    """A strongly degraded frame for degraded gold: blurred (Gaussian, ``sigma`` px), contrast halved, darkened."""
    import cv2

    blurred = cv2.GaussianBlur(frame_rgb, (0, 0), sigma)
    return np.clip(blurred.astype(np.float32) * 0.5 + 32, 0, 255).astype(np.uint8)


def write_check_clip(source: str | os.PathLike, dst: str | os.PathLike, *, crf: float = 12, preset: str = "medium",
                     degrade: Callable[[np.ndarray], np.ndarray] | None = None, target_bytes: int | None = None,
                     tolerance: float = 0.03, max_encodes: int = 8) -> dict:
    """Write a check clip through the delivery encoder path (:func:`encode_delivery`).

    A hidden reference (``degrade`` None) is the source's frames encoded again; degraded gold maps each
    RGB frame through ``degrade`` (e.g. :func:`washed_out_blur`) first. The clip has the source's size,
    frame rate and frame count, and the container and stream metadata of every delivered file. With
    ``target_bytes`` (a size drawn from the content's delivered candidates' sizes, e.g. with
    :func:`stimuli.check_images.draw_sizes`), the CRF is searched (bisection over 1..51) for the file
    size closest to it, so that neither its size nor its bitrate tells it from a real stimulus.

    Parameters
    ----------
    source : path
        The clip to start from (a content's reference, source or delivered).
    dst : path
        The MP4 to write.
    crf, preset : float, str
        As the study's delivered files were encoded (their manifest's ``parameters``); ``crf`` is the
        first try of the search.
    degrade : callable, optional
        ``(height, width, 3)`` uint8 RGB frame -> frame of the same shape.
    target_bytes : int, optional
        The file size to come close to.
    tolerance : float
        Relative size error at which the search stops.
    max_encodes : int
        Most encodings the search makes (the closest is kept).

    Returns
    -------
    dict
        ``media`` (the clip's probe) and ``encoding`` (``crf`` used, ``target_bytes``, ``degraded``, and for a
        hidden reference ``min_psnr_db`` to the source: a size target below what the fidelity rule needs
        lowers it, which the caller checks).
    """
    import av

    source, dst = Path(source), Path(dst)
    info = probe_video(source)
    rate = Fraction(info.fps).limit_denominator(1001 * 1000)

    def frames() -> Iterator:
        decoded = source_frames(source, info)
        if degrade is None:
            return decoded
        return (av.VideoFrame.from_ndarray(degrade(f.to_ndarray(format="rgb24")), format="rgb24")
                .reformat(format=DELIVERY_PIX_FMT) for f in decoded)

    def encode(value: float) -> bytes:
        encode_delivery(frames(), dst, width=info.width, height=info.height, rate=rate, crf=value, preset=preset)
        return dst.read_bytes()

    best_crf, best = crf, encode(crf)
    if target_bytes is not None:
        low, high, value, data = 1.0, 51.0, float(crf), best
        for _ in range(max_encodes - 1):
            if abs(len(data) - target_bytes) <= tolerance * target_bytes:
                break
            low, high = (value, high) if len(data) > target_bytes else (low, value)  # larger CRF: fewer bytes
            value = round((low + high) / 2, 3)
            data = encode(value)
            if abs(len(data) - target_bytes) < abs(len(best) - target_bytes):
                best_crf, best = value, data
        if dst.read_bytes() != best:
            from .io import write_bytes_atomic

            write_bytes_atomic(dst, best)
    if problems := metadata_problems(dst, [source.name]):
        raise VideoPrepareError(f"{dst}: the check clip identifies itself: {'; '.join(problems)}")
    encoding = {"method": "check clip", "crf": best_crf, "preset": preset, "degraded": degrade is not None,
                "target_bytes": target_bytes}
    if degrade is None:
        low_psnr = min_psnr(source_frames(source, info), delivered_frames(dst))
        encoding["min_psnr_db"] = None if math.isinf(low_psnr) else round(low_psnr, 2)
    return {"media": probe_video(dst).to_dict(), "encoding": encoding}


# ---------------------------------------------------------------- a study

def prepare_video_study(content_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                        reference: str | None = None, overwrite: bool = False, progress: bool = True,
                        **parameters) -> dict:
    """Prepare video content folders into ``out/<content>/`` plus a top-level ``manifest.json``.

    Parameters
    ----------
    content_dirs : sequence of paths
        Content folders, or folders of content folders (:func:`stimuli.prepare.scene_folders`).
    out : path
        Output folder; must not exist or be empty unless ``overwrite``. Built beside and renamed into
        place at the end: nothing is left behind on an error.
    reference : str, optional
        File name of the reference in every content folder [default: ``reference.<ext>``].
    overwrite : bool
        Replace a non-empty ``out``.
    progress : bool
        Progress bars (shown only on a terminal).
    **parameters
        The fields of :class:`VideoParameters`: ``crf``, ``preset``, ``min_psnr_db``, ``keep_encoding``,
        ``degree``, ``seed``.

    Returns
    -------
    dict
        The top-level manifest.

    Raises
    ------
    VideoPrepareError, MediaError (both ``ValueError``)
        Bad parameters, unreadable videos, files that disagree within a content, a file the
        fidelity rule or the metadata check refuses. Nothing is written then.
    """
    from tqdm import tqdm

    from .prepare import MANIFEST, SCHEMA_VERSION, _check_output, _write_json, scene_folders, staged_output

    unknown = set(parameters) - set(VideoParameters.__dataclass_fields__)
    if unknown:
        raise TypeError(f"prepare_video_study got unexpected parameters {sorted(unknown)}")
    params = VideoParameters(**parameters)
    params.validate()
    out = Path(out)
    folders = [folder for path in content_dirs for folder in scene_folders(path)]
    names = [f.name for f in folders]
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise VideoPrepareError(f"several content folders are named {duplicates}; content IDs must be unique")
    _check_output(out, overwrite, folders)
    contents = [load_content(folder, reference) for folder in folders]  # every file probed before any work
    entries = []
    with staged_output(out, overwrite) as staging:
        for k, content in enumerate(tqdm(contents, desc="contents", disable=None if progress else True)):
            seed = int(np.random.SeedSequence([params.seed, k]).generate_state(1)[0])
            manifest = _write_content(content, staging / content.scene_id, params, seed, progress)
            _write_json(staging / content.scene_id / MANIFEST, manifest)
            entries.append({"scene_id": content.scene_id, "manifest": f"{content.scene_id}/{MANIFEST}",
                            "n_candidates": len(content.candidates), "n_pairs": len(manifest["design"]["pairs"]),
                            "n_gold_pairs": 0, "gold_method": None, "design_seed": seed,
                            "source": str(folders[k])})
        top = {"schema_version": SCHEMA_VERSION, "kind": "study", "media": _study_media(params, contents),
               "scenes": entries, "parameters": params.to_dict()}
        _write_json(staging / MANIFEST, top)
    return top


def _study_media(params: VideoParameters, contents: list[VideoContent]) -> dict:
    if params.keep_encoding:
        codecs = sorted({info.codec for c in contents for info in c.info.values()})
        return {"kind": VIDEO, "container": DELIVERY_CONTAINER, "codecs": codecs, "encoding": "kept",
                "entry_decoding_check": True}
    return {"kind": VIDEO, "container": DELIVERY_CONTAINER, "codecs": [DELIVERY_CODEC], "pix_fmt": DELIVERY_PIX_FMT,
            "encoding": "transcoded", "entry_decoding_check": False}


def _write_content(content: VideoContent, folder: Path, params: VideoParameters, seed: int, progress: bool) -> dict:
    """Deliver one content's files into ``folder``; return its manifest (image scene keys + media)."""
    from tqdm import tqdm

    from .prepare import SCHEMA_VERSION, scene_design

    ids = sorted(content.candidates)
    design = scene_design(ids, params.degree, seed)  # before any work: odd n * degree is an input error
    (folder / "original").mkdir(parents=True)
    reference = deliver(content.reference, folder / f"reference{DELIVERY_SUFFIX}", content.info["reference"], params)
    candidates = []
    for item_id in tqdm(ids, desc=content.scene_id, leave=False, disable=None if progress else True):
        path = f"original/{item_id}{DELIVERY_SUFFIX}"
        fields = deliver(content.candidates[item_id], folder / path, content.info[item_id], params)
        candidates.append({"id": item_id, "original": path, "source": str(content.candidates[item_id]), **fields})
    geometry = content.geometry
    return {
        "schema_version": SCHEMA_VERSION, "kind": "scene", "scene_id": content.scene_id,
        "media": {"kind": VIDEO, "width": geometry.width, "height": geometry.height, "fps": geometry.fps,
                  "n_frames": geometry.n_frames, "duration_s": geometry.duration_s},
        "image_size": {"width": geometry.width, "height": geometry.height},
        "reference": {"path": f"reference{DELIVERY_SUFFIX}", "source": str(content.reference), **reference},
        "candidates": candidates,
        "parameters": {**params.to_dict(), "seed": seed},
        "design": design,
        "gold": [],
    }
