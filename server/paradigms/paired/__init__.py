"""Paired comparison ("pc", the default kind): a package holding everything the paradigm owns.

Layout::

    paradigm.py          the PairedComparison paradigm: pages of pairs, votes, gold, the State
    study.py             the study file, its spec and study creation (sets, stimuli, pairs)
    active.py            active pair sampling (an active study's sets as index arrays)
    live_scales.py       running scales while a study runs (and live_scales_child.py, its worker process)

The registry (:mod:`server.paradigms`) imports this package the first time a study of kind "pc" is
met and takes :data:`PARADIGM`.
"""
from .paradigm import PARADIGM

__all__ = ["PARADIGM"]
