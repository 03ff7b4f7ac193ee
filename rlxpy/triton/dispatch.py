"""The GPU dispatch table: the same records as the CPU, lowered to Triton kernels.

retarget() rewrites a record's algo for the GPU (`simple`: the starting design, kept as
the GPU-side reference; `igemm`: implicit GEMM on tl.dot), resolve() returns the launcher.
"""
from __future__ import annotations

import os
import threading
import weakref
from dataclasses import replace
from typing import Callable, Dict, Tuple, Type

import torch
import triton

from ..registry import registrar
from ..thunks import records as R
from . import kernels as K

EXEC: Dict[Tuple[Type[R.Record], str], Callable] = {}
ALGO_ENV = "RLX_TRITON_ALGO"
BLOCK_OW = 64
BLOCK = 256
IGEMM_BLOCKS = dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32)  # the interpreter's fixed tile
TRANSPOSE_TILE = (64, 64)   # the NCHW -> NHWC copy's tile (channels, pixels)
IGEMM_MIN = 8        # a GEMM side (per group) under this leaves the tl.dot tiles mostly padding
IGEMM_X_NHWC = True  # the forward implicit GEMM reads a channels-last copy of x (False: NCHW in place)
DW_WAVES = 2         # split the weight gradient's pixels so that about this many waves of programs run
INTERPRET = os.environ.get("TRITON_INTERPRET", "") == "1"


runs = registrar(EXEC, "GPU kernel")   # @runs(RecordType, algo)


def algo_preference(env=None) -> str:
    raw = (os.environ if env is None else env).get(ALGO_ENV, "").strip().lower()
    if raw in ("", "auto"):
        return "auto"
    if raw not in ("simple", "igemm"):
        raise ValueError(f"{ALGO_ENV}={raw!r} is not a valid value; accepted: simple, igemm, auto")
    return raw


class TritonBackend:
    def __init__(self, device: torch.device, preference: str):
        self.device, self.preference = device, preference

    def threads(self, config) -> int:
        return 1

    def retarget(self, rec: R.Record) -> R.Record:
        if isinstance(rec, (R.Conv2D, R.Conv2D1x1)):
            if self.preference == "simple":
                return replace(rec, algo="simple", why=f"{ALGO_ENV}=simple: one program per output-row tile")
            small = _too_small_for_tiles(rec, rec.x_shape[1] // rec.groups * rec.kernel[0] * rec.kernel[1])
            if self.preference == "igemm" or not small:
                why = f"{ALGO_ENV}=igemm" if self.preference == "igemm" else "implicit GEMM on tl.dot"
                return replace(rec, algo="igemm", why=why)
            return replace(rec, algo="simple", why=f"{small}: simple kernel")
        if isinstance(rec, R.Conv2dBackwardInput) and self.preference != "simple" and _dx_as_conv(rec):
            return replace(rec, algo="igemm", why="stride 1: dx is a conv of dy with flipped weights (implicit GEMM)")
        if isinstance(rec, R.Conv2dBackwardWeight) and self.preference != "simple":
            small = _too_small_for_tiles(rec, rec.x_shape[1] // rec.groups)   # a program's N tile: one tap's channels
            if self.preference == "igemm" or not small:
                return replace(rec, algo="igemm", why="implicit GEMM over the pixels, split-K atomic tile adds")
            return replace(rec, algo="simple", why=f"{small}: simple kernel")
        return replace(rec, algo="simple", why="Triton kernel")

    def resolve(self, rec: R.Record) -> Callable:
        try:
            return EXEC[(type(rec), rec.algo)]
        except KeyError:
            raise NotImplementedError(f"{rec.node}: no GPU kernel for {type(rec).__name__} / {rec.algo}") from None


def _too_small_for_tiles(rec, k_side: int):
    """Why the implicit GEMM would waste its tiles (None when it would not): output channels
    per group are one side of the tile, k_side (the taps a tile reduces over) the other."""
    cout_g = rec.y_shape[1] // rec.groups
    if cout_g < IGEMM_MIN:
        return f"{cout_g} output channel(s) per group"
    if k_side < IGEMM_MIN:
        return f"{k_side} input tap(s) per group"
    return None


def at(arena, off: int):
    """The arena from byte offset `off` on: Triton takes a tensor's data pointer."""
    return arena[off // 4:]


def _geometry(rec: R.ConvGeometry) -> dict:
    """Compile-time constants of a conv kernel (channel counts per group too: the Triton
    interpreter cannot loop over a runtime count)."""
    return dict(KH=rec.kernel[0], KW=rec.kernel[1], SH=rec.stride[0], SW=rec.stride[1], PH=rec.pad_begin[0],
                PW=rec.pad_begin[1], DH=rec.dilation[0], DW=rec.dilation[1], GROUPS=rec.groups,
                CIN_G=rec.x_shape[1] // rec.groups, COUT_G=rec.y_shape[1] // rec.groups)


def _fwd_grid(rec: R.ConvGeometry):
    n, _, _, _ = rec.x_shape
    _, k, oh, ow = rec.y_shape
    tiles = triton.cdiv(ow, BLOCK_OW)
    return (n * k * oh * tiles,), tiles


def _bias(rec, arena):
    return at(arena, rec.b_off) if rec.b_off >= 0 else at(arena, rec.y_off)  # unused when HAS_BIAS is False


@runs(R.Conv2D, "simple")
@runs(R.Conv2D1x1, "simple")
def conv2d_simple(rec, arena):
    """conv2d_forward, or conv2d_bias_forward (the same kernel with HAS_BIAS) when the conv
    has a bias: one launch instead of conv + bias-add."""
    grid, tiles = _fwd_grid(rec)
    _, c, h, w = rec.x_shape
    _, k, oh, ow = rec.y_shape
    K.conv2d_forward[grid](at(arena, rec.x_off), at(arena, rec.w_off), _bias(rec, arena), at(arena, rec.y_off),
                           c, h, w, k, oh, ow, tiles, HAS_BIAS=rec.b_off >= 0, BLOCK_OW=BLOCK_OW, **_geometry(rec))


# id(arena) -> {weight offset: re-arranged weights}; an entry goes when its arena does
_WEIGHTS_T: Dict[int, dict] = {}


def _arena_cache(arena) -> dict:
    key = id(arena)
    if key not in _WEIGHTS_T:
        _WEIGHTS_T[key] = {}
        weakref.finalize(arena, _WEIGHTS_T.pop, key, None)
    return _WEIGHTS_T[key]


def _rearranged_weights(rec, arena, key, make):
    """make(w [C_OUT, C_IN/G, KH, KW] view of the arena) -> a re-arranged copy. A param's
    copy is made once per arena and kept under `key`; a weight that is a graph input is
    redone each run."""
    cached = _arena_cache(arena) if rec.weight_const else {}
    if key not in cached:
        k, cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
        cached[key] = make(at(arena, rec.w_off)[:k * cg * rec.kernel[0] * rec.kernel[1]].view(k, cg, *rec.kernel))
    return cached[key]


def _weights_k(rec, arena):
    """The weights as wk [C_OUT, KH, KW, C_IN/G] (contiguous along the GEMM's K)."""
    return _rearranged_weights(rec, arena, rec.w_off, lambda w: w.permute(0, 2, 3, 1).contiguous())


def _channels_last(arena, off, n, c, h, w):
    """A channels-last copy of the NCHW tensor at `off`: the GEMM's A chunks are then
    contiguous along K."""
    out = torch.empty((n, h, w, c), dtype=arena.dtype, device=arena.device)
    block_c = min(triton.next_power_of_2(c), TRANSPOSE_TILE[0])   # 4 for RGB, not a 64-wide tile
    block_p = TRANSPOSE_TILE[0] * TRANSPOSE_TILE[1] // block_c
    grid = (triton.cdiv(h * w, block_p), triton.cdiv(c, block_c), n)
    K.nchw_to_nhwc[grid](at(arena, off), out, c, h * w, BLOCK_C=block_c, BLOCK_P=block_p)
    return out


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


@runs(R.Conv2D, "igemm")
@runs(R.Conv2D1x1, "igemm")
def conv2d_igemm(rec, arena):
    n, c, h, w = rec.x_shape
    _, k, oh, ow = rec.y_shape
    x = _channels_last(arena, rec.x_off, n, c, h, w) if IGEMM_X_NHWC else at(arena, rec.x_off)
    _launch_igemm(x, _weights_k(rec, arena), _bias(rec, arena), at(arena, rec.y_off), n, c, h, w, k, oh, ow,
                  rec.b_off >= 0, _geometry(rec), IGEMM_X_NHWC)


def _dx_as_conv(rec) -> bool:
    """At stride 1, dx = conv(dy, w flipped and transposed, begin padding d*(k-1) - p):
    possible when that padding is not negative."""
    return rec.stride == (1, 1) and all(p <= d * (k - 1) for p, d, k in zip(rec.pad_begin, rec.dilation, rec.kernel))


@runs(R.Conv2dBackwardInput, "igemm")
def conv2d_backward_input_igemm(rec, arena):
    n, c, h, w = rec.x_shape
    _, k, oh, ow = rec.y_shape
    g, (kh, kw), (dh, dw) = rec.groups, rec.kernel, rec.dilation
    cg, kg = c // g, k // g

    def flipped_k_major(wv):
        # w [K, C/g, kh, kw] -> w' [C, K/g, kh, kw] (flipped), stored K-major as [C, kh, kw, K/g]
        wv = wv.view(g, kg, cg, kh, kw)
        return wv.flip(3, 4).transpose(1, 2).reshape(c, kg, kh, kw).permute(0, 2, 3, 1).contiguous()

    wk = _rearranged_weights(rec, arena, ("dx", rec.w_off), flipped_k_major)
    geometry = dict(KH=kh, KW=kw, SH=1, SW=1, PH=dh * (kh - 1) - rec.pad_begin[0], PW=dw * (kw - 1) - rec.pad_begin[1],
                    DH=dh, DW=dw, GROUPS=g, CIN_G=kg, COUT_G=cg)
    dyt = _channels_last(arena, rec.dy_off, n, k, oh, ow)
    _launch_igemm(dyt, wk, dyt, at(arena, rec.dx_off), n, k, oh, ow, c, h, w, False, geometry)


@runs(R.Conv2dBackwardWeight, "igemm")
def conv2d_backward_weight_igemm(rec, arena):
    n, c, h, w = rec.x_shape
    _, k, oh, ow = rec.y_shape
    geometry = _geometry(rec)
    cout_g, cin_g, taps = geometry["COUT_G"], geometry["CIN_G"], rec.kernel[0] * rec.kernel[1]
    # exactly sized: the autotuner zeroes this tensor before each trial, and the launch adds into it
    dw = at(arena, rec.dw_off)[:k * cin_g * taps]
    dw.zero_()

    def grid(meta):
        tiles = (triton.cdiv(cout_g, meta["BLOCK_M"]), taps * triton.cdiv(cin_g, meta["BLOCK_N"]))
        chunks = n * triton.cdiv(oh * ow, meta["BLOCK_K"])
        split = max(1, min(chunks, DW_WAVES * _sm_count(arena) // (tiles[0] * tiles[1] * rec.groups)))
        return tiles + (rec.groups * split,)

    args = (at(arena, rec.x_off), at(arena, rec.dy_off), dw, n, c, h, w, k, oh, ow, oh * ow)
    tuned_launch(K.conv2d_igemm_dw_tuned, grid, args, dict(INTERPRETED=INTERPRET, **geometry))


def _sm_count(arena) -> int:
    """Multiprocessors of the arena's GPU (4 on the interpreter, so that its tests split too)."""
    if arena.device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(arena.device).multi_processor_count


def launch_backward(arena, rec_geometry, x_off, w_off, dy_off, dx_off, dw_off):
    """conv2d_backward_dx (dw_off < 0), conv2d_backward_dw (dx_off < 0) or both in one
    launch (conv2d_backward). The outputs are zeroed first: the kernel adds into them."""
    grid, tiles = _fwd_grid(rec_geometry)
    n, c, h, w = rec_geometry.x_shape
    _, k, oh, ow = rec_geometry.y_shape
    if dx_off >= 0:
        at(arena, dx_off)[:n * c * h * w].zero_()
    if dw_off >= 0:
        at(arena, dw_off)[:k * (c // rec_geometry.groups) * rec_geometry.kernel[0] * rec_geometry.kernel[1]].zero_()
    dummy = at(arena, dy_off)
    K.conv2d_backward[grid](at(arena, x_off) if x_off >= 0 else dummy, at(arena, w_off) if w_off >= 0 else dummy,
                            dummy, at(arena, dx_off) if dx_off >= 0 else dummy,
                            at(arena, dw_off) if dw_off >= 0 else dummy, c, h, w, k, oh, ow, tiles,
                            DO_DX=dx_off >= 0, DO_DW=dw_off >= 0, BLOCK_OW=BLOCK_OW, **_geometry(rec_geometry))


@runs(R.Conv2dBackwardInput, "simple")
def conv2d_backward_dx(rec, arena):
    launch_backward(arena, rec, -1, rec.w_off, rec.dy_off, rec.dx_off, -1)


@runs(R.Conv2dBackwardWeight, "simple")
def conv2d_backward_dw(rec, arena):
    launch_backward(arena, rec, rec.x_off, -1, rec.dy_off, -1, rec.dw_off)


def _pool_grid(total):
    return (triton.cdiv(total, BLOCK),)


@runs(R.Pool2D, "simple")
def pool2d(rec, arena):
    n, c, h, w = rec.x_shape
    oh, ow = rec.y_shape[2:]
    total = n * c * oh * ow
    K.pool2d[_pool_grid(total)](at(arena, rec.x_off), at(arena, rec.y_off), total, h, w, oh, ow,
                                KH=rec.kernel[0], KW=rec.kernel[1], SH=rec.stride[0], SW=rec.stride[1],
                                PH=rec.pad_begin[0], PW=rec.pad_begin[1], EH=rec.pad_end[0], EW=rec.pad_end[1],
                                DH=rec.dilation[0], DW=rec.dilation[1], IS_MAX=rec.kind == "max",
                                COUNT_PAD=rec.count_include_pad, BLOCK=BLOCK)


@runs(R.MaxPool2dBackward, "simple")
def max_pool2d_backward(rec, arena):
    n, c, h, w = rec.x_shape
    oh, ow = rec.y_shape[2:]
    total = n * c * oh * ow
    at(arena, rec.dx_off)[:n * c * h * w].zero_()
    K.max_pool2d_backward[_pool_grid(total)](at(arena, rec.x_off), at(arena, rec.dy_off), at(arena, rec.dx_off),
                                             total, h, w, oh, ow, KH=rec.kernel[0], KW=rec.kernel[1],
                                             SH=rec.stride[0], SW=rec.stride[1], PH=rec.pad_begin[0],
                                             PW=rec.pad_begin[1], DH=rec.dilation[0], DW=rec.dilation[1],
                                             BLOCK=BLOCK)


@runs(R.ResizeNearest2x, "simple")
def resize_nearest2x(rec, arena):
    n, c, h, w = rec.x_shape
    total = 4 * n * c * h * w
    K.resize_nearest2x[_pool_grid(total)](at(arena, rec.x_off), at(arena, rec.y_off), total, h, w, BLOCK=BLOCK)
