"""Fixtures for every test package. The demo builds are session fixtures *here*, in the one conftest
every package sees: a session fixture imported into several modules is built once per module."""
import json
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


@pytest.fixture(scope="session")
def demo_stimuli(tmp_path_factory) -> Path:
    """The demo builder's output (4 scenes x 11 methods, prepared), built once per session."""
    from stimuli.demo import build_demo

    out = tmp_path_factory.mktemp("demo") / "stimuli"
    build_demo(out, progress=False)
    return out


@pytest.fixture(scope="session")
def motion_clips(tmp_path_factory) -> Path:
    """The motion demo's clip manifest (2 clips x 10 probes), and beside it ``four.json``: the same
    frames as four clips (for allocation tests), without a noise texture."""
    from stimuli.motion_demo import build_motion_demo

    manifest = build_motion_demo(tmp_path_factory.mktemp("motion") / "clips", progress=False)
    data = json.loads(manifest.read_text())
    clips = []
    for copy in ("a", "b"):
        for clip in data["clips"]:
            clips.append({**clip, "clip_id": f"{clip['clip_id']}_{copy}"})
    (manifest.parent / "four.json").write_text(json.dumps({"format": data["format"], "clips": clips}))
    return manifest
