"""``perceptlab demo`` (the main job), ``perceptlab serve`` and ``perceptlab db upgrade``."""
from __future__ import annotations

import os
import secrets
import shlex
import sys
import threading
from pathlib import Path

import click

from .base import UserError, cli, cli_config

DEMO_SLUG = "demo"
MOTION_DEMO_SLUG = "demo-motion"
ACTIVE_DEMO_SLUG = "demo-active"


@cli.command("demo")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("demo_output"),
              show_default=True, help="Folder for the demo stimuli, the SQLite database and the admin password.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=int, default=5000, show_default=True, help="Port to listen on (0 = any free port).")
@click.option("--simulate", "simulate_workers", type=int, default=0, show_default=True,
              help="Once the server is up, send this many simulated workers (25% random clickers) through "
                   "it, so the dashboard fills while you watch.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the demo stimuli and study.")
def demo_command(out: Path, host: str, port: int, simulate_workers: int, seed: int) -> None:
    """Run the demo: build stimuli if missing, create the demo studies, serve them on SQLite.

    Prints the worker links (plain-link mode and an MTurk-style link of the paired-comparison
    study, a plain link of the motion-matching study "demo-motion" and of "demo-active", the
    paired-comparison study with active pair sampling), the dashboard link with its
    login, and the next commands (simulated workers, results), each runnable as printed from any
    folder. The demo's instance folder (database, secret key) is OUT/instance, whatever --instance
    says. Stop with Ctrl-C; a second run reuses everything in --out.
    """
    out = out.resolve()
    stimuli_dir = out / "stimuli"
    if not (stimuli_dir / "prepared" / "manifest.json").is_file():
        from stimuli.demo import build_demo

        click.echo(f"building demo stimuli in {stimuli_dir} (once; about 5 s) ...")
        build_demo(stimuli_dir, seed=seed, overwrite=stimuli_dir.exists())
    motion_dir = out / "motion_clips"
    if not (motion_dir / "manifest.json").is_file():
        from stimuli.motion_demo import build_motion_demo

        click.echo(f"building motion demo clips in {motion_dir} (once; about 10 s) ...")
        build_motion_demo(motion_dir, seed=seed)
    from server.db import URL_ENVIRONMENT_VARIABLE, default_database_url

    instance = out / "instance"
    # The demo's database is its instance's own (PERCEPTLAB_DATABASE_URL still wins, as for every command),
    # never a [server] database_url of the configuration: that one may be a real deployment's.
    database_url = os.environ.get(URL_ENVIRONMENT_VARIABLE) or default_database_url(instance)
    password = _prepare_demo_database(out, database_url, stimuli_dir, seed)

    from server import create_app
    from server.pilot import pilot_signature, preview_link

    # No entry rate limit: the demo is filled by simulated workers that all come from this machine.
    app = create_app(cli_config(), database_url=database_url, instance_path=str(instance), entry_limit=0)
    server = _make_server(app, host, port)
    base = f"http://{host}:{server.server_port}"
    click.echo("")
    click.echo(f"perceptlab demo server on {base}  (instance folder: {instance})")
    click.echo(f"  worker link (plain):   {base}/s/{DEMO_SLUG}?participant=demo-worker-1")
    click.echo(f"  worker link (MTurk):   {base}/s/{DEMO_SLUG}?assignmentId=DEMOASSIGN1&hitId=DEMOHIT"
               f"&workerId=DEMOWORKER1&turkSubmitTo=https://workersandbox.mturk.com")
    click.echo(f"  HIT preview:           {base}/s/{DEMO_SLUG}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=DEMOHIT")
    click.echo(f"  motion study (plain):  {base}/s/{MOTION_DEMO_SLUG}?participant=demo-observer-1")
    click.echo(f"  active sampling:       {base}/s/{ACTIVE_DEMO_SLUG}?participant=demo-worker-2")
    for demo in paradigm_demo_studies(seed):
        click.echo(f"  {demo.label + ':':<22} {base}/s/{demo.slug}?participant=demo-worker-3")
    click.echo(f"  preview (counts in nothing): {preview_link(app.config['SECRET_KEY'], DEMO_SLUG, base)}")
    click.echo(f"  dashboard:             {base}/admin/   login: admin / {password}")
    for line in demo_next_steps(base, out, instance):
        click.echo(line)
    click.echo("Ctrl-C stops the server.")
    if simulate_workers > 0:
        threading.Thread(target=_simulate, args=(base, simulate_workers, seed,
                                                 pilot_signature(app.config["SECRET_KEY"], DEMO_SLUG)),
                         daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        click.echo("\nstopped")
    finally:
        server.server_close()


def perceptlab_command() -> str:
    """How to run this very ``perceptlab`` from any folder, without an activated venv: the console
    script beside the running Python (``.venv/bin/perceptlab``), else that Python with ``-m server.cli``."""
    python = Path(sys.executable).absolute()  # not resolved: a venv's python is a symlink out of the venv
    script = python.with_name("perceptlab")
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    return f"{shlex.quote(str(python))} -m server.cli"


def demo_next_steps(base: str, out: Path, instance: Path) -> list[str]:
    """The commands the demo suggests, each runnable as printed from any folder (absolute paths, the
    demo's instance folder named)."""
    command = perceptlab_command()
    on_demo = f"{command} --instance {shlex.quote(str(instance))}"
    results = shlex.quote(str(out / "results"))
    return ["next, in a second terminal (each line works as printed, from any folder):",
            f"  fill it with workers:  {on_demo} simulate {DEMO_SLUG} --url {base} --workers 20",
            # Simulated workers are pilots, left out of results unless asked (server/pilot.py).
            f"  export and analyse:    {on_demo} results {DEMO_SLUG} --out {results} --include-pilot",
            f"  any other command:     {on_demo} study list   "
            f"(or: export PERCEPTLAB_INSTANCE={shlex.quote(str(instance))})"]


# The consent's {researcher} and {contact} (server/paradigms/consent.py): demo values, which `study create`
# would refuse to leave empty in a real study.
DEMO_TEXTS = ('[texts]\nresearcher = "the perceptlab demo (not a real study)"\n'
              'contact = "demo@perceptlab.invalid"\n\n'
              # The demo's MTurk link and `perceptlab simulate` enter as MTurk workers of a HIT that was never
              # posted: the demo studies admit that ([entry] external_hits; a real study's HITs are posted).
              '[entry]\nexternal_hits = true\n')


def active_demo_study(seed: int) -> str:
    """The study file of "demo-active": the demo's stimuli, pairs chosen by active sampling after a short
    warm-up (one vote for each pair of a degree-2 design: 44 votes, about 4 pages), so that a walk
    through it soon meets chosen pairs."""
    return (f'[study]\nslug = "{ACTIVE_DEMO_SLUG}"\nname = "Demo: active sampling of the pairs"\n'
            f'manifests = ["stimuli/prepared/manifest.json"]\nseed = {seed}\n\n'
            '[design]\ndegree = 2\nvotes_per_pair = 10\nsampling = "active"\nwarmup_votes_per_pair = 1\n\n'
            "[pages]\npairs_per_page = 12\nmin_pages = 1\nmax_pages = 5\n"
            'reward_per_page = "0.50"\nbonus_per_page = "0.40"\n\n'
            "[quality]\nquiz_size = 4\ngold_rate = 0.1\naccuracy_threshold = 0.7\ngold_min_answered = 2\n\n"
            + DEMO_TEXTS)


def paradigm_demo_studies(seed: int):
    """The studies every paradigm adds to the demo on its prepared scenes (Paradigm.demo_studies)."""
    from server.paradigms import all_paradigms

    return [demo for paradigm in all_paradigms()
            for demo in paradigm.demo_studies("stimuli/prepared/manifest.json", seed, DEMO_TEXTS)]


def _prepare_demo_database(out: Path, database_url: str, stimuli_dir: Path, seed: int) -> str:
    """Create the demo studies and the admin account if missing; return the admin password."""
    from sqlalchemy import select

    from server.auth import create_user, set_password
    from server.db import session_scope
    from server.models import Study, User
    from server.paradigms import create_study, read_study_file

    motion_file = out / "demo_motion_study.toml"
    if not motion_file.exists():
        # Small blocks, so that the demo is quick to walk through (a real study keeps the defaults).
        motion_file.write_text(
            f'[study]\nkind = "motion"\nslug = "{MOTION_DEMO_SLUG}"\n'
            f'name = "Demo: match the motion of a point in a clip"\nclips = ["motion_clips/manifest.json"]\n'
            f"seed = {seed}\n\n[session]\nprobes_per_clip = 5\nrepetitions = 2\nobservers_per_clip = 10\n"
            # About 11 minutes at the documented pace: $13.60 an hour, above the default wage floor.
            'reward_per_session = "2.50"\n\n'
            "[practice]\npractice_needed = 3\n\n[screening]\nrdk_practice = 3\nrdk_trials = 20\n\n" + DEMO_TEXTS)
    active_file = out / "demo_active_study.toml"
    if not active_file.exists():
        active_file.write_text(active_demo_study(seed))
    study_file = out / "demo_study.toml"
    if not study_file.exists():
        study_file.write_text(
            f'[study]\nslug = "{DEMO_SLUG}"\nname = "Demo: which interpolated frame is closer to the truth?"\n'
            f'manifests = ["stimuli/prepared/manifest.json"]\nseed = {seed}\n\n'
            "[design]\nvotes_per_pair = 10\n\n"
            "[pages]\npairs_per_page = 12\nmin_pages = 1\nmax_pages = 5\n"
            # A page of 12 comparisons is about 3 minutes at the documented pace, plus 2 of consent,
            # instructions and quiz: $14.40 an hour for one page, more for each further page.
            'reward_per_page = "1.20"\nbonus_per_page = "0.75"\n\n'
            "[quality]\nquiz_size = 4\ngold_rate = 0.1\naccuracy_threshold = 0.7\ngold_min_answered = 2\n\n"
            + DEMO_TEXTS)
    password_file = out / "admin_password.txt"
    with session_scope(database_url) as session:  # the demo's own database, made here on the first run
        if session.scalar(select(Study).where(Study.slug == DEMO_SLUG)) is None:
            create_study(session, read_study_file(study_file))
        if session.scalar(select(Study).where(Study.slug == MOTION_DEMO_SLUG)) is None:
            create_study(session, read_study_file(motion_file))
        if session.scalar(select(Study).where(Study.slug == ACTIVE_DEMO_SLUG)) is None:
            create_study(session, read_study_file(active_file))
        for demo in paradigm_demo_studies(seed):
            demo_file = out / f"demo_{demo.slug}.toml"
            if not demo_file.exists():
                demo_file.write_text(demo.text)
            if session.scalar(select(Study).where(Study.slug == demo.slug)) is None:
                create_study(session, read_study_file(demo_file))
        user = session.scalar(select(User).where(User.username == "admin"))
        if user is None or not password_file.exists():  # a lost password file gets a new password
            password = secrets.token_urlsafe(9)
            if user is None:
                create_user(session, "admin", password)
            else:
                set_password(user, password)
            fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(password + "\n")
    return password_file.read_text().strip()


def _make_server(app, host: str, port: int):
    from werkzeug.serving import make_server

    try:
        return make_server(host, port, app, threaded=True)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (try --port 0)") from None


def _simulate(base: str, workers: int, seed: int, pilot: str) -> None:
    from server.simulate_client import run_simulation

    try:
        report = run_simulation(base, DEMO_SLUG, workers=workers, spam=0.25, concurrency=min(workers, 10),
                                seed=seed, pace=0.5, progress=False, pilot=pilot)
        click.echo(f"simulated workers done: {report.acknowledged} {report.response_kind or 'responses'}")
    except Exception as exc:  # noqa: BLE001 - the demo server keeps running whatever the simulation does
        click.echo(f"simulation stopped: {exc}", err=True)


@cli.command("serve")
@click.option("--host", default=None, help="Interface (default: [server] host).")
@click.option("--port", type=int, default=None, help="Port (default: [server] port).")
def serve_command(host: str | None, port: int | None) -> None:
    """Serve the instance folder's database with a threaded server (small studies; use gunicorn in
    production, with the same PERCEPTLAB_INSTANCE: gunicorn 'server:create_app()' -k gthread --workers 4
    --threads 2)."""
    from server import create_app

    config = cli_config()
    settings = config.get("server", {})
    host = host or settings.get("host", "127.0.0.1")
    port = settings.get("port", 5000) if port is None else port
    from server.db import safe_url

    app = create_app(config)
    server = _make_server(app, host, port)
    click.echo(f"perceptlab on http://{host}:{server.server_port} (instance folder: "
               f"{config['server'].get('instance_path')}; database: {safe_url(app.config['DATABASE_URL'])})")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@cli.group("db")
def db_group() -> None:
    """Database maintenance."""


@db_group.command("upgrade")
@click.option("--database-url", default=None,
              help="Database URL (default: $PERCEPTLAB_DATABASE_URL, else [server] database_url, else "
                   "perceptlab.db in the instance folder, see --instance).")
def upgrade_command(database_url: str | None) -> None:
    """Apply every Alembic migration the database lacks (the server does this at start-up too)."""
    from server.cli.base import cli_database_url as resolve
    from server.db import upgrade

    url = resolve(database_url)
    upgrade(url)
    click.echo(f"database at the newest schema: {url}")
