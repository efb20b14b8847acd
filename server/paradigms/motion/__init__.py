"""Motion matching ("motion", HuPerFlow-style): a package holding everything the paradigm owns.

Layout::

    paradigm.py   the MotionMatching paradigm: calibration, RDK screening, matching trials, the State
    models.py     its tables (MotionClip, MotionProbe, Calibration, MotionTrial, MotionResponse, FrameLog)
    study.py      the study file, its spec and study creation (clips and probes)
    export.py     motion.csv, calibration.csv and frame timing exports
    results.py    what `perceptlab results` analyses (analyze-motion of motion.csv)
    templates/    motion/admin_study.html, motion/motion.html, motion/worker_pages.html

The registry (:mod:`server.paradigms`) imports this package the first time a study of kind "motion"
is met and takes :data:`PARADIGM`.
"""
# PARADIGM is imported on first use (PEP 562), not with the package: the command line imports this
# package's cli module at start, and `perceptlab --help` must not load the database and numeric code.
__all__ = ["PARADIGM"]


def __getattr__(name: str):
    if name == "PARADIGM":
        from .paradigm import PARADIGM
        return PARADIGM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
