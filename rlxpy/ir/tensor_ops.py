"""The ops around the convolutions (activations, broadcasting arithmetic, batch norm,
linear / matmul, reshape / transpose / concat / slice / pad, reductions, softmax): one
frozen attrs type per op and its shape rule, registered in ops.INFER like the conv family's.

Semantics are PyTorch's (and NumPy's broadcasting); axes are normalized (negative counted
from the end) by the builder, so attrs hold non-negative axes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from .ops import _conflict, _mul, _rank, shape_rule
from .shape import Shape, fmt_shape

# activation name -> the attrs it reads (alpha, beta), for messages and the importer
UNARY = ("relu", "leaky_relu", "clip", "sigmoid", "hardsigmoid", "hardswish", "silu", "gelu", "gelu_tanh", "tanh",
         "identity", "erf")
BINARY = ("add", "sub", "mul", "div")
MAX_CONCAT = 16      # inputs of one Concat node (the builder nests wider concats)


@dataclass(frozen=True, slots=True)
class UnaryAttrs:
    """fn in UNARY; alpha/beta: leaky_relu's slope (alpha), clip's (min, max), hardsigmoid's
    (alpha, beta) in y = max(0, min(1, alpha*x + beta))."""
    fn: str
    alpha: float = 0.0
    beta: float = 0.0


@dataclass(frozen=True, slots=True)
class BinaryAttrs:
    fn: str


@dataclass(frozen=True, slots=True)
class BatchNormAttrs:
    """Inference batch norm over axis 1: inputs x, mean, var, weight, bias (each [C])."""
    eps: float


@dataclass(frozen=True, slots=True)
class MatMulAttrs:
    pass


@dataclass(frozen=True, slots=True)
class LinearAttrs:
    """y = x @ w.T (+ b): w [out, in]."""
    has_bias: bool


@dataclass(frozen=True, slots=True)
class ReshapeAttrs:
    """The target shape: ints >= 1 and at most one -1."""
    shape: Tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransposeAttrs:
    perm: Tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ConcatAttrs:
    axis: int


@dataclass(frozen=True, slots=True)
class SliceAttrs:
    """Per axis of the input: (start, end, step), Python slice semantics (clamped)."""
    slices: Tuple[Tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class PadAttrs:
    """Per axis of the input: (begin, end) >= 0; mode constant | reflect | edge."""
    pads: Tuple[Tuple[int, int], ...]
    mode: str
    value: float


@dataclass(frozen=True, slots=True)
class ReduceAttrs:
    """fn mean | max over axes; keepdims keeps them as 1 (global pools: mean/max over the
    spatial axes, keepdims)."""
    fn: str
    axes: Tuple[int, ...]
    keepdims: bool


@dataclass(frozen=True, slots=True)
class SoftmaxAttrs:
    axis: int
    log: bool


@shape_rule("Unary")
def infer_unary(node: str, a: UnaryAttrs, x: Shape) -> Shape:
    if a.fn not in UNARY:
        raise ValueError(f"{node}: unknown activation {a.fn!r}; known: {', '.join(UNARY)}")
    return tuple(x)


def broadcast(node: str, a: Shape, b: Shape) -> Shape:
    """NumPy's rule: align from the right; each pair equal, or one of them 1."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == 1:
            out.append(db)
        elif db == 1 or da == db:
            out.append(da)
        elif _conflict(da, db):
            raise ValueError(f"{node}: shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast "
                             f"(axis {-i}: {da} vs {db})")
        else:
            out.append(da if isinstance(da, int) else db)    # a dynamic dim: checked again once bound
    return tuple(reversed(out))


@shape_rule("Binary")
def infer_binary(node: str, a: BinaryAttrs, x: Shape, y: Shape) -> Shape:
    if a.fn not in BINARY:
        raise ValueError(f"{node}: unknown arithmetic op {a.fn!r}; known: {', '.join(BINARY)}")
    return broadcast(node, x, y)


@shape_rule("BatchNorm")
def infer_batch_norm(node: str, a: BatchNormAttrs, x: Shape, *per_channel: Shape) -> Shape:
    _rank(node, "input", x, (2, 3, 4, 5))
    for what, s in zip(("running_mean", "running_var", "weight", "bias"), per_channel):
        if len(s) != 1 or _conflict(s[0], x[1]):
            raise ValueError(f"{node}: {what} must have shape [{x[1]}] (one per channel of input "
                             f"{fmt_shape(x)}), got {fmt_shape(s)}")
    if a.eps < 0:
        raise ValueError(f"{node}: eps must be >= 0, got {a.eps}")
    return tuple(x)


@shape_rule("MatMul")
def infer_matmul(node: str, a: MatMulAttrs, x: Shape, w: Shape) -> Shape:
    _rank(node, "a", x, tuple(range(2, 9)))
    _rank(node, "b", w, tuple(range(2, 9)))
    if _conflict(x[-1], w[-2]):
        raise ValueError(f"{node}: a {fmt_shape(x)} @ b {fmt_shape(w)}: inner dims {x[-1]} and {w[-2]} differ")
    return broadcast(node, tuple(x[:-2]), tuple(w[:-2])) + (x[-2], w[-1])


@shape_rule("Linear")
def infer_linear(node: str, a: LinearAttrs, x: Shape, w: Shape, b: Optional[Shape] = None) -> Shape:
    _rank(node, "input", x, tuple(range(1, 9)))
    _rank(node, "weight", w, (2,))
    if _conflict(x[-1], w[1]):
        raise ValueError(f"{node}: weight {fmt_shape(w)} takes {w[1]} input features, the input "
                         f"{fmt_shape(x)} has {x[-1]}")
    if b is not None and (len(b) != 1 or _conflict(b[0], w[0])):
        raise ValueError(f"{node}: bias must have shape [{w[0]}], got {fmt_shape(b)}")
    return tuple(x[:-1]) + (w[0],)


def _numel(shape: Shape):
    n = 1
    for d in shape:
        n = _mul(n, d)
    return n


@shape_rule("Reshape")
def infer_reshape(node: str, a: ReshapeAttrs, x: Shape) -> Shape:
    if sum(1 for d in a.shape if d == -1) > 1 or any(d < 1 and d != -1 for d in a.shape):
        raise ValueError(f"{node}: shape {a.shape} may hold ints >= 1 and at most one -1")
    known = 1
    for d in a.shape:
        if d != -1:
            known *= d
    total = _numel(x)
    if -1 in a.shape:
        if isinstance(total, int):
            if total % known:
                raise ValueError(f"{node}: cannot reshape {fmt_shape(x)} ({total} elements) to {a.shape}")
            fill = total // known
        else:
            static = 1
            for d in x:
                static *= d if isinstance(d, int) else 1
            names = "*".join(d for d in x if not isinstance(d, int))
            # [N, C, H, W] -> (-1, C*H*W) keeps N's name; else the expression
            fill = names if static == known else f"({names}*{static})//{known}"
        return tuple(fill if d == -1 else d for d in a.shape)
    if isinstance(total, int) and total != known:
        raise ValueError(f"{node}: cannot reshape {fmt_shape(x)} ({total} elements) to {a.shape} ({known})")
    return tuple(a.shape)


@shape_rule("Transpose")
def infer_transpose(node: str, a: TransposeAttrs, x: Shape) -> Shape:
    if sorted(a.perm) != list(range(len(x))):
        raise ValueError(f"{node}: perm {a.perm} is not a permutation of the {len(x)} axes of {fmt_shape(x)}")
    return tuple(x[p] for p in a.perm)


@shape_rule("Concat")
def infer_concat(node: str, a: ConcatAttrs, *xs: Shape) -> Shape:
    first = xs[0]
    if len(xs) > MAX_CONCAT:
        raise ValueError(f"{node}: {len(xs)} inputs; one Concat node takes at most {MAX_CONCAT}")
    if not 0 <= a.axis < len(first):
        raise ValueError(f"{node}: axis {a.axis} is out of range for rank {len(first)}")
    total = first[a.axis]
    for i, s in enumerate(xs[1:], 1):
        if len(s) != len(first) or any(_conflict(p, q) for k, (p, q) in enumerate(zip(first, s)) if k != a.axis):
            raise ValueError(f"{node}: input {i} {fmt_shape(s)} differs from input 0 {fmt_shape(first)} "
                             f"outside axis {a.axis}")
        total = total + s[a.axis] if isinstance(total, int) and isinstance(s[a.axis], int) else f"{total}+{s[a.axis]}"
    return tuple(total if k == a.axis else d for k, d in enumerate(first))


def slice_len(size: int, start: int, end: int, step: int) -> int:
    return len(range(*slice(start, end, step).indices(size)))


@shape_rule("Slice")
def infer_slice(node: str, a: SliceAttrs, x: Shape) -> Shape:
    if len(a.slices) != len(x):
        raise ValueError(f"{node}: {len(a.slices)} slices for an input of rank {len(x)}")
    out = []
    for ax, (d, (start, end, step)) in enumerate(zip(x, a.slices)):
        if step == 0:
            raise ValueError(f"{node}: slice step on axis {ax} must not be 0")
        if isinstance(d, int):
            n = slice_len(d, start, end, step)
            if n < 1:
                raise ValueError(f"{node}: slice {start}:{end}:{step} of axis {ax} (size {d}) is empty")
            out.append(n)
        else:
            if (start, end, step) != (0, 2 ** 62, 1):
                raise ValueError(f"{node}: axis {ax} is dynamic ({d}): it can only be kept whole")
            out.append(d)
    return tuple(out)


@shape_rule("Pad")
def infer_pad(node: str, a: PadAttrs, x: Shape) -> Shape:
    if a.mode not in ("constant", "reflect", "edge"):
        raise ValueError(f"{node}: pad mode must be 'constant', 'reflect' or 'edge', got {a.mode!r}")
    if len(a.pads) != len(x):
        raise ValueError(f"{node}: {len(a.pads)} (begin, end) pads for an input of rank {len(x)}")
    out = []
    for ax, (d, (b, e)) in enumerate(zip(x, a.pads)):
        if b < 0 or e < 0:
            raise ValueError(f"{node}: pads must be >= 0, got {(b, e)} on axis {ax}")
        if a.mode == "reflect" and isinstance(d, int) and max(b, e) >= d:
            raise ValueError(f"{node}: reflect padding {(b, e)} on axis {ax} must be smaller than its size {d}")
        if (b or e) and not isinstance(d, int):
            raise ValueError(f"{node}: axis {ax} is dynamic ({d}): it cannot be padded")
        out.append(d + b + e if isinstance(d, int) else d)
    return tuple(out)


@shape_rule("Reduce")
def infer_reduce(node: str, a: ReduceAttrs, x: Shape) -> Shape:
    if a.fn not in ("mean", "max"):
        raise ValueError(f"{node}: reduction must be 'mean' or 'max', got {a.fn!r}")
    if not a.axes or any(not 0 <= ax < len(x) for ax in a.axes) or len(set(a.axes)) != len(a.axes):
        raise ValueError(f"{node}: axes {a.axes} must be distinct axes of rank {len(x)}")
    if 0 in a.axes and not isinstance(x[0], int):
        pass       # reducing a dynamic batch is allowed: its size is bound per run
    return tuple(1 if k in a.axes else d for k, d in enumerate(x) if a.keepdims or k not in a.axes)


@shape_rule("Softmax")
def infer_softmax(node: str, a: SoftmaxAttrs, x: Shape) -> Shape:
    if not 0 <= a.axis < len(x):
        raise ValueError(f"{node}: axis {a.axis} is out of range for rank {len(x)}")
    return tuple(x)
