"""Artefact zooming: average error, Otsu regions, crop boxes, overview."""
from __future__ import annotations

import numpy as np
import pytest

from stimuli.io import StimulusInputError
from stimuli.zoom import (MAX_CROP_AREA, PALETTE, CropBox, average_error, crop, draw_overview, find_crop_boxes,
                          find_scene_crops)

H, W = 180, 240


def _scene(rng, regions, n_candidates=6, noise=2):
    """Reference and candidates with strong errors inside ``regions`` ((x, y, w, h, amplitude) each)."""
    reference = rng.integers(60, 196, (H, W, 3), dtype=np.int64)
    candidates = []
    for _ in range(n_candidates):
        candidate = reference + rng.integers(-noise, noise + 1, reference.shape)
        for x, y, w, h, amplitude in regions:
            candidate[y:y + h, x:x + w] += rng.integers(-amplitude, amplitude + 1, (h, w, 3))
        candidates.append(np.clip(candidate, 0, 255).astype(np.uint8))
    return reference.astype(np.uint8), candidates


def _contains(box: CropBox, x, y, w, h) -> bool:
    return box.x <= x and box.y <= y and box.x + box.width >= x + w and box.y + box.height >= y + h


def test_average_error_is_mean_over_candidates_and_channels():
    reference = np.zeros((2, 2, 3), np.uint8)
    a = np.zeros_like(reference)
    a[0, 0] = [3, 0, 0]
    b = np.zeros_like(reference)
    b[0, 0] = [0, 6, 0]
    b[1, 1] = [9, 9, 9]
    np.testing.assert_allclose(average_error(reference, [a, b]), [[1.5, 0], [0, 4.5]])
    with pytest.raises(StimulusInputError):
        average_error(reference, [])
    with pytest.raises(StimulusInputError):
        average_error(reference, [np.zeros((3, 2, 3), np.uint8)])


@pytest.mark.parametrize("levels", [2, 3])
def test_crop_contains_planted_artefact(levels):
    rng = np.random.default_rng(0)
    planted = (150, 100, 30, 24, 60)
    reference, candidates = _scene(rng, [planted])
    boxes = find_scene_crops(reference, candidates, sigma=6, levels=levels, min_size=(80, 60))
    assert boxes, "no region found"
    best = boxes[0]
    assert best.rank == 1
    assert _contains(best, *planted[:4])
    assert 0 <= best.x and best.x + best.width <= W and 0 <= best.y and best.y + best.height <= H
    crop_ref = crop(reference, best)
    assert crop_ref.shape == (best.height, best.width, 3)
    np.testing.assert_array_equal(crop_ref, reference[best.y:best.y + best.height, best.x:best.x + best.width])


def test_boxes_ranked_by_error_sized_and_limited_to_top_k():
    rng = np.random.default_rng(1)
    strong, weak = (20, 20, 24, 20, 90), (180, 130, 24, 20, 40)
    reference, candidates = _scene(rng, [strong, weak])
    error = average_error(reference, candidates)
    boxes = find_crop_boxes(error, sigma=4, top_k=3, min_size=(64, 48), pad=4)
    assert len(boxes) == 2
    assert _contains(boxes[0], *strong[:4]) and _contains(boxes[1], *weak[:4])
    assert boxes[0].error_sum > boxes[1].error_sum
    for box in boxes:
        assert box.width >= 64 and box.height >= 48
        assert abs(box.width / box.height - 4 / 3) < 0.03
    assert len(find_crop_boxes(error, sigma=4, top_k=1, min_size=(64, 48))) == 1


def test_box_at_border_is_shifted_inside_and_keeps_its_size():
    rng = np.random.default_rng(2)
    corner = (W - 20, H - 16, 20, 16, 80)
    reference, candidates = _scene(rng, [corner])
    (box,) = find_scene_crops(reference, candidates, sigma=4, min_size=(120, 90), top_k=1)
    assert (box.width, box.height) == (120, 90)
    assert (box.x + box.width, box.y + box.height) == (W, H)
    assert _contains(box, *corner[:4])


def test_box_larger_than_image_becomes_largest_fitting_box():
    error = np.zeros((H, W), np.float32)
    error[80:100, 100:140] = 50
    (box,) = find_crop_boxes(error, sigma=3, min_size=(1000, 750), max_area=1.0)
    assert (box.x, box.y, box.width, box.height) == (0, 0, W, H)  # 240 x 180 is 4:3 already
    # ... which by default is not offered: it would only repeat the full image.
    assert find_crop_boxes(error, sigma=3, min_size=(1000, 750)) == []


def test_a_crop_over_half_of_the_image_is_not_offered():
    """Uniform distortions (noise, blur, JPEG over the whole frame) segment into one region spanning the image:
    its box covers most of it and the scene gets no crop; a local artefact keeps its crop."""
    rng = np.random.default_rng(5)
    reference, uniform = _scene(rng, [(0, 0, W, H, 40)])
    assert find_scene_crops(reference, uniform, sigma=4) == []
    reference, local = _scene(rng, [(20, 20, 30, 24, 80)])
    (box, *_) = find_scene_crops(reference, local, sigma=4)
    assert box.width * box.height <= MAX_CROP_AREA * W * H and _contains(box, 20, 20, 30, 24)
    # The threshold is the box's share of the image: 160 x 120 of 240 x 180 is 44 %, kept; at 40 % it goes.
    assert find_scene_crops(reference, local, sigma=4, max_area=0.4) == []


def test_top_k_zero_gives_no_crops():
    rng = np.random.default_rng(6)
    reference, candidates = _scene(rng, [(20, 20, 30, 24, 80)])
    assert find_scene_crops(reference, candidates, sigma=4, top_k=0) == []


def test_overlapping_boxes_are_merged():
    error = np.zeros((H, W), np.float32)
    error[70:80, 100:110] = 40
    error[70:80, 125:135] = 40  # a separate region, but its grown box overlaps the first almost fully
    boxes = find_crop_boxes(error, sigma=1.5, min_size=(96, 72), pad=2, top_k=3)
    assert len(boxes) == 1
    assert _contains(boxes[0], 100, 70, 35, 10)
    assert boxes[0].error_sum == pytest.approx(float(error.sum()), rel=1e-6)
    unmerged = find_crop_boxes(error, sigma=1.5, min_size=(96, 72), pad=2, top_k=3, max_overlap=1.0)
    assert len(unmerged) == 2


def test_no_contrast_gives_no_boxes():
    reference = np.full((H, W, 3), 90, np.uint8)
    assert find_scene_crops(reference, [reference.copy(), reference.copy()]) == []


def test_bad_parameters_are_errors():
    error = np.zeros((H, W), np.float32)
    for kwargs, word in [({"top_k": -1}, "top_k"), ({"max_area": 0}, "max_area"), ({"sigma": 0}, "sigma"),
                         ({"levels": 1}, "levels"),
                         ({"aspect": 0}, "aspect"), ({"min_size": (0, 5)}, "min_size"), ({"zoom": 0}, "zoom")]:
        with pytest.raises(StimulusInputError, match=word):
            find_crop_boxes(error, **kwargs)


def test_to_dict_records_zoom_and_display_size():
    box = CropBox(10, 20, 160, 120, 1.5, 12.5, 1)
    assert box.to_dict() == {"x": 10, "y": 20, "width": 160, "height": 120, "zoom": 1.5, "error_sum": 12.5,
                             "rank": 1, "display_width": 240, "display_height": 180}


def test_overview_outlines_boxes_in_palette_colours():
    reference = np.full((H, W, 3), 128, np.uint8)
    boxes = [CropBox(10, 10, 80, 60, 1.5, 2.0, 1), CropBox(120, 90, 80, 60, 1.5, 1.0, 2)]
    overview = draw_overview(reference, boxes)
    assert overview.dtype == np.uint8 and overview.shape == reference.shape
    for box in boxes:
        colour = PALETTE[box.rank - 1]
        bottom_edge = overview[box.y + box.height - 1, box.x + box.width // 2]
        right_edge = overview[box.y + box.height // 2, box.x + box.width - 1]
        np.testing.assert_array_equal(bottom_edge, colour)
        np.testing.assert_array_equal(right_edge, colour)
        assert np.all(overview[box.y + box.height // 2, box.x + box.width // 2] == 128)  # inside untouched
    np.testing.assert_array_equal(reference, 128)  # input not modified
    sixteen = draw_overview((reference.astype(np.uint16) << 8), boxes[:1])
    assert sixteen.dtype == np.uint8 and sixteen[H - 1, W - 1, 0] == 128
