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
import pickle
import shutil
import threading
from collections import OrderedDict
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


@pytest.fixture(scope="session", autouse=True)
def cheap_password_hashes():
    """Experimenter passwords hashed by scrypt at N = 2**10 in the test process instead of werkzeug's
    2**15: about 2 ms of CPU per hash instead of 85, and the suite hashes and checks hundreds (every test
    that logs in creates the account and checks its password). Still scrypt through the same calls
    (``check_password_hash`` reads the cost from the stored hash); servers the tests start in other
    processes, and production, keep the default cost."""
    from server import auth

    real = auth.generate_password_hash

    def generate_password_hash(password, method="scrypt:1024:8:1", salt_length=16):
        return real(password, method, salt_length)

    patch = pytest.MonkeyPatch()
    patch.setattr(auth, "generate_password_hash", generate_password_hash)
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def url_builders_compiled_once():
    """Werkzeug's URL builders compiled once per process for each route's shape, not once per app.

    Every app the tests create (about 1,600 in a run) registers the same ~60 routes, and werkzeug compiles
    two builder functions for each rule when the rule is bound to the app's map (``Rule.compile``: an AST
    built and passed to ``compile()``): 18 of the 26 ms of CPU an app costs. A builder depends only on the
    rule's text, its parsed parts (``_trace``), the names of its defaults and ``append_unknown``; it takes
    the rule as its first argument (werkzeug binds it with ``__get__``), so one function serves every app's
    copy of a rule. Rules whose defaults fill one of their variables (the builder then holds the converted
    default) are compiled as before. Servers the tests start in other processes, and production, compile
    as always.
    """
    from werkzeug.routing.rules import Rule

    real = Rule._compile_builder
    builders: dict = {}
    guard = threading.Lock()

    def _compile_builder(self, append_unknown=True):
        defaults = self.defaults or {}
        if any(dynamic and part in defaults for dynamic, part in self._trace):
            return real(self, append_unknown)
        key = (self.rule, tuple(self._trace), tuple(defaults), append_unknown)
        with guard:
            builder = builders.get(key)
        if builder is None:
            builder = real(self, append_unknown)
            with guard:
                builders[key] = builder
        return builder

    patch = pytest.MonkeyPatch()
    patch.setattr(Rule, "_compile_builder", _compile_builder)
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def aws_models_loaded_once():
    """botocore's data files (the endpoints, each service's model) read once per process, not once per client.

    Every boto3 client (the MTurk client of each MTurk test, the S3 storage of each S3 app) comes from a new
    botocore session (``server.aws.boto3_session``), whose new ``Loader`` parses the same JSON files again:
    90 ms of CPU per MTurk client, 25 ms with the parsed files shared. Loaders with the same search paths and
    extras share one cache (botocore's ``instance_cache`` keeps what each method returned; the clients of one
    session already share these objects, so nothing changes them).
    """
    from botocore.loaders import Loader

    real = Loader.__init__
    caches: dict = {}

    def __init__(self, *args, **kwargs):
        real(self, *args, **kwargs)
        self._cache = caches.setdefault((tuple(self.search_paths), tuple(self._extras_types)), {})

    patch = pytest.MonkeyPatch()
    patch.setattr(Loader, "__init__", __init__)
    yield
    patch.undo()


def run_folder(tmp_path_factory, name: str) -> Path | None:
    """A folder every xdist worker of this run sees (``.../pytest-N/<name>``); None without xdist (one
    process: nothing to share)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    folder = tmp_path_factory.getbasetemp().parent / name  # above every worker's popen-gwK
    folder.mkdir(exist_ok=True)
    return folder


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
def demo_six_gold(tmp_path_factory, demo_stimuli) -> Path:
    """The demo's scenes prepared as before a third of each design became gold pairs: 6 gold pairs a
    scene (``--gold-pairs 6``), in ``prepared/`` like :func:`demo_stimuli`'s (the same design seed)."""
    from stimuli.prepare import prepare_study

    def build(folder: Path) -> Path:
        seed = json.loads((demo_stimuli / "demo.json").read_text())["design_seed"]
        prepare_study([demo_stimuli / "scenes"], folder / "prepared", seed=seed, gold_pairs=6, progress=False)
        return folder

    return built_once(tmp_path_factory, "demo_six_gold", build)


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


def _kept(function: Callable, key: Callable, copy: Callable = lambda result: result, size: int = 256,
          shared: Path | None = None) -> Callable:
    """``function`` with its results kept (at most ``size``, the least recently used dropped) under
    ``key(*args, **kwargs)``, a key of the arguments' content: a repeated call returns ``copy(kept result)``.
    Only for pure functions. A key of None runs the function without keeping its result; exceptions are not
    kept (every call that raises runs again). With ``shared`` (a folder of the run: :func:`run_folder`),
    results are also pickled there, so the other xdist workers load them instead of computing them again
    (written whole, then renamed: a reader never sees half a file)."""
    results: OrderedDict = OrderedDict()

    def compute(k, args, kwargs):
        if shared is None:
            return function(*args, **kwargs)
        path = shared / f"{function.__name__}-{hashlib.sha1(repr(k).encode()).hexdigest()}.pickle"
        if path.is_file():
            return pickle.loads(path.read_bytes())
        result = function(*args, **kwargs)
        scratch = path.with_name(f".{path.name}.{os.getpid()}")
        scratch.write_bytes(pickle.dumps(result))
        scratch.replace(path)
        return result

    guard = threading.Lock()  # live servers call from their own threads

    def kept(*args, **kwargs):
        k = key(*args, **kwargs)
        if k is None:
            return function(*args, **kwargs)
        with guard:
            result = results.get(k)
            if result is not None:
                results.move_to_end(k)
        if result is None:
            result = compute(k, args, kwargs)
            with guard:
                results[k] = result
                if len(results) > size:
                    results.popitem(last=False)
        return copy(result)

    return kept


@pytest.fixture(scope="session", autouse=True)
def images_computed_once(tmp_path_factory):
    """The images of a rating study computed once per worker for the same inputs.

    Creating a rating study with checks writes each scene's images (server/paradigms/rating/study.py): it
    decodes the prepared images (:func:`stimuli.io.read_image`), re-encodes them
    (:func:`stimuli.io.encode_png`), makes a bisection of blurs (:func:`stimuli.check_images.blurred_degradations`)
    and recompresses every image it shows at zlib level 9 (:func:`stimuli.check_images.recompress_png`): seconds
    of CPU per study, and the rating tests create dozens of studies over the same demo scenes (whose candidates
    and references are the same bytes in every study). These functions are pure (the same arguments give the
    same result; :func:`~stimuli.io.read_image` is keyed by the file's bytes, not its name), so their results
    are kept by the content of their arguments: a repeated call returns a copy of the first one's result (bytes
    and the recompressed PNG are immutable), which the study then pads, writes and checks as before; the
    blurs and recompressions are also shared with the run's other xdist workers. Exceptions are not kept (a
    missing or broken file raises on every call).
    """
    from stimuli import check_images, io

    def arrays_key(reference, candidates, n, margin=2.0):
        return (_digest(reference), tuple(sorted((name, _digest(image)) for name, image in candidates.items())),
                n, margin)

    def file_key(path):
        try:
            data = Path(path).read_bytes()
        except OSError:
            return None  # read_image names the file in its own error
        return hashlib.sha1(data).hexdigest(), len(data)

    def image_key(image, compression=3):
        return (_digest(image), compression) if isinstance(image, np.ndarray) else None

    shared = run_folder(tmp_path_factory, "computed")  # the costly two, for every worker of the run
    patch = pytest.MonkeyPatch()
    patch.setattr(check_images, "blurred_degradations", _kept(
        check_images.blurred_degradations, arrays_key, lambda images: [image.copy() for image in images],
        shared=shared))
    # pad_png and unpadded_size call it through the module too
    patch.setattr(check_images, "recompress_png", _kept(
        check_images.recompress_png, lambda data, level=9: (hashlib.sha1(data).hexdigest(), len(data), level),
        shared=shared))
    patch.setattr(io, "read_image", _kept(io.read_image, file_key, np.copy))
    patch.setattr(io, "encode_png", _kept(io.encode_png, image_key))
    yield
    patch.undo()
