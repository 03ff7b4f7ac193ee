"""Executable: checks inputs, binds dynamic dims, keeps one Plan per concrete input shape,
and runs the plan's records as a flat loop over pre-resolved kernel calls."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Dict, Optional, Tuple

import numpy as np

from ..cpu_kernels.config import Config
from ..ir.graph import Graph
from ..ir.shape import fmt_shape
from .arena import view
from .plan import Plan, build_plan
from .records import Record


class Executable:
    def __init__(self, graph: Graph, config: Optional[Config] = None, plan_memory: bool = True,
                 backend=None):
        """backend: a module or object with resolve(record) -> callable(record, arena) and
        threads(config) -> the worker count (set up for the calling thread); default: the CPU."""
        if not graph.outputs:
            raise ValueError("the graph has no outputs: mark at least one value with g.output(name, value)")
        if backend is None:
            from . import cpu_dispatch as backend
        self.config = Config.from_env() if config is None else config
        self.plan_memory = plan_memory
        self._backend = backend
        self.threads = backend.threads(self.config)
        # A snapshot: nodes added to the graph later do not change this executable.
        self._nodes = tuple(graph.nodes)
        self._params = dict(graph.params)
        self._outputs = dict(graph.outputs)
        self._input_dims = {name: self._nodes[v].shape for name, v in graph.inputs.items()}
        self._plans: Dict[Tuple, Tuple[Plan, tuple]] = {}
        self._lock = threading.Lock()
        self._last: Optional[Plan] = None
        if all(isinstance(d, int) for dims in self._input_dims.values() for d in dims):
            self._plan_for({n: tuple(d) for n, d in self._input_dims.items()})

    # -- plans ----------------------------------------------------------------------
    def _plan_for(self, shapes: Dict[str, Tuple[int, ...]]) -> Tuple[Plan, tuple]:
        key = tuple(sorted(shapes.items()))
        with self._lock:
            hit = self._plans.get(key)
        if hit is None:
            plan = build_plan(self._nodes, self._params, self._outputs, shapes, self.config, self.plan_memory,
                              self.threads)
            retarget = getattr(self._backend, "retarget", None)
            if retarget is not None:   # another device: same records, its own kernel choice
                plan = dataclasses.replace(plan, thunks=tuple(retarget(t) for t in plan.thunks))
            calls = tuple((self._backend.resolve(t), t) for t in plan.thunks)
            with self._lock:
                hit = self._plans.setdefault(key, (plan, calls))
        self._last = hit[0]
        return hit

    def plan(self, input_shapes: Optional[Dict[str, Tuple[int, ...]]] = None) -> Plan:
        """The plan for these input shapes (default: the last one run, else dynamic dims bound to 1)."""
        if input_shapes is not None:
            return self._plan_for({k: tuple(v) for k, v in input_shapes.items()})[0]
        if self._last is None:
            self._plan_for({n: tuple(d if isinstance(d, int) else 1 for d in dims)
                            for n, dims in self._input_dims.items()})
        return self._last

    @property
    def thunks(self) -> Tuple[Record, ...]:
        return self.plan().thunks

    def explain(self, input_shapes=None) -> str:
        from .explain import explain_plan
        return explain_plan(self.plan(input_shapes), self._nodes)

    # -- running --------------------------------------------------------------------
    def check_inputs(self, inputs) -> Dict[str, Tuple[int, ...]]:
        """Every check a run needs, done before any kernel runs: names, types, dtypes, ranks,
        static dims and consistent dynamic dims. Returns the concrete input shapes."""
        if not isinstance(inputs, Mapping):
            raise TypeError(f"run() takes a dict of input name -> array, got {type(inputs).__name__}")
        expected = list(self._input_dims)
        extra = [k for k in inputs if k not in self._input_dims]
        if extra:
            raise ValueError(f"unknown input {extra[0]!r}; this graph's inputs are {expected}")
        missing = [k for k in expected if k not in inputs]
        if missing:
            raise ValueError(f"missing input {missing[0]!r}; this graph's inputs are {expected}")
        bound: Dict[str, Tuple[int, str]] = {}
        shapes = {}
        for name, dims in self._input_dims.items():
            shape = self.array_shape(name, inputs[name])
            if len(shape) != len(dims):
                raise ValueError(f"input {name!r}: expected rank {len(dims)} {fmt_shape(dims)}, "
                                 f"got shape {shape}")
            for i, (d, actual) in enumerate(zip(dims, shape)):
                if isinstance(d, int):
                    if actual != d:
                        raise ValueError(f"input {name!r}: dim {i} must be {d} {fmt_shape(dims)}, "
                                         f"got shape {shape}")
                    continue
                if actual < 1:
                    raise ValueError(f"input {name!r}: dynamic dim {i} ({d}) must be >= 1, got shape {shape}")
                prev = bound.setdefault(d, (actual, name))
                if prev[0] != actual:
                    raise ValueError(f"input {name!r}: dim {i} ({d}) is {actual}, but input {prev[1]!r} "
                                     f"bound {d} to {prev[0]}")
            shapes[name] = shape
        return shapes

    def array_shape(self, name: str, arr) -> Tuple[int, ...]:
        """The shape of an acceptable input array; TypeError for anything else."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"input {name!r}: expected a numpy array, got {type(arr).__name__}")
        if arr.dtype != np.float32:
            raise TypeError(f"input {name!r}: dtype must be float32, got {arr.dtype}")
        return tuple(int(d) for d in arr.shape)

    def run(self, inputs) -> Dict[str, np.ndarray]:
        """Outputs are fresh float32 arrays; a failed run leaves the executable usable."""
        plan, calls = self._plan_for(self.check_inputs(inputs))
        self._backend.threads(self.config)   # numba's pool size is per calling thread
        arena = plan.pool.acquire()
        try:
            for name, (off, shape) in plan.inputs.items():
                view(arena, off, shape)[...] = inputs[name]   # any strides: copied into place
            self._launch_each(calls, arena)
            return {name: view(arena, off, shape).copy() for name, (off, shape) in plan.outputs.items()}
        finally:
            plan.pool.release(arena)

    @staticmethod
    def _launch_each(calls, arena):
        """The thunks in order; a failure names the node, its record type and its kernel."""
        for fn, rec in calls:
            try:
                fn(rec, arena)
            except Exception as e:
                raise RuntimeError(f"{rec.node} ({type(rec).__name__}, algo {rec.algo}) failed: {e}") from e
