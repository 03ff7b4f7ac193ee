"""Image by image: a chain of thunks run one image at a time, depth first.

At batch > 1 a thunk's output can outgrow the cache before its consumer reads it:
MobileNetV2 at batch 8 writes 13.8 MB tensors, and this machine's L3 holds about 12 MB of
them (a read of 16 MB runs at 24-32 GB/s on one core, of 8 MB at 46). Run such a chain of
thunks for image 0, then for image 1, ..., and each value inside the chain is one image's
(1.7 MB), written and read while it is in cache; it needs a buffer of one image, reused by
every image. Values entering or leaving the chain keep their whole batch; an image's call
reads and writes its slice of them.

A segment is a run of consecutive thunks (in plan order) whose kernels treat the images of
a batch independently and take their batch from the record (the backend's
`per_image_algos`), each reading a value made inside the run but the first, none writing a
graph output, and each touching a value of at least `Config.per_image_mib` MiB (smaller
ones stay in cache anyway, and a batch's work in one call shares its weights' loads).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, FrozenSet, List, Sequence, Tuple

from .layout import PLAIN, stored_bytes
from .records import ABSENT, Record, Thunk

# images a segment's call takes (its values inside held that many images at a time): one
# image measured best, MobileNetV2 at batch 8 (Zen3, 2 threads, min of alternated runs)
# 35.2 / 35.4 / 36.3 ms at 1 / 2 / 4 images a call, 37.1 with whole batches
STEP = 1

# the roles of a segment's records that hold a batch (the rest: weights and bias)
BATCHED_ROLES = ("x", "y", "r")


@dataclass(frozen=True)
class Segment:
    """Thunks start..stop-1 run image by image over `images` images, `step` images a call;
    `internal`: the values made and read only inside it, held `step` images at a time."""
    start: int
    stop: int
    images: int
    internal: FrozenSet[int]
    step: int = 1

    def calls(self):
        """(first image, images) of each call of a thunk of the segment."""
        return [(i, min(self.step, self.images - i)) for i in range(0, self.images, self.step)]


def _batch(rec: Record) -> int:
    g = getattr(rec, "geometry", None)
    return g.x_shape[0] if g is not None and hasattr(g, "x_shape") else 0


def _eligible(rec: Record, algo: str, per_image_algos, outputs: FrozenSet[int], big) -> bool:
    if (type(rec).__name__, algo) not in per_image_algos or _batch(rec) < 2:
        return False
    if any(getattr(rec, r) in outputs for r in rec.OUTPUTS):
        return False
    return any(big(getattr(rec, r)) for r in BATCHED_ROLES if r in rec.roles())


def find_segments(records: Sequence[Record], algos: Sequence[str], shapes: Dict[int, tuple],
                  layout_of: Dict[int, str], produced_at: Dict[int, int], last_read: Dict[int, int],
                  outputs: FrozenSet[int], per_image_algos, min_bytes: float) -> List[Segment]:
    """The plan's segments (see the module's docstring), in order."""
    def big(v):
        return v in shapes and stored_bytes(shapes[v], layout_of.get(v, PLAIN)) >= min_bytes

    segments: List[Segment] = []
    k, n = 0, len(records)
    while k < n:
        if not _eligible(records[k], algos[k], per_image_algos, outputs, big):
            k += 1
            continue
        stop = k + 1
        while stop < n and _eligible(records[stop], algos[stop], per_image_algos, outputs, big) \
                and _batch(records[stop]) == _batch(records[k]) \
                and any(k <= produced_at.get(getattr(records[stop], r), -1) < stop
                        for r in records[stop].INPUTS if getattr(records[stop], r) != ABSENT):
            stop += 1
        if stop - k >= 2:
            made = {getattr(records[j], r) for j in range(k, stop) for r in records[j].OUTPUTS}
            internal = frozenset(v for v in made if v not in outputs and k < last_read.get(v, -1) < stop)
            if internal:
                segments.append(Segment(k, stop, _batch(records[k]), internal, STEP))
        k = stop
    return segments


def live_range(first: int, last: int, segments: Sequence[Segment]) -> Tuple[int, int]:
    """A value's (or a scratch buffer's) thunks of life widened to every segment it is made or
    read in: a segment's images interleave its thunks' calls, so what one of them touches is
    in use from the segment's first call to its last."""
    for seg in segments:
        if seg.start <= first < seg.stop:
            first = seg.start
        if seg.start <= last < seg.stop:
            last = seg.stop - 1
    return first, last


def image_bytes(shape, layout: str, images: int = 1) -> int:
    """`images` images' bytes of a value stored in `layout` (its batch is its first dim)."""
    return stored_bytes((images,) + tuple(shape[1:]), layout)


def _with_batch(obj, n: int):
    """A record's geometry with batch n (its x_shape and y_shape)."""
    changes = {}
    for name in ("x_shape", "y_shape"):
        if hasattr(obj, name):
            changes[name] = (n,) + tuple(getattr(obj, name)[1:])
    return replace(obj, **changes)


def image_thunk(t: Thunk, image: int, seg: Segment, shapes: Dict[int, tuple], images: int = 1) -> Thunk:
    """The thunk's call for images image..image+images-1: its record with that batch, a value
    of the whole batch at those images' slice, a value inside the segment at its buffer."""
    rec = replace(t.record, geometry=_with_batch(t.record.geometry, images))
    layouts = dict(t.layouts)
    offsets = tuple(off if v == ABSENT or v in seg.internal or role not in BATCHED_ROLES else
                    off + image * image_bytes(shapes[v], layouts.get(role, PLAIN))
                    for role, v, off in zip(t.record.roles(), t.record.value_ids(), t.offsets))
    return replace(t, record=rec, offsets=offsets)


def depth_first(n_thunks: int, segments: Sequence[Segment]) -> List[Tuple[int, int, int]]:
    """The calls of a run in order, as (thunk index, first image, images; -1, 0: the whole batch)."""
    order: List[Tuple[int, int, int]] = []
    k = 0
    for seg in segments:
        order.extend((j, -1, 0) for j in range(k, seg.start))
        order.extend((j, i, m) for i, m in seg.calls() for j in range(seg.start, seg.stop))
        k = seg.stop
    order.extend((j, -1, 0) for j in range(k, n_thunks))
    return order
