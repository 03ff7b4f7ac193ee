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

Its error is larger than a direct conv's: the transforms multiply by up to 8 (A) and 5
(B) and divide by 24 (G), so a sum that cancels carries more rounding (tests/test_nchwc.py
measures it against float64 and F(2x2,3x3)).
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .jit import inlined, parallel_kernel
from .nchwc import _fma_6x2, _put_block, _put_tile, _tap, _zeros12, no_ep
from .simd import nlanes, vadd, vfma, vload, vmul, vsplat, vstore, vsub, vzero

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
    tail = p0 + 36 * OCB * CB * V * V
    for k in range(OCB * V + V):
        a[tail + k] = b[k] if (b.size > 0 and k < K) else np.float32(0.0)


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
            th = (t0 + t) // TW
            ih0 = th * 4 - ph
            iw0 = (t0 + t - th * TW) * 4 - pw
            for ib in range(CB):
                xb = x0 + (n * CB + ib) * H * Wi * V
                for c in range(6):
                    e = _bt(vload(a, _tap(xb, ih0, iw0, 0, c, H, Wi, V, z0, True), L),
                            vload(a, _tap(xb, ih0, iw0, 1, c, H, Wi, V, z0, True), L),
                            vload(a, _tap(xb, ih0, iw0, 2, c, H, Wi, V, z0, True), L),
                            vload(a, _tap(xb, ih0, iw0, 3, c, H, Wi, V, z0, True), L),
                            vload(a, _tap(xb, ih0, iw0, 4, c, H, Wi, V, z0, True), L),
                            vload(a, _tap(xb, ih0, iw0, 5, c, H, Wi, V, z0, True), L), L)
                    for r in range(6):
                        vstore(a, tmp + (r * 6 + c) * V, e[r])
                for r in range(6):
                    row = tmp + r * 6 * V
                    f = _bt(vload(a, row, L), vload(a, row + V, L), vload(a, row + 2 * V, L),
                            vload(a, row + 3 * V, L), vload(a, row + 4 * V, L), vload(a, row + 5 * V, L), L)
                    for c in range(6):
                        vstore(a, vt + (((r * 6 + c) * tb + t) * CB + ib) * V, f[c])
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
            th = (t0 + t) // TW
            oh0 = th * 4
            ow0 = (t0 + t - th * TW) * 4
            count = min(4, OW - ow0)
            for ob in range(2 * pr_lo, min(OCB, 2 * pr_hi)):
                bias = vload(a, bias0 + ob * V, L)
                for c in range(6):
                    base = m + ((c * OCB + ob) * tb + t) * V
                    step = 6 * OCB * tb * V
                    o = _at(vload(a, base, L), vload(a, base + step, L), vload(a, base + 2 * step, L),
                            vload(a, base + 3 * step, L), vload(a, base + 4 * step, L),
                            vload(a, base + 5 * step, L), L)
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

