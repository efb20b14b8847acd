"""``perceptlab user add | passwd | list``: experimenter accounts for the dashboard."""
from __future__ import annotations

import sys

import click

from .base import UserError, cli
from .cmd_study import DATABASE_OPTION

PASSWORD_STDIN = click.option("--password-stdin", is_flag=True,
                              help="Read the password from the first line of stdin (for scripts) instead of prompting.")


@cli.group("user")
def user_group() -> None:
    """Manage experimenter accounts (log in at /admin/)."""


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line
    return click.prompt("Password", hide_input=True, confirmation_prompt="Repeat the password")


@user_group.command("add")
@click.argument("username")
@PASSWORD_STDIN
@DATABASE_OPTION
def add(username: str, password_stdin: bool, database_url: str | None) -> None:
    """Create the account USERNAME (asks for the password twice, hidden)."""
    from server.auth import AccountError, create_user
    from server.cli.base import cli_session

    password = _read_password(password_stdin)
    try:
        with cli_session(database_url, create=True) as session:
            create_user(session, username, password)
    except AccountError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"created user {username!r}; log in at /admin/login")


@user_group.command("passwd")
@click.argument("username")
@PASSWORD_STDIN
@DATABASE_OPTION
def passwd(username: str, password_stdin: bool, database_url: str | None) -> None:
    """Set a new password for USERNAME (logs out their open sessions)."""
    from server.auth import AccountError, find_user, set_password
    from server.cli.base import cli_session

    try:
        with cli_session(database_url) as session:
            user = find_user(session, username)
            if user is None:  # say so before asking for a password
                raise AccountError(f"no user named {username!r}")
            set_password(user, _read_password(password_stdin))
    except AccountError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"password of {username!r} changed")


@user_group.command("list")
@DATABASE_OPTION
def list_users(database_url: str | None) -> None:
    """List the experimenter accounts."""
    from sqlalchemy import select

    from server.cli.base import cli_session
    from server.models import User

    with cli_session(database_url) as session:
        users = session.execute(select(User.username, User.created_at).order_by(User.username)).all()
    if not users:
        click.echo("no users yet: perceptlab user add NAME")
    for name, created in users:
        click.echo(f"{name:32} created {created:%Y-%m-%d %H:%M}")
