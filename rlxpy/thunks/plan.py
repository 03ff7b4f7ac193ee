"""Build a Plan for concrete input shapes: infer shapes, lower every needed node through
its compile function, plan the arena, bind offsets into the records."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np

from ..cpu_kernels.config import Config
from ..ir import ops
from ..ir.shape import numel
from . import arena as A
from .compile import LowerCtx, lookup
from .records import Record, bind_offsets, offset_fields

_FOREVER = 1 << 60
SOURCES = ("Input", "Param")


class ArenaPool:
    """Arenas of one plan. A run takes one for itself, so two threads never share bytes;
    params are copied into an arena once, when it is made."""

    def __init__(self, nbytes: int, params: Tuple[Tuple[int, np.ndarray], ...],
                 zeroed: Tuple[Tuple[int, int], ...] = ()):
        self.nbytes, self.params, self.zeroed = nbytes, params, zeroed
        self._free: List[np.ndarray] = []
        self._lock = threading.Lock()

    def acquire(self) -> np.ndarray:
        with self._lock:
            if self._free:
                return self._free.pop()
        arena = A.new_arena(self.nbytes)
        for off, arr in self.params:
            A.view(arena, off, arr.shape)[...] = arr
        for off, nbytes in self.zeroed:   # persistent kernel data starts "not computed yet"
            A.view(arena, off, (nbytes // 4,))[...] = 0.0
        return arena

    def release(self, arena: np.ndarray) -> None:
        with self._lock:
            self._free.append(arena)


@dataclass(frozen=True)
class Plan:
    thunks: Tuple[Record, ...]
    arena_bytes: int
    inputs: Dict[str, Tuple[int, Tuple[int, ...]]]    # name -> (offset, shape)
    outputs: Dict[str, Tuple[int, Tuple[int, ...]]]
    shapes: Dict[int, Tuple[int, ...]]                # value id -> concrete shape
    sum_value_bytes: int                              # what an unplanned arena would need
    pool: ArenaPool = field(compare=False, repr=False)


def needed_nodes(nodes, outputs) -> List[int]:
    """Indices of the nodes the outputs depend on, in graph order."""
    need, stack = set(), list(outputs)
    while stack:
        v = stack.pop()
        if v not in need:
            need.add(v)
            stack.extend(nodes[v].inputs)
    return sorted(need)


def infer_concrete(nodes, params, input_shapes, order) -> Dict[int, Tuple[int, ...]]:
    shapes: Dict[int, Tuple[int, ...]] = {}
    for i in order:
        node = nodes[i]
        if node.op == "Input":
            shapes[i] = input_shapes[node.name]
        elif node.op == "Param":
            shapes[i] = tuple(params[i].shape)
        else:
            shapes[i] = tuple(ops.INFER[node.op](node.name, node.attrs, *[shapes[v] for v in node.inputs]))
    return shapes


def build_plan(nodes, params, outputs: Dict[str, int], input_shapes, config: Config,
               plan_memory: bool = True, threads: int = 1) -> Plan:
    order = needed_nodes(nodes, outputs.values())
    shapes = infer_concrete(nodes, params, input_shapes, order)
    ctx = LowerCtx(shapes, config, first_scratch_id=len(nodes), threads=threads, params=frozenset(params))
    records: List[Record] = []
    produced_at: Dict[int, int] = {}
    last_read: Dict[int, int] = {}
    scratch: List[A.Buffer] = []
    persistent: List[Tuple[int, int]] = []
    for i in order:
        node = nodes[i]
        if node.op in SOURCES:
            continue
        t = len(records)
        ctx.scratch_requests, ctx.persistent_requests = [], []
        records.append(lookup(node.op)(node, ctx))
        produced_at[i] = t
        for v in node.inputs:
            last_read[v] = t
        scratch += [A.Buffer(sid, nb, t, t) for sid, nb in ctx.scratch_requests]
        scratch += [A.Buffer(sid, nb, -1, _FOREVER) for sid, nb in ctx.persistent_requests]
        persistent += ctx.persistent_requests
    pinned = set(outputs.values()) | {i for i in order if nodes[i].op in SOURCES}
    buffers = [A.Buffer(i, 4 * numel(shapes[i]), -1 if i in pinned else produced_at[i],
                        _FOREVER if i in pinned else last_read.get(i, produced_at[i]))
               for i in order] + scratch
    offsets, total = A.plan_offsets(buffers, reuse=plan_memory)
    offsets[-1] = -1
    thunks = tuple(bind_offsets(r, offsets) for r in records)
    for r in thunks:  # every offset a record holds must be a planned byte offset
        assert all(getattr(r, f) == -1 or getattr(r, f) % A.ALIGN == 0 for f in offset_fields(r))
    in_names = {nodes[i].name: i for i in order if nodes[i].op == "Input"}
    param_slots = tuple((offsets[i], params[i]) for i in order if nodes[i].op == "Param")
    return Plan(
        thunks=thunks, arena_bytes=total,
        inputs={name: (offsets[v], shapes[v]) for name, v in in_names.items()},
        outputs={name: (offsets[v], shapes[v]) for name, v in outputs.items()},
        shapes=shapes,
        sum_value_bytes=sum(A.align(max(b.nbytes, 1)) for b in buffers),
        pool=ArenaPool(total, param_slots, tuple((offsets[sid], nb) for sid, nb in persistent)))
