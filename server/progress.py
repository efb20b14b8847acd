"""Progress figures of a study, shared by the CLI and the dashboard."""
from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .models import Pair, StudySet, Vote, Worker


def study_progress(session: Session, study_id: int) -> dict[str, Any]:
    """Counts of sets, pairs, votes (real pairs only), the votes targeted, and workers."""
    n_sets = session.scalar(select(func.count()).select_from(StudySet).where(StudySet.study_id == study_id))
    n_pairs, target = session.execute(
        select(func.count(), func.coalesce(func.sum(Pair.target_votes), 0)).join(StudySet)
        .where(StudySet.study_id == study_id, ~Pair.is_gold)).one()
    n_votes = session.scalar(select(func.count()).select_from(Vote).join(Pair, Vote.pair_id == Pair.id)
                             .where(Vote.study_id == study_id, ~Pair.is_gold))
    n_workers = session.scalar(select(func.count()).select_from(Worker).where(Worker.study_id == study_id))
    return {"n_sets": int(n_sets), "n_pairs": int(n_pairs), "target_votes": int(target), "n_votes": int(n_votes),
            "fill": n_votes / target if target else 0.0, "n_workers": int(n_workers)}
