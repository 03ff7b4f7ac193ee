"""Conv gradients. The input gradient's reference is the transposed conv's reference
(conv_transpose.conv_transpose_naive): dx = conv_transpose(dy, w) with dx's shape given."""
import numba
import numpy as np
from numba import prange

from .conv3d import check_slots
from .gemm import sgemm
from .im2col import fill_columns
from .jit import kernel, parallel_kernel


@kernel
def conv2d_backward_weight_naive(x, dy, dw, sh, sw, ph, pw, dh, dwl, groups):
    """The oracle: dw[k, c, i, j] = sum over n, oh, ow of dy[n,k,oh,ow] * x[n, g*Cg+c, oh*s-p+i*d, ...],
    accumulated in float64. x [N,C,H,W], dy [N,K,OH,OW], dw [K, C/g, kh, kw]."""
    N, C, H, W = x.shape
    K, OH, OW = dy.shape[1], dy.shape[2], dy.shape[3]
    _, Cg, KH, KW = dw.shape
    Kg = K // groups
    for k in range(K):
        c0 = (k // Kg) * Cg
        for c in range(Cg):
            for i in range(KH):
                for j in range(KW):
                    acc = 0.0
                    for n in range(N):
                        for oh in range(OH):
                            iy = oh * sh - ph + i * dh
                            if iy < 0 or iy >= H:
                                continue
                            for ow in range(OW):
                                ix = ow * sw - pw + j * dwl
                                if ix < 0 or ix >= W:
                                    continue
                                acc += np.float64(dy[n, k, oh, ow]) * np.float64(x[n, c0 + c, iy, ix])
                    dw[k, c, i, j] = acc


def weight_grad_slot_floats(g, tile_rows: int) -> int:
    """Floats of one worker's slot: its private dw accumulator [K, C/g*kh*kw], then its
    column tile [C/g*kh*kw, tile_rows*OW]."""
    ck = g.cin_g * g.taps
    return g.y_shape[1] * ck + ck * tile_rows * g.y_shape[3]


@parallel_kernel
def conv2d_backward_weight_im2col(x, dy, dw, sh, sw, ph, pw, dh, dwl, groups, scratch, slot, tile_rows):
    """dw = sum over images of dy[n, g] @ cols(x[n, g])^T. Work items are (image, group,
    tile of output rows); each worker fills the tile's columns and accumulates a GEMM into
    its own private copy of dw (beta = 1); the copies are summed once at the end.
    x [N,C,H,W], dy [N,K,OH,OW], dw [K, C/g, kh, kw]; scratch holds, per worker, the
    accumulator [K, C/g*kh*kw] followed by the column tile."""
    N, C, H, W = x.shape
    K, OH, OW = dy.shape[1], dy.shape[2], dy.shape[3]
    _, Cg, KH, KW = dw.shape
    Kg, CK, P = K // groups, Cg * KH * KW, OH * OW
    tiles = (OH + tile_rows - 1) // tile_rows
    acc_size = K * CK
    check_slots(scratch, slot, acc_size + CK * tile_rows * OW)
    workers = scratch.size // slot
    x5 = x.reshape(N, C, 1, H, W)
    for s in prange(workers):
        scratch[s * slot:s * slot + acc_size] = 0.0
    for it in prange(N * groups * tiles):
        n = it // (groups * tiles)
        rest = it - n * groups * tiles
        g = rest // tiles
        r0 = (rest - g * tiles) * tile_rows
        r1 = min(OH, r0 + tile_rows)
        T = (r1 - r0) * OW
        base = numba.get_thread_id() * slot
        cols = scratch[base + acc_size:base + acc_size + CK * T].reshape(CK, T)
        fill_columns(x5, n, g * Cg, Cg, r0, r1, cols, 1, KH, KW, 1, sh, sw, 0, ph, pw, 1, dh, dwl, OH, OW)
        sgemm(False, True, Kg, CK, T, dy.ctypes.data + 4 * ((n * K + g * Kg) * P + r0 * OW), P,
              cols.ctypes.data, T, True, scratch[base:].ctypes.data + 4 * g * Kg * CK, CK)
    out = dw.reshape(acc_size)
    for i in prange(acc_size):
        total = np.float32(0.0)
        for s in range(workers):
            total += scratch[s * slot + i]
        out[i] = total
