"""``perceptlab storage upload | check``: stimuli in an S3 bucket (``[storage] backend = "s3"``)."""
from __future__ import annotations

import click

from .base import UserError, cli
from .cmd_study import DATABASE_OPTION

S3_SETTINGS = ('set [storage] backend = "s3" and bucket (and endpoint_url for non-AWS stores) in the file '
               "named by PERCEPTLAB_CONFIG, or PERCEPTLAB_STORAGE_BACKEND=s3 and PERCEPTLAB_STORAGE_BUCKET=...; "
               "credentials go in AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY")


@cli.group("storage")
def storage_group() -> None:
    """Stimulus storage: upload studies' stimuli to S3 and check the bucket."""


def _s3_storage():
    from server.cli.base import cli_config
    from server.storage import S3Storage, StorageError, make_storage

    try:
        storage = make_storage(cli_config())
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
@click.option("--prune", is_flag=True,
              help="Delete objects under the study's prefix that it does not show (e.g. from older uploads).")
def upload(study: str, database_url: str | None, progress: bool | None, prune: bool) -> None:
    """Upload the files STUDY shows to the S3 bucket, under opaque names (unchanged files are skipped).

    Only the images trials and worker pages show go up (no flow files, manifests or other files of
    the stimulus folder), each under a name that tells nothing about it.
    """
    from server.cli.base import cli_session
    from server.cli.cmd_export import server_secret_key
    from server.cli.cmd_study import _find
    from server.stimulus_index import SALT_KEY, StimulusIndex
    from server.storage import StorageError

    storage = _s3_storage()
    with cli_session(database_url) as session:
        found = _find(session, study)
        if not found.config.get(SALT_KEY):  # an older study: names come from the server's secret key
            secret, existed = server_secret_key()
            if not existed:
                raise UserError("this study's stimulus names derive from the server's secret key, and none was "
                                "found: set PERCEPTLAB_SECRET_KEY (or [server] instance_path) as the server has it")
        else:
            secret = ""
        index = StimulusIndex.build(session, found, secret)
    try:
        report = storage.upload_files(index.root, index.slug, index.paths, progress=progress, prune=prune)
    except StorageError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"{index.slug}: {report.summary()}")
    click.echo(f"  to s3://{storage.bucket}/{storage.key(index.slug, '')}/ ({storage.endpoint_url or 'AWS S3'})")
    if report.deleted:
        click.echo(f"  deleted {len(report.deleted)} object(s) the study does not show")
    elif report.stale:
        click.echo(f"  warning: {len(report.stale)} object(s) under this prefix are not shown by the study "
                   "(older uploads?); remove them with --prune")


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
    click.echo(f"keys: {storage.key('<study>', '<name>')}")
    click.echo(f"URLs: {storage.url_form()}")
