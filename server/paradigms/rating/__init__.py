"""The rating paradigm (kind ``rating``): ACR, DCR and CCR ratings of prepared scenes (ITU-T P.910 / P.808),
with hidden references, strongly degraded gold images, a training quiz and straight-lining checks.

Modules: :mod:`.paradigm` (the :class:`~server.paradigms.core.Paradigm`), :mod:`.study` (study file and
creation), :mod:`.models` (tables), :mod:`.scales`, :mod:`.quality`, :mod:`.allocation`, :mod:`.export`;
``templates/rating/`` holds its pages.
"""
# PARADIGM is imported on first use (PEP 562), not with the package: the command line imports this
# package's cli module at start, and `perceptlab --help` must not load the database and numeric code.
__all__ = ["PARADIGM"]


def __getattr__(name: str):
    if name == "PARADIGM":
        from .paradigm import PARADIGM
        return PARADIGM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
