"""Per-op compile functions: COMPILE[op](node, ctx) -> one thunk record.

A compile function sees concrete shapes and the Config; it knows nothing of numba. The
`*_off` fields it fills hold value ids (scratch ids from `ctx.scratch`); the plan
builder turns them into arena offsets.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

from ..cpu_kernels.config import Config
from ..ir.graph import Node
from ..ir.shape import conv_out
from ..registry import registrar
from . import algos, records as R

COMPILE: Dict[str, Callable[[Node, "LowerCtx"], R.Record]] = {}
compile_rule = registrar(COMPILE, "compile rule")


def lookup(op: str):
    try:
        return COMPILE[op]
    except KeyError:
        raise NotImplementedError(f"no compile rule for {op}") from None


class LowerCtx:
    """What a compile function may ask: concrete shapes, the Config, the thread count,
    scratch bytes (live while its thunk runs) and persistent bytes (kept for the arena's
    life, zeroed when the arena is made)."""

    def __init__(self, shapes: Dict[int, Tuple[int, ...]], config: Config, first_scratch_id: int,
                 threads: int, params: frozenset = frozenset()):
        self.shapes = shapes
        self.config = config
        self.threads = threads          # workers a parallel kernel will run on
        self.slots = threads            # per-worker scratch slots
        self.params = params            # value ids that are constant params
        self.scratch_requests: List[Tuple[int, int]] = []     # (id, bytes) of the current node
        self.persistent_requests: List[Tuple[int, int]] = []
        self._next_id = first_scratch_id

    def shape(self, vid: int) -> Tuple[int, ...]:
        return self.shapes[vid]

    def _new(self, nbytes: int, into: list) -> int:
        if nbytes <= 0:
            return -1
        sid = self._next_id
        self._next_id += 1
        into.append((sid, int(nbytes)))
        return sid

    def scratch(self, nbytes: int) -> int:
        """A scratch buffer live only while this node's thunk runs; -1 when none is needed."""
        return self._new(nbytes, self.scratch_requests)

    def persistent(self, nbytes: int) -> int:
        """Bytes that keep their contents from run to run of one arena (never overlapped)."""
        return self._new(nbytes, self.persistent_requests)


def _bias_id(node: Node) -> int:
    return node.inputs[2] if len(node.inputs) > 2 else -1


def conv_geometry(node: Node, ctx: LowerCtx, x_vid: int, y_vid: int, kernel) -> dict:
    """Geometry fields of a conv-family record. A 1-D conv becomes a 2-D one with H = 1:
    [N, C, L] and [N, C, 1, L] are the same bytes, so no data is copied."""
    a = node.attrs
    x, y = ctx.shape(x_vid), ctx.shape(y_vid)
    stride, dilation = a.stride, a.dilation
    pad_b, pad_e = tuple(p[0] for p in a.padding), tuple(p[1] for p in a.padding)
    kernel = tuple(kernel)
    if len(x) == 3:
        x, y = (x[0], x[1], 1, x[2]), (y[0], y[1], 1, y[2])
        kernel, stride, dilation = (1,) + kernel, (1,) + stride, (1,) + dilation
        pad_b, pad_e = (0,) + pad_b, (0,) + pad_e
    return dict(node=node.name, x_shape=x, y_shape=y, kernel=kernel, stride=stride, pad_begin=pad_b,
                pad_end=pad_e, dilation=dilation, groups=a.groups)


def is_pointwise(g: dict) -> bool:
    return (all(k == 1 for k in g["kernel"]) and all(s == 1 for s in g["stride"]) and g["groups"] == 1
            and not any(g["pad_begin"]) and not any(g["pad_end"]))


def _scratch_fields(ch: algos.Choice, ctx: LowerCtx) -> dict:
    return dict(algo=ch.algo, why=ch.why, scratch_off=ctx.scratch(ch.scratch), scratch_bytes=ch.scratch)


@compile_rule("Conv")
def compile_conv(node: Node, ctx: LowerCtx) -> R.Record:
    x, w = node.inputs[0], node.inputs[1]
    g = conv_geometry(node, ctx, x, node.output, ctx.shape(w)[2:])
    io = dict(x_off=x, w_off=w, b_off=_bias_id(node), y_off=node.output)
    if is_pointwise(g):
        ch = algos.choose_conv2d_1x1(g, ctx.config, ctx.threads)
        return R.Conv2D1x1(algo=ch.algo, why=ch.why, tile=ch.tile, weight_const=w in ctx.params, **io, **g)
    ch = algos.choose_conv2d(g, ctx.config, ctx.threads, ctx.slots)
    const = w in ctx.params
    # A param's Winograd transform is computed once per arena; an input weight's every run.
    aux = (ctx.persistent if const else ctx.scratch)(ch.aux)
    return R.Conv2D(**_scratch_fields(ch, ctx), tile=ch.tile, k_blocks=ch.k_blocks, aux_off=aux,
                    aux_bytes=ch.aux, weight_const=const, **io, **g)


@compile_rule("Conv3d")
def compile_conv3d(node: Node, ctx: LowerCtx) -> R.Record:
    x, w = node.inputs[0], node.inputs[1]
    g = conv_geometry(node, ctx, x, node.output, ctx.shape(w)[2:])
    ch = algos.choose_conv3d(g, ctx.config, ctx.threads, ctx.slots)
    return R.Conv3d(**_scratch_fields(ch, ctx), tile=ch.tile, k_blocks=ch.k_blocks, x_off=x, w_off=w,
                    b_off=_bias_id(node), y_off=node.output, **g)


def _compile_conv_transpose(record_type, family: str):
    def rule(node: Node, ctx: LowerCtx) -> R.Record:
        x, w = node.inputs[0], node.inputs[1]
        g = conv_geometry(node, ctx, x, node.output, ctx.shape(w)[2:])
        ch = algos.choose_col2im(family, g, ctx.config, ctx.threads, ctx.slots, transposed_in=True)
        return record_type(**_scratch_fields(ch, ctx), k_blocks=ch.k_blocks, x_off=x, w_off=w,
                           b_off=_bias_id(node), y_off=node.output, **g)
    return rule


compile_rule("ConvTranspose2d")(_compile_conv_transpose(R.ConvTranspose2d, "conv_transpose2d"))
compile_rule("ConvTranspose3d")(_compile_conv_transpose(R.ConvTranspose3d, "conv_transpose3d"))


@compile_rule("Conv2dBackwardInput")
def compile_conv2d_backward_input(node: Node, ctx: LowerCtx) -> R.Record:
    dy, w = node.inputs
    g = conv_geometry(node, ctx, node.output, dy, ctx.shape(w)[2:])
    ch = algos.choose_col2im("conv2d_backward_input", g, ctx.config, ctx.threads, ctx.slots, transposed_in=False)
    return R.Conv2dBackwardInput(**_scratch_fields(ch, ctx), k_blocks=ch.k_blocks, dy_off=dy, w_off=w,
                                 dx_off=node.output, weight_const=w in ctx.params, **g)


@compile_rule("Conv2dBackwardWeight")
def compile_conv2d_backward_weight(node: Node, ctx: LowerCtx) -> R.Record:
    x, dy = node.inputs
    g = conv_geometry(node, ctx, x, dy, node.attrs.kernel)
    ch = algos.choose_conv2d_backward_weight(g, ctx.config, ctx.threads, ctx.slots)
    return R.Conv2dBackwardWeight(**_scratch_fields(ch, ctx), tile=ch.tile, x_off=x, dy_off=dy,
                                  dw_off=node.output, **g)


def pool_geometry(node: Node, ctx: LowerCtx, x_vid: int, y_vid: int) -> dict:
    """A 1-D pool becomes a 2-D one with H = 1, as for convs."""
    a = node.attrs
    x, y = ctx.shape(x_vid), ctx.shape(y_vid)
    kernel, stride, dilation = a.kernel, a.stride, a.dilation
    pad_b, pad_e = tuple(p[0] for p in a.padding), tuple(p[1] for p in a.padding)
    if len(x) == 3:
        x, y = (x[0], x[1], 1, x[2]), (y[0], y[1], 1, y[2])
        kernel, stride, dilation = (1,) + kernel, (1,) + stride, (1,) + dilation
        pad_b, pad_e = (0,) + pad_b, (0,) + pad_e
    return dict(node=node.name, x_shape=x, y_shape=y, kernel=kernel, stride=stride, pad_begin=pad_b,
                pad_end=pad_e, dilation=dilation)


@compile_rule("Pool")
def compile_pool(node: Node, ctx: LowerCtx) -> R.Record:
    g = pool_geometry(node, ctx, node.inputs[0], node.output)
    rank3d = len(g["x_shape"]) == 5
    ch = algos.parallel("pool3d" if rank3d else "pool2d", ctx.config)
    record_type = R.Pool3D if rank3d else R.Pool2D
    return record_type(algo=ch.algo, why=ch.why, kind=node.attrs.kind, count_include_pad=node.attrs.count_include_pad,
                       x_off=node.inputs[0], y_off=node.output, **g)


@compile_rule("MaxPool2dBackward")
def compile_max_pool2d_backward(node: Node, ctx: LowerCtx) -> R.Record:
    x, dy = node.inputs
    g = pool_geometry(node, ctx, x, dy)
    ch = algos.parallel("max_pool2d_backward", ctx.config)
    return R.MaxPool2dBackward(algo=ch.algo, why=ch.why, x_off=x, dy_off=dy, dx_off=node.output, **g)


@compile_rule("Im2Col")
def compile_im2col(node: Node, ctx: LowerCtx) -> R.Record:
    a = node.attrs
    x = ctx.shape(node.inputs[0])
    out_hw = tuple(conv_out(x[2 + i], a.kernel[i], a.stride[i], a.padding[i], a.dilation[i], node.name, i)
                   for i in range(2))
    ch = algos.parallel("im2col", ctx.config, "parallel over output rows")
    return R.Im2Col(node=node.name, algo=ch.algo, why=ch.why, x_shape=x, out_hw=out_hw, kernel=a.kernel,
                    stride=a.stride, pad_begin=tuple(p[0] for p in a.padding), dilation=a.dilation,
                    x_off=node.inputs[0], y_off=node.output)


@compile_rule("ResizeNearest2x")
def compile_resize_nearest2x(node: Node, ctx: LowerCtx) -> R.Record:
    ch = algos.parallel("resize_nearest2x", ctx.config)
    return R.ResizeNearest2x(node=node.name, algo=ch.algo, why=ch.why, x_shape=ctx.shape(node.inputs[0]),
                             x_off=node.inputs[0], y_off=node.output)
