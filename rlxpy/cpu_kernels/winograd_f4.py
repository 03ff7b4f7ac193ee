"""winograd_f4: Winograd F(4x4,3x3) on the channel-blocked layout (NCHWc).

Y = A^T [(G g G^T) . (B^T d B)] A for each 4x4 output tile, d its 6x6 input patch: 36
multiplies per output tile and channel pair instead of 144. Every transform works on whole
vectors of V channels, so it is vectorized by the layout itself, with no shuffles.

A work item is (output-channel group, image, block of tb tiles) on one worker, through its
scratch slot (work_split picks tb and the groups):
  1. input transform: each tile's 6x6 patch of x, channel block by channel block (taps in
     the padding read V zeros kept after the packed filters), into Vt [36, tb, CB, V];
  2. 36 GEMMs, M[e] = Vt[e] U[e], with nchwc's micro-kernel (6 tiles x 2 blocks of output
     channels, broadcasts of Vt and vectors of U), into M [36, OCB, tb, V];
  3. output transform, bias, and the tile's live pixels stored into y (blocked, or plain).
The filter transform U [36, OCB, CB, V, V] is computed once per arena for a param.

Where the batch has few tiles and U is larger than a core's L2 (512 channels at 7x7: 4 tiles
and 37.7 MB of U), reading U from memory each run costs more than its GEMMs; conv_fly then
transforms the raw filters (9 floats a channel pair against U's 36) on the fly instead, in
registers, one row of U at a time (on_the_fly).

Its error is larger than a direct conv's: the transforms multiply by up to 8 (A) and 5
(B) and divide by 24 (G), so a sum that cancels carries more rounding (tests/test_nchwc.py
measures it against float64 and F(2x2,3x3)).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import literally, prange

from .host import l2_bytes
from .jit import inlined, kernel, parallel_kernel
from .nchwc import _fma_6x2, _put_block, _put_tile, _tap, _zeros12, no_ep
from .simd import nlanes, vadd, vbcast, vfma, vload, vmul, vsplat, vstore, vsub, vzero

TILE_BLOCKS = (6, 12, 18)     # 4x4 output tiles a work item may take: whole groups of 6 for the micro-kernel

_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
               [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])


def eligible(g):
    """None when winograd_f4 can run the conv: 2-D, and winograd_reason's 3x3 convs."""
    if g.spatial_rank != 2:
        return f"{g.spatial_rank}-D"
    return winograd_reason(g)


def winograd_reason(g):
    """None when a Winograd 3x3 kernel can run the conv: 3x3, stride 1, dilation 1, one group."""
    if tuple(g.kernel) != (3, 3):
        return f"kernel {tuple(g.kernel)}"
    if tuple(g.stride) != (1, 1):
        return f"stride {tuple(g.stride)}"
    if tuple(g.dilation) != (1, 1):
        return f"dilation {tuple(g.dilation)}"
    if g.groups != 1:
        return f"groups {g.groups}"
    return None


def _blocks(g, lanes):
    return -(-g.x_shape[1] // lanes), -(-g.y_shape[1] // lanes)


def slot_floats(g, lanes: int, tb: int) -> int:
    """One worker's slot: Vt [36, tb, CB, V], M [36, OCB, tb, V], a 6x6 staging block."""
    cb, ocb = _blocks(g, lanes)
    return 36 * tb * (cb + ocb) * lanes + 36 * lanes


def _item_cost(cb: int, tiles: int, pairs: int) -> float:
    """A work item's cost in 6x2 micro-kernel steps: the GEMMs over whole groups of 6
    tiles (dead ones included), the input transform (about 0.6 of a step a tile and
    channel block), reading its share of U once (about 6 steps a pair) and the output
    transform."""
    return cb * (6 * -(-tiles // 6) * pairs + 0.6 * tiles + 6 * pairs) + 0.6 * tiles * pairs


def work_split(g, lanes: int, threads: int) -> tuple:
    """(tiles a work item, output-channel groups a tile block): the split whose busiest
    worker has the least work (_item_cost; numba hands each worker an equal run of
    consecutive items), fewer items on a tie. 6, 12 or 18 tiles (whole micro-kernel groups;
    18 keeps 256 channels at 14x14, 16 tiles, in one block that reads U once).
    Measured on one conv, AVX2, 2 cores: 256@14 0.67 -> 0.62 ms, 128@28 0.72 -> 0.59 ms
    against 12 tiles with one group (the first block took 12 tiles, the other worker 4)."""
    n = g.x_shape[0]
    nt = -(-g.y_shape[2] // 4) * -(-g.y_shape[3] // 4)
    cb, ocb = _blocks(g, lanes)
    pairs = -(-ocb // 2)
    best = None
    for tb in sorted({min(t, -(-nt // 6) * 6) for t in TILE_BLOCKS}):
        chunks = -(-nt // tb)
        for kg in range(1, pairs + 1):
            per_k = -(-pairs // kg)
            if -(-pairs // per_k) != kg:       # the same groups as a smaller kg
                continue
            costs = [_item_cost(cb, min(tb, nt - c * tb), min(pairs, (kq + 1) * per_k) - kq * per_k)
                     for kq in range(kg) for _ in range(n) for c in range(chunks)]
            busiest = max(sum(costs[w * len(costs) // threads:(w + 1) * len(costs) // threads])
                          for w in range(threads))
            if best is None or (busiest, len(costs)) < best[0]:
                best = ((busiest, len(costs)), tb, kg)
    return best[1], best[2]


def packed_floats(g, lanes: int) -> int:
    """U [36, OCB, CB, V in, V out], the bias padded to whole blocks, V zeros."""
    cb, ocb = _blocks(g, lanes)
    return 36 * ocb * cb * lanes * lanes + ocb * lanes + lanes


@inlined
def _bias_and_zeros(b, a, at, K, count):
    """After the packed filters: the bias (zeros past K, or all zeros without one), then the
    zeros the input transform reads for taps in the padding."""
    for k in range(count):
        a[at + k] = b[k] if (b.size > 0 and k < K) else np.float32(0.0)


@parallel_kernel
def pack(w, b, a, p0, L):
    """U = G g G^T per (output, input) channel pair, in float64, then the bias and zeros."""
    V = nlanes(L)
    K, C = w.shape[0], w.shape[1]
    CB = (C + V - 1) // V
    OCB = (K + V - 1) // V
    for k in prange(OCB * V):
        ob = k // V
        co = k - ob * V
        for c in range(CB * V):
            ib = c // V
            ci = c - ib * V
            for r in range(6):
                for s in range(6):
                    u = 0.0
                    if k < K and c < C:
                        for i in range(3):
                            for j in range(3):
                                u += _G[r, i] * np.float64(w[k, c, i, j]) * _G[s, j]
                    a[p0 + ((((r * 6 + s) * OCB + ob) * CB + ib) * V + ci) * V + co] = u
    _bias_and_zeros(b, a, p0 + 36 * OCB * CB * V * V, K, OCB * V + V)


@inlined
def _bt(d0, d1, d2, d3, d4, d5, L):
    """B^T of 6 vectors (rows of B^T: 4 0 -5 0 1 0 / 0 -4 -4 1 1 0 / 0 4 -4 -1 1 0 /
    0 -2 -1 2 1 0 / 0 2 -1 -2 1 0 / 0 4 0 -5 0 1)."""
    c4, c5, c2 = vsplat(4.0, L), vsplat(-5.0, L), vsplat(2.0, L)
    s13, s42 = vsub(d1, d3), vsub(d4, d2)
    return (vfma(c4, d0, vfma(c5, d2, d4)),
            vsub(vadd(d3, d4), vmul(vadd(d1, d2), c4)),
            vfma(c4, vsub(d1, d2), vsub(d4, d3)),
            vsub(s42, vmul(s13, c2)),
            vfma(c2, s13, s42),
            vfma(c4, d1, vfma(c5, d3, d5)))


@inlined
def _at(m0, m1, m2, m3, m4, m5, L):
    """A^T of 6 vectors (rows: 1 1 1 1 1 0 / 0 1 -1 2 -2 0 / 0 1 1 4 4 0 / 0 1 -1 8 -8 1)."""
    p, q, r, s = vadd(m1, m2), vsub(m1, m2), vadd(m3, m4), vsub(m3, m4)
    return (vadd(vadd(m0, p), r), vfma(vsplat(2.0, L), s, q), vfma(vsplat(4.0, L), r, p),
            vadd(vfma(vsplat(8.0, L), s, q), m5))


@inlined
def _tile_origin(t, TW):
    """The top-left output pixel (oh0, ow0) of tile t of an image, TW tiles a row."""
    th = t // TW
    return th * 4, (t - th * TW) * 4


@inlined
def _input_tile(a, xb, ih0, iw0, H, Wi, z0, tmp, dst, step, scaled, L):
    """B^T d B of one tile's 6x6 patch of one channel block (xb; taps in the padding read the
    zeros at z0), staged through tmp; entry e = 6 r + c stored at dst + e * step, times
    D_r D_c where scaled (conv_fly's U~)."""
    V = nlanes(L)
    for c in range(6):
        e6 = _bt(vload(a, _tap(xb, ih0, iw0, 0, c, H, Wi, V, z0, True), L),
                 vload(a, _tap(xb, ih0, iw0, 1, c, H, Wi, V, z0, True), L),
                 vload(a, _tap(xb, ih0, iw0, 2, c, H, Wi, V, z0, True), L),
                 vload(a, _tap(xb, ih0, iw0, 3, c, H, Wi, V, z0, True), L),
                 vload(a, _tap(xb, ih0, iw0, 4, c, H, Wi, V, z0, True), L),
                 vload(a, _tap(xb, ih0, iw0, 5, c, H, Wi, V, z0, True), L), L)
        for r in range(6):
            vstore(a, tmp + (r * 6 + c) * V, e6[r])
    for r in range(6):
        row = tmp + r * 6 * V
        f = _bt(vload(a, row, L), vload(a, row + V, L), vload(a, row + 2 * V, L),
                vload(a, row + 3 * V, L), vload(a, row + 4 * V, L), vload(a, row + 5 * V, L), L)
        for c in range(6):
            vstore(a, dst + (r * 6 + c) * step, vmul(f[c], vsplat(_DD[r, c], L)) if scaled else f[c])


@inlined
def _output_tile(a, m0, step, tmp, bias, ya, y0, y_plain, n, ob, OCB, K, P, OH, OW, oh0, ow0, L):
    """A^T M A of one tile of one output block (M's entry e = 6 r + c at m0 + e * step),
    plus the bias, its live pixels stored into y."""
    V = nlanes(L)
    count = min(4, OW - ow0)
    for c in range(6):
        base = m0 + c * step
        o = _at(vload(a, base, L), vload(a, base + 6 * step, L), vload(a, base + 12 * step, L),
                vload(a, base + 18 * step, L), vload(a, base + 24 * step, L), vload(a, base + 30 * step, L), L)
        for i in range(4):
            vstore(a, tmp + (i * 6 + c) * V, o[i])
    for i in range(min(4, OH - oh0)):
        row = tmp + i * 6 * V
        q = _at(vload(a, row, L), vload(a, row + V, L), vload(a, row + 2 * V, L),
                vload(a, row + 3 * V, L), vload(a, row + 4 * V, L), vload(a, row + 5 * V, L), L)
        q0, q1, q2, q3 = vadd(q[0], bias), vadd(q[1], bias), vadd(q[2], bias), vadd(q[3], bias)
        # the row's (up to) 4 pixels as a 6-pixel store with 2 dead ones
        _put_block(ya, y0, y_plain, n, ob, OCB, K, P, (oh0 + i) * OW + ow0, count, q0, q1, q2, q3, q3, q3,
                   no_ep(), ya, L)


@parallel_kernel
def conv(a, x0, p0, ya, y0, y_plain, K, N, C, H, Wi, OH, OW, ph, pw, s0, slot, tb, kg, L):
    """y (in ya at y0: blocked, or plain when y_plain) = 3x3 stride-1 conv of blocked x (in a
    at x0), filters transformed and packed at p0 (pack); scratch slots of `slot` floats from
    s0, one per worker. Work items: blocks of tb tiles (a multiple of 6); kg > 1 splits the
    output-channel pairs over kg items per block (small images: each repeats the input
    transform, which is cheap next to the GEMMs), the groups outermost, so a worker's items
    share its part of U."""
    V = nlanes(L)
    CB = (C + V - 1) // V
    OCB = (K + V - 1) // V
    TW = (OW + 3) // 4
    NT = ((OH + 3) // 4) * TW
    P = OH * OW
    chunks = (NT + tb - 1) // tb
    pairs = (OCB + 1) // 2
    bias0 = p0 + 36 * OCB * CB * V * V
    z0 = bias0 + OCB * V
    per_k = (pairs + kg - 1) // kg
    for it in prange(N * chunks * kg):
        V = nlanes(L)
        kq = it // (N * chunks)
        n = (it // chunks) % N
        t0 = (it % chunks) * tb
        pr_lo = kq * per_k
        pr_hi = min(pairs, pr_lo + per_k)
        nt = min(tb, NT - t0)
        vt = s0 + numba.get_thread_id() * slot
        m = vt + 36 * tb * CB * V
        tmp = m + 36 * tb * OCB * V
        # 1. input transform, one channel block of one tile at a time
        for t in range(nt):
            oh0, ow0 = _tile_origin(t0 + t, TW)
            for ib in range(CB):
                _input_tile(a, x0 + (n * CB + ib) * H * Wi * V, oh0 - ph, ow0 - pw, H, Wi, z0, tmp,
                            vt + (t * CB + ib) * V, tb * CB * V, False, L)
        # 2. 36 GEMMs: 6 tiles x 2 blocks of output channels a step (dead tiles compute garbage, never stored)
        for e in range(36):
            for pr in range(pr_lo, pr_hi):
                ob0 = 2 * pr
                two = ob0 + 1 < OCB
                ob1 = ob0 + 1 if two else ob0
                for tg in range(0, nt, 6):
                    acc = _zeros12(L)
                    for ib in range(CB):
                        xo = vt + ((e * tb + tg) * CB + ib) * V
                        w0 = p0 + ((e * OCB + ob0) * CB + ib) * V * V
                        w1 = p0 + ((e * OCB + ob1) * CB + ib) * V * V
                        st = CB * V
                        for ci in range(V):
                            acc = _fma_6x2(a, xo + ci, xo + st + ci, xo + 2 * st + ci, xo + 3 * st + ci,
                                           xo + 4 * st + ci, xo + 5 * st + ci, vload(a, w0 + ci * V, L),
                                           vload(a, w1 + ci * V, L), acc, L)
                    # M [36, OCB, tb, V]: nchwc's blocked tile store, with "image" e and
                    # "pixels" the tb tiles
                    _put_tile(a, m, False, e, ob0, ob1, two, tg, 6, K, tb, OCB, vzero(L), vzero(L), acc, no_ep(), a,
                              L)
        # 3. output transform, bias, store
        for t in range(nt):
            oh0, ow0 = _tile_origin(t0 + t, TW)
            for ob in range(2 * pr_lo, min(OCB, 2 * pr_hi)):
                _output_tile(a, m + (ob * tb + t) * V, OCB * tb * V, tmp, vload(a, bias0 + ob * V, L), ya, y0, y_plain,
                             n, ob, OCB, K, P, OH, OW, oh0, ow0, L)


# --- filters transformed on the fly (few tiles, large U) --------------------------------------
# G = D G~ with D = diag(1/4, -1/6, -1/6, 1/24, 1/24, 1) and G~'s rows integers, so
# U = G g G^T = D (G~ g G~^T) D: the kernel builds U~ = G~ g G~^T from the raw filters with
# adds and multiplies by 2 and 4, and the constant D_r D_s goes onto the input transform
# (M = U . Vt = U~ . (D_r D_s Vt)).
FLY_MAX_GROUPS = 2            # 16 lanes: tile groups a batch may have for conv_fly at any size of U
FLY_U_L2S = 4                 # ... and beyond, a U over this many L2s (see on_the_fly)
FLY_U_L2S_NARROW = 16         # 8 lanes and 1: a U over this many L2s, and at most 4 tiles an image
_D = (1 / 4, -1 / 6, -1 / 6, 1 / 24, 1 / 24, 1.0)
_DD = np.array([[_D[r] * _D[s] for s in range(6)] for r in range(6)], np.float32)


def fly_tiles(lanes: int) -> int:
    """Tiles a group of conv_fly: its accumulators are 6 columns of U~ x the group's tiles,
    24 of AVX-512's 32 vector registers at 16 lanes; 12 of AVX2's 16 at 8 lanes and 1."""
    return 4 if lanes == 16 else 2


def tile_groups(g, lanes: int) -> int:
    """Groups of fly_tiles 4x4 output tiles the batch's tiles make."""
    nt = g.x_shape[0] * -(-g.y_shape[2] // 4) * -(-g.y_shape[3] // 4)
    return -(-nt // fly_tiles(lanes))


def u_bytes(g, lanes: int) -> int:
    cb, ocb = _blocks(g, lanes)
    return 4 * 36 * cb * ocb * lanes * lanes


def on_the_fly(g, lanes: int) -> bool:
    """conv_fly for this conv? One conv, the Zen4 (1 MiB L2), conv_fly against conv in ms.

    16 lanes (4-tile groups): where the batch has at most FLY_MAX_GROUPS groups (the filter
    transform is then made at most twice), or where U is over FLY_U_L2S of a core's L2 (conv
    reads it again for each block of up to 18 tiles, from L3 or memory): 512@7 batch 1
    0.54 / 1.34, batch 8 4.5 / 9.0; 256@14 batch 1 0.42 / 0.46, batch 4 2.0 / 2.2; 256@28
    1.60 / 1.71; 128@7 0.043 / 0.055; 64@7 0.021 / 0.025. U of 2.4 MB with 13 to 49 groups
    stays with conv: 128@28 0.53 / 0.46, 128@14 batch 4 0.55 / 0.52, 128@56 1.58 / 1.48.

    8 lanes and 1 (2-tile groups, the transform made twice as often for the same tiles):
    only where U is over FLY_U_L2S_NARROW L2s and an image has at most 4 tiles (7x7 and
    smaller, where conv's blocks of 6 tiles an image waste a third): 512@7 batch 1
    1.00 / 1.80, batch 2 1.91 / 3.29, batch 8 8.3 / 12.7; but 512@14 3.77 / 3.17, 256@14
    0.94 / 0.68 and 256@7 0.236 / 0.211."""
    if lanes == 16:
        return tile_groups(g, lanes) <= FLY_MAX_GROUPS or u_bytes(g, lanes) > FLY_U_L2S * l2_bytes()
    per_image = -(-g.y_shape[2] // 4) * -(-g.y_shape[3] // 4)
    return per_image <= 4 and u_bytes(g, lanes) > FLY_U_L2S_NARROW * l2_bytes()


def fly_packed_floats(g, lanes: int) -> int:
    """The raw filters [OCB, CB * V, 9, V], the bias padded to whole blocks, V zeros."""
    cb, ocb = _blocks(g, lanes)
    return 9 * ocb * cb * lanes * lanes + ocb * lanes + lanes


def fly_slot_floats(g, lanes: int) -> int:
    """One worker's slot: Vt [36, CB, TG, V] (scaled by D_r D_s), M [36, TG, V], a 6x6
    staging block (TG = fly_tiles)."""
    cb, _ = _blocks(g, lanes)
    tg = fly_tiles(lanes)
    return 36 * cb * tg * lanes + 36 * tg * lanes + 36 * lanes


def fly_split(g, lanes: int, threads: int) -> int:
    """Runs of output-channel blocks a tile group is cut into: the fewest that give every
    worker the same number of items (numba hands each an equal contiguous run of them), as
    each run repeats its group's input transform: 1 group on 2 workers, 2 runs; 2 groups, 1;
    3 groups, 2 (6 items, 3 each, where 3 whole groups would leave one worker a third of the
    work); never more runs than blocks."""
    _, ocb = _blocks(g, lanes)
    return max(1, min(ocb, threads // math.gcd(tile_groups(g, lanes), threads)))


@parallel_kernel
def fly_pack(w, b, a, p0, L):
    """The raw filters in the order conv_fly reads them: for each output block, input
    channel and tap, a vector of the block's output channels; then the bias and zeros."""
    V = nlanes(L)
    K, C = w.shape[0], w.shape[1]
    CB = (C + V - 1) // V
    OCB = (K + V - 1) // V
    for k in prange(OCB * V):
        ob = k // V
        co = k - ob * V
        for c in range(CB * V):
            for tap in range(9):
                a[p0 + ((ob * CB * V + c) * 9 + tap) * V + co] = w[k, c, tap // 3, tap % 3] if (k < K and c < C) \
                    else np.float32(0.0)
    _bias_and_zeros(b, a, p0 + 9 * OCB * CB * V * V, K, OCB * V + V)


@inlined
def _gt_row(a, g, r, L):
    """Row r of G~ g, g's 9 vectors at g (tap-major); r a constant where inlined, so each
    pass keeps only its own branch."""
    V = nlanes(L)
    if r == 0:
        return vload(a, g, L), vload(a, g + V, L), vload(a, g + 2 * V, L)
    if r == 5:
        return vload(a, g + 6 * V, L), vload(a, g + 7 * V, L), vload(a, g + 8 * V, L)
    g0, g1, g2 = vload(a, g, L), vload(a, g + V, L), vload(a, g + 2 * V, L)
    h0, h1, h2 = vload(a, g + 3 * V, L), vload(a, g + 4 * V, L), vload(a, g + 5 * V, L)
    k0, k1, k2 = vload(a, g + 6 * V, L), vload(a, g + 7 * V, L), vload(a, g + 8 * V, L)
    if r == 1:                # 1 1 1
        return vadd(vadd(g0, k0), h0), vadd(vadd(g1, k1), h1), vadd(vadd(g2, k2), h2)
    if r == 2:                # 1 -1 1
        return vsub(vadd(g0, k0), h0), vsub(vadd(g1, k1), h1), vsub(vadd(g2, k2), h2)
    c4 = vsplat(4.0, L)
    if r == 3:                # 1 2 4
        return (vadd(vfma(c4, k0, g0), vadd(h0, h0)), vadd(vfma(c4, k1, g1), vadd(h1, h1)),
                vadd(vfma(c4, k2, g2), vadd(h2, h2)))
    return (vsub(vfma(c4, k0, g0), vadd(h0, h0)), vsub(vfma(c4, k1, g1), vadd(h1, h1)),    # 1 -2 4
            vsub(vfma(c4, k2, g2), vadd(h2, h2)))


@inlined
def _gt_cols(t0, t1, t2, L):
    """A row (t0, t1, t2) times G~^T: its 6 entries of U~."""
    e = vadd(t0, t2)
    f = vfma(vsplat(4.0, L), t2, t0)
    h = vadd(t1, t1)
    return t0, vadd(e, t1), vsub(e, t1), vadd(f, h), vsub(f, h), t2


@inlined
def _fma_4(a, o, step, u, c0, c1, c2, c3, L):
    """u times the 4 tiles' broadcast inputs at o, o + step, ... into 4 accumulators."""
    return (vfma(vbcast(a, o, L), u, c0), vfma(vbcast(a, o + step, L), u, c1),
            vfma(vbcast(a, o + 2 * step, L), u, c2), vfma(vbcast(a, o + 3 * step, L), u, c3))


@inlined
def _fma_2(a, o, step, u, c0, c1, L):
    return vfma(vbcast(a, o, L), u, c0), vfma(vbcast(a, o + step, L), u, c1)


@inlined
def _store_4(a, at, c0, c1, c2, c3, L):
    V = nlanes(L)
    vstore(a, at, c0)
    vstore(a, at + V, c1)
    vstore(a, at + 2 * V, c2)
    vstore(a, at + 3 * V, c3)


@inlined
def _store_2(a, at, c0, c1, L):
    vstore(a, at, c0)
    vstore(a, at + nlanes(L), c1)


@inlined
def _row_sums4(a, w_ob, vt, m, CB, r, L):
    """Row r of M [36, 4, V] for one output block: the sum over input channels of U~[r, s]
    (made here from the raw filters at w_ob) times the 4 tiles' Vt [36, CB, 4, V]; 24
    accumulators."""
    V = nlanes(L)
    z = vzero(L)
    a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = a20 = a21 = a22 = a23 = z
    a30 = a31 = a32 = a33 = a40 = a41 = a42 = a43 = a50 = a51 = a52 = a53 = z
    cs = CB * 4 * V                   # Vt's step from U~ column s to s + 1
    for ib in range(CB):
        for ci in range(V):
            t0, t1, t2 = _gt_row(a, w_ob + (ib * V + ci) * 9 * V, r, L)
            u0, u1, u2, u3, u4, u5 = _gt_cols(t0, t1, t2, L)
            o = vt + ((r * 6 * CB + ib) * 4) * V + ci
            a00, a01, a02, a03 = _fma_4(a, o, V, u0, a00, a01, a02, a03, L)
            a10, a11, a12, a13 = _fma_4(a, o + cs, V, u1, a10, a11, a12, a13, L)
            a20, a21, a22, a23 = _fma_4(a, o + 2 * cs, V, u2, a20, a21, a22, a23, L)
            a30, a31, a32, a33 = _fma_4(a, o + 3 * cs, V, u3, a30, a31, a32, a33, L)
            a40, a41, a42, a43 = _fma_4(a, o + 4 * cs, V, u4, a40, a41, a42, a43, L)
            a50, a51, a52, a53 = _fma_4(a, o + 5 * cs, V, u5, a50, a51, a52, a53, L)
    row = m + r * 6 * 4 * V
    _store_4(a, row, a00, a01, a02, a03, L)
    _store_4(a, row + 4 * V, a10, a11, a12, a13, L)
    _store_4(a, row + 8 * V, a20, a21, a22, a23, L)
    _store_4(a, row + 12 * V, a30, a31, a32, a33, L)
    _store_4(a, row + 16 * V, a40, a41, a42, a43, L)
    _store_4(a, row + 20 * V, a50, a51, a52, a53, L)


@inlined
def _row_sums2(a, w_ob, vt, m, CB, r, L):
    """_row_sums4 for groups of 2 tiles: 12 accumulators (8 lanes and 1)."""
    V = nlanes(L)
    z = vzero(L)
    a00 = a01 = a10 = a11 = a20 = a21 = a30 = a31 = a40 = a41 = a50 = a51 = z
    cs = CB * 2 * V
    for ib in range(CB):
        for ci in range(V):
            t0, t1, t2 = _gt_row(a, w_ob + (ib * V + ci) * 9 * V, r, L)
            u0, u1, u2, u3, u4, u5 = _gt_cols(t0, t1, t2, L)
            o = vt + ((r * 6 * CB + ib) * 2) * V + ci
            a00, a01 = _fma_2(a, o, V, u0, a00, a01, L)
            a10, a11 = _fma_2(a, o + cs, V, u1, a10, a11, L)
            a20, a21 = _fma_2(a, o + 2 * cs, V, u2, a20, a21, L)
            a30, a31 = _fma_2(a, o + 3 * cs, V, u3, a30, a31, L)
            a40, a41 = _fma_2(a, o + 4 * cs, V, u4, a40, a41, L)
            a50, a51 = _fma_2(a, o + 5 * cs, V, u5, a50, a51, L)
    row = m + r * 6 * 2 * V
    _store_2(a, row, a00, a01, L)
    _store_2(a, row + 2 * V, a10, a11, L)
    _store_2(a, row + 4 * V, a20, a21, L)
    _store_2(a, row + 6 * V, a30, a31, L)
    _store_2(a, row + 8 * V, a40, a41, L)
    _store_2(a, row + 10 * V, a50, a51, L)


@kernel
def _fly_row(a, w_ob, vt, m, CB, r, TG, L):
    """Row r of M for one output block, a function of its own for each (r, TG) (both are
    compiled as constants, literally): each row keeps only its own arithmetic of G~, and
    conv_fly stays small to compile (the 12 rows inlined into it took about a minute)."""
    literally(r)
    literally(TG)
    if TG == 4:
        _row_sums4(a, w_ob, vt, m, CB, r, L)
    else:
        _row_sums2(a, w_ob, vt, m, CB, r, L)


@parallel_kernel
def conv_fly(a, x0, p0, ya, y0, y_plain, K, N, C, H, Wi, OH, OW, ph, pw, s0, slot, TG, kq, L):
    """conv's result with the filters transformed on the fly: raw filters packed at p0
    (fly_pack). Work items: (group of TG tiles of the batch (fly_tiles), run of output
    blocks), kq runs a group; each item transforms its group's inputs into its slot, then
    for each of its output blocks builds M row by row of U~ (_fly_row) and transforms M to
    the output."""
    V = nlanes(L)
    CB = (C + V - 1) // V
    OCB = (K + V - 1) // V
    TW = (OW + 3) // 4
    NT = ((OH + 3) // 4) * TW
    P = OH * OW
    groups = (N * NT + TG - 1) // TG
    per_k = (OCB + kq - 1) // kq
    bias0 = p0 + 9 * OCB * CB * V * V
    z0 = bias0 + OCB * V
    for it in prange(groups * kq):
        V = nlanes(L)
        grp = it // kq
        ob_lo = (it % kq) * per_k
        ob_hi = min(OCB, ob_lo + per_k)
        vt = s0 + numba.get_thread_id() * slot
        m = vt + 36 * CB * TG * V
        tmp = m + 36 * TG * V
        # 1. input transform of the group's tiles, scaled by D_r D_s (a dead tile: zeros)
        for t in range(TG):
            tg = grp * TG + t
            if tg >= N * NT:
                for ib in range(CB):
                    for e in range(36):
                        vstore(a, vt + ((e * CB + ib) * TG + t) * V, vzero(L))
                continue
            n = tg // NT
            oh0, ow0 = _tile_origin(tg - n * NT, TW)
            for ib in range(CB):
                _input_tile(a, x0 + (n * CB + ib) * H * Wi * V, oh0 - ph, ow0 - pw, H, Wi, z0, tmp,
                            vt + (ib * TG + t) * V, CB * TG * V, True, L)
        for ob in range(ob_lo, ob_hi):
            # 2. M [36, TG, V] of this output block, one row of U~ a pass (constant r: each
            # pass is compiled with its own row's arithmetic only)
            w_ob = p0 + ob * CB * V * 9 * V
            if TG == 4:
                _fly_row(a, w_ob, vt, m, CB, 0, 4, L)
                _fly_row(a, w_ob, vt, m, CB, 1, 4, L)
                _fly_row(a, w_ob, vt, m, CB, 2, 4, L)
                _fly_row(a, w_ob, vt, m, CB, 3, 4, L)
                _fly_row(a, w_ob, vt, m, CB, 4, 4, L)
                _fly_row(a, w_ob, vt, m, CB, 5, 4, L)
            else:
                _fly_row(a, w_ob, vt, m, CB, 0, 2, L)
                _fly_row(a, w_ob, vt, m, CB, 1, 2, L)
                _fly_row(a, w_ob, vt, m, CB, 2, 2, L)
                _fly_row(a, w_ob, vt, m, CB, 3, 2, L)
                _fly_row(a, w_ob, vt, m, CB, 4, 2, L)
                _fly_row(a, w_ob, vt, m, CB, 5, 2, L)
            # 3. output transform, bias, store
            bias = vload(a, bias0 + ob * V, L)
            for t in range(TG):
                tg = grp * TG + t
                if tg >= N * NT:
                    break
                n = tg // NT
                oh0, ow0 = _tile_origin(tg - n * NT, TW)
                _output_tile(a, m + t * V, TG * V, tmp, bias, ya, y0, y_plain, n, ob, OCB, K, P, OH, OW, oh0, ow0, L)
