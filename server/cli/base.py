"""The ``perceptlab`` root command group and what every command shares.

The group's callback reads the configuration once per invocation and keeps it in the click
context; commands reach it through :func:`cli_config` and open the database through
:func:`cli_session`, whose URL follows the one rule of :func:`server.db.database_url`.
The ``cmd_*`` modules import this module, never the package ``server.cli`` (which imports them),
so the command modules and the package form no import circle.
"""
from __future__ import annotations

import tomllib
from contextlib import AbstractContextManager
from typing import Any

import click

from analysis import __version__


class UserError(click.ClickException):
    """Bad input from the user: one line on stderr, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="perceptlab")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """perceptlab: crowdsourced psychophysics, from stimuli to scale values."""
    if ctx.obj is None:  # a caller may pass a configuration in (``cli.main(obj=...)``)
        ctx.obj = _read_config()


def _read_config() -> dict[str, Any]:
    """The configuration of this run: the package defaults, ``PERCEPTLAB_CONFIG``, ``PERCEPTLAB_*``."""
    from server.config import load_config

    try:
        return load_config()
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:  # TOMLDecodeError is a ValueError; named for clarity
        raise UserError(f"configuration: {exc}") from None


def cli_config() -> dict[str, Any]:
    """The configuration read by the ``perceptlab`` group for the running command.

    Returns
    -------
    dict
        Nested sections (``analysis``, ``server``, ``storage``, ``mturk``...), as from
        :func:`server.config.load_config`.

    Raises
    ------
    RuntimeError
        Called outside a ``perceptlab`` command.
    """
    ctx = click.get_current_context()
    root = ctx.find_root()
    if root.obj is None:  # a subcommand invoked on its own (``analyze_command.main()``)
        root.obj = _read_config()
    return root.obj


def cli_database_url(explicit: str | None = None) -> str:
    """The database of the running command: ``--database-url``, else the rule of :func:`server.db.database_url`."""
    from server.db import database_url

    return database_url(cli_config().get("server", {}), explicit)


def cli_session(explicit_url: str | None = None) -> AbstractContextManager:
    """A database session for the running command (migrations applied first); commits on success,
    rolls back on any error. ``explicit_url`` is the command's ``--database-url``, if given."""
    from server.db import session_scope

    return session_scope(cli_database_url(explicit_url))
