"""Forward convolution in 3-D form (1-D and 2-D convs run it with unit leading spatial
axes): the reference kernel and the im2col + GEMM kernel."""
import numba
import numpy as np
from numba import prange

from .gemm import sgemm
from .im2col import fill_columns
from .jit import kernel, parallel_kernel


@kernel
def conv_naive(x, w, b, y, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups):
    """The oracle. x [N,C,D,H,W], w [K,C/g,kd,kh,kw], b [K] or empty, y [N,K,OD,OH,OW];
    pd/ph/pw are the begin paddings (the end padding is implied by y's shape).
    Accumulates in float64 so that it is the most accurate kernel we have."""
    N, C, D, H, W = x.shape
    K, Cg, KD, KH, KW = w.shape
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    Kg = K // groups
    for n in range(N):
        for k in range(K):
            c0 = (k // Kg) * Cg
            bias = np.float64(b[k]) if b.size > 0 else 0.0
            for od in range(OD):
                for oh in range(OH):
                    for ow in range(OW):
                        acc = 0.0
                        for c in range(Cg):
                            for kd in range(KD):
                                iz = od * sd - pd + kd * dd
                                if iz < 0 or iz >= D:
                                    continue
                                for kh in range(KH):
                                    iy = oh * sh - ph + kh * dh
                                    if iy < 0 or iy >= H:
                                        continue
                                    for kw in range(KW):
                                        ix = ow * sw - pw + kw * dw
                                        if ix < 0 or ix >= W:
                                            continue
                                        acc += np.float64(x[n, c0 + c, iz, iy, ix]) * np.float64(w[k, c, kd, kh, kw])
                        y[n, k, od, oh, ow] = acc + bias


@kernel
def fill_bias(y3, n, k0, k1, p0, p1, b):
    """y3[n, k, p0:p1] = b[k] (or 0) for k in [k0, k1): the GEMM then accumulates on top."""
    for k in range(k0, k1):
        y3[n, k, p0:p1] = b[k] if b.size > 0 else np.float32(0.0)


def im2col_slot_floats(g3, tile_rows: int) -> int:
    """Floats of one worker's column tile: [C/g * k^3, tile_rows * OW]. g3: a ConvGeometry
    with 3 spatial axes. The planner sizes scratch with this; the kernel checks it."""
    return g3.cin_g * g3.taps * tile_rows * g3.y_shape[-1]


@kernel
def check_slots(scratch, slot, need):
    """Refuse a per-worker slot smaller than the kernel uses: numba checks no bounds, so an
    undersized slot would write into another worker's. (The caller derives the slot from
    the scratch size and the pool's worker count, so every worker has one.)"""
    if slot < need:
        raise ValueError("scratch slot is smaller than the kernel needs")


@parallel_kernel
def conv_im2col(x, w, b, y, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups, scratch, slot, tile_rows, k_blocks):
    """im2col + SGEMM. Work items are (image, group, tile of output rows, block of output
    channels), spread over numba's pool; each worker fills the columns of its tile into its
    own slot of `scratch` (cols [C/g*k^3, rows*OW], cache-sized) and runs a single-threaded
    GEMM that writes straight into its block of y (ldc = OD*OH*OW)."""
    N, C, D, H, W = x.shape
    K, Cg, KD, KH, KW = w.shape
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    Kg, CK, R = K // groups, Cg * KD * KH * KW, OD * OH
    P = R * OW
    tiles = (R + tile_rows - 1) // tile_rows
    kb = (Kg + k_blocks - 1) // k_blocks
    check_slots(scratch, slot, CK * tile_rows * OW)
    y3 = y.reshape(N, K, P)
    items = N * groups * tiles * k_blocks
    for it in prange(items):
        n = it // (groups * tiles * k_blocks)
        rest = it - n * (groups * tiles * k_blocks)
        g = rest // (tiles * k_blocks)
        rest -= g * (tiles * k_blocks)
        t = rest // k_blocks
        k0 = (rest - t * k_blocks) * kb
        k1 = min(Kg, k0 + kb)
        if k0 >= k1:
            continue
        r0 = t * tile_rows
        r1 = min(R, r0 + tile_rows)
        T = (r1 - r0) * OW
        cols = scratch[numba.get_thread_id() * slot:][:CK * T].reshape(CK, T)
        fill_columns(x, n, g * Cg, Cg, r0, r1, cols, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw, OH, OW)
        fill_bias(y3, n, g * Kg + k0, g * Kg + k1, r0 * OW, r1 * OW, b)
        sgemm(False, False, k1 - k0, T, CK, w.ctypes.data + 4 * (g * Kg + k0) * CK, CK,
              cols.ctypes.data, T, True, y3.ctypes.data + 4 * ((n * K + g * Kg + k0) * P + r0 * OW), P)
