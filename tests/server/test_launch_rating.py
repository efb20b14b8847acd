"""`perceptlab launch DIR --paradigm rating --method ...`: a rating study from the same scene folders as a
paired-comparison study, and the options of one paradigm refused for the other."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from server.cli import cli
from server.models import Study

from .conftest import make_noisy_scenes

CONSENT = ("--researcher", "Dr T. Est, Test University", "--contact", "test@example.org")
URL = ("--url", "http://127.0.0.1:5077", "--no-hits")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory) -> Path:
    """Two 160x120 scenes of four candidates, each noisier over the right two thirds of the frame."""
    return make_noisy_scenes(tmp_path_factory.mktemp("scenes") / "rated", seed=12)


def _config(instance: Path, slug: str) -> dict:
    from server.db import session_scope

    with session_scope(f"sqlite:///{instance / 'perceptlab.db'}", migrate=False) as session:
        return dict(session.scalar(select(Study.config).where(Study.slug == slug)))


def test_launch_makes_a_rating_study_of_the_scene_folders(instance, scenes):
    result = CliRunner().invoke(cli, ["launch", str(scenes), *URL, "--paradigm", "rating", "--method", "ccr",
                                      "--ratings-per-stimulus", "5", "--ratings-per-page", "6", *CONSENT])
    assert result.exit_code == 0, result.output
    assert "2/4 study: created 'rated'" in result.output and "CCR:" in result.output
    config = _config(instance, "rated")
    assert (config["kind"], config["method"], config["ratings_per_stimulus"], config["ratings_per_page"]) \
        == ("rating", "ccr", 5, 6)
    study_file = (instance / "studies" / "rated.toml").read_text()
    assert 'kind = "rating"' in study_file and 'method = "ccr"' in study_file
    # The same command again reuses the study; another method under the same slug is refused.
    again = CliRunner().invoke(cli, ["launch", str(scenes), *URL, "--paradigm", "rating", "--method", "ccr",
                                     "--ratings-per-stimulus", "5", "--ratings-per-page", "6", *CONSENT])
    assert again.exit_code == 0 and "exists already with these stimuli and settings" in again.output, again.output
    other = CliRunner().invoke(cli, ["launch", str(scenes), *URL, "--paradigm", "rating", "--method", "dcr",
                                     "--ratings-per-stimulus", "5", "--ratings-per-page", "6", *CONSENT])
    assert other.exit_code == 2 and "other settings" in other.output, other.output


def test_acr_hr_is_acr_with_the_hidden_references_analysed_as_data(instance, scenes):
    result = CliRunner().invoke(cli, ["launch", str(scenes), *URL, "--slug", "hr", "--paradigm", "rating",
                                      "--method", "acr-hr", *CONSENT])
    assert result.exit_code == 0, result.output
    assert _config(instance, "hr")["method"] == "acr"
    assert "analyze-ratings --dmos" in result.output


@pytest.mark.parametrize(("options", "message"), [
    (("--paradigm", "rating", "--votes-per-pair", "9"),
     "--votes-per-pair: not an option of a ratings study (it is one of --paradigm paired)"),
    (("--method", "dcr",), "--method: not an option of a paired comparison study (it is one of --paradigm rating)"),
    (("--ratings-per-page", "4",), "--ratings-per-page: not an option of a paired comparison study"),
])
def test_an_option_of_the_other_paradigm_is_one_clear_error(instance, scenes, options, message):
    result = CliRunner().invoke(cli, ["launch", str(scenes), *URL, *options, *CONSENT])
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output and not (instance / "perceptlab.db").exists()


def test_the_paradigm_and_the_study_file_must_agree(instance, scenes, tmp_path):
    study_file = tmp_path / "paired.toml"
    study_file.write_text('[study]\nname = "x"\n')
    result = CliRunner().invoke(cli, ["launch", str(scenes), *URL, "--paradigm", "rating", "--study-file",
                                      str(study_file), *CONSENT])
    assert result.exit_code == 2 and "is a study of kind 'pc'" in result.output, result.output


def test_help_names_both_paradigms_and_the_methods():
    result = CliRunner().invoke(cli, ["launch", "--help"])
    text = " ".join(result.output.split())
    assert "--paradigm [paired|rating]" in text and "acr|acr-hr|dcr|ccr" in text
