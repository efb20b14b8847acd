"""Video clips for the media layer's tests (server and browser): small contents in the image layout
(``reference.y4m`` and processed versions), encoded here with PyAV, and prepared with ``stimuli prepare``'s
function. A support module, not a test module: test modules import it.

Each content is a seeded smooth texture panning one pixel per frame; its candidates are the reference
with Gaussian noise of growing strength (``noise_<k>``), so that a rater (or the simulated worker) can
rank them. :func:`create_paired_study` makes a paired-comparison study of prepared clips (the server's and the
browser's video paired tests).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import av
import cv2
import numpy as np

W, H, FPS = 128, 96, 25


def frames(seed: int, n: int, width: int = W, height: int = H) -> list[np.ndarray]:
    """A smooth random texture panning one pixel per frame (seeded), as RGB frames."""
    rng = np.random.default_rng(seed)
    texture = cv2.GaussianBlur(rng.integers(0, 256, (height * 2, width * 2, 3)).astype(np.uint8), (0, 0), 2.0)
    return [np.ascontiguousarray(np.roll(texture, k, axis=1)[:height, :width]) for k in range(n)]


def write_clip(path: Path, images: Iterable[np.ndarray], codec: str = "libx264", options: dict | None = None,
               fps: int = FPS) -> Path:
    """Encode RGB frames (any iterable: a generator keeps a long clip out of memory) at ``fps`` with PyAV
    (yuv420p); the size is the first frame's. Shared by the tests and the video benchmarks."""
    import av

    with av.open(str(path), "w") as out:
        stream = None
        for k, image in enumerate(images):
            if stream is None:
                stream = out.add_stream(codec, rate=fps)
                stream.width, stream.height, stream.pix_fmt = image.shape[1], image.shape[0], "yuv420p"
                stream.options = dict(options or {})
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts = k
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def video_scenes(root: Path, *, contents: int = 2, candidates: int = 3, n_frames: int = FPS,
                 codec: str = "libx264", suffix: str = ".mp4", options: dict | None = None,
                 reference: tuple[str, str] = ("rawvideo", ".y4m")) -> Path:
    """``root/<content>/reference<suffix>`` (``reference``: codec, suffix) and ``noise_<k><suffix>`` (``codec``);
    returns ``root``."""
    for c in range(contents):
        folder = root / f"clip{c}"
        folder.mkdir(parents=True)
        clean = frames(c, n_frames)
        write_clip(folder / f"reference{reference[1]}", clean, reference[0], options if reference[0] == codec else None)
        rng = np.random.default_rng(100 + c)
        for k in range(1, candidates + 1):
            noisy = [np.clip(f + rng.normal(0, 6.0 * k, f.shape), 0, 255).astype(np.uint8) for f in clean]
            write_clip(folder / f"noise_{k}{suffix}", noisy, codec, options)
    return root


def prepare_videos(scenes: Path, out: Path, **parameters) -> Path:
    """``stimuli prepare`` of video contents (degree 2); the study manifest."""
    from stimuli.video import prepare_video_study

    prepare_video_study([scenes], out, progress=False, **{"degree": 2, **parameters})
    return out / "manifest.json"


# A paired-comparison study of clips: no gold pairs for clips (no quiz, no hidden gold), small pages.
PLAIN = {"design": {"votes_per_pair": 2}, "quality": {"quiz_size": 0, "gold_rate": 0.0},
         "pages": {"pairs_per_page": 3, "min_pages": 1, "max_pages": 2, "reward_per_page": "0.50",
                   "bonus_per_page": "0.40"}}


def create_paired_study(app, manifest: Path, folder: Path, slug: str, **sections) -> str:
    """A paired-comparison study.toml over ``manifest`` (``sections`` over :data:`PLAIN`), created."""
    from server.paradigms import create_study, read_study_file
    from server.services import app_services

    sections = {**PLAIN, **sections, "entry": {"external_hits": True}}
    lines = ["[study]", f'slug = "{slug}"', 'name = "Video pairs"', f'manifests = ["{manifest.as_posix()}"]']
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in values.items())
    path = folder / f"{slug}.toml"
    path.write_text("\n".join(lines) + "\n")
    with app_services(app).sessions() as session:
        create_study(session, read_study_file(path))
        session.commit()
    return slug
