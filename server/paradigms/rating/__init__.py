"""The rating paradigm (kind ``rating``): ACR, DCR and CCR ratings of prepared scenes (ITU-T P.910 / P.808),
with hidden references, strongly degraded gold images, a training quiz and straight-lining checks.

Modules: :mod:`.paradigm` (the :class:`~server.paradigms.core.Paradigm`), :mod:`.study` (study file and
creation), :mod:`.models` (tables), :mod:`.scales`, :mod:`.quality`, :mod:`.allocation`, :mod:`.export`;
``templates/rating/`` holds its pages.
"""
from .paradigm import PARADIGM

__all__ = ["PARADIGM"]
