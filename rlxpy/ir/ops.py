"""One frozen attrs type per op, and the shape rule of each op, registered beside it.

Shape rules take the node name (for messages) and the input shapes, and return the
output shape or raise ValueError naming the node, the attribute and the numbers. They
run twice: when a node is added (dims may be dynamic: only static parts are checked)
and when a plan is built for concrete input shapes (everything is checked).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from ..registry import registrar
from .shape import Dim, Pad, Shape, conv_out, fmt_shape, pool_out, transpose_out


@dataclass(frozen=True, slots=True)
class ConvAttrs:
    """Conv (1-D / 2-D) and Conv3d; weight [C_out, C_in/groups, k...]. A fused epilogue
    (set by rlxpy.thunks.rewrite, not by the builder): y = act(conv + residual), the
    residual an extra last input of y's shape."""
    stride: Tuple[int, ...]
    padding: Tuple[Pad, ...]
    dilation: Tuple[int, ...]
    groups: int
    has_bias: bool
    act: str = ""
    act_alpha: float = 0.0
    act_beta: float = 0.0
    has_residual: bool = False


@dataclass(frozen=True, slots=True)
class ConvTransposeAttrs:
    """ConvTranspose2d / 3d; weight [C_in, C_out/groups, k...]."""
    stride: Tuple[int, ...]
    padding: Tuple[Pad, ...]
    output_padding: Tuple[int, ...]
    dilation: Tuple[int, ...]
    groups: int
    has_bias: bool


@dataclass(frozen=True, slots=True)
class PoolAttrs:
    kind: str  # "max" | "avg"
    kernel: Tuple[int, ...]
    stride: Tuple[int, ...]
    padding: Tuple[Pad, ...]
    dilation: Tuple[int, ...]
    ceil_mode: bool
    count_include_pad: bool


@dataclass(frozen=True, slots=True)
class MaxPoolBackwardAttrs:
    """The window of the forward max pool whose gradient this is; inputs (x, dy)."""
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[Pad, Pad]
    dilation: Tuple[int, int]
    ceil_mode: bool


@dataclass(frozen=True, slots=True)
class ConvBackwardInputAttrs:
    """Inputs (dy, w); output has the forward conv's input shape (batch taken from dy)."""
    input_shape: Tuple[Optional[int], int, int, int]
    stride: Tuple[int, int]
    padding: Tuple[Pad, Pad]
    dilation: Tuple[int, int]
    groups: int


@dataclass(frozen=True, slots=True)
class ConvBackwardWeightAttrs:
    """Inputs (x, dy); output [C_out, C_in/groups, kh, kw]."""
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[Pad, Pad]
    dilation: Tuple[int, int]
    groups: int


@dataclass(frozen=True, slots=True)
class Im2ColAttrs:
    kernel: Tuple[int, int]
    stride: Tuple[int, int]
    padding: Tuple[Pad, Pad]
    dilation: Tuple[int, int]


@dataclass(frozen=True, slots=True)
class ResizeNearest2xAttrs:
    pass


INFER: Dict[str, Callable] = {}
shape_rule = registrar(INFER, "shape rule")


def _conflict(a: Dim, b: Dim) -> bool:
    """Two dims that are known now to differ (dynamic ones are checked once bound)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def _mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return f"{a}*{b}"


def _rank(node: str, what: str, shape: Shape, ranks: Tuple[int, ...]) -> None:
    if len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"{node}: {what} must have rank {want}, got shape {fmt_shape(shape)}")


def _static(node: str, what: str, shape: Shape) -> None:
    if not all(isinstance(d, int) for d in shape):
        raise ValueError(f"{node}: {what} must have a static shape, got {fmt_shape(shape)}")


def _static_channels(node: str, what: str, shape: Shape) -> int:
    if not isinstance(shape[1], int):
        raise ValueError(f"{node}: the channel dim of {what} must be static, got {fmt_shape(shape)}")
    return shape[1]


def _check_bias(node: str, b: Optional[Shape], c_out: int) -> None:
    if b is not None and tuple(b) != (c_out,):
        raise ValueError(f"{node}: bias must have shape [{c_out}] (one per output channel), got {fmt_shape(b)}")


def _check_groups(node: str, groups: int, **channels: int) -> None:
    if groups < 1:
        raise ValueError(f"{node}: groups must be >= 1, got {groups}")
    for name, c in channels.items():
        if c % groups:
            raise ValueError(f"{node}: {name}={c} is not divisible by groups={groups}")


def _conv_family(node: str, a, x: Shape, w: Shape, b: Optional[Shape], nsp: int, transposed: bool):
    sp_rank = 2 + nsp
    _rank(node, "input", x, (sp_rank,))
    _rank(node, "weight", w, (sp_rank,))
    _static(node, "weight", w)
    c_in = _static_channels(node, "input", x)
    kernel = tuple(w[2:])
    if transposed:
        _check_groups(node, a.groups, C_in=c_in)
        if w[0] != c_in:
            raise ValueError(f"{node}: weight {fmt_shape(w)} must be [C_in={c_in}, C_out/groups, k...]: "
                             f"dim 0 is {w[0]}, expected {c_in}")
        c_out = w[1] * a.groups
        for ax, (op_, s, d) in enumerate(zip(a.output_padding, a.stride, a.dilation)):
            if op_ < 0 or op_ >= max(s, d):
                raise ValueError(f"{node}: output_padding={op_} on spatial axis {ax} must be smaller than "
                                 f"stride ({s}) or dilation ({d})")
        spatial = tuple(transpose_out(x[2 + i], kernel[i], a.stride[i], a.padding[i], a.dilation[i],
                                      a.output_padding[i], node, i) for i in range(nsp))
    else:
        c_out = w[0]
        _check_groups(node, a.groups, C_in=c_in, C_out=c_out)
        if w[1] * a.groups != c_in:
            raise ValueError(f"{node}: weight {fmt_shape(w)} expects {w[1]}*groups={w[1] * a.groups} input "
                             f"channels, but the input has C={c_in} (input shape {fmt_shape(x)})")
        spatial = tuple(conv_out(x[2 + i], kernel[i], a.stride[i], a.padding[i], a.dilation[i], node, i)
                        for i in range(nsp))
    if any(k < 1 for k in kernel):
        raise ValueError(f"{node}: weight {fmt_shape(w)} has an empty kernel")
    _check_bias(node, b, c_out)
    return (x[0], c_out) + spatial


def _forward_conv(node: str, a: ConvAttrs, x: Shape, w: Shape, rest, nsp: int) -> Shape:
    """A forward conv's output shape; rest: the bias (has_bias), then the residual
    (has_residual), which must have the output's shape."""
    b = rest[0] if a.has_bias else None
    y = _conv_family(node, a, x, w, b, nsp, transposed=False)
    if a.has_residual:
        r = rest[-1]
        if len(r) != len(y) or any(_conflict(p, q) for p, q in zip(r, y)):
            raise ValueError(f"{node}: the residual {fmt_shape(r)} must have the conv's output shape {fmt_shape(y)}")
    return y


@shape_rule("Conv")
def infer_conv(node: str, a: ConvAttrs, x: Shape, w: Shape, *rest: Shape) -> Shape:
    _rank(node, "input", x, (3, 4))
    return _forward_conv(node, a, x, w, rest, len(x) - 2)


@shape_rule("Conv3d")
def infer_conv3d(node: str, a: ConvAttrs, x: Shape, w: Shape, *rest: Shape) -> Shape:
    return _forward_conv(node, a, x, w, rest, 3)


@shape_rule("ConvTranspose2d")
def infer_conv_transpose2d(node, a: ConvTransposeAttrs, x, w, b=None) -> Shape:
    return _conv_family(node, a, x, w, b, 2, transposed=True)


@shape_rule("ConvTranspose3d")
def infer_conv_transpose3d(node, a: ConvTransposeAttrs, x, w, b=None) -> Shape:
    return _conv_family(node, a, x, w, b, 3, transposed=True)


def _check_pool_window(node: str, kernel, stride, padding, dilation) -> None:
    for ax, (k, s, (pb, pe), d) in enumerate(zip(kernel, stride, padding, dilation)):
        if k < 1 or s < 1 or d < 1:
            raise ValueError(f"{node}: kernel_size, stride and dilation must be >= 1 on spatial axis {ax}, "
                             f"got k={k}, stride={s}, dilation={d}")
        # PyTorch refuses padding over half the kernel; ONNX allows more. Taken up to the
        # window's reach, so every window's span meets x. (A dilated window can still skip
        # over a small x, taps at rows -1 and 2 of 2, as PyTorch also takes: its max is
        # -inf and its average 0, as PyTorch and onnxruntime return.)
        if max(pb, pe) > d * (k - 1):
            raise ValueError(f"{node}: padding {(pb, pe)} on spatial axis {ax} must be at most the window's "
                             f"reach dilation*(k-1) = {d * (k - 1)}, so that every window's span meets the input")


@shape_rule("Pool")
def infer_pool(node: str, a: PoolAttrs, x: Shape) -> Shape:
    _rank(node, "input", x, (3, 4, 5))
    if a.kind not in ("max", "avg"):
        raise ValueError(f"{node}: pool kind must be 'max' or 'avg', got {a.kind!r}")
    if len(a.kernel) != len(x) - 2:
        raise ValueError(f"{node}: kernel_size {a.kernel} has {len(a.kernel)} axes but the input "
                         f"{fmt_shape(x)} has {len(x) - 2} spatial axes")
    _check_pool_window(node, a.kernel, a.stride, a.padding, a.dilation)
    return tuple(x[:2]) + tuple(
        pool_out(x[2 + i], a.kernel[i], a.stride[i], a.padding[i], a.dilation[i], a.ceil_mode, node, i)
        for i in range(len(a.kernel)))


def _pool_attrs_of(a: MaxPoolBackwardAttrs) -> PoolAttrs:
    return PoolAttrs("max", a.kernel, a.stride, a.padding, a.dilation, a.ceil_mode, True)


@shape_rule("MaxPool2dBackward")
def infer_max_pool2d_backward(node: str, a: MaxPoolBackwardAttrs, x: Shape, dy: Shape) -> Shape:
    _rank(node, "input x", x, (4,))
    expected = infer_pool(node, _pool_attrs_of(a), x)
    _rank(node, "dy", dy, (4,))
    if any(_conflict(e, d) for e, d in zip(expected, dy)):
        raise ValueError(f"{node}: dy must have the pool's output shape {fmt_shape(expected)}, got {fmt_shape(dy)}")
    return tuple(x)


@shape_rule("Conv2dBackwardInput")
def infer_conv2d_backward_input(node: str, a: ConvBackwardInputAttrs, dy: Shape, w: Shape) -> Shape:
    _rank(node, "dy", dy, (4,))
    _rank(node, "weight", w, (4,))
    _static(node, "weight", w)
    n0, c, h, wd = a.input_shape
    if n0 is not None and _conflict(n0, dy[0]):
        raise ValueError(f"{node}: input_shape batch {n0} differs from dy's batch {dy[0]}")
    x = (dy[0], c, h, wd)
    fwd = ConvAttrs(a.stride, a.padding, a.dilation, a.groups, False)
    expected = _conv_family(node, fwd, x, w, None, 2, transposed=False)
    if any(_conflict(e, d) for e, d in zip(expected, dy)):
        raise ValueError(f"{node}: dy must have the forward conv's output shape {fmt_shape(expected)} "
                         f"for input_shape {a.input_shape}, got {fmt_shape(dy)}")
    return x


@shape_rule("Conv2dBackwardWeight")
def infer_conv2d_backward_weight(node: str, a: ConvBackwardWeightAttrs, x: Shape, dy: Shape) -> Shape:
    _rank(node, "input x", x, (4,))
    _rank(node, "dy", dy, (4,))
    c = _static_channels(node, "x", x)
    k = _static_channels(node, "dy", dy)
    _check_groups(node, a.groups, C_in=c, C_out=k)
    w = (k, c // a.groups) + tuple(a.kernel)
    fwd = ConvAttrs(a.stride, a.padding, a.dilation, a.groups, False)
    expected = _conv_family(node, fwd, x, w, None, 2, transposed=False)
    if any(_conflict(e, d) for e, d in zip(expected, dy)):
        raise ValueError(f"{node}: dy must have the forward conv's output shape {fmt_shape(expected)}, "
                         f"got {fmt_shape(dy)}")
    return w


@shape_rule("Im2Col")
def infer_im2col(node: str, a: Im2ColAttrs, x: Shape) -> Shape:
    _rank(node, "input", x, (4,))
    c = _static_channels(node, "input", x)
    oh = conv_out(x[2], a.kernel[0], a.stride[0], a.padding[0], a.dilation[0], node, 0)
    ow = conv_out(x[3], a.kernel[1], a.stride[1], a.padding[1], a.dilation[1], node, 1)
    return (_mul(x[0], _mul(oh, ow)), c * a.kernel[0] * a.kernel[1])


@shape_rule("ResizeNearest2x")
def infer_resize_nearest2x(node: str, a: ResizeNearest2xAttrs, x: Shape) -> Shape:
    _rank(node, "input", x, (4,))
    return (x[0], x[1], _mul(2, x[2]), _mul(2, x[3]))


from . import tensor_ops  # noqa: E402,F401  (registers the shape rules of the ops around the convs)
