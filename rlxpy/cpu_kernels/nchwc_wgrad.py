"""Conv2dBackwardWeight on NCHWc (algo `nchwc_wgrad`).

dw[k, c, tap] = sum over images and output pixels p of dy[n, k, p] * x[n, c, p's tap]: per
tap, a GEMM whose reduction runs over the pixels. The tile is the forward conv's micro-kernel
(nchwc._fma_6x2) with the roles swapped: 6 input channels of x broadcast, 2 vectors of V
output channels of dy, 12 accumulators. Work items are (group, pair of output blocks, 6
input channels, tap): each reduces over every pixel of every image itself, so there are no
per-worker partial sums to add. Results go by vector stores into a packed scratch
[OCB, 6 * tiles, taps, V], then to dw [K, C/groups, KH, KW] (plain: dw is a weight, not an
activation).
"""
from __future__ import annotations

from math import prod

from numba import prange

from .jit import inlined, parallel_kernel
from .nchwc import _fma_6x2, _zeros12, group_blocks
from .simd import nlanes, vload, vstore

TC = 6     # input channels per tile (broadcast operands)


def eligible(g, lanes: int):
    """None when nchwc_wgrad can run the weight gradient (the channels of a group whole
    blocks, unless there is one group), else why not."""
    if g.groups > 1 and (g.cin_g % lanes or g.cout_g % lanes):
        return f"{g.cin_g} -> {g.cout_g} channels per group are not whole blocks of {lanes}"
    return None


def waste(g, lanes: int) -> float:
    """Multiply-adds done over those needed: output channels padded to whole blocks, input
    channels to whole tiles of 6."""
    kg, cg = g.cout_g, g.cin_g
    blocks = -(-kg // lanes) * lanes if g.groups == 1 else kg
    return blocks / kg * (-(-cg // TC) * TC) / cg


def scratch_floats(g, lanes: int) -> int:
    """The packed result [OCB, 6 * tiles, taps, V]."""
    _, ocb_g = group_blocks(g, lanes)
    return ocb_g * g.groups * -(-g.cin_g // TC) * TC * prod(g.kernel) * lanes


@inlined
def _channel_offset(c, Cg, g, HWV, V):
    """Where channel c of group g (c past the group's: its channel 0, computed and dropped)
    starts within an image of blocked x, one pixel's lane."""
    gc = g * Cg + (c if c < Cg else 0)
    return (gc // V) * HWV + gc % V


@inlined
def _tile_offsets(c0, Cg, g, HWV, V):
    """_channel_offset of the tile's 6 channels c0 .. c0 + 5."""
    return (_channel_offset(c0, Cg, g, HWV, V), _channel_offset(c0 + 1, Cg, g, HWV, V),
            _channel_offset(c0 + 2, Cg, g, HWV, V), _channel_offset(c0 + 3, Cg, g, HWV, V),
            _channel_offset(c0 + 4, Cg, g, HWV, V), _channel_offset(c0 + 5, Cg, g, HWV, V))


@inlined
def _store6(a, row, step, r0, r1, r2, r3, r4, r5):
    """6 vectors to a[row], a[row + step], ... (one output block's sums for 6 channels)."""
    vstore(a, row, r0)
    vstore(a, row + step, r1)
    vstore(a, row + 2 * step, r2)
    vstore(a, row + 3 * step, r3)
    vstore(a, row + 4 * step, r4)
    vstore(a, row + 5 * step, r5)


@parallel_kernel
def wgrad(a, x0, dy0, s0, ya, y0, N, C, H, Wi, K, OH, OW, KH, KW, sh, sw, ph, pw, dh, dwl, groups, CBg, OCBg, L):
    """dw (plain [K, C/groups, KH, KW] in ya at y0) from blocked x (a at x0) and blocked dy
    (a at dy0), through the packed scratch at s0."""
    V = nlanes(L)
    Cg = C // groups
    Kg = K // groups
    CT = (Cg + TC - 1) // TC
    T = KH * KW
    pairs = (OCBg + 1) // 2
    CB = CBg * groups
    OCB = OCBg * groups
    HWV = H * Wi * V
    P = OH * OW
    for it in prange(groups * pairs * CT * T):
        V = nlanes(L)          # again inside the loop body: numba outlines it, and V must stay a constant
        t = it % T
        r = it // T
        ct = r % CT
        r //= CT
        pr = r % pairs
        g = r // pairs
        i = t // KW
        j = t - i * KW
        ob0 = g * OCBg + 2 * pr
        two = 2 * pr + 1 < OCBg
        ob1 = ob0 + 1 if two else ob0
        c0 = ct * TC
        f0, f1, f2, f3, f4, f5 = _tile_offsets(c0, Cg, g, HWV, V)
        # the output columns whose tap j lands inside x: no test in the pixel loop
        ow_lo = max(0, (pw - j * dwl + sw - 1) // sw)
        ow_hi = min(OW, (Wi - 1 + pw - j * dwl) // sw + 1)
        acc = _zeros12(L)
        for n in range(N):
            xn = x0 + n * CB * HWV
            d0 = dy0 + (n * OCB + ob0) * P * V
            d1 = dy0 + (n * OCB + ob1) * P * V
            for oh in range(OH):
                ih = oh * sh - ph + i * dh
                if ih < 0 or ih >= H:
                    continue
                px = xn + (ih * Wi + ow_lo * sw - pw + j * dwl) * V
                q = (oh * OW + ow_lo) * V
                for _ in range(ow_lo, ow_hi):
                    acc = _fma_6x2(a, px + f0, px + f1, px + f2, px + f3, px + f4, px + f5,
                                   vload(a, d0 + q, L), vload(a, d1 + q, L), acc, L)
                    px += sw * V
                    q += V
        a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51 = acc
        row0 = s0 + ((ob0 * CT * TC + c0) * T + t) * V        # channel c0's slot, output block ob0
        row1 = s0 + ((ob1 * CT * TC + c0) * T + t) * V
        step = T * V                                           # the next channel's
        _store6(a, row0, step, a00, a10, a20, a30, a40, a50)
        if two:
            _store6(a, row1, step, a01, a11, a21, a31, a41, a51)
    for k in prange(K):
        V = nlanes(L)
        g = k // Kg
        kk = k - g * Kg
        ob = g * OCBg + kk // V
        lane = kk % V
        for c in range(Cg):
            src = s0 + (ob * CT * TC + c) * T * V + lane
            dst = y0 + (k * Cg + c) * T
            for t in range(T):
                ya[dst + t] = a[src + t * V]
