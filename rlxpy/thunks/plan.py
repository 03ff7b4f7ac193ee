"""Build a Plan for concrete input shapes: infer shapes, lower every needed node through
its compile rule, ask the backend to choose each record's kernel (and so its scratch and
persistent bytes), plan the arena, bind offsets into thunks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

from ..config import Config
from ..ir import ops
from ..ir.shape import numel
from . import arena as A
from .backend import Backend, ChoiceContext
from .compile import LowerCtx, lookup
from .records import ABSENT, Thunk

_FOREVER = 1 << 60
SOURCES = ("Input", "Param")


@dataclass(frozen=True)
class Plan:
    """Pure data: what runs, where every tensor lives, and how big the arena is."""
    thunks: Tuple[Thunk, ...]
    arena_bytes: int
    inputs: Dict[str, Tuple[int, Tuple[int, ...]]]    # name -> (offset, shape)
    outputs: Dict[str, Tuple[int, Tuple[int, ...]]]
    shapes: Dict[int, Tuple[int, ...]]                # value id -> concrete shape
    sum_value_bytes: int                              # what an unplanned arena would need
    params: Tuple[Tuple[int, np.ndarray], ...]        # (offset, array) copied in when an arena is made
    guards: Tuple[Tuple[int, int], ...] = ()          # (offset, bytes) of guard zones (tests)


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


def build_plan(nodes, params, outputs: Dict[str, int], input_shapes, config: Config, backend: Backend,
               threads: int, plan_memory: bool = True, guard_bytes: int = 0, algos=None) -> Plan:
    order = needed_nodes(nodes, outputs.values())
    shapes = infer_concrete(nodes, params, input_shapes, order)
    lower = LowerCtx(shapes, frozenset(params))
    choose = ChoiceContext(config, threads, dict(algos or {}))
    records, choices = [], []
    produced_at: Dict[int, int] = {}
    last_read: Dict[int, int] = {}
    extra: List[A.Buffer] = []            # scratch (live during its thunk) and persistent (always)
    slots: List[Tuple[int, int]] = []     # per thunk: (scratch id, persistent id), ABSENT if none
    next_id = len(nodes)
    for i in order:
        node = nodes[i]
        if node.op in SOURCES:
            continue
        t = len(records)
        rec = lookup(node.op)(node, lower)
        choice = backend.choose(rec, choose)
        records.append(rec)
        choices.append(choice)
        produced_at[i] = t
        for v in node.inputs:
            last_read[v] = t
        ids = []
        for nbytes, first, last in ((choice.scratch_bytes, t, t), (choice.persistent_bytes, -1, _FOREVER)):
            if nbytes > 0:
                extra.append(A.Buffer(next_id, nbytes, first, last))
                ids.append(next_id)
                next_id += 1
            else:
                ids.append(ABSENT)
        slots.append(tuple(ids))
    pinned = set(outputs.values()) | {i for i in order if nodes[i].op in SOURCES}
    buffers = [A.Buffer(i, 4 * numel(shapes[i]), -1 if i in pinned else produced_at[i],
                        _FOREVER if i in pinned else last_read.get(i, produced_at[i]))
               for i in order] + extra
    if guard_bytes:
        if plan_memory:
            raise ValueError("guard_bytes needs plan_memory=False: with reuse a guard zone may hold another value")
        offsets, total, guards = A.plan_offsets_guarded(buffers, guard_bytes)
    else:
        (offsets, total), guards = A.plan_offsets(buffers, reuse=plan_memory), ()
    offsets[ABSENT] = ABSENT
    thunks = []
    for rec, choice, (sid, pid) in zip(records, choices, slots):
        th = Thunk(rec, choice.algo, choice.why, tuple(offsets[v] for v in rec.value_ids()),
                   offsets[sid], choice.scratch_bytes, offsets[pid], choice.persistent_bytes, choice.tiling)
        assert all(o == ABSENT or o % A.ALIGN == 0 for o in th.offsets + (th.scratch_off, th.persistent_off))
        thunks.append(th)
    in_names = {nodes[i].name: i for i in order if nodes[i].op == "Input"}
    return Plan(
        thunks=tuple(thunks), arena_bytes=total,
        inputs={name: (offsets[v], shapes[v]) for name, v in in_names.items()},
        outputs={name: (offsets[v], shapes[v]) for name, v in outputs.items()},
        shapes=shapes,
        sum_value_bytes=sum(A.align(max(b.nbytes, 1)) for b in buffers),
        params=tuple((offsets[i], params[i]) for i in order if nodes[i].op == "Param"),
        guards=guards)
