"""The arena planner: every value (and every kernel scratch) gets a 64-byte-aligned byte
offset in one buffer; values whose lifetimes do not overlap may share bytes.

A lifetime is the closed interval [first thunk that writes it, last thunk that reads it].
Pinned values (params, graph inputs, graph outputs) live for the whole run, so nothing
ever overlaps them. With planning off every value gets bytes of its own, which is how a
test catches aliasing: the two plans must give identical outputs.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from .layout import PLAIN, stored_shape

ALIGN = 64
GUARD_VALUE = -1.2345678e30   # what guard zones hold: no kernel writes it by accident


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True, slots=True)
class Buffer:
    vid: int      # value id (or scratch id)
    nbytes: int
    first: int    # thunk index of its first write (-1: before the run)
    last: int     # thunk index of its last read (a large number: after the run)


def plan_offsets(buffers: List[Buffer], reuse: bool = True) -> "tuple[Dict[int, int], int]":
    """Greedy by size: each buffer takes the lowest aligned offset that no buffer with
    an overlapping lifetime already holds. Returns (offsets, total bytes)."""
    offsets: Dict[int, int] = {}
    if not reuse:
        top = 0
        for b in buffers:
            offsets[b.vid] = top
            top += align(max(b.nbytes, 1))
        return offsets, top
    placed: List[Buffer] = []
    top = 0
    for b in sorted(buffers, key=lambda b: (-b.nbytes, b.first, b.vid)):
        size = align(max(b.nbytes, 1))
        taken = sorted((offsets[p.vid], offsets[p.vid] + align(max(p.nbytes, 1)))
                       for p in placed if p.first <= b.last and b.first <= p.last)
        off = 0
        for start, end in taken:
            if off + size <= start:
                break
            off = max(off, end)
        offsets[b.vid] = off
        placed.append(b)
        top = max(top, off + size)
    return offsets, top


def plan_offsets_guarded(buffers: List[Buffer], guard: int) -> "tuple[Dict[int, int], int, Tuple[Tuple[int, int], ...]]":
    """Every buffer its own bytes (no reuse, so no zone can hold another value), with a zone
    of `guard` bytes before and after each: a kernel that writes outside its declared
    outputs and scratch changes one. Returns (offsets, total bytes, zones as (offset, bytes))."""
    guard = align(guard)
    offsets: Dict[int, int] = {}
    zones: List[Tuple[int, int]] = [(0, guard)]
    top = guard
    for b in buffers:
        offsets[b.vid] = top
        top += align(max(b.nbytes, 1))
        zones.append((top, guard))
        top += guard
    return offsets, top, tuple(zones)


def new_arena(nbytes: int) -> np.ndarray:
    """A float32 buffer whose first byte is 64-byte aligned."""
    raw = np.empty(nbytes + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + nbytes].view(np.float32)


def view(arena: np.ndarray, off: int, shape) -> np.ndarray:
    """The float32 tensor at byte offset `off` (offsets are bytes; the arena indexes elements)."""
    start = off // 4
    n = 1
    for d in shape:
        n *= d
    return arena[start:start + n].reshape(shape)


@dataclass(frozen=True)
class BoundArena:
    """An arena with every thunk bound to it, and views of the plan's inputs and outputs."""
    arena: object
    calls: Tuple[Tuple[Callable[[], None], object], ...]    # (bound call, thunk) in run order
    inputs: Tuple[Tuple[str, object], ...]                  # (name, view in the stored layout)
    outputs: Tuple[Tuple[str, object], ...]
    input_layouts: Tuple[str, ...] = ()                     # per input: plain, or the blocked layout it is copied in as
    direct: Tuple[Tuple[str, int, Callable], ...] = ()       # (output, call index, make() -> (array, call))


class ArenaPool:
    """Arenas of one plan, made through a backend. A run takes one for itself, so two
    threads never share bytes. When an arena is made, params are copied in, guard zones
    filled, every thunk's prepare step (data derived from params, such as packed weights)
    runs once, and every thunk is bound to it."""

    def __init__(self, plan, backend, binders: Sequence[Callable], prepares: Sequence[Tuple[Callable, object]] = (),
                 output_binders: Sequence[Tuple[str, int, Callable]] = (), order: Sequence[int] = None,
                 call_thunks: Sequence[object] = None, input_feeds: Sequence[Tuple[str, int, Callable]] = ()):
        """binders: one per call of a run, in run order; order: the plan's thunk index of each,
        call_thunks: the thunk each call runs (default: one call per thunk, in plan order; a
        segment's thunks have a call per image, each with its one-image thunk)."""
        self.plan, self.backend = plan, backend
        self.binders, self.prepares = tuple(binders), tuple(prepares)
        self.order = tuple(range(len(plan.thunks)) if order is None else order)
        self.call_thunks = tuple(plan.thunks[k] for k in self.order) if call_thunks is None else tuple(call_thunks)
        if not len(self.order) == len(self.binders) == len(self.call_thunks):
            raise ValueError(f"ArenaPool: {len(self.binders)} binders for {len(self.order)} calls")
        # a graph output written straight into the returned array: its thunk's (only) call
        self.output_binders = tuple((name, self.order.index(i), bind) for name, i, bind in output_binders)
        # a graph input read in place by its one reader: feed(call, x) -> the call reading x
        # (not a thunk called image by image: each image's call reads its own slice)
        self.input_feeds = tuple((name, self.order.index(i), feed) for name, i, feed in input_feeds
                                 if self.order.count(i) == 1)
        self._free: List[BoundArena] = []
        self._lock = threading.Lock()
        self.made = 0

    def acquire(self) -> BoundArena:
        # list.pop and list.append are atomic under the GIL: the free list needs no lock (taking
        # it twice was 0.3 us of a 7 us run of a tiny graph)
        try:
            return self._free.pop()
        except IndexError:
            pass
        b, plan = self.backend, self.plan
        arena = b.new_arena(plan.arena_bytes)
        for off, arr in plan.params:
            b.copy_into(b.view(arena, off, arr.shape), arr)
        for off, nbytes in plan.guards:
            b.fill(arena, off, nbytes, GUARD_VALUE)
        for fn, thunk in self.prepares:
            fn(thunk, arena)
        layouts = tuple(plan.input_layouts.get(name, PLAIN) for name in plan.inputs)
        bound = BoundArena(arena, tuple((bind(arena), t) for bind, t in zip(self.binders, self.call_thunks)),
                           tuple((name, b.view(arena, off, stored_shape(shape, layout)))
                                 for (name, (off, shape)), layout in zip(plan.inputs.items(), layouts)),
                           tuple((name, b.view(arena, off, shape)) for name, (off, shape) in plan.outputs.items()),
                           layouts, tuple((name, i, bind(arena)) for name, i, bind in self.output_binders))
        hook = getattr(b, "before_first_calls", None)     # the CPU backend's cold-compile notice
        if hook is not None:
            hook(bound.calls)
        with self._lock:
            self.made += 1
        return bound

    def idle(self) -> List[BoundArena]:
        return list(self._free)

    def release(self, bound: BoundArena) -> None:
        self._free.append(bound)
