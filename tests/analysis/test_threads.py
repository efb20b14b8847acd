"""BLAS thread limits of the analysis (analysis/threads.py)."""
from __future__ import annotations

import threading

import pytest
from threadpoolctl import threadpool_info

from analysis import pipeline, threads
from analysis.pipeline import AnalysisOptions, analyze
from analysis.simulate import simulate_study


def blas_threads_now() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_the_limit_holds_inside_and_is_restored_after(monkeypatch):
    monkeypatch.delenv(threads.ENVIRONMENT_VARIABLE, raising=False)
    before = blas_threads_now()
    assert before, "numpy's BLAS is not visible to threadpoolctl"
    with threads.limited_blas_threads():
        assert blas_threads_now() == [1] * len(before)
        with threads.limited_blas_threads():  # nested: still limited, and leaving it keeps the limit
            pass
        assert blas_threads_now() == [1] * len(before)
    assert blas_threads_now() == before


def test_concurrent_callers_share_one_limit(monkeypatch):
    """The first to enter sets the limit, the last to leave restores it, whatever the order."""
    monkeypatch.setenv(threads.ENVIRONMENT_VARIABLE, "1")
    before = blas_threads_now()
    first_inside, second_inside, first_may_leave = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with threads.limited_blas_threads():
            first_inside.set()
            first_may_leave.wait(30)
        seen["after first left"] = blas_threads_now()
        second_inside.set()

    thread = threading.Thread(target=first)
    thread.start()
    assert first_inside.wait(30)
    with threads.limited_blas_threads():
        first_may_leave.set()
        assert second_inside.wait(30)
        assert seen["after first left"] == [1] * len(before)  # the second caller still runs: limit kept
    thread.join(30)
    assert blas_threads_now() == before


def test_the_environment_sets_or_lifts_the_limit(monkeypatch):
    assert threads.blas_threads({}) == threads.DEFAULT_BLAS_THREADS == 1
    assert threads.blas_threads({threads.ENVIRONMENT_VARIABLE: "3"}) == 3
    assert threads.blas_threads({threads.ENVIRONMENT_VARIABLE: "0"}) is None
    for wrong in ("-1", "two"):
        with pytest.raises(ValueError, match=threads.ENVIRONMENT_VARIABLE):
            threads.blas_threads({threads.ENVIRONMENT_VARIABLE: wrong})
    monkeypatch.setenv(threads.ENVIRONMENT_VARIABLE, "0")
    before = blas_threads_now()
    with threads.limited_blas_threads():
        assert blas_threads_now() == before


def test_analyze_runs_with_one_blas_thread(monkeypatch):
    monkeypatch.delenv(threads.ENVIRONMENT_VARIABLE, raising=False)
    before = blas_threads_now()
    seen = []
    original = pipeline.set_designs

    def recording(*args, **kwargs):
        seen.append(blas_threads_now())
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "set_designs", recording)
    study = simulate_study(n_sets=1, n_items=12, degree=4, votes_per_pair=5, n_workers=20, seed=1)
    analyze(study.votes, AnalysisOptions(n_boot=5, progress=False))
    assert seen == [[1] * len(before)]
    assert blas_threads_now() == before
