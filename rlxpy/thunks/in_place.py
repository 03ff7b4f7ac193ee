"""Records that need no copy: a concat whose inputs can be written straight into its output,
and a reshape that can read its input's bytes as the new shape. Their thunks get the algo
`in_place` and run nothing; the arena planner gives each aliased value bytes inside its
root's buffer (aliases below), and keeps that buffer for the whole group's lifetime.

A concat along an axis with nothing but size-1 dims before it (channels at batch 1) has
every input as one contiguous slice of its output, in the plain layout and, when every
input's channels are whole blocks, in the blocked one: the producers then write their
slices, and a run skips the copy (a UNet at batch 1: its two concats were 27 us of a 1.1 ms
run on 2 Zen4 cores). A reshape of a plain value is the same bytes. Values a run's caller
sees (graph inputs and outputs, params) keep bytes of their own: they are read or written
in place by the executor (sole inputs and outputs), which an alias would bypass.

At a batch over 1 a blocked concat's slices are strided: image n of input k sits at n times
the output's image bytes. An input that the concat alone reads, made by a kernel that can
write with a wider image stride (Choice.strided_out: the nearest resize, the transposed
conv's patches), is aliased into its slice all the same, its thunks told the stride
(Thunk.image_strides); the concat then copies only its other inputs (the UNet at batch 8:
its resize's 4 MB went through the concat's copy again).
"""
from __future__ import annotations

from math import prod
from typing import Dict, Iterable, List, Sequence, Tuple

from .arena import ALIGN
from .layout import PLAIN, lanes_of, stored_bytes
from .records import Choice, Record
from .tensor_records import ConcatBase, Reshape

IN_PLACE = "in_place"


def concat_slices(rec: ConcatBase, shapes, layout: str) -> "List[int] | None":
    """Byte offsets of each input's slice in the concat's output (stored in `layout`), or
    None when some input is not one contiguous slice of it, or one starts off the arena's
    alignment (which every kernel may assume)."""
    y_shape = shapes[rec.y]
    axis, sizes = rec.geometry.params
    if prod(y_shape[:axis]) != 1:
        return None
    lanes = lanes_of(layout)
    if lanes and not (axis == 1 and all(c % lanes == 0 for c in sizes)):
        return None
    inner = prod(y_shape[axis + 1:])
    offsets, at = [], 0
    for role, size in zip(rec.INPUTS, sizes):
        part = getattr(rec, role)
        if stored_bytes(shapes[part], layout) != 4 * size * inner:
            return None
        if at % ALIGN:
            return None
        offsets.append(at)
        at += 4 * size * inner
    return offsets if at == stored_bytes(y_shape, layout) else None


def strided_slices(rec: ConcatBase, shapes, layout: str) -> "Tuple[List[int], int] | None":
    """(byte offset of each input's slice in image 0 of the concat's output, the output's
    bytes an image) for a blocked concat of whole blocks along the channels at a batch over
    1, else None."""
    y_shape = shapes[rec.y]
    axis, sizes = rec.geometry.params
    lanes = lanes_of(layout)
    if not lanes or axis != 1 or len(y_shape) < 3 or y_shape[0] < 2 or not all(c % lanes == 0 for c in sizes):
        return None
    inner = prod(y_shape[2:])
    starts = [4 * inner * sum(sizes[:k]) for k in range(len(sizes))]
    return starts, stored_bytes(y_shape, layout) // y_shape[0]


def find_aliases(records: Sequence[Record], choices: Sequence[Choice], shapes, layout_of: Dict[int, str],
                 produced_at: Dict[int, int], reads: Dict[int, list], pinned: Iterable[int], skip: Iterable[int] = ()
                 ) -> Tuple[Dict[int, Tuple[int, int]], Dict[int, str], Dict[int, str], Dict[int, int]]:
    """(aliases, why, notes, strides): value id -> (the value whose bytes it lives in, byte
    offset there); thunk index -> why it is in place; thunk index -> what its `why` gains
    (a concat that copies only some inputs, the producers writing into its strided slices);
    and value id -> bytes between its images, for values aliased into a strided slice.
    reads: value id -> the (thunk, role) reading it. skip: thunk indices left as they are
    (those called image by image)."""
    pinned, skip = frozenset(pinned), frozenset(skip)
    aliases: Dict[int, Tuple[int, int]] = {}
    why: Dict[int, str] = {}
    notes: Dict[int, str] = {}
    strides: Dict[int, int] = {}

    def strided_writer(v: int) -> bool:     # its kernel can write v with a wider image stride
        rec = records[produced_at[v]]
        return any(getattr(rec, r) == v for r in choices[produced_at[v]].strided_out)

    def made(v: int) -> bool:       # written by a thunk run whole, seen by no caller
        return v in produced_at and produced_at[v] not in skip and v not in pinned

    for t, (rec, choice) in enumerate(zip(records, choices)):
        if (t in skip or choice.scratch_bytes or choice.persistent_bytes or not isinstance(rec, (ConcatBase, Reshape))
                or not made(rec.y)):
            continue
        layout = layout_of.get(rec.y, PLAIN)
        if isinstance(rec, ConcatBase):
            parts = [getattr(rec, r) for r in rec.INPUTS]
            if len(set(parts)) != len(parts) or any(layout_of.get(p, PLAIN) != layout for p in parts):
                continue
            free = [made(p) and p not in aliases for p in parts]
            offsets = concat_slices(rec, shapes, layout) if all(free) else None
            if offsets is not None:
                for p, off in zip(parts, offsets):
                    aliases[p] = (rec.y, off)
                why[t] = (f"in place: its {len(parts)} inputs are written straight into their slices of its output "
                          f"(each slice contiguous{', whole blocks' if lanes_of(layout) else ''}): no copy")
                continue
            strided = strided_slices(rec, shapes, layout)
            own = [k for k, p in enumerate(parts) if free[k] and len(reads.get(p, ())) == 1 and strided_writer(p)]
            if strided is None or not own:
                continue
            starts, image = strided
            for k in own:
                aliases[parts[k]] = (rec.y, starts[k])
                strides[parts[k]] = image
                notes[produced_at[parts[k]]] = (f"writes straight into its slice of the output of {rec.node} "
                                                f"({image} bytes an image apart)")
            names = ", ".join(rec.INPUTS[k] for k in own)
            one = len(own) == 1
            said = (f"{names} written straight into {'its slice' if one else 'their slices'} of the output by "
                    f"{'its producer' if one else 'their producers'}, {image} bytes an image apart")
            if len(own) == len(parts):
                why[t] = f"in place: {said}: no copy"
            else:
                notes[t] = f"{said}; copies the other {len(parts) - len(own)} of its {len(parts)} inputs"
        elif layout == PLAIN and layout_of.get(rec.x, PLAIN) == PLAIN and made(rec.x):
            aliases[rec.y] = (rec.x, 0)
            why[t] = "in place: the same bytes as its input, read as the new shape: no copy"
    return aliases, why, notes, strides


def resolve(aliases: Dict[int, Tuple[int, int]], v: int) -> Tuple[int, int]:
    """(root value, byte offset in it) of value v (itself at 0 when not aliased)."""
    off = 0
    while v in aliases:
        v, d = aliases[v]
        off += d
    return v, off
