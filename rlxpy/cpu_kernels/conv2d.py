"""Fast 2-D convolution kernels: 1x1 GEMM, direct, depthwise and Winograd F(2x2,3x3).
(The reference and im2col kernels are in 3-D form in conv3d.py and serve 2-D convs too.)"""
import numba
import numpy as np
from numba import prange

from .conv3d import fill_bias
from .gemm import sgemm
from .jit import kernel, parallel_kernel


@parallel_kernel
def conv2d_gemm1x1(x, w, b, y, tile_cols):
    """1x1, stride 1, unpadded, groups 1: y[n] = W [K, C] @ x[n] [C, HW], one GEMM per image,
    split into column tiles so that a single image still fills every core."""
    N, C = x.shape[0], x.shape[1]
    K = w.shape[0]
    P = x.shape[2] * x.shape[3]
    x3 = x.reshape(N, C, P)
    y3 = y.reshape(N, K, P)
    tiles = (P + tile_cols - 1) // tile_cols
    for it in prange(N * tiles):
        n = it // tiles
        p0 = (it - n * tiles) * tile_cols
        p1 = min(P, p0 + tile_cols)
        fill_bias(y3, n, 0, K, p0, p1, b)
        sgemm(False, False, K, p1 - p0, C, w.ctypes.data, C, x3.ctypes.data + 4 * (n * C * P + p0), P,
              True, y3.ctypes.data + 4 * (n * K * P + p0), P)


@parallel_kernel
def conv2d_direct(x, w, b, y, ph, pw, groups):
    """Stride 1, dilation 1, no column buffer: for every (input channel, tap) a contiguous
    SAXPY of an input row into an output row. Parallel over (image, output channel)."""
    N, C, H, W = x.shape
    K, Cg, KH, KW = w.shape
    OH, OW = y.shape[2], y.shape[3]
    Kg = K // groups
    for it in prange(N * K):
        n = it // K
        k = it - n * K
        c0 = (k // Kg) * Cg
        y[n, k] = b[k] if b.size > 0 else np.float32(0.0)
        for c in range(Cg):
            for kh in range(KH):
                oh_lo, oh_hi = max(0, ph - kh), min(OH, H + ph - kh)
                for kw in range(KW):
                    wv = w[k, c, kh, kw]
                    ow_lo, ow_hi = max(0, pw - kw), min(OW, W + pw - kw)
                    shift = kw - pw
                    for oh in range(oh_lo, oh_hi):
                        xrow = x[n, c0 + c, oh - ph + kh]
                        yrow = y[n, k, oh]
                        for ow in range(ow_lo, ow_hi):
                            yrow[ow] += wv * xrow[ow + shift]


@kernel
def _axis_range(O, L, start, step):
    """[lo, hi): the outputs o with 0 <= o*step + start < L."""
    lo = 0 if start >= 0 else (-start + step - 1) // step
    hi = 0 if L - start <= 0 else (L - start + step - 1) // step
    hi = min(hi, O)
    return lo, max(lo, hi)


@parallel_kernel
def conv2d_depthwise(x, w, b, y, sh, sw, ph, pw, dh, dw):
    """groups == C_in == C_out: each channel is its own single-channel conv, a few taps per
    output, so im2col (K = kh*kw) would be mostly copying. Parallel over (image, channel);
    the plane stays in L1 while every tap is added into it."""
    N, C, H, W = x.shape
    KH, KW = w.shape[2], w.shape[3]
    OH, OW = y.shape[2], y.shape[3]
    for it in prange(N * C):
        n = it // C
        c = it - n * C
        y[n, c] = b[c] if b.size > 0 else np.float32(0.0)
        for kh in range(KH):
            oh_lo, oh_hi = _axis_range(OH, H, kh * dh - ph, sh)
            for kw in range(KW):
                wv = w[c, 0, kh, kw]
                start = kw * dw - pw
                ow_lo, ow_hi = _axis_range(OW, W, start, sw)
                for oh in range(oh_lo, oh_hi):
                    xrow = x[n, c, oh * sh - ph + kh * dh]
                    yrow = y[n, c, oh]
                    if sw == 1:
                        for ow in range(ow_lo, ow_hi):
                            yrow[ow] += wv * xrow[ow + start]
                    else:
                        for ow in range(ow_lo, ow_hi):
                            yrow[ow] += wv * xrow[ow * sw + start]


# --- Winograd F(2x2, 3x3) ------------------------------------------------------------
# U = G g G^T (4x4 per filter), V = B^T d B (4x4 per input tile), M = U .* V summed over
# channels (16 GEMMs), Y = A^T M A (2x2 outputs per tile), with
#   G = [[1,0,0],[1/2,1/2,1/2],[1/2,-1/2,1/2],[0,0,1]]
#   B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]
#   A^T = [[1,1,1,0],[0,1,-1,-1]]


@parallel_kernel
def winograd_filter_transform(w, u):
    """w [K, C, 3, 3] -> u [16, K, C]."""
    K, C = w.shape[0], w.shape[1]
    for k in prange(K):
        for c in range(C):
            g = w[k, c]
            for i in range(4):
                # row i of G g, then times G^T
                if i == 0:
                    a0, a1, a2 = g[0, 0], g[0, 1], g[0, 2]
                elif i == 3:
                    a0, a1, a2 = g[2, 0], g[2, 1], g[2, 2]
                else:
                    sgn = 1.0 if i == 1 else -1.0
                    a0 = 0.5 * (g[0, 0] + sgn * g[1, 0] + g[2, 0])
                    a1 = 0.5 * (g[0, 1] + sgn * g[1, 1] + g[2, 1])
                    a2 = 0.5 * (g[0, 2] + sgn * g[1, 2] + g[2, 2])
                u[4 * i + 0, k, c] = a0
                u[4 * i + 1, k, c] = 0.5 * (a0 + a1 + a2)
                u[4 * i + 2, k, c] = 0.5 * (a0 - a1 + a2)
                u[4 * i + 3, k, c] = a2


@kernel
def _row4(xc, iy, ix0, H, W):
    """Four inputs of row iy from column ix0, zero outside the image (the padding)."""
    if iy < 0 or iy >= H:
        z = np.float32(0.0)
        return z, z, z, z
    r = xc[iy]
    if ix0 >= 0 and ix0 + 4 <= W:
        return r[ix0], r[ix0 + 1], r[ix0 + 2], r[ix0 + 3]
    v0 = r[ix0] if 0 <= ix0 < W else np.float32(0.0)
    v1 = r[ix0 + 1] if 0 <= ix0 + 1 < W else np.float32(0.0)
    v2 = r[ix0 + 2] if 0 <= ix0 + 2 < W else np.float32(0.0)
    v3 = r[ix0 + 3] if 0 <= ix0 + 3 < W else np.float32(0.0)
    return v0, v1, v2, v3


@kernel
def _bt4(a, b, c, d):
    """B^T applied to a 4-vector."""
    return a - c, b + c, c - b, b - d


@kernel
def winograd_input_tile(xc, iy0, ix0, H, W, V, ci, j):
    d0 = _row4(xc, iy0, ix0, H, W)
    d1 = _row4(xc, iy0 + 1, ix0, H, W)
    d2 = _row4(xc, iy0 + 2, ix0, H, W)
    d3 = _row4(xc, iy0 + 3, ix0, H, W)
    for col in range(4):  # B^T d: combine rows, one column at a time
        t0, t1, t2, t3 = _bt4(d0[col], d1[col], d2[col], d3[col])
        V[col, ci, j] = t0
        V[4 + col, ci, j] = t1
        V[8 + col, ci, j] = t2
        V[12 + col, ci, j] = t3
    for row in range(4):  # (B^T d) B: combine the columns of each row in place
        v0, v1, v2, v3 = _bt4(V[4 * row, ci, j], V[4 * row + 1, ci, j], V[4 * row + 2, ci, j], V[4 * row + 3, ci, j])
        V[4 * row, ci, j] = v0
        V[4 * row + 1, ci, j] = v1
        V[4 * row + 2, ci, j] = v2
        V[4 * row + 3, ci, j] = v3


@parallel_kernel
def conv2d_winograd(x, u, b, y, ph, pw, scratch, block, k_blocks):
    """3x3, stride 1, dilation 1, groups 1. Tiles of 2x2 outputs (odd sizes: the last tile is
    clipped); padding is read as zeros by the input transform, so no padded copy of x.
    Work items are (block of tiles, block of output channels); each worker transforms its
    tiles into V [16, C, B] in its scratch slot, runs 16 GEMMs M[e] = U[e] @ V[e], and
    transforms M back into y."""
    N, C, H, W = x.shape
    K = u.shape[1]
    OH, OW = y.shape[2], y.shape[3]
    TH, TW = (OH + 1) // 2, (OW + 1) // 2
    TT = TH * TW
    P = N * TT
    nblocks = (P + block - 1) // block
    kb = (K + k_blocks - 1) // k_blocks
    slot = 16 * block * (C + kb)
    for it in prange(nblocks * k_blocks):
        bi = it // k_blocks
        k0 = (it - bi * k_blocks) * kb
        k1 = min(K, k0 + kb)
        if k0 >= k1:
            continue
        KB = k1 - k0
        p0 = bi * block
        B = min(P, p0 + block) - p0
        base = numba.get_thread_id() * slot
        V = scratch[base:base + 16 * C * B].reshape(16, C, B)
        M = scratch[base + 16 * C * block:base + 16 * C * block + 16 * KB * B].reshape(16, KB, B)
        for ci in range(C):
            for j in range(B):
                p = p0 + j
                n = p // TT
                t = p - n * TT
                th = t // TW
                winograd_input_tile(x[n, ci], 2 * th - ph, 2 * (t - th * TW) - pw, H, W, V, ci, j)
        for e in range(16):
            sgemm(False, False, KB, B, C, u.ctypes.data + 4 * (e * K + k0) * C, C,
                  V.ctypes.data + 4 * e * C * B, B, False, M.ctypes.data + 4 * e * KB * B, B)
        for kk in range(KB):
            k = k0 + kk
            bias = b[k] if b.size > 0 else np.float32(0.0)
            for j in range(B):
                p = p0 + j
                n = p // TT
                t = p - n * TT
                th = t // TW
                tw = t - th * TW
                # A^T m: rows 0+1+2 and 1-2-3, then the same on columns
                r0 = (M[0, kk, j] + M[4, kk, j] + M[8, kk, j], M[1, kk, j] + M[5, kk, j] + M[9, kk, j],
                      M[2, kk, j] + M[6, kk, j] + M[10, kk, j], M[3, kk, j] + M[7, kk, j] + M[11, kk, j])
                r1 = (M[4, kk, j] - M[8, kk, j] - M[12, kk, j], M[5, kk, j] - M[9, kk, j] - M[13, kk, j],
                      M[6, kk, j] - M[10, kk, j] - M[14, kk, j], M[7, kk, j] - M[11, kk, j] - M[15, kk, j])
                oy, ox = 2 * th, 2 * tw
                y[n, k, oy, ox] = r0[0] + r0[1] + r0[2] + bias
                if ox + 1 < OW:
                    y[n, k, oy, ox + 1] = r0[1] - r0[2] - r0[3] + bias
                if oy + 1 < OH:
                    y[n, k, oy + 1, ox] = r1[0] + r1[1] + r1[2] + bias
                    if ox + 1 < OW:
                        y[n, k, oy + 1, ox + 1] = r1[1] - r1[2] - r1[3] + bias
