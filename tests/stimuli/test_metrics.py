"""Image metrics: Middlebury IE/NE with statistics and masks, RMSE/PSNR/SSIM/MS-SSIM/GMSD, WAE-IQA."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.correlation import srocc
from stimuli.io import StimulusInputError
from stimuli.metrics import (WAE_PAPER_PARAMETERS, WAEParameters, abs_error_histogram, compare_images,
                             disc_mask, error_statistics, fit_wae_parameters, format_srocc_table, gmsd,
                             grey8, interpolation_error, interpolation_error_map, metric_srocc_table, ms_ssim,
                             normalized_interpolation_error, psnr, rmse, ssim, untext_mask, wae_from_histograms,
                             wae_iqa)


def _textured(rng, shape=(64, 80, 3)):
    from scipy.ndimage import gaussian_filter

    noise = rng.normal(0, 1, shape)
    smooth = gaussian_filter(noise, (2, 2, 0))
    return np.clip(128 + 400 * smooth, 0, 255).astype(np.uint8)


def _noisy(rng, image, sd):
    return np.clip(image + rng.normal(0, sd, image.shape), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------- IE / NE (hand computed)

def test_ie_colour_is_rms_of_rgb_l2_norm():
    reference = np.zeros((2, 2, 3), np.uint8)
    test = reference.copy()
    test[0, 0] = [3, 4, 0]       # |diff| = 5
    test[1, 1] = [0, 0, 1]       # |diff| = 1
    np.testing.assert_allclose(interpolation_error_map(reference, test), [[5, 0], [0, 1]])
    assert interpolation_error(reference, test) == pytest.approx(np.sqrt((25 + 1) / 4))
    mask = np.array([[True, False], [False, False]])
    assert interpolation_error(reference, test, mask) == pytest.approx(5.0)


def test_ne_divides_by_gt_gradient_plus_epsilon():
    ramp = np.tile(np.arange(0, 10, 2, dtype=np.uint8), (3, 1))        # grey ramp: d/dx = 2, d/dy = 0
    test = ramp + np.uint8(3)
    # ||grad||^2 = 4 everywhere (one-sided differences at the borders are 2 as well), epsilon = 1
    assert normalized_interpolation_error(ramp, test) == pytest.approx(3 / np.sqrt(5))
    flat = np.full((3, 5), 7, np.uint8)
    assert normalized_interpolation_error(flat, flat + np.uint8(3)) == pytest.approx(3.0)  # 3 / sqrt(0 + 1)
    colour = np.repeat(ramp[:, :, None], 3, axis=2)
    # colour: error norm sqrt(3 * 9), gradient summed over the three bands: 3 * 4
    assert normalized_interpolation_error(colour, colour + np.uint8(3)) == pytest.approx(np.sqrt(27 / 13))
    assert normalized_interpolation_error(flat, flat + np.uint8(3), epsilon=4.0) == pytest.approx(1.5)


def test_error_statistics_definitions():
    errors = np.arange(1, 11, dtype=float).reshape(2, 5)            # 1..10
    stats = error_statistics(errors, r_thresholds=(2.5, 10.0), a_percentiles=(50, 90, 95))
    assert stats["AV"] == pytest.approx(5.5)
    assert stats["SD"] == pytest.approx(np.std(np.arange(1, 11)))
    assert stats["RMS"] == pytest.approx(np.sqrt(np.mean(np.arange(1, 11) ** 2)))
    assert stats["R2.5"] == pytest.approx(80.0)   # 3..10 are above 2.5
    assert stats["R10"] == 0.0                    # strictly above
    assert (stats["A50"], stats["A90"], stats["A95"]) == (5.0, 9.0, 10.0)  # nearest rank
    masked = error_statistics(errors, mask=errors > 8, r_thresholds=(), a_percentiles=())
    assert masked["AV"] == pytest.approx(9.5) and masked["n"] == 2


def test_disc_mask_marks_flow_steps_dilated_9x9():
    flow = np.zeros((30, 40, 2))
    flow[:, 20:, 0] = 5.0                           # step between columns 19 and 20
    flow[0, 0] = [1e10, 1e10]                       # Middlebury 'unknown' flow
    mask = disc_mask(flow)
    assert mask[15, 15:25].all()                    # within 4 px of the step (9x9 dilation)
    assert not mask[15, :14].any() and not mask[15, 26:].any()
    assert not mask[0, 0]                           # unknown flow excluded


def test_untext_mask_finds_flat_regions():
    image = np.full((30, 40, 3), 100, np.uint8)
    stripes = np.where(np.arange(20) % 4 < 2, 0, 200)    # period-4 stripes: |d/dx| = 100 everywhere
    image[:, 20:] = stripes[None, :, None]
    mask = untext_mask(image)
    assert mask[:, :19].all() and not mask[:, 22:38].any()  # (one-sided differences at the edge)


# ---------------------------------------------------------------- RMSE, PSNR, SSIM, MS-SSIM, GMSD

def test_rmse_and_psnr_known_values():
    reference = np.zeros((4, 4, 3), np.uint8)
    test = np.full_like(reference, 10)
    assert rmse(reference, test) == pytest.approx(10.0)
    assert psnr(reference, test) == pytest.approx(20 * np.log10(255 / 10))
    assert psnr(reference.astype(np.uint16), test.astype(np.uint16)) == pytest.approx(20 * np.log10(65535 / 10))
    assert psnr(reference, reference) == float("inf")
    half = reference.copy()
    half[:2] = 4                                    # MSE = 8
    assert rmse(reference, half) == pytest.approx(np.sqrt(8))
    with pytest.raises(StimulusInputError, match="data_range"):
        psnr(reference.astype(float), test.astype(float))
    with pytest.raises(StimulusInputError, match="shape"):
        rmse(reference, test[:3])


def test_ssim_and_ms_ssim_identical_is_one_and_drop_with_noise():
    rng = np.random.default_rng(1)
    image = _textured(rng, (192, 200, 3))
    assert ssim(image, image) == pytest.approx(1.0)
    assert ms_ssim(image, image) == pytest.approx(1.0)
    light, heavy = _noisy(rng, image, 5), _noisy(rng, image, 25)
    assert 1 > ssim(image, light) > ssim(image, heavy) > 0
    assert 1 > ms_ssim(image, light) > ms_ssim(image, heavy) > 0
    with pytest.raises(StimulusInputError, match="176"):
        ms_ssim(image[:100], image[:100])


def test_gmsd_identical_is_zero_and_grows_with_noise():
    rng = np.random.default_rng(2)
    image = _textured(rng)
    assert gmsd(image, image) == 0.0
    light, heavy = _noisy(rng, image, 4), _noisy(rng, image, 30)
    assert 0 < gmsd(image, light) < gmsd(image, heavy)
    assert gmsd(image, heavy) == pytest.approx(gmsd(heavy, image))  # symmetric in its arguments


def test_compare_images_reports_nan_for_too_small_ms_ssim():
    rng = np.random.default_rng(3)
    image = _textured(rng, (40, 48, 3))
    values = compare_images(image, _noisy(rng, image, 5))
    assert set(values) == {"rmse", "psnr", "ssim", "ms_ssim", "gmsd", "ie", "ne", "wae"}
    assert np.isnan(values["ms_ssim"]) and 0 < values["ssim"] < 1
    assert values["ie"] == pytest.approx(np.sqrt(3) * values["rmse"], rel=1e-12)


# ---------------------------------------------------------------- WAE-IQA

def test_wae_matches_equation_4_per_pixel():
    rng = np.random.default_rng(4)
    reference = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    test = _noisy(rng, reference, 30)
    p = WAEParameters(a1=2.0, a2=1.0, a3=0.5, s=20.0, t=0.1)
    x = np.abs(grey8(test).astype(float) - grey8(reference)) / 255
    w = 1 / (1 + np.exp(-p.s * (x - p.t)))
    f = p.a1 * x + p.a2 * x ** 2 + p.a3 * x ** 3
    assert wae_iqa(reference, test, p) == pytest.approx((w * f).sum() / w.sum())
    assert wae_iqa(reference, reference) == 0.0


def test_wae_single_error_level_is_f_of_it():
    hist = np.zeros(256)
    hist[51] = 10                                   # every pixel off by 51 grey levels: x = 0.2
    p = WAE_PAPER_PARAMETERS
    assert wae_from_histograms(hist, p) == pytest.approx(p.a1 * 0.2 + p.a2 * 0.04 + p.a3 * 0.008)
    reference = np.zeros((3, 4), np.uint8)
    assert abs_error_histogram(reference, reference + np.uint8(7))[7] == 12


def test_fit_wae_parameters_recovers_a_ranking_by_cross_validation():
    rng = np.random.default_rng(5)
    truth = WAEParameters(1.0, 0.0, 3.0, 40.0, 0.15)
    histograms, subjective = {}, {}
    for set_id in ["A", "B", "C"]:
        # items differ in how many pixels carry small vs large errors, so WAE ranks differ from the mean error
        hists = np.zeros((10, 256))
        hists[:, 0] = 1000
        hists[:, 10] = rng.integers(0, 400, 10)
        hists[:, 80] = rng.integers(0, 40, 10)
        histograms[set_id] = hists
        subjective[set_id] = -wae_from_histograms(hists, truth)
    fit = fit_wae_parameters(histograms, subjective, n_starts=2, seed=0, maxiter=150)
    assert set(fit.test_srocc) == {"A", "B", "C"}
    assert fit.average == pytest.approx(np.mean(list(fit.test_srocc.values())))
    assert fit.average > 0.9
    for set_id in subjective:                       # the fast rank correlation agrees with analysis.srocc
        rho = srocc(-wae_from_histograms(histograms[set_id], fit.fold_parameters[set_id]), subjective[set_id])
        assert fit.test_srocc[set_id] == pytest.approx(rho)
    with pytest.raises(StimulusInputError, match="two sets"):
        fit_wae_parameters({"A": histograms["A"]}, {"A": subjective["A"]})


# ---------------------------------------------------------------- SROCC table

def test_metric_srocc_table_rows_average_and_signs():
    subjective = {"s1": np.array([3.0, 2.0, 1.0, 0.0]), "s2": np.array([0.0, 1.0, 2.0, 3.0])}
    values = {
        "rmse": {"s1": np.array([1.0, 2.0, 3.0, 4.0]), "s2": np.array([4.0, 3.0, 1.0, 2.0])},
        "ssim": {"s1": np.array([0.9, 0.8, 0.7, 0.6]), "s2": np.array([0.1, 0.3, 0.2, 0.4])},
    }
    rows = metric_srocc_table(values, subjective)
    assert [row["set"] for row in rows] == ["s1", "s2", "Average"]
    assert rows[0]["rmse"] == pytest.approx(1.0)    # lower RMSE = better: sign flipped
    assert rows[1]["rmse"] == pytest.approx(srocc(-values["rmse"]["s2"], subjective["s2"]))
    assert rows[1]["ssim"] == pytest.approx(srocc(values["ssim"]["s2"], subjective["s2"]))
    assert rows[2]["rmse"] == pytest.approx((rows[0]["rmse"] + rows[1]["rmse"]) / 2)
    flipped = metric_srocc_table(values, subjective, higher_is_better={"rmse": True})
    assert flipped[0]["rmse"] == pytest.approx(-1.0)
    text = format_srocc_table(rows)
    assert text.splitlines()[0].split() == ["set", "rmse", "ssim"] and "Average" in text
    with pytest.raises(StimulusInputError, match="values"):
        metric_srocc_table({"rmse": {"s1": np.ones(3)}}, subjective)
