"""The fake paradigm: after consent and instructions, one trial asks how many dots the worker counts; the
answer is stored in its own table and the worker is done. It declares only what the shared floor asks of a
paradigm (a spec from params.py mixins, study creation, actions, a State, one response kind, its window
requirement through display.Layout) and reuses the shared lifecycle (entry, stages, completion)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table, insert, select
from sqlalchemy.orm import Session

from server.errors import ApiError, invalid
from server.models import Assignment, Study
from server.paradigms.core import (Paradigm, PayUnit, ResponseKind, TimePrior, as_object, complete, completion_info,
                                  refused_after_the_end, with_assignment_object)
from server.paradigms.display import Layout, WindowRequirement, layout_window, policy_factor
from server.paradigms.params import EntryParams, MTurkParams, StudyParams, TextsParams, param, parse_spec, study_template
from server.paradigms.sections import DisplayParams
from server.paradigms.stages import Stage

KIND = "fake-tally"
DOTS = (220, 160)  # the trial's image at scale 1 (CSS px); a 44 px bar and 8 px padding around it
CHROME = (16, 60)

# Its table. A real paradigm declares it on server.models.Base in its models.py and adds a migration (one file
# outside its package); the fake keeps its own metadata, created by the test, so no other test sees it.
METADATA = MetaData()
TALLIES = Table("fake_tally_answer", METADATA, Column("id", Integer, primary_key=True),
                Column("assignment_id", Integer, nullable=False), Column("answer_id", String(36), unique=True),
                Column("count", Integer, nullable=False))


@dataclass(frozen=True, kw_only=True)
class TallySpec(StudyParams, EntryParams, TextsParams, MTurkParams, DisplayParams):
    kind: str = param(KIND, section="study", choices=(KIND,), doc="the paradigm: counting dots")
    dots: int = param(7, section="tally", low=1, high=100, doc="dots shown")
    reward: str = param("0.10", section="tally", money=True, doc="the pay")


class FakeTally(Paradigm):
    kind = KIND
    title = "dot tally"
    spec_class = TallySpec
    template = study_template(TallySpec, header="a tally study")
    app_stages = frozenset({Stage.TRIALS})

    def spec_from_toml(self, data: dict[str, Any], path: Path) -> TallySpec:
        return parse_spec(TallySpec, data, path)

    def create_study(self, session: Session, spec: TallySpec) -> Study:
        study = Study(slug=spec.slug, name=spec.name, seed=spec.seed, config=spec.to_config(), stimulus_root=".")
        session.add(study)
        session.flush()
        return study

    def requirement_of_spec(self, spec: TallySpec) -> WindowRequirement:
        layout = Layout(content=DOTS, chrome=CHROME)
        floor = (spec.min_window_width, spec.min_window_height)
        return WindowRequirement(min_window=layout_window(layout, policy_factor(spec.policy, spec.min_image_scale),
                                                          floor),
                                 policy=spec.policy, layouts=(layout,), min_image_scale=spec.min_image_scale,
                                 floor=floor)

    def window_requirement(self, session: Session, study: Study) -> WindowRequirement:
        return self.requirement_of_spec(self.spec_for(session, study.id))

    def work_left(self, session: Session, study: Study, worker_id: int) -> bool:
        return True

    def perform_action(self, session: Session, assignment, action: str) -> Assignment:
        assignment = as_object(session, assignment)
        steps = {"consent": (Stage.CONSENT, Stage.INSTRUCTIONS), "instructions_done": (Stage.INSTRUCTIONS, Stage.TRIALS)}
        if action not in steps:
            raise invalid(f"unknown action {action!r}")
        before, after = steps[action]
        if assignment.stage != before:
            raise ApiError(409, "wrong_stage", f"cannot {action} at stage {assignment.stage}")
        assignment.stage = after
        return assignment

    def state(self, session: Session, assignment, url_for) -> dict[str, Any]:
        assignment = as_object(session, assignment)
        spec = self.spec_for(session, assignment.study_id)
        return {"assignment_id": str(assignment.id), "stage": assignment.stage,
                "trial": {"dots": spec.dots} if assignment.stage == Stage.TRIALS else None,
                "completion": completion_info(assignment)}

    def pay_unit(self, spec: TallySpec) -> PayUnit:
        return PayUnit("session", Decimal(spec.reward), Decimal("0.00"), 1, 1)

    def time_prior(self, spec: TallySpec) -> TimePrior:
        return TimePrior(unit_s=30.0, setup_s=30.0, what="1 count")


def record_tally(session: Session, assignment: Assignment, body: Any) -> tuple[int, dict[str, Any]]:
    """``{"answer_id": UUID, "count": int}`` at stage trials: stored, and the worker is done."""
    if not isinstance(body, dict) or not isinstance(body.get("count"), int) or not 0 <= body["count"] <= 1000:
        raise invalid("count must be an integer in [0, 1000]")
    answer_id = str(uuid.UUID(str(body.get("answer_id"))))
    if session.scalar(select(TALLIES.c.id).where(TALLIES.c.answer_id == answer_id)) is not None:
        return 200, {"status": "duplicate"}
    if assignment.stage != Stage.TRIALS:
        raise ApiError(409, "wrong_stage", f"no trial at stage {assignment.stage}")
    session.execute(insert(TALLIES).values(assignment_id=assignment.id, answer_id=answer_id, count=body["count"]))
    complete(assignment)
    return 201, {"status": "stored", "stage": assignment.stage}


FakeTally.response_kinds = (ResponseKind(
    name="tallies", record=refused_after_the_end(with_assignment_object(record_tally)), summary="Store a dot count.",
    request_schema={"type": "object", "required": ["answer_id", "count"],
                    "properties": {"answer_id": {"type": "string", "format": "uuid"}, "count": {"type": "integer"}}}),)
