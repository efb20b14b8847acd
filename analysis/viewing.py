"""The ``[viewing]`` checks in the analysis: keep only the responses of workers who passed them.

A study with viewing checks exports, per worker, ``viewing_passed`` (1: every check passed, 0: one failed,
blank: not taken) among the other ``viewing_*`` columns of workers.csv (workers_meta.csv of an export;
docs/viewing.md). ``perceptlab analyze --workers W --viewing-passed`` and ``perceptlab analyze-ratings --workers W
--viewing-passed`` use :func:`viewing_passed` and :func:`keep_workers`.
"""
from __future__ import annotations

import csv
import dataclasses

import numpy as np

from .formats import dict_rows


def viewing_passed(path) -> frozenset[str]:
    """The worker IDs a workers.csv marks ``viewing_passed`` = 1.

    Raises
    ------
    ValueError
        The file lacks ``worker_id`` or ``viewing_passed`` (a study without viewing checks, or an older export).
    """
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in ("worker_id", "viewing_passed") if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column {', '.join(missing)} (a study without [viewing] checks?)")
        return frozenset(r["worker_id"] for r in dict_rows(reader) if r["viewing_passed"].strip() == "1")


def keep_workers(table, workers: frozenset[str]):
    """The rows of ``table`` (:class:`~analysis.formats.Votes` or :class:`~analysis.ratings.Ratings`: ``worker``
    indices into ``worker_ids``, and ``subset``) whose worker is in ``workers``; the other workers leave its
    ``worker_ids`` too."""
    kept = table.subset(np.isin(np.asarray(table.worker_ids)[table.worker], sorted(workers)))
    # Workers left without a row are dropped from the ID table too: the analysis counts and lists its workers.
    present, index = np.unique(kept.worker, return_inverse=True)
    return dataclasses.replace(kept, worker=index.astype(kept.worker.dtype),
                               worker_ids=np.asarray(kept.worker_ids)[present])
