"""Numba compile options, decided once: every kernel is cached on disk (a second process
starts fast) and releases the GIL (two threads may run one executable at once)."""
import functools
import os
import sys

import numba
from numba.core.registry import CPUDispatcher as Dispatcher


def kernel(fn):
    return numba.njit(cache=True, nogil=True)(fn)


def parallel_kernel(fn):
    return numba.njit(cache=True, nogil=True, parallel=True)(fn)


# Hot loops index flat arrays with unsigned offsets: numba wraps negative signed indices
# around (a select per access), which stops LLVM from vectorizing. Measured on the
# depthwise kernel: 2.9 ms with signed indices, 0.47 ms with uintp ones.
u = numba.uintp


def inlined(fn):
    """A helper of a hot loop, inlined into its caller at numba's IR level: LLVM does not
    always inline a call that passes a dozen vectors in a tuple (a micro-kernel called as a
    function ran 5x slower)."""
    return numba.njit(nogil=True, inline="always")(fn)


# --- bound calls -----------------------------------------------------------------------------
class FastCall:
    """func(*args), a numba kernel with fixed arguments: the first call goes through the
    dispatcher (which compiles or loads the kernel as usual), later ones straight to the
    compiled overload's entry point. The dispatcher works out every argument's numba type on
    each call: 15-35 us for a kernel's 30 arguments, where a small layer's work is 5-50 us
    (MobileNetV2 runs 50 such calls a batch). `entry` may be shared by calls whose argument
    types are the same (a graph output's fresh array each run)."""
    __slots__ = ("func", "args", "entry")

    def __init__(self, func, args, entry=None):
        self.func, self.args, self.entry = func, tuple(args), [None] if entry is None else entry

    def __call__(self):
        ep = self.entry[0]
        if ep is not None:
            return ep(*self.args)
        out = self.func(*self.args)
        self.entry[0] = entry_point(self.func, self.args)
        return out


def entry_point(dispatcher, args):
    """The compiled overload of `dispatcher` for these arguments' types (the dispatcher itself
    when there is none: a call it would convert types for)."""
    try:
        cres = dispatcher.overloads.get(tuple(dispatcher.typeof_pyval(a) for a in args))
    except Exception:          # noqa: BLE001 (anything unusual: keep the dispatcher's own path)
        cres = None
    return dispatcher if cres is None else cres.entry_point


def bound_call(fn, args, entry=None):
    """fn(*args) as a call with no arguments: a FastCall for a numba kernel, else a partial."""
    return FastCall(fn, args, entry) if isinstance(fn, Dispatcher) else functools.partial(fn, *args)


# --- the cold-compile notice --------------------------------------------------------------
_noticed = False


def _index_exists(dispatcher) -> bool:
    """Whether numba's on-disk cache holds an index for this kernel (it then loads, not compiles)."""
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:
        return False


def _cached(dispatcher) -> bool:
    """Whether the kernel is cached on disk at all (an uncached one compiles every process)."""
    return getattr(getattr(dispatcher, "_cache", None), "_cache_file", None) is not None


def dispatchers_in(fn, depth: int = 3):
    """The numba kernels a bound call reaches: itself, a partial's function, a closure's cells."""
    if isinstance(fn, Dispatcher):
        yield fn
        return
    if depth == 0:
        return
    if isinstance(fn, (functools.partial, FastCall)):
        yield from dispatchers_in(fn.func, depth - 1)
        return
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            yield from dispatchers_in(cell.cell_contents, depth - 1)
        except ValueError:        # an empty cell
            pass


def cold_kernels(calls):
    """The kernels these calls reach that will compile on first use: not compiled in this
    process and with no index in numba's on-disk cache."""
    seen, cold = set(), []
    for fn in calls:
        for d in dispatchers_in(fn):
            if id(d) not in seen:
                seen.add(id(d))
                if _cached(d) and not d.overloads and not _index_exists(d):
                    cold.append(d)
    return cold


def notice_if_cold(calls, stream=None) -> bool:
    """One line on stderr, once per process, when a run is about to compile kernels: a cold
    start takes seconds to a minute, silently otherwise."""
    global _noticed
    if _noticed:
        return False
    cold = cold_kernels(calls)
    if not cold:
        return False
    _noticed = True
    where = os.path.dirname(cold[0]._cache._cache_file._index_path) if hasattr(cold[0], "_cache") else "numba's cache"
    print(f"rlxpy: compiling numba kernels for this CPU ({len(cold)} this run needs are not in the on-disk "
          f"cache under {where}); a one-time cost of seconds to minutes; `python -m rlxpy warmup` compiles "
          f"them all ahead", file=stream or sys.stderr, flush=True)
    return True
