"""Numba compile options, decided once: every kernel is cached on disk (a second process
starts fast) and releases the GIL (two threads may run one executable at once)."""
import numba



def kernel(fn):
    return numba.njit(cache=True, nogil=True)(fn)


def parallel_kernel(fn):
    return numba.njit(cache=True, nogil=True, parallel=True)(fn)
