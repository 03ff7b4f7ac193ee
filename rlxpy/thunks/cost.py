"""What a thunk costs in work and traffic, from its record alone: FLOPs (a multiply-add
counts 2) and the bytes of the tensors it reads and writes, each once (a lower bound on
its memory traffic). explain() and profiles divide these by time."""
from __future__ import annotations

from ..ir.shape import numel
from . import records as R
from . import tensor_records as T
from .geometry import ConvGeometry, PoolGeometry
from .in_place import IN_PLACE
from .layout import PLAIN, stored_bytes


def flops(rec: R.Record) -> int:
    """Multiply-adds count 2; a pool's window compare or add, an elementwise op's one
    output, a reduction's one input count 1. Data movement (reorders, im2col, reshapes,
    transposes, slices, pads, concats, resize) counts 0."""
    g = rec.geometry
    if isinstance(rec, R.ConvTranspose2d):        # ConvTranspose3d too
        return 2 * numel(g.x_shape) * g.cout_g * g.taps
    if isinstance(g, ConvGeometry):               # forward and both gradients: the same MACs
        return 2 * numel(g.y_shape) * g.cin_g * g.taps
    if isinstance(g, PoolGeometry):
        return numel(g.y_shape) * numel(g.kernel)
    if isinstance(rec, T.Linear):
        return 2 * numel(g.y_shape) * g.x_shape[-1]
    if isinstance(rec, T.MatMul):
        return 2 * numel(g.y_shape) * g.a_shape[-1]
    if isinstance(rec, T.Binary):
        return numel(g.y_shape)
    if isinstance(rec, (T.Unary, T.BatchNorm)):
        return numel(g.shape)
    if isinstance(rec, (T.Reduce, T.Softmax)):
        return numel(g.x_shape)
    return 0


def traffic_bytes(thunk, plan) -> int:
    """The bytes of every tensor the thunk reads or writes, as stored (a blocked tensor
    with its padded lanes), each counted once; none for a thunk in place (in_place.py), which
    moves nothing."""
    if thunk.algo == IN_PLACE:
        return 0
    total = 0
    for vid in set(thunk.record.value_ids()):
        if vid != R.ABSENT and vid in plan.shapes:
            total += stored_bytes(plan.shapes[vid], plan.layouts.get(vid, PLAIN))
    return total
