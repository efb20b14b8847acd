"""Analysis of crowd judgements: pure numpy/scipy, no Flask.

Thurstone Case V scaling with virtual anchors (:mod:`analysis.thurstone`),
worker screening (:mod:`analysis.screening`), colluding and machine-perfect workers
(:mod:`analysis.collusion`), bootstrap intervals
(:mod:`analysis.bootstrap`), correlations (:mod:`analysis.correlation`),
across-set rankings and Pareto groups (:mod:`analysis.ranking`), active pair
sampling and its offline replay (:mod:`analysis.active`, :mod:`analysis.active_replay`), the file
formats of ARCHITECTURE.md (:mod:`analysis.formats`), the whole pipeline
(:mod:`analysis.pipeline`), simulated crowds (:mod:`analysis.simulate`) and
plots (:mod:`analysis.plots`). The solvers run with one BLAS thread
(:mod:`analysis.threads`): their systems are small, and more threads only
slow them down on a busy machine.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("perceptlab")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
