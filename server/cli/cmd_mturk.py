"""``perceptlab mturk balance | launch | status | review | approve | reject | bonus | expire | notify``.

The MTurk sandbox is used unless ``--live`` is given; live commands that spend money show the
cost and ask first (``--yes`` skips the question). AWS credentials come from the environment:
``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (or ``AWS_PROFILE`` and ~/.aws files); the EC2
instance metadata service is asked only with ``[mturk] use_instance_metadata = true``.
"""
from __future__ import annotations

from contextlib import contextmanager
from decimal import Decimal

import click

from .base import FiniteFloatRange, ServerURL, UserError, cli
from .cmd_study import DATABASE_OPTION, _find

LIVE_OPTION = click.option("--live", is_flag=True, help="Use the live marketplace (real money) instead of the sandbox.")
YES_OPTION = click.option("--yes", is_flag=True, help="Do not ask for confirmation (live only).")


def client_factory(live: bool):
    """The boto3 client for a command (tests replace this with a stubbed client)."""
    from server.cli.base import cli_config
    from server.mturk import check_credentials, instance_metadata_allowed, make_client

    metadata = instance_metadata_allowed(cli_config())
    check_credentials(use_instance_metadata=metadata)  # no network call unless [mturk] allows the metadata service
    return make_client(live=live, use_instance_metadata=metadata)


@contextmanager
def mturk_session(database_url: str | None, live: bool):
    """(database session, MTurkService); MTurk and AWS errors become one-line UserErrors."""
    from server.cli.base import cli_session
    from server.mturk import MTurkService

    with mturk_errors(), cli_session(database_url) as session:
        yield session, MTurkService(client_factory(live), session, sandbox=not live)


@contextmanager
def mturk_errors():
    """MTurk and AWS errors raised inside become one-line UserErrors."""
    from botocore.exceptions import BotoCoreError, ClientError

    from server.mturk import MTurkError

    try:
        yield
    except MTurkError as exc:
        raise UserError(str(exc)) from None
    except ClientError as exc:
        error = exc.response.get("Error", {})
        raise UserError(f"MTurk refused {exc.operation_name}: {error.get('Code')}: {error.get('Message')}") from None
    except BotoCoreError as exc:
        hint = (" (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
                if "credential" in str(exc).lower() else "")
        raise UserError(f"{exc}{hint}") from None


def _where(live: bool) -> str:
    return "LIVE" if live else "sandbox"


def _bar(iterable, desc: str):
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, unit="", leave=False, disable=None)


@cli.group("mturk")
def mturk_group() -> None:
    """Post HITs on Amazon Mechanical Turk, review and pay (sandbox unless --live)."""


@mturk_group.command("balance")
@LIVE_OPTION
@DATABASE_OPTION
def balance(live: bool, database_url: str | None) -> None:
    """Show the account's available balance."""
    with mturk_session(database_url, live) as (_, service):
        click.echo(f"{_where(live)} balance: ${service.balance()}")


@mturk_group.command("launch")
@click.argument("slug")
@click.option("--assignments", "assignments", type=click.IntRange(1), required=True, help="Assignments in all.")
@click.option("--url", required=True, type=ServerURL(), help="https://HOST of the perceptlab server (the study path /s/SLUG is added).")
@click.option("--per-hit", type=click.IntRange(1), default=9, show_default=True,
              help="Assignments per HIT (10 or more costs 40% commission instead of 20%).")
@click.option("--days", type=FiniteFloatRange(0.01), default=7, show_default=True, help="How long the HITs stay up.")
@click.option("--launch-id", default=None, help="Finish an interrupted launch (its ID is printed at the start).")
@LIVE_OPTION
@YES_OPTION
@DATABASE_OPTION
def launch(slug: str, assignments: int, url: str, per_hit: int, days: float, launch_id: str | None, live: bool,
           yes: bool, database_url: str | None) -> None:
    """Post HITs for study SLUG, in batches of --per-hit assignments."""
    from server.payments import pay_unit

    with mturk_session(database_url, live) as (session, service):
        study = _find(session, slug)
        full_url = study_url(url, slug)
        service.external_question_xml(full_url)  # fail on http:// before anything else
        # The unit of pay (a page, a session) is what the HIT reward and the bonuses pay for.
        total = show_launch_cost(pay_unit(study), assignments, per_hit, live, full_url)
        show_time_and_wage(session, study)
        confirm_live_cost(total, live, yes)
        post_hits(service, study, assignments=assignments, url=full_url, per_hit=per_hit, days=days,
                  launch_id=launch_id, live=live)


def study_url(url: str, slug: str) -> str:
    """The worker link of study ``slug`` on the server at ``url`` (``https://HOST`` gets ``/s/SLUG``)."""
    return url.rstrip("/") if "/s/" in url else f"{url.rstrip('/')}/s/{slug}"


def show_launch_cost(pay, assignments: int, per_hit: int, live: bool, full_url: str) -> Decimal:
    """Print what posting ``assignments`` costs with MTurk's fees (and at most, with every bonus); return
    the total without bonuses."""
    from server.payments import launch_cost

    reward = pay.hit_reward
    cost = launch_cost(reward, assignments, per_hit)
    worst = launch_cost(reward, assignments, per_hit,
                        expected_bonus_per_assignment=(pay.most - pay.required) * pay.bonus)
    click.echo(f"{_where(live)}: {assignments} assignments in {cost['hits']} HIT(s) of at most {per_hit}, "
               f"reward ${reward} each, to {full_url}")
    click.echo(f"cost: ${cost['rewards']} rewards + ${cost['reward_fees']} fees = ${cost['total']}; "
               f"with every worker doing all {pay.most} {pay.name}s (bonuses + fees): up to ${worst['total']}")
    if per_hit >= 10:
        click.echo("warning: HITs with 10 or more assignments pay 40% commission instead of 20%", err=True)
    return cost["total"]


def show_time_and_wage(session, study) -> None:
    """Print how long the HIT's work takes and the wage its reward pays at that (server/cli/pay.py); warn on
    stderr below the wage floor."""
    from server.cli.pay import time_and_wage

    line, warning = time_and_wage(session, study)
    click.echo(line)
    if warning:
        click.echo(warning, err=True)


def confirm_live_cost(total: Decimal, live: bool, yes: bool) -> None:
    """On the live marketplace, ask before spending ``total`` (``--yes`` skips the question)."""
    if live and not yes:
        click.confirm(f"Post these HITs on the LIVE marketplace for ${total}?", abort=True)


def post_hits(service, study, *, assignments: int, url: str, per_hit: int, days: float, launch_id: str | None,
              live: bool) -> list:
    """Post the HITs (a progress bar on a terminal) and print them and the preview link; return them."""
    import datetime as dt
    import uuid

    launch_id = launch_id or uuid.uuid4().hex[:12]
    click.echo(f"launch ID {launch_id} (if interrupted, run again with --launch-id {launch_id})")
    hits = service.launch(study, assignments_total=assignments, url=url, per_hit=per_hit,
                          lifetime=dt.timedelta(days=days), launch_id=launch_id,
                          progress=lambda it: _bar(it, "creating HITs"))
    for hit in hits:
        click.echo(f"  {hit.hit_id}  {hit.max_assignments} assignments  {hit.status}")
    preview = "https://workersandbox.mturk.com" if not live else "https://worker.mturk.com"
    if hits:
        click.echo(f"preview: {preview}/projects/{hits[0].hit_type_id}/tasks")
    return hits


@mturk_group.command("status")
@click.argument("slug")
@LIVE_OPTION
@DATABASE_OPTION
def status(slug: str, live: bool, database_url: str | None) -> None:
    """Show the study's HITs and assignments as last reconciled (no MTurk call; see `review`)."""
    from collections import Counter

    from sqlalchemy import select

    from server.cli.base import cli_session
    from server.models import MTurkAssignment, MTurkHit

    with cli_session(database_url) as session:
        study = _find(session, slug)
        hits = list(session.scalars(select(MTurkHit).where(MTurkHit.study_id == study.id, MTurkHit.sandbox == (not live))
                                    .order_by(MTurkHit.id)))
        counts = Counter(session.scalars(select(MTurkAssignment.status).where(MTurkAssignment.study_id == study.id)))
        if not hits:
            click.echo(f"no {_where(live)} HITs for {slug}: perceptlab mturk launch {slug} --assignments N --url https://HOST")
        for hit in hits:
            expires = f"{hit.expires_at:%Y-%m-%d %H:%M}" if hit.expires_at else "-"
            click.echo(f"{hit.hit_id or '(creating)':32} {hit.max_assignments:3} assignments  {hit.status:12} "
                       f"reward ${hit.reward}  expires {expires}")
        click.echo("assignments: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none reconciled"))


def _print_plan(plan) -> None:
    for row in plan.rows:
        wage = f"${row.wage_usd_per_h:.2f}/h" if row.wage_usd_per_h is not None else "-"
        active = f"{row.time_active_s / 60:.1f}" if row.time_active_s is not None else "-"
        click.echo(f"  {row.assignment_id:32} {row.worker_id:16} {row.stage:9} pages {row.pages_completed:2}  "
                   f"reward ${row.reward}  bonus ${row.bonus} ({row.bonus_status or '-'})  MTurk {row.mturk_status or '?'}"
                   f"  active {active} min  {wage}")
    t = plan.totals()
    median = f"${plan.median_wage:.2f}/h" if plan.median_wage is not None else "-"
    click.echo(f"totals: rewards ${t['rewards']}, bonuses ${t['bonuses']} (unpaid ${t['bonuses_unpaid']} + fees "
               f"${t['bonus_fees']} = ${t['due_now']} due); median effective wage {median} (pay / active time)")


@mturk_group.command("review")
@click.argument("slug")
@LIVE_OPTION
@DATABASE_OPTION
def review(slug: str, live: bool, database_url: str | None) -> None:
    """Fetch the study's HITs and assignments from MTurk, then show what each worker is owed."""
    from server.cli.pay import cli_pay_settings
    from server.payments import payment_plan

    with mturk_session(database_url, live) as (session, service):
        study = _find(session, slug)
        counts = service.reconcile(study, qualify=True, progress=lambda it: _bar(it, "HITs"))
        session.commit()
        click.echo(f"{counts['hits']} HIT(s), {counts['assignments']} assignment(s) ({counts['new']} new)")
        _print_plan(payment_plan(session, study, settings=cli_pay_settings()))


@mturk_group.command("approve")
@click.argument("slug")
@click.argument("assignment_ids", nargs=-1)
@click.option("--all-submitted", is_flag=True,
              help="Approve every submitted assignment that earned pay (completed, or stopped after some pages); "
                   "the others are listed, not approved.")
@LIVE_OPTION
@YES_OPTION
@DATABASE_OPTION
def approve(slug: str, assignment_ids: tuple[str, ...], all_submitted: bool, live: bool, yes: bool,
            database_url: str | None) -> None:
    """Approve assignments of study SLUG (already approved ones count as done)."""
    from server.mturk import MTurkError
    from server.payments import submitted_for_approval

    if bool(assignment_ids) == all_submitted:
        raise UserError("give ASSIGNMENT_IDs or --all-submitted (one of the two)")
    with mturk_session(database_url, live) as (session, service):
        study = _find(session, slug)
        if all_submitted:
            service.reconcile(study)
            earned, unearned = submitted_for_approval(session, study)
            assignment_ids = tuple(earned)
            for assignment_id in unearned:
                click.echo(f"  {assignment_id}: not approved: no paid work recorded for it (study full, no page "
                           "completed, or never started here); reject it, or approve it by its ID after a look",
                           err=True)
        if live and not yes and assignment_ids:
            click.confirm(f"Approve {len(assignment_ids)} assignment(s) on the LIVE marketplace?", abort=True)
        failed = 0
        for assignment_id in _bar(assignment_ids, "approving"):
            try:
                result = service.approve(assignment_id)
            except MTurkError as exc:
                failed += 1
                click.echo(f"  {assignment_id}: {exc}", err=True)
                continue
            session.commit()
            click.echo(f"  {assignment_id}: {result}")
        click.echo(f"{len(assignment_ids) - failed} approved, {failed} failed")
        if failed:
            raise UserError(f"{failed} assignment(s) could not be approved (see above)")


@mturk_group.command("reject")
@click.argument("assignment_id")
@click.option("--feedback", required=True, help="Why the work is rejected (the worker sees it).")
@click.option("--override", is_flag=True, help="Instead: approve this REJECTED assignment after all.")
@LIVE_OPTION
@DATABASE_OPTION
def reject(assignment_id: str, feedback: str, override: bool, live: bool, database_url: str | None) -> None:
    """Reject a submitted assignment (or, with --override, approve a rejected one)."""
    with mturk_session(database_url, live) as (_, service):
        result = service.override_rejection(assignment_id, feedback) if override else service.reject(assignment_id,
                                                                                                      feedback)
        click.echo(f"{assignment_id}: {result}")


@mturk_group.command("bonus")
@click.argument("slug")
@LIVE_OPTION
@YES_OPTION
@DATABASE_OPTION
def bonus(slug: str, live: bool, yes: bool, database_url: str | None) -> None:
    """Pay the payment plan's bonuses to approved assignments (each bonus at most once)."""
    from server.payments import payment_plan

    with mturk_session(database_url, live) as (session, service):
        study = _find(session, slug)
        plan = payment_plan(session, study)
        due = plan.unpaid_bonuses()
        ready = [r for r in due if r.mturk_status == "Approved"]
        if len(ready) < len(due):
            click.echo(f"{len(due) - len(ready)} bonus(es) wait for their assignment to be approved "
                       "(run `review` and `approve` first)")
        total = sum((r.bonus for r in ready), Decimal("0.00"))
        click.echo(f"{len(ready)} bonus(es), ${total} (+20% fee) on the {_where(live)} marketplace")
        if live and not yes and ready:
            click.confirm("Pay them?", abort=True)
        for row in _bar(ready, "bonuses"):
            result = service.grant_bonus(row.worker_id, row.assignment_id, row.bonus, row.bonus_reason, study=study)
            click.echo(f"  {row.assignment_id}: ${row.bonus} {result}")


@mturk_group.command("expire")
@click.argument("slug")
@LIVE_OPTION
@DATABASE_OPTION
def expire(slug: str, live: bool, database_url: str | None) -> None:
    """Expire every HIT of the study now (workers who accepted one can still submit)."""
    with mturk_session(database_url, live) as (session, service):
        click.echo(f"{service.expire_study(_find(session, slug))} HIT(s) expired")


@mturk_group.command("notify")
@click.argument("slug")
@click.option("--subject", required=True)
@click.option("--message", required=True)
@LIVE_OPTION
@DATABASE_OPTION
def notify(slug: str, subject: str, message: str, live: bool, database_url: str | None) -> None:
    """Message the study's MTurk workers (MTurk delivers only to workers you paid or rejected)."""
    with mturk_session(database_url, live) as (session, service):
        workers = service.study_worker_ids(_find(session, slug))
        failures = service.notify(workers, subject, message)
        click.echo(f"{len(workers) - len(failures)} of {len(workers)} worker(s) notified")
        for failure in failures:
            click.echo(f"  {failure.get('WorkerId')}: {failure.get('NotifyWorkersFailureMessage')}", err=True)
