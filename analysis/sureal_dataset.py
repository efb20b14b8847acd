"""Ratings as sureal's dataset file (``sureal_dataset.py``), so sureal and the VQA tools built on its
format (VMAF's training scripts among them) read a perceptlab study directly.

sureal's format is a Python file of plain assignments: ``dataset_name``, ``ref_videos`` (one dict per
content: ``content_id`` from 0, ``content_name``, ``path``) and ``dis_videos`` (one dict per rated stimulus:
``content_id``, ``asset_id``, ``path`` and ``os``, the opinion scores). ``os`` is a dict keyed by worker,
so a sparse crowd design (each worker rating a few stimuli) needs no missing-value padding; a worker who
rated a stimulus more than once gets the list of their ratings, which sureal reads as repetitions.

What goes in: every rating that is not a gold question, of every worker (sureal applies its own subject
models and rejection), so the mean of a stimulus' ``os`` is the MOS ``analyze-ratings --no-screening``
writes to scores.csv. A stimulus' content is its ``reference_id`` (DCR, CCR, ACR-HR), else the stimulus
itself (:func:`analysis.rating_report.content_keys`); a hidden reference's ``path`` is its content's
reference path, which is how sureal recognises it for differential scores (``ref_score``). Every value is
written as a Python literal (``repr``): an ID can hold no code.
"""
from __future__ import annotations

import numpy as np

from .ratings import Ratings

SCALE_TOP = {"acr": 5.0, "dcr": 5.0, "ccr": 3.0}


def sureal_dataset(ratings: Ratings, content: np.ndarray, name: str = "perceptlab") -> dict:
    """The dataset as sureal's attributes: ``dataset_name``, ``ref_score``, ``ref_videos``, ``dis_videos``.

    Parameters
    ----------
    ratings : Ratings
        The study's ratings (gold rows are left out).
    content : numpy.ndarray of str, shape (J,)
        The content (source) key of each stimulus.
    name : str
        ``dataset_name``.
    """
    main = ~ratings.is_gold
    content = np.asarray(content).astype(str)
    rated = np.unique(ratings.stimulus[main])
    names = sorted(set(content[rated].tolist()))
    content_id = {key: k for k, key in enumerate(names)}
    ref_videos = [{"content_id": k, "content_name": key, "path": key} for k, key in enumerate(names)]
    scores: dict[int, dict[str, list[float]]] = {int(j): {} for j in rated}
    for j, w, x in zip(ratings.stimulus[main], ratings.worker[main], ratings.rating[main]):
        scores[int(j)].setdefault(str(ratings.worker_ids[w]), []).append(float(x))
    dis_videos = []
    for asset, j in enumerate(rated):
        os_ = {worker: (values[0] if len(values) == 1 else values) for worker, values in scores[int(j)].items()}
        dis_videos.append({"content_id": content_id[content[j]], "asset_id": asset,
                           "path": str(ratings.stimulus_ids[j]), "os": os_})
    return {"dataset_name": name, "ref_score": SCALE_TOP.get(ratings.scale, 5.0), "ref_videos": ref_videos,
            "dis_videos": dis_videos}


def sureal_dataset_text(dataset: dict) -> str:
    """The dataset as the text of a Python file sureal imports (``import_python_file``)."""
    lines = ["# sureal dataset written by perceptlab analyze-ratings: every non-gold rating, os keyed by worker",
             f"dataset_name = {dataset['dataset_name']!r}",
             f"ref_score = {dataset['ref_score']!r}",
             "ref_videos = ["]
    lines += [f"    {video!r}," for video in dataset["ref_videos"]]
    lines += ["]", "dis_videos = ["]
    lines += [f"    {video!r}," for video in dataset["dis_videos"]]
    lines += ["]", ""]
    return "\n".join(lines)
