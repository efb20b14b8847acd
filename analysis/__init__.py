"""Analysis of crowd judgements: pure numpy/scipy, no Flask.

Thurstone Case V scaling with virtual anchors (:mod:`analysis.thurstone`),
worker screening and soft screening's vote weights (:mod:`analysis.screening`), colluding and machine-perfect workers
(:mod:`analysis.collusion`), bootstrap intervals
(:mod:`analysis.bootstrap`), correlations (:mod:`analysis.correlation`),
across-set rankings and Pareto groups (:mod:`analysis.ranking`), active pair
sampling and its offline replay (:mod:`analysis.active`, :mod:`analysis.active_replay`), the file
formats of ARCHITECTURE.md (:mod:`analysis.formats`), the whole pipeline
(:mod:`analysis.pipeline`), simulated crowds (:mod:`analysis.simulate`) and
plots (:mod:`analysis.plots`); rating studies (ACR, DCR, CCR): scores and intervals
(:mod:`analysis.ratings`), worker screening (:mod:`analysis.rating_screening`), the P.913 subject
model and the content-ambiguity model (:mod:`analysis.rating_models`,
:mod:`analysis.rating_content_model`), the analysis and its files (:mod:`analysis.rating_report`,
:mod:`analysis.rating_plots`) and the comparison with paired comparison (:mod:`analysis.protocols`); forecasts of
the votes or ratings a study needs, from a pilot (:mod:`analysis.forecast`, :mod:`analysis.rating_forecast`). The solvers run with one BLAS thread
(:mod:`analysis.threads`): their systems are small, and more threads only
slow them down on a busy machine.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("perceptlab")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
