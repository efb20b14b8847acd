"""BLAS thread limits for the analysis's small dense solves.

The Thurstone fits factorise and solve dense systems of a set's size (about 150
items) against a few hundred right-hand sides at a time. OpenBLAS splits such
calls over as many threads as there are cores and busy-waits for them to join:
on a machine where another process keeps a core busy, each call then waits for
a descheduled thread, and ``perceptlab analyze`` of a StudyMB-sized study took
several times longer than with one BLAS thread (``benchmarks/analysis_load.py``).
These problems are too small to gain from several threads even on an idle
machine, so the analysis runs them with one BLAS thread.

:func:`limited_blas_threads` (a context manager) and :func:`limits_blas_threads`
(a decorator) apply the limit through threadpoolctl for as long as any analysis
call is running in the process, and restore the previous setting when the last
one returns. ``PERCEPTLAB_BLAS_THREADS`` sets the number of threads (default 1;
``0`` leaves BLAS's own setting alone, e.g. to compare).
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

ENVIRONMENT_VARIABLE = "PERCEPTLAB_BLAS_THREADS"
DEFAULT_BLAS_THREADS = 1

_F = TypeVar("_F", bound=Callable[..., Any])

# The limit is process-wide (BLAS has one thread pool), so nested and concurrent analysis calls share
# one: the first to enter sets it, the last to leave restores what was there before.
_guard = threading.Lock()
_active_calls = 0
_limiter = None
_controller = None
_modules_seen = -1  # len(sys.modules) when _controller looked for libraries


def blas_threads(environ: dict[str, str] | None = None) -> int | None:
    """The number of BLAS threads the analysis uses, or None to leave BLAS's own setting.

    Parameters
    ----------
    environ : dict, optional
        Where ``PERCEPTLAB_BLAS_THREADS`` is read (default: ``os.environ``).

    Raises
    ------
    ValueError
        The variable is not a whole number of 0 or more.
    """
    text = (os.environ if environ is None else environ).get(ENVIRONMENT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_BLAS_THREADS
    try:
        threads = int(text)
    except ValueError:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must be a whole number (0 = no limit), got {text!r}") from None
    if threads < 0:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must be 0 or more, got {threads}")
    return threads or None


def _thread_pools():
    """threadpoolctl's view of the loaded BLAS libraries.

    Finding them takes milliseconds, applying a limit through them microseconds, so the view is kept
    until the process has imported more modules: a new extension module may have brought its own
    BLAS (OpenCV ships one besides numpy's and scipy's).
    """
    global _controller, _modules_seen
    if _controller is None or len(sys.modules) != _modules_seen:
        from threadpoolctl import ThreadpoolController

        _modules_seen = len(sys.modules)
        _controller = ThreadpoolController()
        _modules_seen = len(sys.modules)  # the first call imports threadpoolctl itself
    return _controller


def _release_openblas_control() -> None:
    """Let the next thread change OpenBLAS's (process-wide) thread count.

    threadpoolctl 3.8 lets only the thread that first changed it change it again and silently ignores
    the others. Here the first analysis call to start sets the limit and the last to finish restores
    it, possibly from different threads; every change is made under :data:`_guard`, so handing the
    control over is safe. Older threadpoolctl versions have no such rule (nor this method).
    """
    import threadpoolctl

    release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


@contextmanager
def limited_blas_threads() -> Iterator[None]:
    """Run the enclosed code with BLAS limited to :func:`blas_threads` threads (re-entrant, thread-safe)."""
    global _active_calls, _limiter
    with _guard:
        if _active_calls == 0:
            threads = blas_threads()
            if threads is not None:
                pools = _thread_pools()
                _release_openblas_control()
                _limiter = pools.limit(limits=threads, user_api="blas")
                _release_openblas_control()
        _active_calls += 1
    try:
        yield
    finally:
        with _guard:
            _active_calls -= 1
            if _active_calls == 0 and _limiter is not None:
                _release_openblas_control()
                _limiter.restore_original_limits()
                _release_openblas_control()
                _limiter = None


def limits_blas_threads(function: _F) -> _F:
    """Decorate an analysis entry point so that it runs inside :func:`limited_blas_threads`."""
    @functools.wraps(function)
    def limited(*args, **kwargs):
        with limited_blas_threads():
            return function(*args, **kwargs)
    return limited  # type: ignore[return-value]
