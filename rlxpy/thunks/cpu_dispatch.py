"""The CPU dispatch table: (record type, algo) -> a function that takes views of the
arena and calls a numba kernel. Registered here, next to the calls they make."""
from __future__ import annotations

from typing import Callable, Dict, Tuple, Type

import numpy as np

from ..cpu_kernels import backward, conv2d, conv3d, conv_transpose, gemm, im2col, pool, resize
from ..cpu_kernels.config import Config
from ..registry import registrar
from . import records as R
from .arena import view

EXEC: Dict[Tuple[Type[R.Record], str], Callable[[R.Record, np.ndarray], None]] = {}
runs = registrar(EXEC, "CPU kernel")   # @runs(RecordType, algo)
NO_BIAS = np.zeros(0, np.float32)


def threads(config: Config) -> int:
    """Sets numba's pool to RLX_NUM_THREADS (default: all cores) and BLAS to one thread per
    caller, for the calling thread; returns the worker count kernels are planned for."""
    return gemm.configure_threads(config.num_threads)


def resolve(rec: R.Record) -> Callable:
    try:
        return EXEC[(type(rec), rec.algo)]
    except KeyError:
        raise NotImplementedError(f"{rec.node}: no CPU kernel for {type(rec).__name__} with algo "
                                  f"{rec.algo!r}") from None


def as5d(shape) -> Tuple[int, ...]:
    """[N, C, spatial...] with unit leading spatial axes up to three."""
    return tuple(shape[:2]) + (1,) * (5 - len(shape)) + tuple(shape[2:])


def pad3(t, fill) -> Tuple[int, ...]:
    return (fill,) * (3 - len(t)) + tuple(t)


def bias_of(rec, arena) -> np.ndarray:
    return NO_BIAS if rec.b_off < 0 else view(arena, rec.b_off, (rec.y_shape[1],))


def conv_args(rec: R.ConvGeometry):
    return pad3(rec.stride, 1) + pad3(rec.pad_begin, 0) + pad3(rec.dilation, 1) + (rec.groups,)


def weight5d(rec: R.ConvGeometry, w_rows: int, w_cols: int):
    return (w_rows, w_cols) + pad3(rec.kernel, 1)


@runs(R.Conv2D, "naive")
@runs(R.Conv2D1x1, "naive")
@runs(R.Conv3d, "naive")
def conv_reference(rec, arena):
    K, Cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
    conv3d.conv_naive(view(arena, rec.x_off, as5d(rec.x_shape)), view(arena, rec.w_off, weight5d(rec, K, Cg)),
                      bias_of(rec, arena), view(arena, rec.y_off, as5d(rec.y_shape)), *conv_args(rec))


@runs(R.ConvTranspose2d, "naive")
@runs(R.ConvTranspose3d, "naive")
def conv_transpose_reference(rec, arena):
    C, Kg = rec.x_shape[1], rec.y_shape[1] // rec.groups
    conv_transpose.conv_transpose_naive(
        view(arena, rec.x_off, as5d(rec.x_shape)), view(arena, rec.w_off, weight5d(rec, C, Kg)),
        bias_of(rec, arena), view(arena, rec.y_off, as5d(rec.y_shape)), *conv_args(rec))


@runs(R.Conv2dBackwardInput, "naive")
def conv2d_backward_input_reference(rec, arena):
    # dx = conv_transpose(dy, w): w [K, C/g, kh, kw] is already the transposed conv's layout.
    K, Cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
    conv_transpose.conv_transpose_naive(
        view(arena, rec.dy_off, as5d(rec.y_shape)), view(arena, rec.w_off, weight5d(rec, K, Cg)), NO_BIAS,
        view(arena, rec.dx_off, as5d(rec.x_shape)), *conv_args(rec))


@runs(R.Conv2dBackwardWeight, "naive")
def conv2d_backward_weight_reference(rec, arena):
    K, Cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
    backward.conv2d_backward_weight_naive(
        view(arena, rec.x_off, rec.x_shape), view(arena, rec.dy_off, rec.y_shape),
        view(arena, rec.dw_off, (K, Cg) + tuple(rec.kernel)),
        *rec.stride, *rec.pad_begin, *rec.dilation, rec.groups)


def pool_args(rec, arena):
    return (view(arena, rec.x_off, as5d(rec.x_shape)), view(arena, rec.y_off, as5d(rec.y_shape)),
            rec.kind == "max", *pad3(rec.kernel, 1), *pad3(rec.stride, 1), *pad3(rec.pad_begin, 0),
            *pad3(rec.pad_end, 0), *pad3(rec.dilation, 1), rec.count_include_pad)


def max_pool_backward_args(rec, arena):
    return (view(arena, rec.x_off, as5d(rec.x_shape)), view(arena, rec.dy_off, as5d(rec.y_shape)),
            view(arena, rec.dx_off, as5d(rec.x_shape)), *pad3(rec.kernel, 1), *pad3(rec.stride, 1),
            *pad3(rec.pad_begin, 0), *pad3(rec.dilation, 1))


@runs(R.Pool2D, "naive")
@runs(R.Pool3D, "naive")
def pool_reference(rec, arena):
    pool.pool_naive(*pool_args(rec, arena))


@runs(R.MaxPool2dBackward, "naive")
def max_pool2d_backward_reference(rec, arena):
    pool.max_pool_backward_naive(*max_pool_backward_args(rec, arena))


def im2col_args(rec, arena):
    N, C = rec.x_shape[:2]
    rows = (N * rec.out_hw[0] * rec.out_hw[1], C * rec.kernel[0] * rec.kernel[1])
    return (view(arena, rec.x_off, rec.x_shape), view(arena, rec.y_off, rows), *rec.out_hw, *rec.kernel,
            *rec.stride, *rec.pad_begin, *rec.dilation)


def resize_args(rec, arena):
    N, C, H, W = rec.x_shape
    return view(arena, rec.x_off, rec.x_shape), view(arena, rec.y_off, (N, C, 2 * H, 2 * W))


@runs(R.Im2Col, "naive")
def im2col_reference(rec, arena):
    im2col.im2col_naive(*im2col_args(rec, arena))


@runs(R.ResizeNearest2x, "naive")
def resize_nearest2x_reference(rec, arena):
    resize.resize_nearest2x_naive(*resize_args(rec, arena))


# --- fast kernels ----------------------------------------------------------------------

def scratch_of(rec, arena) -> np.ndarray:
    return view(arena, rec.scratch_off, (rec.scratch_bytes // 4,))


@runs(R.Conv2D, "im2col")
@runs(R.Conv3d, "im2col")
def conv_im2col(rec, arena):
    K, Cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
    conv3d.conv_im2col(view(arena, rec.x_off, as5d(rec.x_shape)), view(arena, rec.w_off, weight5d(rec, K, Cg)),
                       bias_of(rec, arena), view(arena, rec.y_off, as5d(rec.y_shape)), *conv_args(rec),
                       scratch_of(rec, arena), rec.tile, rec.k_blocks)


@runs(R.Conv2D1x1, "gemm1x1")
def conv_gemm1x1(rec, arena):
    K, C = rec.y_shape[1], rec.x_shape[1]
    conv2d.conv2d_gemm1x1(view(arena, rec.x_off, rec.x_shape), view(arena, rec.w_off, (K, C)),
                          bias_of(rec, arena), view(arena, rec.y_off, rec.y_shape), rec.tile)


def _conv2d_io(rec, arena):
    K, Cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
    return (view(arena, rec.x_off, rec.x_shape), view(arena, rec.w_off, (K, Cg) + tuple(rec.kernel)),
            bias_of(rec, arena), view(arena, rec.y_off, rec.y_shape))


@runs(R.Conv2D, "direct")
def conv_direct(rec, arena):
    conv2d.conv2d_direct(*_conv2d_io(rec, arena), *rec.pad_begin, rec.groups)


@runs(R.Conv2D, "depthwise")
def conv_depthwise(rec, arena):
    conv2d.conv2d_depthwise(*_conv2d_io(rec, arena), *rec.stride, *rec.pad_begin, *rec.dilation, rec.groups)


@runs(R.Conv2D, "winograd")
def conv_winograd(rec, arena):
    x, w, b, y = _conv2d_io(rec, arena)
    K, C = w.shape[0], w.shape[1]
    aux = view(arena, rec.aux_off, (rec.aux_bytes // 4,))
    u = aux[16:].reshape(16, K, C)
    # aux[0] marks a param's transform as done in this arena (arenas start with it zeroed)
    if not (rec.weight_const and aux[0] == 1.0):
        conv2d.winograd_filter_transform(w, u)
        aux[0] = 1.0
    conv2d.conv2d_winograd(x, u, b, y, *rec.pad_begin, scratch_of(rec, arena), rec.tile, rec.k_blocks)


@runs(R.ConvTranspose2d, "col2im")
@runs(R.ConvTranspose3d, "col2im")
def conv_transpose_col2im(rec, arena):
    C, Kg = rec.x_shape[1], rec.y_shape[1] // rec.groups
    conv_transpose.conv_transpose_col2im(
        view(arena, rec.x_off, as5d(rec.x_shape)), view(arena, rec.w_off, weight5d(rec, C, Kg)),
        bias_of(rec, arena), view(arena, rec.y_off, as5d(rec.y_shape)), *conv_args(rec),
        scratch_of(rec, arena), rec.k_blocks)


@runs(R.Conv2dBackwardInput, "col2im")
def conv2d_backward_input_col2im(rec, arena):
    K, Cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
    conv_transpose.conv_transpose_col2im(
        view(arena, rec.dy_off, as5d(rec.y_shape)), view(arena, rec.w_off, weight5d(rec, K, Cg)), NO_BIAS,
        view(arena, rec.dx_off, as5d(rec.x_shape)), *conv_args(rec), scratch_of(rec, arena), rec.k_blocks)


@runs(R.Conv2dBackwardWeight, "im2col")
def conv2d_backward_weight_im2col(rec, arena):
    K, Cg = rec.y_shape[1], rec.x_shape[1] // rec.groups
    backward.conv2d_backward_weight_im2col(
        view(arena, rec.x_off, rec.x_shape), view(arena, rec.dy_off, rec.y_shape),
        view(arena, rec.dw_off, (K, Cg) + tuple(rec.kernel)), *rec.stride, *rec.pad_begin, *rec.dilation,
        rec.groups, scratch_of(rec, arena), rec.tile)


@runs(R.Pool2D, "parallel")
@runs(R.Pool3D, "parallel")
def pool_parallel(rec, arena):
    pool.pool_parallel(*pool_args(rec, arena))


@runs(R.MaxPool2dBackward, "parallel")
def max_pool2d_backward_parallel(rec, arena):
    pool.max_pool_backward_parallel(*max_pool_backward_args(rec, arena))


@runs(R.Im2Col, "parallel")
def im2col_parallel(rec, arena):
    im2col.im2col_rows_parallel(*im2col_args(rec, arena))


@runs(R.ResizeNearest2x, "parallel")
def resize_nearest2x_parallel(rec, arena):
    resize.resize_nearest2x_parallel(*resize_args(rec, arena))
