"""``perceptlab storage upload | check``: stimuli in an S3 bucket (``[storage] backend = "s3"``)."""
from __future__ import annotations

import click

from . import UserError, cli
from .cmd_study import DATABASE_OPTION

S3_SETTINGS = ('set [storage] backend = "s3" and bucket (and endpoint_url for non-AWS stores) in the file '
               "named by PERCEPTLAB_CONFIG, or PERCEPTLAB_STORAGE_BACKEND=s3 and PERCEPTLAB_STORAGE_BUCKET=...; "
               "credentials go in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")


@cli.group("storage")
def storage_group() -> None:
    """Stimulus storage: upload studies' stimuli to S3 and check the bucket."""


def _s3_storage():
    from server.config import load_config
    from server.storage import S3Storage, StorageError, make_storage

    try:
        storage = make_storage(load_config())
    except (StorageError, ValueError) as exc:
        raise UserError(str(exc)) from None
    if not isinstance(storage, S3Storage):
        raise UserError(f"the storage backend is not s3: {S3_SETTINGS}")
    return storage


@storage_group.command("upload")
@click.argument("study")
@DATABASE_OPTION
@click.option("--progress/--no-progress", default=None,
              help="Show a progress bar (default: when stderr is a terminal).")
def upload(study: str, database_url: str | None, progress: bool | None) -> None:
    """Upload STUDY's stimulus folder to the S3 bucket (files already there unchanged are skipped)."""
    from server.cli._db import cli_session
    from server.cli.cmd_study import _find
    from server.storage import StorageError

    storage = _s3_storage()
    with cli_session(database_url) as session:
        found = _find(session, study)
        slug, root = found.slug, found.stimulus_root
    try:
        report = storage.upload_folder(root, slug, progress=progress)
    except StorageError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"{slug}: {report.summary()}")
    click.echo(f"  to s3://{storage.bucket}/{storage.key(slug, '')}/ ({storage.endpoint_url or 'AWS S3'})")


@storage_group.command("check")
def check() -> None:
    """Check access to the configured bucket and show the form of the URLs workers get."""
    from server.storage import StorageError

    storage = _s3_storage()
    try:
        storage.check()
    except StorageError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"{storage.where}: ok (head_bucket)")
    click.echo(f"keys: {storage.key('<study>', '<path>')}")
    click.echo(f"URLs: {storage.url_form()}")
