"""ratings.csv, MOS/DMOS/CMOS and their intervals (analysis/ratings.py)."""
import numpy as np
import pytest

from analysis.rating_models import simulate_ratings
from analysis.ratings import (RatingsFormatError, build_ratings, differential_ratings, mos_scores, read_ratings,
                              t_interval, worker_bootstrap_means)

from .rating_support import NFLX_CSV


def csv(tmp_path, text, name="ratings.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_reads_every_column_and_infers_the_scale(tmp_path):
    path = csv(tmp_path, "worker_id,stimulus_id,rating,reference_id,is_gold,gold_low,gold_high,trial_id,extra\n"
                         "w1,a,4,ref,0,,,t1,x\nw2,a,3.5,ref,1,3,5,t2,y\n'-w3,b,1,,false,,,t3,z\n")
    r = read_ratings(path)
    assert r.scale == "acr" and len(r) == 3 and list(r.worker_ids) == ["-w3", "w1", "w2"]  # escaped cell undone
    assert r.rating.tolist() == [4.0, 3.5, 1.0] and r.is_gold.tolist() == [False, True, False]
    assert np.isnan(r.gold_low[0]) and (r.gold_low[1], r.gold_high[1]) == (3.0, 5.0)
    assert list(r.reference_id) == ["ref", "ref", ""] and list(r.extra["trial_id"]) == ["t1", "t2", "t3"]
    assert read_ratings(csv(tmp_path, "worker_id,stimulus_id,rating\nw,a,-2\nw,b,3\n")).scale == "ccr"
    assert read_ratings(csv(tmp_path, "worker_id,stimulus_id,rating,scale\nw,a,2,DCR\n")).scale == "dcr"


@pytest.mark.parametrize("text, fragment", [
    ("worker_id,rating\nw,3\n", "line 1: missing column stimulus_id"),
    ("worker_id,stimulus_id,rating\nw,a,good\n", "line 2: rating 'good' is not a number"),
    ("worker_id,stimulus_id,rating\nw,a,3\nw,b,nan\n", "line 3: rating 'nan' is not a finite number"),
    ("worker_id,stimulus_id,rating\nw,a,3\nw,b,6\n", "line 3: rating '6' is outside the ACR scale 1..5"),
    ("worker_id,stimulus_id,rating,scale\nw,a,3,ccr\nw,b,-4,ccr\n", "line 3: rating '-4' is outside the CCR scale"),
    ("worker_id,stimulus_id,rating,scale\nw,a,3,acr\nw,b,2,dcr\n", "line 3: scale 'dcr' differs"),
    ("worker_id,stimulus_id,rating,scale\nw,a,3,mushra\n", "line 2: scale 'mushra' is not one of"),
    ("worker_id,stimulus_id,rating\n,a,3\n", "line 2: empty worker_id"),
    ("worker_id,stimulus_id,rating,is_gold\nw,a,3,maybe\n", "line 2: is_gold 'maybe' is not a boolean"),
    ("worker_id,stimulus_id,rating,gold_low\nw,a,3,1\n", "gold_low and gold_high come together"),
    ("worker_id,stimulus_id,rating,gold_low,gold_high\nw,a,3,4,2\n", "line 2: gold_low and gold_high"),
    ("worker_id,stimulus_id,rating\n", "no ratings"),
    ("", "file is empty"),
])
def test_bad_files_raise_one_line_naming_the_line(tmp_path, text, fragment):
    with pytest.raises(RatingsFormatError) as error:
        read_ratings(csv(tmp_path, text))
    assert fragment in str(error.value) and "\n" not in str(error.value)


def test_the_scale_asked_for_must_agree_with_the_file(tmp_path):
    with pytest.raises(RatingsFormatError, match="the file's scale is 'acr', not 'ccr'"):
        read_ratings(csv(tmp_path, "worker_id,stimulus_id,rating,scale\nw,a,3,acr\n"), "ccr")
    assert read_ratings(csv(tmp_path, "worker_id,stimulus_id,rating\nw,a,3\n"), "dcr").scale == "dcr"


def test_t_interval_is_the_textbook_one():
    values = np.array([1.0, 2.0, 4.0, 5.0, 3.0])
    mean, low, high, n = t_interval(np.zeros(5, dtype=int), values, 1)
    assert mean[0] == 3.0 and n[0] == 5
    assert high[0] - mean[0] == pytest.approx(2.7764451 * values.std(ddof=1) / np.sqrt(5), rel=1e-6)
    _, low1, _, _ = t_interval(np.array([0]), np.array([3.0]), 1)
    assert np.isnan(low1[0])


def test_the_vectorised_worker_bootstrap_equals_resampling_the_rows():
    sim = simulate_ratings(8, 12, 6, seed=1)
    means = worker_bootstrap_means(sim.stimulus, sim.worker, sim.rating, 8, 12, n_boot=300, seed=9)
    rng = np.random.default_rng(9)
    present = np.unique(sim.worker)
    for b in range(300):
        counts = rng.multinomial(len(present), np.full(len(present), 1 / len(present)))
        weight = np.zeros(12)
        weight[present] = counts
        w = weight[sim.worker]
        with np.errstate(invalid="ignore"):
            expected = np.bincount(sim.stimulus, w * sim.rating, 8) / np.bincount(sim.stimulus, w, 8)
        np.testing.assert_allclose(means[b], expected, equal_nan=True)


@pytest.mark.parametrize("interval, low, high", [("t", 0.93, 0.975), ("bootstrap", 0.9, 0.97)])
def test_intervals_cover_the_true_quality_about_95_percent_of_the_time(interval, low, high):
    """Workers are a fresh sample of a population of mean bias zero in every study; the truth of a stimulus
    is then its true quality. 150 studies x 20 stimuli."""
    covered = []
    for seed in range(150):
        sim = simulate_ratings(20, 25, continuous=True, clip=False, centre_bias=False, bias_sd=0.3, seed=seed)
        s = mos_scores(sim.stimulus, sim.worker, sim.rating, 20, 25, interval, n_boot=400, seed=seed)
        covered.append((s.ci_low <= sim.true_quality) & (sim.true_quality <= s.ci_high))
    assert low <= np.mean(covered) <= high


def test_acr_hr_differential_scores_follow_p910():
    r = build_ratings(["w1", "w1", "w1", "w2", "w2", "w3"], ["ref", "t1", "t2", "ref", "t1", "t1"],
                      ["5", "3", "4", "4", "4", "2"], reference_id=["ref", "ref", "ref", "ref", "ref", "ref"])
    dv = differential_ratings(r)
    ids = r.stimulus_ids[dv.stimulus]
    assert sorted(zip(ids, r.worker_ids[dv.worker], dv.dv)) == [("t1", "w1", 3.0), ("t1", "w2", 5.0),
                                                                 ("t2", "w1", 4.0)]
    assert dv.without_reference == 1                    # w3 never rated the reference
    assert r.stimulus_ids[dv.references].tolist() == ["ref"]
    with pytest.raises(ValueError, match="need ACR"):
        differential_ratings(build_ratings(["w"], ["a"], ["2"], scale="dcr"))


def test_nflx_dmos_puts_references_at_five():
    r = read_ratings(NFLX_CSV)
    dv = differential_ratings(r)
    assert dv.without_reference == 0 and dv.references.sum() == 9
    assert len(dv.dv) == (79 - 9) * 26
    mos = np.bincount(r.stimulus, r.rating) / np.bincount(r.stimulus)
    dmos = np.bincount(dv.stimulus, dv.dv, 79)[~dv.references] / 26
    reference_of = {str(s): str(ref) for s, ref in zip(r.stimulus_ids[r.stimulus], r.reference_id)}
    index = {str(s): k for k, s in enumerate(r.stimulus_ids)}
    expected = [mos[k] - mos[index[reference_of[str(s)]]] + 5 for k, s in enumerate(r.stimulus_ids)
                if not dv.references[k]]
    np.testing.assert_allclose(dmos, expected)
