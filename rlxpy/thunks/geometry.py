"""Geometry of a record: frozen, named fields, ranks lifted here and nowhere else.

A 1-D conv or pool is stated as a 2-D one with H = 1 ([N, C, L] and [N, C, 1, L] are the
same bytes, so nothing is copied). Kernels written in 3-D form (the reference kernels,
im2col for Conv3d, col2im) ask for `lifted(3)`, which prepends unit spatial axes.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Tuple

Ints = Tuple[int, ...]


def _lift(t: Ints, n: int, fill: int) -> Ints:
    return (fill,) * (n - len(t)) + tuple(t)


def _lift_shape(shape: Ints, n: int) -> Ints:
    return tuple(shape[:2]) + (1,) * (n - (len(shape) - 2)) + tuple(shape[2:])


@dataclass(frozen=True, slots=True)
class ConvGeometry:
    """A convolution, always stated for the forward conv it belongs to (a transposed conv:
    its own input and output; an input gradient: x is dx, y is dy). Spatial rank 2 or 3."""
    x_shape: Ints      # [N, C, spatial...]
    y_shape: Ints      # [N, K, spatial...]
    kernel: Ints
    stride: Ints
    pad_begin: Ints
    pad_end: Ints
    dilation: Ints
    groups: int

    @property
    def spatial_rank(self) -> int:
        return len(self.kernel)

    @property
    def cin_g(self) -> int:
        """Input channels per group."""
        return self.x_shape[1] // self.groups

    @property
    def cout_g(self) -> int:
        """Output channels per group."""
        return self.y_shape[1] // self.groups

    @property
    def taps(self) -> int:
        return prod(self.kernel)

    def lifted(self, n: int) -> "ConvGeometry":
        """The same conv with n spatial axes (unit axes in front)."""
        return ConvGeometry(_lift_shape(self.x_shape, n), _lift_shape(self.y_shape, n), _lift(self.kernel, n, 1),
                            _lift(self.stride, n, 1), _lift(self.pad_begin, n, 0), _lift(self.pad_end, n, 0),
                            _lift(self.dilation, n, 1), self.groups)

    @property
    def is_pointwise(self) -> bool:
        """1x1, stride 1, unpadded, groups 1: one GEMM per image."""
        return (all(k == 1 for k in self.kernel) and all(s == 1 for s in self.stride) and self.groups == 1
                and not any(self.pad_begin) and not any(self.pad_end))


@dataclass(frozen=True, slots=True)
class PoolGeometry:
    """A pooling window; for MaxPool2dBackward y_shape is dy's shape. Spatial rank 2 or 3."""
    x_shape: Ints
    y_shape: Ints
    kernel: Ints
    stride: Ints
    pad_begin: Ints
    pad_end: Ints
    dilation: Ints

    def lifted(self, n: int) -> "PoolGeometry":
        return PoolGeometry(_lift_shape(self.x_shape, n), _lift_shape(self.y_shape, n), _lift(self.kernel, n, 1),
                            _lift(self.stride, n, 1), _lift(self.pad_begin, n, 0), _lift(self.pad_end, n, 0),
                            _lift(self.dilation, n, 1))


@dataclass(frozen=True, slots=True)
class Im2ColGeometry:
    """Rows layout [N*OH*OW, C*kh*kw]."""
    x_shape: Ints
    out_hw: Ints
    kernel: Ints
    stride: Ints
    pad_begin: Ints
    dilation: Ints

    @property
    def rows_shape(self) -> Ints:
        n, c = self.x_shape[:2]
        return (n * self.out_hw[0] * self.out_hw[1], c * self.kernel[0] * self.kernel[1])


@dataclass(frozen=True, slots=True)
class ResizeGeometry:
    x_shape: Ints      # [N, C, H, W] -> [N, C, 2H, 2W]


@dataclass(frozen=True, slots=True)
class ReorderGeometry:
    """A layout change of one tensor (rlxpy.thunks.layout): its logical shape, from, to."""
    shape: Ints
    src: str
    dst: str


def _pads(padding) -> Tuple[Ints, Ints]:
    return tuple(p[0] for p in padding), tuple(p[1] for p in padding)


def conv_geometry(attrs, x_shape: Ints, y_shape: Ints, kernel: Ints) -> ConvGeometry:
    """From a conv-family node's attrs (stride, padding, dilation, groups) and concrete
    shapes; a 1-D conv is lifted to 2-D here, once."""
    pad_b, pad_e = _pads(attrs.padding)
    g = ConvGeometry(tuple(x_shape), tuple(y_shape), tuple(kernel), tuple(attrs.stride), pad_b, pad_e,
                     tuple(attrs.dilation), attrs.groups)
    return g.lifted(2) if len(kernel) == 1 else g


def pool_geometry(attrs, x_shape: Ints, y_shape: Ints) -> PoolGeometry:
    pad_b, pad_e = _pads(attrs.padding)
    g = PoolGeometry(tuple(x_shape), tuple(y_shape), tuple(attrs.kernel), tuple(attrs.stride), pad_b, pad_e,
                     tuple(attrs.dilation))
    return g.lifted(2) if len(attrs.kernel) == 1 else g
