"""What every ``perceptlab`` command shares, below the command line itself: the one-line :class:`UserError`,
the finite float and URL option types, and the running command's configuration (:func:`cli_config`),
instance folder, database session (:func:`cli_session`) and secret key.

The configuration is read once per invocation by the root group (:mod:`server.cli.base`) and kept in the
click context; :func:`cli_session` opens the database whose URL follows the one rule of
:func:`server.db.database_url`; read-only commands never make a database (:func:`require_database`) nor a
secret key (:func:`cli_secret_key`).

This module is part of the server's floor, not of ``server/cli/``: a paradigm package declares its own
commands (``server/paradigms/<package>/cli.py``, a ``COMMANDS`` tuple of plain click commands, which
:mod:`server.cli` adds to the group) with these helpers, and never imports ``server/cli/`` (ARCHITECTURE.md,
Layers; tests/test_architecture.py).
"""
import math
import tomllib
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click


class UserError(click.ClickException):
    """Bad input from the user: one line on stderr, exit code 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


class FiniteFloatRange(click.FloatRange):
    """:class:`click.FloatRange` that also refuses NaN and infinities (``nan``, ``inf``, ``1e999``), which every
    comparison of a plain range lets through; ``--x 1e308`` then fails at its declared bound, not in the
    arithmetic downstream. Every float option of the CLI takes this type (tests/server/test_bad_cli_input.py
    checks that none is left a plain float)."""

    name = "float"

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx)  # a float even when the range has no bounds
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


FINITE_FLOAT = FiniteFloatRange()


class ServerURL(click.ParamType):
    """An ``http://`` or ``https://`` URL with a host (``--url``): workers' links are built on it, so
    ``127.0.0.1:5051`` (no scheme) is refused instead of printing links no browser opens."""

    name = "URL"

    def convert(self, value, param, ctx):
        from urllib.parse import urlsplit

        text = str(value).strip()
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            self.fail(f"{value!r} is not a URL.", param, ctx)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self.fail(f"{value!r} needs its scheme and host, like https://study.example.org or "
                      "http://127.0.0.1:5000.", param, ctx)
        return text


INSTANCE_HELP = ("The deployment's instance folder: its SQLite database, secret key, prepared stimuli and "
                 "optional config.toml. Default: $PERCEPTLAB_INSTANCE, else [server] instance_path, else "
                 "./instance. `perceptlab demo` prints its own.")



def _read_config(instance: str | None = None) -> dict[str, Any]:
    """The configuration of this run: the package defaults, ``PERCEPTLAB_CONFIG``, the instance folder's
    config.toml, ``PERCEPTLAB_*`` (see :mod:`server.config`)."""
    from server.config import load_config

    try:
        return load_config(instance=instance)
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


def cli_instance() -> Path:
    """The running command's instance folder (absolute; it may not exist yet)."""
    return Path(cli_config().get("server", {}).get("instance_path", "instance")).absolute()


def cli_database(explicit: str | None = None) -> tuple[str, str]:
    """The running command's database URL and how it was chosen (:func:`server.db.resolve_database`)."""
    from server.db import resolve_database

    return resolve_database(cli_config().get("server", {}), explicit)


def cli_database_url(explicit: str | None = None) -> str:
    """The database of the running command: ``--database-url``, else the rule of :func:`server.db.database_url`."""
    return cli_database(explicit)[0]


def where_looked(url: str, chosen_by: str) -> str:
    """"DATABASE (the URL of X)" or "FILE in the instance folder DIR (chosen by ...)", for errors."""
    from server.config import describe_instance
    from server.db import INSTANCE_DATABASE, safe_url, sqlite_path

    path = sqlite_path(url)
    shown = str(path) if path is not None else safe_url(url)
    if chosen_by == INSTANCE_DATABASE:
        return f"{shown}, the database of {describe_instance(cli_config())}"
    return f"{shown} (from {chosen_by})"


def require_database(explicit: str | None = None) -> str:
    """The running command's database URL, which must exist already (read-only commands never make one).

    Raises
    ------
    UserError
        No database there: the message says where the command looked and how that place was chosen.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from server.db import database_exists

    url, chosen_by = cli_database(explicit)
    try:
        exists = database_exists(url)
    except SQLAlchemyError as exc:
        raise UserError(f"cannot open the database {where_looked(url, chosen_by)}: "
                        f"{str(exc.orig if getattr(exc, 'orig', None) else exc).strip().splitlines()[0]}") from None
    if not exists:
        raise UserError(f"no perceptlab database at {where_looked(url, chosen_by)}. Name the deployment's "
                        "instance folder: perceptlab --instance DIR ... (or PERCEPTLAB_INSTANCE=DIR; the demo's "
                        "is demo_output/instance), or give --database-url; `perceptlab study create` or "
                        "`perceptlab launch` make a new one")
    return url


def cli_session(explicit_url: str | None = None, *, create: bool = False) -> AbstractContextManager:
    """A database session for the running command (migrations applied first); commits on success,
    rolls back on any error. ``explicit_url`` is the command's ``--database-url``, if given.

    Only commands that set up a deployment (``study create``, ``user add``, ``launch``, ``db upgrade``)
    pass ``create=True``; for every other command a missing database is a :class:`UserError` saying
    where it was looked for (:func:`require_database`).
    """
    from server.db import INSTANCE_DATABASE, session_scope

    if not create:
        return session_scope(require_database(explicit_url))
    url, chosen_by = cli_database(explicit_url)
    if chosen_by == INSTANCE_DATABASE or not cli_config().get("instance", {}).get("chosen_by", "").startswith(
            "the default"):
        cli_secret_key(create=True)  # a new deployment is whole: the server and later exports share this key
    return session_scope(url)


def cli_secret_key(*, create: bool = False) -> str:
    """The deployment's secret key, found as the server finds it (:func:`server.config.find_secret_key`):
    it keys the worker pseudonyms of exports and the stimulus names of older studies.

    Raises
    ------
    UserError
        None exists and ``create`` is false: a new key would make pseudonyms that differ from the
        dashboard's, so the message says where the key was looked for instead.
    """
    from server.config import describe_instance, find_secret_key, secret_key

    server = cli_config().get("server", {})
    if create:
        return secret_key(server)
    key, where = find_secret_key(server)
    if key is None:
        raise UserError(f"no secret key at {where} ({describe_instance(cli_config())}, and PERCEPTLAB_SECRET_KEY "
                        "is not set): the server's key makes the worker pseudonyms, so name the instance folder the "
                        "server uses (perceptlab --instance DIR) or set PERCEPTLAB_SECRET_KEY as the server has it")
    return key


VIEWING_PASSED_HELP = ("Keep only the responses of workers who passed the study's [viewing] checks (viewing_passed = 1 "
                       "in the workers.csv of --workers: the export's workers_meta.csv).")


def keep_viewing_passed(table, workers_csv: Path | None):
    """``table`` (votes or ratings) with only the rows of workers who passed the ``[viewing]`` checks, as
    ``--workers WORKERS_CSV --viewing-passed`` of ``analyze`` and ``analyze-ratings`` ask (analysis/viewing.py)."""
    from analysis.viewing import keep_workers, viewing_passed

    if workers_csv is None:
        raise UserError("--viewing-passed reads each worker's viewing_passed from --workers (workers_meta.csv)")
    try:
        return keep_workers(table, viewing_passed(workers_csv))
    except (OSError, ValueError) as exc:
        raise UserError(str(exc)) from None
