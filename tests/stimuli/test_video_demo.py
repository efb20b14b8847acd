"""``perceptlab stimuli build-demo-video`` (stimuli/video_demo.py): demo video contents a video study takes."""
from __future__ import annotations

import av
import numpy as np
import pytest
import skimage.data
from click.testing import CliRunner

from server.cli import cli
from stimuli.video import load_content, psnr
from stimuli.video_demo import DISTORTIONS, build_video_demo, pan_frames


def _frames(path) -> np.ndarray:
    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_video_demo(tmp_path_factory.mktemp("video") / "videos", contents=2, size=(96, 64), fps=10,
                            seconds=0.6, seed=3)


def test_each_content_is_a_folder_the_video_layer_takes(demo):
    assert demo.contents == ["astronaut", "coffee"] and demo.frames == 6
    for name in demo.contents:
        content = load_content(demo.path / name)  # checks resolution, rate and frame count agree
        assert sorted(content.candidates) == sorted(DISTORTIONS)
        info = content.info["reference"]
        assert (info.width, info.height, info.n_frames) == (96, 64, 6)
        assert info.fps == pytest.approx(10)


def test_the_reference_is_lossless_and_every_version_visibly_worse(demo):
    folder = demo.path / "astronaut"
    reference = _frames(folder / "reference.y4m")
    # Lossless up to the RGB -> 4:2:0 conversion: within a few levels of the panned picture.
    source = np.stack(list(pan_frames(skimage.data.astronaut(), 96, 64, 6)))
    assert psnr(reference, source) > 30
    for name in DISTORTIONS:
        version = _frames(folder / f"{name}.mp4")
        assert version.shape == reference.shape
        assert 15 < psnr(version, reference) < 33, name  # a viewer sees it, and it is still the same scene


def test_the_camera_pans_two_pixels_a_frame(demo):
    reference = _frames(demo.path / "coffee" / "reference.y4m").astype(int)
    for before, after in zip(reference[:-1], reference[1:]):
        # The next frame is this one moved left by the pan's step: the best whole-pixel shift is 2.
        errors = [np.abs(after[:, :96 - shift] - before[:, shift:]).mean() for shift in range(5)]
        assert int(np.argmin(errors)) == 2 and errors[2] < 0.5 * errors[0], errors


def test_the_same_seed_gives_the_same_noise(demo, tmp_path):
    again = build_video_demo(tmp_path / "again", contents=1, size=(96, 64), fps=10, seconds=0.6, seed=3)
    other = build_video_demo(tmp_path / "other", contents=1, size=(96, 64), fps=10, seconds=0.6, seed=4)
    first = _frames(demo.path / "astronaut" / "noisy.mp4")
    assert np.array_equal(first, _frames(again.path / "astronaut" / "noisy.mp4"))
    assert not np.array_equal(first, _frames(other.path / "astronaut" / "noisy.mp4"))


@pytest.mark.parametrize("args, fragment", [
    (["--size", "95x64"], "even"), (["--size", "32x32"], "64 to 1920"), (["--size", "2000x100"], "64 to 1920"), (["--size", "wide"], "WIDTHxHEIGHT"),
    (["--contents", "7"], "--contents"), (["--seconds", "0"], "seconds must be 0.2 to 20"),
])
def test_bad_options_get_one_error_line(tmp_path, args, fragment):
    result = CliRunner().invoke(cli, ["stimuli", "build-demo-video", str(tmp_path / "v"), *args])
    assert result.exit_code == 2 and fragment in result.output, result.output
    assert not (tmp_path / "v").exists()


def test_the_command_builds_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "videos"
    args = ["stimuli", "build-demo-video", str(out), "--contents", "1", "--size", "64x64", "--seconds", "0.3"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("video demo: 1 contents (astronaut) x 4 clips, 64x64 at 25 fps, 8 frames")
    assert sorted(p.name for p in (out / "astronaut").iterdir()) == [
        "blurred.mp4", "compressed.mp4", "noisy.mp4", "reference.y4m"]
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 2 and "already exists" in again.output and len(again.output.strip().splitlines()) == 1
