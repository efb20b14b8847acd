"""Middlebury .flo and .npy flow files (stimuli.flow_io)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from stimuli.flow_io import (UNKNOWN_FLOW, read_flo, read_flow, read_npy_flow, unknown_mask,
                             write_flo, write_flow)


@pytest.fixture
def flow() -> np.ndarray:
    rng = np.random.default_rng(3)
    field = rng.normal(0, 5, (7, 11, 2)).astype(np.float32)
    field[2, 3] = np.nan  # one unknown vector
    return field


def _hand_written_flo(width: int, height: int, values: list[float]) -> bytes:
    # Independent encoder (struct, not numpy) so the test checks the layout itself.
    return b"PIEH" + struct.pack("<ii", width, height) + struct.pack(f"<{len(values)}f", *values)


def test_flo_round_trip_keeps_values_and_unknowns(tmp_path, flow):
    path = tmp_path / "a.flo"
    write_flo(path, flow)
    back = read_flo(path)
    assert back.dtype == np.float32 and back.shape == flow.shape
    np.testing.assert_array_equal(back, flow)  # NaN positions must match too
    assert unknown_mask(back).sum() == 1 and unknown_mask(back)[2, 3]


def test_flo_layout_is_magic_width_height_then_interleaved_rows(tmp_path):
    flow = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)  # H=2, W=3
    path = tmp_path / "layout.flo"
    write_flo(path, flow)
    data = path.read_bytes()
    assert data[:4] == b"PIEH"
    assert struct.unpack("<f", data[:4])[0] == 202021.25
    assert struct.unpack("<ii", data[4:12]) == (3, 2)
    assert len(data) == 12 + 3 * 2 * 2 * 4
    # Row 0: (u, v) of x = 0, 1, 2; then row 1.
    assert struct.unpack("<12f", data[12:]) == tuple(float(v) for v in range(12))


def test_reads_hand_written_file_and_marks_huge_values_unknown(tmp_path):
    values = [1.5, -2.0, UNKNOWN_FLOW, 0.0, 3.0, 4.0, 0.25, 2e9]
    path = tmp_path / "hand.flo"
    path.write_bytes(_hand_written_flo(2, 2, values))
    flow = read_flo(path)
    assert flow.shape == (2, 2, 2)
    np.testing.assert_array_equal(flow[0, 0], [1.5, -2.0])
    np.testing.assert_array_equal(flow[1, 0], [3.0, 4.0])
    # A vector with either component beyond 1e9 is unknown as a whole.
    assert np.isnan(flow[0, 1]).all() and np.isnan(flow[1, 1]).all()
    np.testing.assert_array_equal(unknown_mask(flow), [[False, True], [False, True]])


def test_unknown_vectors_are_written_as_1e10(tmp_path):
    flow = np.zeros((1, 2, 2), dtype=np.float32)
    flow[0, 1, 0] = np.nan
    path = tmp_path / "u.flo"
    write_flo(path, flow)
    assert struct.unpack("<4f", path.read_bytes()[12:]) == (0.0, 0.0, UNKNOWN_FLOW, UNKNOWN_FLOW)


def test_wrong_magic_is_a_clear_error(tmp_path):
    path = tmp_path / "bad_magic.flo"
    path.write_bytes(b"PIEX" + struct.pack("<ii", 1, 1) + struct.pack("<2f", 0, 0))
    with pytest.raises(ValueError, match=r"bad_magic\.flo.*magic"):
        read_flo(path)


def test_truncated_file_is_a_clear_error(tmp_path):
    data = _hand_written_flo(4, 3, [0.0] * 24)
    path = tmp_path / "short.flo"
    path.write_bytes(data[:-5])
    with pytest.raises(ValueError, match=r"short\.flo.*truncated.*4x3 needs 108 bytes.*103"):
        read_flo(path)


def test_trailing_bytes_and_tiny_files_and_bad_sizes_are_errors(tmp_path):
    path = tmp_path / "long.flo"
    path.write_bytes(_hand_written_flo(1, 1, [0.0, 0.0]) + b"\0")
    with pytest.raises(ValueError, match=r"long\.flo.*trailing"):
        read_flo(path)
    path = tmp_path / "tiny.flo"
    path.write_bytes(b"PIEH\x01")
    with pytest.raises(ValueError, match=r"tiny\.flo.*header"):
        read_flo(path)
    path = tmp_path / "negative.flo"
    path.write_bytes(b"PIEH" + struct.pack("<ii", -3, 2))
    with pytest.raises(ValueError, match=r"negative\.flo.*width -3"):
        read_flo(path)


def test_npy_round_trip_and_suffix_dispatch(tmp_path, flow):
    write_flow(tmp_path / "f.npy", flow)
    np.testing.assert_array_equal(read_flow(tmp_path / "f.npy"), flow)
    write_flow(tmp_path / "f.flo", flow)
    np.testing.assert_array_equal(read_flow(tmp_path / "f.flo"), flow)
    # .npy follows the same unknown convention as .flo
    huge = flow.copy()
    huge[0, 0, 1] = 5e9
    np.save(tmp_path / "huge.npy", huge)
    assert np.isnan(read_npy_flow(tmp_path / "huge.npy")[0, 0]).all()
    with pytest.raises(ValueError, match=r"f\.png.*\.flo or \.npy"):
        read_flow(tmp_path / "f.png")


def test_bad_arrays_are_rejected_and_nothing_is_left_behind(tmp_path):
    with pytest.raises(ValueError, match=r"x\.flo.*\(H, W, 2\)"):
        write_flo(tmp_path / "x.flo", np.zeros((4, 4, 3)))
    np.save(tmp_path / "wrong.npy", np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"wrong\.npy.*\(H, W, 2\)"):
        read_npy_flow(tmp_path / "wrong.npy")
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError, match=r"broken\.npy"):
        read_npy_flow(tmp_path / "broken.npy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.npy", "wrong.npy"]


def test_write_replaces_existing_file_atomically(tmp_path, flow):
    path = tmp_path / "f.flo"
    write_flo(path, np.zeros((2, 2, 2)))
    write_flo(path, flow)
    np.testing.assert_array_equal(read_flo(path), flow)
    assert [p.name for p in tmp_path.iterdir()] == ["f.flo"]  # no temporary file left
