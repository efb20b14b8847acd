"""schemathesis against the worker API's OpenAPI document (:mod:`server.openapi`: ``server/openapi.yaml``
and every response kind a paradigm declares) through the WSGI app (no network), issue 12 item 3.

For both study kinds (paired comparison, motion matching) and both kinds of caller (a worker with
the valid bearer token of its own assignment; a caller with no token or with the token of another
assignment), schemathesis generates requests for every operation of the spec, valid ones
(positive) and invalid ones (negative); every declared response kind is among them (checked). Every response must be free of server errors (5xx) and
conform to the spec: documented status, documented content type, body valid for the schema.

Bounded and reproducible: a fixed number of examples per operation and mode, Hypothesis
derandomised (no example database, no shrinking). The valid-token runs keep real state moving:
a pool of assignments at different stages, and votes or motion responses that name a real
open trial half of the time, so stored responses, replays and stage changes are exercised too.
The figures (requests, 5xx, violations) are printed (``pytest -s``) and recorded as test
properties.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from server.openapi import document
from server.paradigms.core import response_kinds

from .conftest import WorkerClient
from .motion_support import MotionWorker

# Per operation and generation mode: about 8 x (8 + 6) requests per run. A deeper run:
# PERCEPTLAB_FUZZ_EXAMPLES=100 pytest tests/server/test_api_fuzz.py -s
EXAMPLES_PER_OPERATION = int(os.environ.get("PERCEPTLAB_FUZZ_EXAMPLES", "8"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Every declared response kind's operation; those whose body names a trial get real trial IDs half of the time.
RESPONSE_OPERATIONS = {kind.operation_id for _, kind in response_kinds().values()}


def _names_a_trial(operation_id: str) -> bool:
    for _, kind in response_kinds().values():
        if kind.operation_id == operation_id:
            schema = kind.request_schema
            if "$ref" in schema:
                schema = document()["components"]["schemas"][schema["$ref"].rpartition("/")[2]]
            return "trial_id" in schema.get("properties", {})
    return False


TRIAL_OPERATIONS = {operation_id for operation_id in RESPONSE_OPERATIONS if _names_a_trial(operation_id)}


@dataclasses.dataclass
class Figures:
    """What one run did: requests sent, server errors, and every spec violation (operation, status, title)."""

    requests: int = 0
    server_errors: list[str] = dataclasses.field(default_factory=list)
    violations: list[str] = dataclasses.field(default_factory=list)
    unsatisfiable: list[str] = dataclasses.field(default_factory=list)
    statuses: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def summary(self, label: str) -> str:
        return (f"schemathesis {label}: {self.requests} requests, {len(self.server_errors)} 5xx, "
                f"{len(self.violations)} violations")


@dataclasses.dataclass
class Caller:
    """Fixed path parameters and headers for one strategy (None: schemathesis generates them)."""

    path_parameters: dict[str, str]
    headers: dict[str, str]
    trial_ids: list[Any] = dataclasses.field(default_factory=list)


def _schema(app):
    schema = schemathesis.openapi.from_dict(copy.deepcopy(document()))
    schema.app = app  # requests go to the WSGI app in-process
    return schema


def _strategy(operation, mode: GenerationMode, caller: Caller):
    names = {p.name for p in operation.path_parameters}
    fixed = {k: v for k, v in caller.path_parameters.items() if k in names}
    return operation.as_strategy(generation_mode=mode, path_parameters=fixed or None,
                                 headers=caller.headers or None)


def _name_a_real_trial(case, caller: Caller, data) -> None:
    """Half of the votes / motion responses name a real trial of the caller's assignment."""
    if case.operation.definition.raw.get("operationId") not in TRIAL_OPERATIONS or not caller.trial_ids:
        return
    if isinstance(case.body, dict) and data.draw(st.booleans(), label="real trial"):
        case.body["trial_id"] = data.draw(st.sampled_from(caller.trial_ids), label="trial_id")


def fuzz(app, callers: list[Caller]) -> Figures:
    """Run every operation of the spec in both generation modes for each caller; collect the figures."""
    schema = _schema(app)
    figures = Figures()
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        # Invalid inputs need something to break: a body (GETs only have path parameters, fixed or free strings).
        modes = [GenerationMode.POSITIVE] + [GenerationMode.NEGATIVE] * bool(operation.body)
        for mode in modes:
            strategies = [(_strategy(operation, mode, caller), caller) for caller in callers]

            @settings(max_examples=EXAMPLES_PER_OPERATION, derandomize=True, database=None, deadline=None,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            @given(data=st.data())
            def run(data):
                index = data.draw(st.integers(0, len(strategies) - 1), label="caller")
                strategy, caller = strategies[index]
                case = data.draw(strategy, label="case")
                _name_a_real_trial(case, caller, data)
                response = case.call()
                figures.requests += 1
                figures.statuses[(case.operation.definition.raw["operationId"], response.status_code)] += 1
                label = f"{case.method} {case.formatted_path} -> {response.status_code}"
                if response.status_code >= 500:
                    figures.server_errors.append(label)
                try:
                    case.validate_response(response, checks=CHECKS)
                except FailureGroup as group:
                    figures.violations += [f"{label}: {failure.title}: {str(failure.message)[:300]}"
                                           for failure in group.exceptions
                                           if "not_a_server_error" not in failure.checks]

            try:
                run()
            except Unsatisfiable:  # nothing to make invalid (e.g. GET /openapi.yaml, or every input fixed)
                figures.unsatisfiable.append(f"{operation.label} ({mode.value})")
    return figures


def _report(record_property, label: str, figures: Figures) -> None:
    print("\n" + figures.summary(label) + (f" (no invalid input possible: {', '.join(figures.unsatisfiable)})"
                                            if figures.unsatisfiable else ""))
    print("  " + ", ".join(f"{op} {status}: {n}" for (op, status), n in sorted(figures.statuses.items())))
    record_property(f"{label} requests", figures.requests)
    record_property(f"{label} 5xx", len(figures.server_errors))
    record_property(f"{label} violations", len(figures.violations))
    problems = figures.server_errors[:20] + figures.violations[:20]
    assert not figures.server_errors and not figures.violations, \
        figures.summary(label) + "\n" + "\n".join(problems)
    assert figures.requests >= EXAMPLES_PER_OPERATION * 10  # it really ran (9 operations, 7 with bodies)
    fuzzed = {operation for operation, _ in figures.statuses}
    assert RESPONSE_OPERATIONS <= fuzzed, f"response kinds never fuzzed: {sorted(RESPONSE_OPERATIONS - fuzzed)}"
    assert len(TRIAL_OPERATIONS) >= 2  # votes and motion responses name trials


def _outsider_callers(app, slug: str) -> list[Caller]:
    """No token at all, a malformed one, and the valid token of another assignment (wrong IDs)."""
    other = WorkerClient(app.test_client(), slug, platform="link")
    return [Caller({"slug": slug}, {}), Caller({}, {"Authorization": "Bearer not-a-token"}),
            Caller({"slug": slug}, other.headers)]


# PostgreSQL only: it is the stricter database (NUL bytes, 32-bit integers), and one run keeps the file short.
pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.fixture
def quiet_app(app):
    app.config["PROPAGATE_EXCEPTIONS"] = False  # a server error is a 500 response the checks count
    return app


def test_paired_comparison_study_with_a_valid_token(quiet_app, study, record_property):
    client = quiet_app.test_client()
    fresh = WorkerClient(client, study, platform="link")
    at_quiz = WorkerClient(client, study, platform="link")
    state = at_quiz.start()
    callers = [Caller({"assignment_id": fresh.assignment_id, "slug": study}, fresh.headers),
               Caller({"assignment_id": at_quiz.assignment_id, "slug": study}, at_quiz.headers,
                      [t["trial_id"] for t in state["page"]["trials"]])]
    _report(record_property, "paired comparison, valid token", fuzz(quiet_app, callers))


def test_paired_comparison_study_without_a_valid_token(quiet_app, study, record_property):
    _report(record_property, "paired comparison, no valid token", fuzz(quiet_app, _outsider_callers(quiet_app,
                                                                                                     study)))


def test_motion_study_with_a_valid_token(quiet_app, motion_study, record_property):
    at_calibration = MotionWorker(quiet_app, motion_study)
    at_calibration.start()
    at_rdk = MotionWorker(quiet_app, motion_study)
    at_rdk.start()
    assert at_rdk.calibrate().status_code == 200
    trials = [t["trial_id"] for t in at_rdk.state()["trials"]]
    callers = [Caller({"assignment_id": at_calibration.assignment_id, "slug": motion_study}, at_calibration.headers),
               Caller({"assignment_id": at_rdk.assignment_id, "slug": motion_study, "trial_id": str(trials[0])},
                      at_rdk.headers, trials)]
    _report(record_property, "motion, valid token", fuzz(quiet_app, callers))


def test_motion_study_without_a_valid_token(quiet_app, motion_study, record_property):
    _report(record_property, "motion, no valid token", fuzz(quiet_app, _outsider_callers(quiet_app, motion_study)))
