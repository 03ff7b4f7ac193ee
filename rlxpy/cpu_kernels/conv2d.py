"""Fast 2-D convolution kernels: 1x1 GEMM, direct, depthwise and Winograd F(2x2,3x3).
(The reference and im2col kernels are in 3-D form in conv3d.py and serve 2-D convs too.)"""
import numba
import numpy as np
from numba import prange

from .conv3d import check_slots, fill_bias
from .gemm import sgemm
from .im2col import valid_range
from .jit import kernel, parallel_kernel, u


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
    xf, yf, wf = x.reshape(x.size), y.reshape(y.size), w.reshape(w.size)
    for it in prange(N * K):
        n = it // K
        k = it - n * K
        c0 = (k // Kg) * Cg
        yo = it * OH * OW
        bias = b[k] if b.size > 0 else np.float32(0.0)
        for i in range(OH * OW):
            yf[u(yo + i)] = bias
        for c in range(Cg):
            xo = (n * C + c0 + c) * H * W
            for kh in range(KH):
                for kw in range(KW):
                    wv = wf[u(((k * Cg + c) * KH + kh) * KW + kw)]
                    ow_lo, ow_hi = max(0, pw - kw), min(OW, W + pw - kw)
                    for oh in range(max(0, ph - kh), min(OH, H + ph - kh)):
                        yrow = yo + oh * OW
                        xrow = xo + (oh - ph + kh) * W + kw - pw      # + ow >= 0 for ow >= ow_lo
                        for ow in range(ow_lo, ow_hi):
                            yf[u(yrow + ow)] += wv * xf[u(xrow + ow)]


@kernel
def _row_taps3(yf, xf, wf, wbase, yrow, xrow, pw, ow_from, ow_to, W):
    """Taps kw = 0..2 of one output row for outputs [ow_from, ow_to), each tested against the
    row's ends (the clipped columns): output ow reads input column ow - pw + kw."""
    for ow in range(ow_from, ow_to):
        for kw in range(3):
            ix = ow - pw + kw
            if 0 <= ix < W:
                yf[u(yrow + ow)] += wf[u(wbase + kw)] * xf[u(xrow + pw + ix)]


@kernel
def _point(xf, wf, xo, wbase, oh, ow, H, W, KH, KW, sh, sw, ph, pw, dh, dw):
    """One output of a single-channel conv, every tap tested against the image (borders)."""
    acc = np.float32(0.0)
    for kh in range(KH):
        iy = oh * sh - ph + kh * dh
        if 0 <= iy < H:
            for kw in range(KW):
                ix = ow * sw - pw + kw * dw
                if 0 <= ix < W:
                    acc += wf[u(wbase + kh * KW + kw)] * xf[u(xo + iy * W + ix)]
    return acc


@kernel
def _plane3x3(xf, yf, wf, xo, yo, wbase, bias, H, W, OH, OW, ph, pw):
    """A 3x3, stride-1, dilation-1 plane. Columns whose three taps lie inside the row are
    computed a row at a time: all nine taps fused where the three input rows exist, the
    existing rows' taps added in turn on the top and bottom rows; the clipped columns at
    both ends (at most two a row) tap by tap."""
    w0, w1, w2 = wf[u(wbase)], wf[u(wbase + 1)], wf[u(wbase + 2)]
    w3, w4, w5 = wf[u(wbase + 3)], wf[u(wbase + 4)], wf[u(wbase + 5)]
    w6, w7, w8 = wf[u(wbase + 6)], wf[u(wbase + 7)], wf[u(wbase + 8)]
    c_lo, c_hi = valid_range(OW, W - 2, -pw, 1)
    for oh in range(OH):
        yr = yo + oh * OW
        k_lo, k_hi = valid_range(3, H, oh - ph, 1)     # kernel rows that fall inside the image
        r0 = xo + (oh - ph) * W - pw                    # + kh*W + ow >= 0 for valid kh, ow >= c_lo
        if k_lo == 0 and k_hi == 3:
            r1 = r0 + W
            r2 = r1 + W
            for ow in range(c_lo, c_hi):
                yf[u(yr + ow)] = bias + (w0 * xf[u(r0 + ow)] + w1 * xf[u(r0 + ow + 1)] + w2 * xf[u(r0 + ow + 2)] +
                                         w3 * xf[u(r1 + ow)] + w4 * xf[u(r1 + ow + 1)] + w5 * xf[u(r1 + ow + 2)] +
                                         w6 * xf[u(r2 + ow)] + w7 * xf[u(r2 + ow + 1)] + w8 * xf[u(r2 + ow + 2)])
        else:
            for ow in range(c_lo, c_hi):
                yf[u(yr + ow)] = bias
            for kh in range(k_lo, k_hi):
                a, b_, c = wf[u(wbase + 3 * kh)], wf[u(wbase + 3 * kh + 1)], wf[u(wbase + 3 * kh + 2)]
                r = r0 + kh * W
                for ow in range(c_lo, c_hi):
                    yf[u(yr + ow)] += a * xf[u(r + ow)] + b_ * xf[u(r + ow + 1)] + c * xf[u(r + ow + 2)]
        for ow in range(min(c_lo, OW)):
            yf[u(yr + ow)] = bias + _point(xf, wf, xo, wbase, oh, ow, H, W, 3, 3, 1, 1, ph, pw, 1, 1)
        for ow in range(max(c_lo, c_hi), OW):
            yf[u(yr + ow)] = bias + _point(xf, wf, xo, wbase, oh, ow, H, W, 3, 3, 1, 1, ph, pw, 1, 1)


@parallel_kernel
def conv2d_depthwise(x, w, b, y, sh, sw, ph, pw, dh, dw, groups):
    """One input channel per group (C_in/groups == 1: depthwise, with any channel multiplier,
    and single-channel inputs): every output plane is a single-channel conv with a few taps,
    so im2col (K = kh*kw) would be mostly copying. Parallel over (image, output channel).
    3x3 stride-1 planes fuse all nine taps (the MobileNet case: 4x faster than adding tap
    by tap); other planes stay in L1 while the taps are added into them, three at a time
    along a row when the kernel is 3 wide at stride 1."""
    N, C, H, W = x.shape
    K, _, KH, KW = w.shape
    OH, OW = y.shape[2], y.shape[3]
    Kg = K // groups
    xf, yf, wf = x.reshape(x.size), y.reshape(y.size), w.reshape(w.size)
    for it in prange(N * K):
        n = it // K
        k = it - n * K
        xo, yo = (n * C + k // Kg) * H * W, it * OH * OW
        bias = b[k] if b.size > 0 else np.float32(0.0)
        if KH == 3 and KW == 3 and sh == 1 and sw == 1 and dh == 1 and dw == 1:
            _plane3x3(xf, yf, wf, xo, yo, k * 9, bias, H, W, OH, OW, ph, pw)
            continue
        for i in range(OH * OW):
            yf[u(yo + i)] = bias
        for kh in range(KH):
            oh_lo, oh_hi = valid_range(OH, H, kh * dh - ph, sh)
            if KW == 3 and sw == 1 and dw == 1:
                w0, w1, w2 = wf[u((k * KH + kh) * 3)], wf[u((k * KH + kh) * 3 + 1)], wf[u((k * KH + kh) * 3 + 2)]
                lo, hi = valid_range(OW, W - 2, -pw, 1)       # all three taps inside the row
                for oh in range(oh_lo, oh_hi):
                    yrow = yo + oh * OW
                    xrow = xo + (oh * sh - ph + kh * dh) * W - pw   # + ow >= 0 for ow >= lo
                    for ow in range(lo, hi):
                        yf[u(yrow + ow)] += w0 * xf[u(xrow + ow)] + w1 * xf[u(xrow + ow + 1)] + w2 * xf[u(xrow + ow + 2)]
                    _row_taps3(yf, xf, wf, (k * KH + kh) * 3, yrow, xrow, pw, 0, min(lo, OW), W)
                    _row_taps3(yf, xf, wf, (k * KH + kh) * 3, yrow, xrow, pw, max(lo, hi), OW, W)
                continue
            for kw in range(KW):
                wv = wf[u((k * KH + kh) * KW + kw)]
                start = kw * dw - pw
                ow_lo, ow_hi = valid_range(OW, W, start, sw)
                for oh in range(oh_lo, oh_hi):
                    yrow = yo + oh * OW
                    xrow = xo + (oh * sh - ph + kh * dh) * W + start   # + ow*sw >= 0 for ow >= ow_lo
                    if sw == 1:
                        for ow in range(ow_lo, ow_hi):
                            yf[u(yrow + ow)] += wv * xf[u(xrow + ow)]
                    else:
                        for ow in range(ow_lo, ow_hi):
                            yf[u(yrow + ow)] += wv * xf[u(xrow + ow * sw)]


# --- Winograd F(2x2, 3x3) ------------------------------------------------------------
# U = G g G^T (4x4 per filter), V = B^T d B (4x4 per input tile), M = U .* V summed over
# channels (16 GEMMs), Y = A^T M A (2x2 outputs per tile), with
#   G = [[1,0,0],[1/2,1/2,1/2],[1/2,-1/2,1/2],[0,0,1]]
#   B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]
#   A^T = [[1,1,1,0],[0,1,-1,-1]]


def winograd_slot_floats(c: int, k: int, block: int, k_blocks: int) -> int:
    """Floats of one worker's slot: V [16, C, block] then M [16, ceil(K/k_blocks), block]."""
    return 16 * block * (c + -(-k // k_blocks))


def winograd_filter_floats(c: int, k: int) -> int:
    """Floats of the transformed filters U [16, K, C] (persistent per arena for a param)."""
    return 16 * k * c


@parallel_kernel
def winograd_filter_transform(w, U):
    """w [K, C, 3, 3] -> U [16, K, C]."""
    K, C = w.shape[0], w.shape[1]
    for k in prange(K):
        for c in range(C):
            for i in range(4):
                # row i of G g, then times G^T
                if i == 0:
                    a0, a1, a2 = w[k, c, 0, 0], w[k, c, 0, 1], w[k, c, 0, 2]
                elif i == 3:
                    a0, a1, a2 = w[k, c, 2, 0], w[k, c, 2, 1], w[k, c, 2, 2]
                else:
                    sgn = np.float32(1.0 if i == 1 else -1.0)
                    a0 = np.float32(0.5) * (w[k, c, 0, 0] + sgn * w[k, c, 1, 0] + w[k, c, 2, 0])
                    a1 = np.float32(0.5) * (w[k, c, 0, 1] + sgn * w[k, c, 1, 1] + w[k, c, 2, 1])
                    a2 = np.float32(0.5) * (w[k, c, 0, 2] + sgn * w[k, c, 1, 2] + w[k, c, 2, 2])
                U[4 * i + 0, k, c] = a0
                U[4 * i + 1, k, c] = 0.5 * (a0 + a1 + a2)
                U[4 * i + 2, k, c] = 0.5 * (a0 - a1 + a2)
                U[4 * i + 3, k, c] = a2


@kernel
def _row4(xf, plane, iy, ix0, H, W):
    """Four inputs of row iy from column ix0 of the plane at flat offset `plane`, zero outside
    the image (the padding)."""
    z = np.float32(0.0)
    if iy < 0 or iy >= H:
        return z, z, z, z
    o = plane + iy * W + ix0
    if ix0 >= 0 and ix0 + 4 <= W:
        return xf[u(o)], xf[u(o + 1)], xf[u(o + 2)], xf[u(o + 3)]
    v0 = xf[u(o)] if 0 <= ix0 < W else z
    v1 = xf[u(o + 1)] if 0 <= ix0 + 1 < W else z
    v2 = xf[u(o + 2)] if 0 <= ix0 + 2 < W else z
    v3 = xf[u(o + 3)] if 0 <= ix0 + 3 < W else z
    return v0, v1, v2, v3


@kernel
def _bt4(a, b, c, d):
    """B^T applied to a 4-vector."""
    return a - c, b + c, c - b, b - d


@kernel
def winograd_input_tile(xf, plane, iy0, ix0, H, W, Vf, e_stride, at):
    """V[e, ci, j] = (B^T d B)[e] for the 4x4 input patch d at (iy0, ix0); Vf is V flat,
    `at` is ci*B + j and e_stride is C*B."""
    d0 = _row4(xf, plane, iy0, ix0, H, W)
    d1 = _row4(xf, plane, iy0 + 1, ix0, H, W)
    d2 = _row4(xf, plane, iy0 + 2, ix0, H, W)
    d3 = _row4(xf, plane, iy0 + 3, ix0, H, W)
    t0 = _bt4(d0[0], d1[0], d2[0], d3[0])   # B^T d, column by column
    t1 = _bt4(d0[1], d1[1], d2[1], d3[1])
    t2 = _bt4(d0[2], d1[2], d2[2], d3[2])
    t3 = _bt4(d0[3], d1[3], d2[3], d3[3])
    for row in range(4):                    # then times B, row by row
        v = _bt4(t0[row], t1[row], t2[row], t3[row])
        for col in range(4):
            Vf[u((4 * row + col) * e_stride + at)] = v[col]


@kernel
def _input_tile_interior(xf, o, W, Vf, es, at):
    """winograd_input_tile for a patch wholly inside the image (o: flat offset of its top-left):
    no bounds tests, so the 16 loads and 16 stores are straight-line code."""
    a0, a1, a2, a3 = xf[u(o)], xf[u(o + 1)], xf[u(o + 2)], xf[u(o + 3)]
    o += W
    b0, b1, b2, b3 = xf[u(o)], xf[u(o + 1)], xf[u(o + 2)], xf[u(o + 3)]
    o += W
    c0, c1, c2, c3 = xf[u(o)], xf[u(o + 1)], xf[u(o + 2)], xf[u(o + 3)]
    o += W
    d0, d1, d2, d3 = xf[u(o)], xf[u(o + 1)], xf[u(o + 2)], xf[u(o + 3)]
    # B^T d: rows (a - c, b + c, c - b, b - d)
    p0, p1, p2, p3 = a0 - c0, a1 - c1, a2 - c2, a3 - c3
    q0, q1, q2, q3 = b0 + c0, b1 + c1, b2 + c2, b3 + c3
    r0, r1, r2, r3 = c0 - b0, c1 - b1, c2 - b2, c3 - b3
    s0, s1, s2, s3 = b0 - d0, b1 - d1, b2 - d2, b3 - d3
    # ... times B: the same combination along each row
    Vf[u(at)], Vf[u(es + at)], Vf[u(2 * es + at)], Vf[u(3 * es + at)] = p0 - p2, p1 + p2, p2 - p1, p1 - p3
    Vf[u(4 * es + at)], Vf[u(5 * es + at)], Vf[u(6 * es + at)], Vf[u(7 * es + at)] = q0 - q2, q1 + q2, q2 - q1, q1 - q3
    Vf[u(8 * es + at)], Vf[u(9 * es + at)], Vf[u(10 * es + at)], Vf[u(11 * es + at)] = r0 - r2, r1 + r2, r2 - r1, r1 - r3
    Vf[u(12 * es + at)], Vf[u(13 * es + at)], Vf[u(14 * es + at)], Vf[u(15 * es + at)] = s0 - s2, s1 + s2, s2 - s1, s1 - s3


@parallel_kernel
def conv2d_winograd(x, U, b, y, ph, pw, scratch, slot, block, k_blocks):
    """3x3, stride 1, dilation 1, groups 1. Tiles of 2x2 outputs (odd sizes: the last tile is
    clipped); padding is read as zeros by the input transform, so no padded copy of x.
    Work items are (block of tiles, block of output channels); each worker transforms its
    tiles into V [16, C, B] in its scratch slot, runs 16 GEMMs M[e] = U[e] @ V[e], and
    transforms M back into y."""
    N, C, H, W = x.shape
    K = U.shape[1]
    OH, OW = y.shape[2], y.shape[3]
    TH, TW = (OH + 1) // 2, (OW + 1) // 2
    TT = TH * TW
    P = N * TT
    nblocks = (P + block - 1) // block
    kb = (K + k_blocks - 1) // k_blocks
    check_slots(scratch, slot, 16 * block * (C + kb))
    xf, yf = x.reshape(x.size), y.reshape(y.size)
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
        V = scratch[base:base + 16 * C * B]
        M = scratch[base + 16 * C * block:base + 16 * C * block + 16 * KB * B].reshape(16, KB, B)
        for ci in range(C):
            j = 0
            while j < B:  # one run of tiles of the same tile row at a time
                p = p0 + j
                n = p // TT
                t = p - n * TT
                th = t // TW
                tw0 = t - th * TW
                run = min(B - j, TW - tw0)
                plane = (n * C + ci) * H * W
                iy0 = 2 * th - ph
                inside_rows = iy0 >= 0 and iy0 + 4 <= H
                for r in range(run):
                    ix0 = 2 * (tw0 + r) - pw
                    if inside_rows and ix0 >= 0 and ix0 + 4 <= W:
                        _input_tile_interior(xf, plane + iy0 * W + ix0, W, V, C * B, ci * B + j + r)
                    else:
                        winograd_input_tile(xf, plane, iy0, ix0, H, W, V, C * B, ci * B + j + r)
                j += run
        for e in range(16):
            sgemm(False, False, KB, B, C, U.ctypes.data + 4 * (e * K + k0) * C, C,
                  V.ctypes.data + 4 * e * C * B, B, False, M.ctypes.data + 4 * e * KB * B, B)
        Mf = M.reshape(16 * KB * B)
        es = KB * B     # M[e, kk, j] = Mf[e*es + kk*B + j]
        for kk in range(KB):
            k = k0 + kk
            bias = b[k] if b.size > 0 else np.float32(0.0)
            for j in range(B):
                p = p0 + j
                n = p // TT
                t = p - n * TT
                th = t // TW
                tw = t - th * TW
                m = kk * B + j
                # A^T m: rows 0+1+2 and 1-2-3 (e = 4*row + col), then the same on columns
                r0 = (Mf[u(m)] + Mf[u(m + 4 * es)] + Mf[u(m + 8 * es)],
                      Mf[u(m + es)] + Mf[u(m + 5 * es)] + Mf[u(m + 9 * es)],
                      Mf[u(m + 2 * es)] + Mf[u(m + 6 * es)] + Mf[u(m + 10 * es)],
                      Mf[u(m + 3 * es)] + Mf[u(m + 7 * es)] + Mf[u(m + 11 * es)])
                r1 = (Mf[u(m + 4 * es)] - Mf[u(m + 8 * es)] - Mf[u(m + 12 * es)],
                      Mf[u(m + 5 * es)] - Mf[u(m + 9 * es)] - Mf[u(m + 13 * es)],
                      Mf[u(m + 6 * es)] - Mf[u(m + 10 * es)] - Mf[u(m + 14 * es)],
                      Mf[u(m + 7 * es)] - Mf[u(m + 11 * es)] - Mf[u(m + 15 * es)])
                oy, ox = 2 * th, 2 * tw
                o = ((n * K + k) * OH + oy) * OW + ox
                yf[u(o)] = r0[0] + r0[1] + r0[2] + bias
                if ox + 1 < OW:
                    yf[u(o + 1)] = r0[1] - r0[2] - r0[3] + bias
                if oy + 1 < OH:
                    yf[u(o + OW)] = r1[0] + r1[1] + r1[2] + bias
                    if ox + 1 < OW:
                        yf[u(o + OW + 1)] = r1[1] - r1[2] - r1[3] + bias
