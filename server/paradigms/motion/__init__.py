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
from .paradigm import PARADIGM

__all__ = ["PARADIGM"]
