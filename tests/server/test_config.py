"""Configuration: defaults shipped inside the package, read once per run and passed down."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

from click.testing import CliRunner

import server
from server import config as config_module
from server.cli import cli

ROOT = Path(__file__).resolve().parent.parent.parent


def test_the_defaults_ship_inside_the_package():
    package = Path(server.__file__).resolve().parent
    assert config_module.DEFAULT_CONFIG.parent == package and config_module.DEFAULT_CONFIG.is_file()
    assert config_module.PRODUCTION_EXAMPLE.parent == package and config_module.PRODUCTION_EXAMPLE.is_file()
    with open(ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["server"]
    assert {config_module.DEFAULT_CONFIG.name, config_module.PRODUCTION_EXAMPLE.name} <= set(package_data)
    defaults = config_module.load_config({})
    assert {"analysis", "server", "storage", "mturk"} <= set(defaults)


def test_a_command_reads_the_configuration_once(tmp_path, monkeypatch):
    """`perceptlab analyze` takes eight option defaults from [analysis]: one reading serves them all."""
    calls = []
    original = config_module.load_config

    def counting(environ=None, instance=None):
        calls.append(1)
        return original(environ, instance)

    monkeypatch.setattr(config_module, "load_config", counting)
    runner = CliRunner()
    simulated = runner.invoke(cli, ["simulate-votes", "--out", str(tmp_path / "study"), "--sets", "1", "--items", "8",
                                    "--degree", "4", "--votes-per-pair", "3", "--workers", "10"])
    assert simulated.exit_code == 0, simulated.output
    calls.clear()
    result = runner.invoke(cli, ["analyze", str(tmp_path / "study" / "votes.csv"), "--out", str(tmp_path / "out"),
                                 "--no-plots", "--keep", "none"], env={"PERCEPTLAB_ANALYSIS_BOOTSTRAP": "3"})
    assert result.exit_code == 0, result.output
    assert len(calls) == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["parameters"]["bootstrap"] == 3  # the environment's override reached the option default


def test_a_broken_configuration_is_one_line_of_error(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n")
    result = CliRunner().invoke(cli, ["db", "upgrade", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"],
                                env={"PERCEPTLAB_CONFIG": str(broken)})
    assert result.exit_code == 2 and result.output.startswith("error: configuration:"), result.output
    result = CliRunner().invoke(cli, ["db", "upgrade", "--database-url", f"sqlite:///{tmp_path / 'x.db'}"],
                                env={"PERCEPTLAB_SERVER_PORT": "many"})
    assert result.exit_code == 2 and "PERCEPTLAB_SERVER_PORT" in result.output, result.output


def test_one_database_url_rule(tmp_path):
    from server.db import database_url

    instance = tmp_path / "instance"
    server_settings = {"database_url": "", "instance_path": str(instance)}
    assert database_url(server_settings, environ={}) == f"sqlite:///{instance.resolve() / 'perceptlab.db'}"
    assert not instance.exists()  # naming the default database makes nothing
    assert database_url(server_settings, environ={"PERCEPTLAB_DATABASE_URL": "sqlite:///env.db"}) == "sqlite:///env.db"
    configured = {**server_settings, "database_url": "sqlite:///configured.db"}
    assert database_url(configured, environ={}) == "sqlite:///configured.db"
    # The environment wins over configuration files (as PERCEPTLAB_<SECTION>_<KEY> do), a command's flag over both.
    assert database_url(configured, environ={"PERCEPTLAB_DATABASE_URL": "sqlite:///env.db"}) == "sqlite:///env.db"
    assert database_url(configured, "sqlite:///explicit.db", environ={"PERCEPTLAB_DATABASE_URL": "x"}) == \
        "sqlite:///explicit.db"
