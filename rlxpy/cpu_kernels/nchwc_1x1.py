"""The pointwise (1x1, unpadded, one group, any stride) convolution on NCHWc (algo
`nchwc_1x1`): a GEMM per image, y[K, P] = w[K, C] x[C, P], in the blocked layout.

nchwc_direct runs a 1x1 conv too, but its work items hold one pair of output blocks over a
run of pixels: every pair streams the whole image through the cache again (1.8 MB an
image for 144 channels at 56x56: from memory nine times for 144 -> 144), and a lone last
block computes its tile twice. Here a work item is a run of pixels and a group of output
pairs: each 6-pixel tile of x (6 x C floats) is loaded into L1 once and reused by every
pair of the group, whose packed weights (at most WEIGHT_BYTES) stay in L2 across the
tiles. A lone last block takes a 6 x 1 tile. Measured on MobileNetV2's pointwise shapes
(batch 8, AVX2, 2 cores, one kernel called directly): 117-181 GFLOP/s against
nchwc_direct's 50-71 (onnxruntime's own: 104-170 on the same shapes, in one process).

The weights are nchwc.pack's [out block, 1, 1, in block, V in, V out] (one group), then
the bias and V zeros; the tile store, bias and fused epilogue are nchwc's.
"""
from __future__ import annotations

from math import ceil, log

from numba import prange

from .balance import candidate_runs, evened, most_even, run_costs
from .jit import inlined, parallel_kernel
from .nchwc import (SLIVER, TP, _fma_6x2, _origins, _pixel_offsets, _pixel_pair_sums, _put_block, _put_pixel_pair,
                    _put_tile, _zeros12, chunk_pixels, group_blocks)
from .simd import nlanes, vadd, vbcast, vfma, vload, vzero

# The packed weights of one item's group of output pairs: about a quarter of a 512 KiB L2,
# leaving room for the x tiles and y. (32 to 400 KiB measured within noise of each other on
# the MobileNetV2 shapes; the split matters for balance at batch 1.)
WEIGHT_BYTES = 128 << 10
X_RUN_BYTES = 16 << 10       # half of a 32 KiB L1


def eligible(g, lanes: int):
    """None when nchwc_1x1 can run the conv, else why not."""
    if any(k != 1 for k in g.kernel):
        return f"kernel {tuple(g.kernel)}, not 1x1"
    if any(g.pad_begin) or any(g.pad_end):
        return "padded"
    if g.groups != 1:
        return f"groups {g.groups}"
    if len(g.kernel) > 2:
        return "3-D"
    return None


def last_three_tiled(g, lanes: int, gpairs: int) -> bool:
    """Whether conv1x1 runs the last three output blocks in 4 x 3 tiles (an odd count of
    blocks, at least 3, whose last group of gpairs pairs (work_split) holds the last pair
    and the lone block)."""
    ocb = group_blocks(g, lanes)[1]
    pairs = -(-ocb // 2)
    return ocb % 2 == 1 and ocb >= 3 and pairs - (ceil(pairs / gpairs) - 1) * gpairs >= 2


def work_split(g, lanes: int, threads: int) -> tuple:
    """(pixels per item, output pairs per item) for a 2-D (lifted) geometry: pair groups
    whose weights fit WEIGHT_BYTES, then runs of about 8 tiles, fewer where the items would
    not give every thread 4, evened out so no run is a sliver. Where those items fall
    unevenly on the threads (balance.most_even), the most even other run length, and where
    there are several groups already, of a few more groups (MobileNetV2 at 14x14, batch 1,
    2 threads: 64 -> 384, one group in 9 runs of 4 tiles, 20 tiles against 13, became 33 runs
    of 1 tile, balance 0.825 -> 0.97; 384 -> 96, groups of 2 and 1 pairs, became 3 groups of
    1 pair in runs of 17 and 16 tiles, 0.75 -> 0.99)."""
    cb, ocb = group_blocks(g, lanes)
    pairs = -(-ocb // 2)
    per_pair = cb * lanes * lanes * 2 * 4
    fewest = ceil(pairs / max(1, min(pairs, WEIGHT_BYTES // per_pair)))
    P = g.y_shape[2] * g.y_shape[3]
    tiles = ceil(P / TP)
    n = g.x_shape[0]

    def loads(option):              # items in prange order: (image, group, run); a lone block half a pair
        per, gpairs = option
        runs = run_costs(P, per, TP, SLIVER)
        groups = [min(2 * gpairs, ocb - 2 * k * gpairs) / 2 for k in range(ceil(pairs / gpairs))]
        return [b * c for _ in range(n) for b in groups for c in runs]

    usual = (evened(tiles, chunk_pixels(g, n * fewest, threads) // TP), ceil(pairs / fewest))
    # one group stays one: its threads split x by pixels, each reading its own part; as groups,
    # each thread reads all of x and writes part of every pixel (MobileNetV2's 64 -> 384
    # expansions at 14x14 re-cut as 2 groups of 6 pairs: the depthwise convs after them went
    # 0.028 -> 0.037 ms, in two runs)
    most = fewest if fewest == 1 else min(pairs, fewest + 3)
    options = sorted({(per, ceil(pairs / ng)) for ng in range(fewest, most + 1)
                      for per in candidate_runs(tiles, threads)},
                     key=lambda o: (ceil(pairs / o[1]), abs(log(o[0] / usual[0])), -o[0]))
    per, gpairs = most_even(options, loads, threads, usual)
    return per * TP, gpairs


@inlined
def _fma_6x1(a, o0, o1, o2, o3, o4, o5, w0, acc6, L):
    """A lone output block: x at o0..o5 (broadcast) times one weight vector, 6 accumulators."""
    a0, a1, a2, a3, a4, a5 = acc6
    return (vfma(vbcast(a, o0, L), w0, a0), vfma(vbcast(a, o1, L), w0, a1), vfma(vbcast(a, o2, L), w0, a2),
            vfma(vbcast(a, o3, L), w0, a3), vfma(vbcast(a, o4, L), w0, a4), vfma(vbcast(a, o5, L), w0, a5))


@inlined
def _fma_4x3(a, o0, o1, o2, o3, w0, w1, w2, acc, L):
    """x at o0..o3 (broadcast) times three weight vectors, 12 accumulators (pixel-major)."""
    a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32 = acc
    xv = vbcast(a, o0, L)
    a00 = vfma(xv, w0, a00)
    a01 = vfma(xv, w1, a01)
    a02 = vfma(xv, w2, a02)
    xv = vbcast(a, o1, L)
    a10 = vfma(xv, w0, a10)
    a11 = vfma(xv, w1, a11)
    a12 = vfma(xv, w2, a12)
    xv = vbcast(a, o2, L)
    a20 = vfma(xv, w0, a20)
    a21 = vfma(xv, w1, a21)
    a22 = vfma(xv, w2, a22)
    xv = vbcast(a, o3, L)
    a30 = vfma(xv, w0, a30)
    a31 = vfma(xv, w1, a31)
    a32 = vfma(xv, w2, a32)
    return a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32


@inlined
def _tile_pixels(q0, live, contiguous, OW, Wi, sh, sw, V):
    """The input offset (floats within a blocked plane) of each of the tile's 6 output
    pixels from q0; a pixel past the live ones repeats the first's."""
    if contiguous:                  # stride 1: output pixel q is input pixel q (no division)
        p0 = q0 * V
        return (p0, (q0 + 1) * V if live > 1 else p0, (q0 + 2) * V if live > 2 else p0,
                (q0 + 3) * V if live > 3 else p0, (q0 + 4) * V if live > 4 else p0,
                (q0 + 5) * V if live > 5 else p0)
    oh = q0 // OW
    return _pixel_offsets(_origins(oh, q0 - oh * OW, live, OW, sh, sw, 0, 0), Wi, V)


@inlined
def _pair_sums(a, xn, d0, d1, d2, d3, d4, d5, p0, ob0, CB, HW, L):
    """The 12 sums of a 6-pixel tile (x at xn + d0 .. xn + d5 in each input block) through
    output blocks ob0 and ob0 + 1, over all CB input blocks (inlined: constant offsets fold
    into the broadcasts)."""
    V = nlanes(L)
    acc = _zeros12(L)
    for ib in range(CB):
        xb = xn + ib * HW * V
        w0 = p0 + (ob0 * CB + ib) * V * V
        w1 = w0 + CB * V * V
        for ci in range(V):
            acc = _fma_6x2(a, xb + d0 + ci, xb + d1 + ci, xb + d2 + ci, xb + d3 + ci, xb + d4 + ci,
                           xb + d5 + ci, vload(a, w0 + ci * V, L), vload(a, w1 + ci * V, L), acc, L)
    return acc


@inlined
def _triple_sums(a, xn, d0, d1, d2, d3, p0, ob0, CB, HW, L):
    """The 12 sums of 4 pixels (x at xn + d0 .. xn + d3 in each input block) through output
    blocks ob0, ob0 + 1 and ob0 + 2, over all CB input blocks."""
    V = nlanes(L)
    acc = _zeros12(L)
    for ib in range(CB):
        xb = xn + ib * HW * V
        w0 = p0 + (ob0 * CB + ib) * V * V
        w1 = w0 + CB * V * V
        w2 = w1 + CB * V * V
        for ci in range(V):
            acc = _fma_4x3(a, xb + d0 + ci, xb + d1 + ci, xb + d2 + ci, xb + d3 + ci, vload(a, w0 + ci * V, L),
                           vload(a, w1 + ci * V, L), vload(a, w2 + ci * V, L), acc, L)
    return acc


@inlined
def _triple(a, xn, p0, ya, y0, y_plain, n, q0, live, K, P, HW, OW, Wi, sh, sw, CB, OCB, bias0, contiguous,
            ep, ra, L):
    """Up to 4 pixels from q0 through an odd count's last three output blocks: 4 x 3
    accumulators (a pair's 6 x 2 tile and a lone block's 6 x 1, whose 6 sums wait on the
    FMA latency, took 15 loads for 18 FMAs)."""
    V = nlanes(L)
    ob0 = OCB - 3
    d0, d1, d2, d3, d4, d5 = _tile_pixels(q0, live, contiguous, OW, Wi, sh, sw, V)
    if contiguous and live == 4:
        acc = _triple_sums(a, xn + d0, 0, V, 2 * V, 3 * V, p0, ob0, CB, HW, L)
    else:
        acc = _triple_sums(a, xn, d0, d1, d2, d3, p0, ob0, CB, HW, L)
    a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32 = acc
    z = vzero(L)
    bv = vload(a, bias0 + ob0 * V, L)
    _put_block(ya, y0, y_plain, n, ob0, OCB, K, P, q0, live, vadd(a00, bv), vadd(a10, bv), vadd(a20, bv),
               vadd(a30, bv), z, z, ep, ra, L)
    bv = vload(a, bias0 + (ob0 + 1) * V, L)
    _put_block(ya, y0, y_plain, n, ob0 + 1, OCB, K, P, q0, live, vadd(a01, bv), vadd(a11, bv), vadd(a21, bv),
               vadd(a31, bv), z, z, ep, ra, L)
    bv = vload(a, bias0 + (ob0 + 2) * V, L)
    _put_block(ya, y0, y_plain, n, ob0 + 2, OCB, K, P, q0, live, vadd(a02, bv), vadd(a12, bv), vadd(a22, bv),
               vadd(a32, bv), z, z, ep, ra, L)


@inlined
def _tile(a, xn, p0, ya, y0, y_plain, n, pr, q0, q1, chunk, K, P, HW, OW, Wi, sh, sw, CB, OCB, bias0, contiguous,
          ep, ra, L):
    """The 6-pixel tile from q0 (within the run from q1) through output pair pr, over all of C."""
    V = nlanes(L)
    live = min(TP, P - q0, q1 + chunk - q0)
    d0, d1, d2, d3, d4, d5 = _tile_pixels(q0, live, contiguous, OW, Wi, sh, sw, V)
    ob0 = 2 * pr
    if ob0 + 1 < OCB:
        if contiguous and live == TP:
            # the 6 pixels V floats apart: constants the broadcasts take as displacements from
            # one register (the general path holds 6 pixel offsets)
            acc = _pair_sums(a, xn + d0, 0, V, 2 * V, 3 * V, 4 * V, 5 * V, p0, ob0, CB, HW, L)
        else:
            acc = _pair_sums(a, xn, d0, d1, d2, d3, d4, d5, p0, ob0, CB, HW, L)
        _put_tile(ya, y0, y_plain, n, ob0, ob0 + 1, True, q0, live, K, P, OCB,
                  vload(a, bias0 + ob0 * V, L), vload(a, bias0 + (ob0 + 1) * V, L), acc, ep, ra, L)
    else:
        z = vzero(L)
        acc6 = (z, z, z, z, z, z)
        for ib in range(CB):
            xb = xn + ib * HW * V
            w0 = p0 + (ob0 * CB + ib) * V * V
            for ci in range(V):
                acc6 = _fma_6x1(a, xb + d0 + ci, xb + d1 + ci, xb + d2 + ci, xb + d3 + ci, xb + d4 + ci,
                                xb + d5 + ci, vload(a, w0 + ci * V, L), acc6, L)
        bv = vload(a, bias0 + ob0 * V, L)
        _put_block(ya, y0, y_plain, n, ob0, OCB, K, P, q0, live, vadd(acc6[0], bv), vadd(acc6[1], bv),
                   vadd(acc6[2], bv), vadd(acc6[3], bv), vadd(acc6[4], bv), vadd(acc6[5], bv), ep, ra, L)


@parallel_kernel
def conv1x1(a, x0, p0, ya, y0, y_plain, K, N, H, Wi, OH, OW, sh, sw, CB, OCB, chunk, gpairs, epi, L):
    """y (in ya at y0: blocked, or plain [N, K, OH, OW] when y_plain) = the 1x1 conv of x
    (blocked [N, CB, H*W, V], in a at x0) with the weights and bias packed at p0. Work
    items: (image, group of gpairs output pairs, run of `chunk` pixels); per 6-pixel tile,
    every pair of the group over all of C. epi: the fused epilogue (nchwc._epi)."""
    V = nlanes(L)
    e_kind, e_lo, e_hi, ra, e_r0 = epi         # once, outside the prange (see _epi)
    ep = (e_kind, e_lo, e_hi, e_r0)
    P = OH * OW
    HW = H * Wi
    pairs = (OCB + 1) // 2
    ngroups = (pairs + gpairs - 1) // gpairs
    chunks = (P + chunk - 1) // chunk
    bias0 = p0 + OCB * CB * V * V
    contiguous = sh == 1 and sw == 1 and OW == Wi
    for it in prange(N * ngroups * chunks):
        V = nlanes(L)          # again inside the loop body: numba outlines it, and V must stay a constant
        ch = it % chunks
        r = it // chunks
        gp = r % ngroups
        n = r // ngroups
        xn = x0 + n * CB * HW * V
        pr0 = gp * gpairs
        npr = min(pairs, pr0 + gpairs) - pr0
        q1 = ch * chunk
        q_end = min(P, q1 + chunk)
        nt = (q_end - q1 + TP - 1) // TP
        # a plane's last 1-2 pixels (7x7 = 8 tiles and 1) a pixel at a time after the tiles,
        # not a whole tile's FMAs (chunks are whole tiles, so only a plane's end has them)
        sliver = (q_end - q1) % TP
        if 0 < sliver <= SLIVER:
            nt -= 1
        else:
            sliver = 0
        # an odd count of output blocks whose last pair and lone block are both this item's:
        # the three go through 4 x 3 tiles of their own (MobileNetV2's 144 -> 24 at 56x56)
        triple = OCB % 2 == 1 and OCB >= 3 and pr0 + npr == pairs and npr >= 2
        if triple:
            npr -= 2
        # where the run's x fits in L1 (few input channels, stride 1) each pair sweeps the run,
        # writing y in long runs per block (24 -> 144 @56: 4% faster); else each tile goes
        # through every pair while it is in L1 (64 -> 128 @56 stride 2: 11% faster)
        # (one loop, one call site of _tile, either order: two call sites compiled the tile code
        # twice; conv1x1's cold compile at 16 lanes 108 -> 71 s, speed level)
        pairs_outer = contiguous and chunk * CB * V * 4 <= X_RUN_BYTES
        pr, t = pr0, 0
        for _ in range(npr * nt):
            _tile(a, xn, p0, ya, y0, y_plain, n, pr, q1 + t * TP, q1, chunk, K, P, HW, OW, Wi, sh, sw, CB, OCB, bias0,
                  contiguous, ep, ra, L)
            if pairs_outer:
                t += 1
                if t == nt:
                    t = 0
                    pr += 1
            else:
                pr += 1
                if pr == pr0 + npr:
                    pr = pr0
                    t += 1
        if sliver:
            for pr in range(pr0, pr0 + npr):
                ob0 = 2 * pr
                two = ob0 + 1 < OCB
                ob1 = ob0 + 1 if two else ob0
                for q in range(q_end - sliver, q_end):
                    oh = q // OW
                    s0, s1 = _pixel_pair_sums(a, xn, p0, ob0, ob1, oh, q - oh * OW, 0, 1, H, Wi, OW, 1, 1, 1, 1, sh, sw,
                                              0, 0, 0, 1, 1, 1, CB, HW * V, HW * V, 1, L)
                    _put_pixel_pair(a, ya, y0, y_plain, n, ob0, ob1, two, q, K, P, OCB, bias0, s0, s1, ep, ra, L)
        if triple:
            for q in range(q1, q_end, 4):
                _triple(a, xn, p0, ya, y0, y_plain, n, q, min(4, q_end - q), K, P, HW, OW, Wi, sh, sw, CB, OCB,
                        bias0, contiguous, ep, ra, L)
