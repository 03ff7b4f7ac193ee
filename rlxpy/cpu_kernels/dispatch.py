"""The CPU dispatch table: (record type, algo) -> a binder (thunk, arena) -> (kernel, args):
the numba kernel and its arguments, views of the arena made once when the arena is made,
so a run calls kernel(*args) and builds nothing (views cost about 1 us each: a third of a
small graph's run). PREPARE: what fills a thunk's persistent bytes once per arena.
Registered here, next to the calls they make."""
from __future__ import annotations

from math import prod
from typing import Callable, Dict, Tuple, Type

import numpy as np

from ..registry import registrar
from ..thunks import records as R
from ..thunks.arena import view
from ..thunks.layout import PLAIN, lanes_of
from ..thunks.records import ABSENT, Thunk
from . import (backward, conv2d, conv3d, conv_transpose, direct_simd, im2col, nchwc, nchwc_1x1, nchwc_pool_backward,
               nchwc_wgrad, pool, resize, simd, subpixel, winograd_f4)
from .choose import NATIVE_ACTS, epilogue_in_store
from .jit import bound_call

EXEC: Dict[Tuple[Type[R.Record], str], Callable[[Thunk, np.ndarray], None]] = {}
runs = registrar(EXEC, "CPU kernel")            # @runs(RecordType, algo)
PREPARE: Dict[Tuple[Type[R.Record], str], Callable[[Thunk, np.ndarray], None]] = {}
prepares = registrar(PREPARE, "CPU prepare step")
NO_BIAS = np.zeros(0, np.float32)


def bind(binder, t: Thunk, arena) -> Callable[[], None]:
    """A table entry's (kernel, args) for this arena, as one call (then a fused conv's
    epilogue pass over y)."""
    fn, args = binder(t, arena)
    call = bound_call(fn, args)
    if not getattr(t.record, "fused", False) or native_epilogue(t):
        return call
    after = tensor_dispatch.epilogue_pass(t, arena)      # (imported at the end of this module)

    def run():
        call()
        after()
    return run


def at(t: Thunk, arena, role: str, shape) -> np.ndarray:
    return view(arena, t.off(role), shape)


def bias_of(t: Thunk, arena) -> np.ndarray:
    """The bias, or an empty array where there is none (no value, or a record with no b role)."""
    off = t.off("b") if "b" in t.record.roles() else ABSENT
    return NO_BIAS if off < 0 else view(arena, off, (t.record.geometry.y_shape[1],))


def packs_every_run(t: Thunk) -> bool:
    """Whether the thunk's weights are re-packed in its call on every run: a weight that is a
    graph input, or a (record type, algo) with no prepare step (else: once per arena)."""
    if "w" not in t.record.roles():
        return False
    return not getattr(t.record, "weight_const", False) or (type(t.record), t.algo) not in PREPARE


def with_weights(kernel, args, t: Thunk, make, make_args):
    """(kernel, args) where the weights' derived form (packed or transformed) is made once per
    arena by the thunk's prepare step; else a call that remakes it first (packs_every_run)."""
    if not packs_every_run(t):
        return kernel, args

    def run():
        make(*make_args)
        kernel(*args)
    return run, ()


def scratch_of(t: Thunk, arena) -> np.ndarray:
    return view(arena, t.scratch_off, (t.scratch_bytes // 4,))


def slot_floats(t: Thunk, threads: int) -> int:
    """One worker's share of the thunk's scratch (planned as threads equal slots)."""
    return t.scratch_bytes // 4 // threads


def conv_args(g3) -> tuple:
    """stride, begin padding, dilation (3 axes each) and groups of a 3-D geometry."""
    return tuple(g3.stride) + tuple(g3.pad_begin) + tuple(g3.dilation) + (g3.groups,)


def _weight3(g3, rows: int, cols: int):
    return (rows, cols) + tuple(g3.kernel)


@runs(R.Conv2D, "naive")
@runs(R.Conv2D1x1, "naive")
@runs(R.Conv3d, "naive")
def conv_reference(t, arena):
    g3 = t.record.geometry.lifted(3)
    return conv3d.conv_naive, (at(t, arena, "x", g3.x_shape), at(t, arena, "w", _weight3(g3, g3.y_shape[1], g3.cin_g)),
                      bias_of(t, arena), at(t, arena, "y", g3.y_shape), *conv_args(g3))


@runs(R.ConvTranspose2d, "naive")
@runs(R.ConvTranspose3d, "naive")
def conv_transpose_reference(t, arena):
    g3 = t.record.geometry.lifted(3)
    return conv_transpose.conv_transpose_naive, (
        at(t, arena, "x", g3.x_shape), at(t, arena, "w", _weight3(g3, g3.x_shape[1], g3.cout_g)),
        bias_of(t, arena), at(t, arena, "y", g3.y_shape), *conv_args(g3))


@runs(R.Conv2dBackwardInput, "naive")
def conv2d_backward_input_reference(t, arena):
    # dx = conv_transpose(dy, w): w [K, C/g, kh, kw] is already the transposed conv's layout.
    g3 = t.record.geometry.lifted(3)
    return conv_transpose.conv_transpose_naive, (
        at(t, arena, "dy", g3.y_shape), at(t, arena, "w", _weight3(g3, g3.y_shape[1], g3.cin_g)), NO_BIAS,
        at(t, arena, "dx", g3.x_shape), *conv_args(g3))


@runs(R.Conv2dBackwardWeight, "naive")
def conv2d_backward_weight_reference(t, arena):
    g = t.record.geometry
    return backward.conv2d_backward_weight_naive, (
        at(t, arena, "x", g.x_shape), at(t, arena, "dy", g.y_shape),
        at(t, arena, "dw", (g.y_shape[1], g.cin_g) + tuple(g.kernel)),
        *g.stride, *g.pad_begin, *g.dilation, g.groups)


def pool_args(t, arena):
    g3 = t.record.geometry.lifted(3)
    return (at(t, arena, "x", g3.x_shape), at(t, arena, "y", g3.y_shape), t.record.kind == "max",
            *g3.kernel, *g3.stride, *g3.pad_begin, *g3.pad_end, *g3.dilation, t.record.count_include_pad)


def max_pool_backward_args(t, arena):
    g3 = t.record.geometry.lifted(3)
    return (at(t, arena, "x", g3.x_shape), at(t, arena, "dy", g3.y_shape), at(t, arena, "dx", g3.x_shape),
            *g3.kernel, *g3.stride, *g3.pad_begin, *g3.dilation)


@runs(R.Pool2D, "naive")
@runs(R.Pool3D, "naive")
def pool_reference(t, arena):
    return pool.pool_naive, pool_args(t, arena)


@runs(R.MaxPool2dBackward, "naive")
def max_pool2d_backward_reference(t, arena):
    return pool.max_pool_backward_naive, max_pool_backward_args(t, arena)


def im2col_args(t, arena):
    g = t.record.geometry
    return (at(t, arena, "x", g.x_shape), at(t, arena, "y", g.rows_shape), *g.out_hw, *g.kernel,
            *g.stride, *g.pad_begin, *g.dilation)


def resize_args(t, arena):
    n, c, h, w = t.record.geometry.x_shape
    return at(t, arena, "x", (n, c, h, w)), at(t, arena, "y", (n, c, 2 * h, 2 * w))


@runs(R.Im2Col, "naive")
def im2col_reference(t, arena):
    return im2col.im2col_naive, im2col_args(t, arena)


@runs(R.ResizeNearest2x, "naive")
def resize_nearest2x_reference(t, arena):
    return resize.resize_nearest2x_naive, resize_args(t, arena)


# --- fast kernels ----------------------------------------------------------------------

def _threads() -> int:
    import numba
    return numba.get_num_threads()


@runs(R.Conv2D, "im2col")
@runs(R.Conv3d, "im2col")
def conv_im2col(t, arena):
    g3 = t.record.geometry.lifted(3)
    return conv3d.conv_im2col, (at(t, arena, "x", g3.x_shape), at(t, arena, "w", _weight3(g3, g3.y_shape[1], g3.cin_g)),
                       bias_of(t, arena), at(t, arena, "y", g3.y_shape), *conv_args(g3),
                       scratch_of(t, arena), slot_floats(t, _threads()), t.tiling.tile, t.tiling.k_blocks)


@runs(R.Conv2D1x1, "gemm1x1")
def conv_gemm1x1(t, arena):
    g = t.record.geometry
    return conv2d.conv2d_gemm1x1, (at(t, arena, "x", g.x_shape), at(t, arena, "w", (g.y_shape[1], g.x_shape[1])),
                          bias_of(t, arena), at(t, arena, "y", g.y_shape), t.tiling.tile)


def _conv2d_io(t, arena):
    g = t.record.geometry
    return (at(t, arena, "x", g.x_shape), at(t, arena, "w", (g.y_shape[1], g.cin_g) + tuple(g.kernel)),
            bias_of(t, arena), at(t, arena, "y", g.y_shape))


@runs(R.Conv2D, "direct")
def conv_direct(t, arena):
    return conv2d.conv2d_direct, (*_conv2d_io(t, arena), *t.record.geometry.pad_begin, t.record.geometry.groups)


@runs(R.Conv2D, "depthwise")
def conv_depthwise(t, arena):
    g = t.record.geometry
    return conv2d.conv2d_depthwise, (*_conv2d_io(t, arena), *g.stride, *g.pad_begin, *g.dilation, g.groups)


def _winograd_filters(t, arena) -> np.ndarray:
    g = t.record.geometry
    return view(arena, t.persistent_off, (16, g.y_shape[1], g.x_shape[1]))


@prepares(R.Conv2D, "winograd")
def winograd_prepare(t, arena):
    """A param's filter transform, once per arena."""
    w = _conv2d_io(t, arena)[1]
    return conv2d.winograd_filter_transform, (w, _winograd_filters(t, arena))


@runs(R.Conv2D, "winograd")
def conv_winograd(t, arena):
    x, w, b, y = _conv2d_io(t, arena)
    u = _winograd_filters(t, arena)
    args = (x, u, b, y, *t.record.geometry.pad_begin, scratch_of(t, arena), slot_floats(t, _threads()),
            t.tiling.tile, t.tiling.k_blocks)
    return with_weights(conv2d.conv2d_winograd, args, t, conv2d.winograd_filter_transform, (w, u))


def _simd_packed(t, arena) -> np.ndarray:
    return view(arena, t.persistent_off, (t.persistent_bytes // 4,))


@prepares(R.Conv2D, "simd_direct")
@prepares(R.Conv2D1x1, "simd_direct")
def simd_direct_prepare(t, arena):
    """A param's weights packed into [group, block of 6 channels, C/g, kh, kw, 6], once per arena."""
    return direct_simd.pack_weights, (_conv2d_io(t, arena)[1], _simd_packed(t, arena), t.record.geometry.groups)


@runs(R.Conv2D, "simd_direct")
@runs(R.Conv2D1x1, "simd_direct")
def conv_simd_direct(t, arena):
    g = t.record.geometry
    x, w, b, y = _conv2d_io(t, arena)
    hp, wp = direct_simd.padded_plane(g, t.tiling.lanes)
    xp = view(arena, t.scratch_off, (g.x_shape[0], g.x_shape[1], hp, wp))
    packed = _simd_packed(t, arena)
    pad = (x, xp, hp, wp, *g.pad_begin)
    args = (xp, packed, b, y, hp, wp, *g.dilation, g.groups, g.cin_g, *g.kernel, simd.lanes(t.tiling.lanes))
    const = t.record.weight_const      # else a graph input: packed every run

    def run():
        if not const:
            direct_simd.pack_weights(w, packed, g.groups)
        direct_simd.pad_input(*pad)
        direct_simd.conv2d_simd_direct(*args)
    return run, ()


def _as_4d(w):
    """A 3-D kernel [K, C, KD, KH, KW] as [K, C, KD*KH, KW] (the same bytes): the packers'
    taps run in the kernels' order (kd, kh, kw)."""
    return w.reshape(w.shape[0], w.shape[1], prod(w.shape[2:-1]), w.shape[-1])


def _geometry_args(g3) -> tuple:
    """A lifted(3) geometry's (D, H, W, OD, OH, OW, kernel, stride, pad_begin, dilation)."""
    return (*g3.x_shape[2:], *g3.y_shape[2:], *g3.kernel, *g3.stride, *g3.pad_begin, *g3.dilation)


def _y_args(t, arena, y_role: str = "y") -> tuple:
    """(ya, y0, y_plain): where the kernel writes y, and whether plain."""
    return arena, t.off(y_role) // 4, t.layout(y_role) == PLAIN


def _nchwc_pack_args(t, arena):
    g = t.record.geometry.lifted(3)
    lanes = t.tiling.lanes
    w = _as_4d(at(t, arena, "w", (g.y_shape[1], g.cin_g) + tuple(g.kernel)))
    return (w, bias_of(t, arena), arena, t.persistent_off // 4, g.groups, *nchwc.group_blocks(g, lanes),
            simd.lanes(lanes))


def native_epilogue(t: Thunk) -> bool:
    """Whether the thunk's kernel applies its fused epilogue in its own store (else a pass
    over y follows it): choose.epilogue_in_store for its algo and y's layout."""
    return epilogue_in_store(t.record, t.algo, t.layout("y"))


def _epi_args(t: Thunk, arena):
    """nchwc.conv's epi argument for the thunk: its epilogue where native, else none."""
    if not native_epilogue(t):
        return nchwc.no_epilogue_args(arena)
    e = t.record.epilogue
    lo, hi = (0.0, np.inf) if e.act == "relu" else (e.alpha, e.beta)
    r0 = t.off("r") // 4 if t.record.r != ABSENT else -1       # r is stored as y is: the same index from r0
    return nchwc.epilogue_args(NATIVE_ACTS[e.act], lo, hi, arena, r0)


@prepares(R.Conv2D, "nchwc_direct")
@prepares(R.Conv2D1x1, "nchwc_direct")
@prepares(R.Conv3d, "nchwc_direct")
def nchwc_prepare(t, arena):
    """A param's weights and bias packed into the kernel's blocks, once per arena."""
    return nchwc.pack, _nchwc_pack_args(t, arena)


@runs(R.Conv2D, "nchwc_direct")
@runs(R.Conv2D1x1, "nchwc_direct")
@runs(R.Conv3d, "nchwc_direct")
def conv_nchwc_direct(t, arena):
    g = t.record.geometry.lifted(3)
    lanes = t.tiling.lanes
    args = (arena, t.off("x") // 4, t.persistent_off // 4, *_y_args(t, arena), g.y_shape[1], g.x_shape[0],
            *_geometry_args(g), g.groups, *nchwc.group_blocks(g, lanes), t.tiling.tile, t.tiling.k_blocks,
            nchwc.tile_blocks(g, lanes), _epi_args(t, arena), simd.lanes(lanes))
    return with_weights(nchwc.kernel_for(g, lanes), args, t, nchwc.pack, _nchwc_pack_args(t, arena))


@prepares(R.Conv2D, "nchwc_1x1")
@prepares(R.Conv2D1x1, "nchwc_1x1")
def nchwc_1x1_prepare(t, arena):
    """The weights packed as nchwc_direct's (one group, one tap), once per arena."""
    return nchwc.pack, _nchwc_pack_args(t, arena)


@runs(R.Conv2D, "nchwc_1x1")
@runs(R.Conv2D1x1, "nchwc_1x1")
def conv_nchwc_1x1(t, arena):
    g = t.record.geometry.lifted(2)
    lanes = t.tiling.lanes
    args = (arena, t.off("x") // 4, t.persistent_off // 4, *_y_args(t, arena), g.y_shape[1], g.x_shape[0],
            *g.x_shape[2:], *g.y_shape[2:], *g.stride, *nchwc.group_blocks(g, lanes), t.tiling.tile,
            t.tiling.k_blocks, _epi_args(t, arena), simd.lanes(lanes))
    return with_weights(nchwc_1x1.conv1x1, args, t, nchwc.pack, _nchwc_pack_args(t, arena))


def _plain_in_pack_args(t, arena):
    g = t.record.geometry.lifted(3)
    w = _as_4d(at(t, arena, "w", (g.y_shape[1], g.cin_g) + tuple(g.kernel)))
    return w, bias_of(t, arena), arena, t.persistent_off // 4, simd.lanes(t.tiling.lanes)


@prepares(R.Conv2D, "nchwc_plain_in")
@prepares(R.Conv2D1x1, "nchwc_plain_in")
@prepares(R.Conv3d, "nchwc_plain_in")
def plain_in_prepare(t, arena):
    return nchwc.pack_plain_in, _plain_in_pack_args(t, arena)


@runs(R.Conv2D, "nchwc_plain_in")
@runs(R.Conv2D1x1, "nchwc_plain_in")
@runs(R.Conv3d, "nchwc_plain_in")
def conv_nchwc_plain_in(t, arena):
    g = t.record.geometry.lifted(3)
    args = (arena, arena, t.off("x") // 4, t.persistent_off // 4, *_y_args(t, arena), g.y_shape[1], g.x_shape[0],
            g.x_shape[1], *_geometry_args(g), t.tiling.tile, _epi_args(t, arena), simd.lanes(t.tiling.lanes))
    return with_weights(nchwc.conv_plain_in, args, t, nchwc.pack_plain_in, _plain_in_pack_args(t, arena))


def _depthwise_pack_args(t, arena):
    g = t.record.geometry.lifted(3)
    w = _as_4d(at(t, arena, "w", (g.y_shape[1], 1) + tuple(g.kernel)))
    return w, bias_of(t, arena), arena, t.persistent_off // 4, simd.lanes(t.tiling.lanes)


@prepares(R.Conv2D, "nchwc_depthwise")
@prepares(R.Conv3d, "nchwc_depthwise")
def depthwise_prepare(t, arena):
    return nchwc.pack_depthwise, _depthwise_pack_args(t, arena)


@runs(R.Conv2D, "nchwc_depthwise")
@runs(R.Conv3d, "nchwc_depthwise")
def conv_nchwc_depthwise(t, arena):
    g = t.record.geometry.lifted(3)
    args = (arena, t.off("x") // 4, t.persistent_off // 4, *_y_args(t, arena), g.x_shape[1], g.x_shape[0],
            *_geometry_args(g), t.tiling.tile, _epi_args(t, arena), simd.lanes(t.tiling.lanes))
    return with_weights(nchwc.depthwise, args, t, nchwc.pack_depthwise, _depthwise_pack_args(t, arena))


@runs(R.Pool2D, "nchwc_pool")
@runs(R.Pool3D, "nchwc_pool")
def pool_nchwc(t, arena):
    g = t.record.geometry.lifted(3)
    (d, h, wi), (od, oh, ow) = g.x_shape[2:], g.y_shape[2:]
    return nchwc.pool, (arena, t.off("x") // 4, *_y_args(t, arena), g.x_shape[1], g.x_shape[0], d, h, wi, od, oh, ow,
                        *g.kernel, *g.stride, *g.pad_begin, *g.pad_end, *g.dilation,
                        t.record.kind == "max", t.record.count_include_pad, t.tiling.tile, simd.lanes(t.tiling.lanes))


def _f4_pack_args(t, arena):
    g = t.record.geometry
    w = at(t, arena, "w", (g.y_shape[1], g.x_shape[1], 3, 3))
    return w, bias_of(t, arena), arena, t.persistent_off // 4, simd.lanes(t.tiling.lanes)


def _f4_on_the_fly(t) -> bool:
    """Whether the thunk's choice was conv_fly (its tiling's tile, a fly_tiles group, is below
    the packed kernel's tile blocks): the record says it, not the host it runs on, whose L2
    may differ from the one that chose."""
    return t.tiling.tile < winograd_f4.TILE_BLOCKS[0]


def _f4_kernel(t):
    """(kernel, pack) of winograd_f4: packed U, or raw filters transformed on the fly."""
    if _f4_on_the_fly(t):
        return winograd_f4.conv_fly, winograd_f4.fly_pack
    return winograd_f4.conv, winograd_f4.pack


def _f4_args(t, g, x_role, y_role, arena):
    """winograd_f4's kernel args, conv's or conv_fly's (the same list)."""
    (c, h, wi), (k, oh, ow) = g.x_shape[1:], g.y_shape[1:]
    head = (arena, t.off(x_role) // 4, t.persistent_off // 4, arena, t.off(y_role) // 4, t.layout(y_role) == PLAIN,
            k, g.x_shape[0], c, h, wi, oh, ow, *g.pad_begin, t.scratch_off // 4, slot_floats(t, _threads()))
    split = (t.tiling.tile, t.tiling.k_blocks)        # conv_fly: (tiles a group, runs); conv: (tile block, groups)
    return head + split + (simd.lanes(t.tiling.lanes),)


@prepares(R.Conv2D, "winograd_f4")
def winograd_f4_prepare(t, arena):
    """A param's filters transformed (G g G^T) and packed, or packed raw, once per arena."""
    return _f4_kernel(t)[1], _f4_pack_args(t, arena)


@runs(R.Conv2D, "winograd_f4")
def conv_winograd_f4(t, arena):
    g = t.record.geometry
    kernel, pack = _f4_kernel(t)
    return with_weights(kernel, _f4_args(t, g, "x", "y", arena), t, pack, _f4_pack_args(t, arena))


def _as_forward(t, arena):
    """A stride-1 transposed conv or input gradient as the forward conv it equals
    (nchwc.as_forward): (geometry, input role, output role, its weight as stored, bias)."""
    g, x_role, y_role = nchwc.as_forward(t.record)
    w = at(t, arena, "w", (g.x_shape[1], g.y_shape[1] // g.groups) + tuple(g.kernel))
    return g, x_role, y_role, w, bias_of(t, arena)


def _transposed_f4(t, arena):
    """(kernel, kernel args, pack args) of a stride-1 transposed conv or input gradient run as
    winograd_f4."""
    g, x_role, y_role, w, bias = _as_forward(t, arena)
    kernel, pack = _f4_kernel(t)
    return kernel, _f4_args(t, g, x_role, y_role, arena), (pack, w, bias, arena, t.persistent_off // 4,
                                                           simd.lanes(t.tiling.lanes))


def _pack_transposed_f4(pack, w, b, arena, p0, lanes):
    pack(nchwc.forward_weights(w, 1), b, arena, p0, lanes)


@prepares(R.Conv2dBackwardInput, "winograd_f4")
@prepares(R.ConvTranspose2d, "winograd_f4")
def transposed_f4_prepare(t, arena):
    return _pack_transposed_f4, _transposed_f4(t, arena)[2]


@runs(R.Conv2dBackwardInput, "winograd_f4")
@runs(R.ConvTranspose2d, "winograd_f4")
def transposed_winograd_f4(t, arena):
    kernel, args, pack = _transposed_f4(t, arena)
    return with_weights(kernel, args, t, _pack_transposed_f4, pack)


def _y_at(ya_index: int):
    """OUTPUT_ARG entry: the kernel's (ya, y0) arguments at ya_index pointed at array y."""
    return lambda args, y: args[:ya_index] + (y, 0) + args[ya_index + 2:]


# (record type, algo) -> redirect(args, y): the args writing the output into y instead
OUTPUT_ARG = {
    (R.Conv2D, "nchwc_direct"): _y_at(3), (R.Conv2D1x1, "nchwc_direct"): _y_at(3),
    (R.Conv2D, "nchwc_1x1"): _y_at(3), (R.Conv2D1x1, "nchwc_1x1"): _y_at(3),
    (R.Conv2D, "nchwc_plain_in"): _y_at(4), (R.Conv2D1x1, "nchwc_plain_in"): _y_at(4),
    (R.Conv2D, "nchwc_depthwise"): _y_at(3),
    (R.Conv3d, "nchwc_direct"): _y_at(3), (R.Conv3d, "nchwc_plain_in"): _y_at(4), (R.Conv3d, "nchwc_depthwise"): _y_at(3),
    (R.Pool2D, "nchwc_pool"): _y_at(2), (R.Pool3D, "nchwc_pool"): _y_at(2),
    (R.Conv2D, "winograd_f4"): _y_at(3),
    (R.Conv2dBackwardInput, "winograd_f4"): _y_at(3), (R.ConvTranspose2d, "winograd_f4"): _y_at(3),
    (R.Conv2dBackwardInput, "nchwc_direct"): _y_at(3), (R.ConvTranspose2d, "nchwc_direct"): _y_at(3),
    (R.ConvTranspose3d, "nchwc_direct"): _y_at(3),
    (R.Conv2dBackwardWeight, "nchwc_wgrad"): _y_at(5),
}


def _x_at(xa_index):
    """INPUT_ARG entry: the kernel's (xa, x0) arguments at xa_index pointed at array x."""
    return lambda args, x: args[:xa_index] + (x, 0) + args[xa_index + 2:]


# (record type, algo) -> {role: redirect(args, x)}: the args reading that input from x (a
# graph input's own flat array) instead of the arena; kernels that only read it there
INPUT_ARG = {
    (R.Conv2D, "nchwc_plain_in"): {"x": _x_at(1)}, (R.Conv2D1x1, "nchwc_plain_in"): {"x": _x_at(1)},
    (R.Conv3d, "nchwc_plain_in"): {"x": _x_at(1)}, (R.Conv2dBackwardWeight, "nchwc_wgrad"): {"x": _x_at(1)},
}


def _transposed_nchwc(t, arena):
    """(kernel args, pack args) of a transposed conv or input gradient run as nchwc_direct."""
    g, x_role, y_role, w, bias = _as_forward(t, arena)
    g = g.lifted(3)
    lanes = t.tiling.lanes
    args = (arena, t.off(x_role) // 4, t.persistent_off // 4, *_y_args(t, arena, y_role), g.y_shape[1],
            g.x_shape[0], *_geometry_args(g), g.groups, *nchwc.group_blocks(g, lanes), t.tiling.tile,
            t.tiling.k_blocks, nchwc.tile_blocks(g, lanes), nchwc.no_epilogue_args(arena), simd.lanes(lanes))
    pack = (w, bias, arena, t.persistent_off // 4, g.groups, *nchwc.group_blocks(g, lanes), simd.lanes(lanes))
    return args, pack, nchwc.kernel_for(g, lanes)


def _pack_transposed(pack):
    w, b, arena, p0, groups, cbg, ocbg, lanes = pack
    nchwc.pack(_as_4d(nchwc.forward_weights(w, groups)), b, arena, p0, groups, cbg, ocbg, lanes)


@prepares(R.Conv2dBackwardInput, "nchwc_direct")
@prepares(R.ConvTranspose2d, "nchwc_direct")
@prepares(R.ConvTranspose3d, "nchwc_direct")
def transposed_nchwc_prepare(t, arena):
    """The weights flipped, transposed per group and packed, once per arena."""
    return _pack_transposed, (_transposed_nchwc(t, arena)[1],)


@runs(R.Conv2dBackwardInput, "nchwc_direct")
@runs(R.ConvTranspose2d, "nchwc_direct")
@runs(R.ConvTranspose3d, "nchwc_direct")
def transposed_nchwc(t, arena):
    args, pack, kernel = _transposed_nchwc(t, arena)
    return with_weights(kernel, args, t, _pack_transposed, (pack,))


def _subpixel(t, arena):
    """(per phase: conv args, scatter args; pack args) of nchwc_subpixel."""
    in_role, out_role = subpixel.roles(t.record)
    lanes, threads = t.tiling.lanes, _threads()
    g = t.record.geometry
    src, dst = subpixel.src_dst(t.record)
    w = at(t, arena, "w", (src[1], dst[1] // g.groups) + tuple(g.kernel))
    out_sp = (1,) * (5 - len(dst)) + tuple(dst[2:])
    calls, sizes, p0 = [], [], t.persistent_off // 4
    phases = subpixel.phases(t.record)
    for ph in phases:
        g3 = ph.geometry.lifted(3)
        cbg, ocbg = nchwc.group_blocks(g3, lanes)
        conv = (arena, t.off(in_role) // 4, p0, arena, t.scratch_off // 4, False, g3.y_shape[1], g3.x_shape[0],
                *_geometry_args(g3), g3.groups, cbg, ocbg, nchwc.items(g3, lanes, threads),
                nchwc.pair_group(g3, lanes), nchwc.tile_blocks(g3, lanes), nchwc.no_epilogue_args(arena),
                simd.lanes(lanes))
        lift = 3 - len(ph.first)
        move = (arena, t.scratch_off // 4, t.off(out_role) // 4, g3.x_shape[0], ocbg * g3.groups, *g3.y_shape[2:],
                *out_sp, *((0,) * lift + ph.first), *((1,) * lift + ph.step), simd.lanes(lanes))
        calls.append((nchwc.kernel_for(g3, lanes), conv, move))
        sizes.append(nchwc.packed_floats(g3, lanes))
        p0 += sizes[-1]
    cbg, ocbg = nchwc.group_blocks(phases[0].geometry, lanes)
    packing = (w, bias_of(t, arena), arena, t.persistent_off // 4, g.groups, tuple(ph.taps for ph in phases),
               tuple(sizes), cbg, ocbg, simd.lanes(lanes))
    return calls, packing


def _patches(t, arena):
    """(1x1 conv args, scatter args; pack args) of nchwc_subpixel where the kernel equals
    the stride (subpixel.patches): one 1x1 conv of every phase, then one scatter."""
    in_role, out_role = subpixel.roles(t.record)
    lanes, g = t.tiling.lanes, t.record.geometry
    src, dst = subpixel.src_dst(t.record)
    m = subpixel.merged_geometry(t.record, lanes)
    cb, ocb_all = nchwc.group_blocks(m, lanes)
    ocb = -(-dst[1] // lanes)
    chunk, gpairs = nchwc_1x1.work_split(m, lanes, _threads())
    p0, s0 = t.persistent_off // 4, t.scratch_off // 4
    conv = (arena, t.off(in_role) // 4, p0, arena, s0, False, m.y_shape[1], m.x_shape[0], *m.x_shape[2:],
            *m.y_shape[2:], 1, 1, cb, ocb_all, chunk, gpairs, nchwc.no_epilogue_args(arena), simd.lanes(lanes))
    lift = (1,) * (5 - len(src))
    move = (arena, s0, t.off(out_role) // 4, src[0], ocb, *lift, *src[2:], *lift, *g.stride,
            t.image_stride(out_role, dst) // 4, simd.lanes(lanes))
    w = at(t, arena, "w", (src[1], dst[1]) + tuple(g.kernel))
    return conv, move, (w, bias_of(t, arena), arena, p0, cb, ocb, simd.lanes(lanes))


@prepares(R.ConvTranspose2d, "nchwc_subpixel")
@prepares(R.ConvTranspose3d, "nchwc_subpixel")
@prepares(R.Conv2dBackwardInput, "nchwc_subpixel")
def subpixel_prepare(t, arena):
    """Every phase's taps packed (or the merged 1x1 conv's weights), once per arena."""
    if subpixel.patches(t.record):
        return subpixel.pack_patches, _patches(t, arena)[2]
    return subpixel.pack_phases, _subpixel(t, arena)[1]


@runs(R.ConvTranspose2d, "nchwc_subpixel")
@runs(R.ConvTranspose3d, "nchwc_subpixel")
@runs(R.Conv2dBackwardInput, "nchwc_subpixel")
def transposed_subpixel(t, arena):
    # bound calls: the dispatcher's own call works out ~35 argument types every launch
    if subpixel.patches(t.record):
        conv, move, packing = _patches(t, arena)
        pack, steps = subpixel.pack_patches, [bound_call(nchwc_1x1.conv1x1, conv),
                                              bound_call(subpixel.scatter_patches, move)]
    else:
        calls, packing = _subpixel(t, arena)
        pack, steps = subpixel.pack_phases, [bound_call(k, args) for kernel, conv, move in calls
                                             for k, args in ((kernel, conv), (subpixel.scatter, move))]
    every_run = packs_every_run(t)

    def run():
        if every_run:
            pack(*packing)
        for step in steps:
            step()
    return run, ()


@runs(R.Reorder, "reorder")
def reorder(t, arena):
    g = t.record.geometry
    shape = (g.shape[0], g.shape[1], prod(g.shape[2:]), simd.lanes(t.tiling.lanes))
    if lanes_of(g.dst):
        return nchwc.to_blocked, (arena, t.off("x") // 4, arena, t.off("y") // 4, *shape)
    return nchwc.from_blocked, (arena, t.off("x") // 4, t.off("y") // 4, *shape)


@runs(R.ConvTranspose2d, "col2im")
@runs(R.ConvTranspose3d, "col2im")
def conv_transpose_col2im(t, arena):
    g3 = t.record.geometry.lifted(3)
    return conv_transpose.conv_transpose_col2im, (
        at(t, arena, "x", g3.x_shape), at(t, arena, "w", _weight3(g3, g3.x_shape[1], g3.cout_g)),
        bias_of(t, arena), at(t, arena, "y", g3.y_shape), *conv_args(g3),
        scratch_of(t, arena), slot_floats(t, _threads()), t.tiling.k_blocks)


@runs(R.Conv2dBackwardInput, "col2im")
def conv2d_backward_input_col2im(t, arena):
    g3 = t.record.geometry.lifted(3)
    return conv_transpose.conv_transpose_col2im, (
        at(t, arena, "dy", g3.y_shape), at(t, arena, "w", _weight3(g3, g3.y_shape[1], g3.cin_g)), NO_BIAS,
        at(t, arena, "dx", g3.x_shape), *conv_args(g3), scratch_of(t, arena), slot_floats(t, _threads()),
        t.tiling.k_blocks)


@runs(R.Conv2dBackwardWeight, "im2col")
def conv2d_backward_weight_im2col(t, arena):
    g = t.record.geometry
    return backward.conv2d_backward_weight_im2col, (
        at(t, arena, "x", g.x_shape), at(t, arena, "dy", g.y_shape),
        at(t, arena, "dw", (g.y_shape[1], g.cin_g) + tuple(g.kernel)), *g.stride, *g.pad_begin, *g.dilation,
        g.groups, scratch_of(t, arena), slot_floats(t, _threads()), t.tiling.tile)


@runs(R.Conv2dBackwardWeight, "nchwc_wgrad")
def conv2d_backward_weight_nchwc(t, arena):
    g = t.record.geometry
    lanes = t.tiling.lanes
    (c, h, wi), (k, oh, ow) = g.x_shape[1:], g.y_shape[1:]
    workers = _threads()
    return nchwc_wgrad.wgrad, (arena, arena, t.off("x") // 4, t.off("dy") // 4, t.scratch_off // 4, arena,
                               t.off("dw") // 4, g.x_shape[0], c, h, wi, k, oh, ow, *g.kernel, *g.stride,
                               *g.pad_begin, *g.dilation, g.groups, *nchwc.group_blocks(g, lanes), workers,
                               nchwc_wgrad.chunk_rows(g, lanes, workers), t.layout("x") == PLAIN, simd.lanes(lanes))


@runs(R.MaxPool2dBackward, "nchwc_pool_backward")
def max_pool2d_backward_nchwc(t, arena):
    g = t.record.geometry.lifted(2)
    (c, h, wi), (oh, ow) = g.x_shape[1:], g.y_shape[2:]
    return nchwc_pool_backward.max_pool_backward, (
        arena, t.off("x") // 4, t.off("dy") // 4, t.off("dx") // 4, c, g.x_shape[0], h, wi, oh, ow, *g.kernel,
        *g.stride, *g.pad_begin, *g.dilation, simd.lanes(t.tiling.lanes))


@runs(R.Pool2D, "parallel")
@runs(R.Pool3D, "parallel")
def pool_parallel(t, arena):
    return pool.pool_parallel, pool_args(t, arena)


@runs(R.MaxPool2dBackward, "parallel")
def max_pool2d_backward_parallel(t, arena):
    return pool.max_pool_backward_parallel, max_pool_backward_args(t, arena)


@runs(R.Im2Col, "parallel")
def im2col_parallel(t, arena):
    return im2col.im2col_rows_parallel, im2col_args(t, arena)


@runs(R.ResizeNearest2x, "nchwc_resize")
def resize_nearest2x_nchwc(t, arena):
    n, c, h, w = t.record.geometry.x_shape
    return nchwc.resize_nearest2x, (arena, t.off("x") // 4, t.off("y") // 4, n, c, h, w,
                                    t.image_stride("y", (n, c, 2 * h, 2 * w)) // 4, simd.lanes(t.tiling.lanes))


@runs(R.ResizeNearest2x, "parallel")
def resize_nearest2x_parallel(t, arena):
    return resize.resize_nearest2x_parallel, resize_args(t, arena)


from . import tensor_dispatch  # noqa: E402,F401  (the ops around the convs register into these tables)
