"""Simulated workers of the demo study, inserted straight into the database (shared by several test modules)."""
from __future__ import annotations

import uuid

import numpy as np
from scipy.special import ndtr
from sqlalchemy import select

from server.models import Assignment, Page, Study, Worker
from server.paradigms.paired.models import GoldResult, Pair, Stimulus, StudySet, Trial, Vote
from server.services import app_services

# Latent quality of the demo's flow methods: the true flow is best, no motion compensation worst.
QUALITY = {"true_flow": 2.0, "dis_medium": 1.2, "dis_fast": 1.0, "farneback_default": 0.8, "dis_medium_unrefined": 0.6,
           "farneback_wide": 0.4, "dis_fast_unrefined": 0.2, "farneback_coarse": 0.0, "dis_ultrafast_refined": -0.2,
           "dis_ultrafast": -0.4, "zero_flow": -2.0}


def add_votes(app, slug: str, *, honest: int = 0, random: int = 0, pairs_per_worker: int | None = None,
              sets: list[str] | None = None, gold: bool = True, seed: int = 0, prefix: str = "SIM",
              biased: int = 0, favour: str = "zero_flow") -> list[str]:
    """Insert completed workers with their votes straight into the database (fast; bypasses the API).

    Honest workers are Thurstone observers of :data:`QUALITY`; random workers click at random; the
    ``biased`` workers (after those) answer as honest ones except that they always pick ``favour``.
    Each worker answers one gold pair per set (with ``gold``), correctly when honest, and every other real pair
    of ``sets`` (default: all) or the first ``pairs_per_worker`` of a shuffled list. A gold pair of the design
    is answered once, as gold, as the server shows it: a vote of that pair and a check.
    Returns the raw worker IDs.
    """
    rng = np.random.default_rng(seed)
    ids = []
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        query = (select(Pair, StudySet.name).join(StudySet, Pair.set_id == StudySet.id)
                 .where(StudySet.study_id == study.id).order_by(Pair.id))
        pairs = [(p, name) for p, name in session.execute(query) if sets is None or name in sets]
        stimuli = {s.id: s.item_id for s in session.scalars(select(Stimulus))}
        first_gold = {}  # one gold pair per set (each set has several)
        for p, n in pairs:
            if p.gold_winner_id is not None:
                first_gold.setdefault(n, (p, n))
        golds = list(first_gold.values()) if gold else []
        gold_ids = {p.id for p, _ in golds}
        real = [(p, n) for p, n in pairs if not p.is_gold and p.id not in gold_ids]
        for k in range(honest + random + biased):
            is_honest = k < honest or k >= honest + random
            favoured = favour if k >= honest + random else None
            raw = f"{prefix}{seed}X{k:03d}"
            ids.append(raw)
            worker = Worker(study_id=study.id, platform="mturk", external_id=raw)
            session.add(worker)
            session.flush()
            assignment = Assignment(study_id=study.id, worker_id=worker.id, platform="mturk", external_id=f"A{raw}",
                                    stage="completed", token_nonce=uuid.uuid4().hex[:16], pages_completed=1)
            session.add(assignment)
            session.flush()
            page = Page(assignment_id=assignment.id, index=0, kind="trials")
            session.add(page)
            session.flush()
            count = len(real) if pairs_per_worker is None else pairs_per_worker
            chosen = [real[i] for i in rng.permutation(len(real))[:count]] + golds
            trials, votes = [], []
            for position, (pair, _) in enumerate(chosen):
                trials.append(Trial(page_id=page.id, assignment_id=assignment.id, worker_id=worker.id,
                                    position=position, pair_id=pair.id, left_is_a=bool(rng.random() < 0.5),
                                    is_gold=pair.id in gold_ids, answered=True))
            session.add_all(trials)
            session.flush()  # one round trip per worker and table: PostgreSQL tests stay fast
            for trial, (pair, _) in zip(trials, chosen):
                a_wins = _a_wins(pair, stimuli, is_honest, rng, favoured, pair.id in gold_ids)
                votes.append(Vote(client_vote_id=str(uuid.uuid4()), trial_id=trial.id, assignment_id=assignment.id,
                                  worker_id=worker.id, study_id=study.id, pair_id=pair.id,
                                  winner_id=pair.stimulus_a_id if a_wins else pair.stimulus_b_id,
                                  chose_left=a_wins == trial.left_is_a, rt_ms=float(rng.uniform(500, 4000)),
                                  input="mouse"))
            session.add_all(votes)
            session.flush()
            session.add_all(GoldResult(vote_id=v.id, worker_id=worker.id, assignment_id=assignment.id, is_quiz=False,
                                       correct=v.winner_id == pair.gold_winner_id)
                            for v, (pair, _) in zip(votes, chosen) if pair.id in gold_ids)
        session.commit()
    return ids


def _a_wins(pair: Pair, stimuli: dict[int, str], honest: bool, rng: np.random.Generator,
            favour: str | None = None, gold: bool = False) -> bool:
    if gold:
        return pair.gold_winner_id == pair.stimulus_a_id if honest else bool(rng.random() < 0.5)
    a, b = stimuli[pair.stimulus_a_id], stimuli[pair.stimulus_b_id]
    if favour in (a, b):
        return a == favour
    return bool(rng.random() < (ndtr(QUALITY[a] - QUALITY[b]) if honest else 0.5))
