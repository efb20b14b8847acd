"""The ``perceptlab`` root command group.

The group's callback reads the configuration once per invocation (with the instance folder of
``--instance``) and keeps it in the click context; what the commands share (:class:`UserError`,
:func:`cli_config`, :func:`cli_session`...) lives one floor down, in :mod:`server.command_support`, so
that paradigm packages declare their commands without importing ``server/cli/``; this module re-exports it.
The ``cmd_*`` modules import this module, never the package ``server.cli`` (which imports them),
so the command modules and the package form no import circle.
"""
from __future__ import annotations

import click

from analysis import __version__

from ..command_support import (FINITE_FLOAT, INSTANCE_HELP, FiniteFloatRange, ServerURL, UserError, _read_config,
                               cli_config, cli_database, cli_database_url, cli_instance, cli_secret_key, cli_session,
                               require_database, where_looked)

__all__ = ["FINITE_FLOAT", "INSTANCE_HELP", "FiniteFloatRange", "ServerURL", "UserError", "cli", "cli_config",
           "cli_database", "cli_database_url", "cli_instance", "cli_secret_key", "cli_session", "require_database",
           "where_looked"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="perceptlab")
@click.option("--instance", type=click.Path(file_okay=False), default=None, metavar="DIR", help=INSTANCE_HELP)
@click.pass_context
def cli(ctx: click.Context, instance: str | None) -> None:
    """perceptlab: crowdsourced psychophysics, from stimuli to scale values.

    Every command works on one deployment, its instance folder (--instance DIR, else the environment
    variable PERCEPTLAB_INSTANCE, else [server] instance_path of the file named in PERCEPTLAB_CONFIG,
    else ./instance). Commands that only read (export, results, study list...) never create a database
    or a secret key: without them they stop and say where they looked.
    """
    if ctx.obj is None:  # a caller may pass a configuration in (``cli.main(obj=...)``)
        ctx.obj = _read_config(instance)


