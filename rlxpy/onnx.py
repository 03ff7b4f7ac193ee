"""ONNX import: `rlxpy.onnx.load(path or onnx.ModelProto) -> rlxpy.Graph`.

Needs the `onnx` package (`pip install "rlxpy[onnx]"`); `import rlxpy` does not import it.
Opsets 11 to 21 of the default domain (22 to 25 too: they changed only types). Initializers become params (float32), symbolic dims
dynamic dims; every node whose inputs are all constants (initializers, Constant nodes,
the shapes of values whose shape is known) is computed at import with numpy, which folds
the Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains exporters write for
`x.view(x.size(0), -1)` and `F.pad`. A shape with dynamic dims folds to an array of
ints and names, so those chains also work with a dynamic batch. A model with ops this
importer does not know is refused before anything is built, with one error listing
every such node (name, op type, opset).
"""
from __future__ import annotations

import os
from typing import Callable, Dict, List, Optional

import numpy as np

from .ir.graph import Graph, Value

# 11 to 21 as asked; 22 to 25 changed only the types the ops imported here take (bfloat16,
# 4- and 2-bit types), and ONNX's own node tests are written at the newest opset
MIN_OPSET, MAX_OPSET = 11, 25

# op type -> builder(importer, node) for ops that become graph nodes; FOLD: ops computed
# at import when all their inputs are constants
BUILD: Dict[str, Callable] = {}
FOLD: Dict[str, Callable] = {}


def _builds(*ops):
    def deco(fn):
        for op in ops:
            BUILD[op] = fn
        return fn
    return deco


def _folds(*ops):
    def deco(fn):
        for op in ops:
            FOLD[op] = fn
        return fn
    return deco


class OnnxImportError(ValueError):
    pass


def load(model, name: Optional[str] = None) -> Graph:
    """An ONNX model (a path, an onnx.ModelProto, or the model's serialized bytes, as
    onnxruntime.InferenceSession takes them) as an rlxpy Graph."""
    import onnx
    if isinstance(model, (str, os.PathLike)):
        model = onnx.load(os.fspath(model))
    elif isinstance(model, (bytes, bytearray, memoryview)):
        model = _from_bytes(bytes(model))
    if not isinstance(model, onnx.ModelProto):
        raise TypeError(f"rlxpy.onnx.load takes a path, an onnx.ModelProto or the model's bytes, "
                        f"got {type(model).__name__}")
    return _Importer(model).run()


def _from_bytes(data: bytes):
    """A serialized ModelProto parsed; bytes that are not one (protobuf parses many byte
    strings as an empty or partial message) are refused here, not as a missing opset later."""
    import onnx
    from google.protobuf.message import DecodeError
    try:
        model = onnx.load_from_string(data)
    except DecodeError as e:
        raise OnnxImportError(f"rlxpy.onnx.load: {len(data)} bytes that are not a serialized ONNX model ({e})") \
            from None
    if not model.HasField("graph") or not model.opset_import:
        raise OnnxImportError(f"rlxpy.onnx.load: {len(data)} bytes that are not a serialized ONNX model "
                              f"(no graph or no opset import)")
    return model


def _attrs(node) -> dict:
    """A node's attributes; string attributes as str (onnx gives bytes)."""
    import onnx
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


class _Importer:
    def __init__(self, model):
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        self.g = Graph()
        self.const: Dict[str, np.ndarray] = {}       # name -> numpy (params, folded values, shapes)
        self.vals: Dict[str, Value] = {}             # name -> graph value
        self.params: Dict[str, Value] = {}           # constant name -> its param (made on first use)

    # -- the walk -----------------------------------------------------------------------------
    def run(self) -> Graph:
        from onnx import numpy_helper
        graph = self.model.graph
        if self.opset is None or not MIN_OPSET <= self.opset <= MAX_OPSET:
            raise OnnxImportError(f"opset {self.opset} of the default domain: rlxpy imports opsets "
                                  f"{MIN_OPSET} to {MAX_OPSET}")
        self._refuse_unknown(graph)
        for init in graph.initializer:
            self.const[init.name] = numpy_helper.to_array(init)
        for vi in graph.input:
            if vi.name in self.const:
                continue
            t = vi.type.tensor_type
            if t.elem_type != 1:
                raise OnnxImportError(f"input {vi.name!r}: element type {t.elem_type}; rlxpy runs float32 (1) only")
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else
                    (d.dim_param or None) for d in t.shape.dim]
            self.vals[vi.name] = self.g.input(vi.name, dims)
        for node in graph.node:
            self._node(node)
        for vi in graph.output:
            self.g.output(vi.name, self.value(vi.name, f"output {vi.name}"))
        return self.g

    def _refuse_unknown(self, graph) -> None:
        bad = [f"{n.name or '(unnamed)'} ({n.op_type}, opset {self.opset})" for n in graph.node
               if n.domain not in ("", "ai.onnx") or (n.op_type not in BUILD and n.op_type not in FOLD)]
        if bad:
            raise OnnxImportError(f"the model has {len(bad)} node(s) rlxpy cannot import: " + "; ".join(bad))

    def _node(self, node) -> None:
        ins = [i for i in node.input]
        attrs = _attrs(node)
        all_const = all(i == "" or i in self.const for i in ins)
        if node.op_type in FOLD and (all_const or node.op_type in ("Shape", "Constant")):
            out = FOLD[node.op_type](self, node, attrs)
            if out is not None:
                outs = out if isinstance(out, list) else [out]
                for name, v in zip(node.output, outs):
                    self.const[name] = v
                return
        if node.op_type not in BUILD:
            raise OnnxImportError(f"{node.name} ({node.op_type}): its inputs must be constants for rlxpy to "
                                  f"import it (computed at import), got {ins}")
        out = BUILD[node.op_type](self, node, attrs)
        outs = out if isinstance(out, list) else [out]
        for name, v in zip(node.output, outs):
            if name:
                self.vals[name] = v

    # -- operands -----------------------------------------------------------------------------
    def name_of(self, node) -> str:
        return node.name or f"{node.op_type}_{node.output[0]}"

    def value(self, name: str, what: str) -> Value:
        """A graph value: an activation, or a constant as a float32 param (made once)."""
        if name in self.vals:
            return self.vals[name]
        if name in self.const:
            if name not in self.params:
                arr = np.asarray(self.const[name])
                if arr.dtype == object:
                    raise OnnxImportError(f"{what}: {name!r} holds a shape with dynamic dims, not a tensor")
                arr = np.ascontiguousarray(arr.astype(np.float32))
                self.params[name] = self.g.param(f"onnx:{name}", arr.reshape(arr.shape or (1,)))
            return self.params[name]
        raise OnnxImportError(f"{what}: no value named {name!r}")

    def constant(self, node, i: int, what: str, default=None):
        """Input i as a numpy array computed at import (an initializer or folded), or default
        where the input is absent."""
        if i >= len(node.input) or node.input[i] == "":
            return default
        name = node.input[i]
        if name not in self.const:
            raise OnnxImportError(f"{self.name_of(node)} ({node.op_type}): {what} ({name!r}) must be a constant "
                                  f"(an initializer, or computable at import)")
        return self.const[name]

    def shape(self, name: str):
        if name in self.vals:
            return tuple(self.vals[name].shape)
        return tuple(np.asarray(self.const[name]).shape)


# --- folding (numpy) -----------------------------------------------------------------------------
def _ints(a) -> List[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


@_folds("Constant")
def _constant(imp, node, a):
    from onnx import numpy_helper
    if "value" in a:
        return numpy_helper.to_array(a["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in a:
            return np.array(a[key], dtype)
    raise OnnxImportError(f"{imp.name_of(node)} (Constant): only tensor, float(s) and int(s) values are imported")


@_folds("Shape")
def _shape(imp, node, a):
    dims = list(imp.shape(node.input[0]))
    start, end = a.get("start", 0), a.get("end", len(dims))
    dims = dims[start:end] if end is not None else dims[start:]
    if all(isinstance(d, (int, np.integer)) for d in dims):
        return np.array(dims, np.int64)
    return np.array(dims, object)          # names of dynamic dims ride along


@_folds("Identity")
def _fold_identity(imp, node, a):
    return imp.const[node.input[0]]


@_folds("Cast")
def _cast(imp, node, a):
    from onnx import helper
    x = np.asarray(imp.const[node.input[0]])
    if x.dtype == object:
        return x                            # a shape with names: stays one
    return x.astype(helper.tensor_dtype_to_np_dtype(a["to"]))


@_folds("ConstantOfShape")
def _constant_of_shape(imp, node, a):
    from onnx import numpy_helper
    value = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    return np.full(_ints(imp.const[node.input[0]]), value.reshape(-1)[0], value.dtype)


@_folds("Gather")
def _gather(imp, node, a):
    return np.take(np.asarray(imp.const[node.input[0]]), np.asarray(imp.const[node.input[1]]), axis=a.get("axis", 0))


def _axes_arg(imp, node, a, i=1):
    if "axes" in a:
        return list(a["axes"])
    ax = imp.constant(node, i, "axes")
    return None if ax is None else _ints(ax)


@_folds("Unsqueeze")
def _unsqueeze(imp, node, a):
    x = np.asarray(imp.const[node.input[0]])
    out_rank = x.ndim + len(_axes_arg(imp, node, a))
    for ax in sorted(d % out_rank for d in _axes_arg(imp, node, a)):
        x = np.expand_dims(x, ax)
    return x


@_folds("Squeeze")
def _squeeze(imp, node, a):
    x = np.asarray(imp.const[node.input[0]])
    axes = _axes_arg(imp, node, a)
    return np.squeeze(x) if axes is None else np.squeeze(x, tuple(d % x.ndim for d in axes))


@_folds("Concat")
def _fold_concat(imp, node, a):
    parts = [np.asarray(imp.const[i]) for i in node.input]
    dtype = object if any(p.dtype == object for p in parts) else None
    return np.concatenate([p.astype(dtype) if dtype else p for p in parts], axis=a["axis"])


@_folds("Slice")
def _fold_slice(imp, node, a):
    x = np.asarray(imp.const[node.input[0]])
    return x[_slices(imp, node, x.shape)]


@_folds("Reshape")
def _fold_reshape(imp, node, a):
    x = np.asarray(imp.const[node.input[0]])
    return x.reshape(_reshape_target(imp, node, a, x.shape))


@_folds("Transpose")
def _fold_transpose(imp, node, a):
    return np.transpose(np.asarray(imp.const[node.input[0]]), a.get("perm"))


@_folds("Add", "Sub", "Mul", "Div")
def _fold_arith(imp, node, a):
    x, y = np.asarray(imp.const[node.input[0]]), np.asarray(imp.const[node.input[1]])
    if x.dtype == object or y.dtype == object:
        return None                           # arithmetic on dynamic dims: not foldable
    fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[node.op_type]
    out = fn(x, y)
    return (x // y).astype(x.dtype) if node.op_type == "Div" and np.issubdtype(x.dtype, np.integer) else out


# --- helpers shared by builders and folds ---------------------------------------------------------
def _slices(imp, node, shape):
    if imp.opset < 10:
        raise OnnxImportError("Slice before opset 10")
    starts, ends = _ints(imp.constant(node, 1, "starts")), _ints(imp.constant(node, 2, "ends"))
    axes = _ints(imp.constant(node, 3, "axes", np.arange(len(starts))))
    steps = _ints(imp.constant(node, 4, "steps", np.ones(len(starts), np.int64)))
    per = [slice(None)] * len(shape)
    for ax, s, e, st in zip(axes, starts, ends, steps):
        per[ax % len(shape)] = slice(s, e, st)
    return tuple(per)


def _reshape_target(imp, node, a, in_shape) -> List[int]:
    """ONNX Reshape: 0 copies the input's dim (unless allowzero), -1 is inferred; a dynamic
    dim name (from a folded Shape) is its input dim where it matches, else inferred."""
    target = list(np.asarray(imp.constant(node, 1, "shape")).reshape(-1))
    if a.get("allowzero", 0) and 0 in target:
        raise OnnxImportError(f"{imp.name_of(node)} (Reshape): allowzero=1 with a 0 dim (an empty tensor)")
    out = []
    for k, d in enumerate(target):
        if isinstance(d, str):
            out.append(0 if k < len(in_shape) and in_shape[k] == d else -1)
        else:
            out.append(int(d))
    return [in_shape[k] if d == 0 else d for k, d in enumerate(out)]


def _spatial_pads(imp, node, a, x_shape, kernel, strides, dilations):
    """ONNX pads [b1, b2, ..., e1, e2, ...] or auto_pad, as ((b, e), ...)."""
    n = len(kernel)
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(a.get("pads", [0] * (2 * n)))
        return tuple((pads[i], pads[i + n]) for i in range(n))
    if auto == "VALID":
        return ((0, 0),) * n
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise OnnxImportError(f"{imp.name_of(node)}: auto_pad {auto!r}")
    out = []
    for i in range(n):
        size = x_shape[2 + i]
        if not isinstance(size, int):
            raise OnnxImportError(f"{imp.name_of(node)}: auto_pad {auto} needs a static spatial size, got {size}")
        total = max(0, (-(-size // strides[i]) - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size)
        small = total // 2
        out.append((small, total - small) if auto == "SAME_UPPER" else (total - small, small))
    return tuple(out)


def _window(imp, node, a, x_shape, kernel):
    n = len(kernel)
    strides = list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    return strides, dilations, _spatial_pads(imp, node, a, x_shape, kernel, strides, dilations)


# --- builders ------------------------------------------------------------------------------------
@_builds("Conv")
def _conv(imp, node, a):
    x = imp.value(node.input[0], "Conv input")
    w = imp.value(node.input[1], "Conv weight")
    b = imp.value(node.input[2], "Conv bias") if len(node.input) > 2 and node.input[2] else None
    kernel = list(a.get("kernel_shape", w.shape[2:]))
    strides, dilations, pads = _window(imp, node, a, x.shape, kernel)
    build = imp.g.conv3d if len(kernel) == 3 else imp.g.conv
    return build(x, w, bias=b, stride=tuple(strides), padding=pads, dilation=tuple(dilations),
                 groups=a.get("group", 1), name=imp.name_of(node))


@_builds("ConvTranspose")
def _conv_transpose(imp, node, a):
    x = imp.value(node.input[0], "ConvTranspose input")
    w = imp.value(node.input[1], "ConvTranspose weight")
    b = imp.value(node.input[2], "ConvTranspose bias") if len(node.input) > 2 and node.input[2] else None
    n = len(w.shape) - 2
    kernel = list(a.get("kernel_shape", w.shape[2:]))
    strides = list(a.get("strides", [1] * n))
    dilations = list(a.get("dilations", [1] * n))
    out_pad = list(a.get("output_padding", [0] * n))
    auto = a.get("auto_pad", "NOTSET")
    label = imp.name_of(node)
    grow = [(0, 0)] * n        # output rows beyond the conv's own, before and after (negative pads)
    if "output_shape" in a or auto in ("SAME_UPPER", "SAME_LOWER"):
        # the spec: total_padding = stride*(in-1) + output_padding + (k-1)*d + 1 - output_shape
        if any(not isinstance(d, int) for d in x.shape[2:]):
            raise OnnxImportError(f"{label}: output_shape / auto_pad need static spatial sizes, got {x.shape}")
        want = list(a["output_shape"])[-n:] if "output_shape" in a else [x.shape[2 + i] * strides[i] for i in range(n)]
        pads = []
        for i in range(n):
            total = strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - want[i]
            half = total // 2     # floor, as the ONNX reference splits a negative total too
            begin, end = (half, total - half) if auto == "SAME_UPPER" else (total - half, half)
            if total < 0 and auto not in ("SAME_UPPER", "SAME_LOWER"):
                begin, end = 0, total     # output_shape alone: the extra rows at the end (the reference, onnxruntime)
            # a negative pad (an output larger than the natural one) adds rows that only the bias
            # reaches, on the side the split gives: zeros padded after the conv, then the bias
            grow[i] = (max(0, -begin), max(0, -end))
            pads.append((max(0, begin), max(0, end)))
    elif auto == "VALID":
        pads = [(0, 0)] * n
    else:
        p = list(a.get("pads", [0] * (2 * n)))
        pads = [(p[i], p[i + n]) for i in range(n)]
    grows = any(g for pair in grow for g in pair)
    bias, name = (None, None) if grows else (b, label)
    if n == 1:          # as a 2-D one with H = 1 (the same bytes)
        if not all(isinstance(d, int) for d in x.shape[1:]):
            raise OnnxImportError(f"{label}: a 1-D ConvTranspose needs static channel and length dims")
        y = imp.g.conv_transpose2d(imp.g.reshape(x, (-1, x.shape[1], 1, x.shape[2])),
                                   imp.g.reshape(w, tuple(w.shape[:2]) + (1, w.shape[2])), bias=bias,
                                   stride=(1, strides[0]), padding=((0, 0), pads[0]), output_padding=(0, out_pad[0]),
                                   dilation=(1, dilations[0]), groups=a.get("group", 1))
        y = imp.g.reshape(y, (-1, y.shape[1], y.shape[3]), name=name)
    else:
        build = imp.g.conv_transpose3d if n == 3 else imp.g.conv_transpose2d
        y = build(x, w, bias=bias, stride=tuple(strides), padding=tuple(pads), output_padding=tuple(out_pad),
                  dilation=tuple(dilations), groups=a.get("group", 1), name=name)
    if not grows:
        return y
    y = imp.g.pad(y, [p for pair in reversed(grow) for p in pair], name=label if b is None else f"{label}.grow")
    if b is None:
        return y
    return imp.g.add(y, imp.g.reshape(b, (y.shape[1],) + (1,) * n), name=label)


@_builds("MaxPool", "AveragePool")
def _pool(imp, node, a):
    label = imp.name_of(node)
    if len([o for o in node.output if o]) > 1:
        raise OnnxImportError(f"{label} (MaxPool): the Indices output is not supported")
    if a.get("storage_order", 0):
        raise OnnxImportError(f"{label} (MaxPool): storage_order=1 is not supported")
    x = imp.value(node.input[0], "pool input")
    kernel = list(a["kernel_shape"])
    strides, dilations, pads = _window(imp, node, a, x.shape, kernel)
    kind = "max" if node.op_type == "MaxPool" else "avg"
    return imp.g.pool(x, kind, tuple(kernel), stride=tuple(strides), padding=pads, dilation=tuple(dilations),
                      ceil_mode=bool(a.get("ceil_mode", 0)), count_include_pad=bool(a.get("count_include_pad", 0)),
                      name=label)


@_builds("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp, node, a):
    x = imp.value(node.input[0], "pool input")
    fn = imp.g.global_avg_pool if node.op_type == "GlobalAveragePool" else imp.g.global_max_pool
    return fn(x, name=imp.name_of(node))


@_builds("Resize", "Upsample")
def _resize(imp, node, a):
    label = imp.name_of(node)
    x = imp.value(node.input[0], "Resize input")
    mode = a.get("mode", "nearest")
    if mode != "nearest":
        raise OnnxImportError(f"{label} ({node.op_type}): mode {mode!r}; rlxpy imports nearest only")
    if node.op_type == "Upsample":
        scales = imp.constant(node, 1, "scales")
    else:
        scales = imp.constant(node, 2, "scales")
        sizes = imp.constant(node, 3, "sizes")
        if (scales is None or np.asarray(scales).size == 0) and sizes is not None:
            scales = [s / d if isinstance(d, int) else None for s, d in zip(_ints(sizes), x.shape)]
        ctm = a.get("coordinate_transformation_mode", "half_pixel")
        nm = a.get("nearest_mode", "round_prefer_floor")
        ok = {"asymmetric": ("floor", "round_prefer_floor"),
              "half_pixel": ("floor", "round_prefer_floor", "round_prefer_ceil"),
              "pytorch_half_pixel": ("floor", "round_prefer_floor", "round_prefer_ceil")}
        if nm not in ok.get(ctm, ()):
            raise OnnxImportError(f"{label} (Resize): coordinate_transformation_mode {ctm!r} with nearest_mode {nm!r} "
                                  f"does not pick input pixel i // 2; rlxpy imports a 2x nearest upsample only")
    scales = [None if s is None else float(s) for s in np.asarray(scales, object).reshape(-1)]
    if len(x.shape) != 4 or scales != [1.0, 1.0, 2.0, 2.0]:
        raise OnnxImportError(f"{label} ({node.op_type}): scales {scales} on {list(x.shape)}; rlxpy imports "
                              f"nearest upsampling of a 4-D input by 2 on H and W only")
    return imp.g.resize_nearest2x(x, name=label)


@_builds("BatchNormalization")
def _batch_norm(imp, node, a):
    if a.get("training_mode", 0):
        raise OnnxImportError(f"{imp.name_of(node)} (BatchNormalization): training_mode=1 is not supported")
    x, scale, bias, mean, var = [imp.value(i, "BatchNormalization input") for i in node.input[:5]]
    return imp.g.batch_norm(x, mean, var, scale, bias, eps=a.get("epsilon", 1e-5), name=imp.name_of(node))


_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "HardSwish": "hardswish", "Tanh": "tanh", "Erf": "erf"}


@_builds(*_UNARY)
def _unary(imp, node, a):
    return getattr(imp.g, _UNARY[node.op_type])(imp.value(node.input[0], node.op_type), name=imp.name_of(node))


@_builds("LeakyRelu")
def _leaky(imp, node, a):
    return imp.g.leaky_relu(imp.value(node.input[0], "LeakyRelu"), a.get("alpha", 0.01), name=imp.name_of(node))


@_builds("HardSigmoid")
def _hardsigmoid(imp, node, a):
    return imp.g.hardsigmoid(imp.value(node.input[0], "HardSigmoid"), a.get("alpha", 0.2), a.get("beta", 0.5),
                             name=imp.name_of(node))


@_builds("Gelu")
def _gelu(imp, node, a):
    approx = a.get("approximate", "none")
    return imp.g.gelu(imp.value(node.input[0], "Gelu"), approximate=approx, name=imp.name_of(node))


@_builds("Clip")
def _clip(imp, node, a):
    lo, hi = a.get("min", -np.inf), a.get("max", np.inf)
    if imp.opset >= 11:
        lo = imp.constant(node, 1, "min", lo)
        hi = imp.constant(node, 2, "max", hi)
    return imp.g.clip(imp.value(node.input[0], "Clip"), float(np.asarray(lo).reshape(-1)[0]),
                      float(np.asarray(hi).reshape(-1)[0]), name=imp.name_of(node))


@_builds("Add", "Sub", "Mul", "Div")
def _arith(imp, node, a):
    fn = getattr(imp.g, node.op_type.lower())
    return fn(imp.value(node.input[0], node.op_type), imp.value(node.input[1], node.op_type), name=imp.name_of(node))


@_builds("Identity", "Dropout")
def _identity(imp, node, a):
    if node.op_type == "Dropout" and len([o for o in node.output if o]) > 1:
        raise OnnxImportError(f"{imp.name_of(node)} (Dropout): the mask output is not supported (inference only)")
    x = imp.value(node.input[0], node.op_type)
    return [x]


@_builds("Gemm")
def _gemm(imp, node, a):
    """alpha * A' @ B' + beta * C (A', B' transposed by transA, transB); a constant B makes a
    linear layer (alpha folded into its weight, beta into its bias)."""
    label = imp.name_of(node)
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    x = imp.value(node.input[0], "Gemm A")
    if a.get("transA", 0):
        x = imp.g.transpose(x, (1, 0))
    has_c = len(node.input) > 2 and node.input[2] != ""
    bname = node.input[1]
    if bname in imp.const:
        w = np.asarray(imp.const[bname], np.float32)
        w = (w if a.get("transB", 0) else w.T) * np.float32(alpha)
        wv = imp.g.param(f"onnx:{label}:weight", np.ascontiguousarray(w))
        c = imp.const.get(node.input[2]) if has_c else None
        if c is not None and np.asarray(c).size in (1, w.shape[0]) and np.asarray(c).ndim <= 1:
            bias = np.broadcast_to(np.asarray(c, np.float32).reshape(-1) * np.float32(beta), (w.shape[0],)).copy()
            return imp.g.linear(x, wv, imp.g.param(f"onnx:{label}:bias", bias), name=label)
        y = imp.g.linear(x, wv, name=None if has_c else label)
    else:
        bv = imp.value(bname, "Gemm B")
        y = imp.g.matmul(x, imp.g.transpose(bv, (1, 0)) if a.get("transB", 0) else bv)
        if alpha != 1.0:
            y = imp.g.mul(y, imp.g.param(f"onnx:{label}:alpha", np.array([alpha], np.float32)))
        if not has_c:
            return imp.g.identity(y, name=label)
    c = imp.value(node.input[2], "Gemm C")
    if beta != 1.0:
        c = imp.g.mul(c, imp.g.param(f"onnx:{label}:beta", np.array([beta], np.float32)))
    return imp.g.add(y, c, name=label)


@_builds("MatMul")
def _matmul(imp, node, a):
    x, y = imp.value(node.input[0], "MatMul A"), imp.value(node.input[1], "MatMul B")
    if len(y.shape) == 2 and node.input[1] in imp.const:        # x @ W: a linear layer with W.T
        w = np.ascontiguousarray(np.asarray(imp.const[node.input[1]], np.float32).T)
        return imp.g.linear(x, imp.g.param(f"onnx:{node.input[1]}:linear", w), name=imp.name_of(node))
    return imp.g.matmul(x, y, name=imp.name_of(node))


@_builds("Flatten")
def _flatten(imp, node, a):
    """[prod(dims[:axis]), prod(dims[axis:])]; the dims from axis on must be static."""
    x = imp.value(node.input[0], "Flatten")
    axis = a.get("axis", 1)
    axis = axis % len(x.shape) if axis < 0 else axis
    if axis == 0:
        return imp.g.reshape(x, (1, -1), name=imp.name_of(node))
    rest = x.shape[axis:]
    if not all(isinstance(d, int) for d in rest):
        raise OnnxImportError(f"{imp.name_of(node)} (Flatten): dims {list(rest)} after axis {axis} must be static")
    return imp.g.reshape(x, (-1, int(np.prod(rest))), name=imp.name_of(node))


@_builds("Reshape")
def _reshape(imp, node, a):
    x = imp.value(node.input[0], "Reshape")
    target = _reshape_target(imp, node, a, x.shape)
    dyn = [k for k, d in enumerate(target) if not isinstance(d, (int, np.integer))]
    target = [-1 if k in dyn else int(d) for k, d in enumerate(target)]
    if target.count(-1) > 1:
        raise OnnxImportError(f"{imp.name_of(node)} (Reshape): target {target} has more than one unknown dim")
    return imp.g.reshape(x, tuple(target), name=imp.name_of(node))


@_builds("Transpose")
def _transpose(imp, node, a):
    x = imp.value(node.input[0], "Transpose")
    return imp.g.transpose(x, tuple(a.get("perm", range(len(x.shape) - 1, -1, -1))), name=imp.name_of(node))


@_builds("Concat")
def _concat(imp, node, a):
    return imp.g.concat([imp.value(i, "Concat input") for i in node.input], a["axis"], name=imp.name_of(node))


@_builds("Split")
def _split(imp, node, a):
    x = imp.value(node.input[0], "Split")
    axis = a.get("axis", 0) % len(x.shape)
    n = len(node.output)
    sizes = a.get("split")
    if sizes is None and imp.opset >= 13:
        sizes = imp.constant(node, 1, "split")
    if sizes is None:
        size = x.shape[axis]
        step = -(-size // n)
        sizes = [min(step, size - k * step) for k in range(n)]
    outs = imp.g.split(x, _ints(sizes), axis)
    return outs


@_builds("Slice")
def _slice(imp, node, a):
    x = imp.value(node.input[0], "Slice")
    per = _slices(imp, node, x.shape)
    axes = [k for k, s in enumerate(per) if s != slice(None)]
    starts = [per[k].start for k in axes]
    ends = [per[k].stop for k in axes]
    steps = [per[k].step for k in axes]
    # ONNX clamps starts and ends as Python's slices do (a backward slice's end to -1: through
    # index 0); the builder bounds INT64_MIN / INT64_MAX ends
    return imp.g.slice(x, starts, ends, axes, steps, name=imp.name_of(node))


@_builds("Pad")
def _pad(imp, node, a):
    x = imp.value(node.input[0], "Pad")
    mode = a.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise OnnxImportError(f"{imp.name_of(node)} (Pad): mode {mode!r}; rlxpy imports constant, reflect, edge")
    r = len(x.shape)
    pads = _ints(imp.constant(node, 1, "pads"))
    value = imp.constant(node, 2, "constant_value", np.zeros(1))
    axes = _ints(imp.constant(node, 3, "axes", np.arange(r)))
    per = [(0, 0)] * r
    for k, ax in enumerate(axes):
        per[ax % r] = (pads[k], pads[k + len(axes)])
    torch_pad = []
    for b, e in reversed(per):
        torch_pad += [b, e]
    return imp.g.pad(x, torch_pad, mode="replicate" if mode == "edge" else mode,
                     value=float(np.asarray(value).reshape(-1)[0]) if np.asarray(value).size else 0.0,
                     name=imp.name_of(node))


@_builds("Softmax", "LogSoftmax")
def _softmax(imp, node, a):
    x = imp.value(node.input[0], node.op_type)
    axis = a.get("axis", -1 if imp.opset >= 13 else 1) % len(x.shape)
    if imp.opset < 13 and axis != len(x.shape) - 1:
        raise OnnxImportError(f"{imp.name_of(node)} ({node.op_type}): before opset 13 the axis flattens the "
                              f"trailing dims; only the last axis is imported")
    fn = imp.g.softmax if node.op_type == "Softmax" else imp.g.log_softmax
    return fn(x, axis, name=imp.name_of(node))


@_builds("ReduceMean")
def _reduce_mean(imp, node, a):
    x = imp.value(node.input[0], "ReduceMean")
    axes = a.get("axes")
    if axes is None and imp.opset >= 18:
        axes = imp.constant(node, 1, "axes")
    if axes is None or len(_ints(axes)) == 0:
        if a.get("noop_with_empty_axes", 0):
            return imp.g.identity(x, name=imp.name_of(node))
        axes = range(len(x.shape))
    return imp.g.mean(x, tuple(_ints(axes)), keepdim=bool(a.get("keepdims", 1)), name=imp.name_of(node))
