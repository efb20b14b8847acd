"""Helpers of the rating-analysis tests: ratings.csv files of simulated studies, the public NFLX dataset as a
(stimuli x workers) matrix, and sureal's models run on a matrix (sureal is a test dependency only)."""
from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from analysis.rating_models import SimulatedRatings
from stimuli.csv_safety import csv_text

DATA = Path(__file__).resolve().parent / "data"
NFLX_CSV = DATA / "nflx_public_ratings.csv"


def write_ratings(path: Path, sim: SimulatedRatings, extra: dict[str, np.ndarray] | None = None) -> Path:
    """A ratings.csv of ``sim`` (and extra columns, one value per rating)."""
    columns = sim.columns()
    columns.update(extra or {})
    path.write_text(csv_text(list(columns), zip(*columns.values())), encoding="utf-8")
    return path


def nflx_matrix() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The NFLX public dataset: (79 stimuli x 26 workers) ratings, stimulus IDs, worker IDs."""
    from analysis.ratings import read_ratings

    r = read_ratings(NFLX_CSV)
    matrix = np.full((len(r.stimulus_ids), len(r.worker_ids)), np.nan)
    matrix[r.stimulus, r.worker] = r.rating
    return matrix, r.stimulus_ids, r.worker_ids


def sureal_fit(matrix: np.ndarray, model: str = "P910AnnexEModel", content: np.ndarray | None = None) -> dict:
    """sureal's result for a (stimuli x workers) matrix with NaN for missing ratings (its prints silenced).

    ``model`` names a class of ``sureal`` or ``sureal.subjective_model``; ``content`` is each stimulus'
    content index (default: one content for all).
    """
    content = np.zeros(len(matrix), dtype=int) if content is None else np.asarray(content)
    import sureal
    import sureal.subjective_model as models
    from sureal.dataset_reader import RawDatasetReader

    dataset = SimpleNamespace(dataset_name="test", yuv_fmt="yuv420p", width=1920, height=1080, ref_score=5.0,
                              ref_videos=[{"content_id": int(c), "content_name": f"c{c}", "path": f"ref{c}"}
                                          for c in range(int(content.max()) + 1)],
                              dis_videos=[{"asset_id": j, "content_id": int(content[j]), "os": list(row),
                                           "path": f"d{j}"} for j, row in enumerate(matrix)])
    cls = getattr(sureal, model, None) or getattr(models, model)
    # sureal prints its iterations and divides by zero content ambiguities of its unused content model
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return cls(RawDatasetReader(dataset)).run_modeling()
