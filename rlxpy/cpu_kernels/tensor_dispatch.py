"""The CPU backend's choice and binders for the ops around the convolutions (records in
rlxpy.thunks.tensor_records, kernels in tensor.py), registered in the same tables as the
conv family's."""
from __future__ import annotations

from math import prod

import numpy as np

from ..thunks import tensor_records as TR
from ..thunks.arena import view
from ..thunks.backend import ChoiceContext
from ..thunks.layout import blocked, lanes_of, stored_shape
from ..thunks.records import ABSENT, Choice, Tiling
from . import nchwc, simd, tensor
from .choose import _lanes, chooser, reference
from .dispatch import NO_BIAS, _threads, at, runs
from .jit import bound_call

ROW = 1 << 14       # floats per work item of a plain elementwise kernel (64 KiB: an L2-sized share)


# --- choice ------------------------------------------------------------------------------------
def _blockable(shape) -> bool:
    return len(shape) in (3, 4, 5)


def _elementwise(rec, ctx: ChoiceContext, roles, shape, what: str) -> Choice:
    """Plain, or the channel-blocked layout for every role when a neighbour is blocked
    (the plan asks again then): the values flow on without reorders."""
    lanes = _lanes(ctx)
    if ctx.near_blocked and lanes > 1 and _blockable(shape):
        return Choice("elementwise", f"{what} on NCHW{lanes}c between blocked neighbours (lanes past C written 0)",
                      tiling=Tiling(lanes=lanes), layouts=tuple((r, blocked(lanes)) for r in roles))
    return Choice("elementwise", f"{what}: numba, parallel over the flat tensor")


@chooser(TR.Unary)
def choose_unary(rec, ctx: ChoiceContext) -> Choice:
    if not ctx.config.fast_conv:
        return reference("activation", ctx.config)
    return _elementwise(rec, ctx, ("x", "y"), rec.geometry.shape, rec.geometry.fn)


@chooser(TR.Binary)
def choose_binary(rec, ctx: ChoiceContext) -> Choice:
    g = rec.geometry
    if not ctx.config.fast_conv:
        return reference("arithmetic", ctx.config)
    if g.a_shape == g.b_shape:
        return _elementwise(rec, ctx, ("a", "b", "y"), g.y_shape, g.fn)
    return Choice("numpy", f"{g.fn} with broadcasting {list(g.a_shape)} x {list(g.b_shape)}: numpy ufunc into y")


@chooser(TR.BatchNorm)
def choose_batch_norm(rec, ctx: ChoiceContext) -> Choice:
    if not ctx.config.fast_conv:
        return reference("batch_norm", ctx.config)
    return Choice("elementwise", "not folded (no conv before it, or its inputs are not params): per-channel "
                                 "scale and shift")


# Up to this many rows a linear runs as vector dot products: BLAS's SGEMM with one or a few
# rows ran MobileNetV2's 1280 -> 1000 head at 0.56-0.66 ms (numpy's own GEMV: 0.05). Measured
# on that head, 2 cores AVX2 (dot / SGEMM, ms): 1 row 0.05 / 0.66, 8 rows 0.31 / 0.58, 16 rows
# 0.54 / 0.69, 32 rows 1.04 / 0.93.
DOT_ROWS = 16


@chooser(TR.MatMul)
@chooser(TR.Linear)
def choose_gemm(rec, ctx: ChoiceContext) -> Choice:
    if not ctx.config.fast_conv:
        return reference("linear", ctx.config)
    lanes = _lanes(ctx)
    if isinstance(rec, TR.Linear) and lanes > 1 and prod(rec.geometry.x_shape[:-1]) <= DOT_ROWS:
        return Choice("simd_dot", f"{prod(rec.geometry.x_shape[:-1])} rows: dot products on {lanes}-lane vectors, "
                                  f"each weight row read once for up to 4 rows", tiling=Tiling(lanes=lanes))
    return Choice("blas", "single-threaded SGEMMs (SciPy's BLAS) split over the kernels' threads")


@chooser(TR.Reduce)
@chooser(TR.Softmax)
def choose_reduce(rec, ctx: ChoiceContext) -> Choice:
    if not ctx.config.fast_conv:
        return reference(type(rec).__name__.lower(), ctx.config)
    g = rec.geometry
    rows = isinstance(rec, TR.Reduce) and trailing_axes(g.params, len(g.x_shape)) and prod(g.x_shape) > 0
    lanes = _lanes(ctx)
    if rows and len(g.params) == len(g.x_shape) - 2 and ctx.near_blocked and lanes > 1 and _blockable(g.x_shape):
        return Choice("nchwc_reduce", f"global {g.mode} pooling on NCHW{lanes}c after a blocked neighbour: vectors "
                                      f"of {lanes} channels summed over the pixels, no reorder",
                      tiling=Tiling(lanes=lanes), layouts=(("x", blocked(lanes)),))
    if rows:
        return Choice("rows", "over trailing axes (global pooling): one contiguous row per output, rows in "
                              "parallel")
    return Choice("numpy", "numpy in float32 into y")


def trailing_axes(axes, ndim: int) -> bool:
    """Whether the reduced axes are the last ones (each output reads one contiguous row)."""
    return len(axes) > 0 and tuple(sorted(axes)) == tuple(range(ndim - len(axes), ndim))


def _move(rec, ctx: ChoiceContext) -> Choice:
    return Choice("naive", "data movement: numpy copy into the arena (its only kernel)")


def _concat_choice(rec, ctx: ChoiceContext) -> Choice:
    """Along the channels between blocked neighbours, with every input's channels whole
    blocks: a copy of whole blocks, no reorder around it; else the plain copy."""
    lanes = _lanes(ctx)
    g = rec.geometry
    axis, sizes = g.params
    if (ctx.config.fast_conv and ctx.near_blocked and lanes > 1 and axis == 1 and _blockable(g.y_shape)
            and all(c % lanes == 0 for c in sizes)):
        return Choice("nchwc_concat", f"channels of whole NCHW{lanes}c blocks between blocked neighbours: "
                                      f"block copies", tiling=Tiling(lanes=lanes),
                      layouts=tuple((r, blocked(lanes)) for r in rec.roles()))
    return _move(rec, ctx)


for _t in (TR.Reshape, TR.Transpose, TR.Slice, TR.Pad):
    chooser(_t)(_move)
for _t in TR.CONCAT.values():
    chooser(_t)(_concat_choice)


# --- binders -------------------------------------------------------------------------------------
def _flat(t, arena, role: str, shape):
    """(flat view, total, row_len, CB, C, V) of a role as stored: blocked rows are (image,
    channel block) planes; plain rows are ROW floats."""
    layout = t.layout(role)
    total = prod(stored_shape(shape, layout))
    flat = view(arena, t.off(role), (total,))
    v = lanes_of(layout)
    if v:
        _, cb, s, _ = stored_shape(shape, layout)
        return flat, total, s * v, cb, shape[1], v
    return flat, total, ROW, 1, 1, 1


@runs(TR.Unary, "elementwise")
def unary_fast(t, arena):
    g = t.record.geometry
    x, total, row, cb, c, v = _flat(t, arena, "x", g.shape)
    y = _flat(t, arena, "y", g.shape)[0]
    return tensor.UNARY[g.fn], (x, y, g.alpha, g.beta, total, row, cb, c, v)


@runs(TR.Unary, "naive")
def unary_naive(t, arena):
    g = t.record.geometry
    x, y = at(t, arena, "x", g.shape), at(t, arena, "y", g.shape)

    def run():
        y[...] = tensor.unary_reference(g.fn, x, g.alpha, g.beta)
    return run, ()


_UFUNC = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@runs(TR.Binary, "elementwise")
def binary_fast(t, arena):
    g = t.record.geometry
    a, total, row, cb, c, v = _flat(t, arena, "a", g.y_shape)
    b, y = _flat(t, arena, "b", g.y_shape)[0], _flat(t, arena, "y", g.y_shape)[0]
    return tensor.BINARY_SAME[g.fn], (a, b, y, total, row, cb, c, v)


@runs(TR.Binary, "numpy")
def binary_broadcast(t, arena):
    g = t.record.geometry
    a, b, y = at(t, arena, "a", g.a_shape), at(t, arena, "b", g.b_shape), at(t, arena, "y", g.y_shape)
    fn = _UFUNC[g.fn]

    def run():
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            fn(a, b, out=y)
    return run, ()


@runs(TR.Binary, "naive")
def binary_naive(t, arena):
    g = t.record.geometry
    a, b, y = at(t, arena, "a", g.a_shape), at(t, arena, "b", g.b_shape), at(t, arena, "y", g.y_shape)

    def run():
        y[...] = tensor.binary_reference(g.fn, a, b)
    return run, ()


def _bn_views(t, arena):
    g = t.record.geometry
    c = g.shape[1]
    return [at(t, arena, r, g.shape if r in ("x", "y") else (c,)) for r in ("x", "mean", "var", "w", "b", "y")]


@runs(TR.BatchNorm, "elementwise")
def batch_norm_fast(t, arena):
    g = t.record.geometry
    x, mean, var, w, b, y = _bn_views(t, arena)
    n, c, s = g.shape[0], g.shape[1], prod(g.shape[2:])

    def run():
        scale, shift = tensor.batch_norm_affine(mean, var, w, b, g.alpha)
        tensor.channel_affine(x.reshape(-1), y.reshape(-1), scale, shift, n, c, s)
    return run, ()


@runs(TR.BatchNorm, "naive")
def batch_norm_naive(t, arena):
    g = t.record.geometry
    x, mean, var, w, b, y = _bn_views(t, arena)

    def run():
        y[...] = tensor.batch_norm_reference(x, mean, var, w, b, g.alpha)
    return run, ()


def _matmul_views(t, arena):
    g = t.record.geometry
    return at(t, arena, "a", g.a_shape), at(t, arena, "b", g.b_shape), at(t, arena, "y", g.y_shape)


@runs(TR.MatMul, "blas")
def matmul_fast(t, arena):
    g = t.record.geometry
    a, b, y = _matmul_views(t, arena)
    a_off, b_off = tensor.batch_offsets(g.a_shape, g.b_shape, g.y_shape)
    return tensor.batched_matmul, (a.reshape(-1), b.reshape(-1), y.reshape(-1), a_off, b_off, g.a_shape[-2],
                                   g.b_shape[-1], g.a_shape[-1])


@runs(TR.MatMul, "naive")
def matmul_naive(t, arena):
    a, b, y = _matmul_views(t, arena)

    def run():
        y[...] = np.matmul(a.astype(np.float64), b.astype(np.float64))
    return run, ()


def _linear_views(t, arena):
    g = t.record.geometry
    k, o = g.x_shape[-1], g.y_shape[-1]
    rows = prod(g.x_shape[:-1])
    b = None if t.off("b") == ABSENT else at(t, arena, "b", (o,))
    return at(t, arena, "x", (rows, k)), at(t, arena, "w", (o, k)), b, at(t, arena, "y", (rows, o))


@runs(TR.Linear, "blas")
def linear_fast(t, arena):
    x, w, b, y = _linear_views(t, arena)
    rows, (o, k) = x.shape[0], w.shape
    row_blocks, col_blocks = linear_blocks(rows, o, _threads())
    return tensor.linear, (x.reshape(-1), w.reshape(-1), NO_BIAS if b is None else b, y.reshape(-1), rows, k, o,
                           row_blocks, col_blocks)


def linear_blocks(rows: int, o: int, threads: int) -> tuple:
    """(row blocks, column blocks) of linear's work items: rows in blocks of at least 64 (each
    block reads all of w), then columns cut until there are about two items a thread (at
    least 16 columns an item)."""
    row_blocks = max(1, min(2 * threads, rows // 64))
    col_blocks = max(1, min(-(-o // 16), -(-2 * threads // row_blocks)))
    return row_blocks, col_blocks


@runs(TR.Linear, "simd_dot")
def linear_dot(t, arena):
    x, w, b, y = _linear_views(t, arena)
    rows, (o, k) = x.shape[0], w.shape
    per = max(1, -(-o // (4 * _threads())))          # 4 items a worker
    return tensor.linear_dot, (x.reshape(-1), w.reshape(-1), NO_BIAS if b is None else b, y.reshape(-1), rows, k, o,
                               per, simd.lanes(t.tiling.lanes))


@runs(TR.Linear, "naive")
def linear_naive(t, arena):
    x, w, b, y = _linear_views(t, arena)

    def run():
        y[...] = x.astype(np.float64) @ w.astype(np.float64).T + (0.0 if b is None else b.astype(np.float64))
    return run, ()


def _reduce_views(t, arena):
    g = t.record.geometry
    kept = tuple(1 if k in g.params else d for k, d in enumerate(g.x_shape))
    return at(t, arena, "x", g.x_shape), at(t, arena, "y", kept)      # y with the reduced axes kept as 1s


@runs(TR.Reduce, "numpy")
def reduce_fast(t, arena):
    g = t.record.geometry
    x, y = _reduce_views(t, arena)
    fn = np.mean if g.mode == "mean" else np.max
    return (lambda: fn(x, axis=g.params, keepdims=True, out=y)), ()


@runs(TR.Reduce, "rows")
def reduce_rows(t, arena):
    g = t.record.geometry
    x, y = _reduce_views(t, arena)
    width = prod(g.x_shape[len(g.x_shape) - len(g.params):])
    return tensor.reduce_rows, (x.reshape(-1), y.reshape(-1), y.size, width, g.mode == "mean")


@runs(TR.Reduce, "nchwc_reduce")
def reduce_blocked(t, arena):
    g = t.record.geometry
    n, c, s = g.x_shape[0], g.x_shape[1], prod(g.x_shape[2:])
    return nchwc.reduce_spatial, (arena, t.off("x") // 4, arena, t.off("y") // 4, n, c, s, g.mode == "mean",
                                  simd.lanes(t.tiling.lanes))


@runs(TR.Reduce, "naive")
def reduce_naive(t, arena):
    g = t.record.geometry
    x, y = _reduce_views(t, arena)
    fn = np.mean if g.mode == "mean" else np.max

    def run():
        y[...] = fn(x.astype(np.float64), axis=g.params, keepdims=True)
    return run, ()


def _softmax_views(t, arena):
    g = t.record.geometry
    return at(t, arena, "x", g.x_shape), at(t, arena, "y", g.y_shape), g.params[0], g.mode == "log"


@runs(TR.Softmax, "numpy")
def softmax_fast(t, arena):
    x, y, axis, log = _softmax_views(t, arena)

    def run():
        with np.errstate(invalid="ignore", over="ignore"):      # inf and NaN rows give NaN, as in PyTorch
            np.subtract(x, x.max(axis=axis, keepdims=True), out=y)
            if log:
                np.subtract(y, np.log(np.exp(y).sum(axis=axis, keepdims=True)), out=y)
            else:
                np.exp(y, out=y)
                np.divide(y, y.sum(axis=axis, keepdims=True), out=y)
    return run, ()


@runs(TR.Softmax, "naive")
def softmax_naive(t, arena):
    x, y, axis, log = _softmax_views(t, arena)

    def run():
        y[...] = tensor.softmax_reference(x, axis, log)
    return run, ()


# --- data movement: one kernel each ---------------------------------------------------------------
def _xy(t, arena):
    g = t.record.geometry
    return at(t, arena, "x", g.x_shape), at(t, arena, "y", g.y_shape)


@runs(TR.Reshape, "naive")
def reshape_copy(t, arena):
    x, y = _xy(t, arena)
    xf, yf = x.reshape(-1), y.reshape(-1)
    return (lambda: np.copyto(yf, xf)), ()


@runs(TR.Transpose, "naive")
def transpose_copy(t, arena):
    x, y = _xy(t, arena)
    xt = x.transpose(t.record.geometry.params)
    return (lambda: np.copyto(y, xt)), ()


@runs(TR.Slice, "naive")
def slice_copy(t, arena):
    x, y = _xy(t, arena)
    xs = x[tuple(slice(*p) for p in t.record.geometry.params)]
    return (lambda: np.copyto(y, xs)), ()


@runs(TR.Pad, "naive")
def pad_copy(t, arena):
    g = t.record.geometry
    x, y = _xy(t, arena)
    inner = y[tuple(slice(b, b + d) for (b, _), d in zip(g.params, g.x_shape))]

    def run():
        if g.mode == "constant":
            y[...] = g.value
            np.copyto(inner, x)
        else:
            np.copyto(y, np.pad(x, g.params, mode=g.mode))
    return run, ()


def _concat(t, arena):
    g = t.record.geometry
    axis, sizes = g.params
    xs = tuple(at(t, arena, f"x{i}", g.x_shape[:axis] + (s,) + g.x_shape[axis + 1:]) for i, s in enumerate(sizes))
    y = at(t, arena, "y", g.y_shape)
    return (lambda: np.concatenate(xs, axis=axis, out=y)), ()


def _blocked_concat(t, arena):
    """Blocked inputs [N, C_i/V, S*V] into blocked y [N, C/V, S*V] along the blocks."""
    g = t.record.geometry
    axis, sizes = g.params
    v = lanes_of(t.layout("y"))
    n, s = g.y_shape[0], prod(g.y_shape[2:])
    cby = g.y_shape[1] // v
    # runs of a block per item: enough items for 4 a thread
    parts = max(1, min(s, -(-4 * _threads() // (n * cby))))
    # an input with an image stride of its own lives in its slice already (in_place.find_aliases)
    copied = np.array([f"x{i}" not in dict(t.image_strides) for i in range(len(sizes))], np.int64)
    return tensor.concat_blocks, (arena, np.array([t.off(f"x{i}") // 4 for i in range(len(sizes))], np.int64),
                                  np.array([c // v for c in sizes], np.int64), copied, t.off("y") // 4, n, cby, s * v,
                                  parts, simd.lanes(v))


for _t in TR.CONCAT.values():
    runs(_t, "naive")(_concat)
    runs(_t, "nchwc_concat")(_blocked_concat)


def epilogue_pass(t, arena):
    """A fused conv's y = act(y + r), one pass over y as stored (r in y's layout)."""
    rec = t.record
    e = rec.epilogue
    shape = rec.geometry.y_shape
    y, total, row, cb, c, v = _flat(t, arena, "y", shape)
    r = _flat(t, arena, "r", shape)[0] if rec.r != ABSENT else NO_BIAS
    return bound_call(tensor.EPILOGUE[e.act or "identity"], (y, r, e.alpha, e.beta, total, row, cb, c, v))
