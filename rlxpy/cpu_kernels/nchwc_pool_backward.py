"""MaxPool2dBackward on NCHWc (algo `nchwc_pool_backward`).

Per output pixel and V channels at once: the window's max (vmax: a NaN wins), then dy goes
to the tap that won it, lane by lane. PyTorch's rule for which tap won: ties keep the first
in scan order, but a NaN replaces any earlier value, so among NaNs the *last* wins. The
taps are walked forward for the lanes whose max is a number and backward for the lanes
whose max is NaN, each lane taking the first tap that matches (vmatch) while it is still
free. Masks are float vectors and dy is added through vselect, so an inf or NaN in dy
never leaks into lanes that do not take it. Work items are (image, channel block): a
block's gradient lands only in its own plane, and windows of one plane overlap.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from .jit import inlined, parallel_kernel
from .nchwc import window_taps
from .simd import nlanes, vadd, vload, vmatch, vmax, vmul, vselect, vsplat, vstore, vsub, vzero


@inlined
def _give(a, xb, db, row_off, col_off, m, g, free, wanted, L):
    """One tap (at xb + row_off + col_off): lanes still free whose wanted mask is set and
    whose x matches the max m take dy (g); returns what stays free."""
    hit = vmul(vmul(vmatch(vload(a, xb + row_off + col_off, L), m), free), wanted)
    vstore(a, db + row_off + col_off, vselect(hit, vadd(vload(a, db + row_off + col_off, L), g),
                                              vload(a, db + row_off + col_off, L)))
    return vsub(free, hit)


@parallel_kernel
def max_pool_backward(a, x0, dy0, dx0, C, N, H, Wi, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, L):
    """dx (blocked, at dx0) = 0, then every window's dy (blocked, at dy0) added to the tap
    of blocked x (at x0) that won its max."""
    CB = (C + nlanes(L) - 1) // nlanes(L)
    for q in prange(N * CB):
        V = nlanes(L)
        xb = x0 + q * H * Wi * V
        db = dx0 + q * H * Wi * V
        yb = dy0 + q * OH * OW * V
        zero = vzero(L)
        for p in range(H * Wi):
            vstore(a, db + p * V, zero)
        one = vsplat(np.float32(1.0), L)
        nan = vsplat(np.float32(np.nan), L)
        for oh in range(OH):
            ih0 = oh * sh - ph
            for ow in range(OW):
                iw0 = ow * sw - pw
                i_lo, i_hi, j_lo, j_hi = window_taps(ih0, iw0, H, Wi, KH, KW, dh, dw)
                m = vsplat(-np.inf, L)
                for i in range(i_lo, i_hi):
                    for j in range(j_lo, j_hi):
                        m = vmax(vload(a, xb + ((ih0 + i * dh) * Wi + iw0 + j * dw) * V, L), m)
                g = vload(a, yb + (oh * OW + ow) * V, L)
                is_nan = vmatch(m, nan)
                free = one
                for i in range(i_lo, i_hi):              # numbers: the first match
                    for j in range(j_lo, j_hi):
                        free = _give(a, xb, db, (ih0 + i * dh) * Wi * V, (iw0 + j * dw) * V, m, g, free,
                                     vsub(one, is_nan), L)
                free = one
                for i in range(i_hi - 1, i_lo - 1, -1):  # NaN: the last
                    for j in range(j_hi - 1, j_lo - 1, -1):
                        free = _give(a, xb, db, (ih0 + i * dh) * Wi * V, (iw0 + j * dw) * V, m, g, free, is_nan, L)
