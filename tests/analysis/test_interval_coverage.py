"""Bootstrap intervals keep their nominal coverage on simulated studies with a known truth."""
import json

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import t as student_t

from analysis.bootstrap import INTERVAL_METHODS, bootstrap_sets, interval_bounds, t_widening
from analysis.pipeline import AnalysisOptions
from analysis.scaling import ScalingOptions, fit_set, reported, set_designs
from analysis.simulate import simulate_study
from benchmarks.interval_coverage import measure_coverage
from server.cli import cli

# The band the default method must stay in, for nominal 95 %.
BAND = (0.93, 0.97)


@pytest.mark.slow
def test_default_intervals_cover_the_truth_at_25_workers():
    # 800 simulated studies (8 items, 25 Thurstone workers judging all 28 pairs, true scales drawn from
    # N(0, 1)), 200 worker resamples each (the dashboard's default): about 10 s of CPU (slow: more wall
    # time on a loaded machine).
    #
    # Margins. The Monte Carlo SE of a coverage estimate is taken over studies, since the 8 items of a
    # study share their workers: measured, 0.098/sqrt(N) for the t interval and 0.127/sqrt(N) for the
    # percentile one, i.e. 0.0035 and 0.0045 at N = 800. Over four seeds (600-1,000 studies each) the t
    # interval covered 0.951-0.956 in this setting (0.9556 with this seed), >= 4 SE inside either end of
    # the band even at the worst of them, so a correct method fails with probability < 1e-4; the old
    # percentile interval covered 0.907-0.917 (0.9155 with this seed; 0.922 with true scales of SD 0.5, the
    # issue's ~0.92 at 200 resamples), >= 3 SE below 0.93, so it fails with probability > 0.998. (A method
    # at exactly 0.925 would lie only 1.1 SE below 0.93: no test of this size tells 0.925 from 0.93.)
    # The seed is fixed, so the outcome is deterministic anyway.
    coverage = measure_coverage(n_workers=25, n_studies=800, n_boot=200, spread=1.0, seed=0)
    t = coverage["t"]
    assert BAND[0] <= t.rate <= BAND[1], f"t coverage {t.rate:.4f} (SE {t.standard_error:.4f})"
    assert t.standard_error < 0.005
    # The same studies show the test has the power to reject the old percentile interval.
    assert coverage["percentile"].rate < BAND[0]
    # Rank intervals are whole ranks and at least as conservative as the scale intervals.
    assert coverage["t"].rank.mean() >= 0.95


@pytest.fixture(scope="module")
def small_study():
    study = simulate_study(n_sets=2, n_items=12, degree=4, votes_per_pair=10, n_workers=20,
                           random_clickers=0, left_clickers=0, seed=7)
    options = ScalingOptions()
    designs = set_designs(study.votes)
    raws = [fit_set(d, options) for d in designs]
    return study.votes, options, designs, raws


def _bootstrap(small_study, method):
    votes, options, designs, raws = small_study
    kept = np.ones(len(votes.worker_ids), bool)
    return bootstrap_sets(designs, raws, options, votes.worker, kept, n_boot=150, seed=3, progress=False,
                          method=method)


@pytest.mark.parametrize("method", INTERVAL_METHODS)
def test_every_method_gives_whole_ranks_within_the_set(small_study, method):
    for iv, design in zip(_bootstrap(small_study, method), small_study[2]):
        assert iv.method == method and 1 < iv.n_units <= 20
        assert (iv.scale_low < iv.scale_high).all()
        assert iv.rank_low.dtype.kind == "i" and iv.rank_high.dtype.kind == "i"
        assert (1 <= iv.rank_low).all() and (iv.rank_low <= iv.rank_high).all()
        assert (iv.rank_high <= design.n_items).all()


def test_percentile_remains_selectable_and_methods_differ_as_defined(small_study):
    _, options, designs, raws = small_study
    by_method = {m: _bootstrap(small_study, m) for m in INTERVAL_METHODS}
    for k, design in enumerate(designs):
        estimate = reported(raws[k], design, options)
        samples = by_method["percentile"][k].samples
        assert np.array_equal(samples, by_method["t"][k].samples)  # same resamples, only the interval differs
        low, high = np.quantile(samples, [0.025, 0.975], axis=0)
        assert np.allclose(by_method["percentile"][k].scale_low, low)
        assert np.allclose(by_method["percentile"][k].scale_high, high)
        assert np.allclose(by_method["basic"][k].scale_low, 2 * estimate - high)
        n = by_method["t"][k].n_units
        half = student_t.ppf(0.975, n - 1) * np.sqrt(n / (n - 1)) * samples.std(axis=0, ddof=1)
        assert np.allclose(by_method["t"][k].scale_high - estimate, half)
        assert np.allclose(estimate - by_method["t"][k].scale_low, half)
        # The t interval is the wider one with 20 workers: the percentile keeps the bootstrap's narrowness.
        widths = {m: (by_method[m][k].scale_high - by_method[m][k].scale_low).mean() for m in INTERVAL_METHODS}
        assert widths["t"] > widths["percentile"]


def test_t_widening_shrinks_towards_the_normal_quantile():
    assert t_widening(25) == pytest.approx(student_t.ppf(0.975, 24) * np.sqrt(25 / 24))
    assert t_widening(25) > t_widening(100) > t_widening(10_000) > 1.959
    assert t_widening(1) == t_widening(2)  # a single unit has no spread to correct; never a NaN


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="interval method"):
        AnalysisOptions(interval_method="bca")
    with pytest.raises(ValueError, match="interval method"):
        interval_bounds(np.zeros((10, 3)), np.zeros(3), 5, "studentized")


@pytest.mark.parametrize("method", [None, "percentile"])
def test_cli_option_reaches_summary_json(tmp_path, method):
    out = tmp_path / "sim"
    runner = CliRunner()
    result = runner.invoke(cli, ["simulate-votes", "--out", str(out), "--sets", "1", "--items", "10",
                                 "--workers", "15", "--votes-per-pair", "6", "--seed", "2"])
    assert result.exit_code == 0, result.output
    args = ["analyze", str(out / "votes.csv"), "--out", str(tmp_path / "a"), "--bootstrap", "60", "--no-plots"]
    result = runner.invoke(cli, args + (["--interval-method", method] if method else []))
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    expected = method or "t"
    assert summary["parameters"]["interval_method"] == expected
    described = {k: v for k, v in summary["intervals"].items() if k not in ("estimand", "blank_when")}
    assert described == {"method": expected, "confidence": 0.95, "n_boot": 60, "unit": "worker",
                         "conditional_on_screening": True}
    assert "Thurstone" in summary["intervals"]["estimand"]


def test_cli_refuses_an_unknown_method(tmp_path):
    result = CliRunner().invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "a"),
                                      "--interval-method", "bca"])
    assert result.exit_code == 2 and "interval-method" in result.output
