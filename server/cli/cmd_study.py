"""``perceptlab study create | list | show | pause | resume | template | links``."""
from __future__ import annotations

import click

from .base import UserError, cli

DATABASE_OPTION = click.option("--database-url", default=None,
                               help="Database URL (default: $PERCEPTLAB_DATABASE_URL, else [server] database_url, "
                                    "else perceptlab.db in the instance folder, see --instance).")


@cli.group("study")
def study_group() -> None:
    """Create and manage studies (stored in the server's database)."""


@study_group.command("create")
@click.argument("study_file", type=click.Path(dir_okay=False))
@DATABASE_OPTION
def create(study_file: str, database_url: str | None) -> None:
    """Create a study from STUDY_FILE (TOML; `perceptlab study template` prints a documented one).

    The consent text's {researcher} and {contact} must be filled in ([texts] researcher, contact)."""
    from server.cli.base import cli_session
    from server.cli.pay import time_and_wage
    from server.paradigms import StudyDefinitionError, create_study, read_study_file
    from server.paradigms.consent import check_consent_filled
    from server.paradigms.entry import mturk_question_url

    try:
        spec = read_study_file(study_file)
        check_consent_filled(spec, study_file)  # workers must see who runs the study and whom to ask
        with cli_session(database_url, create=True) as session:
            study = create_study(session, spec)
            summary = _summary(session, study)
            time_line, wage_warning = time_and_wage(session, study)
            # HITs posted outside perceptlab need the URL with the study's access key and MTurk signature.
            hit_url = mturk_question_url(study, spec, "https://HOST")
    except StudyDefinitionError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"created study {spec.slug!r}: {summary}")
    click.echo(time_line)
    if wage_warning:
        click.echo(wage_warning, err=True)
    if spec.external_hits:
        click.echo(f"HIT URL (ExternalQuestion): {hit_url}  (MTurk appends assignmentId, hitId, workerId, "
                   "turkSubmitTo)")
    else:
        click.echo(f"worker link: /s/{spec.slug}  (MTurk entries need a HIT posted with perceptlab mturk launch; "
                   "[entry] external_hits = true admits HITs posted elsewhere)")
    if spec.recruiter == "prolific":  # Prolific fills in its {{%...%}} placeholders itself
        key = f"&key={spec.access_key}" if spec.access_key else ""
        click.echo(f"Prolific study URL: https://HOST/s/{spec.slug}?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}"
                   f"&STUDY_ID={{{{%STUDY_ID%}}}}&SESSION_ID={{{{%SESSION_ID%}}}}{key}  (completion code "
                   f"{spec.completion_code}: the end page returns participants to Prolific with it)")
    elif spec.signed_links or spec.access_key or not spec.allow_anonymous:
        click.echo(f"plain links need ?participant=ID: perceptlab study links {spec.slug} ID... prints them")


@study_group.command("template")
@click.option("--kind", default=None, help="The paradigm: pc (paired comparison, the default) or motion.")
@click.option("--motion", "kind", flag_value="motion", help="A motion-matching study (clip manifests): --kind motion.")
def template(kind: str | None) -> None:
    """Print a documented study.toml with every key at its default."""
    from server.paradigms import DEFAULT_KIND, known_kinds, paradigm_named

    kind = kind or DEFAULT_KIND
    if kind not in known_kinds():
        raise UserError(f"no paradigm {kind!r} (known: {', '.join(known_kinds())})")
    click.echo(paradigm_named(kind).template, nl=False)


@study_group.command("list")
@DATABASE_OPTION
def list_studies(database_url: str | None) -> None:
    """List studies with their status and vote counts."""
    from sqlalchemy import select

    from server.cli.base import cli_session
    from server.models import Study

    with cli_session(database_url) as session:
        studies = list(session.scalars(select(Study).order_by(Study.id)))
        if not studies:
            click.echo("no studies yet: perceptlab study create study.toml")
        for study in studies:
            click.echo(f"{study.slug:24} {study.status:7} {_summary(session, study)}  {study.name}")


@study_group.command("show")
@click.argument("slug")
@DATABASE_OPTION
def show(slug: str, database_url: str | None) -> None:
    """Show a study's parameters and progress."""
    from server.cli.base import cli_session
    from server.cli.pay import time_and_wage

    with cli_session(database_url) as session:
        study = _find(session, slug)
        click.echo(f"{study.slug}: {study.name} ({study.status}), created {study.created_at:%Y-%m-%d %H:%M}")
        click.echo(f"stimuli: {study.stimulus_root}")
        click.echo(_summary(session, study))
        click.echo(time_and_wage(session, study)[0])
        for key, value in study.config.items():
            if key not in ("consent", "instructions", "base_dir", "stimulus_salt"):
                click.echo(f"  {key} = {value!r}")


@study_group.command("pause")
@click.argument("slug")
@DATABASE_OPTION
def pause(slug: str, database_url: str | None) -> None:
    """Stop new workers from starting (workers already in the study can finish)."""
    _set_status(slug, "paused", database_url)


@study_group.command("resume")
@click.argument("slug")
@DATABASE_OPTION
def resume(slug: str, database_url: str | None) -> None:
    """Let new workers start again."""
    _set_status(slug, "active", database_url)


@study_group.command("links")
@click.argument("slug")
@click.argument("participants", nargs=-1)
@click.option("--from-file", "from_file", type=click.File("r"), default=None,
              help="Read participant IDs from this file, one per line ('-' = standard input).")
@click.option("--base-url", default="", help="Prefix of the links, e.g. https://lab.example.org (default: none).")
@DATABASE_OPTION
def links(slug: str, participants: tuple[str, ...], from_file, base_url: str, database_url: str | None) -> None:
    """Print one plain study link per participant ID (signed when the study has [entry] signed_links,
    with its access key when it has one), tab-separated after the ID."""
    import re

    from server.cli.base import cli_session
    from server.paradigms import spec_from_config
    from server.paradigms.entry import participant_link

    ids = list(participants)
    if from_file is not None:
        ids += [line.strip() for line in from_file if line.strip() and not line.lstrip().startswith("#")]
    if not ids:
        raise UserError("name participant IDs (perceptlab study links SLUG ID...) or --from-file ids.txt")
    bad = [i for i in ids if not re.fullmatch(r"[A-Za-z0-9_.:@-]{1,200}", i)]
    if bad:
        raise UserError(f"participant IDs may hold letters, digits and _.:@- only (at most 200): {bad[0]!r}")
    with cli_session(database_url) as session:
        study = _find(session, slug)
        spec = spec_from_config(study.config)
        if spec.signed_links and not study.entry_secret:
            raise UserError(f"study {slug!r} has no link key (run `perceptlab db upgrade`)")
        for participant in ids:
            click.echo(f"{participant}\t{participant_link(study, spec, participant, base_url)}")


def _set_status(slug: str, status: str, database_url: str | None) -> None:
    from server.cli.base import cli_session

    with cli_session(database_url) as session:
        _find(session, slug).status = status
    click.echo(f"{slug}: {status}")


def _find(session, slug: str):
    from sqlalchemy import select

    from server.models import Study

    study = session.scalar(select(Study).where(Study.slug == slug))
    if study is None:
        known = ", ".join(session.scalars(select(Study.slug))) or "none"
        raise UserError(f"no study {slug!r} (known: {known})")
    return study


def _summary(session, study) -> str:
    from server.paradigms import paradigm_for

    return paradigm_for(study).summary_line(session, study.id)
