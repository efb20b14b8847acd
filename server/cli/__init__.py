"""The ``perceptlab`` command line.

Each ``cmd_*.py`` module in this package attaches its commands to :data:`cli`
(defined in :mod:`server.cli.base`), and so does the ``cli.py`` of each paradigm package
(``server/paradigms/<package>/cli.py``, such as the rating paradigm's ``analyze-ratings``), whose
``COMMANDS`` this package adds to the group: those are found by their files, so that neither the paradigms nor
their registry are imported to list them, and the paradigm packages never import this package (they build their
commands with :mod:`server.command_support`). Modules import their heavy dependencies inside
the command functions, so ``perceptlab --help`` stays fast. The configuration is read
once per run, by the group's callback, and handed to the commands through the click
context (:func:`~server.cli.base.cli_config`).
"""
from __future__ import annotations

import importlib
import pkgutil
import warnings
from pathlib import Path

from .base import UserError, cli, cli_config, cli_database_url, cli_session

__all__ = ["UserError", "cli", "cli_config", "cli_database_url", "cli_session", "main"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("cmd_")):
    importlib.import_module(f"{__name__}.{_module}")

PARADIGMS_DIR = Path(__file__).resolve().parent.parent / "paradigms"
for _package in sorted(p.parent.name for p in PARADIGMS_DIR.glob("*/cli.py") if p.parent.name.isidentifier()):
    for _command in importlib.import_module(f"server.paradigms.{_package}.cli").COMMANDS:
        cli.add_command(_command)


def _one_line(message, category, filename, lineno, line=None) -> str:
    # A warning meant for the user (a plot's missing font, say) reads as one line, not as a source location.
    return f"warning: {message}\n"


def main() -> None:
    """The console script: run the command line (the group reads the configuration once)."""
    warnings.formatwarning = _one_line
    cli(prog_name="perceptlab")
