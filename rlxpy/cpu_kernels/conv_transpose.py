"""Transposed convolution (also the input gradient of a conv), reference kernel in 3-D form."""
import numba
import numpy as np
from numba import prange

from .conv3d import check_slots
from .gemm import sgemm
from .im2col import valid_range
from .jit import kernel, parallel_kernel, u


@kernel
def conv_transpose_naive(x, w, b, y, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups):
    """The oracle, in gather form so that each output accumulates in float64.
    x [N,C_in,D,H,W], w [C_in, C_out/g, kd,kh,kw], y [N,C_out,OD,OH,OW]: output position o
    receives input i through tap k where o = i*s - p + k*d."""
    N, C, D, H, W = x.shape
    _, Kg, KD, KH, KW = w.shape
    K, OD, OH, OW = y.shape[1], y.shape[2], y.shape[3], y.shape[4]
    Cg = C // groups
    for n in range(N):
        for k in range(K):
            g = k // Kg
            kk = k - g * Kg
            bias = np.float64(b[k]) if b.size > 0 else 0.0
            for od in range(OD):
                for oh in range(OH):
                    for ow in range(OW):
                        acc = 0.0
                        for c in range(g * Cg, (g + 1) * Cg):
                            for kd in range(KD):
                                tz = od + pd - kd * dd
                                if tz < 0 or tz % sd != 0 or tz // sd >= D:
                                    continue
                                for kh in range(KH):
                                    ty = oh + ph - kh * dh
                                    if ty < 0 or ty % sh != 0 or ty // sh >= H:
                                        continue
                                    for kw in range(KW):
                                        tx = ow + pw - kw * dw
                                        if tx < 0 or tx % sw != 0 or tx // sw >= W:
                                            continue
                                        acc += np.float64(x[n, c, tz // sd, ty // sh, tx // sw]) * \
                                            np.float64(w[c, kk, kd, kh, kw])
                        y[n, k, od, oh, ow] = acc + bias


def col2im_slot_floats(out_per_group: int, k_blocks: int, taps: int, in_pixels: int) -> int:
    """Floats of one worker's columns: [ceil(out_per_group / k_blocks) * taps, in_pixels],
    where in_pixels is the GEMM input's spatial size (x of a transposed conv, dy of an
    input gradient)."""
    return -(-out_per_group // k_blocks) * taps * in_pixels


@parallel_kernel
def conv_transpose_col2im(x, w, b, y, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups, scratch, slot, k_blocks):
    """GEMM into columns + col2im. x [N, C, D, H, W], w [C, K/g, kd, kh, kw].
    Work items are (image, group, block of output channels): cols [kb*k^3, D*H*W] =
    W_g[:, block]^T @ x[n, g] in the worker's scratch slot, then every column is added into
    y at o = i*s - p + k*d. Blocks own disjoint output channels, so the overlapping
    scatter-adds of stride < kernel never race."""
    N, C, D, H, W = x.shape
    _, Kg, KD, KH, KW = w.shape
    K, OD, OH, OW = y.shape[1], y.shape[2], y.shape[3], y.shape[4]
    Cg, KK, Pin = C // groups, KD * KH * KW, D * H * W
    kb = (Kg + k_blocks - 1) // k_blocks
    check_slots(scratch, slot, kb * KK * Pin)
    items = N * groups * k_blocks
    yf = y.reshape(y.size)
    for it in prange(items):
        n = it // (groups * k_blocks)
        rest = it - n * groups * k_blocks
        g = rest // k_blocks
        k0 = (rest - g * k_blocks) * kb
        k1 = min(Kg, k0 + kb)
        if k0 >= k1:
            continue
        rows = (k1 - k0) * KK
        cols = scratch[numba.get_thread_id() * slot:][:rows * Pin].reshape(rows, Pin)
        sgemm(True, False, rows, Pin, Cg, w.ctypes.data + 4 * (g * Cg * Kg * KK + k0 * KK), Kg * KK,
              x.ctypes.data + 4 * (n * C + g * Cg) * Pin, Pin, False, cols.ctypes.data, Pin)
        cf = cols.reshape(rows * Pin)
        for kk in range(k0, k1):
            k = g * Kg + kk
            yo = (n * K + k) * OD * OH * OW
            bias = b[k] if b.size > 0 else np.float32(0.0)
            for i in range(OD * OH * OW):
                yf[u(yo + i)] = bias
            for kd in range(KD):
                for kh in range(KH):
                    for kw in range(KW):
                        row = (((kk - k0) * KD + kd) * KH + kh) * KW + kw
                        start = kw * dw - pw
                        lo, hi = valid_range(W, OW, start, sw)   # ix with 0 <= ix*sw + start < OW
                        for iz in range(D):
                            oz = iz * sd - pd + kd * dd
                            if oz < 0 or oz >= OD:
                                continue
                            for iy in range(H):
                                oy = iy * sh - ph + kh * dh
                                if oy < 0 or oy >= OH:
                                    continue
                                src = row * Pin + (iz * H + iy) * W
                                dst = yo + (oz * OH + oy) * OW + start
                                if sw == 1:
                                    for ix in range(lo, hi):
                                        yf[u(dst + ix)] += cf[u(src + ix)]
                                else:
                                    for ix in range(lo, hi):
                                        yf[u(dst + ix * sw)] += cf[u(src + ix)]
