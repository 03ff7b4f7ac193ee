"""compile(graph, device="cuda"): the same plans and records, a Triton dispatch table, and
an arena that is one CUDA buffer (a CPU torch tensor when TRITON_INTERPRET=1, so the same
path runs in CI on the Triton interpreter). torch and triton are imported here, lazily."""
from __future__ import annotations

import os
import threading
from typing import Dict, List, Optional

import numpy as np

from ..cpu_kernels.config import Config
from ..ir.graph import Graph
from ..thunks.executor import Executable

# ops (and input ranks) with a GPU kernel
_GPU_OPS = {"Conv": (3, 4), "Pool": (3, 4), "Conv2dBackwardInput": (4,), "Conv2dBackwardWeight": (4,),
            "MaxPool2dBackward": (4,), "ResizeNearest2x": (4,), "Input": None, "Param": None}


GRAPH_ENV = "RLX_CUDA_GRAPH"


def graphs_enabled(env=None) -> bool:
    raw = (os.environ if env is None else env).get(GRAPH_ENV, "1").strip()
    if raw not in ("0", "1"):
        raise ValueError(f"{GRAPH_ENV}={raw!r} is not a valid value; accepted: 0, 1")
    return raw == "1"


def _import_gpu_stack():
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as e:
        raise RuntimeError(f"rlxpy's GPU path needs torch and triton ({e}); install them with "
                           f"pip install -e '.[gpu]'") from None
    interpret = os.environ.get("TRITON_INTERPRET", "") == "1"
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


def compile_cuda(graph: Graph, config=None, plan_memory: bool = True):
    refused = [r for r in (_no_gpu_kernel(graph, n) for n in graph.nodes) if r]
    if refused:
        raise NotImplementedError("compile(..., device='cuda'): no GPU kernel for node(s) " + ", ".join(refused))
    torch, device = _import_gpu_stack()
    from .dispatch import TritonBackend, algo_preference
    return CudaExecutable(graph, config, plan_memory, TritonBackend(device, algo_preference()), torch)


class CudaExecutable(Executable):
    """run() takes numpy arrays (copied to the device) or torch tensors on the device (used
    in place); it returns numpy arrays, or device tensors with return_tensors=True."""

    def __init__(self, graph, config, plan_memory, backend, torch):
        self._torch = torch
        self.device = backend.device
        self._arenas: Dict[int, List] = {}
        self._arena_lock = threading.Lock()
        # id(arena) -> 0 (not run yet), 1 (run once), -1 (eager only) or its captured CUDA graph;
        # an arena is owned by one run at a time, so its entry needs no lock
        self._graphs: Dict[int, object] = {}
        self.use_graphs = graphs_enabled() and backend.device.type == "cuda"
        # The CPU choosers would plan CPU scratch; with fast_conv off they plan none, and
        # the backend picks the GPU kernel.
        base = Config.from_env() if config is None else config
        super().__init__(graph, Config(fast_conv=False, num_threads=base.num_threads), plan_memory, backend)

    def _acquire(self, plan):
        torch = self._torch
        with self._arena_lock:
            free = self._arenas.setdefault(id(plan), [])
            if free:
                return free.pop()
        arena = torch.empty(max(plan.arena_bytes // 4, 1), dtype=torch.float32, device=self.device)
        for off, arr in plan.pool.params:
            self._view(arena, off, arr.shape).copy_(torch.from_numpy(arr))
        return arena

    def _release(self, plan, arena):
        with self._arena_lock:
            self._arenas[id(plan)].append(arena)

    @staticmethod
    def _view(arena, off, shape):
        n = int(np.prod(shape))
        return arena[off // 4:off // 4 + n].view(tuple(shape))

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
        torch = self._torch
        plan, calls = self._plan_for(self.check_inputs(inputs))
        arena = self._acquire(plan)
        try:
            for name, (off, shape) in plan.inputs.items():
                v = inputs[name]
                src = v if isinstance(v, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(v))
                self._view(arena, off, shape).copy_(src)
            self._launch_all(calls, arena)
            outs = {name: self._view(arena, off, shape).clone() for name, (off, shape) in plan.outputs.items()}
        finally:
            self._release(plan, arena)
        if return_tensors:
            return outs
        return {name: t.cpu().numpy() for name, t in outs.items()}

    def _launch_all(self, calls, arena):
        """The thunks in order. With CUDA graphs on, an arena's first run launches them one by
        one (compiling and autotuning, filling the weight caches), its second captures them
        into a CUDA graph, and later runs replay it: one launch instead of a few Python-side
        launches per thunk, which cost more than the kernels of a small conv."""
        key = id(arena)
        state = self._graphs.get(key, 0) if self.use_graphs else -1
        if isinstance(state, int) and state == 1:
            graph = self._torch.cuda.CUDAGraph()
            try:
                # thread_local: a capture here must not fail kernels that other threads launch
                with self._torch.cuda.graph(graph, capture_error_mode="thread_local"):  # records, runs nothing
                    self._launch_each(calls, arena)
                state = graph
            except Exception:
                state = -1                             # cannot be captured: stay eager
            self._graphs[key] = state
        if isinstance(state, int):
            self._launch_each(calls, arena)
            if state == 0:
                self._graphs[key] = 1
        else:
            state.replay()
