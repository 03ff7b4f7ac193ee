"""Graph, Node, Value and the builder: one method per op, attributes as in PyTorch.

A node is validated and its output shape inferred when it is added; an invalid node is
refused then and leaves the graph unchanged.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import ops
from .shape import Dim, Shape, as_pads, as_tuple, check_positive, fmt_shape
from .tensor_builder import TensorOps


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    op: str            # "Input", "Param" or a key of ops.INFER
    attrs: object      # the op's frozen attrs (None for Input / Param)
    inputs: Tuple[int, ...]  # value ids
    output: int        # value id
    shape: Shape


class Value:
    """A handle to a node's output; only valid in the graph that made it."""
    __slots__ = ("graph", "id", "shape", "name")

    def __init__(self, graph: "Graph", vid: int, shape: Shape, name: str):
        self.graph, self.id, self.shape, self.name = graph, vid, shape, name

    def __repr__(self) -> str:
        return f"Value({self.name}, {fmt_shape(self.shape)})"


_ids = itertools.count()


def _string_padding(padding: str, stride, dilation, w_shape, nsp: int, node: str):
    """PyTorch's padding='valid' (none) and 'same' (stride 1 only: the output keeps the
    input's size; an odd total pad puts its extra row or column at the end, as F.conv2d does)."""
    if padding == "valid":
        return 0
    if padding != "same":
        raise ValueError(f"{node}: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
    if any(st != 1 for st in stride):
        raise ValueError(f"{node}: padding='same' is not supported for strided convolutions (stride {stride}), "
                         f"as in PyTorch")
    if w_shape is None or len(w_shape) != nsp + 2:
        raise ValueError(f"{node}: padding='same' needs a weight of rank {nsp + 2}")
    totals = [dl * (k - 1) for dl, k in zip(dilation, w_shape[2:])]
    return tuple((t // 2, t - t // 2) for t in totals)


class Graph(TensorOps):
    def __init__(self):
        self.nodes: List[Node] = []
        self.params: Dict[int, np.ndarray] = {}      # value id -> float32 array
        self.inputs: Dict[str, int] = {}             # input name -> value id
        self.outputs: Dict[str, int] = {}            # output name -> value id
        self._names: set = set()
        self._counter = itertools.count()
        self._uid = next(_ids)

    # -- pickling: nodes, params (each array once), names; the name counter as where it stood
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_counter"] = next(self._counter)      # itertools.count is not picklable on every Python
        self._counter = itertools.count(state["_counter"])
        return state

    def __setstate__(self, state):
        state = dict(state)
        state["_counter"] = itertools.count(state["_counter"])
        state["_uid"] = next(_ids)
        self.__dict__.update(state)

    # -- plumbing -------------------------------------------------------------------
    def node_of(self, vid: int) -> Node:
        return self.nodes[vid]  # value ids are node indices: one output per node

    def _name(self, name: Optional[str], op: str) -> str:
        if name is None:
            while True:
                name = f"{op.lower()}_{next(self._counter)}"
                if name not in self._names:
                    break
        elif not isinstance(name, str) or not name:
            raise TypeError(f"node name must be a non-empty str, got {name!r}")
        elif name in self._names:
            raise ValueError(f"a node named {name!r} already exists in this graph")
        return name

    def _value(self, v, what: str, node: str) -> Value:
        if not isinstance(v, Value):
            raise TypeError(f"{node}: {what} must be a Value made by this graph, got {type(v).__name__}")
        if v.graph is not self:
            raise ValueError(f"{node}: {what} ({v.name}) belongs to another graph")
        return v

    def _add(self, op: str, attrs, args, name: Optional[str], what=("x",)) -> Value:
        name = self._name(name, op)
        vals = [self._value(v, w, name) for v, w in zip(args, what) if v is not None]
        shape = tuple(ops.INFER[op](name, attrs, *[v.shape for v in vals]))
        return self._append(Node(name, op, attrs, tuple(v.id for v in vals), len(self.nodes), shape))

    def _append(self, node: Node) -> Value:
        self.nodes.append(node)
        self._names.add(node.name)
        return Value(self, node.output, node.shape, node.name)

    # -- sources and sinks ----------------------------------------------------------
    def input(self, name: str, shape) -> Value:
        """shape: ints, or None / a str for a dynamic dim (None dims are named after the input)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"input name must be a non-empty str, got {name!r}")
        if name in self.inputs:
            raise ValueError(f"an input named {name!r} already exists")
        dims: List[Dim] = []
        for i, d in enumerate(tuple(shape)):
            if d is None:
                dims.append("N" if i == 0 else f"{name}.{i}")
            elif isinstance(d, str):
                dims.append(d)
            elif isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1:
                dims.append(int(d))
            else:
                raise ValueError(f"input {name!r}: dim {i} must be an int >= 1, None or a name, got {d!r}")
        node_name = self._name(name, "Input")
        v = self._append(Node(node_name, "Input", None, (), len(self.nodes), tuple(dims)))
        self.inputs[name] = v.id
        return v

    def param(self, name: str, array) -> Value:
        """A float32 constant, copied now and bound into the arena once per plan."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"param {name!r}: expected a numpy array, got {type(array).__name__}")
        if array.dtype != np.float32:
            raise TypeError(f"param {name!r}: dtype must be float32, got {array.dtype}")
        if array.ndim == 0 or array.size == 0:
            raise ValueError(f"param {name!r}: must have rank >= 1 and no empty dims, got shape {array.shape}")
        node_name = self._name(name, "Param")
        v = self._append(Node(node_name, "Param", None, (), len(self.nodes), tuple(int(d) for d in array.shape)))
        self.params[v.id] = np.ascontiguousarray(array).copy()
        return v

    def output(self, name: str, value: Value) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"output name must be a non-empty str, got {name!r}")
        if name in self.outputs:
            raise ValueError(f"output name {name!r} is already used")
        self.outputs[name] = self._value(value, "output value", f"output {name!r}").id

    # -- ops ------------------------------------------------------------------------
    def conv(self, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, name=None) -> Value:
        """1-D conv for a rank-3 input [N,C,L], 2-D for rank 4 [N,C,H,W]."""
        nsp = len(x.shape) - 2 if isinstance(x, Value) and len(x.shape) in (3, 4) else 2
        return self._conv("Conv", nsp, x, w, bias, stride, padding, dilation, groups, name)

    def conv3d(self, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, name=None) -> Value:
        return self._conv("Conv3d", 3, x, w, bias, stride, padding, dilation, groups, name)

    def _conv(self, op, nsp, x, w, bias, stride, padding, dilation, groups, name):
        label = name or op
        s, d = as_tuple(stride, nsp, "stride", label), as_tuple(dilation, nsp, "dilation", label)
        check_positive(s, "stride", label)
        check_positive(d, "dilation", label)
        if isinstance(padding, str):
            padding = _string_padding(padding, s, d, getattr(w, "shape", None), nsp, label)
        attrs = ops.ConvAttrs(s, as_pads(padding, nsp, label), d, int(groups), bias is not None)
        return self._add(op, attrs, (x, w, bias), name, ("x", "weight", "bias"))

    def conv_transpose2d(self, x, w, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                         groups=1, name=None) -> Value:
        return self._conv_t("ConvTranspose2d", 2, x, w, bias, stride, padding, output_padding,
                            dilation, groups, name)

    def conv_transpose3d(self, x, w, bias=None, stride=1, padding=0, output_padding=0, dilation=1,
                         groups=1, name=None) -> Value:
        return self._conv_t("ConvTranspose3d", 3, x, w, bias, stride, padding, output_padding,
                            dilation, groups, name)

    def _conv_t(self, op, nsp, x, w, bias, stride, padding, output_padding, dilation, groups, name):
        label = name or op
        s, d = as_tuple(stride, nsp, "stride", label), as_tuple(dilation, nsp, "dilation", label)
        check_positive(s, "stride", label)
        check_positive(d, "dilation", label)
        attrs = ops.ConvTransposeAttrs(s, as_pads(padding, nsp, label),
                                       as_tuple(output_padding, nsp, "output_padding", label), d,
                                       int(groups), bias is not None)
        return self._add(op, attrs, (x, w, bias), name, ("x", "weight", "bias"))

    def pool(self, x, kind, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             count_include_pad=True, name=None) -> Value:
        """Max or average pooling over rank 3, 4 or 5 inputs; stride=None means kernel_size."""
        label = name or "Pool"
        nsp = len(x.shape) - 2 if isinstance(x, Value) else 2
        if nsp not in (1, 2, 3):
            raise ValueError(f"{label}: input must have rank 3, 4 or 5, got shape {fmt_shape(x.shape)}")
        k = as_tuple(kernel_size, nsp, "kernel_size", label)
        s = k if stride is None else as_tuple(stride, nsp, "stride", label)
        attrs = ops.PoolAttrs(kind, k, s, as_pads(padding, nsp, label),
                              as_tuple(dilation, nsp, "dilation", label), bool(ceil_mode),
                              bool(count_include_pad))
        return self._add("Pool", attrs, (x,), name)

    def max_pool2d_backward(self, x, dy, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, name=None) -> Value:
        label = name or "MaxPool2dBackward"
        k = as_tuple(kernel_size, 2, "kernel_size", label)
        s = k if stride is None else as_tuple(stride, 2, "stride", label)
        attrs = ops.MaxPoolBackwardAttrs(k, s, as_pads(padding, 2, label),
                                         as_tuple(dilation, 2, "dilation", label), bool(ceil_mode))
        return self._add("MaxPool2dBackward", attrs, (x, dy), name, ("x", "dy"))

    def conv2d_backward_input(self, dy, w, input_shape, stride=1, padding=0, dilation=1, groups=1,
                              name=None) -> Value:
        label = name or "Conv2dBackwardInput"
        shp = tuple(input_shape)
        if len(shp) != 4 or not all(isinstance(d, int) and d >= 1 for d in shp[1:]) or \
                not (shp[0] is None or isinstance(shp[0], int)):
            raise ValueError(f"{label}: input_shape must be (N or None, C, H, W) with positive ints, "
                             f"got {input_shape!r}")
        s, d = as_tuple(stride, 2, "stride", label), as_tuple(dilation, 2, "dilation", label)
        check_positive(s, "stride", label)
        check_positive(d, "dilation", label)
        attrs = ops.ConvBackwardInputAttrs(shp, s, as_pads(padding, 2, label), d, int(groups))
        return self._add("Conv2dBackwardInput", attrs, (dy, w), name, ("dy", "weight"))

    def conv2d_backward_weight(self, x, dy, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                               name=None) -> Value:
        label = name or "Conv2dBackwardWeight"
        k = as_tuple(kernel_size, 2, "kernel_size", label)
        check_positive(k, "kernel_size", label)
        s, d = as_tuple(stride, 2, "stride", label), as_tuple(dilation, 2, "dilation", label)
        check_positive(s, "stride", label)
        check_positive(d, "dilation", label)
        attrs = ops.ConvBackwardWeightAttrs(k, s, as_pads(padding, 2, label), d, int(groups))
        return self._add("Conv2dBackwardWeight", attrs, (x, dy), name, ("x", "dy"))

    def im2col(self, x, kernel_size, stride=1, padding=0, dilation=1, name=None) -> Value:
        """Rows layout [N*Ho*Wo, C*kh*kw]: unfold(x).transpose(1, 2).reshape(-1, C*kh*kw)."""
        label = name or "Im2Col"
        k = as_tuple(kernel_size, 2, "kernel_size", label)
        s, d = as_tuple(stride, 2, "stride", label), as_tuple(dilation, 2, "dilation", label)
        for what, t in (("kernel_size", k), ("stride", s), ("dilation", d)):
            check_positive(t, what, label)
        attrs = ops.Im2ColAttrs(k, s, as_pads(padding, 2, label), d)
        return self._add("Im2Col", attrs, (x,), name)

    def resize_nearest2x(self, x, name=None) -> Value:
        return self._add("ResizeNearest2x", ops.ResizeNearest2xAttrs(), (x,), name)
