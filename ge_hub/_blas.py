"""Finds the BLAS that the C kernels' `ge_sgemm` calls and loads it into ge_hub._core.

The C core links no BLAS at build time; it dlopen()s one here, at run time: the shared
library of the `scipy-openblas32` wheel (a dependency of ge-hub), whose cblas symbols are
prefixed `scipy_`. Without one, `ge_sgemm` runs a portable loop: correct, slower.

    GE_HUB_BLAS   unset: the scipy-openblas32 library; a path: that library (it must
                  export scipy_cblas_sgemm); "none": load no BLAS
"""

from __future__ import annotations

import contextlib
import os
import threading

from ge_hub import _core

BLAS_ENV = "GE_HUB_BLAS"
OPENBLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"

_lock = threading.Lock()
_loaded: str | None = None
_tried = False


@contextlib.contextmanager
def _single_threaded():
    """OPENBLAS_NUM_THREADS=1 while the library loads, the caller's value restored after.

    OpenBLAS starts its own thread pool when it is loaded, sized from that variable (read
    once, by the library's constructor), else from the CPU count. ge-hub caps it at one
    thread right after, but by then the pool's threads exist, and each spins for about
    0.1 s of CPU before it sleeps: on a small machine that spin competed with a model's
    first run (light ResNet-50 from a `.ghm`: 15-23% of the first run's CPU samples were
    OpenBLAS's idle thread). Loaded this way, it starts no thread at all."""
    previous = os.environ.get(OPENBLAS_THREADS_ENV)
    os.environ[OPENBLAS_THREADS_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[OPENBLAS_THREADS_ENV]
        else:
            os.environ[OPENBLAS_THREADS_ENV] = previous


def _wheel_library() -> str | None:
    try:
        # The package loads its library when imported (scipy_openblas32's __init__).
        with _single_threaded():
            import scipy_openblas32
    except ImportError:
        return None
    path = os.path.join(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library(True))
    return path if os.path.exists(path) else None


def load() -> str | None:
    """Load the BLAS once per process; returns its path, or None when none is used.

    Raises OSError when GE_HUB_BLAS names a library that cannot be loaded: a BLAS asked
    for by name should not silently become the slow loop.
    """
    global _loaded, _tried
    if _tried:
        return _loaded
    with _lock:
        if _tried:
            return _loaded
        wanted = os.environ.get(BLAS_ENV, "").strip()
        if wanted.lower() == "none":
            path = None
        elif wanted:
            path = wanted
        else:
            path = _wheel_library()
        if path is not None:
            with _single_threaded():
                _core.load_blas(path)
            # Single-threaded BLAS: kernels split GEMMs into tiles over ge-hub's own pool,
            # and a second pool of OpenBLAS threads (which spin after each call) would
            # fight it for the same cores.
            _core.set_blas_threads(1)
        _loaded = path
        _tried = True
        return _loaded


def available() -> bool:
    """Whether `ge_sgemm` calls a real BLAS (after `load()`)."""
    return _core.blas_available()
