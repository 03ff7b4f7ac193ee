"""Conv2dBackwardWeight on NCHWc (algo `nchwc_wgrad`).

dw[k, c, tap] = sum over images and output pixels p of dy[n, k, p] * x[n, c, p's tap]: per
tap, a GEMM whose reduction runs over the pixels. The tile is the forward conv's micro-kernel
(nchwc._fma_6x2) with the roles swapped: 6 input channels of x broadcast, 2 vectors of V
output channels of dy, 12 accumulators. Work items are (group, pair of output blocks, 6
input channels, tap), each owned by one worker (so there are no partial sums to add), which
takes the pixels a few rows at a time through all its items (wgrad). Results go by vector stores into a packed scratch
[OCB, 6 * tiles, taps, V], then to dw [K, C/groups, KH, KW] (plain: dw is a weight, not an
activation).

x is only ever broadcast a float at a time, so it is read blocked or plain alike (its
channel offsets and pixel step differ): a graph input x is read where the caller holds it,
with no copy or reorder (64 -> 64 @56 at batch 8 on a 2-core Xeon: the run 6.1 -> 5.2 ms).
dy stays blocked (its vectors run over output channels).
"""
from __future__ import annotations

from math import prod

from numba import prange

from .jit import inlined, parallel_kernel
from .nchwc import _fma_6x2, _zeros12, group_blocks
from .simd import nlanes, vload, vstore

TC = 6     # input channels per tile (broadcast operands)
ROWS = 4   # output rows a worker takes through all its work items at a time (see chunk_rows)
# ... unless a worker's items' accumulators (12 vectors each) outgrow this: they are loaded
# and stored once per chunk, and from L3 they cost more than x and dy rows re-read from L2
# (256 -> 256 @14, 1548 items a worker: 1.3 -> 1.4 ms with ROWS)
ACC_BYTES = 512 * 1024


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
def _channel_offset(c, Cg, g, HWV, V, plain):
    """Where channel c of group g (c past the group's: its channel 0, computed and dropped)
    starts within an image of x, one pixel's lane when x is blocked (HWV: a block's floats),
    its plane when plain (HWV: a plane's floats)."""
    gc = g * Cg + (c if c < Cg else 0)
    return gc * HWV if plain else (gc // V) * HWV + gc % V


@inlined
def _tile_offsets(c0, Cg, g, HWV, V, plain):
    """_channel_offset of the tile's 6 channels c0 .. c0 + 5."""
    return (_channel_offset(c0, Cg, g, HWV, V, plain), _channel_offset(c0 + 1, Cg, g, HWV, V, plain),
            _channel_offset(c0 + 2, Cg, g, HWV, V, plain), _channel_offset(c0 + 3, Cg, g, HWV, V, plain),
            _channel_offset(c0 + 4, Cg, g, HWV, V, plain), _channel_offset(c0 + 5, Cg, g, HWV, V, plain))


@inlined
def _store6(a, row, step, r0, r1, r2, r3, r4, r5):
    """6 vectors to a[row], a[row + step], ... (one output block's sums for 6 channels)."""
    vstore(a, row, r0)
    vstore(a, row + step, r1)
    vstore(a, row + 2 * step, r2)
    vstore(a, row + 3 * step, r3)
    vstore(a, row + 4 * step, r4)
    vstore(a, row + 5 * step, r5)


def chunk_rows(g, lanes: int, workers: int) -> int:
    """Output rows a worker takes through all its items at a time: ROWS, or a whole image
    where its items' accumulators would outgrow ACC_BYTES."""
    _, ocb_g = group_blocks(g, lanes)
    n_items = g.groups * -(-ocb_g // 2) * -(-g.cin_g // TC) * prod(g.kernel)
    acc = -(-n_items // workers) * 12 * lanes * 4
    return ROWS if acc <= ACC_BYTES else g.y_shape[2]


@inlined
def _load6(a, row, step, L):
    return (vload(a, row, L), vload(a, row + step, L), vload(a, row + 2 * step, L), vload(a, row + 3 * step, L),
            vload(a, row + 4 * step, L), vload(a, row + 5 * step, L))


@parallel_kernel
def wgrad(a, xa, x0, dy0, s0, ya, y0, N, C, H, Wi, K, OH, OW, KH, KW, sh, sw, ph, pw, dh, dwl, groups, CBg, OCBg,
          workers, rows, x_plain, L):
    """dw (plain [K, C/groups, KH, KW] in ya at y0) from x (xa at x0: blocked, or plain
    [N, C, H, W] when x_plain; xa is a, or a graph input's own array) and blocked dy (a at
    dy0), through the packed scratch at s0. Each of `workers` threads owns a run of
    work items (their scratch slots are its own: no partial sums to add) and goes through
    the pixels `rows` output rows at a time (chunk_rows), every one of its items over those
    rows before the next: the rows' x and dy stay in its L2, where an item reducing over all
    pixels at once streamed x and dy from L3 once per item (64 -> 64 @56 at batch 8, 16
    lanes: 198 items, 1 GB read; 317 -> 432 GFLOP/s on a Zen5)."""
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
    ps = 1 if x_plain else V                  # one pixel of x to the next
    cs = H * Wi if x_plain else HWV           # _channel_offset's stride
    image = C * H * Wi if x_plain else CB * HWV
    n_items = groups * pairs * CT * T
    per = (n_items + workers - 1) // workers
    for wk in prange(workers):
        V = nlanes(L)          # again inside the loop body: numba outlines it, and V must stay a constant
        first = True
        for n in range(N):
            xn = x0 + n * image
            for oh0 in range(0, OH, rows):
                for it in range(wk * per, min(n_items, wk * per + per)):
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
                    row0 = s0 + ((ob0 * CT * TC + c0) * T + t) * V      # channel c0's slot, block ob0
                    row1 = s0 + ((ob1 * CT * TC + c0) * T + t) * V
                    step = T * V                                       # the next channel's
                    if first:
                        acc = _zeros12(L)
                    else:
                        a00, a10, a20, a30, a40, a50 = _load6(a, row0, step, L)
                        a01, a11, a21, a31, a41, a51 = _load6(a, row1, step, L)
                        acc = (a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51)
                    f0, f1, f2, f3, f4, f5 = _tile_offsets(c0, Cg, g, cs, V, x_plain)
                    # the output columns whose tap j lands inside x: no test in the pixel loop
                    ow_lo = max(0, (pw - j * dwl + sw - 1) // sw)
                    ow_hi = min(OW, (Wi - 1 + pw - j * dwl) // sw + 1)
                    d0 = dy0 + (n * OCB + ob0) * P * V
                    d1 = dy0 + (n * OCB + ob1) * P * V
                    for oh in range(oh0, min(OH, oh0 + rows)):
                        ih = oh * sh - ph + i * dh
                        if ih < 0 or ih >= H:
                            continue
                        px = xn + (ih * Wi + ow_lo * sw - pw + j * dwl) * ps
                        q = (oh * OW + ow_lo) * V
                        for _ in range(ow_lo, ow_hi):
                            acc = _fma_6x2(xa, px + f0, px + f1, px + f2, px + f3, px + f4, px + f5,
                                           vload(a, d0 + q, L), vload(a, d1 + q, L), acc, L)
                            px += sw * ps
                            q += V
                    a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51 = acc
                    _store6(a, row0, step, a00, a10, a20, a30, a40, a50)
                    if two:
                        _store6(a, row1, step, a01, a11, a21, a31, a41, a51)
                first = False
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
