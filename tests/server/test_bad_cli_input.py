"""Bad input to the CLI, study files, manifests and CSV inputs: one error line, nothing stored (issue 38, item 11).

Each test replays a row of the issue's table. Command options go through one finite-float type
(server/cli/base.py ``FiniteFloatRange``); study-file numbers through the declared bounds of
server/paradigms/params.py (every number finite, every integer within PostgreSQL's ``integer``, every dollar
amount plain and at most ``MAX_DOLLARS``); manifests through one capped reader
(server/paradigms/studyfile.py ``load_manifest_json``); CSV inputs through analysis/formats.py
``read_csv_table``. Where a study would be stored, the test runs on SQLite and PostgreSQL and counts the rows.
"""
from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from analysis.formats import VotesFormatError, read_votes, write_votes
from analysis.simulate import simulate_study
from server.cli import cli
from server import exports
from server.models import Assignment, Study, Worker
from server.pilot import pilot_signature
from server.services import app_services

from .conftest import make_noisy_scenes

SECRET = "test-secret"  # make_test_app's secret key
TEXTS = '[texts]\nresearcher = "Dr A. Lee, University of X"\ncontact = "a.lee@x.example"\n'


def _run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env={"PERCEPTLAB_SECRET_KEY": SECRET, **(env or {})})


def _one_error(result, *words: str) -> str:
    """The command failed with exit code 2 and no traceback; its error line names ``words``."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1, result.output
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


def _studies(app) -> int:
    with app_services(app).sessions() as session:
        return session.scalar(select(func.count()).select_from(Study))


# ---------------------------------------------------------------- command options: finite floats

def _float_params(command: click.Command, path: str = "perceptlab"):
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _float_params(sub, f"{path} {name}")
    for param in command.params:
        if isinstance(param.type, click.types.FloatParamType):
            yield f"{path} {param.opts[0]}", param.type


def test_every_float_option_of_the_cli_refuses_nan_and_infinity():
    from server.cli.base import FiniteFloatRange

    found = list(_float_params(cli))
    assert len(found) > 30  # forecast, analyze, analyze-ratings, prepare, simulate, launch...
    plain = [name for name, kind in found if not isinstance(kind, FiniteFloatRange)]
    assert plain == []
    for name, kind in found:
        for text in ("nan", "inf", "-inf", "1e999"):
            with pytest.raises(click.BadParameter):
                kind.convert(text, None, None)


@pytest.mark.parametrize("value", ["nan", "inf", "1e308"])
def test_forecast_reward_nan_inf_or_absurd_is_one_line_and_writes_nothing(tmp_path, value):
    study = simulate_study(n_sets=2, n_items=8, degree=4, votes_per_pair=4, n_workers=12, seed=3)
    pilot = tmp_path / "pilot.csv"
    write_votes(pilot, study.votes)
    out = tmp_path / "forecast.json"
    result = _run("forecast", "--pilot", str(pilot), "--halfwidth", "1.5", "--replicates", "1", "--bootstrap", "5",
                  "--reward", value, "--json-out", str(out))
    _one_error(result, "--reward")
    assert not out.exists()


def test_analyze_gold_accuracy_and_ratings_correlation_threshold_nan(tmp_path):
    votes = tmp_path / "votes.csv"
    write_votes(votes, simulate_study(n_sets=1, n_items=6, degree=4, votes_per_pair=4, n_workers=6, seed=1).votes)
    _one_error(_run("analyze", str(votes), "--out", str(tmp_path / "a"), "--gold-accuracy", "nan"), "--gold-accuracy")
    ratings = tmp_path / "ratings.csv"
    ratings.write_text("worker_id,stimulus_id,rating\nw1,s/a,3\nw2,s/a,4\n")
    _one_error(_run("analyze-ratings", str(ratings), "--out", str(tmp_path / "r"), "--correlation-threshold", "nan"),
               "--correlation-threshold")
    assert not (tmp_path / "a").exists() and not (tmp_path / "r").exists()


# ---------------------------------------------------------------- study files: declared bounds, on both databases

@pytest.fixture
def study_dir(tmp_path, demo_stimuli) -> Path:
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "prepared").symlink_to(demo_stimuli / "prepared", target_is_directory=True)
    return folder


def _create(app, path: Path):
    return _run("study", "create", str(path), "--database-url", app.config["DATABASE_URL"])


BAD_STUDY_FILES = [
    ("seed 2**70", "[study]\nseed = 1180591620717411303424\n", ["study.seed", "2147483647"]),
    ("votes_per_pair 10**12", "[design]\nvotes_per_pair = 1000000000000\n", ["design.votes_per_pair"]),
    ("halfwidth inf", "[stopping]\nhalfwidth = inf\n", ["stopping.halfwidth", "finite"]),
    ("reward as an exponent", '[pages]\nreward_per_page = "1e9"\n', ["pages.reward_per_page", "dollar amount"]),
    ("reward absurd", '[pages]\nreward_per_page = "1000000000"\n', ["pages.reward_per_page", "100000"]),
    ("NUL in the name", '[study]\nname = "a\\u0000b"\n', ["study.name", "NUL"]),
    ("resolve unknown items", '[stopping]\nresolve = ["nosuch|other"]\n', ["stopping.resolve", "nosuch|other"]),
]


@pytest.mark.parametrize("label,extra,words", BAD_STUDY_FILES, ids=[b[0] for b in BAD_STUDY_FILES])
def test_bad_study_file_values_are_one_line_and_store_nothing(app, study_dir, label, extra, words):
    # [study] keys go into the [study] table; the others after it.
    head = '[study]\nslug = "bad"\nmanifests = ["prepared/manifest.json"]\n'
    text = head + extra.removeprefix("[study]\n") + TEXTS if extra.startswith("[study]") else head + extra + TEXTS
    path = study_dir / "bad.toml"
    path.write_text(text)
    _one_error(_create(app, path), *words)
    assert _studies(app) == 0


def test_the_largest_declared_integer_is_stored_alike_on_both_databases(app, study_dir):
    """The bound is the column's: at it, PostgreSQL's integer column takes the seed as SQLite does."""
    path = study_dir / "edge.toml"
    path.write_text('[study]\nslug = "edge"\nmanifests = ["prepared/manifest.json"]\nseed = 2147483647\n'
                    '[design]\nvotes_per_pair = 2147483647\n' + TEXTS)
    result = _create(app, path)
    assert result.exit_code == 0, result.output
    with app_services(app).sessions() as session:
        assert session.scalar(select(Study.seed).where(Study.slug == "edge")) == 2**31 - 1


def test_a_study_file_with_a_byte_order_mark_is_read(app, study_dir):
    path = study_dir / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + ('[study]\nslug = "bom"\nmanifests = ["prepared/manifest.json"]\n'
                                         + TEXTS).encode())
    result = _create(app, path)
    assert result.exit_code == 0, result.output
    assert _studies(app) == 1


@pytest.mark.parametrize("manifest", ["folder", "/dev/zero", "nul"])
def test_a_manifest_that_is_a_folder_a_device_or_holds_nul_is_one_line(app, study_dir, tmp_path, manifest):
    if manifest == "folder":
        target = str(study_dir / "prepared")
    elif manifest == "nul":
        (tmp_path / "nul.json").write_text('{"kind": "scene", "scene_id": "a\\u0000b", "candidates": []}')
        target = str(tmp_path / "nul.json")
    else:
        target = manifest
    path = study_dir / "m.toml"
    path.write_text(f'[study]\nslug = "m"\nmanifests = ["{target}"]\n' + TEXTS)
    line = _one_error(_create(app, path))
    assert {"folder": "a folder", "/dev/zero": "larger than", "nul": "NUL"}[manifest] in line
    assert _studies(app) == 0


def test_a_rating_candidate_named_like_a_check_is_one_line(app, rating_manifest, tmp_path):
    scene = rating_manifest.parent / "scene_01_chelsea" / "manifest.json"
    scene.write_text(_renamed_first_candidate(scene.read_text()))
    path = tmp_path / "rating.toml"
    path.write_text(f'[study]\nkind = "rating"\nslug = "r"\nmanifests = ["{rating_manifest}"]\n' + TEXTS)
    _one_error(_create(app, path), "__reference__", "kept for the quality checks")
    assert _studies(app) == 0


def _renamed_first_candidate(text: str) -> str:
    manifest = json.loads(text)
    manifest["candidates"][0]["id"] = "__reference__"
    return json.dumps(manifest)


# ---------------------------------------------------------------- CSV inputs: analysis/formats.py

VOTES_HEADER = "worker_id,set_id,item_a,item_b,winner\n"


@pytest.mark.parametrize("text,words", [
    (VOTES_HEADER + "w1,s,a,b,a\nw2,s,a,b,b,EXTRA\n", ["line 3", "6 fields, the header has 5"]),
    ("worker_id,set_id,item_a,item_b,winner,winner\nw1,s,a,b,a,b\n", ["line 1", "winner appears twice"]),
    (VOTES_HEADER + "w1,s,a,b,a\nw\x002,s,a,b,b\n", ["line 3", "NUL"]),
], ids=["extra field", "duplicate winner", "NUL in an ID"])
def test_votes_csv_with_extra_fields_a_duplicate_column_or_nul_is_refused(tmp_path, text, words):
    path = tmp_path / "votes.csv"
    path.write_text(text)
    with pytest.raises(VotesFormatError) as caught:
        read_votes(path)
    for word in words:
        assert word in str(caught.value)
    result = _run("analyze", str(path), "--out", str(tmp_path / "out"))
    _one_error(result, *words)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- stimuli prepare and launch

def test_prepare_with_a_relative_out_folder(tmp_path, monkeypatch):
    make_noisy_scenes(tmp_path / "scenes", seed=5)
    monkeypatch.chdir(tmp_path)
    result = _run("stimuli", "prepare", "scenes", "--out", "prepared_rel/", "--gold-pairs", "0", "--top-k", "0")
    assert result.exit_code == 0, result.output
    assert result.exception is None
    assert '[display] policy = "fit": window needed' in result.output
    assert (tmp_path / "prepared_rel" / "manifest.json").is_file()


def _png_header(path: Path, width: int, height: int) -> None:
    """A PNG of ``width`` x ``height`` with no pixel data: its header says the size, decoding it would fail."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def test_a_6000x4000_scene_is_refused_from_its_headers_with_advice_to_downscale(tmp_path):
    scene = tmp_path / "scenes" / "huge"
    scene.mkdir(parents=True)
    for name in ("reference", "a", "b"):
        _png_header(scene / f"{name}.png", 6000, 4000)
    line = _one_error(_run("stimuli", "prepare", str(scene.parent), "--out", str(tmp_path / "out")),
                      "6000x4000", "Downscale", "2732x1821", "--max-side")
    assert "fit" not in line
    assert not (tmp_path / "out").exists()
    # `launch` prepares through the same check (and names the option of `stimuli prepare` that lifts it).
    env = {"PERCEPTLAB_INSTANCE": str(tmp_path / "instance")}
    _one_error(_run("launch", str(scene.parent), "--url", "http://127.0.0.1:5051", "--no-hits", "--researcher",
                    "Dr A. Lee", "--contact", "a.lee@x.example", env=env), "6000x4000", "stimuli prepare --max-side 6000")
    assert not (tmp_path / "instance" / "studies" / "scenes.toml").exists()
    # Raising the limit gets past the check to the images themselves (here: no pixels to decode).
    result = _run("stimuli", "prepare", str(scene.parent), "--out", str(tmp_path / "out"), "--max-side", "6000")
    assert "Downscale" not in _one_error(result, "reference.png")


def test_launch_refuses_a_url_without_scheme_and_a_study_file_that_is_not_toml(tmp_path, demo_stimuli):
    instance = tmp_path / "instance"
    env = {"PERCEPTLAB_INSTANCE": str(instance)}
    prepared = str(demo_stimuli / "prepared")
    _one_error(_run("launch", prepared, "--url", "127.0.0.1:5051", "--no-hits", env=env), "--url", "scheme")
    broken = tmp_path / "broken.toml"
    broken.write_text('[study\nslug = "x"\n')
    line = _one_error(_run("launch", prepared, "--url", "http://127.0.0.1:5051", "--no-hits", "--study-file",
                           str(broken), env=env), "broken.toml", "not valid TOML")
    assert line.startswith("error: ")
    assert not (instance / "studies").exists() or not any((instance / "studies").iterdir())


# ---------------------------------------------------------------- pilot --undo on simulated workers

def test_pilot_undo_refuses_simulated_workers(app, study, admin):
    entry = app.test_client().post(f"/api/v1/studies/{study}/assignments", json={
        "platform": "mturk", "worker_id": "SIMBOT1", "assignment_id": "ASIM1", "hit_id": "HIT1",
        "turk_submit_to": "https://workersandbox.mturk.com", "pilot": pilot_signature(SECRET, study),
        "simulated": True})
    assert entry.status_code == 201, entry.json
    result = _run("study", "pilot", study, "SIMBOT1", "--undo", "--database-url", app.config["DATABASE_URL"])
    _one_error(result, "SIMBOT1", "simulated")
    # ... and the dashboard's "Count as real" button likewise.
    listing = admin.get(f"/admin/studies/{study}/participants").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', listing)[1]
    answer = admin.post(f"/admin/studies/{study}/participants/pilot", data={
        "csrf_token": token, "worker": exports.pseudonym(exports.study_salt(SECRET, study), "SIMBOT1"), "pilot": "0"})
    assert answer.status_code == 409 and "simulated" in answer.get_data(as_text=True)
    with app_services(app).sessions() as session:
        worker = session.scalar(select(Worker).where(Worker.external_id == "SIMBOT1"))
        assert worker.pilot and worker.simulated
        assert session.scalars(select(Assignment.pilot).where(Assignment.worker_id == worker.id)).all() == [True]


def test_a_clip_manifest_at_dev_zero_is_read_no_further_than_its_cap():
    from stimuli.motion_clips import ClipManifestError, load_clip_manifest

    with pytest.raises(ClipManifestError, match="larger than 64 MB"):
        load_clip_manifest("/dev/zero")
