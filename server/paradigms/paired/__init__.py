"""Paired comparison ("pc", the default kind): a package holding everything the paradigm owns.

Layout::

    paradigm.py          the PairedComparison paradigm: pages of pairs, votes, gold, the State
    models.py            its tables (StudySet, Stimulus, Pair, Trial, Vote, GoldResult, ScaleSnapshot)
    study.py             the study file, its spec and study creation (sets, stimuli, pairs)
    allocation.py        held work per pair (on the shared page reservations of server/allocation.py)
    active.py            active pair sampling (an active study's sets as index arrays)
    live_scales.py       running scales while a study runs (and live_scales_child.py, its worker process)
    export.py            votes.csv and the per-worker columns of workers.csv
    pilots.py            the pairs' counts under pilot participants
    admin.py             the admin blueprint (votes.csv, scales.csv, refresh) and the study page's figures
    results.py           what `perceptlab results` analyses (machine_errors.py: the machine observer)
    templates/           pc/admin_study.html, pc/trials.html, pc/worker_pages.html

The registry (:mod:`server.paradigms`) imports this package the first time a study of kind "pc" is
met and takes :data:`PARADIGM`.
"""
# PARADIGM is imported on first use (PEP 562), not with the package: the command line imports this
# package's cli module at start, and `perceptlab --help` must not load the database and numeric code.
__all__ = ["PARADIGM"]


def __getattr__(name: str):
    if name == "PARADIGM":
        from .paradigm import PARADIGM
        return PARADIGM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
