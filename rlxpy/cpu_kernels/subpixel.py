"""Strided transposed convs and conv input gradients on NCHWc (algo `nchwc_subpixel`).

A transposed conv writes y[o] += x[q] * w[i] wherever o = q*s - p + i*d (per axis). Split
the outputs by phase r = (o + p) mod s: the outputs of one phase see only the taps with
i*d = r (mod s), each at a fixed offset from q, so they are a *stride-1 forward conv* of x
with those taps of the flipped, per-group transposed kernel (dilation d / gcd(d, s)), whose
output lands on every s-th output pixel from the phase's first. That is s^rank forward
convs run by nchwc.conv with no wasted multiply (col2im's GEMM does the same FMAs but
writes columns and scatters them back), each into a blocked scratch, then moved to its
place in y one vector of channels at a time (`scatter`). An input gradient is the same
thing with dy for x and dx for y (nchwc.as_forward states the stride-1 case).

Where the kernel equals the stride (no padding, no dilation, one group: a UNet's 2x2 s2
up-sampling), every phase is a 1x1 conv of the same input: all s^rank of them run as *one*
1x1 conv (nchwc_1x1's kernel) into s^rank times the output blocks, and `scatter_patches`
moves each input pixel's patch to its place: two launches, not two per phase (`patches`).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd, prod
from typing import Tuple

import numpy as np
from numba import prange

from ..thunks.geometry import ConvGeometry
from .jit import parallel_kernel
from .nchwc import forward_weights, group_blocks, pack, packed_floats
from .simd import nlanes, vload, vstore

Ints = Tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AxisPhase:
    """One phase of one axis: the flipped kernel's taps it uses (ascending), the forward
    sub-conv's begin padding (negative: x cropped) and dilation, and its outputs: first,
    first + s, ... (count of them)."""
    taps: Ints
    pad: int
    dilation: int
    first: int
    count: int


def axis_phases(n_out: int, k: int, s: int, p: int, d: int) -> Tuple[AxisPhase, ...]:
    """The phases of one axis that have outputs."""
    out = []
    for r in range(s):
        i_taps = [i for i in range(k) if (i * d - r) % s == 0]          # ascending i
        q_lo = -((r - p) // s)                                          # first q with q*s + r - p >= 0
        q_hi = (n_out - 1 + p - r) // s
        if q_hi < q_lo:
            continue
        # output u of the sub-conv is q = q_lo + u; tap i reads x[q - (i*d - r)/s]; the flipped
        # kernel (f = k - 1 - i ascending) reads it with offsets ascending
        pad = ((i_taps[-1] * d - r) // s - q_lo) if i_taps else 0
        out.append(AxisPhase(tuple(k - 1 - i for i in reversed(i_taps)), pad, d // gcd(d, s), q_lo * s + r - p,
                             q_hi - q_lo + 1))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Phase:
    """One sub-conv: its forward geometry (input -> this phase's outputs), the flipped
    kernel's taps per axis, and where its outputs go (first, step per axis)."""
    geometry: ConvGeometry
    taps: Tuple[Ints, ...]
    first: Ints
    step: Ints


def roles(rec) -> Tuple[str, str]:
    """(input role, output role): x -> y for a transposed conv, dy -> dx for an input gradient."""
    return ("dy", "dx") if hasattr(rec, "dy") else ("x", "y")


def phases(rec) -> Tuple[Phase, ...]:
    """The sub-convs of a transposed conv or input gradient, every phase with outputs."""
    g = rec.geometry
    src, dst = src_dst(rec)
    per_axis = [axis_phases(n, k, s, p, d) for n, k, s, p, d in
                zip(dst[2:], g.kernel, g.stride, g.pad_begin, g.dilation)]
    out = []
    for combo in _product(per_axis):
        sub = ConvGeometry(tuple(src), tuple(dst[:2]) + tuple(a.count for a in combo), tuple(len(a.taps) for a in combo),
                           (1,) * len(combo), tuple(a.pad for a in combo), (0,) * len(combo),
                           tuple(a.dilation for a in combo), g.groups)
        out.append(Phase(sub, tuple(a.taps for a in combo), tuple(a.first for a in combo), tuple(g.stride)))
    return tuple(out)


def _product(per_axis):
    combos = [()]
    for axis in per_axis:
        combos = [c + (a,) for c in combos for a in axis]
    return combos


def eligible(rec, lanes: int):
    """None when nchwc_subpixel can run the record (a group's channels whole blocks, unless
    there is one group), else why not."""
    g = rec.geometry
    if g.groups > 1 and (g.cin_g % lanes or g.cout_g % lanes):
        return f"{g.cin_g} -> {g.cout_g} channels per group are not whole blocks of {lanes}"
    return None


def src_dst(rec):
    """(source shape, destination shape): x -> y for a transposed conv, dy -> dx for an
    input gradient (the geometry states the forward conv)."""
    g = rec.geometry
    return (g.y_shape, g.x_shape) if hasattr(rec, "dy") else (g.x_shape, g.y_shape)


def patches(rec) -> bool:
    """Whether every input pixel writes an s^rank patch of the output of its own: kernel ==
    stride, no padding, no dilation, one group, the output exactly s times the input (no
    output_padding, no input pixel the forward conv left out)."""
    g = rec.geometry
    src, dst = src_dst(rec)
    return (g.groups == 1 and tuple(g.kernel) == tuple(g.stride) and not any(g.pad_begin)
            and all(d == 1 for d in g.dilation)
            and all(o == i * s for o, i, s in zip(dst[2:], src[2:], g.stride)))


def merged_geometry(rec, lanes: int) -> ConvGeometry:
    """`patches`: the one 1x1 conv of every phase, as a 2-D conv over the flattened input
    plane: [N, C_src, 1, P] -> [N, s^rank * OCB * V, 1, P] (each phase's channels padded to
    whole blocks)."""
    g = rec.geometry
    src, dst = src_dst(rec)
    p = prod(src[2:])
    k = prod(g.kernel) * -(-dst[1] // lanes) * lanes
    return ConvGeometry((src[0], src[1], 1, p), (src[0], k, 1, p), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1)


def pack_patches(w, b, a, p0: int, cbg: int, ocb: int, L):
    """w [C_src, C_dst, *kernel] (a transposed conv's weights; a forward conv's for an input
    gradient) as the merged 1x1 conv's [phase * C_dst + c_dst, c_src], each phase's channels
    padded to ocb blocks (nchwc.pack with one group per phase), the bias repeated per phase."""
    src, dst = w.shape[:2]
    phases_ = prod(w.shape[2:])
    wm = np.ascontiguousarray(np.moveaxis(w, (0, 1), (-1, -2)).reshape(phases_ * dst, src, 1, 1))
    pack(wm, np.tile(b, phases_) if b.size else b, a, p0, phases_, cbg, ocb, L)


@parallel_kernel
def scatter_patches(a, s0, y0, N, OCB, D, H, W, sd, sh, sw, ys, L):
    """The merged 1x1 conv's output [N, phases, OCB, D*H*W, V] at s0 to blocked y [N, OCB,
    D*sd, H*sh, W*sw, V] at y0, its images ys floats apart (OCB times a plane, or more in a
    concat's slice): phase (rd, rh, rw) of input pixel (z, i, j) is output pixel (z*sd + rd,
    i*sh + rh, j*sw + rw). Items are output rows, written left to right."""
    OD, OH, OW = D * sd, H * sh, W * sw
    PH = sd * sh * sw
    S = D * H * W
    for it in prange(N * OCB * OD * OH):
        V = nlanes(L)
        oy = it % OH
        r = it // OH
        oz = r % OD
        r = r // OD
        ob = r % OCB
        n = r // OCB
        z = oz // sd
        i = oy // sh
        dst = y0 + n * ys + ((ob * OD + oz) * OH + oy) * OW * V
        for rw in range(sw):
            ph = ((oz - z * sd) * sh + oy - i * sh) * sw + rw
            src = s0 + (((n * PH + ph) * OCB + ob) * S + (z * H + i) * W) * V
            for j in range(W):
                vstore(a, dst + (j * sw + rw) * V, vload(a, src + j * V, L))


def scratch_floats(rec, lanes: int) -> int:
    """The merged 1x1 conv's output (`patches`), else the largest phase's output, blocked
    (phases run one after another)."""
    if patches(rec):
        m = merged_geometry(rec, lanes)
        return m.y_shape[0] * m.y_shape[1] * m.y_shape[3]
    return max(ph.geometry.y_shape[0] * group_blocks(ph.geometry, lanes)[1] * ph.geometry.groups
               * prod(ph.geometry.y_shape[2:]) * lanes for ph in phases(rec))


def persistent_floats(rec, lanes: int) -> int:
    """The merged 1x1 conv's packed weights (`patches`), else every phase's packed taps
    (nchwc.pack's order)."""
    if patches(rec):
        return packed_floats(merged_geometry(rec, lanes), lanes)
    return sum(packed_floats(ph.geometry, lanes) for ph in phases(rec))


def pack_phases(w, b, a, p0: int, groups: int, taps: Tuple[Tuple[Ints, ...], ...], sizes: Ints, cbg: int, ocbg: int, L):
    """Every phase's taps of the flipped, per-group transposed weights packed at p0, one
    after another (sizes: each phase's floats)."""
    fw = forward_weights(w, groups)
    for axes, size in zip(taps, sizes):
        sub = fw
        for axis, idx in enumerate(axes):
            sub = np.take(sub, idx, axis=2 + axis)
        sub = np.ascontiguousarray(sub)
        k = sub.shape[2:]
        pack(sub.reshape(sub.shape[0], sub.shape[1], prod(k[:-1]), k[-1]), b, a, p0, groups, cbg, ocbg, L)
        p0 += size


@parallel_kernel
def scatter(a, s0, y0, N, OCB, SD, SH, SW, OD, OH, OW, fd, fh, fw, sd, sh, sw, L):
    """A phase's blocked output [N, OCB, SD*SH*SW, V] at s0 to its pixels of blocked y
    [N, OCB, OD*OH*OW, V] at y0: (fd + sd*u, fh + sh*v, fw + sw*t), one vector a pixel."""
    for it in prange(N * OCB * SD * SH):
        V = nlanes(L)
        row = it % SH
        r = it // SH
        dz = r % SD
        q = r // SD                       # image * OCB + block
        src = s0 + ((q * SD + dz) * SH + row) * SW * V
        dst = y0 + (((q * OD + fd + sd * dz) * OH + fh + sh * row) * OW + fw) * V
        for u in range(SW):
            vstore(a, dst + u * sw * V, vload(a, src + u * V, L))
