"""compile(graph, device="cuda"): the same plans and records, the Triton backend, and CUDA
graph replay. torch and triton are imported here, lazily."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Dict, Optional

from ..config import Config
from ..ir.graph import Graph
from ..thunks.executor import Executable

# ops (and input ranks) with a GPU kernel
_GPU_OPS = {"Conv": (3, 4), "Pool": (3, 4), "Conv2dBackwardInput": (4,), "Conv2dBackwardWeight": (4,),
            "MaxPool2dBackward": (4,), "ResizeNearest2x": (4,), "Input": None, "Param": None}

class CaptureGate:
    """GPU work of rlxpy runs shared; a CUDA graph capture runs alone, in the whole process.

    Measured on the H200 (bench/gpu_capture_race.py): while one thread captures, any GPU
    work another thread issues (a kernel, an allocation's fill, a synchronize, a second
    capture) fails with "operation not permitted when stream is capturing" and also breaks
    the capture in progress. Two threads running one executable met exactly there: one
    arena's second run captured while the other thread launched, autotuned or captured
    (test_triton_gpu_concurrent_runs_with_cuda_graphs: 2 of 8 runs wrong on the old code).
    Captures happen once per arena, so the exclusive sections are rare."""

    def __init__(self):
        self._cond = threading.Condition()
        self._active = 0          # threads in shared sections
        self._capturing = False
        self._waiting = 0         # captures waiting: they go before new shared sections

    @contextmanager
    def shared(self):
        with self._cond:
            while self._capturing or self._waiting:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        with self._cond:
            self._waiting += 1
            while self._capturing or self._active:
                self._cond.wait()
            self._waiting -= 1
            self._capturing = True
        try:
            yield
        finally:
            with self._cond:
                self._capturing = False
                self._cond.notify_all()


GATE = CaptureGate()


def _import_gpu_stack():
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"rlxpy's GPU path needs torch and triton ({e}); install them with "
                           f"pip install -e '.[gpu]'") from None
    interpret = os.environ.get("TRITON_INTERPRET", "") == "1"   # Triton's own switch
    if not interpret and not torch.cuda.is_available():
        raise RuntimeError("compile(..., device='cuda'): no CUDA GPU is visible to torch "
                           "(set TRITON_INTERPRET=1 to run the Triton kernels on the CPU interpreter)")
    return torch, torch.device("cpu" if interpret else "cuda")


def _no_gpu_kernel(graph: Graph, node) -> Optional[str]:
    """How a node without a GPU kernel is named in the refusal; None when it has one."""
    if node.op not in _GPU_OPS:
        return f"{node.name} ({node.op})"
    ranks = _GPU_OPS[node.op]
    rank = len(graph.nodes[node.inputs[0]].shape) if ranks else None
    return f"{node.name} ({node.op}, rank {rank})" if ranks and rank not in ranks else None


def compile_cuda(graph: Graph, config: Config, plan_memory: bool = True, guard_bytes: int = 0):
    refused = [r for r in (_no_gpu_kernel(graph, n) for n in graph.nodes) if r]
    if refused:
        raise NotImplementedError("compile(..., device='cuda'): no GPU kernel for node(s) " + ", ".join(refused))
    torch, device = _import_gpu_stack()
    from .backend import TritonBackend
    return CudaExecutable(graph, TritonBackend(device), config, plan_memory, guard_bytes, torch)


class CudaExecutable(Executable):
    """run() takes numpy arrays (copied to the device) or torch tensors on the device (used
    in place); it returns numpy arrays, or device tensors with return_tensors=True."""

    def __init__(self, graph, backend, config, plan_memory, guard_bytes, torch):
        self._torch = torch
        self.device = backend.device
        # id(arena) -> 0 (not run yet), 1 (run once), -1 (eager only) or its captured CUDA graph.
        # Arenas live as long as their pool, so an id is never reused; an arena is owned by one
        # run at a time, so its entry needs no lock.
        self._graphs: Dict[int, object] = {}
        self.use_graphs = config.cuda_graph and backend.device.type == "cuda"
        self._capture_stream = torch.cuda.Stream() if self.use_graphs else None
        # RLX_AUTOTUNE is the CPU's: Triton tunes its own tiles
        super().__init__(graph, backend, config, plan_memory, guard_bytes, autotune=False)
        from ..cpu_kernels.backend import CPU
        self.reference_backend = CPU          # validate(): the CPU's reference kernels are the oracle

    def _shared(self):
        return GATE.shared()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize()

    def _to_host(self, view):
        return view.detach().cpu().numpy().copy()

    def array_shape(self, name, arr):
        torch = self._torch
        if not isinstance(arr, torch.Tensor):
            return super().array_shape(name, arr)
        if arr.dtype != torch.float32:
            raise TypeError(f"input {name!r}: dtype must be float32, got {arr.dtype}")
        if arr.device.type != self.device.type:
            raise ValueError(f"input {name!r}: tensor is on {arr.device}, the executable runs on {self.device}")
        return tuple(int(d) for d in arr.shape)

    def run(self, inputs, return_tensors: bool = False):
        compiled, empty = self._start_run(inputs)
        if compiled is None:
            return empty
        b = self.backend
        with GATE.shared():                       # a new arena copies params and prepares weights
            bound = compiled.pool.acquire()
        try:
            capture = self.use_graphs and self._graphs.get(id(bound.arena), 0) == 1
            with GATE.exclusive() if capture else GATE.shared():
                for name, view in bound.inputs:
                    b.copy_into(view, inputs[name])
                if self.config.profile:          # RLX_PROFILE: each thunk launched, waited for and printed
                    self._launch_profiled(bound.calls, compiled.plan)
                else:
                    self._launch_all(bound)
                outs = {name: b.copy_out(view) for name, view in bound.outputs}
                if not return_tensors:            # the copy to the host synchronizes: inside the gate
                    outs = {name: t.cpu().numpy() for name, t in outs.items()}
            return outs
        finally:
            compiled.pool.release(bound)

    def _launch_all(self, bound) -> None:
        """The thunks in order. With CUDA graphs on, an arena's first run launches them one by
        one (compiling and autotuning), its second captures them into a CUDA graph, and later
        runs replay it: one launch instead of a few Python-side launches per thunk, which
        cost more than the kernels of a small conv. The caller holds GATE (exclusively for a
        capture)."""
        key = id(bound.arena)
        state = self._graphs.get(key, 0) if self.use_graphs else -1
        if isinstance(state, int) and state == 1:
            state = self._capture(bound.calls)
            self._graphs[key] = state
        if isinstance(state, int):
            self._launch_each(bound.calls)
            if state == 0:
                self._graphs[key] = 1
        else:
            state.replay()

    def _capture(self, calls):
        """A CUDA graph of the thunks (records, runs nothing), or -1 when they cannot be
        captured; on this executable's own stream, and the calling thread's current stream
        is the same afterwards whatever happens."""
        torch = self._torch
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream()
        try:
            with torch.cuda.graph(graph, stream=self._capture_stream, capture_error_mode="thread_local"):
                self._launch_each(calls)
            return graph
        except Exception:
            return -1
        finally:
            torch.cuda.set_stream(current)
