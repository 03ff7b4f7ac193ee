"""Build a Plan for concrete input shapes: infer shapes, lower every needed node through
its compile rule, ask the backend to choose each record's kernel (and so its scratch and
persistent bytes and the layouts it reads and writes), insert a Reorder record wherever a
value is stored in another layout than its consumer (or a graph output) reads, plan the
arena, bind offsets into thunks."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Tuple

import numpy as np

from ..config import Config
from ..ir import ops
from . import arena as A
from .backend import Backend, ChoiceContext
from .compile import LowerCtx, lookup
from .geometry import ReorderGeometry
from .in_place import IN_PLACE, find_aliases, resolve
from .layout import PLAIN, stored_bytes
from .records import ABSENT, Choice, Record, Reorder, Thunk
from .segments import Segment, find_segments, image_bytes, live_range

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
    layouts: Dict[int, str] = field(default_factory=dict)   # value id -> stored layout, where not plain
    input_layouts: Dict[str, str] = field(default_factory=dict)   # graph input -> the layout it is copied in as
    sole_outputs: Dict[str, Tuple[int, str]] = field(default_factory=dict)   # output -> (thunk, role) if unread
    sole_inputs: Dict[str, Tuple[int, str]] = field(default_factory=dict)    # plain input -> its one (thunk, role)
    segments: Tuple[Segment, ...] = ()                # runs of thunks called image by image (segments.py)


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
    # params first: a rewrite (rewrite.py) may add params after the nodes that read them
    shapes: Dict[int, Tuple[int, ...]] = {i: tuple(params[i].shape) for i in order if nodes[i].op == "Param"}
    for i in order:
        node = nodes[i]
        if node.op == "Input":
            shapes[i] = input_shapes[node.name]
        elif node.op == "Param":
            pass
        else:
            shapes[i] = tuple(ops.INFER[node.op](node.name, node.attrs, *[shapes[v] for v in node.inputs]))
    return shapes


def build_plan(nodes, params, outputs: Dict[str, int], input_shapes, config: Config, backend: Backend,
               threads: int, plan_memory: bool = True, guard_bytes: int = 0, algos=None,
               per_image: bool = True) -> Plan:
    """per_image: whether chains of thunks on large values may run image by image
    (segments.py; also needs plan_memory, Config.per_image_mib > 0 and a backend that can)."""
    order = needed_nodes(nodes, outputs.values())
    shapes = infer_concrete(nodes, params, input_shapes, order)
    lower = LowerCtx(shapes, frozenset(params))
    choose = ChoiceContext(config, threads, dict(algos or {}))
    records: List[Record] = []
    choices: List[Choice] = []
    produced_at: Dict[int, int] = {}
    last_read: Dict[int, int] = {}
    extra: List[A.Buffer] = []            # scratch (live during its thunk) and persistent (always)
    slots: List[Tuple[int, int]] = []     # per thunk: (scratch id, persistent id), ABSENT if none
    layout_of: Dict[int, str] = {}        # value id -> stored layout, where not plain
    converted: Dict[Tuple[int, str], int] = {}
    new_values: List[int] = []            # values the plan adds (reordered copies)
    next_id = len(nodes)

    def emit(rec: Record, choice: Choice) -> None:
        nonlocal next_id
        t = len(records)
        records.append(rec)
        choices.append(choice)
        for role in rec.OUTPUTS:
            produced_at[getattr(rec, role)] = t
        for role in rec.INPUTS:
            if getattr(rec, role) != ABSENT:
                last_read[getattr(rec, role)] = t
        ids = []
        for nbytes, first, last in ((choice.scratch_bytes, t, t), (choice.persistent_bytes, -1, _FOREVER)):
            if nbytes > 0:
                extra.append(A.Buffer(next_id, nbytes, first, last))
                ids.append(next_id)
                next_id += 1
            else:
                ids.append(ABSENT)
        slots.append(tuple(ids))

    def stored_as(vid: int, layout: str) -> int:
        """The value in this layout: itself, or a reordered copy (made once per layout)."""
        nonlocal next_id
        have = layout_of.get(vid, PLAIN)
        if have == layout:
            return vid
        if (vid, layout) not in converted:
            new = next_id
            next_id += 1
            shapes[new] = shapes[vid]
            if layout != PLAIN:
                layout_of[new] = layout
            rec = Reorder(f"{nodes[vid].name}:{layout}", ReorderGeometry(shapes[vid], have, layout), x=vid, y=new)
            emit(rec, backend.choose(rec, choose))
            new_values.append(new)
            converted[(vid, layout)] = new
        return converted[(vid, layout)]

    lowered = []                          # (record, choice) per node, chosen before any layout is fixed
    made_by: Dict[int, Choice] = {}       # value id -> the choice of the record that makes it

    def told_of_x(ctx: ChoiceContext, rec: Record) -> ChoiceContext:
        """ctx, and how the kernel making rec's x splits its work (a consumer may follow it)."""
        producer = made_by.get(rec.x) if "x" in rec.INPUTS else None
        return replace(ctx, x_splits_channels=True) if producer is not None and producer.splits_channels else ctx

    def lowered_as(rec: Record, choice: Choice):
        made_by.update((getattr(rec, r), choice) for r in rec.OUTPUTS)
        return rec, choice

    for i in order:
        node = nodes[i]
        if node.op not in SOURCES:
            rec = lookup(node.op)(node, lower)
            lowered.append(lowered_as(rec, backend.choose(rec, told_of_x(choose, rec))))
    # A record given a plain kernel whose producer or consumer works on blocked values is
    # asked again, told so: a kernel that is a little slower alone may spare two reorders.
    # Until nothing changes: a record that turns blocked may make its own neighbours
    # blocked-near (MobileNetV2's last 1x1 conv, then the global pooling after it).
    near = replace(choose, near_blocked=True)
    asked = set()
    while True:
        blocked_near = set()
        for rec, choice in lowered:
            blocked_near.update(getattr(rec, r) for r, layout in choice.layouts if layout != PLAIN)
        changed = False
        for k, (rec, choice) in enumerate(lowered):
            if k in asked or choice.layouts or not any(getattr(rec, r) in blocked_near for r in rec.roles()):
                continue
            asked.add(k)
            again = backend.choose(rec, told_of_x(near, rec))
            if again.layouts:
                lowered[k] = lowered_as(rec, again)
                changed = True
        if not changed:
            break
    # A value is stored in a blocked layout when its producer must write it so, or may and
    # some consumer prefers it so; else plain (and a consumer that wants it blocked gets a
    # reordered copy, made once).
    wanted_by: Dict[int, set] = {}        # value id -> the layouts its consumers prefer
    blocked_only = set()                  # value ids some consumer cannot read plain
    for rec, choice in lowered:
        for role in rec.INPUTS:
            if getattr(rec, role) != ABSENT:
                wanted_by.setdefault(getattr(rec, role), set()).add(choice.layout(role))
                if role not in choice.plain_ok:
                    blocked_only.add(getattr(rec, role))
    # A graph input every consumer reads in one blocked layout is copied into the arena in
    # it (the copy is the reorder), unless it is also a graph output, or every consumer can
    # read it plain as well (plain_ok): then it stays plain, and may be read in place.
    for i in order:
        wants = wanted_by.get(i, set())
        if (nodes[i].op == "Input" and len(wants) == 1 and PLAIN not in wants and i not in outputs.values()
                and i in blocked_only):
            layout_of[i] = next(iter(wants))
    for rec, choice in lowered:
        moved = {}
        for role in rec.INPUTS:
            vid = getattr(rec, role)
            if vid == ABSENT:
                continue
            want, have = choice.layout(role), layout_of.get(vid, PLAIN)
            if have != want and not (have == PLAIN and role in choice.plain_ok):
                moved[role] = stored_as(vid, want)
        rec = replace(rec, **moved)
        for role in rec.OUTPUTS:
            want, vid = choice.layout(role), getattr(rec, role)
            if want != PLAIN and (role not in choice.plain_ok or want in wanted_by.get(vid, ())):
                layout_of[vid] = want
        emit(rec, choice)
    outputs = {name: stored_as(v, PLAIN) for name, v in outputs.items()}
    # outputs no thunk reads, one name each: a backend may write them straight into the
    # arrays a run returns (no copy out of the arena)
    sole, taken = {}, set()
    for name, v in outputs.items():
        if v in produced_at and v not in last_read and v not in taken:
            t = produced_at[v]
            sole[name] = (t, next(r for r in records[t].OUTPUTS if getattr(records[t], r) == v))
            taken.add(v)
    # plain inputs one thunk reads, in one role, and no output is: a backend may have that
    # thunk read the caller's array in place (no copy into the arena)
    reads: Dict[int, list] = {}
    for t, rec in enumerate(records):
        for role in rec.INPUTS:
            reads.setdefault(getattr(rec, role), []).append((t, role))
    sole_in = {nodes[i].name: reads[i][0] for i in order
               if nodes[i].op == "Input" and layout_of.get(i, PLAIN) == PLAIN and len(reads.get(i, ())) == 1
               and i not in outputs.values()}
    values = list(order) + new_values
    pinned = set(outputs.values()) | {i for i in order if nodes[i].op in SOURCES}
    segments = ()
    if per_image and plan_memory and not guard_bytes and config.per_image_mib > 0:
        segments = tuple(find_segments(records, [c.algo for c in choices], shapes, layout_of, produced_at, last_read,
                                       frozenset(outputs.values()), getattr(backend, "per_image_algos", ()),
                                       config.per_image_mib * 2 ** 20))     # (inf: none)
    # concats and reshapes that need no copy (in_place.py): their thunks run nothing, each
    # aliased value lives inside its root's buffer, which lives as long as all of them
    aliases, strides = {}, {}
    if config.fast_conv and config.in_place:
        in_segment = {k for seg in segments for k in range(seg.start, seg.stop)}
        aliases, in_place, notes, strides = find_aliases(records, choices, shapes, layout_of, produced_at, reads,
                                                         pinned, in_segment)
        for t, why in in_place.items():
            choices[t] = replace(choices[t], algo=IN_PLACE, why=why)
        for t, note in notes.items():
            choices[t] = replace(choices[t], why=f"{choices[t].why}; {note}")
    rooted = {i: resolve(aliases, i) for i in aliases}          # value -> (root, byte offset in it)
    life = {i: (produced_at[i], last_read.get(i, produced_at[i])) for i in values if i not in pinned}
    for i, (root, _) in rooted.items():
        (f0, l0), (f1, l1) = life[root], life[i]
        life[root] = (min(f0, f1), max(l0, l1))
    step = {v: seg.step for seg in segments for v in seg.internal}      # a segment's values: a call's images
    buffers = [A.Buffer(i, image_bytes(shapes[i], layout_of.get(i, PLAIN), step[i]) if i in step else
                        stored_bytes(shapes[i], layout_of.get(i, PLAIN)),
                        *((-1, _FOREVER) if i in pinned else live_range(*life[i], segments)))
               for i in values if i not in aliases]
    buffers += [A.Buffer(b.vid, b.nbytes, *live_range(b.first, b.last, segments)) if b.first >= 0 else b
                for b in extra]            # scratch: used by every image's call
    if guard_bytes:
        if plan_memory:
            raise ValueError("guard_bytes needs plan_memory=False: with reuse a guard zone may hold another value")
        offsets, total, guards = A.plan_offsets_guarded(buffers, guard_bytes)
    else:
        (offsets, total), guards = A.plan_offsets(buffers, reuse=plan_memory), ()
    offsets[ABSENT] = ABSENT
    for i, (root, off) in rooted.items():
        offsets[i] = offsets[root] + off
    thunks = []
    for k, (rec, choice, (sid, pid)) in enumerate(zip(records, choices, slots)):
        why = choice.why
        for seg in segments:
            if seg.start <= k < seg.stop:
                why += (f"; image by image with thunks {seg.start}-{seg.stop - 1} (the values between them "
                        f"held one image at a time)")
        th = Thunk(rec, choice.algo, why, tuple(offsets[v] for v in rec.value_ids()),
                   offsets[sid], choice.scratch_bytes, offsets[pid], choice.persistent_bytes, choice.tiling,
                   tuple((r, layout_of[v]) for r, v in zip(rec.roles(), rec.value_ids()) if v in layout_of),
                   tuple((r, strides[v]) for r, v in zip(rec.roles(), rec.value_ids()) if v in strides))
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
        guards=guards, layouts=layout_of,
        input_layouts={name: layout_of.get(v, PLAIN) for name, v in in_names.items()},
        sole_outputs=sole, sole_inputs=sole_in, segments=segments)
