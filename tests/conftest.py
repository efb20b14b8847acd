"""Fixtures for every test package. The demo builds are session fixtures *here*, in the one conftest
every package sees: a session fixture imported into several modules is built once per module.

The suite runs in parallel with pytest-xdist (``make test``: ``-n auto``, whole files per worker, see
``[tool.pytest.ini_options]``): the demo builds are shared by the workers of a run, and files with a
test marked ``slow`` are handed out first, so that the longest ones do not finish the run alone.
"""
import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtr


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def thurstone_counts(truth, pairs, votes_per_pair, rng):
    """Binomial win counts of honest Thurstone observers on ``pairs``."""
    p = ndtr(truth[pairs[:, 0]] - truth[pairs[:, 1]])
    first = rng.binomial(votes_per_pair, p)
    return np.column_stack([first, votes_per_pair - first]).astype(float)


def pytest_collection_modifyitems(config, items):
    """Files with a test marked ``slow`` first (in their own order, as are the others): pytest-xdist
    hands out whole files in collection order, and a long file handed out last would run alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(folder)`` (which returns a path in ``folder``) made once per test run.

    Without pytest-xdist that is once per session. Each xdist worker has a session of its own, so the
    workers share the run's temporary root instead: the first to take the lock builds, the others wait
    for it and reuse its output (tests only read it; the app writes one file beside motion clips, a
    generated noise texture, and writes it atomically). The path is recorded once the build completed,
    so a build cut short by a failure is made again rather than reused half-done.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return build(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent  # .../pytest-N, above every worker's popen-gwK
    folder, record = root / name, root / f"{name}.built"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, also by a crashed worker
        if not record.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            result = build(folder)
            record.write_text(str(result.relative_to(folder)))
        return folder / record.read_text()


@pytest.fixture(scope="session")
def demo_stimuli(tmp_path_factory) -> Path:
    """The demo builder's output (4 scenes x 11 methods, prepared), built once per test run."""
    from stimuli.demo import build_demo

    def build(folder: Path) -> Path:
        out = folder / "stimuli"
        build_demo(out, progress=False)
        return out

    return built_once(tmp_path_factory, "demo", build)


@pytest.fixture(scope="session")
def motion_clips(tmp_path_factory) -> Path:
    """The motion demo's clip manifest (2 clips x 10 probes), and beside it ``four.json``: the same
    frames as four clips (for allocation tests), without a noise texture."""
    from stimuli.motion_demo import build_motion_demo

    def build(folder: Path) -> Path:
        manifest = build_motion_demo(folder / "clips", progress=False)
        data = json.loads(manifest.read_text())
        clips = []
        for copy in ("a", "b"):
            for clip in data["clips"]:
                clips.append({**clip, "clip_id": f"{clip['clip_id']}_{copy}"})
        (manifest.parent / "four.json").write_text(json.dumps({"format": data["format"], "clips": clips}))
        return manifest

    return built_once(tmp_path_factory, "motion", build)


@pytest.fixture(scope="session")
def video_clips(tmp_path_factory) -> Path:
    """One video content of three noisy candidates (128x96, 1 s at 25 fps, tests/server/video_support.py)
    prepared for delivery (H.264 MP4), built once per test run: the prepared folder, beside it ``scenes``
    (the sources). Tests copy it before creating a study (which writes check clips beside the scenes)."""
    from tests.server.video_support import prepare_videos, video_scenes

    def build(folder: Path) -> Path:
        video_scenes(folder / "scenes", contents=1)
        prepare_videos(folder / "scenes", folder / "prepared")
        return folder / "prepared"

    return built_once(tmp_path_factory, "video_clips", build)


def _digest(array) -> tuple:
    """A key of an array's content (its shape, dtype and bytes)."""
    array = np.ascontiguousarray(array)
    return array.shape, array.dtype.str, hashlib.sha1(array.tobytes()).hexdigest()


@pytest.fixture(scope="session", autouse=True)
def check_images_computed_once():
    """The quality-check images of a rating study computed once per worker for the same inputs.

    Creating a rating study writes each scene's check images (server/paradigms/rating/study.py): a
    bisection of blurs (:func:`stimuli.check_images.blurred_degradations`) and zlib level 9 padding
    (:func:`stimuli.check_images.pad_png`), about 3 s of CPU per study, and the rating tests create
    dozens of studies over the same demo scenes. Both functions are pure (the same arguments give the
    same result), so their results are kept by the content of their arguments: a repeated call returns
    a copy of the first one's result, which the test then writes and checks as before. Exceptions are
    not kept (every call that raises runs again).
    """
    from stimuli import check_images

    blur, pad = check_images.blurred_degradations, check_images.pad_png
    blurred, padded = {}, {}

    def blurred_degradations(reference, candidates, n, margin=2.0):
        key = (_digest(reference), tuple(sorted((name, _digest(image)) for name, image in candidates.items())),
               n, margin)
        if key not in blurred:
            blurred[key] = blur(reference, candidates, n, margin)
        return [image.copy() for image in blurred[key]]

    def pad_png(data, size, level=9):
        key = (hashlib.sha1(data).hexdigest(), len(data), size, level)
        if key not in padded:
            padded[key] = pad(data, size, level)
        return padded[key]

    patch = pytest.MonkeyPatch()
    patch.setattr(check_images, "blurred_degradations", blurred_degradations)
    patch.setattr(check_images, "pad_png", pad_png)  # unpadded_size calls it through the module too
    yield
    patch.undo()
