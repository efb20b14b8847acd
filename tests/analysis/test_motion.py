"""Motion statistics (analysis.motion): a hand-computed example, then properties on random data."""
import math

import numpy as np
import pytest

from analysis.motion import (ALL_DATASETS, GROUND_TRUTH, MotionFormatError, agreement_stats, angle_difference_deg,
                             circular_r, direction_deg, direction_r, epe, epe_by_property, inter_observer_correlation,
                             model_metrics, model_table, partial_correlation, pearson_r, pooled_uv_r, practice_passed,
                             probe_means, rci, rci_components, read_motion_csv, read_predictions, screening_r,
                             speed_r, timing_summary)

# --------------------------------------------------------------------------- the hand-computed example
# Three probes (image coordinates, px/frame):
#   G (ground truth)  = (1, 0), (0, 1), (-1, -1)
#   R (human mean)    = (2, 0), (0, 1), (-1, -2)
#   M (model)         = (2, 0), (0, 0), (-1, -1)
G = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
R = np.array([[2.0, 0.0], [0.0, 1.0], [-1.0, -2.0]])
M = np.array([[2.0, 0.0], [0.0, 0.0], [-1.0, -1.0]])


def test_hand_example_epe():
    # EPE(R, G): probe 1 |(2,0)-(1,0)| = 1; probe 2 |(0,1)-(0,1)| = 0; probe 3 |(-1,-2)-(-1,-1)| = |(0,-1)| = 1
    assert np.allclose(epe(*R.T, *G.T), [1.0, 0.0, 1.0])
    # mean EPE = 2/3; and a 3-4-5 triangle for good measure
    assert epe(*R.T, *G.T).mean() == pytest.approx(2 / 3)
    assert float(epe(0, 0, 3, 4)) == 5.0


def test_hand_example_pooled_r():
    # Pooled u then v: g = [1, 0, -1, 0, 1, -1], r = [2, 0, -1, 0, 1, -2], m = [2, 0, -1, 0, 0, -1].
    # All three sum to 0, so the means are 0 and r = Σxy / sqrt(Σx² Σy²):
    #   Σg² = 1+0+1+0+1+1 = 4;  Σr² = 4+0+1+0+1+4 = 10;  Σm² = 4+0+1+0+0+1 = 6
    #   Σgr = 2+0+1+0+1+2 = 6;  Σgm = 2+0+1+0+0+1 = 4;   Σrm = 4+0+1+0+0+2 = 7
    # r(R,G) = 6/sqrt(40) = 3/sqrt(10); r(M,G) = 4/sqrt(24) = 2/sqrt(6); r(R,M) = 7/sqrt(60)
    assert pooled_uv_r(*R.T, *G.T) == pytest.approx(3 / math.sqrt(10), abs=1e-12)
    assert pooled_uv_r(*M.T, *G.T) == pytest.approx(2 / math.sqrt(6), abs=1e-12)
    assert pooled_uv_r(*R.T, *M.T) == pytest.approx(7 / math.sqrt(60), abs=1e-12)
    assert screening_r(*G.T, *R.T) == pytest.approx(3 / math.sqrt(10), abs=1e-12)


def test_hand_example_partial_correlation():
    # eq. 2: (r_RM - r_RG r_MG) / (sqrt(1 - r_RG²) sqrt(1 - r_MG²))
    #   numerator   = 7/sqrt(60) - (3/sqrt(10))(2/sqrt(6)) = 7/sqrt(60) - 6/sqrt(60) = 1/sqrt(60)
    #   denominator = sqrt(1 - 9/10) sqrt(1 - 4/6) = sqrt(1/10) sqrt(1/3) = 1/sqrt(30)
    #   ρ = sqrt(30)/sqrt(60) = 1/sqrt(2)
    assert partial_correlation(R, M, G) == pytest.approx(1 / math.sqrt(2), abs=1e-12)


def test_hand_example_rci():
    # probe 1: G=(1,0) R=(2,0) M=(2,0): GR=(1,0), GM=(1,0), RM=(0,0)
    #   A = |GR|/(|OG|+|OR|) = 1/(1+2) = 1/3; B = cos 0 = 1; C = |GM|/(|GM|+|RM|) = 1/(1+0) = 1 -> RCI 1/3
    # probe 2: G=R=(0,1) M=(0,0): R = G -> A = 0 (and GR has no direction, B := 0) -> RCI 0;
    #   C = |GM|/(|GM|+|RM|) = 1/(1+1) = 1/2 (M is as far from R as from G)
    # probe 3: M = G -> GM has no direction, B := 0, C = 0/(0+1) = 0 -> RCI 0;  A = 1/(sqrt 2 + sqrt 5)
    # mean RCI = (1/3 + 0 + 0)/3 = 1/9
    a, b, c = rci_components(R, M, G)
    assert np.allclose(a, [1 / 3, 0, 1 / (math.sqrt(2) + math.sqrt(5))])
    assert np.allclose(b, [1, 0, 0]) and np.allclose(c, [1, 0.5, 0])
    per_probe, mean = rci(R, M, G)
    assert np.allclose(per_probe, [1 / 3, 0, 0]) and mean == pytest.approx(1 / 9)


def test_hand_example_rci_partial_alignment_and_opposite_error():
    # G=(4,0), R=(4,3): GR=(0,3), |GR|=3, |OG|=4, |OR|=5 -> A = 3/9 = 1/3
    # model M=(8,3): GM=(4,3), |GM|=5, B = GR·GM/(3·5) = 9/15 = 3/5; RM=(4,0), C = 5/(5+4) = 5/9
    #   RCI = 1/3 · 3/5 · 5/9 = 1/9
    # model M=(4,-3): GM=(0,-3), B = -9/9 = -1; RM=(0,-6), C = 3/(3+6) = 1/3 -> RCI = 1/3 · -1 · 1/3 = -1/9
    per_probe, mean = rci([[4, 3], [4, 3]], [[8, 3], [4, -3]], [[4, 0], [4, 0]])
    assert np.allclose(per_probe, [1 / 9, -1 / 9]) and mean == pytest.approx(0.0)


# --------------------------------------------------------------------------- vector basics

def test_direction_is_a_y_up_polar_angle():
    # image v points down: (0, -1) points up on the screen = 90°
    assert np.allclose(direction_deg([1, 0, -1, 0, 1], [0, -1, 0, 1, -1]), [0, 90, 180, 270, 45])
    assert float(direction_deg(1.0, 1e-17)) == 0.0  # never exactly 360


def test_angle_difference_wraps_and_practice_verdict():
    # 10° vs 350°: 20° apart across the cut
    u1, v1 = math.cos(math.radians(10)), -math.sin(math.radians(10))
    u2, v2 = math.cos(math.radians(350)), -math.sin(math.radians(350))
    assert float(angle_difference_deg(u1, v1, u2, v2)) == pytest.approx(20.0)
    assert float(angle_difference_deg(1, 0, -1, 0)) == pytest.approx(180.0)
    # passes: EPE 1, same direction; fails on direction: 45° off with a small EPE; fails on EPE: 15 px longer
    gt_u, gt_v = np.array([5.0, 2.0, 5.0]), np.array([0.0, 0.0, 0.0])
    resp_u, resp_v = np.array([6.0, 2.0, 20.0]), np.array([0.0, -2.0, 0.0])
    assert practice_passed(gt_u, gt_v, resp_u, resp_v).tolist() == [True, False, False]
    assert bool(practice_passed(5, 0, 6, 0)) and not bool(practice_passed(5, 0, 6, 0, max_epe=0.5))


# --------------------------------------------------------------------------- correlation properties

def test_identical_data_correlate_perfectly_and_constant_data_give_nan():
    rng = np.random.default_rng(1)
    u, v = rng.normal(size=20), rng.normal(size=20)
    assert pooled_uv_r(u, v, u, v) == pytest.approx(1.0)
    assert direction_r(u, v, u, v) == pytest.approx(1.0)
    assert speed_r(u, v, u, v) == pytest.approx(1.0)
    assert pooled_uv_r(u, v, -u, -v) == pytest.approx(-1.0)
    assert math.isnan(pearson_r([1, 1, 1], [1, 2, 3]))


def test_circular_r_ignores_the_wrap_where_pearson_breaks():
    rng = np.random.default_rng(2)
    a_lin = rng.uniform(-15, 15, 50)              # directions around 0°
    b_lin = a_lin + rng.normal(0, 3, 50)
    a, b = a_lin % 360, b_lin % 360               # half of them near 360, some pairs straddle the cut
    assert circular_r(a, b) == pytest.approx(pearson_r(a_lin, b_lin), abs=0.02)
    assert circular_r(a, b) > 0.9
    assert pearson_r(a, b) < circular_r(a, b) - 0.05   # pairs across the cut hurt Pearson's r
    # rotating both samples changes nothing
    assert circular_r((a + 123) % 360, (b + 123) % 360) == pytest.approx(circular_r(a, b))


def test_partial_correlation_equals_the_residual_regression_definition():
    rng = np.random.default_rng(3)
    n = 60
    gt = rng.normal(0, 5, (n, 2))
    resp = gt + rng.normal(0, 2, (n, 2)) + 1.5
    model = 0.8 * gt + 0.5 * (resp - gt) + rng.normal(0, 1, (n, 2))

    def residual(y, x):  # least-squares residual of y on [1, x]
        design = np.column_stack([np.ones_like(x), x])
        return y - design @ np.linalg.lstsq(design, y, rcond=None)[0]

    g, r, m = (np.concatenate([x[:, 0], x[:, 1]]) for x in (gt, resp, model))
    expected = np.corrcoef(residual(r, g), residual(m, g))[0, 1]
    assert partial_correlation(resp, model, gt) == pytest.approx(expected, abs=1e-10)
    s = [np.hypot(*x.T) for x in (gt, resp, model)]
    assert partial_correlation(resp, model, gt, "spd") == pytest.approx(
        np.corrcoef(residual(s[1], s[0]), residual(s[2], s[0]))[0, 1], abs=1e-10)
    # the ground truth as a model has nothing left to explain
    assert math.isnan(partial_correlation(resp, gt, gt))


def test_rci_is_near_one_for_a_model_that_copies_large_illusions_and_flips_sign_for_opposite_errors():
    rng = np.random.default_rng(4)
    gt = rng.uniform(-0.5, 0.5, (40, 2))                    # nearly still
    resp = gt + rng.normal(0, 8, (40, 2))                   # large human errors
    per_probe, mean = rci(resp, resp, gt)                   # model = response, far from GT
    assert mean > 0.85 and (per_probe > 0).all()
    # model errs by the mirrored vector: B = -1, C = e/(e + 2e) = 1/3, so each probe scores -A/3
    opposite_probe, opposite = rci(resp, gt - (resp - gt), gt)
    assert np.allclose(opposite_probe, -per_probe / 3)
    assert opposite < -0.25
    assert rci(resp, gt, gt)[1] == 0.0                      # model = GT: degenerate, 0 by definition
    _, bounded = rci(resp, rng.normal(0, 10, (40, 2)), gt)
    assert -1 <= bounded <= 1


def test_model_table_columns_and_ground_truth_row():
    rng = np.random.default_rng(5)
    gt = rng.normal(0, 4, (30, 2))
    bias = np.array([1.5, -1.0])
    human = gt + bias + rng.normal(0, 1, (30, 2))
    datasets = np.array(["a"] * 15 + ["b"] * 15)
    table = model_table(human, gt, datasets, {"copy": human.copy(), "noisy": gt + rng.normal(0, 1, (30, 2))})
    assert list(table) == [GROUND_TRUTH, "copy", "noisy"]
    assert list(table["copy"]) == ["a", "b", ALL_DATASETS]
    row = table[GROUND_TRUTH][ALL_DATASETS]
    assert math.isnan(row["rho_uv"]) and math.isnan(row["rci"])
    assert row["r_gt_uv"] == pytest.approx(1.0) and row["epe_gt"] == 0.0
    assert row["r_human_uv"] == pytest.approx(pooled_uv_r(*human.T, *gt.T))
    copy = table["copy"][ALL_DATASETS]
    assert copy["r_human_uv"] == pytest.approx(1.0) and copy["epe_human"] == pytest.approx(0.0)
    assert copy["rho_uv"] > table["noisy"][ALL_DATASETS]["rho_uv"]
    # a missing prediction drops that probe only
    partial = human.copy()
    partial[0] = np.nan
    assert model_metrics(human, partial, gt)["n_probes"] == 29


# --------------------------------------------------------------------------- grouping

def test_probe_means_pool_repetitions_and_observers():
    clip = ["c"] * 6
    probe = ["p1", "p1", "p1", "p1", "p2", "p2"]
    worker = ["w1", "w1", "w2", "w2", "w1", "w1"]
    gt_u, gt_v = [1, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0]
    u, v = [1, 3, 5, 7, 2, 2], [0, 0, 0, 0, 1, 3]
    pooled = probe_means(clip, probe, gt_u, gt_v, u, v, worker_id=worker)
    assert pooled.probe_id.tolist() == ["p1", "p2"]
    assert pooled.mean_u.tolist() == [4.0, 2.0] and pooled.mean_v.tolist() == [0.0, 2.0]
    assert pooled.n.tolist() == [4, 2] and pooled.n_observers.tolist() == [2, 1]
    assert pooled.sd_u[0] == pytest.approx(np.std([1, 3, 5, 7], ddof=1))
    assert pooled.epe.tolist() == [3.0, 2.0]
    per_obs = probe_means(clip, probe, gt_u, gt_v, u, v, worker_id=worker, by_observer=True)
    assert list(zip(per_obs.worker_id, per_obs.probe_id, per_obs.mean_u)) == [("w1", "p1", 2.0), ("w2", "p1", 6.0),
                                                                            ("w1", "p2", 2.0)]


def test_inter_observer_correlation_uses_pairs_with_three_common_probes():
    gt = np.array([[1, 0], [0, 2], [-3, 1], [2, 2]], float)
    rows = []
    for w, scale, probes in (("a", 1.0, range(4)), ("b", 1.0, range(4)), ("c", -1.0, range(3)), ("d", 1.0, [3])):
        for p in probes:
            rows.append((w, f"p{p}", *gt[p], *(scale * gt[p])))
    w, p, gu, gv, ru, rv = zip(*rows)
    per_obs = probe_means(["c"] * len(w), p, gu, gv, ru, rv, worker_id=w, by_observer=True)
    io = inter_observer_correlation(per_obs)
    # pairs a-b (r 1), a-c and b-c (r -1); d shares a single probe with anyone
    assert io.n_pairs == 3
    assert io.max == pytest.approx(1.0) and io.min == pytest.approx(-1.0)
    assert io.mean == pytest.approx(-1 / 3)
    assert io.sd == pytest.approx(np.std([1, -1, -1], ddof=1))


def test_epe_by_property_bins_and_standard_errors():
    values = np.array([0.0, 1.0, 2.0, 3.0, 9.0, 10.0])
    errors = np.array([1.0, 3.0, 2.0, 2.0, 5.0, 7.0])
    bins = epe_by_property(errors, values, bins=[0, 5, 10], name="gt_speed")
    assert bins.n.tolist() == [4, 2]
    assert bins.mean_epe.tolist() == [2.0, 6.0]           # 10.0 belongs to the last bin
    assert bins.se[0] == pytest.approx(np.std([1, 3, 2, 2], ddof=1) / 2)
    assert bins.rows()[1]["property"] == "gt_speed"
    empty = epe_by_property(errors, values, bins=3)
    assert empty.n.tolist() == [4, 0, 2] and math.isnan(empty.mean_epe[1])


def test_agreement_stats_identity_and_bias():
    gt = np.array([[1, 0], [0, 2], [-3, 1], [2, 2]], float)
    exact = agreement_stats(gt, gt)
    assert exact["r"] == pytest.approx(1) and exact["slope"] == pytest.approx(1)
    assert exact["R2_identity"] == pytest.approx(1)
    half = agreement_stats(gt, 0.5 * gt)
    assert half["r"] == pytest.approx(1) and half["slope"] == pytest.approx(0.5) and half["R2_identity"] < 1


def test_timing_summary_from_motion_csv_and_from_frames():
    s = timing_summary([0, 2, 0, 1], [1.0, -1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0])
    assert s["trials_with_drops"] == 2 and s["mean_drops_per_trial"] == 0.75
    assert s["onset_err_mean_ms"] == 0.0 and s["onset_err_sd_ms"] == pytest.approx(1.0)
    frames = {"dropped": np.array([False, False, True, False]), "interval_ms": np.array([np.nan, 16.7, 40, 16.7]),
              "onset_err_ms": np.array([0.5, np.nan, 1.5, np.nan])}
    f = timing_summary([0, 1], frames=frames)
    assert f["n_intervals"] == 3 and f["frame_drop_rate"] == pytest.approx(1 / 3)
    assert f["onset_err_mean_ms"] == 1.0 and f["n_onsets"] == 2


# --------------------------------------------------------------------------- readers

HEADER = "worker_id,clip_id,probe_id,repetition,gt_u,gt_v,resp_u,resp_v,cycles,rt_ms,frame_drops," \
         "onset_err_mean_ms,onset_err_sd_ms"


def test_read_motion_csv_with_extra_columns(tmp_path):
    path = tmp_path / "motion.csv"
    path.write_text(HEADER + ",dataset,note\n"
                    "w1,c1,p1,1,1.5,-2,1,-1,3,9000,0,0.1,2.0,demo,x\n"
                    "w1,c1,p1,2,1.5,-2,2,-2,4,9500,1,,,demo,y\n")
    trials = read_motion_csv(path)
    assert len(trials) == 2 and trials.dataset.tolist() == ["demo", "demo"]
    assert trials.frame_drops.tolist() == [0, 1] and trials.line.tolist() == [2, 3]
    assert math.isnan(trials.numbers["onset_err_mean_ms"][1])


@pytest.mark.parametrize("row, where", [
    ("w1,c1,p1,1,1.5,-2,abc,-1,3,9000,0,0,0", "line 3, column resp_u"),
    ("w1,,p1,1,1.5,-2,1,-1,3,9000,0,0,0", "line 3, column clip_id"),
    ("w1,c1,p1,1,1.5,-2,1,-1,3,9000,-1,0,0", "line 3, column frame_drops"),
    ("w1,c1,p1,1,9,-2,1,-1,3,9000,0,0,0", "line 3, column gt_u"),       # GT disagrees with line 2
    ("w1,c1,p1,1,1.5,-2", "line 3: 6 fields"),
])
def test_read_motion_csv_names_file_line_and_column(tmp_path, row, where):
    path = tmp_path / "motion.csv"
    path.write_text(HEADER + "\nw1,c1,p1,1,1.5,-2,1,-1,3,9000,0,0,0\n" + row + "\n")
    with pytest.raises(MotionFormatError) as err:
        read_motion_csv(path)
    assert str(err.value).startswith(f"{path}, {where}") or f"{path}, {where}" in str(err.value)


def test_read_motion_csv_missing_column_and_missing_file(tmp_path):
    path = tmp_path / "motion.csv"
    path.write_text("worker_id,clip_id\nw,c\n")
    with pytest.raises(MotionFormatError, match="line 1: missing columns probe_id"):
        read_motion_csv(path)
    with pytest.raises(MotionFormatError, match="cannot read"):
        read_motion_csv(tmp_path / "nope.csv")


def test_read_predictions_single_and_multi_model(tmp_path):
    single = tmp_path / "raft.csv"
    single.write_text("clip_id,probe_id,pred_u,pred_v\nc1,p1,1,2\nc1,p2,3,4\n")
    preds = read_predictions(single)
    assert preds.models() == ["raft"]
    aligned = preds.aligned([("c1", "p2"), ("c1", "p9")])["raft"]
    assert aligned[0].tolist() == [3, 4] and np.isnan(aligned[1]).all()
    assert read_predictions(single, model="RAFT").models() == ["RAFT"]
    multi = tmp_path / "many.csv"
    multi.write_text("model,clip_id,probe_id,pred_u,pred_v\nA,c1,p1,1,2\nB,c1,p1,3,4\n")
    assert read_predictions(multi).models() == ["A", "B"]
    dup = tmp_path / "dup.csv"
    dup.write_text("clip_id,probe_id,pred_u,pred_v\nc1,p1,1,2\nc1,p1,3,4\n")
    with pytest.raises(MotionFormatError, match="line 3: model 'dup' predicts probe c1/p1 again"):
        read_predictions(dup)
    bad = tmp_path / "bad.csv"
    bad.write_text("clip_id,probe_id,pred_u,pred_v\nc1,p1,one,2\n")
    with pytest.raises(MotionFormatError, match="line 2, column pred_u: 'one' is not a number"):
        read_predictions(bad)
