"""Per-op compile rules: COMPILE[op](node, ctx) -> one device-neutral record.

A compile rule sees concrete shapes and which values are params; it knows nothing of any
device, kernel or Config. The record's role fields hold value ids; the backend chooses
the kernel and the plan builder binds offsets.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from ..ir.graph import Node
from ..ir.shape import conv_out
from ..registry import registrar
from . import records as R
from .geometry import Im2ColGeometry, ResizeGeometry, conv_geometry, pool_geometry

COMPILE: Dict[str, Callable[[Node, "LowerCtx"], R.Record]] = {}
compile_rule = registrar(COMPILE, "compile rule")


def lookup(op: str):
    try:
        return COMPILE[op]
    except KeyError:
        raise NotImplementedError(f"no compile rule for {op}") from None


class LowerCtx:
    """What a compile rule may ask: concrete shapes and which value ids are params."""

    def __init__(self, shapes: Dict[int, Tuple[int, ...]], params: frozenset = frozenset()):
        self.shapes = shapes
        self.params = params

    def shape(self, vid: int) -> Tuple[int, ...]:
        return self.shapes[vid]

    def is_param(self, vid: int) -> bool:
        return vid in self.params


def _bias_id(node: Node) -> int:
    return node.inputs[2] if node.attrs.has_bias else R.ABSENT


def _epilogue(node: Node) -> dict:
    """A fused forward conv's residual and epilogue (rlxpy.thunks.rewrite), as record fields."""
    a = node.attrs
    if not (getattr(a, "has_residual", False) or getattr(a, "act", "")):
        return {}
    return dict(r=node.inputs[-1] if a.has_residual else R.ABSENT,
                epilogue=R.Epilogue(a.act, a.act_alpha, a.act_beta))


def _conv_geometry(node: Node, ctx: LowerCtx, x_vid: int, y_vid: int, kernel):
    return conv_geometry(node.attrs, ctx.shape(x_vid), ctx.shape(y_vid), kernel)


@compile_rule("Conv")
def compile_conv(node: Node, ctx: LowerCtx) -> R.Record:
    x, w = node.inputs[0], node.inputs[1]
    g = _conv_geometry(node, ctx, x, node.output, ctx.shape(w)[2:])
    record_type = R.Conv2D1x1 if g.is_pointwise else R.Conv2D
    return record_type(node.name, g, x=x, w=w, b=_bias_id(node), y=node.output, weight_const=ctx.is_param(w),
                       **_epilogue(node))


@compile_rule("Conv3d")
def compile_conv3d(node: Node, ctx: LowerCtx) -> R.Record:
    x, w = node.inputs[0], node.inputs[1]
    g = _conv_geometry(node, ctx, x, node.output, ctx.shape(w)[2:])
    return R.Conv3d(node.name, g, x=x, w=w, b=_bias_id(node), y=node.output, weight_const=ctx.is_param(w),
                    **_epilogue(node))


def _compile_conv_transpose(record_type):
    def rule(node: Node, ctx: LowerCtx) -> R.Record:
        x, w = node.inputs[0], node.inputs[1]
        g = _conv_geometry(node, ctx, x, node.output, ctx.shape(w)[2:])
        return record_type(node.name, g, x=x, w=w, b=_bias_id(node), y=node.output, weight_const=ctx.is_param(w))
    return rule


compile_rule("ConvTranspose2d")(_compile_conv_transpose(R.ConvTranspose2d))
compile_rule("ConvTranspose3d")(_compile_conv_transpose(R.ConvTranspose3d))


@compile_rule("Conv2dBackwardInput")
def compile_conv2d_backward_input(node: Node, ctx: LowerCtx) -> R.Record:
    dy, w = node.inputs
    g = _conv_geometry(node, ctx, node.output, dy, ctx.shape(w)[2:])
    return R.Conv2dBackwardInput(node.name, g, dy=dy, w=w, dx=node.output, weight_const=ctx.is_param(w))


@compile_rule("Conv2dBackwardWeight")
def compile_conv2d_backward_weight(node: Node, ctx: LowerCtx) -> R.Record:
    x, dy = node.inputs
    g = _conv_geometry(node, ctx, x, dy, node.attrs.kernel)
    return R.Conv2dBackwardWeight(node.name, g, x=x, dy=dy, dw=node.output)


@compile_rule("Pool")
def compile_pool(node: Node, ctx: LowerCtx) -> R.Record:
    x = node.inputs[0]
    g = pool_geometry(node.attrs, ctx.shape(x), ctx.shape(node.output))
    record_type = R.Pool3D if len(g.kernel) == 3 else R.Pool2D
    return record_type(node.name, g, kind=node.attrs.kind, count_include_pad=node.attrs.count_include_pad,
                       x=x, y=node.output)


@compile_rule("MaxPool2dBackward")
def compile_max_pool2d_backward(node: Node, ctx: LowerCtx) -> R.Record:
    x, dy = node.inputs
    return R.MaxPool2dBackward(node.name, pool_geometry(node.attrs, ctx.shape(x), ctx.shape(dy)),
                               x=x, dy=dy, dx=node.output)


@compile_rule("Im2Col")
def compile_im2col(node: Node, ctx: LowerCtx) -> R.Record:
    a = node.attrs
    x = ctx.shape(node.inputs[0])
    out_hw = tuple(conv_out(x[2 + i], a.kernel[i], a.stride[i], a.padding[i], a.dilation[i], node.name, i)
                   for i in range(2))
    g = Im2ColGeometry(tuple(x), out_hw, tuple(a.kernel), tuple(a.stride), tuple(p[0] for p in a.padding),
                       tuple(a.dilation))
    return R.Im2Col(node.name, g, x=node.inputs[0], y=node.output)


@compile_rule("ResizeNearest2x")
def compile_resize_nearest2x(node: Node, ctx: LowerCtx) -> R.Record:
    return R.ResizeNearest2x(node.name, ResizeGeometry(tuple(ctx.shape(node.inputs[0]))), x=node.inputs[0], y=node.output)


from . import tensor_records  # noqa: E402,F401  (registers the compile rules of the ops around the convs)
