"""``perceptlab prolific create | publish | add-places | pause | resume | stop | submissions | approve | reject |
bonus | reconcile``.

Prolific has no sandbox: every command acts on the account of the API token in ``PROLIFIC_TOKEN``. Commands
that spend money (publish, approve, bonus) show what they will do and ask first (``--yes`` skips the
question). The study must be set up for Prolific (``[entry] recruiter = "prolific"`` and its
``completion_code``); see server/prolific.py.
"""
from __future__ import annotations

from contextlib import contextmanager

import click

from .base import UserError, cli
from .cmd_study import DATABASE_OPTION, _find

YES_OPTION = click.option("--yes", is_flag=True, help="Do not ask for confirmation.")


def client_factory():
    """The Prolific client of a command (tests replace this with one on a fake Prolific)."""
    from server.prolific import ProlificClient

    return ProlificClient()


@contextmanager
def prolific_session(database_url: str | None):
    """(database session, ProlificService); Prolific errors become one-line UserErrors."""
    from server.cli.base import cli_session
    from server.prolific import ProlificError, ProlificService

    try:
        with cli_session(database_url) as session:
            client = client_factory()
            try:
                yield session, ProlificService(client, session)
            finally:
                client.close()
    except ProlificError as exc:
        raise UserError(str(exc)) from None


def _study_line(row) -> str:
    return (f"Prolific study {row.prolific_id or '(creating)'}: {row.status}, {row.places} place(s), reward "
            f"{row.reward_cents / 100:.2f}, about {row.estimated_minutes} min, devices {row.devices}")


@cli.group("prolific")
def prolific_group() -> None:
    """Run a study on Prolific through its API (token in PROLIFIC_TOKEN; real money, no sandbox)."""


@prolific_group.command("create")
@click.argument("slug")
@click.option("--url", required=True, help="https://HOST of the perceptlab server (/s/SLUG and Prolific's "
                                           "placeholders are added).")
@click.option("--places", type=click.IntRange(1), default=10, show_default=True, help="Participants to recruit.")
@click.option("--publish", "publish_now", is_flag=True, help="Publish the study once created (asks first).")
@YES_OPTION
@DATABASE_OPTION
def create(slug: str, url: str, places: int, publish_now: bool, yes: bool, database_url: str | None) -> None:
    """Create a draft Prolific study for study SLUG (once: run again after an interruption)."""
    with prolific_session(database_url) as (session, service):
        study = _find(session, slug)
        draft = service.draft(study, host=url, places=places)
        click.echo(f"{draft.name!r}: {places} place(s), reward {draft.reward_cents / 100:.2f} (the study's "
                   f"currency), about {draft.estimated_minutes} min, devices {', '.join(draft.devices)}")
        click.echo(f"study URL: {draft.external_study_url}")
        row = service.create(study, host=url, places=places)
        click.echo(_study_line(row))
        if publish_now:
            _confirm_publish(row, yes)
            click.echo(f"published: {service.publish(study)}")
            session.commit()


def _confirm_publish(row, yes: bool) -> None:
    if not yes:
        click.confirm(f"Publish it: {row.places} place(s) at {row.reward_cents / 100:.2f} each (plus Prolific's "
                      "fee) from your balance?", abort=True)


@prolific_group.command("publish")
@click.argument("slug")
@YES_OPTION
@DATABASE_OPTION
def publish(slug: str, yes: bool, database_url: str | None) -> None:
    """Publish the study's draft: participants can take part."""
    with prolific_session(database_url) as (session, service):
        study = _find(session, slug)
        _confirm_publish(service.prolific_study(study), yes)
        click.echo(f"{slug}: {service.publish(study)}")
        session.commit()


@prolific_group.command("add-places")
@click.argument("slug")
@click.argument("more", type=click.IntRange(1))
@DATABASE_OPTION
def add_places(slug: str, more: int, database_url: str | None) -> None:
    """Add MORE places to the study."""
    with prolific_session(database_url) as (session, service):
        total = service.add_places(_find(session, slug), more)
        session.commit()
        click.echo(f"{slug}: {total} place(s) in all")


def _transition(slug: str, database_url: str | None, action: str) -> None:
    with prolific_session(database_url) as (session, service):
        result = service.transition(_find(session, slug), action)
        session.commit()
        click.echo(f"{slug}: {result}")


@prolific_group.command("pause")
@click.argument("slug")
@DATABASE_OPTION
def pause(slug: str, database_url: str | None) -> None:
    """Pause recruiting (participants already in can finish)."""
    _transition(slug, database_url, "PAUSE")


@prolific_group.command("resume")
@click.argument("slug")
@DATABASE_OPTION
def resume(slug: str, database_url: str | None) -> None:
    """Resume a paused study."""
    _transition(slug, database_url, "START")


@prolific_group.command("stop")
@click.argument("slug")
@DATABASE_OPTION
def stop(slug: str, database_url: str | None) -> None:
    """Stop recruiting for good (repeating it is harmless)."""
    _transition(slug, database_url, "STOP")


def _print_submissions(service, study) -> None:
    ok, refused = service.review(study)
    why = {s.submission_id: reason for s, reason in refused}
    why.update({s.submission_id: "code checks: approvable" for s in ok})
    for row in service.submissions(study):
        click.echo(f"  {row.submission_id}  {row.participant_id}  {row.status:16} code {row.entered_code or '-':12}"
                   f"  {why.get(row.submission_id, '')}")


@prolific_group.command("submissions")
@click.argument("slug")
@DATABASE_OPTION
def submissions(slug: str, database_url: str | None) -> None:
    """Fetch the study and its submissions from Prolific and show them with the code check."""
    with prolific_session(database_url) as (session, service):
        study = _find(session, slug)
        counts = service.reconcile(study)
        session.commit()
        click.echo(f"{_study_line(service.record(study))}\n{counts['submissions']} submission(s) "
                   f"({counts['new']} new)")
        _print_submissions(service, study)


@prolific_group.command("reconcile")
@click.argument("slug")
@DATABASE_OPTION
def reconcile(slug: str, database_url: str | None) -> None:
    """Bring the database in line with Prolific: the study, its submissions and bonuses paid without an answer."""
    with prolific_session(database_url) as (session, service):
        counts = service.reconcile(_find(session, slug))
        session.commit()
        click.echo(f"{counts['submissions']} submission(s) ({counts['new']} new); bonuses confirmed "
                   f"{counts['bonuses_confirmed']}, still unconfirmed {counts['bonuses_unconfirmed']}")


@prolific_group.command("approve")
@click.argument("slug")
@click.argument("submission_ids", nargs=-1)
@YES_OPTION
@DATABASE_OPTION
def approve(slug: str, submission_ids: tuple[str, ...], yes: bool, database_url: str | None) -> None:
    """Approve the submissions awaiting review whose completion codes check (or the SUBMISSION_IDS given);
    the others are listed with the reason, not approved."""
    with prolific_session(database_url) as (session, service):
        study = _find(session, slug)
        service.reconcile(study)
        session.commit()
        if submission_ids:
            if not yes:
                click.confirm(f"Approve {len(submission_ids)} submission(s) (pays their reward)?", abort=True)
            for submission_id in submission_ids:
                click.echo(f"  {submission_id}: {service.approve(study, submission_id)}")
                session.commit()
            return
        ok, refused = service.review(study)
        for row, reason in refused:
            click.echo(f"  {row.submission_id} ({row.participant_id}): not approved: {reason}", err=True)
        if ok and not yes:
            click.confirm(f"Approve {len(ok)} submission(s) whose codes check (pays their reward)?", abort=True)
        asked, _ = service.approve_checked(study) if ok else ([], refused)
        session.commit()
        pending = len(service.pending_approval(study)) - len(asked)
        click.echo(f"approval asked for {len(asked)} submission(s), {len(refused)} left for you to review"
                   + (f", {pending} asked for earlier and not shown approved yet" if pending > 0 else ""))
        if asked:
            click.echo(f"Prolific approves in bulk asynchronously: `perceptlab prolific reconcile {slug}` shows them "
                       "approved (bonuses wait for that)")


@prolific_group.command("reject")
@click.argument("slug")
@click.argument("submission_id")
@click.option("--reason", required=True, help="What was wrong (at least 100 characters; the participant sees it).")
@click.option("--category", default="OTHER", show_default=True,
              type=click.Choice(["TOO_QUICKLY", "TOO_SLOWLY", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL",
                                 "FAILED_CHECK", "LOW_EFFORT", "MALINGERING", "NO_CODE", "BAD_CODE", "NO_DATA",
                                 "UNSUPP_DEVICE", "OTHER"]),
              help="Prolific's rejection category.")
@DATABASE_OPTION
def reject(slug: str, submission_id: str, reason: str, category: str, database_url: str | None) -> None:
    """Reject a submission of study SLUG with a category and a reason."""
    with prolific_session(database_url) as (session, service):
        result = service.reject(_find(session, slug), submission_id, category, reason)
        session.commit()
        click.echo(f"{submission_id}: {result}")


@prolific_group.command("bonus")
@click.argument("slug")
@YES_OPTION
@DATABASE_OPTION
def bonus(slug: str, yes: bool, database_url: str | None) -> None:
    """Pay the bonuses of the study's pay rules to approved submissions, each once (a ledger is written before
    every call; a pay call without an answer is reconciled, never repeated blindly)."""
    from decimal import Decimal

    with prolific_session(database_url) as (session, service):
        study = _find(session, slug)
        service.reconcile(study)
        session.commit()
        plan = service.bonus_plan(study)
        new = [b for b in plan if b.ledger_status is None and b.submission_status == "APPROVED"]
        total = sum((b.amount for b in new), Decimal("0.00"))
        click.echo(f"{len(new)} new bonus(es), {total} in all (the study's currency, plus Prolific's fee)")
        if new and not yes:
            click.confirm("Pay them?", abort=True)
        run = service.pay_bonuses(study)
        click.echo(run.summary())
        for row in service.ledger(study):
            click.echo(f"  {row.participant_id}  {row.amount}  {row.status:8}  {row.note}")
        if run.unconfirmed:
            raise UserError(f"{len(run.unconfirmed)} bonus(es) await confirmation from Prolific: run "
                            f"`perceptlab prolific reconcile {slug}` later (they are not paid again)")
