"""The ``perceptlab`` command line.

Each ``cmd_*.py`` module in this package attaches its commands to :data:`cli`.
Modules import their heavy dependencies inside the command functions, so
``perceptlab --help`` stays fast.
"""
from __future__ import annotations

import importlib
import pkgutil

import click

from analysis import __version__


class UserError(click.ClickException):
    """Bad input from the user: one line on stderr, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="perceptlab")
def cli() -> None:
    """perceptlab: crowdsourced psychophysics, from stimuli to scale values."""


for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("cmd_")):
    importlib.import_module(f"{__name__}.{_module}")


def main() -> None:
    cli(prog_name="perceptlab")
