"""Records (and their geometries and compile rules) of the ops around the convolutions.

Each is device-neutral data like the conv family's records: the node, a frozen geometry
of concrete shapes, value ids in role fields. Concat takes any number of inputs, so there
is one record type per arity (Concat1 ... Concat16, roles x0, x1, ...); the builder nests
wider concats.
"""
from __future__ import annotations

from dataclasses import dataclass, make_dataclass
from typing import ClassVar, Dict, Tuple, Type

from ..ir.graph import Node
from ..ir.tensor_ops import MAX_CONCAT
from .compile import LowerCtx, compile_rule
from .records import ABSENT, Record

Ints = Tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ElementwiseGeometry:
    shape: Ints
    fn: str
    alpha: float = 0.0
    beta: float = 0.0


@dataclass(frozen=True, slots=True)
class BroadcastGeometry:
    a_shape: Ints
    b_shape: Ints
    y_shape: Ints
    fn: str


@dataclass(frozen=True, slots=True)
class ShapesGeometry:
    """An op whose kernel needs only its input and output shapes, and one parameter tuple
    (perm, slices, pads, axes; empty where none) with a mode string and a float (pad value)."""
    x_shape: Ints
    y_shape: Ints
    params: tuple = ()
    mode: str = ""
    value: float = 0.0




@dataclass(frozen=True, slots=True)
class Binary(Record):
    INPUTS: ClassVar = ("a", "b")
    OUTPUTS: ClassVar = ("y",)
    geometry: BroadcastGeometry
    a: int
    b: int
    y: int


@dataclass(frozen=True, slots=True)
class BatchNorm(Record):
    """geometry: ElementwiseGeometry(shape, "batch_norm", eps)."""
    INPUTS: ClassVar = ("x", "mean", "var", "w", "b")
    OUTPUTS: ClassVar = ("y",)
    geometry: ElementwiseGeometry
    x: int
    mean: int
    var: int
    w: int
    b: int
    y: int


@dataclass(frozen=True, slots=True)
class MatMul(Binary):
    """a @ b with batch dims broadcast (geometry.fn: "matmul")."""


@dataclass(frozen=True, slots=True)
class Linear(Record):
    """y = x @ w.T + b; geometry: ShapesGeometry(x_shape, y_shape)."""
    INPUTS: ClassVar = ("x", "w", "b")
    OUTPUTS: ClassVar = ("y",)
    geometry: ShapesGeometry
    x: int
    w: int
    b: int
    y: int


@dataclass(frozen=True, slots=True)
class Move(Record):
    """A record that moves values: x -> y by its geometry (the subclasses say how)."""
    INPUTS: ClassVar = ("x",)
    OUTPUTS: ClassVar = ("y",)
    geometry: ShapesGeometry
    x: int
    y: int


@dataclass(frozen=True, slots=True)
class Unary(Move):
    geometry: ElementwiseGeometry


@dataclass(frozen=True, slots=True)
class Reshape(Move):
    pass


@dataclass(frozen=True, slots=True)
class Transpose(Move):
    """params: perm."""


@dataclass(frozen=True, slots=True)
class Slice(Move):
    """params: (start, end, step) per axis."""


@dataclass(frozen=True, slots=True)
class Pad(Move):
    """params: (begin, end) per axis; mode constant | reflect | edge; value."""


@dataclass(frozen=True, slots=True)
class Reduce(Move):
    """params: axes; mode mean | max; value: 1.0 when keepdims."""


@dataclass(frozen=True, slots=True)
class Softmax(Move):
    """params: (axis,); mode "log" for log_softmax."""


@dataclass(frozen=True, slots=True)
class ConcatBase(Record):
    """geometry: ShapesGeometry(shape of input 0, y_shape, (axis, size of each input on it))."""
    geometry: ShapesGeometry


def _concat_type(k: int) -> Type[Record]:
    roles = tuple(f"x{i}" for i in range(k))
    cls = make_dataclass(f"Concat{k}", [(r, int) for r in roles] + [("y", int)], bases=(ConcatBase,),
                         frozen=True, slots=True)
    cls.INPUTS, cls.OUTPUTS = roles, ("y",)
    cls.__module__ = __name__
    return cls


CONCAT: Dict[int, Type[Record]] = {k: _concat_type(k) for k in range(1, MAX_CONCAT + 1)}
globals().update({t.__name__: t for t in CONCAT.values()})   # picklable by name


# --- compile rules ---------------------------------------------------------------------------
def _shapes(node: Node, ctx: LowerCtx, params=(), mode="", value=0.0) -> ShapesGeometry:
    return ShapesGeometry(tuple(ctx.shape(node.inputs[0])), tuple(ctx.shape(node.output)), tuple(params), mode,
                          float(value))


@compile_rule("Unary")
def compile_unary(node: Node, ctx: LowerCtx) -> Record:
    a = node.attrs
    return Unary(node.name, ElementwiseGeometry(tuple(ctx.shape(node.output)), a.fn, a.alpha, a.beta),
                 x=node.inputs[0], y=node.output)


@compile_rule("Binary")
def compile_binary(node: Node, ctx: LowerCtx) -> Record:
    a, b = node.inputs
    return Binary(node.name, BroadcastGeometry(tuple(ctx.shape(a)), tuple(ctx.shape(b)), tuple(ctx.shape(node.output)),
                                               node.attrs.fn), a=a, b=b, y=node.output)


@compile_rule("BatchNorm")
def compile_batch_norm(node: Node, ctx: LowerCtx) -> Record:
    x, mean, var, w, b = node.inputs
    return BatchNorm(node.name, ElementwiseGeometry(tuple(ctx.shape(x)), "batch_norm", node.attrs.eps), x=x, mean=mean,
                     var=var, w=w, b=b, y=node.output)


@compile_rule("MatMul")
def compile_matmul(node: Node, ctx: LowerCtx) -> Record:
    a, b = node.inputs
    return MatMul(node.name, BroadcastGeometry(tuple(ctx.shape(a)), tuple(ctx.shape(b)), tuple(ctx.shape(node.output)),
                                               "matmul"), a=a, b=b, y=node.output)


@compile_rule("Linear")
def compile_linear(node: Node, ctx: LowerCtx) -> Record:
    b = node.inputs[2] if len(node.inputs) > 2 else ABSENT
    return Linear(node.name, _shapes(node, ctx), x=node.inputs[0], w=node.inputs[1], b=b, y=node.output)


@compile_rule("Reshape")
def compile_reshape(node: Node, ctx: LowerCtx) -> Record:
    return Reshape(node.name, _shapes(node, ctx), x=node.inputs[0], y=node.output)


@compile_rule("Transpose")
def compile_transpose(node: Node, ctx: LowerCtx) -> Record:
    return Transpose(node.name, _shapes(node, ctx, node.attrs.perm), x=node.inputs[0], y=node.output)


def _concrete_slice(size: int, start: int, end: int, step: int) -> Tuple[int, int, int]:
    """(start, stop, step) clamped to the axis, as slice.indices gives them, except that a
    backward slice running through index 0 stops at -size - 1, not -1: slice(*p) reads a stop
    of -1 as the last index, which would make the slice empty."""
    start, stop, step = slice(start, end, step).indices(size)
    return (start, -size - 1 if stop < 0 else stop, step)


@compile_rule("Slice")
def compile_slice(node: Node, ctx: LowerCtx) -> Record:
    x = ctx.shape(node.inputs[0])
    per = tuple(_concrete_slice(d, s, e, st) for d, (s, e, st) in zip(x, node.attrs.slices))
    return Slice(node.name, _shapes(node, ctx, per), x=node.inputs[0], y=node.output)


@compile_rule("Pad")
def compile_pad(node: Node, ctx: LowerCtx) -> Record:
    a = node.attrs
    return Pad(node.name, _shapes(node, ctx, a.pads, a.mode, a.value), x=node.inputs[0], y=node.output)


@compile_rule("Reduce")
def compile_reduce(node: Node, ctx: LowerCtx) -> Record:
    a = node.attrs
    return Reduce(node.name, _shapes(node, ctx, a.axes, a.fn, 1.0 if a.keepdims else 0.0), x=node.inputs[0],
                  y=node.output)


@compile_rule("Softmax")
def compile_softmax(node: Node, ctx: LowerCtx) -> Record:
    a = node.attrs
    return Softmax(node.name, _shapes(node, ctx, (a.axis,), "log" if a.log else ""), x=node.inputs[0], y=node.output)


@compile_rule("Concat")
def compile_concat(node: Node, ctx: LowerCtx) -> Record:
    axis = node.attrs.axis
    sizes = tuple(ctx.shape(v)[axis] for v in node.inputs)
    g = ShapesGeometry(tuple(ctx.shape(node.inputs[0])), tuple(ctx.shape(node.output)), (axis, sizes))
    ids = {f"x{i}": v for i, v in enumerate(node.inputs)}
    return CONCAT[len(node.inputs)](node.name, g, y=node.output, **ids)
