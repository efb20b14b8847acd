"""server.simulate_client and ``perceptlab simulate`` against a live server (SQLite and PostgreSQL)."""
from __future__ import annotations

import datetime as dt
import io
import json
import threading
import time
from collections import Counter

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from server.paradigms.paired.models import Vote
from server.services import app_services
from server.paradigms.paired.simulated_worker import DEFAULT_NOISE_RMSE
from server.simulate_client import ServerUnreachable, SimulationReport, StudyNotFound, run_simulation


def _stored_votes(app) -> tuple[Counter, Counter]:
    """(count per client vote_id, count per trial) of the votes in the database."""
    with app_services(app).sessions() as session:
        rows = session.execute(select(Vote.client_vote_id, Vote.trial_id)).all()
    return Counter(r[0] for r in rows), Counter(r[1] for r in rows)


@pytest.fixture
def no_gold_study(app, demo_stimuli, tmp_path) -> str:
    """Latent observers see no images, so they cannot answer gold pairs: a study without any."""
    from .conftest import SMALL_STUDY, create_test_study

    return create_test_study(app, demo_stimuli, tmp_path, slug="nogold", pages=SMALL_STUDY["pages"],
                             quality={"quiz_size": 0, "gold_rate": 0.0})


def _assert_db_holds_exactly_the_acknowledged_votes(app, report: SimulationReport) -> None:
    by_vote, by_trial = _stored_votes(app)
    assert report.unresolved == 0 and report.rejected == 0
    assert report.acknowledged == report.sent == len(report.responses) > 0
    assert set(by_vote) == report.acknowledged_ids() == report.sent_ids()
    assert max(by_vote.values()) == 1 and max(by_trial.values()) == 1


def test_small_simulation_stores_exactly_the_acknowledged_votes(app, study, live_server):
    report = run_simulation(live_server, study, workers=8, spam=0.5, concurrency=4, seed=3, progress=False)
    assert sum(report.outcomes.values()) == 8 and report.outcomes.get("error", 0) == 0
    assert set(report.outcomes) <= {"completed", "stopped", "disqualified"}
    assert not report.errors, report.errors
    _assert_db_holds_exactly_the_acknowledged_votes(app, report)
    # Honest observers look at the images: they agree with the reference far more often than random clickers.
    honest, spam = report.agreement(True), report.agreement(False)
    assert honest[1] >= 20 and spam[1] >= 4
    assert honest[0] / honest[1] >= 0.7
    assert honest[0] / honest[1] > spam[0] / spam[1]
    assert report.outcomes.get("completed", 0) >= 4  # the 4 honest workers pass the quiz and the hidden gold
    assert report.images_downloaded > 0 and len(report.latencies_ms["image"]) == report.images_downloaded
    assert 0 < report.p50() <= report.p99() and report.per_second() > 0
    summary = report.to_dict()
    assert summary["responses_acknowledged"] == report.acknowledged
    json.dumps(summary)  # plain JSON


def test_latent_observer_downloads_nothing_and_fixed_pages(app, no_gold_study, live_server):
    # A short ramp: the workers enter one after another, and all still finish.
    report = run_simulation(live_server, no_gold_study, workers=3, spam=0.0, concurrency=3, seed=4, pages=2,
                            observer="latent", ramp_s=0.2, progress=False)
    assert report.outcomes == Counter(completed=3)
    assert report.images_downloaded == 0 and "image" not in report.latencies_ms
    # Each page's trials came with the action that opened it, its end with its last vote's answer:
    # no worker asked for the State.
    assert "state" not in report.latencies_ms
    _assert_db_holds_exactly_the_acknowledged_votes(app, report)


class _LoseEveryThirdVoteAnswer:
    """WSGI middleware: every third new vote is stored by the app, but the client gets a 503 instead
    of the answer (a response lost on the way), so the client must retry the same vote_id."""

    def __init__(self, app):
        self.app, self.lost, self.new_votes = app, 0, 0
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "POST" and environ["PATH_INFO"].endswith("/votes"):
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
            environ["wsgi.input"] = io.BytesIO(body)
            vote_id = json.loads(body)["vote_id"]
            with self.lock:
                lose = vote_id not in self.seen and self.new_votes % 3 == 2
                self.new_votes += vote_id not in self.seen
                self.seen.add(vote_id)
            if lose:
                answer = b"".join(self.app(environ, lambda *a, **k: None))
                assert json.loads(answer)["status"] == "stored"
                with self.lock:
                    self.lost += 1
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"lost"]
        return self.app(environ, start_response)


def test_lost_answers_are_retried_with_the_same_vote_id(app, no_gold_study):
    from werkzeug.serving import make_server

    flaky = _LoseEveryThirdVoteAnswer(app)
    server = make_server("127.0.0.1", 0, flaky, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        report = run_simulation(f"http://127.0.0.1:{server.server_port}", no_gold_study, workers=3, spam=0.0,
                                concurrency=3, seed=5, observer="latent", progress=False)
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert flaky.lost > 0
    assert report.duplicates == flaky.lost == report.errors["http_503"] == report.retries
    assert report.attempts == report.sent + flaky.lost
    _assert_db_holds_exactly_the_acknowledged_votes(app, report)


def test_unknown_study_and_unreachable_server_raise(app, study, live_server):
    with pytest.raises(StudyNotFound, match="no-such-study"):
        run_simulation(live_server, "no-such-study", workers=1, progress=False)
    with pytest.raises(ServerUnreachable):
        run_simulation("http://127.0.0.1:9", study, workers=1, progress=False)
    with pytest.raises(ValueError, match="observer"):
        run_simulation(live_server, study, workers=1, observer="psychic", progress=False)
    for ramp in (-1.0, float("nan"), 1e9):
        with pytest.raises(ValueError, match="ramp_s"):
            run_simulation(live_server, study, workers=1, ramp_s=ramp, progress=False)
    assert _stored_votes(app)[0] == Counter()  # the start-up check writes nothing


def test_cli_simulate(app, study, no_gold_study, live_server, tmp_path, monkeypatch):
    from sqlalchemy import select

    from server.cli import cli
    from server.models import Worker

    # simulate signs its workers as simulated with the instance's secret key, the server's (make_test_app's).
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", "test-secret")
    out = tmp_path / "report.json"
    result = CliRunner().invoke(cli, ["simulate", no_gold_study, "--url", live_server, "--workers", "2", "--spam", "0",
                                      "--concurrency", "2", "--seed", "7", "--observer", "latent", "--quiet",
                                      "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    assert "votes: sent" in result.output and "p99" in result.output and "completed 2" in result.output
    data = json.loads(out.read_text())
    assert data["workers"] == 2 and data["responses_acknowledged"] == data["responses_sent"] > 0
    assert data["outcomes"] == {"completed": 2}
    with app_services(app).sessions() as session:
        stored = session.execute(select(Worker.external_id, Worker.pilot, Worker.simulated)).all()
    assert len(stored) == 2 and all(pilot and simulated and raw.startswith("SIMW") for raw, pilot, simulated in stored)

    # Another deployment's key: every entry is refused, and the summary says why.
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", "another-key")
    refused = CliRunner().invoke(cli, ["simulate", no_gold_study, "--url", live_server, "--workers", "1", "--quiet",
                                       "--seed", "8", "--observer", "latent"])
    assert "bad_link 1" in refused.output and "secret key differs" in refused.output, refused.output
    monkeypatch.setenv("PERCEPTLAB_SECRET_KEY", "test-secret")

    missing = CliRunner().invoke(cli, ["simulate", "nope", "--url", live_server, "--quiet"])
    assert missing.exit_code == 2 and "error:" in missing.output and "nope" in missing.output
    down = CliRunner().invoke(cli, ["simulate", study, "--url", "http://127.0.0.1:9", "--quiet"])
    assert down.exit_code == 2 and "cannot reach" in down.output


def test_default_noise_is_documented_value():
    assert DEFAULT_NOISE_RMSE == 0.01


def test_summary_counts_the_workers_that_can_run_at_once():
    """Fewer workers than slots: the summary names the workers that ran together, not the slots."""
    report = SimulationReport(base_url="http://127.0.0.1:9", study="s", workers=2, spam=0.0, concurrency=50, seed=0,
                              pace=None, observer="latent")
    lines = report.summary_lines()
    assert lines[0].startswith("workers: 2 (2 at a time)")
    assert "all 2 workers running" in lines[2]


class _StillUntilReleased:
    """An injected clock (``create_app(clock=...)``) that stands still until :meth:`release`, then runs
    with the real one: the admission gate refills nothing until it has deferred someone, however slowly a
    loaded machine lets the entries arrive, and every deferred worker gets in after that."""

    def __init__(self):
        self.start = dt.datetime.now(dt.timezone.utc)
        self.released_at: float | None = None

    def release(self) -> None:
        if self.released_at is None:
            self.released_at = time.monotonic()

    def __call__(self) -> dt.datetime:
        if self.released_at is None:
            return self.start
        return self.start + dt.timedelta(seconds=time.monotonic() - self.released_at)


def test_deferred_entries_are_waited_out_not_counted_as_errors(database_url, tmp_path, demo_stimuli):
    """Against an app admitting 20 new workers a second, 2 at once, 8 workers entering together are
    deferred and come back when told (the waits are fractions of a second); none gives up, nothing
    counts as an error, and the database holds exactly the acknowledged votes."""
    from werkzeug.serving import make_server

    from .conftest import SMALL_STUDY, create_test_study, make_test_app

    clock = _StillUntilReleased()
    app = make_test_app(database_url, tmp_path / "gated", admission_rate=20.0, admission_burst=2.0, clock=clock)

    @app.after_request
    def _release_at_the_first_deferral(response):
        if response.status_code == 429:
            clock.release()
        return response

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, slug="gated-sim", pages=SMALL_STUDY["pages"],
                                 quality={"quiz_size": 0, "gold_rate": 0.0})
        report = run_simulation(f"http://127.0.0.1:{server.server_port}", slug, workers=8, spam=0.0, concurrency=8,
                                seed=5, pages=1, observer="latent", progress=False)
    finally:
        server.shutdown()
        thread.join(timeout=10)
        app_services(app).engine.dispose()
    assert report.deferred >= 1, report.to_dict()
    assert not report.errors and report.outcomes.get("error", 0) == 0, report.to_dict()
    assert len(report.entry_waits_s) == 8 and max(report.entry_waits_s) > 0
    _assert_db_holds_exactly_the_acknowledged_votes(app, report)
