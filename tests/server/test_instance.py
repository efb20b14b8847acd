"""The instance folder: one place for a deployment's database, secret key, stimuli and config.toml.

Chosen by ``--instance``, then ``PERCEPTLAB_INSTANCE``, then ``[server] instance_path``, then ./instance;
read-only commands never create a database or a secret key and say where they looked; exports made by
the CLI carry the dashboard's pseudonyms.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from server.cli import cli
from server.config import load_config
from server.services import app_services

from .admin_support import PASSWORD, log_in
from .conftest import SMALL_STUDY, WorkerClient, write_study_file
from .instance_support import ENVIRONMENT
from .simulated_votes import add_votes


# The default consent names the researcher and a contact: a study file must fill them in.
STUDY = {**SMALL_STUDY, "texts": {"researcher": "Dr T. Est", "contact": "test@example.org"}}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """No deployment settings from the machine running the tests."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def _run(*args: str, input: str | None = None, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), input=input, env=env)


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---------------------------------------------------------------- choosing the folder

def test_the_instance_is_the_flag_then_the_environment_then_the_configuration_then_dot_instance(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.chdir(tmp_path)
    configured = tmp_path / "site.toml"
    configured.write_text(f'[server]\ninstance_path = "{tmp_path / "from-file"}"\n')

    def chosen(environ, instance=None):
        config = load_config(environ, instance=instance)
        assert config["server"]["instance_path"] == config["instance"]["path"]
        return Path(config["instance"]["path"]), config["instance"]["chosen_by"]

    everything = {"PERCEPTLAB_INSTANCE": "from-env", "PERCEPTLAB_CONFIG": str(configured)}
    assert chosen(everything, "from-flag") == (tmp_path / "from-flag", "--instance")
    assert chosen(everything) == (tmp_path / "from-env", "PERCEPTLAB_INSTANCE")
    assert chosen({**everything, "PERCEPTLAB_INSTANCE": ""}) == \
        (tmp_path / "from-file", f"[server] instance_path in {configured}")
    assert chosen({"PERCEPTLAB_SERVER_INSTANCE_PATH": "legacy", "PERCEPTLAB_CONFIG": str(configured)})[0] == \
        tmp_path / "legacy"
    folder, how = chosen({})
    assert folder == tmp_path / "instance" and how.startswith("the default ./instance of the current folder")
    assert not any(tmp_path.iterdir()) or _files(tmp_path) == ["site.toml"]  # choosing makes nothing


def test_the_instance_config_toml_comes_between_the_config_file_and_the_environment(tmp_path):
    instance = tmp_path / "deployment"
    instance.mkdir()
    (instance / "config.toml").write_text(f'[server]\ndatabase_url = "sqlite:///{tmp_path / "elsewhere.db"}"\n'
                                          "port = 6001\n[analysis]\nbootstrap = 7\nseed = 3\n"
                                          f'instance_path = "ignored"\n')
    site = tmp_path / "site.toml"
    site.write_text("[server]\nport = 6000\nhost = \"0.0.0.0\"\n[analysis]\nbootstrap = 5\n")
    config = load_config({"PERCEPTLAB_CONFIG": str(site), "PERCEPTLAB_ANALYSIS_SEED": "9"}, instance=instance)
    assert config["server"]["port"] == 6001 and config["server"]["host"] == "0.0.0.0"  # instance over site file
    assert config["analysis"]["bootstrap"] == 7 and config["analysis"]["seed"] == 9   # environment over both
    assert config["instance"]["config_file"] == str(instance / "config.toml")
    assert config["server"]["instance_path"] == str(instance)

    # The CLI uses that database: the instance folder names it, --database-url still overrides it.
    result = _run("--instance", str(instance), "db", "upgrade")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "elsewhere.db").is_file() and not (instance / "perceptlab.db").exists()
    explicit = f"sqlite:///{tmp_path / 'explicit.db'}"
    assert _run("--instance", str(instance), "db", "upgrade", "--database-url", explicit).exit_code == 0
    assert (tmp_path / "explicit.db").is_file()

    (instance / "config.toml").write_text("[server\n")
    result = _run("--instance", str(instance), "study", "list")
    assert result.exit_code == 2 and result.output.startswith(f"error: configuration: {instance / 'config.toml'}")


def test_commands_share_the_instance_by_flag_or_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lab = tmp_path / "lab"
    result = _run("--instance", "lab", "user", "add", "alice", "--password-stdin", input=PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    assert _files(lab) == ["perceptlab.db", "secret_key"]  # a creating command sets up the whole deployment
    assert oct((lab / "secret_key").stat().st_mode & 0o777) == "0o600"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = _run("user", "list", env={"PERCEPTLAB_INSTANCE": str(lab)})
    assert result.exit_code == 0 and result.output.startswith("alice"), result.output
    result = _run("user", "list")  # ./instance of this folder: nothing there
    assert result.exit_code == 2 and str(elsewhere / "instance" / "perceptlab.db") in result.output
    assert not any(elsewhere.iterdir())


# ---------------------------------------------------------------- read-only commands

READ_ONLY = [("export", "demo", "--out", "out"), ("study", "list"), ("study", "show", "demo"),
             ("study", "pause", "demo"), ("study", "links", "demo", "p1"), ("results", "demo", "--out", "out"),
             ("user", "list"), ("user", "passwd", "alice", "--password-stdin"), ("mturk", "status", "demo"),
             ("mturk", "review", "demo")]


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_read_only_commands_create_nothing_and_say_where_they_looked(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _run(*command, input="x" * 12 + "\n")
    assert result.exit_code == 2, result.output
    message = result.output.strip()
    assert message.startswith(f"error: no perceptlab database at {tmp_path / 'instance' / 'perceptlab.db'}")
    assert "chosen by the default ./instance of the current folder" in message and "--instance DIR" in message
    assert len(message.splitlines()) == 1 and "Traceback" not in message

    result = _run("--instance", "lab", *command, input="x" * 12 + "\n")
    assert result.exit_code == 2 and f"{tmp_path / 'lab'} (chosen by --instance)" in result.output
    assert not any(tmp_path.iterdir())  # no database, no secret key, no folder, no output


def test_a_database_without_secret_key_exports_nothing_and_makes_no_key(tmp_path, demo_stimuli):
    lab = tmp_path / "lab"
    study_file = write_study_file(tmp_path, demo_stimuli, "demo", **STUDY)
    assert _run("--instance", str(lab), "study", "create", str(study_file)).exit_code == 0
    (lab / "secret_key").unlink()  # e.g. a database copied without its instance folder
    result = _run("--instance", str(lab), "export", "demo", "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert f"no secret key at {lab / 'secret_key'}" in result.output and "PERCEPTLAB_SECRET_KEY" in result.output
    assert not (lab / "secret_key").exists() and not (tmp_path / "out").exists()
    # Raw IDs need no key; the server's key from the environment works as the file would.
    assert _run("--instance", str(lab), "export", "demo", "--out", str(tmp_path / "raw"), "--raw-worker-ids",
                ).exit_code == 0
    result = _run("--instance", str(lab), "export", "demo", "--out", str(tmp_path / "out"),
                  env={"PERCEPTLAB_SECRET_KEY": "k" * 32})
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- one secret: the same pseudonyms everywhere

def test_dashboard_and_cli_exports_show_the_same_pseudonyms(tmp_path, demo_stimuli, monkeypatch):
    """A server started on the instance folder (its own generated key, as in production and in the demo) and
    `perceptlab --instance` export and results: each worker has one pseudonym in all of them."""
    from server import auth, create_app
    from server.paradigms import create_study, read_study_file

    lab = tmp_path / "lab"
    app = create_app(load_config({}, instance=lab), testing=True, entry_limit=0, live_scales_process=False)
    try:
        with app_services(app).sessions() as session:
            create_study(session, read_study_file(write_study_file(tmp_path, demo_stimuli, "demo", **STUDY)))
            auth.create_user(session, "alice", PASSWORD)
            session.commit()
        assert (lab / "secret_key").is_file() and (lab / "perceptlab.db").is_file()
        raw_ids = []
        for k in range(3):
            worker = WorkerClient(app.test_client(), "demo", worker_id=f"WPSEUDO{k}")
            worker.start()
            worker.answer_page(worker.correct_side)  # the quiz: its votes are exported as gold rows
            raw_ids.append(worker.worker_id)
        raw_ids += add_votes(app, "demo", honest=2, pairs_per_worker=None)  # every set's pairs: analysable
        admin = app.test_client()
        assert log_in(admin).status_code == 303
        summary = admin.get("/admin/api/studies/demo/summary").get_json()
        dashboard = {row["worker_id"] for row in summary["workers"]}
        download = admin.get("/admin/studies/demo/votes.csv").get_data(as_text=True)
    finally:
        app_services(app).engine.dispose()
    assert len(dashboard) == 5 and not any(raw in json.dumps(summary) for raw in raw_ids)

    monkeypatch.chdir(tmp_path)
    result = _run("--instance", "lab", "export", "demo", "--out", "export")
    assert result.exit_code == 0, result.output
    exported = (tmp_path / "export" / "votes.csv").read_text()
    assert exported == download
    assert _pseudonyms(exported) == dashboard
    result = _run("results", "demo", "--out", "results", "--no-plots", "--bootstrap", "0", "--allow-disconnected",
                  env={"PERCEPTLAB_INSTANCE": str(lab)})
    assert result.exit_code == 0, result.output
    assert _pseudonyms((tmp_path / "results" / "votes.csv").read_text()) == dashboard
    assert "1/3 MTurk: no HITs (plain links only)" in result.output and re.search(r"^\s+1\s+true_flow", result.output,
                                                                                    re.M)


def _pseudonyms(votes_csv: str) -> set[str]:
    return {line.split(",")[0] for line in votes_csv.splitlines()[1:]}


# ---------------------------------------------------------------- what the demo prints

def test_the_demos_next_steps_work_as_printed_from_any_folder(tmp_path, demo_stimuli):
    """The demo's suggested commands name the console script and the instance folder by absolute path:
    pasted into a shell anywhere, without an activated venv, they find the demo's database."""
    from server.cli.cmd_server import demo_next_steps

    out = tmp_path / "demo_output"
    instance = out / "instance"
    study_file = write_study_file(tmp_path, demo_stimuli, "demo", **STUDY)
    assert _run("--instance", str(instance), "study", "create", str(study_file)).exit_code == 0
    lines = demo_next_steps("http://127.0.0.1:5999", out, instance)
    commands = {m.group(1): m.group(2) for m in (re.match(r"\s+([a-z ]+):\s+(.+)", line) for line in lines) if m}
    assert set(commands) == {"fill it with workers", "export and analyse", "any other command"}
    for command in commands.values():
        program = shlex.split(command)[0]
        assert Path(program).is_absolute() and os.access(program, os.X_OK), command
    assert f"--instance {instance} results demo --out {out / 'results'}" in commands["export and analyse"]

    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PERCEPTLAB_", "VIRTUAL_ENV"))}
    environment["PATH"] = "/usr/bin:/bin"  # no venv on the PATH
    listed = subprocess.run(commands["any other command"].split("   (or:")[0], shell=True, cwd=elsewhere,
                            env=environment, capture_output=True, text=True, timeout=300)  # a guard, not a speed limit
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^demo\s+active", listed.stdout, re.M)
    assert not any(elsewhere.iterdir())


def test_a_server_database_must_hold_perceptlab_tables_and_be_reachable(postgres_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _run("study", "list", "--database-url", postgres_url)  # migrated: a perceptlab database
    assert result.exit_code == 0 and "no studies yet" in result.output, result.output
    result = _run("study", "list", env={"PERCEPTLAB_DATABASE_URL": "postgresql+psycopg://nobody:pw@127.0.0.1:1/x"})
    assert result.exit_code == 2 and result.output.startswith(
        "error: cannot open the database postgresql+psycopg://nobody:***@127.0.0.1:1/x (from PERCEPTLAB_DATABASE_URL)")
    assert "pw" not in result.output and not any(tmp_path.iterdir())
