"""Colluding and machine-perfect workers (analysis/collusion.py) and how analyze reports them."""
from __future__ import annotations

import csv
import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import binom

import scipy.sparse as sp

from analysis import collusion, thurstone
from analysis.collusion import (EXACT_TAIL_LIMIT, benjamini_hochberg, leave_one_out_gaps, poisson_binomial_tails, superhuman_motion,
                                tarone_testable, targeted_bias, worker_solves)
from analysis.formats import build_votes, write_votes
from analysis.pipeline import AnalysisOptions, analyze, write_results
from analysis.plots import plot_tpr_histogram
from analysis.scaling import ScalingOptions, fit_set, set_designs
from analysis.screening import screen_workers
from analysis.simulate import simulate_study
from server.cli import cli
from stimuli.designs import random_regular_design

TARGET = 3  # m003: a middling item, so that both favouring and disfavouring it moves its scale


def _study(seed: int, n_workers: int = 20, **kw):
    """Every worker answers every pair of 4 sets x 8 items (112 votes each), as in benchmarks/collusion.py."""
    return simulate_study(n_sets=4, n_items=8, degree=7, votes_per_pair=n_workers, n_workers=n_workers,
                          random_clickers=0.0, left_clickers=0.0, target_item=TARGET, seed=seed, **kw)


def _types(study) -> np.ndarray:
    lookup = dict(zip(study.worker_ids, study.worker_type))
    return np.array([lookup[w] for w in study.votes.worker_ids])


# ------------------------------------------------------------------ statistics

def test_poisson_binomial_tails_are_exact():
    rng = np.random.default_rng(0)
    sizes = [1, 2, 3, 5, 9, 17]
    p = rng.uniform(0.02, 0.98, sum(sizes))
    group = np.repeat(np.arange(len(sizes)), sizes)
    observed = np.array([rng.integers(0, n + 1) for n in sizes])
    upper, lower = poisson_binomial_tails(p, group, observed, len(sizes) + 1)
    for g, n in enumerate(sizes):  # brute force over every outcome
        probs = p[group == g]
        total = {"up": 0.0, "low": 0.0}
        for outcome in itertools.product((0, 1), repeat=n):
            weight = np.prod(np.where(outcome, probs, 1 - probs))
            total["up"] += weight * (sum(outcome) >= observed[g])
            total["low"] += weight * (sum(outcome) <= observed[g])
        assert upper[g] == pytest.approx(total["up"], abs=1e-12)
        assert lower[g] == pytest.approx(total["low"], abs=1e-12)
    assert upper[-1] == lower[-1] == 1.0  # a group without trials
    # Equal probabilities: the binomial, down to tiny tails.
    upper, lower = poisson_binomial_tails(np.full(200, 0.3), np.zeros(200, int), np.array([120]), 1)
    assert upper[0] == pytest.approx(binom.sf(119, 200, 0.3), rel=1e-9)
    assert lower[0] == pytest.approx(binom.cdf(120, 200, 0.3), rel=1e-12)
    # Above EXACT_TAIL_LIMIT trials the normal approximation (continuity corrected) takes over.
    n = 4 * EXACT_TAIL_LIMIT
    upper, lower = poisson_binomial_tails(np.full(n, 0.4), np.zeros(n, int), np.array([int(0.45 * n)]), 1)
    assert upper[0] == pytest.approx(binom.sf(int(0.45 * n) - 1, n, 0.4), rel=0.1)  # a 3-SD tail
    assert lower[0] == pytest.approx(binom.cdf(int(0.45 * n), n, 0.4), rel=1e-3)


def test_benjamini_hochberg_and_tarone():
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    assert benjamini_hochberg(p, 0.05).tolist() == [True, True] + [False] * 8
    assert benjamini_hochberg(np.array([0.01, 0.02, 0.03]), 0.05).all()
    # Tests that cannot reach significance are not counted: 1000 tests whose best p is 0.5, 3 able ones.
    min_p = np.concatenate([np.full(1000, 0.5), [1e-6, 1e-5, 0.01]])
    testable = tarone_testable(min_p, 0.05)
    assert testable.sum() == 3 and testable[-3:].all()


def test_leave_one_out_gap_is_close_to_a_refit_without_the_worker():
    study = _study(1, colluders=0.15)
    votes, options = study.votes, ScalingOptions()
    everyone = np.ones(len(votes.worker_ids), dtype=bool)
    gap = leave_one_out_gaps(votes, options, everyone)
    fit_options = replace(options, anchors=False, allow_disconnected=True)
    colluder = int(np.flatnonzero(_types(study) == "favour")[0])
    design = set_designs(votes)[0]
    full = fit_set(design, fit_options, weights=np.ones(len(design.votes)))
    without = fit_set(design, fit_options, weights=(votes.worker[design.votes] != colluder).astype(float))
    mine = design.votes[votes.worker[design.votes] == colluder]
    local = {g: k for k, g in enumerate(design.items)}
    exact = np.array([without[local[a]] - without[local[b]] for a, b in zip(votes.item_a[mine], votes.item_b[mine])])
    plain = np.array([full[local[a]] - full[local[b]] for a, b in zip(votes.item_a[mine], votes.item_b[mine])])
    # The one Newton step removes most of the worker's pull (which is not small: they always pick m003); the
    # rest (about a tenth: the full fit's Hessian still holds the worker's own curvature) is what repeated
    # rounds without the flagged workers are for.
    assert np.abs(plain - exact).max() > 0.05
    assert np.abs(gap[mine] - exact).max() < 0.15 * np.abs(plain - exact).max()


def test_worker_solves_match_a_dense_solve_block_by_block(monkeypatch):
    """Conjugate gradients (large sets) give H^-1 G for every worker column, over several blocks."""
    rng = np.random.default_rng(3)
    n, workers = 400, 7
    pairs = random_regular_design(n, 6, rng)
    hess = thurstone.information_matrix(pairs, rng.uniform(2, 8, len(pairs)), n, 0.01)
    hess = sp.csr_matrix(hess)
    rows = rng.integers(0, len(pairs), (workers, 30))
    g = rng.normal(size=(workers, 30))
    gradients = sp.coo_matrix((np.concatenate([g.ravel(), -g.ravel()]),
                               (np.concatenate([pairs[rows.ravel(), 0], pairs[rows.ravel(), 1]]),
                                np.tile(np.repeat(np.arange(workers), 30), 2))), shape=(n, workers)).tocsc()
    exact = np.linalg.solve(hess.toarray(), gradients.toarray())
    monkeypatch.setattr(collusion, "LOO_BLOCK_ENTRIES", 3 * n)  # blocks of 3, 3 and 1 workers
    got = np.zeros_like(exact)
    blocks = []
    for columns, solution, steps in worker_solves(hess, gradients, rtol=1e-8):
        got[:, columns] = solution
        blocks.append(len(columns))
        assert steps < 100
    assert blocks == [3, 3, 1]
    assert np.abs(got - exact).max() < 1e-6 * np.abs(exact).max()


def test_large_sets_give_the_leave_one_out_gaps_and_flags_of_the_exact_solve(monkeypatch):
    """Sets above DENSE_LIMIT take conjugate gradients instead of a Cholesky factor: the same gaps
    (to the solver's 1e-3) and the same flagged workers. DENSE_LIMIT is lowered so that the 8-item
    sets take that path."""
    study = _study(1, colluders=0.15)
    votes, options = study.votes, ScalingOptions()
    everyone = np.ones(len(votes.worker_ids), dtype=bool)
    exact = leave_one_out_gaps(votes, options, everyone)
    plain = np.full(len(votes), np.nan)  # the full fit's gaps: what a solver that did nothing would give
    for design in set_designs(votes):
        scale = fit_set(design, replace(options, anchors=False, allow_disconnected=True))
        local = np.full(len(votes.item_ids), -1)
        local[design.items] = np.arange(design.n_items)
        plain[design.votes] = scale[local[votes.item_a[design.votes]]] - scale[local[votes.item_b[design.votes]]]
    assert np.nanmax(np.abs(exact - plain)) > 0.1
    flagged = targeted_bias(votes, options, everyone).flagged
    monkeypatch.setattr(thurstone, "DENSE_LIMIT", 4)
    assert sp.issparse(thurstone.information_matrix(np.array([[0, 1]]), np.ones(1), 8, 0.01))
    large = leave_one_out_gaps(votes, options, everyone)
    assert np.abs(large - exact).max() < 2e-3
    assert flagged.any() and np.array_equal(targeted_bias(votes, options, everyone).flagged, flagged)


# ------------------------------------------------------------------ targeted bias

@pytest.mark.parametrize("direction", [1, -1])
def test_colluders_are_caught_and_the_item_stays_in_the_honest_interval(direction):
    study = _study(7, colluders=0.15, collusion_direction=direction)
    votes, kind = study.votes, _types(study)
    colluder, honest = np.isin(kind, ["favour", "disfavour"]), kind == "honest"
    options = AnalysisOptions(n_boot=100, progress=False)
    honest_only = analyze(votes.subset(honest[votes.worker]), replace(options, bias_test=False))
    plain = analyze(votes, replace(options, bias_test=False))
    tested = analyze(votes, options)
    target = str(study.item_ids[TARGET])
    flag = f"{'favours' if direction > 0 else 'disfavours'}:{target}"
    flagged = np.array([flag in r["flags"].split(";") for r in tested.workers])
    assert flagged[colluder].all() and not flagged[honest].any()
    assert not tested.kept[colluder].any() and tested.kept[honest].all()
    assert plain.kept[colluder].all()  # screening alone keeps them

    def scales(result):
        return {r["set_id"]: r for r in result.scales if r["item_id"] == target}

    reference, bent, fixed = scales(honest_only), scales(plain), scales(tested)
    outside = [s for s in reference if not reference[s]["ci_low"] <= bent[s]["scale"] <= reference[s]["ci_high"]]
    assert outside, "the colluders should bend the item out of the honest interval without the test"
    for s in reference:
        assert reference[s]["ci_low"] <= fixed[s]["scale"] <= reference[s]["ci_high"]


def test_honest_workers_are_rarely_flagged():
    """200 honest workers in 10 studies, with and without 25 % random clickers: at most 2 % flagged."""
    flagged = tested = 0
    for seed in range(10):
        study = simulate_study(n_sets=4, n_items=8, degree=7, votes_per_pair=16, n_workers=20,
                               random_clickers=0.25 if seed % 2 else 0.0, left_clickers=0.0, seed=300 + seed)
        kept = screen_workers(study.votes, ScalingOptions()).kept
        result = targeted_bias(study.votes, ScalingOptions(), kept)
        honest = study.honest_mask
        flagged += int((result.flagged & honest).sum())
        tested += int(honest.sum())
    assert tested >= 170 and flagged <= 0.02 * tested


def test_workers_csv_flags_and_keep_biased_through_the_cli(tmp_path):
    study = _study(11, colluders=0.15)
    write_votes(tmp_path / "votes.csv", study.votes)
    target = f"favours:{study.item_ids[TARGET]}"
    colluders = set(study.votes.worker_ids[_types(study) == "favour"])
    runner = CliRunner()
    for extra in ([], ["--keep-biased"]):
        out = tmp_path / ("keep" if extra else "default")
        result = runner.invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(out), "--bootstrap", "0",
                                     "--no-plots", *extra])
        assert result.exit_code == 0, result.output
        rows = {r["worker_id"]: r for r in csv.DictReader((out / "workers.csv").open())}
        flagged = {w for w, r in rows.items() if r["flags"]}
        assert all(rows[w]["flags"] == target for w in colluders) and colluders <= flagged
        # Honest workers are rarely flagged (test_honest_workers_are_rarely_flagged); here one may be, for
        # another item, and is then treated alike.
        assert len(flagged - colluders) <= 1 and all(target not in rows[w]["flags"] for w in flagged - colluders)
        for w, r in rows.items():
            assert r["kept"] == ("1" if extra or w not in flagged else "0")
        assert (f"workers flagged: {len(flagged)} with a targeted bias{'' if extra else ' (excluded)'}"
                in result.output)
        summary = json.loads((out / "summary.json").read_text())["workers"]
        assert summary["flagged"]["targeted_bias"] == len(flagged)
        assert summary["kept"] == sum(r["kept"] == "1" for r in rows.values())
        assert summary["targeted_bias_excluded"] == (0 if extra else len(flagged))


# ------------------------------------------------------------------ machine-perfect workers

def test_machine_observers_are_flagged_and_honest_workers_are_not(tmp_path):
    study = _study(5, machine_observers=0.15)
    kind = _types(study)
    result = analyze(study.votes, AnalysisOptions(n_boot=0), machine_errors=study.errors)
    flags = np.array(["machine_agreement" in r["flags"] for r in result.workers])
    assert flags[kind == "machine"].all() and not flags[kind == "honest"].any()
    agreement = np.array([r["machine_agreement"] for r in result.workers])
    assert (agreement[kind == "machine"] == 1).all() and agreement[kind == "honest"].max() < 0.9
    # Through the CLI, from a machine_errors.csv.
    write_votes(tmp_path / "votes.csv", study.votes)
    (tmp_path / "errors.csv").write_text("set_id,item_id,error\n" + "".join(
        f"{s},{i},{e!r}\n" for (s, i), e in study.errors.items()))
    out = CliRunner().invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "a"),
                                   "--bootstrap", "0", "--no-plots", "--machine-errors", str(tmp_path / "errors.csv")])
    assert out.exit_code == 0 and "3 agreeing with the machine observer" in out.output, out.output
    (tmp_path / "bad.csv").write_text("set_id,item_id,error\nset01,m000,abc\n")
    bad = CliRunner().invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "b"),
                                   "--machine-errors", str(tmp_path / "bad.csv")])
    assert bad.exit_code == 2 and "bad.csv, line 2: error 'abc' is not a number" in bad.output
    (tmp_path / "other.csv").write_text("set_id,item_id,error\nsceneX,m000,1.5\n")
    other = CliRunner().invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "c"),
                                     "--machine-errors", str(tmp_path / "other.csv")])
    assert other.exit_code == 2 and "other.csv: no set_id,item_id of it is in" in other.output
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_a_six_line_rdk_script_is_superhuman_and_people_are_not():
    rng = np.random.default_rng(2)
    n = 40
    speed, angle = rng.uniform(1, 8, n), rng.uniform(0, 2 * np.pi, n)
    gt_u, gt_v = speed * np.cos(angle), -speed * np.sin(angle)
    # The script: the median step of the dots, exact up to the uint16 fixed point of the dot positions.
    script = gt_u + rng.normal(0, 1e-3, n), gt_v + rng.normal(0, 1e-3, n)
    # People: direction SD 4 degrees, speed SD 8 % (Weber fractions of motion matching), one careful person 2 deg, 4 %.
    people = []
    for dir_sd, speed_sd in ((4, 0.08), (6, 0.12), (2, 0.04)):
        a = angle + np.deg2rad(rng.normal(0, dir_sd, n))
        s = speed * (1 + rng.normal(0, speed_sd, n))
        people.append((s * np.cos(a), -s * np.sin(a)))
    workers = np.repeat(["script", "p1", "p2", "p3"], n)
    resp_u = np.concatenate([script[0]] + [p[0] for p in people])
    resp_v = np.concatenate([script[1]] + [p[1] for p in people])
    result = superhuman_motion(workers, np.tile(gt_u, 4), np.tile(gt_v, 4), resp_u, resp_v)
    flagged = dict(zip(result.worker_id, result.flagged))
    assert flagged == {"script": True, "p1": False, "p2": False, "p3": False}
    assert np.corrcoef(np.r_[script[0], script[1]], np.r_[gt_u, gt_v])[0, 1] > 0.9999
    # Too few trials to judge: not flagged.
    few = superhuman_motion(["s"] * 3, gt_u[:3], gt_v[:3], gt_u[:3], gt_v[:3])
    assert not few.flagged.any()


# ------------------------------------------------------------------ summary, workers.csv and plot agree

def _with_gold(study, failing: int = 2, quiz_only: int = 4):
    """The study's votes plus gold rows: honest answers for most workers, wrong ones for ``failing``
    workers, and ``quiz_only`` extra workers who failed the quiz (gold rows only, no scaling votes)."""
    v = study.votes
    cols = [list(v.worker_ids[v.worker]), list(v.set_ids[v.vote_set]), list(v.item_ids[v.item_a]),
            list(v.item_ids[v.item_b]), list(v.item_ids[v.winner])]
    gold, gold_winner = [False] * len(v), [""] * len(v)
    workers = list(v.worker_ids) + [f"QUIZ{k}" for k in range(quiz_only)]
    for k, w in enumerate(workers):
        wrong = k < failing or w.startswith("QUIZ")
        for _ in range(5):
            for col, value in zip(cols, (w, "set01", "m000", "m001", "m001" if wrong else "m000")):
                col.append(value)
            gold.append(True)
            gold_winner.append("m000")
    return build_votes(*cols, is_gold=gold, gold_winner=gold_winner)


def test_summary_workers_csv_and_tpr_plot_agree(tmp_path):
    study = _study(7, colluders=0.1)  # the two colluders pass TPR screening (their item is a middling one here)
    votes = _with_gold(study)
    result = analyze(votes, AnalysisOptions(n_boot=0))
    write_results(result, tmp_path)
    rows = list(csv.DictReader((tmp_path / "workers.csv").open()))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(rows) == 24 == summary["workers"]["workers"] == summary["screening"]["workers"]
    kept = sum(r["kept"] == "1" for r in rows)
    assert kept == summary["workers"]["kept"] == 16  # 24 - 4 quiz-only - 2 gold-failed - 2 biased
    assert summary["workers"]["kept_fraction"] == pytest.approx(kept / 24)
    assert summary["screening"]["kept_worker_fraction"] == pytest.approx(18 / 24)  # before the bias test
    for r in rows:
        reasons = r["flags"].split(";")
        if r["worker_id"].startswith("QUIZ"):
            assert reasons == ["no_scaling_votes", "gold_failed"] and float(r["honest_posterior"]) == 0.0
        elif r["gold_failed"] == "1":
            assert reasons == ["gold_failed"] and float(r["honest_posterior"]) == 0.0 and r["kept"] == "0"
        elif r["kept"] == "1":
            assert r["flags"] == "" and float(r["honest_posterior"]) >= 0.5
    assert summary["workers"]["flagged"] == {"no_scaling_votes": 4, "gold_failed": 6, "screened_out": 0,
                                             "targeted_bias": 2, "machine_agreement": None}
    # The plot draws every worker with a TPR and names only the groups it drew, with their counts.
    labels = plot_tpr_histogram(result.screening.tpr, result.kept, result.screening.threshold_tpr,
                                tmp_path / "tpr.png", reasons=[r["flags"] for r in result.workers])
    groups = [label for label in labels if not label.startswith(("threshold", "guessing"))]
    assert groups == ["kept (16)", "targeted bias (2)", "gold failed (2)"]
    honest_only = study.votes.subset(_types(study)[study.votes.worker] == "honest")
    labels = plot_tpr_histogram(*(lambda r: (r.screening.tpr, r.kept, r.screening.threshold_tpr))(
        analyze(honest_only, AnalysisOptions(n_boot=0))), tmp_path / "tpr2.png")
    assert [label for label in labels if "(" in label and not label.startswith("guessing")] == ["kept (18)"]
