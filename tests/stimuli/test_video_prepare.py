"""Video stimuli: probe (stimuli/media.py), preparation (stimuli/video.py) and ``perceptlab stimuli prepare``
on video folders. Clips are made here with PyAV: 64x48, 25 frames at 25 fps, in several codecs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from click.testing import CliRunner

from server.cli import cli
from stimuli.io import write_png
from stimuli.media import MediaError, manifest_media, probe
from stimuli.separability import clip_separability
from stimuli.video import (CONTAINER_METADATA, STREAM_METADATA, VideoPrepareError, metadata_problems,
                           prepare_video_study, washed_out_blur, write_check_clip)

W, H, N, FPS = 64, 48, 25, 25
# What each source is encoded with: a raw reference and processed versions in unlike codecs and containers.
SOURCES = {"reference.y4m": ("rawvideo", {}), "vp9_secret.webm": ("libvpx-vp9", {}),
           "mpeg4_part2.avi": ("mpeg4", {"qscale": "4"}), "x264_crf30.mp4": ("libx264", {"crf": "30"})}


def _frames(seed: int = 0, n: int = N, width: int = W, height: int = H) -> list[np.ndarray]:
    """A smooth random texture panning one pixel per frame (seeded), as RGB frames."""
    rng = np.random.default_rng(seed)
    texture = cv2.GaussianBlur(rng.integers(0, 256, (height * 2, width * 2, 3)).astype(np.uint8), (0, 0), 1.5)
    return [np.ascontiguousarray(np.roll(texture, k, axis=1)[:height, :width]) for k in range(n)]


def write_clip(path: Path, frames: list[np.ndarray], codec: str = "libx264", rate: int = FPS,
               options: dict | None = None, pts: list[int] | None = None) -> Path:
    """Encode RGB frames with PyAV, with a title and comment that must not survive preparation."""
    with av.open(str(path), "w") as out:
        out.metadata.update({"title": f"title of {path.stem}", "comment": "made by the lab"})
        stream = out.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        stream.options = dict(options or {})
        stream.metadata["title"] = path.name
        for k, image in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = k if pts is None else pts[k]
            for packet in stream.encode(frame):
                packet.duration = packet.duration or rate // FPS  # the last frame's, in a finer time base
                out.mux(packet)
        for packet in stream.encode(None):
            packet.duration = packet.duration or rate // FPS
            out.mux(packet)
    return path


def _content(folder: Path, frames=None, sources=SOURCES) -> Path:
    folder.mkdir(parents=True)
    frames = frames or _frames()
    for name, (codec, options) in sources.items():
        write_clip(folder / name, frames, codec, options=options)
    return folder


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Two contents prepared once through the CLI: (sources folder, output folder, CLI output)."""
    root = tmp_path_factory.mktemp("videos")
    _content(root / "scenes" / "pan", _frames(0))
    _content(root / "scenes" / "drift", _frames(1))
    result = _run(["stimuli", "prepare", str(root / "scenes"), "--out", str(root / "out"), "--degree", "2"])
    assert result.exit_code == 0, result.output
    return root / "scenes", root / "out", result.output


def _run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _delivered(out: Path) -> list[Path]:
    return sorted(out.rglob("*.mp4"))


def _yuv_planes(path: Path) -> list[list[np.ndarray]]:
    """Every frame of a file as yuv420p planes, decoded here independently of stimuli.video."""
    frames = []
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            frame = frame.reformat(format="yuv420p")
            frames.append([np.frombuffer(p, np.uint8).reshape(p.height, p.line_size)[:, :p.width].copy()
                           for p in frame.planes])
    return frames


def _lowest_psnr(source: Path, delivered: Path) -> float:
    a, b = _yuv_planes(source), _yuv_planes(delivered)
    assert len(a) == len(b) == N
    low = math.inf
    for planes_a, planes_b in zip(a, b):
        for x, y in zip(planes_a, planes_b):
            mse = np.mean((x.astype(float) - y) ** 2)
            low = min(low, math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse))
    return low


# ---------------------------------------------------------------- probe

def test_probe_measures_videos_and_images(tmp_path):
    clip = write_clip(tmp_path / "clip.webm", _frames(n=30), "libvpx-vp9", rate=30)
    info = probe(clip)
    assert (info.kind, info.width, info.height, info.codec, info.pix_fmt) == ("video", W, H, "vp9", "yuv420p")
    assert (info.fps, info.n_frames, info.duration_s) == (30.0, 30, 1.0)
    assert info.bytes == clip.stat().st_size
    image = write_png(tmp_path / "still.png", _frames(n=1)[0])
    assert probe(image).to_dict() == {"kind": "image", "width": W, "height": H, "codec": "png", "pix_fmt": "rgb24",
                                      "bytes": image.stat().st_size}
    deep = write_png(tmp_path / "deep.png", np.zeros((4, 6, 3), np.uint16))
    assert probe(deep).pix_fmt == "rgb48"
    (tmp_path / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypisom" + bytes(40))
    with pytest.raises(MediaError, match="broken.mp4: not a readable video"):
        probe(tmp_path / "broken.mp4")


# ---------------------------------------------------------------- delivery

def test_every_delivered_file_is_h264_yuv420p_faststart_within_the_psnr_bound(prepared):
    scenes, out, output = prepared
    assert "2 video content(s), 6 candidates" in output and "bound 45 dB" in output
    for content in ("pan", "drift"):
        manifest = json.loads((out / content / "manifest.json").read_text())
        entries = {"reference": manifest["reference"], **{c["id"]: c for c in manifest["candidates"]}}
        assert set(entries) == {"reference", "vp9_secret", "mpeg4_part2", "x264_crf30"}
        for name, entry in entries.items():
            delivered = out / content / (entry["path"] if name == "reference" else entry["original"])
            source = Path(entry["source"])
            assert SOURCES[source.name][0].startswith(("rawvideo", "lib", "mpeg4"))
            info = probe(delivered)
            assert (info.codec, info.pix_fmt, info.width, info.height, info.n_frames, info.fps) == \
                ("h264", "yuv420p", W, H, N, FPS)
            assert entry["media"] == info.to_dict()  # the manifest records what the file is
            data = delivered.read_bytes()
            assert data.index(b"moov") < data.index(b"mdat")  # faststart: the index first
            # The fidelity rule, measured here with a decoder of the test's own.
            assert _lowest_psnr(source, delivered) >= 45.0
            assert entry["encoding"]["min_psnr_db"] >= 45.0
        assert manifest["media"] == {"kind": "video", "width": W, "height": H, "fps": 25.0, "n_frames": N,
                                     "duration_s": 1.0}
    top = json.loads((out / "manifest.json").read_text())
    assert top["media"] == {"kind": "video", "container": "mp4", "codecs": ["h264"], "pix_fmt": "yuv420p",
                            "encoding": "transcoded", "entry_decoding_check": False}


def test_a_coarse_first_crf_is_lowered_until_the_bound_holds(tmp_path):
    _content(tmp_path / "scenes" / "c", sources={"reference.y4m": ("rawvideo", {}),
                                                   "a.webm": ("libvpx-vp9", {}), "b.avi": ("mpeg4", {"qscale": "4"})})
    top = prepare_video_study([tmp_path / "scenes"], tmp_path / "out", crf=40, degree=2, progress=False)
    manifest = json.loads((tmp_path / "out" / top["scenes"][0]["manifest"]).read_text())
    for entry in [manifest["reference"], *manifest["candidates"]]:
        assert entry["encoding"]["crf"] < 40  # CRF 40 alone misses 45 dB on this texture
        path = tmp_path / "out" / "c" / entry.get("path", entry.get("original"))
        assert _lowest_psnr(Path(entry["source"]), path) >= 45.0


def test_no_metadata_survives_and_every_file_carries_the_same(prepared):
    scenes, out, _ = prepared
    sources = sorted(p for p in scenes.rglob("*") if p.is_file())
    # The sources do carry what must go: titles, comments, encoder strings, their own names.
    source_bytes = b"".join(p.read_bytes() for p in sources)
    assert all(s in source_bytes for s in (b"Lavf", b"x264", b"vp9_secret", b"made by the lab"))
    seen = set()
    for path in _delivered(out):
        data = path.read_bytes()
        for needle in (b"Lavf", b"Lavc", b"x264", b"libvpx", b"secret", b"made by the lab", b"title of",
                       b"reference.y4m", b"mpeg4_part2", b"x264_crf30"):
            assert needle not in data, (path, needle)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            seen.add((json.dumps(dict(container.metadata), sort_keys=True),
                      json.dumps(dict(stream.metadata), sort_keys=True)))
            assert set(container.metadata) == set(CONTAINER_METADATA)  # no creation_time, title, encoder
            assert dict(stream.metadata) == STREAM_METADATA
        assert metadata_problems(path, ["secret", "mpeg4_part2"]) == []
    assert len(seen) == 1  # every delivered file: the same container and stream metadata


def test_metadata_problems_names_what_identifies_a_file(tmp_path):
    clip = write_clip(tmp_path / "clip.mp4", _frames(), "libx264")
    problems = metadata_problems(clip, ["clip.mp4"])
    assert "holds 'Lavf'" in problems and "holds 'x264'" in problems
    assert any("container metadata title=" in p for p in problems)


# ---------------------------------------------------------------- bad input: one line

@pytest.mark.parametrize("odd, values", [
    ("size", "reference.y4m 64x48, b.webm 80x48"),
    ("rate", "reference.y4m 25 fps, b.webm 30 fps"),
    ("length", "reference.y4m 1 s (25 frames), b.webm 0.8 s (20 frames)"),
])
def test_a_file_that_differs_within_a_content_is_one_line_naming_files_and_values(tmp_path, odd, values):
    folder = tmp_path / "scenes" / "c"
    folder.mkdir(parents=True)
    write_clip(folder / "reference.y4m", _frames(), "rawvideo")
    write_clip(folder / "a.webm", _frames(), "libvpx-vp9")
    frames = _frames(width=80) if odd == "size" else _frames(n=20) if odd == "length" else _frames(n=30)
    write_clip(folder / "b.webm", frames, "libvpx-vp9", rate=30 if odd == "rate" else FPS)
    result = CliRunner().invoke(cli, ["stimuli", "prepare", str(tmp_path / "scenes"), "--out", str(tmp_path / "o")])
    what = {"size": "resolution", "rate": "frame rate", "length": "duration"}[odd]
    assert result.exit_code == 2
    assert result.output == f"error: {folder}: {what} differs within the content: {values}\n"
    assert not (tmp_path / "o").exists()


def test_dropped_frames_are_refused(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    write_clip(folder / "reference.mp4", _frames(), "libx264")
    write_clip(folder / "a.mp4", _frames(), "libx264")
    # Frame 12 shown 30 ms late, in a 1/100 s time base: 25 frames in 1 s on average, so the probe's rate agrees.
    write_clip(folder / "b.mp4", _frames(), "libx264", rate=100, pts=[4 * k + 3 * (k == 12) for k in range(N)])
    assert probe(folder / "b.mp4").fps == FPS
    with pytest.raises(VideoPrepareError, match=r"b.mp4: frame 12 is shown at 0.510 s, not 0.480 s"):
        prepare_video_study([folder], tmp_path / "out", degree=2, progress=False)
    assert not (tmp_path / "out").exists()


def test_options_of_the_other_kind_and_mixed_folders_are_one_line(tmp_path):
    _content(tmp_path / "videos" / "c", sources={k: SOURCES[k] for k in ("reference.y4m", "vp9_secret.webm",
                                                                         "x264_crf30.mp4")})
    result = CliRunner().invoke(cli, ["stimuli", "prepare", str(tmp_path / "videos"), "--out", str(tmp_path / "o"),
                                      "--alpha", "2", "--top-k", "1"])
    assert result.exit_code == 2 and result.output.splitlines() == [
        "error: --alpha, --top-k: for images only; video folders are not amplified, cropped or given gold pairs"]
    images = tmp_path / "images" / "s"
    images.mkdir(parents=True)
    for name in ("reference", "a", "b"):
        write_png(images / f"{name}.png", _frames(n=1)[0])
    result = CliRunner().invoke(cli, ["stimuli", "prepare", str(images), "--out", str(tmp_path / "o"), "--crf", "8"])
    assert result.exit_code == 2 and result.output == f"error: --crf: for video folders only; {images} hold images\n"
    result = CliRunner().invoke(cli, ["stimuli", "prepare", str(images), str(tmp_path / "videos"),
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1
    assert "holds images but" in result.output and "a study shows one kind" in result.output
    write_clip(images / "c.mp4", _frames(), "libx264")
    result = CliRunner().invoke(cli, ["stimuli", "prepare", str(images), "--out", str(tmp_path / "o")])
    assert result.output == f"error: {images}: holds both images and videos; a content folder is one or the other\n"


# ---------------------------------------------------------------- --keep-encoding

def test_keep_encoding_copies_the_bitstreams_without_metadata_and_asks_for_a_decoding_check(tmp_path):
    sources = {"reference.mp4": ("libx264", {"crf": "8"}), "vp9_secret.webm": ("libvpx-vp9", {}),
               "x264_crf30.mp4": ("libx264", {"crf": "30"})}
    folder = _content(tmp_path / "scenes" / "codecs", sources=sources)
    result = _run(["stimuli", "prepare", str(tmp_path / "scenes"), "--out", str(tmp_path / "out"), "--keep-encoding",
                   "--degree", "2"])
    assert result.exit_code == 0, result.output
    assert "decoding check" in result.output
    top = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert top["media"]["entry_decoding_check"] is True and top["media"]["codecs"] == ["h264", "vp9"]
    manifest = json.loads((tmp_path / "out" / "codecs" / "manifest.json").read_text())
    for entry in manifest["candidates"]:
        delivered = tmp_path / "out" / "codecs" / entry["original"]
        assert probe(delivered).codec == probe(folder / Path(entry["source"]).name).codec
        assert entry["encoding"]["method"] == "kept"
        # The same frames, bit for bit: the bitstream was copied, not re-encoded.
        for a, b in zip(_yuv_planes(Path(entry["source"])), _yuv_planes(delivered), strict=True):
            assert all(np.array_equal(x, y) for x, y in zip(a, b))
        assert metadata_problems(delivered, ["secret"]) == []
    (folder / "mpeg4.avi").write_bytes(write_clip(tmp_path / "m.avi", _frames(), "mpeg4").read_bytes())
    result = CliRunner().invoke(cli, ["stimuli", "prepare", str(tmp_path / "scenes"), "--out", str(tmp_path / "o2"),
                                      "--keep-encoding"])
    assert result.exit_code == 2
    assert result.output == (f"error: {folder / 'mpeg4.avi'}: --keep-encoding keeps only av1, h264, hevc, vp9 "
                             "bitstreams (in MP4), not mpeg4; transcode it (drop --keep-encoding)\n")


# ---------------------------------------------------------------- check clips and the manifest's media

def test_check_clips_come_out_of_the_same_encoder_path(prepared, tmp_path):
    _, out, _ = prepared
    reference = out / "pan" / "reference.mp4"
    hidden = write_check_clip(reference, tmp_path / "hidden.mp4")
    gold = write_check_clip(reference, tmp_path / "gold.mp4", degrade=washed_out_blur)
    real = probe(out / "pan" / "original" / "vp9_secret.mp4")
    for clip, entry in ((tmp_path / "hidden.mp4", hidden), (tmp_path / "gold.mp4", gold)):
        info = probe(clip)
        assert entry["media"] == info.to_dict()
        assert (info.codec, info.pix_fmt, info.width, info.height, info.n_frames, info.duration_s) == \
            (real.codec, real.pix_fmt, real.width, real.height, real.n_frames, real.duration_s)
        assert metadata_problems(clip) == []
    assert _lowest_psnr(reference, tmp_path / "hidden.mp4") >= 45.0
    assert hidden["encoding"]["min_psnr_db"] >= 45.0
    assert _lowest_psnr(reference, tmp_path / "gold.mp4") < 25.0  # plainly degraded
    # At the study's CRF alone, the degraded clip is smaller than every real candidate: its size tells.
    real = sorted((out / "pan" / "original").glob("*.mp4")) + sorted((out / "drift" / "original").glob("*.mp4"))
    alone = clip_separability({"pan": (real, [tmp_path / "gold.mp4"])})
    assert alone.aucs["bytes"] == 1.0
    assert {alone.aucs[k] for k in ("duration_s", "n_frames", "fps", "width", "height", "metadata")} == {0.5}
    # With a size target (one drawn from the candidates' sizes), the CRF search comes within 3 % of it.
    target = int(np.median([p.stat().st_size for p in real]))
    matched = write_check_clip(reference, tmp_path / "matched.mp4", degrade=washed_out_blur, target_bytes=target)
    assert abs(matched["media"]["bytes"] - target) <= 0.03 * target
    assert matched["encoding"]["crf"] < 12 and metadata_problems(tmp_path / "matched.mp4") == []


def test_manifest_media_describes_video_and_image_scenes(prepared, tmp_path):
    _, out, _ = prepared
    manifest = json.loads((out / "pan" / "manifest.json").read_text())
    media = manifest_media(manifest)
    assert media["kind"] == "video" and set(media["stimuli"]) == {"reference", "vp9_secret", "mpeg4_part2",
                                                                   "x264_crf30"}
    assert {k: media["stimuli"]["vp9_secret"][k] for k in ("duration_s", "fps", "width", "height", "codec")} == \
        {"duration_s": 1.0, "fps": 25.0, "width": W, "height": H, "codec": "h264"}
    image_scene = {"kind": "scene", "image_size": {"width": 240, "height": 180}, "candidates": [{"id": "m0"}]}
    assert manifest_media(image_scene) == {"kind": "image", "stimuli": {
        "reference": {"kind": "image", "width": 240, "height": 180},
        "m0": {"kind": "image", "width": 240, "height": 180}}}


def test_bad_video_parameters_are_one_line(tmp_path):
    _content(tmp_path / "s" / "c", sources={k: SOURCES[k] for k in ("reference.y4m", "vp9_secret.webm",
                                                                     "x264_crf30.mp4")})
    for option, message in ((["--crf", "0"], "crf must be an integer in 1..51, got 0"),
                            (["--preset", "warp"], "preset must be one of ultrafast"),
                            (["--min-psnr", "-1"], "min_psnr_db must be > 0 dB, got -1.0")):
        result = CliRunner().invoke(cli, ["stimuli", "prepare", str(tmp_path / "s"), "--out", str(tmp_path / "o"),
                                          *option])
        assert result.exit_code == 2 and len(result.output.splitlines()) == 1 and message in result.output
    odd = tmp_path / "odd" / "c"
    odd.mkdir(parents=True)
    for name in ("reference.y4m", "a.y4m", "b.y4m"):
        write_clip(odd / name, _frames(width=63), "rawvideo")
    result = CliRunner().invoke(cli, ["stimuli", "prepare", str(odd), "--out", str(tmp_path / "o")])
    assert result.output == (f"error: {odd / 'reference.y4m'}: 63x48: H.264 4:2:0 needs an even width and height; "
                             "crop or pad the content's files by a pixel, or keep their encoding (--keep-encoding)\n")

