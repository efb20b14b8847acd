"""``perceptlab study create | list | show | check-stopping | pause | resume | template | links | pilot | reset | delete``."""
from __future__ import annotations

import click

from ..paradigms import DEFAULT_KIND, PARADIGM_MODULES
from .base import UserError, cli
from .window import ALLOW_OPTION_HELP

DATABASE_OPTION = click.option("--database-url", default=None,
                               help="Database URL (default: $PERCEPTLAB_DATABASE_URL, else [server] database_url, "
                                    "else perceptlab.db in the instance folder, see --instance).")


@cli.group("study")
def study_group() -> None:
    """Create and manage studies (stored in the server's database)."""


@study_group.command("create")
@click.argument("study_file", type=click.Path(dir_okay=False))
@click.option("--allow-large-window", is_flag=True, help=ALLOW_OPTION_HELP)
@DATABASE_OPTION
def create(study_file: str, allow_large_window: bool, database_url: str | None) -> None:
    """Create a study from STUDY_FILE (TOML; `perceptlab study template` prints a documented one).

    The consent text's {researcher} and {contact} must be filled in ([texts] researcher, contact).
    Prints the smallest browser window the study's pages need; refuses a study that needs more than a
    1366x768 laptop's window (1366 x 657 inside) unless --allow-large-window."""
    from server.cli.base import cli_session
    from server.cli.pay import time_and_wage
    from server.cli.window import check_window
    from server.paradigms import StudyDefinitionError, create_study, read_study_file
    from server.paradigms.consent import check_consent_filled
    from server.paradigms.entry import mturk_question_url

    try:
        spec = read_study_file(study_file)
        check_consent_filled(spec, study_file)  # workers must see who runs the study and whom to ask
        window = check_window(spec, allow_large_window, study_file)  # before anything is stored
        with cli_session(database_url, create=True) as session:
            study = create_study(session, spec)
            summary = _summary(session, study)
            time_line, wage_warning = time_and_wage(session, study)
            warnings = _warnings(session, study)
            # HITs posted outside perceptlab need the URL with the study's access key and MTurk signature.
            hit_url = mturk_question_url(study, spec, "https://HOST")
    except StudyDefinitionError as exc:
        raise UserError(str(exc)) from None
    click.echo(f"created study {spec.slug!r}: {summary}")
    click.echo(window)
    click.echo(time_line)
    if wage_warning:
        click.echo(wage_warning, err=True)
    for warning in warnings:
        click.echo(warning, err=True)
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
@click.option("--kind", default=None, help=f"The paradigm: {', '.join(PARADIGM_MODULES)} (default {DEFAULT_KIND}).")
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
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: slug, name, kind, status, progress, settings, display (policy, min_window) and "
                   "devices (the device classes admitted), reasons (per reason code: workers turned away and "
                   "entries refused; docs/reasons.md).")
@DATABASE_OPTION
def show(slug: str, as_json: bool, database_url: str | None) -> None:
    """Show a study's parameters and progress."""
    from server.cli.base import cli_session
    from server.cli.pay import time_and_wage
    from server.cli.window import window_line

    with cli_session(database_url) as session:
        study = _find(session, slug)
        if as_json:
            click.echo(_show_json(session, study))
            return
        click.echo(f"{study.slug}: {study.name} ({study.status}), created {study.created_at:%Y-%m-%d %H:%M}")
        click.echo(f"stimuli: {study.stimulus_root}")
        click.echo(_summary(session, study))
        click.echo(time_and_wage(session, study)[0])
        requirement = _requirement(session, study)
        click.echo(window_line(requirement))
        click.echo(f"devices admitted: {', '.join(requirement.devices())}")
        click.echo(_reasons_line(session, study))
        for warning in _warnings(session, study):
            click.echo(warning, err=True)
        for key, value in study.config.items():
            if key not in ("consent", "instructions", "base_dir", "stimulus_salt"):
                click.echo(f"  {key} = {value!r}")
        from server import stopping
        from server.models import StudyStopping

        if stopping.stopping_spec(study) is not None:
            for line in stopping.describe(session.get(StudyStopping, study.id)):
                click.echo(line)


@study_group.command("check-stopping")
@click.argument("slug")
@DATABASE_OPTION
def check_stopping(slug: str, database_url: str | None) -> None:
    """Check the study's [stopping] target and caps now; stop it and tell MTurk and Prolific when one is reached."""
    from server import stopping
    from server.cli.base import cli_session

    with cli_session(database_url) as session:
        study = _find(session, slug)
        if stopping.stopping_spec(study) is None:
            raise UserError(f"study {slug!r} has no [stopping] target or cap")
        record = stopping.check(session, study.id, recruiters=stopping.cli_recruiters())
        for line in stopping.describe(record):
            click.echo(line)


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
@click.option("--preview", is_flag=True,
              help="Print the experimenter's preview link instead: each visit is a new pilot participant who sees "
                   "exactly what a worker sees and counts in nothing (estimates, pay, targets, exports).")
@DATABASE_OPTION
def links(slug: str, participants: tuple[str, ...], from_file, base_url: str, preview: bool,
          database_url: str | None) -> None:
    """Print one plain study link per participant ID (signed when the study has [entry] signed_links,
    with its access key when it has one), tab-separated after the ID; or, with --preview, the preview link."""
    import re

    from server.cli.base import cli_secret_key, cli_session
    from server.paradigms import spec_from_config
    from server.paradigms.entry import participant_link

    if preview:
        from server.pilot import preview_link

        if participants or from_file is not None:
            raise UserError("--preview prints the study's preview link: name no participant IDs with it")
        with cli_session(database_url) as session:
            study = _find(session, slug)
            link = preview_link(cli_secret_key(), study.slug, base_url)
        click.echo(f"preview\t{link}")
        return
    ids = list(participants)
    if from_file is not None:
        ids += [line.strip() for line in from_file if line.strip() and not line.lstrip().startswith("#")]
    if not ids:
        raise UserError("name participant IDs (perceptlab study links SLUG ID...) or --from-file ids.txt, "
                        "or --preview for the experimenter's preview link")
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


@study_group.command("pilot")
@click.argument("slug")
@click.argument("workers", nargs=-1, required=True)
@click.option("--undo", is_flag=True, help="Count these participants as real ones again (never simulated ones: refused).")
@DATABASE_OPTION
def pilot(slug: str, workers: tuple[str, ...], undo: bool, database_url: str | None) -> None:
    """Mark participants of study SLUG as pilots: WORKERS are their platform IDs (MTurk WorkerId,
    participant ID) or the pseudonyms of the exports and the dashboard (w_...).

    A pilot counts in no time estimate, wage, payment plan, MTurk action, dashboard figure or pair target,
    and exports and results leave them out unless --include-pilot."""
    from server.cli.base import cli_secret_key, cli_session
    from server.exports import study_salt
    from server.pilot import SimulatedWorkerError, find_workers, mark_pilot

    with cli_session(database_url) as session:
        study = _find(session, slug)
        try:
            found = find_workers(session, study, list(workers), study_salt(cli_secret_key(), study.slug))
            mark_pilot(session, study, found, pilot=not undo)
        except (LookupError, SimulatedWorkerError) as exc:
            raise UserError(str(exc)) from None
    what = "real participant(s) again" if undo else "pilot participant(s)"
    click.echo(f"{slug}: {len(found)} {what}: {', '.join(w.external_id for w in found)}")


@study_group.command("reset")
@click.argument("slug")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True, help="Reset even when paid work exists (approved MTurk assignments, bonuses, "
                                             "completed assignments of real participants with a completion code).")
@DATABASE_OPTION
def reset(slug: str, yes: bool, force: bool, database_url: str | None) -> None:
    """Delete every participant of study SLUG and all they did (assignments, votes or responses, calibrations,
    running scales); keep the study, its settings, stimuli and HITs."""
    _clear(slug, yes, force, database_url, delete=False)


@study_group.command("delete")
@click.argument("slug")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True, help="Delete even when paid work exists (approved MTurk assignments, bonuses, "
                                             "completed assignments of real participants with a completion code).")
@DATABASE_OPTION
def delete(slug: str, yes: bool, force: bool, database_url: str | None) -> None:
    """Delete study SLUG with its participants, responses and HIT records (its prepared image files stay
    on disk)."""
    _clear(slug, yes, force, database_url, delete=True)


def _clear(slug: str, yes: bool, force: bool, database_url: str | None, *, delete: bool) -> None:
    from server.cli.base import cli_session
    from server.pilot import delete_study, paid_work, participants, reset_study

    verb = "delete" if delete else "reset"
    with cli_session(database_url) as session:
        study = _find(session, slug)
        paid = paid_work(session, study)
        if paid and not force:
            raise UserError(f"study {slug!r} holds paid work ({paid.describe()}): {verb} it only with --force "
                            f"(export it first: perceptlab export {slug} --out DIR)")
        held = participants(session, study)
        what = (f"{held.workers} participant(s) ({held.pilots} pilot), {held.assignments} assignment(s) and "
                f"{held.responses} response(s)")
        question = (f"Delete study {slug!r} with {what}?" if delete
                    else f"Delete {what} of study {slug!r} (the study, its settings and stimuli stay)?")
        if not yes and not click.confirm(question, default=False):
            raise UserError(f"nothing was {'deleted' if delete else 'reset'}")
        (delete_study if delete else reset_study)(session, study)
        sqlite = session.get_bind().dialect.name == "sqlite"
    click.echo(f"{slug}: deleted" + (f" with {what}" if delete else f" {what}; the study is as new"))
    if delete and sqlite:
        # A server process keeps each study's fixed facts (pairs, stimuli) by its number, and SQLite gives the
        # number of the newest study, once deleted, to the next one created.
        click.echo("note: restart a server running on this database before creating another study", err=True)


_SHOW_HIDDEN = ("consent", "instructions", "base_dir", "stimulus_salt", "media")


def _requirement(session, study):
    from server.paradigms import paradigm_for

    return paradigm_for(study).window_requirement(session, study)


def _reasons_line(session, study) -> str:
    """Why workers were turned away (server/reasons.py): per code, workers and refused entries."""
    from server.refusals import reason_counts

    counted = reason_counts(session, study.id)
    if not counted:
        return "turned away: none yet"
    return "turned away: " + ", ".join(f"{code} {n['workers'] or n['entries']}" + (" entries" if not n["workers"] else "")
                                       for code, n in counted.items())


def _show_json(session, study) -> str:
    """``study show --json``: ``display.min_window`` is ``[width, height]`` in CSS px (at devicePixelRatio 1);
    ``devices`` the device classes the study admits (desktop, tablet, phone: ``WindowRequirement.devices``)."""
    import json

    from server.paradigms import paradigm_for
    from server.paradigms.display import LAPTOP_WINDOW
    from server.paradigms.media import show_media
    from server.refusals import reason_counts

    requirement = _requirement(session, study)
    data = {"slug": study.slug, "name": study.name, "kind": paradigm_for(study).kind, "status": study.status,
            "created_at": study.created_at.isoformat(), "stimulus_root": study.stimulus_root,
            "progress": paradigm_for(study).progress(session, study.id),
            "settings": {k: v for k, v in study.config.items() if k not in _SHOW_HIDDEN},
            "display": {"policy": requirement.policy, "min_window": list(requirement.min_window),
                        "needs_mouse": requirement.needs_mouse, "laptop_window": list(LAPTOP_WINDOW),
                        "fits_laptop": requirement.fits()},
            "devices": list(requirement.devices()),
            "media": show_media(study.config),
            "reasons": reason_counts(session, study.id)}
    return json.dumps(data, indent=1, default=str)


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


def _warnings(session, study) -> list[str]:
    """What the study's paradigm warns of in its stimuli against its settings (e.g. too few gold pairs)."""
    from server.paradigms import paradigm_for

    return paradigm_for(study).study_warnings(session, study)


def _summary(session, study) -> str:
    from server.paradigms import paradigm_for

    return paradigm_for(study).summary_line(session, study.id)
