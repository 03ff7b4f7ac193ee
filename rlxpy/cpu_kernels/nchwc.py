"""NCHWc: the CPU backend's channel-blocked activation layout, its reorders, and the
register-tiled direct convolution that runs in it (algo `nchwc_direct`).

A tensor [N, C, *S] is stored as [N, CB, prod(S), V] with CB = ceil(C / V) and V the
vector width (RLX_SIMD_WIDTH; rlxpy.thunks.layout): one vector holds V channels of one pixel, as in
onnxruntime's NCHWc and oneDNN's nChw16c. Channels past C are zero in every blocked
tensor a kernel here writes, so a consumer may read whole vectors.

The conv tile is 6 output pixels x 2 blocks of V output channels: 12 vector accumulators,
and per input channel 2 vector loads of weights and 6 broadcasts of x (15 of AVX2's 16
registers). At 16 lanes (AVX-512's 32 registers) a group whose output blocks come in fours
runs 6 pixels x 4 blocks: 24 accumulators, 4 weight vectors and 6 broadcasts for 24 FMAs
(the shape of MLAS's AVX-512 kernel; tile_blocks). Pixels run along the flattened output
plane, so a tile may span two rows and a 7x7 plane wastes no more than one tile. A pixel
whose tap falls in the padding reads from V zeros kept after the packed weights: the inner
loop has no branch.

The kernels take the arena as one flat float32 array and offsets in floats; the vector
intrinsics index it without numba's wraparound of negative indices.
"""
from __future__ import annotations

from math import ceil, log, prod

import numpy as np
from numba import prange

from .balance import candidate_runs, most_even, run_costs
from .host import l2_bytes
from .jit import inlined, parallel_kernel
from .im2col import padded_taps, valid_range
from .simd import (nlanes, vadd, vbcast, vfma, vload, vmax, vmin, vmul, vsplat, vstore, vstore_columns, vstore_tail,
                   vtranspose, vzero)

TP = 6          # output pixels per tile
# conv and conv_plain_in: a last tile of at most this many live pixels runs a pixel at a time
# (a whole tile's FMAs cost more than 1-2 pixels' own)
SLIVER = 2
BLOCKS = 2      # blocks of V output channels per tile


def as_forward(rec):
    """A stride-1 transposed conv or conv input gradient as the forward conv it equals: the
    gradient (or the input) convolved with the flipped, per-group transposed weights, with
    padding d*(k-1) - p; (geometry, input role, output role), or a reason it is not one."""
    from ..thunks.geometry import ConvGeometry
    g = rec.geometry
    if any(s != 1 for s in g.stride):
        return f"stride {tuple(g.stride)}"
    reach = tuple(d * (k - 1) for d, k in zip(g.dilation, g.kernel))
    pb = tuple(r - p for r, p in zip(reach, g.pad_begin))
    pe = tuple(r - p for r, p in zip(reach, g.pad_end))
    if min(pb + pe) < 0:
        return "padding wider than the dilated kernel"
    if hasattr(rec, "dy"):         # an input gradient: dy -> dx
        return ConvGeometry(g.y_shape, g.x_shape, g.kernel, g.stride, pb, pe, g.dilation, g.groups), "dy", "dx"
    out = g.y_shape                 # a transposed conv: x -> y (y_shape already holds output_padding, 0 at stride 1)
    return ConvGeometry(g.x_shape, out, g.kernel, g.stride, pb, pe, g.dilation, g.groups), "x", "y"


def forward_weights(w, groups: int):
    """[A, B/groups, *k] weights of a transposed conv or an input gradient as the forward
    weights [B, A/groups, *k] of as_forward: per group transposed, every tap flipped."""
    a, bg = w.shape[:2]
    k = w.shape[2:]
    t = w.reshape((groups, a // groups, bg) + k).transpose((0, 2, 1) + tuple(range(3, 3 + len(k))))
    t = t.reshape((groups * bg, a // groups) + k)
    return np.ascontiguousarray(t[(slice(None), slice(None)) + (slice(None, None, -1),) * len(k)])


def eligible(g, lanes: int):
    """None when nchwc_direct can run the conv, else why not (the channels of a group
    must be whole blocks, unless there is one group). 1-, 2- and 3-D."""
    if g.groups > 1 and (g.cin_g % lanes or g.cout_g % lanes):
        return f"{g.cin_g} -> {g.cout_g} channels per group are not whole blocks of {lanes}"
    return None


def group_blocks(g, lanes: int) -> tuple:
    """(input blocks, output blocks) of one group."""
    if g.groups == 1:
        return -(-g.x_shape[1] // lanes), -(-g.y_shape[1] // lanes)
    return g.cin_g // lanes, g.cout_g // lanes


# 6 pixels x 4 blocks: 24 accumulators + 4 weight vectors + a broadcast, 29 of AVX-512's 32
# registers (AVX2's 16 would spill). Each broadcast of x feeds 4 FMAs, not 2, and a work
# item reads x once for 4 blocks. ResNet-18 in one arena, its convs' calls alternated with
# the 6 x 2 tile's over 20 rounds (Xeon, 2 cores): the 3x3 convs 1-6% faster, the pass 2.7%
# at batch 1 and 3.7% at batch 8; the outputs bit for bit the same (the same sums in the
# same order). Costs numba about 30 s more per width to compile conv.
QUAD = 4


def tile_blocks(g, lanes: int) -> int:
    """Output blocks per conv tile: QUAD at 16 lanes where a group's output blocks are a
    multiple of 4, else BLOCKS (2)."""
    return QUAD if lanes == 16 and group_blocks(g, lanes)[1] % QUAD == 0 else BLOCKS


def lone_block_tiles(g, lanes: int, chunk: int) -> bool:
    """Whether conv runs 12 pixels x 1 block tiles: a group's output blocks end on one with
    no partner (an odd count) and a work item's run of pixels (chunk, within a plane) holds
    more than a tile and a sliver."""
    return group_blocks(g, lanes)[1] % 2 == 1 and min(chunk, prod(g.y_shape[2:])) > TP + SLIVER


def plain_in_lone_tiles(g, lanes: int) -> bool:
    """Whether conv_plain_in runs 12 pixels x 1 block tiles: one output block."""
    return g.y_shape[1] <= lanes


def packed_floats(g, lanes: int) -> int:
    """Packed weights [out block, kh, kw, in block of its group, V in, V out], then the bias
    padded to whole blocks, then V zeros (what taps in the padding read). Taps outer, input
    blocks inner: the order conv reads them in, one stream per output block (input blocks
    outer, a tap's blocks 2.3 KB apart, held 512 -> 512 @7, whose 9.4 MB of weights come
    from memory each run, at 1.76 ms; 1.41 this way)."""
    cbg, ocb_g = group_blocks(g, lanes)
    taps = prod(g.kernel)
    ocb = ocb_g * g.groups
    return ocb * cbg * taps * lanes * lanes + ocb * lanes + lanes


def chunk_pixels(g, outer: int, threads: int) -> int:
    """Output pixels per work item, when `outer` items cover each chunk of a plane (times
    the output depth of a 3-D op: a chunk stays in one plane): a whole number of tiles,
    about 8, and at least 4 items per thread where the plane allows it."""
    outer *= prod(g.y_shape[2:-2])
    tiles = -(-prod(g.y_shape[-2:]) // TP)
    per = min(8, tiles)
    while per > 1 and outer * ceil(tiles / per) < 4 * threads:
        per -= 1
    return per * TP


# A work item's x is read where the producer of x wrote it when the image is split over the
# threads (pixels outer): each core then reads what its own cache holds. That pays while every
# pair's weights stay in the L2 a core has (half of its 512 KiB on Zen 2): past that, each
# chunk would fetch them all again, and pairs go outer (x read by both cores).
PIXEL_MAJOR_WEIGHT_BYTES = 256 * 1024


# A strided conv reads its x where the conv before it wrote it, but each output row needs
# `stride` times the input rows: with pairs outer, each core reads half of x from the other
# core's cache. Pixels outer pays for that up to larger weights, while every pair's weights
# fit this share of a core's L2 (host.l2_bytes). ResNet-18's s2 64 -> 128 (295 KB of
# weights) on the Xeon (2 MiB L2), in the model and alternated with pairs outer: 0.319 ->
# 0.276 ms at batch 1 (40 passes), 1.14-1.25x per image at batch 8; s2 128 -> 256 (1.2 MB)
# ran 0.9x pixels outer, past the share. On a 512 KiB L2 (Zen 2, Zen 3) the share is the
# 256 KiB above, the rule they were measured with.
STRIDED_PIXEL_MAJOR_L2_SHARE = 0.5


def pixel_major(g, lanes: int) -> bool:
    """Whether conv's work items take chunks of pixels outer: every pair's packed weights fit
    PIXEL_MAJOR_WEIGHT_BYTES, or, for a strided conv, STRIDED_PIXEL_MAJOR_L2_SHARE of the
    host's L2. 3x3 64 -> 64 @56 at batch 1 after another conv: 1.39 ms pairs outer, 1.27
    pixels outer (x freshly written by the two cores; AVX2, 2 cores)."""
    cbg, ocbg = group_blocks(g, lanes)
    weights = 4 * ocbg * cbg * prod(g.kernel) * lanes * lanes
    if weights <= PIXEL_MAJOR_WEIGHT_BYTES:
        return True
    return max(g.stride) > 1 and weights <= STRIDED_PIXEL_MAJOR_L2_SHARE * l2_bytes()


# Pairs outer, a batch's images inner (conv's gp = 0) where a pair's packed weights outweigh
# an image's x in its group: each thread then reads every image's x once per pair, not every
# pair's weights once per image. ResNet-18's 512 -> 512 @7 at batch 8 (AVX2, 2 cores, in
# the model, the orders alternated): 11.0-11.6 -> 10.7-10.9 ms; 256 @14 (weights 144 floats
# a channel and pair against x's 196 a channel) no faster, 128 @28 4-7% slower.
PAIR_MAJOR_RATIO = 1.0


def pair_major(g, lanes: int) -> bool:
    """Whether conv's work items (not pixel_major) take pairs outer and the batch's images
    inside them: more than one image, and a pair's weights (2 blocks x taps x V floats per
    input channel) over PAIR_MAJOR_RATIO times an image's x (its spatial size per channel)."""
    if g.x_shape[0] < 2 or pixel_major(g, lanes):
        return False
    return BLOCKS * prod(g.kernel) * lanes > PAIR_MAJOR_RATIO * prod(g.x_shape[2:])


def pair_group(g, lanes: int) -> int:
    """How many pairs of output blocks a work item's chunk goes through before the next chunk
    (conv's gp): all of a group's pixels outer, else 1; 0 for pairs outer of the images
    (pair_major)."""
    if pixel_major(g, lanes):
        return -(-group_blocks(g, lanes)[1] // tile_blocks(g, lanes))
    return 0 if pair_major(g, lanes) else 1


def items(g, lanes: int, threads: int) -> int:
    """Pixels per work item of conv: items are (image, group, tile's output blocks (a pair,
    or a quad: tile_blocks), chunk). Where chunk_pixels' items fall unevenly on the threads
    (balance.most_even), the most even run of at least 2 tiles instead (conv_lone steps 12
    pixels): UNet's 64 -> 64 at 16x16, batch 1, 2 threads: 8 runs of 6 tiles, 24 tiles
    against 19, became 4 runs of 11, 22 against 21 (balance 0.896 -> 0.977, the
    best 43 tiles allow)."""
    blocks = -(-group_blocks(g, lanes)[1] // tile_blocks(g, lanes))
    planes = g.x_shape[0] * g.groups * prod(g.y_shape[2:-2])
    usual = chunk_pixels(g, g.x_shape[0] * g.groups * blocks, threads) // TP
    P = prod(g.y_shape[-2:])
    tiles = -(-P // TP)
    gp = pair_group(g, lanes)

    def loads(per):                 # items in prange order (_item): each run gp times in a row, or blocks apart
        runs = run_costs(P, per, TP, SLIVER)
        if gp == 0:
            return runs * (planes * blocks)
        return [c for _ in range(planes * blocks // gp) for c in runs for _ in range(gp)]

    options = sorted((p for p in candidate_runs(tiles, threads) if p >= min(2, tiles)),
                     key=lambda p: (abs(log(p / usual)), -p))
    return most_even(options, loads, threads, usual) * TP


@parallel_kernel
def pack(w, b, a, p0, groups, CBg, OCBg, L):
    """w [K, C/groups, KH, KW] (and b [K] or empty) into a[p0:]: see packed_floats. A 3-D
    kernel comes as [K, C/groups, KD*KH, KW] (the same bytes): taps in the kernels' order."""
    V = nlanes(L)
    K, Cg, KH, KW = w.shape
    Kg = K // groups
    OCB = OCBg * groups
    T = KH * KW
    for ob in prange(OCB):
        g = ob // OCBg
        for ib in range(CBg):
            for t in range(T):
                i = t // KW
                j = t - i * KW
                base = p0 + ((ob * T + t) * CBg + ib) * V * V
                for ci in range(V):
                    c = ib * V + ci                  # channel within the group
                    for co in range(V):
                        k = (ob - g * OCBg) * V + co  # output channel within the group
                        ok = c < Cg and k < Kg
                        a[base + ci * V + co] = w[g * Kg + k, c, i, j] if ok else np.float32(0.0)
    tail = p0 + OCB * CBg * T * V * V
    for k in range(OCB * V + V):
        g = k // (OCBg * V)
        kk = k - g * OCBg * V
        a[tail + k] = b[g * Kg + kk] if (b.size > 0 and k < OCB * V and kk < Kg) else np.float32(0.0)


# to_blocked cuts a large plane into spans of pixels, each span through every block before
# the next: the threads then split the image by rows (its first half to the first thread at
# batch 1), as the kernels that read it do (pixels outer, pools by rows), so each core reads
# what it wrote. A span is at least REORDER_SPAN_VECTORS V-pixel blocks, at most
# REORDER_SPANS a plane. MaxPool 3x3 s2 on 64 @112 at batch 1 (Xeon, 30 rounds alternated):
# pool by rows after this reorder by channel blocks 0.229 ms, both by blocks 0.200, both by
# rows 0.219; in ResNet-18, after the stem (by rows), the pool by rows ran 1.2-1.4x.
REORDER_SPANS = 8
REORDER_SPAN_VECTORS = 16


@parallel_kernel
def to_blocked(x, src, a, dst, N, C, S, L):
    """x[src:] plain [N, C, S] -> a[dst:] blocked [N, CB, S, V], zeros past C (x may be a,
    or a graph input read in place): V x V blocks (V channels x V pixels) transposed in
    registers. Work items: (image, span of pixels, channel block)."""
    CB = (C + nlanes(L) - 1) // nlanes(L)
    spans = max(1, min(REORDER_SPANS, S // (REORDER_SPAN_VECTORS * nlanes(L))))
    span = -(-S // (spans * nlanes(L))) * nlanes(L)         # whole vectors of pixels
    body = S - S % nlanes(L)
    for q in prange(N * spans * CB):
        V = nlanes(L)
        cb = q % CB
        r = q // CB
        n = r // spans
        s_lo = (r - n * spans) * span
        s_hi = min(S, s_lo + span)
        c0 = cb * V
        nc = min(V, C - c0)
        s_in = src + (n * C + c0) * S
        s_out = dst + (n * CB + cb) * S * V
        for s0 in range(s_lo, min(s_hi, body), V):
            vtranspose(x, s_in + s0, S, nc, a, s_out + s0 * V, V, V, L)
        for s in range(max(s_lo, body), s_hi):
            for c in range(V):
                a[s_out + s * V + c] = x[s_in + c * S + s] if c < nc else np.float32(0.0)


@parallel_kernel
def from_blocked(a, src, dst, N, C, S, L):
    """a[src:] blocked [N, CB, S, V] -> a[dst:] plain [N, C, S]."""
    CB = (C + nlanes(L) - 1) // nlanes(L)
    for q in prange(N * CB):
        V = nlanes(L)
        n = q // CB
        c0 = (q - n * CB) * V
        nc = min(V, C - c0)
        s_in = src + q * S * V
        s_out = dst + (n * C + c0) * S
        body = S - S % V
        for s0 in range(0, body, V):
            vtranspose(a, s_in + s0 * V, V, V, a, s_out + s0, S, nc, L)
        for s in range(body, S):
            for c in range(nc):
                a[s_out + c * S + s] = a[s_in + s * V + c]


@inlined
def _tap(xb, ih0, iw0, dy, dx, H, Wi, ps, z0, alive):
    """Where pixel (ih0 + dy, iw0 + dx) of a plane starting at xb is (ps floats a pixel), or
    z0 (zeros) when it is in the padding or the pixel is past the tile's live ones."""
    ih = ih0 + dy
    iw = iw0 + dx
    # one unsigned compare per axis: a negative index wraps to a huge one
    if alive and np.uint64(ih) < np.uint64(H) and np.uint64(iw) < np.uint64(Wi):
        return xb + (ih * Wi + iw) * ps
    return z0


@inlined
def _step(oh, ow, OW):
    """The output pixel after (oh, ow), row-major."""
    return (oh, ow + 1) if ow + 1 < OW else (oh + 1, 0)


@inlined
def _origins(oh, ow, live, OW, sh, sw, ph, pw):
    """The input origin (top-left tap) of each of a tile's 6 pixels, the first at (oh, ow):
    a pixel past the live ones repeats the first's. Then the pixel after the tile. (One
    integer division per chunk, not two per pixel: on small convs they cost more than the
    FMAs.)"""
    ih_0, iw_0 = oh * sh - ph, ow * sw - pw
    oh, ow = _step(oh, ow, OW)
    ih_1, iw_1 = (oh * sh - ph, ow * sw - pw) if live > 1 else (ih_0, iw_0)
    oh, ow = _step(oh, ow, OW)
    ih_2, iw_2 = (oh * sh - ph, ow * sw - pw) if live > 2 else (ih_0, iw_0)
    oh, ow = _step(oh, ow, OW)
    ih_3, iw_3 = (oh * sh - ph, ow * sw - pw) if live > 3 else (ih_0, iw_0)
    oh, ow = _step(oh, ow, OW)
    ih_4, iw_4 = (oh * sh - ph, ow * sw - pw) if live > 4 else (ih_0, iw_0)
    oh, ow = _step(oh, ow, OW)
    ih_5, iw_5 = (oh * sh - ph, ow * sw - pw) if live > 5 else (ih_0, iw_0)
    oh, ow = _step(oh, ow, OW)
    return ih_0, iw_0, ih_1, iw_1, ih_2, iw_2, ih_3, iw_3, ih_4, iw_4, ih_5, iw_5, oh, ow


@inlined
def _pixel_offsets(org, Wi, ps):
    """The 6 origins of _origins as offsets in a plane of rows Wi pixels wide, ps floats a
    pixel."""
    return ((org[0] * Wi + org[1]) * ps, (org[2] * Wi + org[3]) * ps, (org[4] * Wi + org[5]) * ps,
            (org[6] * Wi + org[7]) * ps, (org[8] * Wi + org[9]) * ps, (org[10] * Wi + org[11]) * ps)


@inlined
def _chunk(ch, chunk, P, OW):
    """A work item's chunk of output pixels: one past its last, and its first pixel (oh, ow)
    (one integer division per chunk)."""
    first = ch * chunk
    oh = first // OW
    return min(P, first + chunk), oh, first - oh * OW


@inlined
def _inside(ih, iw, H, Wi, KH, KW, dh, dw):
    return ih >= 0 and iw >= 0 and ih + (KH - 1) * dh < H and iw + (KW - 1) * dw < Wi


@inlined
def _tile_inside(live, ih_0, iw_0, ih_5, iw_5, H, Wi, KH, KW, dh, dw, OW, sw, pw):
    """Whether every tap of every pixel of a full tile is inside x. Pixels run row-major, so
    checking the first and last pixel, and where the tile crosses rows the row ends
    (ow = OW - 1 and ow = 0), covers them all."""
    if live < TP or not (_inside(ih_0, iw_0, H, Wi, KH, KW, dh, dw) and _inside(ih_5, iw_5, H, Wi, KH, KW, dh, dw)):
        return False
    if ih_5 == ih_0:
        return True
    return _inside(ih_0, (OW - 1) * sw - pw, H, Wi, KH, KW, dh, dw) and _inside(ih_5, -pw, H, Wi, KH, KW, dh, dw)


# A conv's epilogue in its store (blocked y only): y = clamp(y + r, lo, hi) per vector, the
# residual r read at y's own index of array ra from r0 (r0 < 0: none). kind 0: none, 1:
# clamp (relu is lo = 0, hi = inf). vmax/vmin keep a NaN, as torch.relu and clamp do.
def epilogue_args(kind: int, lo: float, hi: float, ra, r0: int) -> tuple:
    """The `epi` argument of conv, from Python (kind 0 and r0 = -1: none)."""
    return (int(kind), np.float32(lo), np.float32(hi), ra, int(r0))


def no_epilogue_args(ra) -> tuple:
    """conv's `epi` argument for a conv with no fused epilogue (ra: any float32 array)."""
    return epilogue_args(0, 0.0, 0.0, ra, -1)


@inlined
def no_ep():
    """No epilogue: _epi's ep (pass any float32 array as ra, never read)."""
    return (0, np.float32(0.0), np.float32(0.0), -1)


@inlined
def _epi(v, at, ep, ra, L):
    """v after the epilogue, for the pixel vector stored at y index `at`: ep holds the
    scalars (kind, lo, hi, r0) and ra the residual's array. A kernel takes them out of its
    `epi` argument once, outside its prange: taking an array out of a tuple inside the loop
    cost an NRT incref and decref (atomics) per vector stored, which held the depthwise
    kernel at 15 GFLOP/s (48 without)."""
    kind, lo, hi, r0 = ep
    if r0 >= 0:
        v = vadd(v, vload(ra, r0 + at, L))
    if kind == 1:
        v = vmin(vmax(v, vsplat(lo, L)), vsplat(hi, L))
    return v


@inlined
def _put_tile(ya, y0, y_plain, n, ob0, ob1, two, q0, live, K, P, OCB, bv0, bv1, acc, ep, ra, L):
    """A tile's live pixels, of one or two channel blocks (+ bias, then the epilogue),
    blocked or plain."""
    a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51 = acc
    _put_block(ya, y0, y_plain, n, ob0, OCB, K, P, q0, live, vadd(a00, bv0), vadd(a10, bv0), vadd(a20, bv0),
               vadd(a30, bv0), vadd(a40, bv0), vadd(a50, bv0), ep, ra, L)
    if two:
        _put_block(ya, y0, y_plain, n, ob1, OCB, K, P, q0, live, vadd(a01, bv1), vadd(a11, bv1), vadd(a21, bv1),
                   vadd(a31, bv1), vadd(a41, bv1), vadd(a51, bv1), ep, ra, L)


@inlined
def _put_pixel_pair(a, ya, y0, y_plain, n, ob0, ob1, two, q, K, P, OCB, bias0, s0, s1, ep, ra, L):
    """One pixel's sums through an output pair (_pixel_pair_sums), + bias, stored as a tile
    of one live pixel."""
    V = nlanes(L)
    z = vzero(L)
    _put_tile(ya, y0, y_plain, n, ob0, ob1, two, q, 1, K, P, OCB, vload(a, bias0 + ob0 * V, L),
              vload(a, bias0 + ob1 * V, L), (s0, s1, z, z, z, z, z, z, z, z, z, z), ep, ra, L)


@inlined
def _put_block(ya, y0, y_plain, n, cb, CB, C, P, q0, live, r0, r1, r2, r3, r4, r5, ep, ra, L):
    """The live ones of 6 pixels (from q0) of channel block cb: vector stores into blocked y
    [N, CB, P, V] (after the epilogue ep, residual from ra: no_ep() for none), or into plain
    y [N, C, P] (a graph output needs no reorder; no epilogue there) transposed in registers
    and stored as up to V rows of `live` pixels."""
    V = nlanes(L)
    if y_plain:
        vstore_columns(ya, y0 + (n * C + cb * V) * P + q0, P, min(V, C - cb * V), live, r0, r1, r2, r3, r4, r5)
        return
    at = ((n * CB + cb) * P + q0) * V
    yq = y0 + at
    vstore(ya, yq, _epi(r0, at, ep, ra, L))
    if live > 1:
        vstore(ya, yq + V, _epi(r1, at + V, ep, ra, L))
    if live > 2:
        vstore(ya, yq + 2 * V, _epi(r2, at + 2 * V, ep, ra, L))
    if live > 3:
        vstore(ya, yq + 3 * V, _epi(r3, at + 3 * V, ep, ra, L))
    if live > 4:
        vstore(ya, yq + 4 * V, _epi(r4, at + 4 * V, ep, ra, L))
    if live > 5:
        vstore(ya, yq + 5 * V, _epi(r5, at + 5 * V, ep, ra, L))


@inlined
def _zeros12(L):
    z = vzero(L)
    return z, z, z, z, z, z, z, z, z, z, z, z


@inlined
def _fma_6x2(a, o0, o1, o2, o3, o4, o5, w0, w1, acc, L):
    """The micro-kernel: x at o0..o5 (one float of each of 6 pixels, broadcast) times two
    weight vectors, into 12 accumulators."""
    a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51 = acc
    xv = vbcast(a, o0, L)
    a00 = vfma(xv, w0, a00)
    a01 = vfma(xv, w1, a01)
    xv = vbcast(a, o1, L)
    a10 = vfma(xv, w0, a10)
    a11 = vfma(xv, w1, a11)
    xv = vbcast(a, o2, L)
    a20 = vfma(xv, w0, a20)
    a21 = vfma(xv, w1, a21)
    xv = vbcast(a, o3, L)
    a30 = vfma(xv, w0, a30)
    a31 = vfma(xv, w1, a31)
    xv = vbcast(a, o4, L)
    a40 = vfma(xv, w0, a40)
    a41 = vfma(xv, w1, a41)
    xv = vbcast(a, o5, L)
    a50 = vfma(xv, w0, a50)
    a51 = vfma(xv, w1, a51)
    return a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51


@inlined
def _offsets(xb, org, dy, dx, H, Wi, ps, z0, live):
    """Where tap (dy, dx) of each of the tile's 6 pixels is (ps floats a pixel; org: the
    pixels' origins), each tested: a tap in the padding, or a pixel past the live ones, at
    z0 (zeros)."""
    ih_0, iw_0, ih_1, iw_1, ih_2, iw_2, ih_3, iw_3, ih_4, iw_4, ih_5, iw_5 = org
    return (_tap(xb, ih_0, iw_0, dy, dx, H, Wi, ps, z0, True), _tap(xb, ih_1, iw_1, dy, dx, H, Wi, ps, z0, live > 1),
            _tap(xb, ih_2, iw_2, dy, dx, H, Wi, ps, z0, live > 2), _tap(xb, ih_3, iw_3, dy, dx, H, Wi, ps, z0, live > 3),
            _tap(xb, ih_4, iw_4, dy, dx, H, Wi, ps, z0, live > 4), _tap(xb, ih_5, iw_5, dy, dx, H, Wi, ps, z0, live > 5))


@inlined
def _all_padding(o0, o1, o2, o3, o4, o5, z0):
    """Whether all 6 of a tap's offsets are at z0 (the tap is in the padding for every live
    pixel of the tile, as a 3x3 tap row above a tile in the top output row): it then adds
    nothing, and skipping its blocks' FMAs is what onnxruntime's MLAS does with padding."""
    return o0 == z0 and o1 == z0 and o2 == z0 and o3 == z0 and o4 == z0 and o5 == z0


@inlined
def _block_steps(o0, o1, o2, o3, o4, o5, z0, BS):
    """Each tap offset's step to the same tap in the next block of x: BS, or 0 for one at
    z0 (the padding's zeros, the same for every block)."""
    return (BS if o0 != z0 else 0, BS if o1 != z0 else 0, BS if o2 != z0 else 0, BS if o3 != z0 else 0,
            BS if o4 != z0 else 0, BS if o5 != z0 else 0)


@inlined
def _item(it, chunks, pairs, groups, gp, N):
    """A work item's (chunk of pixels, pair of output blocks in its group, group, image), in
    the order (image, group, run of gp pairs, chunk, pair in the run): gp = 1 is pairs outer,
    gp = pairs chunks outer (pair_group); gp = 0: (group, pair, image, chunk), each pair's
    weights through every image while they are in L2."""
    if gp == 0:
        ch = it % chunks
        r = it // chunks
        n = r % N
        r //= N
        return ch, r % pairs, r // pairs, n
    pr = it % gp
    r = it // gp
    ch = r % chunks
    r //= chunks
    runs = pairs // gp
    pr += (r % runs) * gp
    r //= runs
    g = r % groups
    return ch, pr, g, r // groups


@inlined
def _pixel_pair_sums(a, xg, p0, ob0, ob1, oh, ow, od, D, H, Wi, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw,
                     CBg, HWV, BS, T, L):
    """One output pixel's sums through output blocks ob0 and ob1 over its taps inside x (x's
    group at xg), each block's input channels 4 apart in 4 sums: 8 chains of FMAs, not the
    2 of one sum per block waiting on each other's latency."""
    V = nlanes(L)
    a0 = vzero(L)
    a1 = vzero(L)
    a2 = vzero(L)
    a3 = vzero(L)
    a4 = vzero(L)
    a5 = vzero(L)
    a6 = vzero(L)
    a7 = vzero(L)
    ih0 = oh * sh - ph
    iw0 = ow * sw - pw
    i_lo, i_hi = valid_range(KH, H, ih0, dh)
    j_lo, j_hi = valid_range(KW, Wi, iw0, dw)
    for kd in range(KD):
        idp = od * sd - pd + kd * dd
        if idp < 0 or idp >= D:
            continue
        for i in range(i_lo, i_hi):
            for j in range(j_lo, j_hi):
                xb = xg + idp * HWV + ((ih0 + i * dh) * Wi + iw0 + j * dw) * V
                tap = (kd * KH + i) * KW + j
                wb0 = p0 + (ob0 * T + tap) * CBg * V * V
                wb1 = p0 + (ob1 * T + tap) * CBg * V * V
                for ib in range(CBg):
                    for ci in range(0, V - 3, 4):
                        xv = vbcast(a, xb + ci, L)
                        a0 = vfma(xv, vload(a, wb0 + ci * V, L), a0)
                        a1 = vfma(xv, vload(a, wb1 + ci * V, L), a1)
                        xv = vbcast(a, xb + ci + 1, L)
                        a2 = vfma(xv, vload(a, wb0 + (ci + 1) * V, L), a2)
                        a3 = vfma(xv, vload(a, wb1 + (ci + 1) * V, L), a3)
                        xv = vbcast(a, xb + ci + 2, L)
                        a4 = vfma(xv, vload(a, wb0 + (ci + 2) * V, L), a4)
                        a5 = vfma(xv, vload(a, wb1 + (ci + 2) * V, L), a5)
                        xv = vbcast(a, xb + ci + 3, L)
                        a6 = vfma(xv, vload(a, wb0 + (ci + 3) * V, L), a6)
                        a7 = vfma(xv, vload(a, wb1 + (ci + 3) * V, L), a7)
                    for ci in range(V - V % 4, V):        # V = 1: the one channel
                        xv = vbcast(a, xb + ci, L)
                        a0 = vfma(xv, vload(a, wb0 + ci * V, L), a0)
                        a1 = vfma(xv, vload(a, wb1 + ci * V, L), a1)
                    xb += BS
                    wb0 += V * V
                    wb1 += V * V
    return vadd(vadd(a0, a2), vadd(a4, a6)), vadd(vadd(a1, a3), vadd(a5, a7))


@inlined
def _fma_12x1(a, o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11, w, acc, L):
    """A lone block's micro-kernel: x at 12 pixels' offsets (two tiles of 6), broadcast, times
    one weight vector, into 12 accumulators: the first tile's pixel k at acc[2k], the second's
    at acc[2k + 1], where a 6 x 2 tile keeps its two blocks."""
    a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51 = acc
    a00 = vfma(vbcast(a, o0, L), w, a00)
    a01 = vfma(vbcast(a, o6, L), w, a01)
    a10 = vfma(vbcast(a, o1, L), w, a10)
    a11 = vfma(vbcast(a, o7, L), w, a11)
    a20 = vfma(vbcast(a, o2, L), w, a20)
    a21 = vfma(vbcast(a, o8, L), w, a21)
    a30 = vfma(vbcast(a, o3, L), w, a30)
    a31 = vfma(vbcast(a, o9, L), w, a31)
    a40 = vfma(vbcast(a, o4, L), w, a40)
    a41 = vfma(vbcast(a, o10, L), w, a41)
    a50 = vfma(vbcast(a, o5, L), w, a50)
    a51 = vfma(vbcast(a, o11, L), w, a51)
    return a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51


@inlined
def _lone_block_sums(a, xg, p0, ob0, od, org, orb, live_a, live_b, inside, D, H, Wi, KD, KH, KW, sd, pd, dd, dh,
                     dw, CBg, HWV, BS, T, z0, L):
    """Two tiles' sums (12 pixels: org's live_a, then orb's live_b) through one output
    block, x's group at xg: a group with an odd count of output blocks ends on a block with
    no partner, where a 6 x 2 tile would compute it twice (UNet's 16-channel convs at 16
    lanes ran at half the FMA rate). inside: every tap of all 12 pixels is inside x."""
    V = nlanes(L)
    acc = _zeros12(L)
    if inside:
        d0, d1, d2, d3, d4, d5 = _pixel_offsets(org, Wi, V)
        d6, d7, d8, d9, d10, d11 = _pixel_offsets(orb, Wi, V)
        for kd in range(KD):
            idp = od * sd - pd + kd * dd
            if idp < 0 or idp >= D:
                continue
            for i in range(KH):
                for j in range(KW):
                    xb = xg + idp * HWV + (i * dh * Wi + j * dw) * V
                    wb = p0 + (ob0 * T + (kd * KH + i) * KW + j) * CBg * V * V
                    for ib in range(CBg):
                        for ci in range(V):
                            acc = _fma_12x1(a, xb + d0 + ci, xb + d1 + ci, xb + d2 + ci, xb + d3 + ci,
                                            xb + d4 + ci, xb + d5 + ci, xb + d6 + ci, xb + d7 + ci, xb + d8 + ci,
                                            xb + d9 + ci, xb + d10 + ci, xb + d11 + ci, vload(a, wb + ci * V, L),
                                            acc, L)
                        xb += BS
                        wb += V * V
        return acc
    for kd in range(KD):
        idp = od * sd - pd + kd * dd
        if idp < 0 or idp >= D:
            continue
        xb = xg + idp * HWV
        for i in range(KH):
            for j in range(KW):
                o0, o1, o2, o3, o4, o5 = _offsets(xb, org, i * dh, j * dw, H, Wi, V, z0, live_a)
                o6, o7, o8, o9, o10, o11 = _offsets(xb, orb, i * dh, j * dw, H, Wi, V, z0, live_b)
                if _all_padding(o0, o1, o2, o3, o4, o5, z0) and _all_padding(o6, o7, o8, o9, o10, o11, z0):
                    continue
                s0, s1, s2, s3, s4, s5 = _block_steps(o0, o1, o2, o3, o4, o5, z0, BS)
                s6, s7, s8, s9, s10, s11 = _block_steps(o6, o7, o8, o9, o10, o11, z0, BS)
                wb = p0 + (ob0 * T + (kd * KH + i) * KW + j) * CBg * V * V
                for ib in range(CBg):
                    for ci in range(V):
                        acc = _fma_12x1(a, o0 + ci, o1 + ci, o2 + ci, o3 + ci, o4 + ci, o5 + ci, o6 + ci, o7 + ci,
                                        o8 + ci, o9 + ci, o10 + ci, o11 + ci, vload(a, wb + ci * V, L), acc, L)
                    o0 += s0
                    o1 += s1
                    o2 += s2
                    o3 += s3
                    o4 += s4
                    o5 += s5
                    o6 += s6
                    o7 += s7
                    o8 += s8
                    o9 += s9
                    o10 += s10
                    o11 += s11
                    wb += V * V
    return acc


@inlined
def _zeros24(L):
    z = vzero(L)
    return (z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z)


@inlined
def _fma_6x4(a, o0, o1, o2, o3, o4, o5, w0, w1, w2, w3, acc, L):
    """The quad micro-kernel: x at o0..o5 broadcast, times four weight vectors, into 24
    accumulators: blocks 0 and 1 as _fma_6x2 keeps them, then blocks 2 and 3 the same way
    (so acc[:12] and acc[12:] are each a pair's tile for _put_tile). One flat tuple: numba's
    array analysis fails on a pair of 12-tuples returned from an inlined function."""
    (a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51,
     b00, b01, b10, b11, b20, b21, b30, b31, b40, b41, b50, b51) = acc
    xv = vbcast(a, o0, L)
    a00 = vfma(xv, w0, a00)
    a01 = vfma(xv, w1, a01)
    b00 = vfma(xv, w2, b00)
    b01 = vfma(xv, w3, b01)
    xv = vbcast(a, o1, L)
    a10 = vfma(xv, w0, a10)
    a11 = vfma(xv, w1, a11)
    b10 = vfma(xv, w2, b10)
    b11 = vfma(xv, w3, b11)
    xv = vbcast(a, o2, L)
    a20 = vfma(xv, w0, a20)
    a21 = vfma(xv, w1, a21)
    b20 = vfma(xv, w2, b20)
    b21 = vfma(xv, w3, b21)
    xv = vbcast(a, o3, L)
    a30 = vfma(xv, w0, a30)
    a31 = vfma(xv, w1, a31)
    b30 = vfma(xv, w2, b30)
    b31 = vfma(xv, w3, b31)
    xv = vbcast(a, o4, L)
    a40 = vfma(xv, w0, a40)
    a41 = vfma(xv, w1, a41)
    b40 = vfma(xv, w2, b40)
    b41 = vfma(xv, w3, b41)
    xv = vbcast(a, o5, L)
    a50 = vfma(xv, w0, a50)
    a51 = vfma(xv, w1, a51)
    b50 = vfma(xv, w2, b50)
    b51 = vfma(xv, w3, b51)
    return (a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51,
            b00, b01, b10, b11, b20, b21, b30, b31, b40, b41, b50, b51)


@inlined
def _quad_sums(a, xg, p0, ob0, od, org, live, inside, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw, CBg, HWV, BS, T,
               z0, L):
    """A tile's sums through output blocks ob0 .. ob0 + 3 (x's group at xg). Per tap, each
    pixel's offset and its step to the next block: from the first pixel's offsets with no
    test inside x, else tested (0 steps in the padding), as conv's 6 x 2 border tiles. One
    micro-kernel call site: numba compiles each inlined copy anew (two had doubled conv's
    compile time)."""
    V = nlanes(L)
    WB = T * CBg * V * V                 # one output block's packed weights
    acc = _zeros24(L)
    d0, d1, d2, d3, d4, d5 = _pixel_offsets(org, Wi, V)
    for kd in range(KD):
        idp = od * sd - pd + kd * dd
        if idp < 0 or idp >= D:
            continue
        xd = xg + idp * HWV
        for i in range(KH):
            for j in range(KW):
                if inside:
                    xb = xd + (i * dh * Wi + j * dw) * V
                    o0, o1, o2, o3, o4, o5 = xb + d0, xb + d1, xb + d2, xb + d3, xb + d4, xb + d5
                    s0 = s1 = s2 = s3 = s4 = s5 = BS
                else:
                    o0, o1, o2, o3, o4, o5 = _offsets(xd, org, i * dh, j * dw, H, Wi, V, z0, live)
                    if _all_padding(o0, o1, o2, o3, o4, o5, z0):
                        continue
                    s0, s1, s2, s3, s4, s5 = _block_steps(o0, o1, o2, o3, o4, o5, z0, BS)
                wb = p0 + (ob0 * T + (kd * KH + i) * KW + j) * CBg * V * V
                for ib in range(CBg):
                    for ci in range(V):
                        acc = _fma_6x4(a, o0 + ci, o1 + ci, o2 + ci, o3 + ci, o4 + ci, o5 + ci,
                                       vload(a, wb + ci * V, L), vload(a, wb + WB + ci * V, L),
                                       vload(a, wb + 2 * WB + ci * V, L), vload(a, wb + 3 * WB + ci * V, L), acc, L)
                    o0 += s0
                    o1 += s1
                    o2 += s2
                    o3 += s3
                    o4 += s4
                    o5 += s5
                    wb += V * V
    return acc


@inlined
def _pair_sums(a, xg, p0, ob0, ob1, od, org, live, inside, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw, CBg, HWV, BS,
               T, z0, L):
    """A 6 x 2 tile's sums through output blocks ob0 and ob1 (x's group at xg). Per tap, the
    blocks of x innermost: the weights stream in pack's order, and the 6 pixels' offsets are
    fixed per tap, each stepped a block at a time. (Blocks outermost reloaded spilled offsets
    at every (block, tap): 144 GFLOP/s on 64 -> 64 @56 against 178 this way, 2 cores AVX2;
    on border tiles, each tap's offsets recomputed per block cost 512 -> 512 @7, all border
    tiles, 20%.) Inside and border tiles keep a loop each: one loop for both, in _quad_sums'
    form (6 offsets and 6 steps per tap), ran the pair tiles slower in one arena: ResNet-18
    at 8 lanes 1.8%, the UNet at 16 (pairs and lone blocks) 2.9%, convs up to 12%."""
    V = nlanes(L)
    acc = _zeros12(L)
    if inside:
        # every tap of every pixel inside x: the offsets from the first pixel's, no test
        d0, d1, d2, d3, d4, d5 = _pixel_offsets(org, Wi, V)
        for kd in range(KD):
            idp = od * sd - pd + kd * dd
            if idp < 0 or idp >= D:
                continue
            for i in range(KH):
                for j in range(KW):
                    xb = xg + idp * HWV + (i * dh * Wi + j * dw) * V
                    tap = (kd * KH + i) * KW + j
                    wb0 = p0 + (ob0 * T + tap) * CBg * V * V
                    wb1 = p0 + (ob1 * T + tap) * CBg * V * V
                    for ib in range(CBg):
                        for ci in range(V):
                            acc = _fma_6x2(a, xb + d0 + ci, xb + d1 + ci, xb + d2 + ci, xb + d3 + ci,
                                           xb + d4 + ci, xb + d5 + ci, vload(a, wb0 + ci * V, L),
                                           vload(a, wb1 + ci * V, L), acc, L)
                        xb += BS
                        wb0 += V * V
                        wb1 += V * V
        return acc
    # a border tile: per tap each pixel's offset in the group's first block and its step to
    # the next, 0 for a tap in the padding or a pixel past the live ones (it reads the V
    # zeros at z0 in every block)
    for kd in range(KD):
        idp = od * sd - pd + kd * dd
        if idp < 0 or idp >= D:        # a plane of padding adds nothing
            continue
        xb = xg + idp * HWV
        for i in range(KH):
            for j in range(KW):
                o0, o1, o2, o3, o4, o5 = _offsets(xb, org, i * dh, j * dw, H, Wi, V, z0, live)
                if _all_padding(o0, o1, o2, o3, o4, o5, z0):
                    continue
                s0, s1, s2, s3, s4, s5 = _block_steps(o0, o1, o2, o3, o4, o5, z0, BS)
                tap = (kd * KH + i) * KW + j
                wb0 = p0 + (ob0 * T + tap) * CBg * V * V
                wb1 = p0 + (ob1 * T + tap) * CBg * V * V
                for ib in range(CBg):
                    for ci in range(V):
                        acc = _fma_6x2(a, o0 + ci, o1 + ci, o2 + ci, o3 + ci, o4 + ci, o5 + ci,
                                       vload(a, wb0 + ci * V, L), vload(a, wb1 + ci * V, L), acc, L)
                    o0 += s0
                    o1 += s1
                    o2 += s2
                    o3 += s3
                    o4 += s4
                    o5 += s5
                    wb0 += V * V
                    wb1 += V * V
    return acc


@inlined
def _conv_constants(p0, OH, OW, KD, KH, KW, groups, CBg, OCBg, chunk, tb, L):
    """conv's per-call values, made once outside the prange: P pixels a plane, OCB blocks
    of y, T taps, a group's pairs (or quads, or lone blocks: tb blocks each),
    chunks a plane, and in the packed weights the bias at bias0 and V zeros at z0. (Not
    the epilogue: its array, returned through an inlined call's tuple, fails numba's array
    analysis of the prange, so each kernel unpacks epi itself.)"""
    V = nlanes(L)
    P = OH * OW
    OCB = OCBg * groups
    T = KD * KH * KW
    bias0 = p0 + OCB * CBg * T * V * V
    return (P, OCB, T, (OCBg + tb - 1) // tb, (P + chunk - 1) // chunk,
            bias0, bias0 + OCB * V)


@inlined
def _work_item(it, x0, D, H, Wi, OD, chunks, pairs, groups, gp, N, CBg, OCBg, tb, chunk, P, OW, L):
    """A work item of conv's prange: its image, output depth, first output block and its
    partner (ob1 = ob0 when there is none: two is False), its run of pixels [q0, p_end) of
    the plane and the first one's (oh, ow); where its group of x starts (xg), and a plane
    and a block of x in floats (HWV, BS)."""
    V = nlanes(L)
    ch, pr, g, n = _item(it, OD * chunks, pairs, groups, gp, N)
    od = ch // chunks
    ch -= od * chunks
    ob0 = g * OCBg + tb * pr
    two = ob0 + 1 < (g + 1) * OCBg
    ob1 = ob0 + 1 if two else ob0
    p_end, oh, ow = _chunk(ch, chunk, P, OW)
    HWV = H * Wi * V
    BS = D * HWV
    xg = x0 + (n * CBg * groups + g * CBg) * BS
    return n, od, ob0, ob1, two, ch * chunk, p_end, oh, ow, xg, HWV, BS


@inlined
def _lone_step(a, xg, p0, ya, y0, y_plain, n, ob0, od, oh, ow, q0, live_a, live_b, K, OCB, P, OD, geo, blk, ep, ra,
               L):
    """A lone output block's 12 pixels from q0, + bias, stored: live_a of the first 6 and
    live_b of the next (live_b <= 0: the first 6 computed twice and stored once). The first
    6 are always computed whole, past live_a too (their taps tested like any pixel's, so
    every read stays inside x; the extra sums are not stored): with live_a a constant in
    the sums, one call site serves a run's full steps and its last, and conv_lone compiles
    one copy of this step, not two (its cold compile at 16 lanes: 144 -> 50 s). The store of
    the first 6 branches on live_a == TP so the full steps' store stays unrolled (without
    it the step ran 4-11% slower on 16 -> 16 @64). Returns the (oh, ow) after the 12.
    geo: (D, H, Wi, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw) and blk: (CBg, HWV,
    BS, T, bias0, z0), in tuples so a call passes fewer than 30 arguments: past that CPython
    calls f(*args), which numba does not inline."""
    V = nlanes(L)
    D, H, Wi, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw = geo
    CBg, HWV, BS, T, bias0, z0 = blk
    org = _origins(oh, ow, TP, OW, sh, sw, ph, pw)
    if live_b > 0:
        orb = _origins(org[12], org[13], live_b, OW, sh, sw, ph, pw)
        lb = live_b
    else:
        orb = org
        lb = TP
    oh, ow = orb[12], orb[13]
    org = org[:12]
    orb = orb[:12]
    inside = (_tile_inside(TP, org[0], org[1], org[10], org[11], H, Wi, KH, KW, dh, dw, OW, sw, pw)
              and _tile_inside(lb, orb[0], orb[1], orb[10], orb[11], H, Wi, KH, KW, dh, dw, OW, sw, pw))
    acc = _lone_block_sums(a, xg, p0, ob0, od, org, orb, TP, lb, inside, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw,
                           CBg, HWV, BS, T, z0, L)
    bv = vload(a, bias0 + ob0 * V, L)
    a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51 = acc
    r0, r1, r2, r3, r4, r5 = vadd(a00, bv), vadd(a10, bv), vadd(a20, bv), vadd(a30, bv), vadd(a40, bv), vadd(a50, bv)
    if live_a == TP:
        _put_block(ya, y0, y_plain, n, ob0, OCB, K, OD * P, od * P + q0, TP, r0, r1, r2, r3, r4, r5, ep, ra, L)
    else:
        _put_block(ya, y0, y_plain, n, ob0, OCB, K, OD * P, od * P + q0, live_a, r0, r1, r2, r3, r4, r5, ep, ra, L)
    if live_b > 0:
        _put_block(ya, y0, y_plain, n, ob0, OCB, K, OD * P, od * P + q0 + TP, live_b, vadd(a01, bv), vadd(a11, bv),
                   vadd(a21, bv), vadd(a31, bv), vadd(a41, bv), vadd(a51, bv), ep, ra, L)
    return oh, ow


@inlined
def _plane_end_pixels(a, xg, p0, ya, y0, y_plain, n, ob0, ob1, two, od, q0, live, tb, K, OCB, P, OD, geo, blk, ep,
                      ra, L):
    """A plane's last 1-2 pixels (7x7 = 8 tiles and 1), a pixel at a time, not a whole
    tile's FMAs, through the pair (or a quad's two pairs one after the other)."""
    D, H, Wi, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw = geo
    CBg, HWV, BS, T, bias0, z0 = blk
    for hq in range(0, tb, 2):
        oa = ob0 + hq
        ob = ob1 + hq
        for q in range(q0, q0 + live):
            s0, s1 = _pixel_pair_sums(a, xg, p0, oa, ob, q // OW, q % OW, od, D, H, Wi, OW, KD, KH, KW, sd, sh, sw,
                                      pd, ph, pw, dd, dh, dw, CBg, HWV, BS, T, L)
            _put_pixel_pair(a, ya, y0, y_plain, n, oa, ob, two, od * P + q, K, OD * P, OCB, bias0, s0, s1, ep, ra, L)


# conv's work items take one of three tile forms: 6 pixels x 2 output blocks (a pair), 6 x 4
# (a quad, tile_blocks) and, for a group's last block when it has no partner, 12 x 1 (a lone
# block). Where a conv's items all take one form, conv_pairs or conv_lone run it: the same
# tiles in a kernel without the other forms' code, which LLVM schedules and allocates better.
# On this Zen4 (one kernel called directly, batch 8, 2 cores): 16 -> 16 @64 (lone) 0.94 ->
# 0.83 ms, 32 -> 32 @32 (pairs) 0.79 -> 0.73. A quad-only kernel was no faster (8.5 ms
# against 8.7 on 64 -> 64 @56), so quads stay in conv with the mixed forms.
@parallel_kernel
def conv(a, x0, p0, ya, y0, y_plain, K, N, D, H, Wi, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw,
         groups, CBg, OCBg, chunk, gp, tb, epi, L):
    """y (in ya at y0: blocked, or plain [N, K, OD, OH, OW] when y_plain; ya is a, or a graph
    output's own array) = conv of x (blocked, in a at x0) with the packed weights and bias
    at p0 (pack). 2-D (and 1-D) convs come with D = OD = KD = 1: a 3-D conv is the sum over
    its depth taps of 2-D convs of input planes. Work items: (image, group, pair of output
    blocks (tb = 4: a quad, tile_blocks), output plane, chunk of pixels), ordered as _item
    says with gp (1, all of a group's pairs or quads, or 0: pair_group); a plane's last tile
    of 1-2 pixels a pixel at a time (_plane_end_pixels: ResNet-18's 512 -> 512 @7, 8 tiles
    and 1 pixel, 1.29 -> 1.18 ms at batch 1). epi: the fused epilogue (_epi,
    epilogue_args)."""
    e_kind, e_lo, e_hi, ra, e_r0 = epi         # once, outside the prange (see _epi)
    ep = (e_kind, e_lo, e_hi, e_r0)
    P, OCB, T, pairs, chunks, bias0, z0 = _conv_constants(p0, OH, OW, KD, KH, KW, groups, CBg, OCBg, chunk, tb, L)
    geo = (D, H, Wi, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw)
    for it in prange(N * groups * pairs * OD * chunks):
        V = nlanes(L)          # inside the loop body: numba outlines it, and V must stay a constant
        n, od, ob0, ob1, two, q0, p_end, oh, ow, xg, HWV, BS = _work_item(it, x0, D, H, Wi, OD, chunks, pairs,
                                                                           groups, gp, N, CBg, OCBg, tb, chunk,
                                                                           P, OW, L)
        blk = (CBg, HWV, BS, T, bias0, z0)
        while q0 < p_end:
            live = min(TP, p_end - q0)
            if not two and live == TP and p_end - q0 > TP + SLIVER:
                # a lone block: 12 pixels (two tiles) a step, each weight vector loaded once
                oh, ow = _lone_step(a, xg, p0, ya, y0, y_plain, n, ob0, od, oh, ow, q0, TP,
                                    min(TP, p_end - q0 - TP), K, OCB, P, OD, geo, blk, ep, ra, L)
                q0 += 2 * TP
                continue
            if live <= SLIVER:             # its last tile: no later tile needs oh, ow
                _plane_end_pixels(a, xg, p0, ya, y0, y_plain, n, ob0, ob1, two, od, q0, live, tb, K, OCB, P, OD, geo,
                                  blk, ep, ra, L)
                break
            org = _origins(oh, ow, live, OW, sh, sw, ph, pw)
            oh, ow = org[12], org[13]
            org = org[:12]
            # a tile whose every tap of every pixel is inside x needs no per-tap test
            inside = _tile_inside(live, org[0], org[1], org[10], org[11], H, Wi, KH, KW, dh, dw, OW, sw, pw)
            if tb == QUAD:
                acq = _quad_sums(a, xg, p0, ob0, od, org, live, inside, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw, CBg,
                                 HWV, BS, T, z0, L)
            else:
                acc = _pair_sums(a, xg, p0, ob0, ob1, od, org, live, inside, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw,
                                 CBg, HWV, BS, T, z0, L)
                acq = acc + acc
            for hq in range(0, tb, 2):         # the pair, or a quad's two pairs: one store call site
                _put_tile(ya, y0, y_plain, n, ob0 + hq, ob1 + hq, two, od * P + q0, live, K, OD * P, OCB,
                          vload(a, bias0 + (ob0 + hq) * V, L), vload(a, bias0 + (ob1 + hq) * V, L),
                          acq[:12] if hq == 0 else acq[12:], ep, ra, L)
            q0 += TP


@parallel_kernel
def conv_pairs(a, x0, p0, ya, y0, y_plain, K, N, D, H, Wi, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh,
               dw, groups, CBg, OCBg, chunk, gp, tb, epi, L):
    """conv where every work item is a pair of output blocks (tb = 2, an even count of
    blocks a group): its arguments, its pair tiles and plane ends."""
    e_kind, e_lo, e_hi, ra, e_r0 = epi         # once, outside the prange (see _epi)
    ep = (e_kind, e_lo, e_hi, e_r0)
    P, OCB, T, pairs, chunks, bias0, z0 = _conv_constants(p0, OH, OW, KD, KH, KW, groups, CBg, OCBg, chunk, 2, L)
    geo = (D, H, Wi, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw)
    for it in prange(N * groups * pairs * OD * chunks):
        V = nlanes(L)
        n, od, ob0, ob1, two, q0, p_end, oh, ow, xg, HWV, BS = _work_item(it, x0, D, H, Wi, OD, chunks, pairs,
                                                                           groups, gp, N, CBg, OCBg, 2, chunk,
                                                                           P, OW, L)
        blk = (CBg, HWV, BS, T, bias0, z0)
        while q0 < p_end:
            live = min(TP, p_end - q0)
            if live <= SLIVER:
                _plane_end_pixels(a, xg, p0, ya, y0, y_plain, n, ob0, ob1, True, od, q0, live, 2, K, OCB, P, OD, geo,
                                  blk, ep, ra, L)
                break
            org = _origins(oh, ow, live, OW, sh, sw, ph, pw)
            oh, ow = org[12], org[13]
            org = org[:12]
            inside = _tile_inside(live, org[0], org[1], org[10], org[11], H, Wi, KH, KW, dh, dw, OW, sw, pw)
            acc = _pair_sums(a, xg, p0, ob0, ob1, od, org, live, inside, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw,
                             CBg, HWV, BS, T, z0, L)
            _put_tile(ya, y0, y_plain, n, ob0, ob1, True, od * P + q0, live, K, OD * P, OCB,
                      vload(a, bias0 + ob0 * V, L), vload(a, bias0 + ob1 * V, L), acc, ep, ra, L)
            q0 += TP


@parallel_kernel
def conv_lone(a, x0, p0, ya, y0, y_plain, K, N, D, H, Wi, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh,
              dw, groups, CBg, OCBg, chunk, gp, tb, epi, L):
    """conv where a group has one output block (OCBg = 1): its arguments, every step 12
    pixels x 1 block (_lone_step) from one call site, a run's last 1-12 pixels too (as a
    whole step: once a run, against the tile code the other forms would bring in)."""
    e_kind, e_lo, e_hi, ra, e_r0 = epi         # once, outside the prange (see _epi)
    ep = (e_kind, e_lo, e_hi, e_r0)
    P, OCB, T, pairs, chunks, bias0, z0 = _conv_constants(p0, OH, OW, KD, KH, KW, groups, CBg, 1, chunk, 1, L)
    geo = (D, H, Wi, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw)
    for it in prange(N * groups * OD * chunks):
        V = nlanes(L)
        n, od, ob0, ob1, two, q0, p_end, oh, ow, xg, HWV, BS = _work_item(it, x0, D, H, Wi, OD, chunks, 1,
                                                                           groups, gp, N, CBg, 1, 1, chunk, P,
                                                                           OW, L)
        blk = (CBg, HWV, BS, T, bias0, z0)
        while q0 < p_end:
            oh, ow = _lone_step(a, xg, p0, ya, y0, y_plain, n, ob0, od, oh, ow, q0, min(TP, p_end - q0),
                                min(TP, p_end - q0 - TP), K, OCB, P, OD, geo, blk, ep, ra, L)
            q0 += 2 * TP


def kernel_for(g, lanes: int):
    """The kernel for conv's work on g (lifted to 3-D): conv_lone for one output block a
    group, conv_pairs for pairs alone, else conv (quads, or pairs and a lone block)."""
    ocbg, tb = group_blocks(g, lanes)[1], tile_blocks(g, lanes)
    if ocbg == 1:
        return conv_lone
    if tb == BLOCKS and ocbg % 2 == 0:
        return conv_pairs
    return conv


# --- few input channels: x read plain ---------------------------------------------------
def plain_in_eligible(g, lanes: int):
    """None when conv_plain_in can run the conv (one group; x is read plain, so no
    channel padding: for first layers with 1 to a few input channels), else why not."""
    if g.groups != 1:
        return f"groups {g.groups}"
    return None


def plain_in_rows(g, threads: int) -> int:
    """Output rows per work item of conv_plain_in (items: image, output plane, run of rows):
    about 512 pixels, fewer where the items would not give every thread 4."""
    return _rows_for(g.x_shape[0] * prod(g.y_shape[2:-2]), g.y_shape[-2], g.y_shape[-1], threads)


def plain_in_packed_floats(g, lanes: int) -> int:
    """Packed weights [out block, C, kh, kw, V out], the bias padded to whole blocks, V zeros."""
    ocb = -(-g.y_shape[1] // lanes)
    return ocb * g.x_shape[1] * prod(g.kernel) * lanes + ocb * lanes + lanes


@parallel_kernel
def pack_plain_in(w, b, a, p0, L):
    """w [K, C, KH, KW] (a 3-D kernel as [K, C, KD*KH, KW]) and b into a[p0:]."""
    V = nlanes(L)
    K, C, KH, KW = w.shape
    OCB = (K + V - 1) // V
    T = KH * KW
    for ob in prange(OCB):
        for c in range(C):
            for t in range(T):
                i = t // KW
                j = t - i * KW
                base = p0 + ((ob * C + c) * T + t) * V
                for co in range(V):
                    k = ob * V + co
                    a[base + co] = w[k, c, i, j] if k < K else np.float32(0.0)
    tail = p0 + OCB * C * T * V
    for k in range(OCB * V + V):
        a[tail + k] = b[k] if (b.size > 0 and k < K) else np.float32(0.0)


@inlined
def _pair_blocks(pr, OCB):
    """Pair pr's first output block, whether it has a second, and the second (the first
    again when it has none: computed twice, stored once)."""
    ob0 = 2 * pr
    two = ob0 + 1 < OCB
    return ob0, two, ob0 + 1 if two else ob0


@inlined
def _tap_table_tile(xa, xb, s1, s2, s3, s4, s5, x_tap, w_tap, m, wa, wb0, wb1, acc, L):
    """A conv_plain_in tile over its row's m taps: x of pixel 0 at xa[xb + x_tap[t]], the
    others s1 .. s5 floats on (constants where the caller passes them: inlined, they fold
    into the loads), weights at wa[wb0 / wb1 + w_tap[t]]."""
    for t in range(m):
        xo = xb + x_tap[t]
        acc = _fma_6x2(xa, xo, xo + s1, xo + s2, xo + s3, xo + s4, xo + s5,
                       vload(wa, wb0 + w_tap[t], L), vload(wa, wb1 + w_tap[t], L), acc, L)
    return acc


@inlined
def _tap_table_lone(xa, xb, s, x_tap, w_tap, m, wa, wb, acc, L):
    """_tap_table_tile for a lone output block: 12 pixels s floats apart (two tiles), one
    weight vector per tap (a 6 x 2 tile would compute the block twice)."""
    for t in range(m):
        xo = xb + x_tap[t]
        acc = _fma_12x1(xa, xo, xo + s, xo + 2 * s, xo + 3 * s, xo + 4 * s, xo + 5 * s, xo + 6 * s, xo + 7 * s,
                        xo + 8 * s, xo + 9 * s, xo + 10 * s, xo + 11 * s, vload(wa, wb + w_tap[t], L), acc, L)
    return acc


@inlined
def _row_floats(OW, Wi, KW, sw, pw, dw):
    """conv_plain_in's padded copy of an input row: pw zeros, the row, zeros up to where the
    row's last tile (12 pixels, some past the row: computed, not stored) reads."""
    return max(pw + Wi, (OW + 2 * TP) * sw + (KW - 1) * dw + 1)


@inlined
def _copy_row(a, src, xp, dst, count, L):
    """xp[dst:dst + count] = a[src:src + count], a vector at a time, the tail a float at a time."""
    V = nlanes(L)
    k = 0
    while k + V <= count:
        vstore(xp, dst + k, vload(a, src + k, L))
        k += V
    for r in range(k, count):
        xp[dst + r] = a[src + r]


@parallel_kernel
def conv_plain_in(a, xa, x0, p0, ya, y0, y_plain, K, N, C, D, H, Wi, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph,
                  pw, dd, dh, dw, rows, epi, L):
    """As conv, but x is plain [N, C, D, H, W] (no channel padding: a 1-channel input wastes
    nothing), at x0 in xa: the arena, or a graph input's own array, read in place (the only
    reads of x are the slab copies below; nothing is written to xa). Per input channel and
    tap, 6 broadcasts of x and 2 weight vectors for 12 FMAs (12 broadcasts and one vector
    for a lone output block). Work items: (image, output
    plane, run of `rows` output rows). Each output row first copies the input rows it reads
    (its kernel rows inside x, every channel) into a row buffer with zeros on both sides, the
    horizontal padding: then every pixel of the row runs in tiles over one table of taps
    (offsets of x and of the weights, made once a row), no tap tested and no FMA of a
    padding row. (Before, the border columns ran a pixel at a time over their taps inside
    x: a third of the UNet's 3 -> 16 @64 at batch 8, 192 against 126 us without them.) A
    row's last tile may be partial: its pixels past the row read the buffer's zeros and are
    not stored. epi: the fused epilogue, as conv's."""
    V = nlanes(L)
    e_kind, e_lo, e_hi, ra, e_r0 = epi         # once, outside the prange (see _epi)
    ep = (e_kind, e_lo, e_hi, e_r0)
    P = OH * OW
    OCB = (K + V - 1) // V
    T = KD * KH * KW
    pairs = (OCB + 1) // 2
    runs = (OH + rows - 1) // rows
    bias0 = p0 + OCB * C * T * V
    WP = _row_floats(OW, Wi, KW, sw, pw, dw)
    SR = (rows - 1) * sh + (KH - 1) * dh + 1          # input rows a run of output rows reads
    for it in prange(N * OD * runs):
        V = nlanes(L)          # again inside the loop body: numba outlines it, and V must stay a constant
        rc = it % runs
        od = (it // runs) % OD
        n = it // (runs * OD)
        # a row's taps inside x, the same for all its tiles: one flat loop over them per tile
        # (the c / kd / i / j nest paid its set-up and a remainder of the j loop per kernel
        # row: the ResNet stem 1.97 -> 1.51 ms on Zen3, the two alternated)
        x_tap = np.empty(C * T, np.int64)
        w_tap = np.empty(C * T, np.int64)
        # the item's input rows, every channel and depth tap, copied once into a slab of
        # padded rows (zeros stay in the padding) before any tile reads them: copied a row
        # of output at a time, right before its tiles, the tiles' broadcasts waited on the
        # copy's vector stores (the UNet's 3 -> 16 @64 at batch 8: 186 us, 115 reading a
        # buffer not just written)
        ih_a = rc * rows * sh - ph                        # the first output row's top tap
        xp = np.zeros(C * KD * SR * WP, np.float32)
        for c in range(C):
            for kd in range(KD):
                idp = od * sd - pd + kd * dd
                if idp < 0 or idp >= D:
                    continue
                for sr in range(max(0, -ih_a), min(SR, H - ih_a)):
                    _copy_row(xa, x0 + (((n * C + c) * D + idp) * H + ih_a + sr) * Wi, xp,
                              ((c * KD + kd) * SR + sr) * WP + pw, Wi, L)
        for oh in range(rc * rows, min(OH, rc * rows + rows)):
            ih0 = oh * sh - ph
            i_lo, i_hi = valid_range(KH, H, ih0, dh)      # the kernel rows inside x
            m = 0
            for c in range(C):
                for kd in range(KD):
                    idp = od * sd - pd + kd * dd
                    if idp < 0 or idp >= D:
                        continue
                    for i in range(i_lo, i_hi):
                        r = ((c * KD + kd) * SR + ih0 + i * dh - ih_a) * WP
                        for j in range(KW):
                            x_tap[m] = r + j * dw
                            w_tap[m] = (c * T + (kd * KH + i) * KW + j) * V
                            m += 1
            q = 0
            while q < OW:
                xb = q * sw            # the buffer's column of input column q * sw - pw
                at = od * P + oh * OW + q
                if OCB == 1:
                    # one output block: 12 pixels a step, each weight vector loaded once (the
                    # UNet's 3 -> 16 @64 at 16 lanes)
                    acc = _zeros12(L)
                    if sw == 1:
                        acc = _tap_table_lone(xp, xb, 1, x_tap, w_tap, m, a, p0, acc, L)
                    elif sw == 2:
                        acc = _tap_table_lone(xp, xb, 2, x_tap, w_tap, m, a, p0, acc, L)
                    else:
                        acc = _tap_table_lone(xp, xb, sw, x_tap, w_tap, m, a, p0, acc, L)
                    bv = vload(a, bias0, L)
                    a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51 = acc
                    _put_block(ya, y0, y_plain, n, 0, OCB, K, OD * P, at, min(TP, OW - q), vadd(a00, bv),
                               vadd(a10, bv), vadd(a20, bv), vadd(a30, bv), vadd(a40, bv), vadd(a50, bv), ep, ra, L)
                    if q + TP < OW:
                        _put_block(ya, y0, y_plain, n, 0, OCB, K, OD * P, at + TP, min(TP, OW - q - TP),
                                   vadd(a01, bv), vadd(a11, bv), vadd(a21, bv), vadd(a31, bv), vadd(a41, bv),
                                   vadd(a51, bv), ep, ra, L)
                    q += 2 * TP
                    continue
                live = min(TP, OW - q)
                for pr in range(pairs):
                    ob0, two, ob1 = _pair_blocks(pr, OCB)
                    wb0 = p0 + ob0 * C * T * V
                    wb1 = p0 + ob1 * C * T * V
                    acc = _zeros12(L)
                    # the 6 pixels' offsets as constants the loads take as displacements at
                    # stride 1 and 2 (5% on the RGB stems)
                    if sw == 2:
                        acc = _tap_table_tile(xp, xb, 2, 4, 6, 8, 10, x_tap, w_tap, m, a, wb0, wb1, acc, L)
                    elif sw == 1:
                        acc = _tap_table_tile(xp, xb, 1, 2, 3, 4, 5, x_tap, w_tap, m, a, wb0, wb1, acc, L)
                    else:
                        acc = _tap_table_tile(xp, xb, sw, 2 * sw, 3 * sw, 4 * sw, 5 * sw, x_tap, w_tap, m, a, wb0,
                                              wb1, acc, L)
                    _put_tile(ya, y0, y_plain, n, ob0, ob1, two, at, live, K, OD * P, OCB,
                              vload(a, bias0 + ob0 * V, L), vload(a, bias0 + ob1 * V, L), acc, ep, ra, L)
                q += TP


# --- one block of channels at a time, a row of output pixels at a time: pool, depthwise -------
@inlined
def _interior_columns(OW, Wi, KW, sw, pw, dw):
    """The output columns [ow_lo, ow_hi) whose every tap is inside x in width:
    ow * sw - pw >= 0 and ow * sw - pw + (KW - 1) * dw < Wi."""
    ow_lo = min(OW, (pw + sw - 1) // sw)
    last = Wi - 1 - (KW - 1) * dw + pw
    return ow_lo, (max(ow_lo, min(OW, last // sw + 1)) if last >= 0 else ow_lo)


@inlined
def _row_item(it, runs, OD, CB):
    """A work item's (run of rows, output plane, channel block, image) of pool and depthwise,
    the channel blocks innermost: the threads split the image by rows, as what comes before
    them mostly writes it (the stem by rows, pixel-outer convs, nchwc_1x1's pixel runs,
    to_blocked's spans) and what comes after reads it."""
    cb = it % CB
    r = it // CB
    rc = r % runs
    r //= runs
    return rc, r % OD, cb, r // OD


@inlined
def _row_steps(live, step):
    """The x offsets of a row tile's pixels 1..5 from its first (step floats apart); a pixel
    past the live ones reads the first's x (never past the row)."""
    return (step if live > 1 else 0, 2 * step if live > 2 else 0, 3 * step if live > 3 else 0,
            4 * step if live > 4 else 0, 5 * step if live > 5 else 0)


@inlined
def window_taps(ih0, iw0, H, Wi, KH, KW, dh, dw):
    """The taps of a window (origin ih0, iw0) inside x: rows [i_lo, i_hi), columns [j_lo, j_hi)."""
    i_lo, i_hi = valid_range(KH, H, ih0, dh)
    j_lo, j_hi = valid_range(KW, Wi, iw0, dw)
    return i_lo, i_hi, j_lo, j_hi


@inlined
def _pool_pixel(a, xb, ih0, iw0, win, L):
    """One output pixel's window (origin ih0, iw0) over V channels of the blocked planes at
    xb, xb + dstep, ... (`planes` of them inside x, `pad_planes` inside the padded input: 1
    and 1 in 2-D): the max with PyTorch's rule (a NaN wins; vmax), or the mean as PyTorch
    divides it (the window clipped to the padded input when count_include_pad, else to the
    input). win: the window's constants, as pool packs them."""
    H, Wi, KH, KW, dh, dw, eh, ew, is_max, count_include_pad, planes, dstep, pad_planes = win
    V = nlanes(L)
    i_lo, i_hi, j_lo, j_hi = window_taps(ih0, iw0, H, Wi, KH, KW, dh, dw)
    acc = vsplat(-np.inf, L) if is_max else vzero(L)
    for pl in range(planes):
        for i in range(i_lo, i_hi):
            row = xb + pl * dstep + ((ih0 + i * dh) * Wi + iw0) * V
            for j in range(j_lo, j_hi):
                v = vload(a, row + j * dw * V, L)
                acc = vmax(v, acc) if is_max else vadd(acc, v)
    if is_max:
        return acc
    if count_include_pad:
        count = pad_planes * padded_taps(KH, ih0, dh, H + eh) * padded_taps(KW, iw0, dw, Wi + ew)
    else:
        count = planes * max(0, i_hi - i_lo) * max(0, j_hi - j_lo)
    return vmul(acc, vsplat(np.float32(1.0) / np.float32(max(1, count)), L))   # no tap inside x: 0


@inlined
def _max3s2_tile(a, o, rstep, i_lo, i_hi, planes, dstep, L):
    """6 output pixels of a max pool whose windows are 3 columns wide at stride 2 (undilated),
    every column inside x: the 13 input columns they cover, each reduced over the window's
    rows (and planes) once, then 3 neighbouring columns a pixel. Neighbouring windows share a
    column, so 39 loads and 38 maxima serve a 3x3 tile where each window alone took 54 of
    each. vmax's NaN rule makes the order of the maxima immaterial (a NaN anywhere wins)."""
    V = nlanes(L)
    c0 = vsplat(-np.inf, L)
    c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12 = c0, c0, c0, c0, c0, c0, c0, c0, c0, c0, c0, c0
    for pl in range(planes):
        for i in range(i_lo, i_hi):
            q = o + pl * dstep + i * rstep
            c0 = vmax(vload(a, q, L), c0)
            c1 = vmax(vload(a, q + V, L), c1)
            c2 = vmax(vload(a, q + 2 * V, L), c2)
            c3 = vmax(vload(a, q + 3 * V, L), c3)
            c4 = vmax(vload(a, q + 4 * V, L), c4)
            c5 = vmax(vload(a, q + 5 * V, L), c5)
            c6 = vmax(vload(a, q + 6 * V, L), c6)
            c7 = vmax(vload(a, q + 7 * V, L), c7)
            c8 = vmax(vload(a, q + 8 * V, L), c8)
            c9 = vmax(vload(a, q + 9 * V, L), c9)
            c10 = vmax(vload(a, q + 10 * V, L), c10)
            c11 = vmax(vload(a, q + 11 * V, L), c11)
            c12 = vmax(vload(a, q + 12 * V, L), c12)
    return (vmax(vmax(c0, c1), c2), vmax(vmax(c2, c3), c4), vmax(vmax(c4, c5), c6), vmax(vmax(c6, c7), c8),
            vmax(vmax(c8, c9), c10), vmax(vmax(c10, c11), c12))


@parallel_kernel
def pool(a, x0, ya, y0, y_plain, C, N, D, H, Wi, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew, dd, dh, dw,
         is_max, count_include_pad, rows, L):
    """2-D (D = OD = KD = 1) or 3-D max or average pooling of blocked x (at x0) into y (at
    y0: blocked, or plain [N, C, OD, OH, OW] when y_plain), a row of output pixels at a time:
    the columns whose window is inside x in width in tiles of 6 pixels (6 independent
    accumulators, one vector of V channels per tap, no test), the border columns a pixel at
    a time. Work items: (image, channel block, output plane, run of `rows` rows). (A pixel
    at a time, as the borders, ran ResNet's stem pool at a third of onnxruntime's speed.)"""
    V = nlanes(L)
    P = OH * OW
    CB = (C + V - 1) // V
    runs = (OH + rows - 1) // rows
    ow_lo, ow_hi = _interior_columns(OW, Wi, KW, sw, pw, dw)
    for it in prange(N * CB * OD * runs):
        V = nlanes(L)
        rc, od, cb, n = _row_item(it, runs, OD, CB)
        # the output plane's window in depth: planes id0 + kd * dd, kd in [kd_lo, kd_hi) inside x
        id0 = od * sd - pd
        kd_lo = max(0, (-id0 + dd - 1) // dd)
        kd_hi = min(KD, (D - id0 + dd - 1) // dd)
        planes = max(0, kd_hi - kd_lo)
        pad_planes = padded_taps(KD, id0, dd, D + ed)
        dstep = dd * H * Wi * V
        xb = x0 + ((n * CB + cb) * D + id0 + kd_lo * dd) * H * Wi * V
        win = (H, Wi, KH, KW, dh, dw, eh, ew, is_max, count_include_pad, planes, dstep, pad_planes)
        for oh in range(rc * rows, min(OH, (rc + 1) * rows)):
            ih0 = oh * sh - ph
            q_row = od * P + oh * OW
            i_lo, i_hi, _, _ = window_taps(ih0, 0, H, Wi, KH, 1, dh, 1)
            if count_include_pad:
                count = pad_planes * padded_taps(KH, ih0, dh, H + eh) * KW
            else:
                count = planes * max(0, i_hi - i_lo) * KW
            scale = vsplat(np.float32(1.0) / np.float32(max(1, count)), L)
            # a mean over no tap (a row of windows in the padding) goes the pixel way, as before
            lo, hi = (ow_lo, ow_hi) if is_max or count > 0 else (OW, OW)
            for ow in range(lo):
                v = _pool_pixel(a, xb, ih0, ow * sw - pw, win, L)
                _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, 1, v, v, v, v, v, v, no_ep(), ya, L)
            for ow in range(lo, hi, TP):
                live = min(TP, hi - ow)
                if is_max and live == TP and KW == 3 and sw == 2 and dw == 1:
                    # the stem pools' windows: neighbours share a column
                    r0, r1, r2, r3, r4, r5 = _max3s2_tile(a, xb + (ih0 * Wi + ow * sw - pw) * V, dh * Wi * V,
                                                          i_lo, i_hi, planes, dstep, L)
                    _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, live, r0, r1, r2, r3, r4, r5,
                               no_ep(), ya, L)
                    continue
                s1, s2, s3, s4, s5 = _row_steps(live, sw * V)
                r0 = vsplat(-np.inf, L) if is_max else vzero(L)
                r1, r2, r3, r4, r5 = r0, r0, r0, r0, r0
                for pl in range(planes):
                    for i in range(i_lo, i_hi):
                        o = xb + pl * dstep + ((ih0 + i * dh) * Wi + ow * sw - pw) * V
                        for j in range(KW):
                            oj = o + j * dw * V
                            if is_max:
                                r0 = vmax(vload(a, oj, L), r0)
                                r1 = vmax(vload(a, oj + s1, L), r1)
                                r2 = vmax(vload(a, oj + s2, L), r2)
                                r3 = vmax(vload(a, oj + s3, L), r3)
                                r4 = vmax(vload(a, oj + s4, L), r4)
                                r5 = vmax(vload(a, oj + s5, L), r5)
                            else:
                                r0 = vadd(r0, vload(a, oj, L))
                                r1 = vadd(r1, vload(a, oj + s1, L))
                                r2 = vadd(r2, vload(a, oj + s2, L))
                                r3 = vadd(r3, vload(a, oj + s3, L))
                                r4 = vadd(r4, vload(a, oj + s4, L))
                                r5 = vadd(r5, vload(a, oj + s5, L))
                if not is_max:
                    r0, r1, r2 = vmul(r0, scale), vmul(r1, scale), vmul(r2, scale)
                    r3, r4, r5 = vmul(r3, scale), vmul(r4, scale), vmul(r5, scale)
                _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, live, r0, r1, r2, r3, r4, r5, no_ep(),
                           ya, L)
            for ow in range(hi, OW):
                v = _pool_pixel(a, xb, ih0, ow * sw - pw, win, L)
                _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, 1, v, v, v, v, v, v, no_ep(), ya, L)


def depthwise_eligible(g):
    """None when nchwc_depthwise can run the conv (one input and one output channel per
    group), else why not."""
    if not (g.groups == g.x_shape[1] == g.y_shape[1]):
        return "not one input and one output channel per group"
    return None


def depthwise_packed_floats(g, lanes: int) -> int:
    """Weights [block, kh * kw, V], the bias padded to whole blocks, V zeros."""
    cb = -(-g.x_shape[1] // lanes)
    return cb * prod(g.kernel) * lanes + cb * lanes + lanes


@parallel_kernel
def pack_depthwise(w, b, a, p0, L):
    """w [C, 1, KH, KW] (a 3-D kernel as [C, 1, KD*KH, KW]) and b into a[p0:]."""
    V = nlanes(L)
    C, _, KH, KW = w.shape
    CB = (C + V - 1) // V
    T = KH * KW
    for cb in prange(CB):
        for t in range(T):
            i = t // KW
            j = t - i * KW
            for ci in range(V):
                c = cb * V + ci
                a[p0 + (cb * T + t) * V + ci] = w[c, 0, i, j] if c < C else np.float32(0.0)
    tail = p0 + CB * T * V
    for c in range(CB * V + V):
        a[tail + c] = b[c] if (b.size > 0 and c < C) else np.float32(0.0)


def rows_per_item(g, lanes: int, threads: int) -> int:
    """Output rows per work item of depthwise and pool (items: image, channel block, output
    plane, run of rows; g lifted to 2-D at least)."""
    return _rows_for(g.x_shape[0] * -(-g.x_shape[1] // lanes) * prod(g.y_shape[2:-2]), g.y_shape[-2],
                     g.y_shape[-1], threads)


def _rows_for(outer: int, oh: int, ow: int, threads: int) -> int:
    """Rows of ow pixels per work item, `outer` items to each run of rows: about 512 pixels,
    fewer where the items would not give every thread 4."""
    rows = max(1, min(oh, 512 // ow))
    while rows > 1 and outer * ceil(oh / rows) < 4 * threads:
        rows = ceil(rows / 2)
    return ceil(oh / ceil(oh / rows))        # the same runs, evened out: 28 rows as 14 + 14, not 18 + 10


@inlined
def _dw_pixel(a, xplane, wb, bias, od, ih0, iw0, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw, L):
    """One output pixel's vector (bias + every tap inside x), each tap tested: the borders."""
    V = nlanes(L)
    acc = bias
    for kd in range(KD):
        idp = od * sd - pd + kd * dd
        if idp < 0 or idp >= D:
            continue
        for i in range(KH):
            ih = ih0 + i * dh
            if ih < 0 or ih >= H:
                continue
            row = xplane + (idp * H + ih) * Wi * V
            for j in range(KW):
                iw = iw0 + j * dw
                if iw >= 0 and iw < Wi:
                    acc = vfma(vload(a, row + iw * V, L), vload(a, wb + ((kd * KH + i) * KW + j) * V, L), acc)
    return acc


@inlined
def _taps9(a, wb, T, L):
    """The 9 weight vectors of a 3x3 depthwise kernel from wb (a smaller kernel's taps past
    T read tap 0: never past the packed weights)."""
    V = nlanes(L)
    return (vload(a, wb, L), vload(a, wb + (1 if T > 1 else 0) * V, L), vload(a, wb + (2 if T > 2 else 0) * V, L),
            vload(a, wb + (3 if T > 3 else 0) * V, L), vload(a, wb + (4 if T > 4 else 0) * V, L),
            vload(a, wb + (5 if T > 5 else 0) * V, L), vload(a, wb + (6 if T > 6 else 0) * V, L),
            vload(a, wb + (7 if T > 7 else 0) * V, L), vload(a, wb + (8 if T > 8 else 0) * V, L))


@inlined
def _tap_6(a, o, s1, s2, s3, s4, s5, w, r0, r1, r2, r3, r4, r5, L):
    """One tap of a depthwise tile: x at o, o + s1, ... o + s5 (6 pixels) times the tap's
    weight vector w, into the 6 accumulators."""
    r0 = vfma(vload(a, o, L), w, r0)
    r1 = vfma(vload(a, o + s1, L), w, r1)
    r2 = vfma(vload(a, o + s2, L), w, r2)
    r3 = vfma(vload(a, o + s3, L), w, r3)
    r4 = vfma(vload(a, o + s4, L), w, r4)
    return r0, r1, r2, r3, r4, vfma(vload(a, o + s5, L), w, r5)


@inlined
def _dw3x3_row(a, o, cs, s1, s2, s3, s4, s5, w0, w1, w2, r0, r1, r2, r3, r4, r5, L):
    """One kernel row of a 3x3 depthwise tile: taps at o, o + cs, o + 2 cs for the pixels at
    offsets 0, s1, ... s5."""
    for j in range(3):
        r0, r1, r2, r3, r4, r5 = _tap_6(a, o + j * cs, s1, s2, s3, s4, s5, w0 if j == 0 else (w1 if j == 1 else w2),
                                        r0, r1, r2, r3, r4, r5, L)
    return r0, r1, r2, r3, r4, r5


@inlined
def _dw3x3_tile(a, o, rs, cs, s1, s2, s3, s4, s5, i_lo, i_hi, wk, bias, L):
    """6 output pixels of a 3x3 depthwise conv whose every column is inside x: the kernel
    rows [i_lo, i_hi) (those inside x) at o, o + rs, o + 2 rs."""
    w00, w01, w02, w10, w11, w12, w20, w21, w22 = wk
    r0, r1, r2, r3, r4, r5 = bias, bias, bias, bias, bias, bias
    if i_lo == 0 and i_hi > 0:
        r0, r1, r2, r3, r4, r5 = _dw3x3_row(a, o, cs, s1, s2, s3, s4, s5, w00, w01, w02,
                                            r0, r1, r2, r3, r4, r5, L)
    if i_lo <= 1 and i_hi > 1:
        r0, r1, r2, r3, r4, r5 = _dw3x3_row(a, o + rs, cs, s1, s2, s3, s4, s5, w10, w11, w12,
                                            r0, r1, r2, r3, r4, r5, L)
    if i_lo <= 2 and i_hi > 2:
        r0, r1, r2, r3, r4, r5 = _dw3x3_row(a, o + 2 * rs, cs, s1, s2, s3, s4, s5, w20, w21, w22,
                                            r0, r1, r2, r3, r4, r5, L)
    return r0, r1, r2, r3, r4, r5


@inlined
def _dw3x3_pixel_row(a, o, cs, j_lo, j_hi, w0, w1, w2, acc, L):
    """A border pixel's taps of one kernel row: the columns [j_lo, j_hi) at o, o + cs, o + 2 cs."""
    if j_lo == 0 and j_hi > 0:
        acc = vfma(vload(a, o, L), w0, acc)
    if j_lo <= 1 and j_hi > 1:
        acc = vfma(vload(a, o + cs, L), w1, acc)
    if j_lo <= 2 and j_hi > 2:
        acc = vfma(vload(a, o + 2 * cs, L), w2, acc)
    return acc


@inlined
def _dw3x3_pixel(a, o, rs, cs, i_lo, i_hi, j_lo, j_hi, wk, bias, L):
    """One output pixel of a 3x3 depthwise conv: its taps inside x (rows [i_lo, i_hi),
    columns [j_lo, j_hi)) from the window origin o."""
    w00, w01, w02, w10, w11, w12, w20, w21, w22 = wk
    acc = bias
    if i_lo == 0 and i_hi > 0:
        acc = _dw3x3_pixel_row(a, o, cs, j_lo, j_hi, w00, w01, w02, acc, L)
    if i_lo <= 1 and i_hi > 1:
        acc = _dw3x3_pixel_row(a, o + rs, cs, j_lo, j_hi, w10, w11, w12, acc, L)
    if i_lo <= 2 and i_hi > 2:
        acc = _dw3x3_pixel_row(a, o + 2 * rs, cs, j_lo, j_hi, w20, w21, w22, acc, L)
    return acc


@parallel_kernel
def depthwise(a, x0, p0, ya, y0, y_plain, C, N, D, H, Wi, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw,
              rows, epi, L):
    """Depthwise conv on blocked x, a row of output pixels at a time: the columns whose every
    tap is inside x in tiles of 6 pixels (per tap one weight vector and 6 vectors of x at
    one stride apart, no test), the border columns a pixel at a time. 3-D: per depth tap
    inside x. Work items: (image, channel block, output plane, run of `rows` rows). epi:
    the fused epilogue, as conv's. (Tiles along the flattened plane, as conv's, tested
    their taps per tile: 15 GFLOP/s on 144 channels at 56x56, 48 this way.) A 3x3 kernel
    (KD = 1) takes its own path: weights in registers, rows and border columns tested once
    (EPYC Zen3, 2 threads, 144 channels at 56x56: 0.525 ms by the loops below, 0.115 so;
    960 at 7x7: 0.066, 0.041). Its full tiles at stride 1 and 2 take their offsets as
    constants (batch 8, alternated: 144 @56 1.04 -> 0.81 ms, 576 @14 0.54 -> 0.48)."""
    V = nlanes(L)
    e_kind, e_lo, e_hi, ra, e_r0 = epi         # once, outside the prange (see _epi)
    ep = (e_kind, e_lo, e_hi, e_r0)
    P = OH * OW
    CB = (C + V - 1) // V
    T = KD * KH * KW
    bias0 = p0 + CB * T * V
    runs = (OH + rows - 1) // rows
    ow_lo, ow_hi = _interior_columns(OW, Wi, KW, sw, pw, dw)
    k3 = KD == 1 and pd == 0 and KH == 3 and KW == 3     # the 3x3 path below (its depth tap: od * sd)
    for it in prange(N * CB * OD * runs):
        V = nlanes(L)          # again inside the loop body: numba outlines it, and V must stay a constant
        rc, od, cb, n = _row_item(it, runs, OD, CB)
        wb = p0 + cb * T * V
        bias = vload(a, bias0 + cb * V, L)
        xplane = x0 + (n * CB + cb) * D * H * Wi * V
        wk = _taps9(a, wb, T, L)
        for oh in range(rc * rows, min(OH, (rc + 1) * rows)):
            ih0 = oh * sh - ph
            q_row = od * P + oh * OW
            if k3:
                # 3x3 (most depthwise convs): the 9 weight vectors stay in registers across the
                # row and the FMAs read x themselves (54 FMAs, 54 loads a tile); the kernel rows
                # and the border pixels' columns inside x are tested once, not per tap
                i_lo, i_hi = valid_range(3, H, ih0, dh)
                o_row = xplane + ((od * sd * H + ih0) * Wi - pw) * V     # the window of ow = 0
                rs = dh * Wi * V
                cs = dw * V
                for b in range(OW - (ow_hi - ow_lo)):        # the border columns, left then right
                    ow = b if b < ow_lo else ow_hi + b - ow_lo
                    j_lo, j_hi = valid_range(3, Wi, ow * sw - pw, dw)
                    v = _dw3x3_pixel(a, o_row + ow * sw * V, rs, cs, i_lo, i_hi, j_lo, j_hi, wk, bias, L)
                    _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, 1, v, v, v, v, v, v, ep, ra, L)
                for ow in range(ow_lo, ow_hi, TP):
                    live = min(TP, ow_hi - ow)
                    o = o_row + ow * sw * V
                    if live == TP and dw == 1 and sw == 1:
                        # undilated full tiles at stride 1 or 2: every offset a constant the loads
                        # take as a displacement from one register
                        r0, r1, r2, r3, r4, r5 = _dw3x3_tile(a, o, rs, V, V, 2 * V, 3 * V, 4 * V, 5 * V,
                                                             i_lo, i_hi, wk, bias, L)
                    elif live == TP and dw == 1 and sw == 2:
                        r0, r1, r2, r3, r4, r5 = _dw3x3_tile(a, o, rs, V, 2 * V, 4 * V, 6 * V, 8 * V, 10 * V,
                                                             i_lo, i_hi, wk, bias, L)
                    else:
                        s1, s2, s3, s4, s5 = _row_steps(live, sw * V)
                        r0, r1, r2, r3, r4, r5 = _dw3x3_tile(a, o, rs, cs, s1, s2, s3, s4, s5,
                                                             i_lo, i_hi, wk, bias, L)
                    _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, live, r0, r1, r2, r3, r4, r5,
                               ep, ra, L)
                continue
            for ow in range(ow_lo):
                v = _dw_pixel(a, xplane, wb, bias, od, ih0, ow * sw - pw, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw, L)
                _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, 1, v, v, v, v, v, v, ep, ra, L)
            for ow in range(ow_lo, ow_hi, TP):
                live = min(TP, ow_hi - ow)
                s1, s2, s3, s4, s5 = _row_steps(live, sw * V)
                r0, r1, r2, r3, r4, r5 = bias, bias, bias, bias, bias, bias
                for kd in range(KD):
                    idp = od * sd - pd + kd * dd
                    if idp < 0 or idp >= D:
                        continue
                    for i in range(KH):
                        ih = ih0 + i * dh
                        if ih < 0 or ih >= H:
                            continue
                        o = xplane + ((idp * H + ih) * Wi + ow * sw - pw) * V
                        wt = wb + (kd * KH + i) * KW * V
                        for j in range(KW):
                            r0, r1, r2, r3, r4, r5 = _tap_6(a, o + j * dw * V, s1, s2, s3, s4, s5,
                                                            vload(a, wt + j * V, L), r0, r1, r2, r3, r4, r5, L)
                _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, live, r0, r1, r2, r3, r4, r5, ep, ra, L)
            for ow in range(ow_hi, OW):
                v = _dw_pixel(a, xplane, wb, bias, od, ih0, ow * sw - pw, D, H, Wi, KD, KH, KW, sd, pd, dd, dh, dw, L)
                _put_block(ya, y0, y_plain, n, cb, CB, C, OD * P, q_row + ow, 1, v, v, v, v, v, v, ep, ra, L)


@parallel_kernel
def reduce_spatial(a, x0, ya, y0, N, C, S, mean, L):
    """Global average (mean) or max pooling of blocked x [N, CB, S, V] (in a at x0) into plain
    y [N, C] (in ya at y0): per (image, channel block) 4 vector accumulators over the pixels
    (more ILP, and float32 sums of a quarter of the pixels each), then the live lanes stored.
    The max keeps a NaN (vmax: PyTorch's rule). Reading x blocked spares the reorder to
    plain that a reduction over plain rows needs after a blocked conv."""
    CB = (C + nlanes(L) - 1) // nlanes(L)
    for q in prange(N * CB):
        V = nlanes(L)
        n = q // CB
        cb = q - n * CB
        xb = x0 + q * S * V
        body = S - S % 4
        if mean:
            s0, s1, s2, s3 = vzero(L), vzero(L), vzero(L), vzero(L)
            for p in range(0, body, 4):
                s0 = vadd(s0, vload(a, xb + p * V, L))
                s1 = vadd(s1, vload(a, xb + (p + 1) * V, L))
                s2 = vadd(s2, vload(a, xb + (p + 2) * V, L))
                s3 = vadd(s3, vload(a, xb + (p + 3) * V, L))
            for p in range(body, S):
                s0 = vadd(s0, vload(a, xb + p * V, L))
            r = vmul(vadd(vadd(s0, s1), vadd(s2, s3)), vsplat(np.float32(1.0 / S), L))
        else:
            s0 = vload(a, xb, L)
            s1, s2, s3 = s0, s0, s0
            for p in range(0, body, 4):
                s0 = vmax(s0, vload(a, xb + p * V, L))
                s1 = vmax(s1, vload(a, xb + (p + 1) * V, L))
                s2 = vmax(s2, vload(a, xb + (p + 2) * V, L))
                s3 = vmax(s3, vload(a, xb + (p + 3) * V, L))
            for p in range(body, S):
                s0 = vmax(s0, vload(a, xb + p * V, L))
            r = vmax(vmax(s0, s1), vmax(s2, s3))
        live = min(V, C - cb * V)
        at = y0 + n * C + cb * V
        if live == V:
            vstore(ya, at, r)
        else:
            vstore_tail(ya, at, r, live)


@parallel_kernel
def resize_nearest2x(a, x0, y0, N, C, H, Wi, ys, L):
    """Blocked x [N, CB, H*W, V] -> blocked y [N, CB, 2H*2W, V], y's images ys floats apart
    (CB * 4HW * V, or more in a concat's slice): each input vector stored to its 4 output
    pixels. Work items: (image, channel block, input row)."""
    CB = (C + nlanes(L) - 1) // nlanes(L)
    for it in prange(N * CB * H):
        V = nlanes(L)
        q = it // H                    # image * CB + block
        h = it - q * H
        n = q // CB
        src = x0 + (q * H + h) * Wi * V
        top = y0 + n * ys + ((q - n * CB) * 2 * H + 2 * h) * 2 * Wi * V
        below = top + 2 * Wi * V
        for w in range(Wi):
            v = vload(a, src + w * V, L)
            vstore(a, top + 2 * w * V, v)
            vstore(a, top + (2 * w + 1) * V, v)
            vstore(a, below + 2 * w * V, v)
            vstore(a, below + (2 * w + 1) * V, v)
