"""SGEMM callable from inside numba kernels, and the thread control of both pools.

Kernels call BLAS through numba's own helper `numba_xxgemm` (it forwards to SciPy's
`cython_blas.sgemm`), which takes leading dimensions: a GEMM can write a column block of
a larger output or accumulate into it (beta = 1) without copies.

One level of parallelism at a time: every parallel kernel splits its work over numba's
pool, and each worker calls a single-threaded GEMM. So SciPy's BLAS (the one numba calls)
is pinned to one thread, and RLX_NUM_THREADS sets numba's pool. On this 2-core machine a
numba `prange` im2col followed by a threaded OpenBLAS GEMM measured 2-5x slower than
either alone, because the two pools spun against each other.
"""
from __future__ import annotations

import os
import threading
from typing import Optional

import numba
import numpy as np
from numba import types

import numba.np.linalg  # noqa: F401  (makes numba load SciPy's BLAS for numba_xxgemm)

from .jit import kernel

_xxgemm = types.ExternalFunction("numba_xxgemm", types.intc(
    types.char, types.char, types.char, types.intp, types.intp, types.intp,
    types.intp, types.intp, types.intp, types.intp, types.intp, types.intp, types.intp, types.intp))

# alpha = 1 at +0 bytes, beta = 0 at +4, beta = 1 at +8 (BLAS takes them by pointer)
_SCALARS = np.array([1.0, 0.0, 1.0], np.float32)
_N, _T = ord("n"), ord("t")


@kernel
def sgemm(trans_a, trans_b, m, n, k, a_ptr, lda, b_ptr, ldb, accumulate, c_ptr, ldc):
    """Row-major C[m, n] (= or +=) op(A)[m, k] @ op(B)[k, n]; pointers are byte addresses,
    leading dimensions are in elements. BLAS is column-major, so this computes
    C^T = op(B)^T op(A)^T."""
    if m == 0 or n == 0:
        return
    s = _SCALARS.ctypes.data
    _xxgemm(ord("s"), _T if trans_b else _N, _T if trans_a else _N, n, m, k, s,
            b_ptr, ldb, a_ptr, lda, s + (8 if accumulate else 4), c_ptr, ldc)


def _scipy_blas_libs():
    """threadpoolctl's handles on the BLAS that SciPy's cython_blas (and so numba) uses:
    the one SciPy ships (scipy.libs/ in a wheel), else every BLAS if it can't be told apart."""
    import scipy
    import scipy.linalg.cython_blas  # noqa: F401  (loads the library)
    from threadpoolctl import ThreadpoolController
    blas = [lib for lib in ThreadpoolController().lib_controllers if lib.user_api == "blas"]
    site = os.path.dirname(os.path.dirname(os.path.abspath(scipy.__file__)))
    mine = [lib for lib in blas if os.path.relpath(os.path.abspath(lib.filepath), site).split(os.sep)[0]
            in ("scipy", "scipy.libs")]
    return mine or blas


_configured: Optional[int] = None
# numba's pool size is per calling thread; this remembers what this thread was set to, so a
# run asks numba nothing when nothing changed (get_num_threads measured ~1 us of a 9 us run)
_thread = threading.local()


def max_threads() -> int:
    """The most workers numba's pool has (NUMBA_NUM_THREADS, fixed when it starts)."""
    return numba.config.NUMBA_NUM_THREADS


def default_threads() -> int:
    """Workers when RLX_NUM_THREADS is unset: the cores this process may use (its affinity and
    cgroup quota; rlxpy.cpu_kernels.host.usable_cores), not the host's."""
    from .host import usable_cores
    return max(1, min(usable_cores(), max_threads()))


def configure_threads(num_threads: Optional[int]) -> int:
    """Numba's pool gets `num_threads` (None: the cores this process may use); SciPy's BLAS gets one thread.
    Returns the thread count in force. Cheap when nothing changes."""
    global _configured
    if getattr(_thread, "requested", False) == (num_threads,):
        return _thread.n
    n = default_threads() if num_threads is None else max(1, min(int(num_threads), max_threads()))
    if _configured is None:
        for lib in _scipy_blas_libs():
            lib.set_num_threads(1)
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)
    _configured = n
    _thread.requested, _thread.n = (num_threads,), n
    return n
