"""Fair allocation under abuse: entry rules, the entry rate limit, short renewable page reservations,
"study full" instead of "completed", the hitId check -- and 20 scripted clients against one study.

Every test runs on SQLite and PostgreSQL through the WSGI app (HTML entry pages with the plain test
client, the JSON API with the spec-checked one). Time moves only by the injected clock
(``clock.advance``): nothing sleeps.
"""
from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from server.models import Assignment, Page, Pair, Study, Trial, Vote, Worker
from server.paradigms import StudyDefinitionError, read_study_file
from server.paradigms.entry import EntryLimiter, link_signature
from server.services import app_services

from .allocation_support import SMALL, Client, token_of
from .conftest import add_hit, create_test_study, held_count_problems, make_test_app, write_study_file
from .motion_support import MotionWorker, create_motion_study

SANDBOX = "https://workersandbox.mturk.com"


def _session(app):
    return app_services(app).sessions()


def count(app, model, *where) -> int:
    with _session(app) as session:
        return session.scalar(select(func.count()).select_from(model).where(*where))


@pytest.fixture
def limited_app(database_url, tmp_path, clock):
    """An app with a small entry limit: 5 new assignments per client address per 10 minutes."""
    app = make_test_app(database_url, tmp_path / "limited", clock=clock, entry_limit=5, entry_window_seconds=600)
    yield app
    app_services(app).engine.dispose()


class ApiWorker:
    """An assignment driven through the JSON API (as the trial page's script does)."""

    def __init__(self, client: Client, entry: dict):
        self.client, self.entry = client, entry
        self.aid, self.token = entry["assignment_id"], entry["token"]
        self.vote_ids: list[str] = []

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def state(self) -> dict:
        response = self.client.api.get(f"/api/v1/assignments/{self.aid}/state", headers=self.headers)
        assert response.status_code == 200, response.json
        return response.json

    def action(self, action: str) -> dict:
        response = self.client.api.post(f"/api/v1/assignments/{self.aid}/actions", headers=self.headers,
                                         json={"action": action})
        return response.json

    def vote(self, trial: dict, choice: str = "left"):
        vote_id = str(uuid.uuid4())
        response = self.client.api.post(f"/api/v1/assignments/{self.aid}/votes", headers=self.headers, json={
            "vote_id": vote_id, "trial_id": trial["trial_id"], "choice": choice, "rt_ms": 900.0, "input": "mouse"})
        if response.status_code == 201:
            self.vote_ids.append(vote_id)
        return response

    def open_trials(self) -> list[dict]:
        page = self.state()["page"]
        return [t for t in page["trials"] if not t["answered"]] if page else []

    def answer_page(self) -> dict:
        body = {}
        for trial in self.open_trials():
            response = self.vote(trial)
            assert response.status_code == 201, response.json
            body = response.json
        return body


def enter_api(client: Client, slug: str, **body) -> ApiWorker:
    response = client.enter(slug, **body)
    assert response.status_code in (200, 201), response.json
    return ApiWorker(client, response.json)


def worker_rows(app) -> int:
    return count(app, Worker)


def reserved_pairs(app) -> set[int]:
    """Real pairs shown by unanswered trials of pages whose reservation has not lapsed."""
    clock = app.config["SERVER"]["clock"]
    with _session(app) as session:
        return set(session.scalars(select(Trial.pair_id).join(Page, Trial.page_id == Page.id)
                                   .join(Pair, Trial.pair_id == Pair.id)
                                   .where(~Trial.answered, ~Pair.is_gold, Page.reserved_until > clock())))


def mturk_entry(hit_id: str, worker: str, assignment: str) -> str:
    return f"?assignmentId={assignment}&hitId={hit_id}&workerId={worker}&turkSubmitTo={SANDBOX}"


# ---------------------------------------------------------------- entry rules

def test_a_plain_link_needs_a_participant_id_by_default(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="needs-id", **SMALL)
    client = Client(app, "198.51.100.1")
    page = client.page(f"/s/{slug}")
    assert page.status_code == 403 and page.mimetype == "text/html"
    html = page.get_data(as_text=True)
    assert "participant ID" in html and "Traceback" not in html
    refused = client.enter(slug, platform="link")
    assert refused.status_code == 403 and refused.json["error"] == "participant_required"
    assert worker_rows(app) == 0  # a bare visit creates nothing
    assert token_of(client.page(f"/s/{slug}?participant=P-17"))
    assert token_of(client.page(f"/s/{slug}?PROLIFIC_PID=5f3a9c"))
    with _session(app) as session:
        assert sorted(session.scalars(select(Worker.external_id))) == ["5f3a9c", "P-17"]


def test_anonymous_entry_when_the_study_allows_it(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="anon-ok", entry={"allow_anonymous": True}, **SMALL)
    client = Client(app, "198.51.100.2")
    token_of(client.page(f"/s/{slug}"))
    assert client.enter(slug, platform="link").status_code == 201
    with _session(app) as session:
        ids = list(session.scalars(select(Worker.external_id)))
    assert len(ids) == 2 and all(i.startswith("anon-") for i in ids)


def test_signed_links_admit_exactly_the_listed_participants(app, demo_stimuli, tmp_path, database_url):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="signed", entry={"signed_links": True}, **SMALL)
    other = create_test_study(app, demo_stimuli, tmp_path, slug="signed-too", entry={"signed_links": True}, **SMALL)
    ids = tmp_path / "ids.txt"
    ids.write_text("# from the recruitment sheet\nP-1\n\nP-2\n")
    from server.cli import cli

    result = CliRunner().invoke(cli, ["study", "links", slug, "P-0", "--from-file", str(ids),
                                      "--base-url", "https://lab.example.org/", "--database-url", database_url])
    assert result.exit_code == 0, result.output
    lines = [line.split("\t") for line in result.output.strip().splitlines()]
    assert [p for p, _ in lines] == ["P-0", "P-1", "P-2"]
    links = dict(lines)
    assert links["P-1"].startswith(f"https://lab.example.org/s/{slug}?participant=P-1&sig=")
    client = Client(app, "198.51.100.3")
    for participant, link in links.items():
        token_of(client.page(link.removeprefix("https://lab.example.org")))
    sig = parse_qs(urlsplit(links["P-1"]).query)["sig"][0]
    with _session(app) as session:
        secrets = dict(session.execute(select(Study.slug, Study.entry_secret)).all())
    assert sig == link_signature(secrets[slug], slug, "P-1") and secrets[slug] != secrets[other]
    before = worker_rows(app)
    refused = {
        "no signature": f"/s/{slug}?participant=P-9",
        "invented participant": f"/s/{slug}?participant=P-9&sig={sig}",
        "wrong signature": f"/s/{slug}?participant=P-1&sig={'0' * 32}",
        "another study's link": f"/s/{other}?participant=P-1&sig={sig}",
        "no participant": f"/s/{slug}",
    }
    for case, url in refused.items():
        page = client.page(url)
        assert page.status_code == 403 and "link" in page.get_data(as_text=True), case
    assert client.enter(slug, platform="link", worker_id="P-9", signature=sig).json["error"] == "bad_link"
    assert client.enter(slug, platform="link", worker_id="P-2", signature=links["P-2"].rsplit("=", 1)[1]).status_code == 200
    assert worker_rows(app) == before


def test_access_key_is_required_when_the_study_has_one(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="keyed", entry={"access_key": "Lab-2026_key"}, **SMALL)
    client = Client(app, "198.51.100.4")
    for url in (f"/s/{slug}?participant=P-1", f"/s/{slug}?participant=P-1&key=lab-2026_key"):
        assert client.page(url).status_code == 403
    assert client.enter(slug, platform="link", worker_id="P-1", access_key="nope").json["error"] == "bad_link"
    assert worker_rows(app) == 0
    token_of(client.page(f"/s/{slug}?participant=P-1&key=Lab-2026_key"))
    assert client.enter(slug, platform="link", worker_id="P-2", access_key="Lab-2026_key").status_code == 201


def test_entry_settings_are_validated(demo_stimuli, tmp_path):
    bad = {"both": {"allow_anonymous": True, "signed_links": True}, "short key": {"access_key": "abc"},
           "key with a space": {"access_key": "two words here"}}
    for n, (case, entry) in enumerate(bad.items()):
        with pytest.raises(StudyDefinitionError, match="entry"):
            read_study_file(write_study_file(tmp_path, demo_stimuli, f"bad-{n}", entry=entry))
    with pytest.raises(StudyDefinitionError, match="unknown key entry.anonymous"):
        read_study_file(write_study_file(tmp_path, demo_stimuli, "typo", entry={"anonymous": True}))


def test_mturk_entry_must_name_a_hit_of_the_study(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="hits", **SMALL)
    client = Client(app, "198.51.100.5")
    # Before the study has HITs (posted elsewhere), any hitId enters.
    token_of(client.page(f"/s/{slug}" + mturk_entry("ELSEWHERE", "W1", "A1")))
    add_hit(app, slug, "HITREAL")
    before = worker_rows(app), count(app, Assignment)
    page = client.page(f"/s/{slug}" + mturk_entry("HITFORGED", "W2", "A2"))
    assert page.status_code == 403 and "HIT" in page.get_data(as_text=True)
    forged = client.enter(slug, platform="mturk", worker_id="W2", assignment_id="A2", hit_id="HITFORGED",
                          turk_submit_to=SANDBOX)
    assert forged.status_code == 403 and forged.json["error"] == "unknown_hit"
    assert (worker_rows(app), count(app, Assignment)) == before
    token_of(client.page(f"/s/{slug}" + mturk_entry("HITREAL", "W2", "A2")))


# ---------------------------------------------------------------- rate limit

def test_entry_limiter_is_a_sliding_window():
    now = [1000.0]
    limiter = EntryLimiter(limit=3, window=60, clock=lambda: now[0])
    for _ in range(3):  # entries at 1000, 1010, 1020
        assert limiter.admit("a") == 0
        now[0] += 10
    assert limiter.admit("a") == pytest.approx(30)  # at 1030: the first entry leaves the window at 1060
    assert limiter.admit("b") == 0  # per address
    now[0] = 1060
    assert limiter.admit("a") == 0  # counted: 1010, 1020, 1060
    assert limiter.admit("a") == pytest.approx(10)  # refused, and not counted
    assert EntryLimiter(limit=0, clock=lambda: 0.0).admit("a") == 0  # 0 = no limit


def test_new_entries_are_rate_limited_per_address_and_reloads_are_not(limited_app, demo_stimuli, tmp_path, clock):
    app = limited_app
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="limited", **SMALL)
    client = Client(app, "203.0.113.9")
    tokens = [token_of(client.page(f"/s/{slug}?participant=P-{k}")) for k in range(3)]
    tokens += [enter_api(client, slug, worker_id=f"P-{k}").token for k in range(3, 5)]
    before = worker_rows(app), count(app, Assignment)
    page = client.page(f"/s/{slug}?participant=P-5")
    assert page.status_code == 429 and 60 <= int(page.headers["Retry-After"]) <= 600
    assert "minute" in page.get_data(as_text=True)
    refused = client.enter(slug, platform="link", worker_id="P-6")
    assert refused.status_code == 429 and refused.json["error"] == "rate_limited" and refused.headers["Retry-After"]
    assert (worker_rows(app), count(app, Assignment)) == before  # nothing stored
    # Entering an existing assignment again (a reload, the same link) is never limited.
    for k in range(5):
        assert token_of(client.page(f"/s/{slug}?participant=P-{k}")) == tokens[k]
    assert client.enter(slug, platform="link", worker_id="P-4").status_code == 200
    # Another address is not affected; the first one may enter again once its window has passed.
    token_of(Client(app, "203.0.113.10").page(f"/s/{slug}?participant=Q-1"))
    clock.advance(seconds=601)
    token_of(client.page(f"/s/{slug}?participant=P-5"))


# ---------------------------------------------------------------- reservations

def test_reservation_is_renewed_by_votes_and_state_and_lapses_when_abandoned(app, demo_stimuli, tmp_path, clock):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="renew",
                             **{**SMALL, "pages": {"pairs_per_page": 11, "min_pages": 1, "max_pages": 3}})
    client = Client(app, "192.0.2.1")
    active, filler, poller, gone = (enter_api(client, slug, worker_id=name)
                                    for name in ("ACTIVE", "FILLER", "POLLER", "GONE"))
    pages = {}
    for worker in (active, filler, poller, gone):  # 4 pages of 11: every pair is taken
        worker.action("consent")
        assert worker.action("instructions_done")["stage"] == "trials"
        with _session(app) as session:
            pages[worker] = set(session.scalars(select(Trial.pair_id).join(Pair, Trial.pair_id == Pair.id).where(
                Trial.assignment_id == int(worker.aid), ~Pair.is_gold)))
    assert reserved_pairs(app) == all_real_pairs(app)
    assert enter_api(client, slug, worker_id="EARLY").entry["stage"] == "full"
    for _ in range(4):  # 12 minutes: one vote each, one state request every 3 minutes
        clock.advance(minutes=3)
        for worker in (active, filler):
            assert worker.vote(worker.open_trials()[0]).status_code == 201
        poller.state()
    # The abandoned page gave its pairs back; the others still hold theirs.
    assert reserved_pairs(app) == (pages[active] | pages[filler] | pages[poller]) - answered_pairs(app)
    newcomer = enter_api(client, slug, worker_id="NEW")
    newcomer.action("consent")
    assert newcomer.action("instructions_done")["stage"] == "trials"
    assert pages_pairs(app, newcomer) == pages[gone]
    # Polling alone holds a page at most assignment_timeout_minutes (20) after it was given.
    clock.advance(minutes=7)
    poller.state()  # 19 minutes: renewed
    assert pages[poller] <= reserved_pairs(app)
    clock.advance(minutes=2)
    poller.state()  # 21 minutes: no longer renewed by polling ...
    clock.advance(minutes=4)
    assert not pages[poller] & reserved_pairs(app)  # ... and lapsed 5 minutes after the last renewal
    # ... while votes keep renewing the active worker's page at any age.
    assert active.vote(active.open_trials()[0]).status_code == 201
    assert pages[active] - answered_pairs(app) <= reserved_pairs(app)
    assert not held_count_problems(app)


def answered_pairs(app) -> set[int]:
    with _session(app) as session:
        return set(session.scalars(select(Trial.pair_id).where(Trial.answered)))


def all_real_pairs(app) -> set[int]:
    with _session(app) as session:
        return set(session.scalars(select(Pair.id).where(~Pair.is_gold)))


def pages_pairs(app, worker: ApiWorker) -> set[int]:
    with _session(app) as session:
        return set(session.scalars(select(Trial.pair_id).join(Pair, Trial.pair_id == Pair.id).where(
            Trial.assignment_id == int(worker.aid), ~Pair.is_gold)))


def test_a_worker_who_returns_after_the_lapse_keeps_the_page(app, demo_stimuli, tmp_path, clock):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="return", **SMALL)
    client = Client(app, "192.0.2.2")
    away = enter_api(client, slug, worker_id="AWAY")
    away.action("consent")
    away.action("instructions_done")
    clock.advance(minutes=30)  # a long break: the page's pairs went back to the pool
    assert not pages_pairs(app, away) & reserved_pairs(app)
    body = away.answer_page()  # every answer is still taken, none is lost
    assert body["stage"] == "page_done" and body["page_complete"]
    assert count(app, Vote, Vote.assignment_id == int(away.aid)) == 10
    assert not held_count_problems(app)


def test_a_lapsed_page_is_retired_once_and_its_late_answers_count_as_votes(app, demo_stimuli, tmp_path, clock):
    """The next page start retires a lapsed page: its pairs go back to the pool (their n_held drops
    once, however many page starts follow), and the worker who comes back still answers it; those
    answers count as votes, not as held trials."""
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="retire", **SMALL)
    client = Client(app, "192.0.2.9")
    away = enter_api(client, slug, worker_id="AWAY")
    away.action("consent")
    away.action("instructions_done")
    theirs = pages_pairs(app, away)
    with _session(app) as session:
        assert set(session.scalars(select(Pair.id).where(Pair.n_held == 1))) == theirs
    clock.advance(minutes=6)
    others = []
    for name in ("NEXT1", "NEXT2", "NEXT3"):  # three page starts after the lapse
        worker = enter_api(client, slug, worker_id=name)
        worker.action("consent")
        assert worker.action("instructions_done")["stage"] == "trials"
        others.append(worker)
        assert not held_count_problems(app)
    with _session(app) as session:
        assert session.scalar(select(Page.held).where(Page.assignment_id == int(away.aid))) is False
        # Only the three new pages are held (30 trials): the lapsed page no longer is ...
        assert session.scalar(select(func.sum(Pair.n_held))) == 30
        assert session.scalar(select(func.min(Pair.n_held))) == 0
    # ... and some of its pairs went to the newcomers (44 pairs of one vote each, 34 of them never held).
    assert theirs & set().union(*(pages_pairs(app, w) for w in others))
    body = away.answer_page()  # the late answers are stored ...
    assert body["page_complete"]
    with _session(app) as session:  # ... as votes (n_votes), and take nothing off the newcomers' holds
        assert session.scalar(select(func.sum(Pair.n_votes))) == 10
        assert session.scalar(select(func.sum(Pair.n_held))) == 30
    assert not held_count_problems(app)


def test_a_worker_holds_one_reserved_page(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="one-page", **SMALL)
    client = Client(app, "192.0.2.3")
    first = enter_api(client, slug, platform="mturk", worker_id="WTWO", assignment_id="A1", hit_id="H1",
                      turk_submit_to=SANDBOX)
    first.action("consent")
    first.action("instructions_done")
    assert pages_pairs(app, first) <= reserved_pairs(app)
    second = enter_api(client, slug, platform="mturk", worker_id="WTWO", assignment_id="A2", hit_id="H1",
                       turk_submit_to=SANDBOX)
    second.action("consent")
    assert second.action("instructions_done")["stage"] == "trials"
    # The page of the worker's other HIT no longer holds its pairs.
    assert reserved_pairs(app) == pages_pairs(app, second)
    assert not held_count_problems(app)


# ---------------------------------------------------------------- study full

def test_a_worker_without_min_pages_is_told_the_study_is_full_never_completed(app, demo_stimuli, tmp_path, clock):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="min-two",
                             **{**SMALL, "pages": {"pairs_per_page": 10, "min_pages": 2, "max_pages": 3}})
    client = Client(app, "192.0.2.4")
    holders = []
    for k in range(4):  # 4 pages x 9 pairs of the 44
        holder = enter_api(client, slug, worker_id=f"HOLD-{k}")
        holder.action("consent")
        assert holder.action("instructions_done")["stage"] == "trials"
        holders.append(holder)
    token = token_of(client.page(f"/s/{slug}" + mturk_entry("H1", "WREAL", "AREAL")))
    real = enter_api(client, slug, platform="mturk", worker_id="WREAL", assignment_id="AREAL", hit_id="H1",
                     turk_submit_to=SANDBOX)  # the same assignment, now over the API (200, not limited)
    assert real.entry["token"] == token and real.entry["stage"] == "consent"  # 8 pairs are still free
    real.action("consent")
    assert real.action("instructions_done")["stage"] == "trials"
    assert real.answer_page()["stage"] == "page_done"
    state = real.action("continue")  # nothing free: one page done of the two needed
    assert state["stage"] == "full" and state["completion"] is None and state["page"] is None
    assert real.action("finish")["stage"] == "full"  # finishing does not complete it either
    html = client.page(f"/w/{token}/").get_data(as_text=True)
    assert "This study is full" in html and "return the HIT" in html
    assert "mturk-submit" not in html and "completionCode" not in html
    with _session(app) as session:
        row = session.get(Assignment, int(real.aid))
        assert row.stage == "full" and row.completion_code is None and row.completed_at is None
    # "Try again" while the study is still full changes nothing; once the holders' reservations lapse
    # it gives the worker a page at once.
    assert client.form(f"/w/{token}/retry").status_code == 303
    assert real.state()["stage"] == "full"
    clock.advance(minutes=6)
    assert client.form(f"/w/{token}/retry").status_code == 303
    assert real.state()["stage"] == "trials"
    assert real.answer_page()["stage"] == "page_done"
    assert real.action("finish")["stage"] == "completed"


def test_motion_study_full_after_calibration_spares_the_screening(app, motion_clips, tmp_path, clock):
    slug = create_motion_study(app, motion_clips.parent / "four.json", tmp_path, slug="motion-full",
                               session={"probes_per_clip": 1, "repetitions": 1, "observers_per_clip": 1,
                                        "clips_per_session": 4},
                               practice={"practice_needed": 0}, screening={"rdk_practice": 0, "rdk_trials": 3})
    first, second = MotionWorker(app, slug), MotionWorker(app, slug)
    assert first.entry["stage"] == second.entry["stage"] == "consent"
    for worker in (first, second):
        worker.start()
    first.calibrate()
    assert first.answer_block()["stage"] == "main"  # the first session takes all four clips
    assert second.calibrate().json["stage"] == "full"  # no RDK screening before being turned away
    state = second.state()
    assert state["stage"] == "full" and state["completion"] is None and state["trials"] == []
    assert "no work left" in state["message"]
    # The first worker walks away; after the reservation lapses the second is reopened where it was.
    clock.advance(minutes=6)
    again = second.client.post(f"/api/v1/studies/{slug}/assignments", json={"platform": "link",
                                                                            "worker_id": second.worker_id})
    assert again.status_code == 200 and again.json["stage"] == "rdk"


# ---------------------------------------------------------------- 20 scripted clients

def test_twenty_scripted_clients_cannot_starve_a_real_worker(limited_app, demo_stimuli, tmp_path, clock):
    """20 scripted clients hammer a small study: bare links, invented IDs from one address and from
    ten, forged HITs, pages taken and abandoned, a page kept alive by polling. Real workers still get
    pages, are never shown a completion before min_pages, and no acknowledged vote is lost."""
    app = limited_app
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="hammered", **SMALL)
    add_hit(app, slug, "HITREAL")
    bots = [Client(app, "10.6.6.6") for _ in range(10)] + [Client(app, f"10.7.0.{k}") for k in range(10)]
    workers: list[ApiWorker] = []
    refusals: dict[str, int] = {}

    def refused(response) -> None:
        key = str(response.status_code)
        refusals[key] = refusals.get(key, 0) + 1

    for k, bot in enumerate(bots):
        refused(bot.page(f"/s/{slug}"))  # anonymous: a participant ID is required
        if k >= 15:  # forged MTurk entries: the hitId is not one of the study's HITs
            refused(bot.enter(slug, platform="mturk", worker_id=f"WBOT{k}", assignment_id=f"ABOT{k}",
                              hit_id="HITFORGED", turk_submit_to=SANDBOX))
        response = bot.enter(slug, platform="link", worker_id=f"bot-{k}")
        if response.status_code != 201:
            refused(response)
            continue
        worker = ApiWorker(bot, response.json)
        workers.append(worker)
        worker.action("consent")
        state = worker.action("instructions_done")
        if state["stage"] != "trials":
            assert state["stage"] == "full" and state["completion"] is None
            continue
        if k % 5 == 1:  # answers three trials, then walks away
            for trial in worker.open_trials()[:3]:
                assert worker.vote(trial).status_code == 201
        elif k % 5 == 3:  # comes back under a new invented ID (the 5th entry from its address)
            again = bot.enter(slug, platform="link", worker_id=f"bot-{k}-again")
            assert again.status_code == 201
            workers.append(ApiWorker(bot, again.json))
    # 20 bare visits and 5 forged HITs refused (403); bots 4-9, the 6th to 11th entries from one address (429).
    assert refusals == {"403": 25, "429": 6}, refusals
    assert len(workers) == count(app, Worker) == 15
    poller = workers[2]  # bot 2: keeps its page alive by asking for the state
    assert len(pages_pairs(app, poller)) == 10
    assert not all_real_pairs(app) - reserved_pairs(app) - answered_pairs(app)  # the bots hold everything

    # A real MTurk worker arrives: told the study is full (return the HIT), never a submit form.
    real_client = Client(app, "198.51.100.77")
    token = token_of(real_client.page(f"/s/{slug}" + mturk_entry("HITREAL", "WREAL1", "AREAL1")))
    html = real_client.page(f"/w/{token}/").get_data(as_text=True)
    assert "This study is full" in html and "return the HIT" in html and "mturk-submit" not in html
    real = enter_api(real_client, slug, platform="mturk", worker_id="WREAL1", assignment_id="AREAL1",
                     hit_id="HITREAL", turk_submit_to=SANDBOX)
    assert real.entry["stage"] == "full" and real.state()["completion"] is None

    # Three times two minutes: the poller keeps its page alive, the others have abandoned theirs.
    for _ in range(3):
        clock.advance(minutes=2)
        poller.state()
    assert real_client.form(f"/w/{token}/retry").status_code == 303
    state = real.state()
    if state["stage"] == "consent":  # reopened from the start: it never had a page
        assert real_client.form(f"/w/{token}/consent", {"agree": "yes"}).status_code == 303
        assert real_client.form(f"/w/{token}/instructions").status_code == 303
        state = real.state()
    while state["stage"] in ("trials", "page_done"):
        assert state["completion"] is None  # no code or submit form before the end
        if state["stage"] == "trials":
            assert not pages_pairs(app, real) & pages_pairs(app, poller)  # the live page keeps its pairs
            real.answer_page()
            state = real.state()
        else:
            state = real.action("continue")
    assert state["stage"] == "completed" and state["progress"]["pages_completed"] == 3
    assert state["completion"]["mode"] == "mturk" and state["completion"]["code"]

    # The poller cannot hold its page beyond the assignment timeout (20 minutes): a second real worker
    # gets its pairs.
    for _ in range(9):  # renewed by polling until 20 minutes after it was given, then lapsed
        clock.advance(minutes=2)
        poller.state()
    second = enter_api(Client(app, "198.51.100.78"), slug, platform="link", worker_id="REAL-2")
    second.action("consent")
    assert second.action("instructions_done")["stage"] == "trials"
    assert pages_pairs(app, poller) & pages_pairs(app, second)
    assert not held_count_problems(app)
    assert second.answer_page()["stage"] == "page_done"

    # No acknowledged vote is lost, and every pair's counter matches its stored votes.
    acknowledged = [v for w in (*workers, real, second) for v in w.vote_ids]
    with _session(app) as session:
        stored = set(session.scalars(select(Vote.client_vote_id)))
        per_pair = dict(session.execute(select(Vote.pair_id, func.count()).group_by(Vote.pair_id)).all())
        counters = dict(session.execute(select(Pair.id, Pair.n_votes).where(~Pair.is_gold)).all())
    assert set(acknowledged) == stored and len(acknowledged) == len(stored)
    assert all(counters[p] == per_pair.get(p, 0) for p in counters)
    assert max(counters.values()) == 1  # nobody came back to a lapsed page here: no pair over its target


def _walk_and_record_pages(app, demo_stimuli, folder) -> list[tuple[int, int, int, bool]]:
    """Three workers, two pages each, answering everything: every trial as (worker, page, pair, left_is_a)."""
    slug = create_test_study(app, demo_stimuli, folder, slug="same-pages",
                             **{**SMALL, "design": {"degree": 2, "votes_per_pair": 2}})
    client = Client(app, "192.0.2.9")
    for k in range(3):
        worker = enter_api(client, slug, worker_id=f"SAME{k}")
        worker.action("consent")
        assert worker.action("instructions_done")["stage"] == "trials"
        worker.answer_page()
        assert worker.action("continue")["stage"] == "trials"
        worker.answer_page()
    with _session(app) as session:
        rows = session.execute(select(Page.assignment_id, Page.index, Trial.pair_id, Trial.left_is_a)
                               .join(Page, Trial.page_id == Page.id)
                               .order_by(Page.assignment_id, Page.index, Trial.position)).all()
    return [tuple(row) for row in rows]


def test_pages_are_the_same_on_sqlite_and_postgresql(sqlite_url, postgres_url, demo_stimuli, tmp_path, clock):
    # PostgreSQL reads the needy pairs as two arrays, SQLite as rows: the same study seed and the same
    # votes must still give every worker the same pairs, in the same order and on the same sides.
    pages = []
    for name, url in (("sqlite", sqlite_url), ("postgresql", postgres_url)):
        app = make_test_app(url, tmp_path / name, clock=clock)
        try:
            (tmp_path / f"study-{name}").mkdir()
            pages.append(_walk_and_record_pages(app, demo_stimuli, tmp_path / f"study-{name}"))
        finally:
            app_services(app).engine.dispose()
    assert len(pages[0]) == 60 and len({pair for _, _, pair, _ in pages[0]}) > 30
    assert pages[0] == pages[1]
