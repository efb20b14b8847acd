"""What the tests comparing PostgreSQL's one-statement vote with the regular path share: API answers
with their random values scrubbed, database snapshots with random and real-clock values reduced to
"set or not", and the first difference of two snapshots.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

import re
from typing import Any

from sqlalchemy import DateTime, select

from server.models import Base
from server.services import app_services

# Columns drawn at random (tokens, codes, MTurk IDs made by WorkerClient, the study's secrets and its
# study-file folder in its config) or from the real clock: compared as "set or not". reserved_until
# comes from the injected clock and is compared exactly.
VARYING_COLUMNS = {"token_nonce", "completion_code", "external_id", "entry_secret", "config"}
EXACT_TIMES = {"reserved_until"}
MTURK_ASSIGNMENT = re.compile(r"A[0-9A-F]{12}")  # WorkerClient's random MTurk assignment IDs
# Keys of API answers that carry random values: the token, links holding it, completion codes.
RANDOM_KEYS = {"token", "worker_url", "code", "completion_code", "redirect", "submit_url"}


class Scrubber:
    """API answers with random values replaced; stimulus URLs (named with a random per-study key) by
    their order of first appearance, so that the same image keeps the same name within a play."""

    def __init__(self):
        self.urls: dict[str, str] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: ("<random>" if k in RANDOM_KEYS and v is not None else self(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, str) and value.startswith("/stimuli/"):
            return self.urls.setdefault(value, f"<image {len(self.urls)}>")
        if isinstance(value, str) and MTURK_ASSIGNMENT.fullmatch(value):
            return "<MTurk assignment ID>"
        return value


def snapshot(app) -> dict[str, list[tuple]]:
    """Every row of every table by primary key, random and real-clock values reduced to "set or not"."""
    snapshot = {}
    with app_services(app).sessions() as session:
        for table in Base.metadata.sorted_tables:
            rows = session.execute(select(table).order_by(*table.primary_key.columns)).all()
            kept = []
            for row in rows:
                kept.append(tuple(
                    (value is not None) if (column.name in VARYING_COLUMNS or (
                        isinstance(column.type, DateTime) and column.name not in EXACT_TIMES)) else value
                    for column, value in zip(table.columns, row)))
            snapshot[table.name] = kept
    return snapshot



def first_difference(left: dict, right: dict) -> str:
    """Where two snapshots first differ ("" when they are the same)."""
    for table in left:
        for k, (x, y) in enumerate(zip(left[table], right[table])):
            if x != y:
                return f"{table} row {k}: {x} != {y}"
        if len(left[table]) != len(right[table]):
            return f"{table}: {len(left[table])} rows != {len(right[table])}"
    return ""
