"""The CPU backend: numba kernels on a numpy arena (rlxpy.thunks.backend.Backend)."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..config import Config
from ..thunks import arena as A
from ..thunks.backend import Binder, ChoiceContext, Kernel, table_kernel, table_prepare
from ..thunks.layout import lanes_of
from ..thunks.records import Choice, Record, Thunk
from . import choose as _choose
from . import dispatch, nchwc, simd
from .jit import FastCall, bound_call
from .gemm import configure_threads


class CpuBackend:
    name = "cpu"
    fuses_epilogues = True     # a conv's residual add and activation run in its thunk (rewrite.fuse_epilogues)
    # (record type, algo) whose kernels take their batch and offsets from the thunk and treat
    # images independently: they may run image by image (rlxpy.thunks.segments)
    per_image_algos = frozenset({(r, a) for r in ("Conv2D", "Conv2D1x1")
                                 for a in ("nchwc_direct", "nchwc_1x1", "nchwc_plain_in", "nchwc_depthwise")}
                                | {("Pool2D", "nchwc_pool")})

    def threads(self, config: Config) -> int:
        """Sets numba's pool to RLX_NUM_THREADS (default: the cores this process may use) and BLAS to one thread per
        caller, for the calling thread; returns the worker count kernels are planned for."""
        return configure_threads(config.num_threads)

    def choose(self, record: Record, ctx: ChoiceContext) -> Choice:
        return _choose.choose(record, ctx)

    def binder(self, thunk: Thunk) -> Binder:
        entry = table_kernel(dispatch.EXEC, thunk, "CPU")
        return lambda arena: dispatch.bind(entry, thunk, arena)

    def output_binder(self, thunk: Thunk, role: str, shape):
        """The vector kernels (which take the array y is written to as an argument) write a
        graph output into a fresh array: no copy out of the arena, whose bytes the next run
        reuses. A weight that is a graph input (packed in the call) keeps the copy."""
        redirect = dispatch.OUTPUT_ARG.get((type(thunk.record), thunk.algo))
        if redirect is None or dispatch.packs_every_run(thunk) or getattr(thunk.record, "fused", False):
            return None
        entry = table_kernel(dispatch.EXEC, thunk, "CPU")

        def bind(arena):
            fn, args = entry(thunk, arena)
            resolved = [None]           # the kernel's entry point, shared by every run's call

            def make():
                y = np.empty(shape, np.float32)
                return y, bound_call(fn, redirect(args, y.reshape(-1)), resolved)
            return make
        return bind

    def input_feeder(self, thunk: Thunk, role: str):
        """A kernel that takes the array it reads a plain input from as an argument
        (dispatch.INPUT_ARG) reads a graph input in place: feed(call, x) is the thunk's bound
        call reading x (the user's array, flat, C-contiguous, writable, aligned: the arena's
        numba type, so the call shares its entry point) instead of the arena's copy."""
        redirect = dispatch.INPUT_ARG.get((type(thunk.record), thunk.algo), {}).get(role)
        if redirect is None or dispatch.packs_every_run(thunk):
            return None

        def feed(call, x):
            return FastCall(call.func, redirect(call.args, x), call.entry) if isinstance(call, FastCall) else None
        return feed

    def before_first_calls(self, calls) -> None:
        """A new arena is about to run: say so when its kernels are not in numba's cache yet."""
        from .jit import notice_if_cold
        notice_if_cold(fn for fn, _ in calls)

    def tuning_host(self, config: Config, threads: int) -> str:
        """What an autotuned choice depends on besides the record: the CPU, the vector width, the threads."""
        from .host import cpu_model, llvm_cpu
        return f"{cpu_model()} ({llvm_cpu()})|simd {simd.resolve_width(config.simd_width)}|threads {threads}"

    def prepare(self, thunk: Thunk) -> Optional[Kernel]:
        entry = table_prepare(dispatch.PREPARE, thunk)
        return None if entry is None else (lambda t, arena: dispatch.bind(entry, t, arena)())

    def new_arena(self, nbytes: int) -> np.ndarray:
        arena = A.new_arena(nbytes)
        arena[...] = 0.0
        return arena

    def copy_into(self, view: np.ndarray, array) -> None:
        np.copyto(view, array)      # any strides: copied into place

    def copy_into_layout(self, view: np.ndarray, array, layout: str) -> None:
        """A graph input straight into its blocked copy (one pass, not a copy and a reorder)."""
        x = np.ascontiguousarray(array, dtype=np.float32)
        nchwc.to_blocked(x.reshape(-1), 0, view.reshape(-1), 0, x.shape[0], x.shape[1], x[0, 0].size,
                         simd.lanes(lanes_of(layout)))

    def copy_out(self, view: np.ndarray) -> np.ndarray:
        return view.copy()

    def view(self, arena: np.ndarray, off: int, shape: Tuple[int, ...]) -> np.ndarray:
        return A.view(arena, off, shape)

    def fill(self, arena: np.ndarray, off: int, nbytes: int, value: float) -> None:
        A.view(arena, off, (nbytes // 4,))[...] = value


CPU = CpuBackend()
