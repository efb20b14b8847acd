"""Active pair sampling ([design] sampling = "active"): the allocation rules of the regular design
still hold -- budget, per-pair cap, never a pair twice to a worker, sets mixed on a page, gold on
every page, reserved trials counted as votes to come, two app instances -- and the warm-up comes
first, the selections are made outside the allocation lock and refreshed as votes arrive.

Run on SQLite and PostgreSQL. The demo stimuli: 4 scenes x 11 candidates, so 55 candidate pairs per
set (220 in all); ``degree = 2`` gives each set a warm-up design of 11 pairs.
"""
from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from server.models import Page, Study
from server.paradigms.paired.models import Pair, Trial
from server.paradigms import StudyDefinitionError, paradigm_for, read_study_file
from server.paradigms.paired import active as paired_active
from server.paradigms.paired import paradigm as paired
from server.services import app_services

from .allocation_support import real_pairs_of, start, work, worker_row_id
from .api_support import SpecClient
from .concurrency_support import HttpWorker, together
from .conftest import WorkerClient, create_test_study, held_count_problems, make_test_app, write_study_file

N_SETS, N_CANDIDATES, DESIGN_PAIRS = 4, 11, 11
ALL_PAIRS = N_SETS * N_CANDIDATES * (N_CANDIDATES - 1) // 2


def active_study(votes_per_pair: int = 2, warmup: int = 1, pairs_per_page: int = 10, max_pages: int = 3,
                 **quality) -> dict:
    """study.toml sections of an active study at degree 2 (budget: votes_per_pair x 11 per set)."""
    return {"design": {"degree": 2, "votes_per_pair": votes_per_pair, "sampling": "active",
                       "warmup_votes_per_pair": warmup},
            "pages": {"pairs_per_page": pairs_per_page, "min_pages": 1, "max_pages": max_pages},
            "quality": {"quiz_size": 0, "gold_rate": 0.1, **quality}}


def _session(app):
    return app_services(app).sessions()


def pair_rows(app) -> dict[int, tuple[int, int, int]]:
    """Real pair ID -> (set ID, target votes, stored votes)."""
    with _session(app) as session:
        return {row.id: (row.set_id, row.target_votes, row.n_votes)
                for row in session.execute(select(Pair.id, Pair.set_id, Pair.target_votes, Pair.n_votes)
                                           .where(~Pair.is_gold))}


def handed_out(app) -> Counter:
    """Real trials per pair: votes given and trials still open (what a pair has been handed)."""
    with _session(app) as session:
        return Counter(session.scalars(select(Trial.pair_id).join(Pair, Trial.pair_id == Pair.id)
                                       .where(~Pair.is_gold)))


def per_set(counts: Counter, pairs: dict[int, tuple[int, int, int]]) -> Counter:
    out = Counter({set_id: 0 for set_id, _, _ in pairs.values()})
    for pair_id, n in counts.items():
        out[pairs[pair_id][0]] += n
    return out


def budgets(pairs: dict[int, tuple[int, int, int]]) -> Counter:
    out = Counter()
    for set_id, target, _ in pairs.values():
        out[set_id] += target
    return out


def check_rules(app, votes_per_pair: int) -> None:
    """No set beyond its budget, no pair beyond its cap, no worker given a real pair twice, and gold on
    every page of trials."""
    pairs = pair_rows(app)
    given = handed_out(app)
    assert all(per_set(given, pairs)[s] <= b for s, b in budgets(pairs).items()), (per_set(given, pairs), budgets(pairs))
    assert max(given.values(), default=0) <= votes_per_pair
    with _session(app) as session:
        rows = session.execute(select(Trial.worker_id, Trial.pair_id).join(Pair, Trial.pair_id == Pair.id)
                               .where(~Pair.is_gold)).all()
        pages_without_gold = session.scalar(
            select(func.count()).select_from(Page).where(Page.kind == "trials", ~select(Trial.id).where(
                Trial.page_id == Page.id, Trial.is_gold).exists()))
    repeats = {k: n for k, n in Counter(rows).items() if n > 1}
    assert not repeats, f"(worker, pair) given twice: {repeats}"
    assert pages_without_gold == 0


def test_active_study_stores_every_pair_and_the_regular_budget(app, demo_stimuli, tmp_path):
    slug = create_test_study(app, demo_stimuli, tmp_path, slug="stored", **active_study(votes_per_pair=3))
    pairs = pair_rows(app)
    assert len(pairs) == ALL_PAIRS
    assert Counter(target for _, target, _ in pairs.values()) == {3: N_SETS * DESIGN_PAIRS,
                                                                  0: ALL_PAIRS - N_SETS * DESIGN_PAIRS}
    assert set(budgets(pairs).values()) == {3 * DESIGN_PAIRS}
    with _session(app) as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        progress = paradigm_for(study).progress(session, study.id)
    # The study list and the dashboard show the budget as the target, and the design at work.
    assert progress["target_responses"] == N_SETS * 3 * DESIGN_PAIRS and progress["n_units"] == ALL_PAIRS
    assert progress["design"]["sampling"] == "active" and progress["design"]["phase"] == "warm-up"
    assert progress["design"]["phases"] == {"warm-up": 4, "active": 0, "done": 0}


def test_sampling_settings_are_validated(demo_stimuli, tmp_path):
    with pytest.raises(StudyDefinitionError, match="design.sampling must be 'regular' or 'active'"):
        read_study_file(write_study_file(tmp_path, demo_stimuli, "bad", design={"sampling": "adaptive"}))
    with pytest.raises(StudyDefinitionError, match=r"warmup_votes_per_pair must be in \[0, votes_per_pair = 2\]"):
        read_study_file(write_study_file(tmp_path, demo_stimuli, "bad2", design={
            "sampling": "active", "votes_per_pair": 2, "warmup_votes_per_pair": 3}))
    assert read_study_file(write_study_file(tmp_path, demo_stimuli, "plain")).sampling == "regular"


def test_warmup_first_then_the_budget_exactly_with_every_rule(app, demo_stimuli, tmp_path):
    """Workers until the study is full: each set ends at exactly its budget (2 x 11 votes), no pair
    above 2, every design pair had its warm-up vote before any other pair of its set was given,
    pairs outside the design were chosen afterwards, and every page mixed the sets."""
    create_test_study(app, demo_stimuli, tmp_path, slug="fill", **active_study())
    client = SpecClient(app.test_client())
    for _ in range(8):
        state = work(WorkerClient(client, "fill"))
        if state["stage"] == "full":
            break
        assert state["stage"] == "completed"
    else:
        raise AssertionError("the study never filled")
    pairs = pair_rows(app)
    votes = Counter({pair_id: n for pair_id, (_, _, n) in pairs.items() if n})
    assert set(per_set(votes, pairs).values()) == {2 * DESIGN_PAIRS}
    assert max(votes.values()) <= 2
    check_rules(app, 2)
    with _session(app) as session:
        assert session.scalar(select(func.count()).select_from(Trial).where(~Trial.answered)) == 0
        trials = session.execute(select(Trial.id, Trial.page_id, Trial.pair_id).join(Pair, Trial.pair_id == Pair.id)
                                 .where(~Pair.is_gold).order_by(Trial.id)).all()
    first_page: dict[int, int] = {}  # pair -> the page that first showed it (page IDs grow with time)
    for _, page_id, pair_id in trials:
        first_page.setdefault(pair_id, page_id)
    for set_id in budgets(pairs):
        design = [p for p, (s, target, _) in pairs.items() if s == set_id and target > 0]
        others = [first_page[p] for p, (s, target, _) in pairs.items() if s == set_id and target == 0
                  and p in first_page]
        assert all(votes[p] >= 1 for p in design), "a design pair missed its warm-up vote"
        assert others, f"set {set_id}: no pair outside the design was ever chosen"
        # Other pairs come on the page that hands out the warm-up's last pairs at the earliest.
        assert max(first_page[p] for p in design) <= min(others), f"set {set_id}: chosen before its warm-up"
    pages = Counter()
    sets_on_page: dict[int, set[int]] = {}
    for _, page_id, pair_id in trials:
        pages[page_id] += 1
        sets_on_page.setdefault(page_id, set()).add(pairs[pair_id][0])
    full_pages = [page for page, n in pages.items() if n == 9]
    assert len(full_pages) >= 6 and all(len(sets_on_page[page]) >= 2 for page in full_pages)


def test_a_worker_never_sees_a_pair_twice_and_the_budget_turns_newcomers_away(app, demo_stimuli, tmp_path):
    """One worker over two HITs may take the whole budget (132 votes over 220 candidate pairs), never
    the same pair twice; then a newcomer is told at entry that the study is full, although most
    candidate pairs have no vote (and the worker has seen none of those)."""
    create_test_study(app, demo_stimuli, tmp_path, slug="greedy",
                      **active_study(votes_per_pair=3, pairs_per_page=20, max_pages=20))
    client = SpecClient(app.test_client())
    assert work(WorkerClient(client, "greedy", worker_id="WGREEDY"), pages=3)["stage"] == "completed"
    assert work(WorkerClient(client, "greedy", worker_id="WGREEDY"))["stage"] == "completed"
    seen = real_pairs_of(app, worker_id=worker_row_id(app, "WGREEDY"))
    assert len(seen) == len(set(seen)) == N_SETS * 3 * DESIGN_PAIRS
    pairs = pair_rows(app)
    assert set(per_set(Counter(seen), pairs).values()) == {3 * DESIGN_PAIRS}
    assert sum(1 for _, _, n in pairs.values() if n == 0) == ALL_PAIRS - len(seen) > 0
    newcomer = WorkerClient(client, "greedy")
    assert newcomer.entry["stage"] == "full"
    newcomer.action("consent")
    assert newcomer.action("instructions_done").json["stage"] == "full"
    check_rules(app, 3)


def test_reserved_trials_count_as_votes_and_are_kept_out_of_selections(app, demo_stimuli, tmp_path, clock,
                                                                        monkeypatch):
    """A page taken in the active phase and abandoned: its trials count towards the budget until the
    reservation lapses (the study is full meanwhile), the selector is told to leave its pairs out,
    and once it lapses the same number of votes is handed out again -- never more than the budget."""
    from analysis import active

    excluded: list[set[tuple[int, int]]] = []
    plan_batch = active.plan_batch

    def recording(n_items, winners, losers, size, **kwargs):
        exclude = kwargs.get("exclude")
        excluded.append(set() if exclude is None else {tuple(sorted(map(int, p))) for p in exclude})
        return plan_batch(n_items, winners, losers, size, **kwargs)

    monkeypatch.setattr(active, "plan_batch", recording)
    create_test_study(app, demo_stimuli, tmp_path, slug="held",
                      **active_study(votes_per_pair=3, pairs_per_page=10, max_pages=3, reservation_minutes=5))
    client = SpecClient(app.test_client())
    for _ in range(2):  # the warm-up: 44 votes
        work(WorkerClient(client, "held"))
    abandoned = WorkerClient(client, "held")
    assert start(abandoned)["stage"] == "trials"
    held = real_pairs_of(app, assignment_id=int(abandoned.assignment_id), answered=False)
    assert len(held) == 9
    excluded.clear()
    for _ in range(6):
        if work(WorkerClient(client, "held"))["stage"] == "full":
            break
    pairs = pair_rows(app)
    assert sum(handed_out(app).values()) == 132  # the budget, the abandoned page's 9 trials included
    assert sum(n for _, _, n in pairs.values()) == 132 - 9
    # Every selection made while the page was held left its pairs out (they have votes on the way).
    with _session(app) as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == "held"))
        layout = paired.study_layout(session, study_id)
        sets = paired_active.active_sets(session, study_id, layout.pairs, layout.gold)
    held_items = set()
    for pair_id in held:
        active_set = sets[layout.pairs[pair_id][0]]
        held_items.add(tuple(sorted(map(int, active_set.pairs[active_set.position[pair_id]]))))
    assert excluded, "no selection was made after the warm-up"
    assert all(excluded) and held_items <= set().union(*excluded)
    check_rules(app, 3)
    # The reservation lapses: its 9 votes are handed out again, to another worker.
    clock.advance(minutes=6)
    later = WorkerClient(client, "held")
    assert start(later)["stage"] == "trials"
    assert len(real_pairs_of(app, assignment_id=int(later.assignment_id))) == 9
    later.answer_page(later.correct_side)
    pairs = pair_rows(app)
    assert sum(n for _, _, n in pairs.values()) == 132 and max(n for _, _, n in pairs.values()) <= 3
    assert not held_count_problems(app)


def test_selections_are_made_outside_the_allocation_lock_and_refreshed_as_votes_arrive(app, demo_stimuli, tmp_path,
                                                                                      monkeypatch):
    from analysis import active

    locked = threading.local()
    calls: list[tuple[bool, int]] = []
    allocation_lock = paired.allocation_lock

    def lock(session, study, namespace):
        locked.held = True
        allocation_lock(session, study, namespace)

    def released(session):
        locked.held = False

    plan_batch = active.plan_batch

    def recording(n_items, winners, losers, size, **kwargs):
        calls.append((getattr(locked, "held", False), len(winners)))
        return plan_batch(n_items, winners, losers, size, **kwargs)

    monkeypatch.setattr(paired, "allocation_lock", lock)
    monkeypatch.setattr(active, "plan_batch", recording)
    event.listen(Session, "after_commit", released)
    event.listen(Session, "after_rollback", released)
    try:
        create_test_study(app, demo_stimuli, tmp_path, slug="lock", **active_study(votes_per_pair=4, max_pages=5))
        client = SpecClient(app.test_client())
        for _ in range(6):
            if work(WorkerClient(client, "lock"))["stage"] == "full":
                break
    finally:
        event.remove(Session, "after_commit", released)
        event.remove(Session, "after_rollback", released)
    assert calls, "no selection was made"
    assert not [c for c in calls if c[0]], "a selection ran under the allocation lock"
    # Each set's selection is made again as its votes grow: many selections, from ever more votes.
    assert len(calls) >= 2 * N_SETS
    assert len({n for _, n in calls}) >= 2 * N_SETS
    check_rules(app, 4)


@pytest.fixture
def second_app(database_url, tmp_path, clock):
    """Another app instance on the same database: its own engine, so its own selections."""
    other = make_test_app(database_url, tmp_path / "second", clock=clock)
    yield other
    app_services(other).engine.dispose()


def _serve(app):
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread, f"http://127.0.0.1:{server.server_port}"


def test_two_instances_starting_pages_at_once_never_overfill(app, second_app, demo_stimuli, tmp_path):
    """After the warm-up, 10 workers on two app instances (each with its own selections) start a page
    of 20 at the same moment: the 34 votes left are handed out exactly, no pair above its cap."""
    create_test_study(app, demo_stimuli, tmp_path, slug="twice", **active_study(pairs_per_page=20))
    client = SpecClient(app.test_client())
    for _ in range(3):  # the warm-up (44 votes) and 10 more, on the first instance
        work(WorkerClient(client, "twice"), pages=1)
    assert sum(handed_out(app).values()) == 3 * 18
    servers = [_serve(app), _serve(second_app)]
    try:
        workers = [HttpWorker(servers[k % 2][2], "twice") for k in range(10)]
        for worker in workers:
            assert worker.action("consent").status_code == 200
        responses = together(10, lambda w: w.action("instructions_done"), *[(w,) for w in workers])
    finally:
        for server, thread, _ in servers:
            server.shutdown()
            thread.join(timeout=10)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    assert sum(handed_out(app).values()) == 88  # the budget, no slot unused, none over
    stages = Counter(r.json()["stage"] for r in responses)
    assert stages["trials"] >= 2 and stages["trials"] + stages["full"] == 10, stages
    check_rules(app, 2)
    assert not held_count_problems(app)


def test_dashboard_design_summary_names_the_phase_and_the_expected_gain(app, demo_stimuli, tmp_path):
    create_test_study(app, demo_stimuli, tmp_path, slug="summary", **active_study(votes_per_pair=4, max_pages=5))
    regular = create_test_study(app, demo_stimuli, tmp_path, slug="regular")
    client = SpecClient(app.test_client())

    def design(slug: str) -> dict:
        with _session(app) as session:
            study = session.scalar(select(Study).where(Study.slug == slug))
            return paradigm_for(study).progress(session, study.id)["design"]

    assert design(regular) == {"sampling": "regular", "label": "random regular design", "phase": None}
    assert design("summary")["phase"] == "warm-up" and design("summary")["expected_gain"] is None
    for _ in range(3):
        work(WorkerClient(client, "summary"))
    summary = design("summary")
    assert summary["phase"] == "active" and summary["phases"]["active"] == N_SETS
    # The next batches' expected precision gain (percent), beside that of as many random pairs.
    assert summary["batch_votes"] > 0 and summary["expected_gain"] > 0 and summary["random_gain"] >= 0
    assert summary["expected_gain"] > summary["random_gain"], summary


def test_without_warmup_the_first_page_is_chosen_from_the_prior(app, demo_stimuli, tmp_path):
    """``warmup_votes_per_pair = 0``: no warm-up, the selector's first batches (from the prior, no votes)
    fill the first page, most of it outside the design, still one pair of each set in turn."""
    create_test_study(app, demo_stimuli, tmp_path, slug="cold", **active_study(warmup=0, pairs_per_page=20))
    client = SpecClient(app.test_client())
    worker = WorkerClient(client, "cold")
    assert start(worker)["stage"] == "trials"
    pairs = pair_rows(app)
    given = real_pairs_of(app, assignment_id=int(worker.assignment_id))
    assert len(given) == 18 and sum(pairs[p][1] == 0 for p in given) >= 9
    assert set(per_set(Counter(given), pairs).values()) <= {4, 5}  # 18 over 4 sets, in turn
    check_rules(app, 2)
