"""Thunk records: frozen data (ints, int tuples, short strings), one type per kernel family.

Every field ending in `_off` is a byte offset into the arena (-1: absent, e.g. no bias).
While a plan is lowered those fields hold value ids; the planner replaces them with
offsets (`bind_offsets`), so a record that reaches the executor is pure data.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Dict, Tuple

Ints = Tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Record:
    node: str   # the graph node this record runs
    algo: str   # which kernel runs it
    why: str    # why that kernel (and not a faster one)


@dataclass(frozen=True, slots=True)
class ConvGeometry(Record):
    """A convolution's geometry, always stated for the forward conv it belongs to
    (for a transposed conv: the transposed op's own input and output)."""
    x_shape: Ints      # [N, C, spatial...]
    y_shape: Ints      # [N, K, spatial...]
    kernel: Ints
    stride: Ints
    pad_begin: Ints
    pad_end: Ints
    dilation: Ints
    groups: int


@dataclass(frozen=True, slots=True)
class Conv2D(ConvGeometry):
    x_off: int
    w_off: int
    b_off: int
    y_off: int
    scratch_off: int
    scratch_bytes: int
    tile: int          # im2col: output rows per tile; winograd: 2x2 tiles per block
    k_blocks: int      # output-channel blocks per work item (fills the cores on small images)
    aux_off: int       # winograd: transformed weights (16 floats of header, then U [16, K, C])
    aux_bytes: int
    weight_const: bool  # the weight is a param: its transform is computed once per arena


@dataclass(frozen=True, slots=True)
class Conv2D1x1(ConvGeometry):
    """1x1, stride 1, unpadded, groups 1: y[n] = W @ x[n] (+ b)."""
    x_off: int
    w_off: int
    b_off: int
    y_off: int
    tile: int          # output columns per GEMM tile
    weight_const: bool  # the weight is a param (a device may cache a re-arranged copy)


@dataclass(frozen=True, slots=True)
class Conv3d(ConvGeometry):
    x_off: int
    w_off: int
    b_off: int
    y_off: int
    scratch_off: int
    scratch_bytes: int
    tile: int
    k_blocks: int


@dataclass(frozen=True, slots=True)
class ConvTranspose2d(ConvGeometry):
    """Weight [C_in, C_out/groups, kh, kw]; y_shape already includes output_padding."""
    x_off: int
    w_off: int
    b_off: int
    y_off: int
    scratch_off: int
    scratch_bytes: int
    k_blocks: int


@dataclass(frozen=True, slots=True)
class ConvTranspose3d(ConvGeometry):
    x_off: int
    w_off: int
    b_off: int
    y_off: int
    scratch_off: int
    scratch_bytes: int
    k_blocks: int


@dataclass(frozen=True, slots=True)
class Conv2dBackwardInput(ConvGeometry):
    """dx of the forward conv: x_shape is dx's shape, y_shape is dy's."""
    dy_off: int
    w_off: int
    dx_off: int
    scratch_off: int
    scratch_bytes: int
    k_blocks: int
    weight_const: bool  # the weight is a param (a device may cache a re-arranged copy)


@dataclass(frozen=True, slots=True)
class Conv2dBackwardWeight(ConvGeometry):
    """dw [K, C/groups, kh, kw] of the forward conv, summed over the batch."""
    x_off: int
    dy_off: int
    dw_off: int
    scratch_off: int
    scratch_bytes: int
    tile: int


@dataclass(frozen=True, slots=True)
class PoolGeometry(Record):
    x_shape: Ints
    y_shape: Ints
    kernel: Ints
    stride: Ints
    pad_begin: Ints
    pad_end: Ints
    dilation: Ints


@dataclass(frozen=True, slots=True)
class Pool2D(PoolGeometry):
    """Rank 3 and 4 pools (a 1-D pool is a 2-D pool with H = 1)."""
    kind: str
    count_include_pad: bool
    x_off: int
    y_off: int


@dataclass(frozen=True, slots=True)
class Pool3D(PoolGeometry):
    kind: str
    count_include_pad: bool
    x_off: int
    y_off: int


@dataclass(frozen=True, slots=True)
class MaxPool2dBackward(PoolGeometry):
    """y_shape is dy's shape; dx has x_shape."""
    x_off: int
    dy_off: int
    dx_off: int


@dataclass(frozen=True, slots=True)
class Im2Col(Record):
    x_shape: Ints
    out_hw: Ints       # (OH, OW): the rows are [N*OH*OW, C*kh*kw]
    kernel: Ints
    stride: Ints
    pad_begin: Ints
    dilation: Ints
    x_off: int
    y_off: int


@dataclass(frozen=True, slots=True)
class ResizeNearest2x(Record):
    x_shape: Ints
    x_off: int
    y_off: int


def offset_fields(rec: Record) -> Tuple[str, ...]:
    return tuple(f.name for f in fields(rec) if f.name.endswith("_off"))


def bind_offsets(rec: Record, offsets: Dict[int, int]) -> Record:
    """Replace the value ids in `*_off` fields by arena byte offsets (-1 stays absent)."""
    new = {name: offsets[getattr(rec, name)] for name in offset_fields(rec) if getattr(rec, name) >= 0}
    return replace(rec, **new)
