"""simd_direct: a register-tiled direct convolution on explicit vectors (simd.py), for
stride-1 convs (any kernel, dilation, groups, padding) on plain NCHW.

A tile is KB = 6 output channels x 2 vectors of output pixels along a row: 12
accumulators, 2 vector loads of x and 6 broadcast weights per tap and input channel. That
fills 15 of the 16 ymm registers of AVX2 and leaves room on AVX-512's 32.

Borders: x is first copied into a zero-bordered plane per (image, channel) in the thunk's
scratch, wide enough that every load of a tile is a whole vector, so the inner loop has no
edge cases; the last tile of a row stores only its live lanes. Weights are packed once
per arena into [group, block of KB channels, C/g, kh, kw, KB] (zeros past a group's last
channel).
"""
import numpy as np
from numba import prange

from .jit import kernel, parallel_kernel
from .simd import nlanes, vadd, vfma, vload, vsplat, vstore, vstore_tail, vzero

KB = 6   # output channels per tile: with 2 pixel vectors, 12 accumulators (15 of AVX2's 16 registers)


def padded_plane(g, width: int):
    """(Hp, Wp) of the zero-bordered copy of one input plane."""
    (oh, ow), (kh, kw), (dh, dw) = g.y_shape[2:], g.kernel, g.dilation
    chunks = -(-ow // (2 * width))
    return oh + dh * (kh - 1), chunks * 2 * width + dw * (kw - 1)


def scratch_floats(g, width: int) -> int:
    """The zero-bordered copy of x: [N, C, Hp, Wp]."""
    hp, wp = padded_plane(g, width)
    return g.x_shape[0] * g.x_shape[1] * hp * wp


def packed_weight_floats(g) -> int:
    return g.groups * -(-g.cout_g // KB) * g.cin_g * g.taps * KB


def eligible(g):
    """None when simd_direct can run the conv, else why not."""
    if g.spatial_rank != 2:
        return f"{g.spatial_rank}-D"
    if any(s != 1 for s in g.stride):
        return f"stride {tuple(g.stride)}"
    return None


@parallel_kernel
def pack_weights(w, wp, groups):
    """w [K, Cg, KH, KW] -> wp [groups, kblocks, Cg, KH, KW, KB]."""
    K, Cg, KH, KW = w.shape
    Kg = K // groups
    kblocks = (Kg + KB - 1) // KB
    wf = wp.reshape(wp.size)
    for gb in prange(groups * kblocks):
        g = gb // kblocks
        kb = gb - g * kblocks
        for c in range(Cg):
            for i in range(KH):
                for j in range(KW):
                    base = (((gb * Cg + c) * KH + i) * KW + j) * KB
                    for t in range(KB):
                        k = kb * KB + t
                        wf[base + t] = w[g * Kg + k, c, i, j] if k < Kg else np.float32(0.0)


@parallel_kernel
def pad_input(x, xp, Hp, Wp, ph, pw):
    """The zero-bordered planes: xp[n, c, ph + i, pw + j] = x[n, c, i, j], zeros elsewhere."""
    N, C, H, Wd = x.shape
    xf = xp.reshape(xp.size)
    for nc in prange(N * C):
        n = nc // C
        c = nc - n * C
        base = nc * Hp * Wp
        for i in range(Hp * Wp):
            xf[base + i] = 0.0
        for i in range(H):
            row = base + (ph + i) * Wp + pw
            for j in range(Wd):
                xf[row + j] = x[n, c, i, j]


@kernel
def _store_pair(yf, o, a0, a1, bias, live, L):
    """Two accumulators (+ bias) to y at o: 2W pixels, or the first `live` of them."""
    W = nlanes(L)
    bv = vsplat(bias, L)
    a0 = vadd(a0, bv)
    a1 = vadd(a1, bv)
    if live >= 2 * W:
        vstore(yf, o, a0)
        vstore(yf, o + W, a1)
    elif live > W:
        vstore(yf, o, a0)
        vstore_tail(yf, o + W, a1, live - W)
    else:
        vstore_tail(yf, o, a0, live)


@parallel_kernel
def conv2d_simd_direct(xp, wp, b, y, Hp, Wp, dh, dw, groups, Cg, KH, KW, L):
    """y [N, K, OH, OW] from the padded planes xp [N, C, Hp, Wp] and packed weights;
    L = simd.lanes(W). Work items are (image, group, block of KB channels, output row)."""
    W = nlanes(L)
    N, K, OH, OW = y.shape
    C = Cg * groups
    Kg = K // groups
    kblocks = (Kg + KB - 1) // KB
    xf = xp.reshape(xp.size)
    wf = wp.reshape(wp.size)
    yf = y.reshape(y.size)
    has_bias = b.size > 0
    for it in prange(N * groups * kblocks * OH):
        oh = it % OH
        rest = it // OH
        kb = rest % kblocks
        rest //= kblocks
        g = rest % groups
        n = rest // groups
        gb = g * kblocks + kb
        k0 = g * Kg + kb * KB
        nk = min(KB, Kg - kb * KB)
        for ow0 in range(0, OW, 2 * W):
            a00, a01, a10, a11, a20, a21 = vzero(L), vzero(L), vzero(L), vzero(L), vzero(L), vzero(L)
            a30, a31, a40, a41, a50, a51 = vzero(L), vzero(L), vzero(L), vzero(L), vzero(L), vzero(L)
            for c in range(Cg):
                plane = (n * C + g * Cg + c) * Hp
                for i in range(KH):
                    row = (plane + oh + i * dh) * Wp + ow0
                    wrow = ((gb * Cg + c) * KH + i) * KW * KB
                    for j in range(KW):
                        xo = row + j * dw
                        x0 = vload(xf, xo, L)
                        x1 = vload(xf, xo + W, L)
                        wo = wrow + j * KB
                        w = vsplat(wf[wo], L)
                        a00 = vfma(w, x0, a00)
                        a01 = vfma(w, x1, a01)
                        w = vsplat(wf[wo + 1], L)
                        a10 = vfma(w, x0, a10)
                        a11 = vfma(w, x1, a11)
                        w = vsplat(wf[wo + 2], L)
                        a20 = vfma(w, x0, a20)
                        a21 = vfma(w, x1, a21)
                        w = vsplat(wf[wo + 3], L)
                        a30 = vfma(w, x0, a30)
                        a31 = vfma(w, x1, a31)
                        w = vsplat(wf[wo + 4], L)
                        a40 = vfma(w, x0, a40)
                        a41 = vfma(w, x1, a41)
                        w = vsplat(wf[wo + 5], L)
                        a50 = vfma(w, x0, a50)
                        a51 = vfma(w, x1, a51)
            live = OW - ow0
            o = ((n * K + k0) * OH + oh) * OW + ow0
            step = OH * OW
            _store_pair(yf, o, a00, a01, b[k0] if has_bias else np.float32(0.0), live, L)
            if nk > 1:
                _store_pair(yf, o + step, a10, a11, b[k0 + 1] if has_bias else np.float32(0.0), live, L)
            if nk > 2:
                _store_pair(yf, o + 2 * step, a20, a21, b[k0 + 2] if has_bias else np.float32(0.0), live, L)
            if nk > 3:
                _store_pair(yf, o + 3 * step, a30, a31, b[k0 + 3] if has_bias else np.float32(0.0), live, L)
            if nk > 4:
                _store_pair(yf, o + 4 * step, a40, a41, b[k0 + 4] if has_bias else np.float32(0.0), live, L)
            if nk > 5:
                _store_pair(yf, o + 5 * step, a50, a51, b[k0 + 5] if has_bias else np.float32(0.0), live, L)
