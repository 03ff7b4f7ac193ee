"""The GPU dispatch table: (record type, algo) -> a launcher (thunk, arena), and PREPARE,
what fills a thunk's persistent bytes (re-arranged weights) once per arena.

Algos: `simple` (one program per output-row tile: the starting design, kept as the GPU's
readable reference), `igemm` (implicit GEMM on tl.dot, reading a channels-last copy of x
that is planned as the thunk's scratch), `igemm_nchw` (the same GEMM gathering x from NCHW
in place). The arena is one float32 tensor; offsets are bytes.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Dict, Tuple, Type

import torch
import triton

from ..registry import registrar
from ..thunks import records as R
from ..thunks.records import Thunk
from . import kernels as K

EXEC: Dict[Tuple[Type[R.Record], str], Callable] = {}
runs = registrar(EXEC, "GPU kernel")            # @runs(RecordType, algo)
PREPARE: Dict[Tuple[Type[R.Record], str], Callable] = {}
prepares = registrar(PREPARE, "GPU prepare step")
BLOCK_OW = 64
BLOCK = 256
IGEMM_BLOCKS = dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32)  # the interpreter's fixed tile
TRANSPOSE_TILE = (64, 64)   # the NCHW -> NHWC copy's tile (channels, pixels)
IGEMM_MIN = 8        # a GEMM side (per group) under this leaves the tl.dot tiles mostly padding
DW_WAVES = 2         # split the weight gradient's pixels so that about this many waves of programs run
INTERPRET = os.environ.get("TRITON_INTERPRET", "") == "1"   # Triton's own switch, not one of ours


def too_small_for_tiles(g, k_side: int):
    """Why the implicit GEMM would waste its tiles (None when it would not): output channels
    per group are one side of the tile, k_side (the taps a tile reduces over) the other."""
    cout_g = g.cout_g
    if cout_g < IGEMM_MIN:
        return f"{cout_g} output channel(s) per group"
    if k_side < IGEMM_MIN:
        return f"{k_side} input tap(s) per group"
    return None


def at(arena, off: int):
    """The arena from byte offset `off` on: Triton takes a tensor's data pointer."""
    return arena[off // 4:]


def _geometry(g) -> dict:
    """Compile-time constants of a conv kernel (channel counts per group too: the Triton
    interpreter cannot loop over a runtime count)."""
    return dict(KH=g.kernel[0], KW=g.kernel[1], SH=g.stride[0], SW=g.stride[1], PH=g.pad_begin[0],
                PW=g.pad_begin[1], DH=g.dilation[0], DW=g.dilation[1], GROUPS=g.groups,
                CIN_G=g.cin_g, COUT_G=g.cout_g)


def _fwd_grid(g):
    n, _, _, _ = g.x_shape
    _, k, oh, ow = g.y_shape
    tiles = triton.cdiv(ow, BLOCK_OW)
    return (n * k * oh * tiles,), tiles


def _bias(t: Thunk, arena):
    b = t.off("b")
    return at(arena, b) if b >= 0 else at(arena, t.off("y"))  # unused when HAS_BIAS is False


@runs(R.Conv2D, "simple")
@runs(R.Conv2D1x1, "simple")
def conv2d_simple(t, arena):
    """conv2d_forward, or conv2d_bias_forward (the same kernel with HAS_BIAS) when the conv
    has a bias: one launch instead of conv + bias-add."""
    g = t.record.geometry
    grid, tiles = _fwd_grid(g)
    _, c, h, w = g.x_shape
    _, k, oh, ow = g.y_shape
    K.conv2d_forward[grid](at(arena, t.off("x")), at(arena, t.off("w")), _bias(t, arena), at(arena, t.off("y")),
                           c, h, w, k, oh, ow, tiles, HAS_BIAS=t.off("b") >= 0, BLOCK_OW=BLOCK_OW, **_geometry(g))


def _persistent(t: Thunk, arena, shape):
    n = 1
    for d in shape:
        n *= d
    return at(arena, t.persistent_off)[:n].view(*shape)


def _weight(t: Thunk, arena):
    """w [C_OUT, C_IN/G, KH, KW] as a view of the arena."""
    g = t.record.geometry
    return at(arena, t.off("w"))[:g.y_shape[1] * g.cin_g * g.taps].view(g.y_shape[1], g.cin_g, *g.kernel)


def k_major_weights_floats(g) -> int:
    """The forward implicit GEMM's weights wk [C_OUT, KH, KW, C_IN/G] (persistent)."""
    return g.y_shape[1] * g.taps * g.cin_g


def _k_major(t: Thunk, arena):
    g = t.record.geometry
    return _persistent(t, arena, (g.y_shape[1], *g.kernel, g.cin_g))


@prepares(R.Conv2D, "igemm")
@prepares(R.Conv2D, "igemm_nchw")
@prepares(R.Conv2D1x1, "igemm")
@prepares(R.Conv2D1x1, "igemm_nchw")
def k_major_weights(t: Thunk, arena):
    """wk [C_OUT, KH, KW, C_IN/G]: contiguous along the GEMM's K, so its loads are 16 bytes wide."""
    _k_major(t, arena).copy_(_weight(t, arena).permute(0, 2, 3, 1))


def channels_last_floats(shape) -> int:
    """A channels-last copy of an NCHW tensor (the implicit GEMM's scratch)."""
    n, c, h, w = shape
    return n * c * h * w


def _channels_last(arena, off, dst, n, c, h, w):
    """Copy the NCHW tensor at `off` into dst [N, H, W, C] (the thunk's scratch): the GEMM's
    A chunks are then contiguous along K."""
    block_c = min(triton.next_power_of_2(c), TRANSPOSE_TILE[0])   # 4 for RGB, not a 64-wide tile
    block_p = TRANSPOSE_TILE[0] * TRANSPOSE_TILE[1] // block_c
    grid = (triton.cdiv(h * w, block_p), triton.cdiv(c, block_c), n)
    K.nchw_to_nhwc[grid](at(arena, off), dst, c, h * w, BLOCK_C=block_c, BLOCK_P=block_p)
    return dst


def _scratch(t: Thunk, arena, shape):
    n = 1
    for d in shape:
        n *= d
    return at(arena, t.scratch_off)[:n].view(*shape)


# (kernel, scalar args, constexprs) -> the config the autotuner chose for them
_TUNED: Dict[tuple, triton.Config] = {}
_TUNE_LOCK = threading.Lock()


def tuned_launch(tuner, grid, args, constexprs):
    """Launch an autotuned kernel. The interpreter takes one fixed tile. On a GPU the first
    launch for a shape tunes under a lock and later ones call the kernel with the chosen
    config directly: Triton's Autotuner keeps per-call state on itself (two threads
    launching through it at once failed on the H200), and skipping it shortens every launch."""
    if INTERPRET:
        tuner.fn[grid(IGEMM_BLOCKS)](*args, **constexprs, **IGEMM_BLOCKS)
        return
    key = (tuner.fn.__name__,) + tuple(a for a in args if isinstance(a, int)) + tuple(sorted(constexprs.items()))
    config = _TUNED.get(key)
    if config is None:
        with _TUNE_LOCK:
            config = _TUNED.get(key)
            if config is None:
                tuner[grid](*args, **constexprs)      # tunes, then runs with the best config
                _TUNED[key] = tuner.best_config
                return
    tuner.fn[grid](*args, **constexprs, **config.all_kwargs())


def _launch_igemm(xt, wk, bias, y, n, c, h, w, k, oh, ow, has_bias, geometry, x_nhwc=True):
    """conv2d_igemm over the grid (pixel tiles, output-channel tiles, groups): a fixed tile
    on the interpreter, autotuned tiles on a GPU."""
    args = (xt, wk, bias, y, n, c, h, w, k, oh, ow)
    cout_g, groups = geometry["COUT_G"], geometry["GROUPS"]

    def grid(meta):
        return triton.cdiv(n * oh * ow, meta["BLOCK_M"]), triton.cdiv(cout_g, meta["BLOCK_N"]), groups

    tuned_launch(K.conv2d_igemm_tuned, grid, args, dict(HAS_BIAS=has_bias, X_NHWC=x_nhwc, **geometry))


def _conv2d_igemm(t: Thunk, arena, x_nhwc: bool):
    g = t.record.geometry
    n, c, h, w = g.x_shape
    _, k, oh, ow = g.y_shape
    if not t.record.weight_const:         # a weight that is a graph input: re-arranged every run
        k_major_weights(t, arena)
    x = _channels_last(arena, t.off("x"), _scratch(t, arena, (n, h, w, c)), n, c, h, w) if x_nhwc \
        else at(arena, t.off("x"))
    _launch_igemm(x, _k_major(t, arena), _bias(t, arena), at(arena, t.off("y")), n, c, h, w, k, oh, ow,
                  t.off("b") >= 0, _geometry(g), x_nhwc)


@runs(R.Conv2D, "igemm")
@runs(R.Conv2D1x1, "igemm")
def conv2d_igemm(t, arena):
    _conv2d_igemm(t, arena, x_nhwc=True)


@runs(R.Conv2D, "igemm_nchw")
@runs(R.Conv2D1x1, "igemm_nchw")
def conv2d_igemm_nchw(t, arena):
    _conv2d_igemm(t, arena, x_nhwc=False)


def dx_as_conv(g) -> bool:
    """At stride 1, dx = conv(dy, w flipped and transposed, begin padding d*(k-1) - p):
    possible when that padding is not negative."""
    return g.stride == (1, 1) and all(p <= d * (k - 1) for p, d, k in zip(g.pad_begin, g.dilation, g.kernel))


def _flipped_k_major(t: Thunk, arena):
    g = t.record.geometry
    return _persistent(t, arena, (g.x_shape[1], *g.kernel, g.cout_g))


@prepares(R.Conv2dBackwardInput, "igemm")
def flipped_k_major_weights(t: Thunk, arena):
    """w [K, C/g, kh, kw] -> w' [C, K/g, kh, kw] (flipped), stored K-major as [C, kh, kw, K/g]."""
    geo = t.record.geometry
    g, (kh, kw) = geo.groups, geo.kernel
    c, cg, kg = geo.x_shape[1], geo.cin_g, geo.cout_g
    wv = _weight(t, arena).view(g, kg, cg, kh, kw)
    _flipped_k_major(t, arena).copy_(wv.flip(3, 4).transpose(1, 2).reshape(c, kg, kh, kw).permute(0, 2, 3, 1))


@runs(R.Conv2dBackwardInput, "igemm")
def conv2d_backward_input_igemm(t, arena):
    geo = t.record.geometry
    n, c, h, w = geo.x_shape
    _, k, oh, ow = geo.y_shape
    (kh, kw), (dh, dw) = geo.kernel, geo.dilation
    if not t.record.weight_const:
        flipped_k_major_weights(t, arena)
    geometry = dict(KH=kh, KW=kw, SH=1, SW=1, PH=dh * (kh - 1) - geo.pad_begin[0], PW=dw * (kw - 1) - geo.pad_begin[1],
                    DH=dh, DW=dw, GROUPS=geo.groups, CIN_G=geo.cout_g, COUT_G=geo.cin_g)
    dyt = _channels_last(arena, t.off("dy"), _scratch(t, arena, (n, oh, ow, k)), n, k, oh, ow)
    _launch_igemm(dyt, _flipped_k_major(t, arena), dyt, at(arena, t.off("dx")), n, k, oh, ow, c, h, w, False,
                  geometry)


@runs(R.Conv2dBackwardWeight, "igemm")
def conv2d_backward_weight_igemm(t, arena):
    geo = t.record.geometry
    n, c, h, w = geo.x_shape
    _, k, oh, ow = geo.y_shape
    geometry = _geometry(geo)
    cout_g, cin_g, taps = geo.cout_g, geo.cin_g, geo.taps
    # exactly sized: the autotuner zeroes this tensor before each trial, and the launch adds into it
    dw = at(arena, t.off("dw"))[:k * cin_g * taps]
    dw.zero_()

    def grid(meta):
        tiles = (triton.cdiv(cout_g, meta["BLOCK_M"]), taps * triton.cdiv(cin_g, meta["BLOCK_N"]))
        chunks = n * triton.cdiv(oh * ow, meta["BLOCK_K"])
        split = max(1, min(chunks, DW_WAVES * _sm_count(arena) // (tiles[0] * tiles[1] * geo.groups)))
        return tiles + (geo.groups * split,)

    args = (at(arena, t.off("x")), at(arena, t.off("dy")), dw, n, c, h, w, k, oh, ow, oh * ow)
    tuned_launch(K.conv2d_igemm_dw_tuned, grid, args, dict(INTERPRETED=INTERPRET, **geometry))


def _sm_count(arena) -> int:
    """Multiprocessors of the arena's GPU (4 on the interpreter, so that its tests split too)."""
    if arena.device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(arena.device).multi_processor_count


def launch_backward(arena, geometry, x_off, w_off, dy_off, dx_off, dw_off):
    """conv2d_backward_dx (dw_off < 0), conv2d_backward_dw (dx_off < 0) or both in one
    launch (conv2d_backward). The outputs are zeroed first: the kernel adds into them."""
    grid, tiles = _fwd_grid(geometry)
    n, c, h, w = geometry.x_shape
    _, k, oh, ow = geometry.y_shape
    if dx_off >= 0:
        at(arena, dx_off)[:n * c * h * w].zero_()
    if dw_off >= 0:
        at(arena, dw_off)[:k * geometry.cin_g * geometry.taps].zero_()
    dummy = at(arena, dy_off)
    K.conv2d_backward[grid](at(arena, x_off) if x_off >= 0 else dummy, at(arena, w_off) if w_off >= 0 else dummy,
                            dummy, at(arena, dx_off) if dx_off >= 0 else dummy,
                            at(arena, dw_off) if dw_off >= 0 else dummy, c, h, w, k, oh, ow, tiles,
                            DO_DX=dx_off >= 0, DO_DW=dw_off >= 0, BLOCK_OW=BLOCK_OW, **_geometry(geometry))


@runs(R.Conv2dBackwardInput, "simple")
def conv2d_backward_dx(t, arena):
    launch_backward(arena, t.record.geometry, -1, t.off("w"), t.off("dy"), t.off("dx"), -1)


@runs(R.Conv2dBackwardWeight, "simple")
def conv2d_backward_dw(t, arena):
    launch_backward(arena, t.record.geometry, t.off("x"), -1, t.off("dy"), -1, t.off("dw"))


def _pool_grid(total):
    return (triton.cdiv(total, BLOCK),)


@runs(R.Pool2D, "simple")
def pool2d(t, arena):
    rec, g = t.record, t.record.geometry
    n, c, h, w = g.x_shape
    oh, ow = g.y_shape[2:]
    total = n * c * oh * ow
    K.pool2d[_pool_grid(total)](at(arena, t.off("x")), at(arena, t.off("y")), total, h, w, oh, ow,
                                KH=g.kernel[0], KW=g.kernel[1], SH=g.stride[0], SW=g.stride[1],
                                PH=g.pad_begin[0], PW=g.pad_begin[1], EH=g.pad_end[0], EW=g.pad_end[1],
                                DH=g.dilation[0], DW=g.dilation[1], IS_MAX=rec.kind == "max",
                                COUNT_PAD=rec.count_include_pad, BLOCK=BLOCK)


@runs(R.MaxPool2dBackward, "simple")
def max_pool2d_backward(t, arena):
    g = t.record.geometry
    n, c, h, w = g.x_shape
    oh, ow = g.y_shape[2:]
    total = n * c * oh * ow
    at(arena, t.off("dx"))[:n * c * h * w].zero_()
    K.max_pool2d_backward[_pool_grid(total)](at(arena, t.off("x")), at(arena, t.off("dy")), at(arena, t.off("dx")),
                                             total, h, w, oh, ow, KH=g.kernel[0], KW=g.kernel[1],
                                             SH=g.stride[0], SW=g.stride[1], PH=g.pad_begin[0],
                                             PW=g.pad_begin[1], DH=g.dilation[0], DW=g.dilation[1],
                                             BLOCK=BLOCK)


@runs(R.ResizeNearest2x, "simple")
def resize_nearest2x(t, arena):
    n, c, h, w = t.record.geometry.x_shape
    total = 4 * n * c * h * w
    K.resize_nearest2x[_pool_grid(total)](at(arena, t.off("x")), at(arena, t.off("y")), total, h, w, BLOCK=BLOCK)
