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

    storage = _s3_storage()
    with cli_session(database_url) as session:
        index = study_stimulus_index(session, study)
    report = upload_index(storage, index, progress=progress, prune=prune)
    report_upload(storage, index.slug, report)


def study_stimulus_index(session, slug: str):
    """The :class:`~server.stimulus_index.StimulusIndex` of study ``slug``: the files it shows, by the
    names the server gives them (a study from before per-study salts: names from the server's secret key)."""
    from server.cli.base import cli_secret_key
    from server.cli.cmd_study import _find
    from server.stimulus_index import SALT_KEY, StimulusIndex

    found = _find(session, slug)
    secret = "" if found.config.get(SALT_KEY) else cli_secret_key()
    return StimulusIndex.build(session, found, secret)


def upload_index(storage, index, *, progress: bool | None = None, prune: bool = False):
    """Upload what ``index`` shows to the S3 ``storage`` (unchanged files skipped); storage errors
    become one-line UserErrors."""
    from server.storage import StorageError

    try:
        return storage.upload_files(index.root, index.slug, index.paths, progress=progress, prune=prune)
    except StorageError as exc:
        raise UserError(str(exc)) from None


def report_upload(storage, slug: str, report) -> None:
    click.echo(f"{slug}: {report.summary()}")
    click.echo(f"  to s3://{storage.bucket}/{storage.key(slug, '')}/ ({storage.endpoint_url or 'AWS S3'})")
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
