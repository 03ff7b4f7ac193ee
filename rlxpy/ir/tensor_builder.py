"""Graph builder methods for the ops around the convolutions, with PyTorch's names and
semantics (mixed into Graph). Axes may be negative, as in PyTorch; they are normalized here."""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from . import tensor_ops as T
from .shape import fmt_shape


def _axis(axis: int, rank: int, node: str) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -rank <= axis < rank:
        raise ValueError(f"{node}: axis {axis!r} is out of range for rank {rank}")
    return int(axis) % rank


# what an activation's two scalars are called, for the error that names one
_SCALAR_NAMES = {"leaky_relu": ("negative_slope", "beta"), "clip": ("min", "max"), "hardsigmoid": ("alpha", "beta")}


def _as_float32(value, node: str, what: str) -> float:
    """A scalar rounded to float32, as PyTorch casts one to a float32 tensor's dtype: a
    leaky_relu slope of 1e-300 is 0 (so -inf * slope is NaN, as in PyTorch); one beyond
    float32's range is refused, as PyTorch refuses it."""
    v = float(value)
    with np.errstate(over="ignore"):
        r = np.float32(v)
    if np.isinf(r) and not np.isinf(v):
        raise ValueError(f"{node}: {what} {v!r} cannot be converted to float32 without overflow")
    return float(r)


class TensorOps:
    """Mixin: needs Graph._add and Graph.param."""

    # -- activations --------------------------------------------------------------------
    def _unary(self, fn, x, name, alpha=0.0, beta=0.0):
        name = self._name(name, fn)
        a_name, b_name = _SCALAR_NAMES.get(fn, ("alpha", "beta"))
        attrs = T.UnaryAttrs(fn, _as_float32(alpha, name, a_name), _as_float32(beta, name, b_name))
        return self._add("Unary", attrs, (x,), name)

    def relu(self, x, name=None):
        return self._unary("relu", x, name)

    def leaky_relu(self, x, negative_slope=0.01, name=None):
        return self._unary("leaky_relu", x, name, negative_slope)

    def clip(self, x, min=-np.inf, max=np.inf, name=None):   # noqa: A002 (PyTorch's names)
        """torch.clamp(x, min, max)."""
        return self._unary("clip", x, name, -np.inf if min is None else min, np.inf if max is None else max)

    def relu6(self, x, name=None):
        return self.clip(x, 0.0, 6.0, name)

    def sigmoid(self, x, name=None):
        return self._unary("sigmoid", x, name)

    def hardsigmoid(self, x, alpha=1.0 / 6.0, beta=0.5, name=None):
        """max(0, min(1, alpha*x + beta)): PyTorch's defaults (ONNX's are alpha 0.2)."""
        return self._unary("hardsigmoid", x, name, alpha, beta)

    def hardswish(self, x, name=None):
        return self._unary("hardswish", x, name)

    def silu(self, x, name=None):
        return self._unary("silu", x, name)

    def gelu(self, x, approximate="none", name=None):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"{name or 'gelu'}: approximate must be 'none' or 'tanh', got {approximate!r}")
        return self._unary("gelu" if approximate == "none" else "gelu_tanh", x, name)

    def tanh(self, x, name=None):
        return self._unary("tanh", x, name)

    def erf(self, x, name=None):
        """torch.erf (ONNX exports GELU before opset 20 as x * (1 + erf(x / sqrt 2)) / 2)."""
        return self._unary("erf", x, name)

    def identity(self, x, name=None):
        return self._unary("identity", x, name)

    # -- arithmetic (NumPy broadcasting) ---------------------------------------------------
    def _binary(self, fn, a, b, name):
        return self._add("Binary", T.BinaryAttrs(fn), (a, b), self._name(name, fn), ("a", "b"))

    def add(self, a, b, name=None):
        return self._binary("add", a, b, name)

    def sub(self, a, b, name=None):
        return self._binary("sub", a, b, name)

    def mul(self, a, b, name=None):
        return self._binary("mul", a, b, name)

    def div(self, a, b, name=None):
        return self._binary("div", a, b, name)

    # -- normalization, linear --------------------------------------------------------------
    def batch_norm(self, x, running_mean, running_var, weight=None, bias=None, eps=1e-5, name=None):
        """F.batch_norm(..., training=False): (x - mean) / sqrt(var + eps) * weight + bias over
        axis 1; weight / bias default to ones / zeros. Folded into a preceding conv at
        compile time where it can be (rlxpy.thunks.rewrite)."""
        label = name or "BatchNorm"
        c = x.shape[1] if len(x.shape) > 1 else None
        if not isinstance(c, int):
            raise ValueError(f"{label}: input {fmt_shape(x.shape)} needs a static channel axis 1")
        tag = name or f"batchnorm_{len(self.nodes)}"
        weight = self.param(f"{tag}.weight", np.ones(c, np.float32)) if weight is None else weight
        bias = self.param(f"{tag}.bias", np.zeros(c, np.float32)) if bias is None else bias
        return self._add("BatchNorm", T.BatchNormAttrs(float(eps)), (x, running_mean, running_var, weight, bias), name,
                         ("x", "running_mean", "running_var", "weight", "bias"))

    def linear(self, x, w, bias=None, name=None):
        """x @ w.T + bias, w [out_features, in_features]."""
        return self._add("Linear", T.LinearAttrs(bias is not None), (x, w, bias), name, ("x", "weight", "bias"))

    def matmul(self, a, b, name=None):
        """torch.matmul: batch dims broadcast; a 1-D operand is a row (a) or a column (b),
        dropped from the result."""
        if len(a.shape) == 1 or len(b.shape) == 1:
            a2 = self.reshape(a, (1, a.shape[0])) if len(a.shape) == 1 else a
            b2 = self.reshape(b, (b.shape[0], 1)) if len(b.shape) == 1 else b
            y = self._add("MatMul", T.MatMulAttrs(), (a2, b2), None, ("a", "b"))
            keep = tuple(y.shape[:-2]) + ((y.shape[-2],) if len(a.shape) > 1 else ()) + \
                ((y.shape[-1],) if len(b.shape) > 1 else ())
            if not all(isinstance(d, int) for d in keep):
                raise ValueError(f"{name or 'matmul'}: a 1-D operand with dynamic dims elsewhere")
            return self.reshape(y, keep, name)      # 1-D @ 1-D: a 0-d result, as torch.matmul gives
        return self._add("MatMul", T.MatMulAttrs(), (a, b), name, ("a", "b"))

    # -- shapes ------------------------------------------------------------------------------
    def reshape(self, x, shape: Sequence[int], name=None):
        return self._add("Reshape", T.ReshapeAttrs(tuple(int(d) for d in shape)), (x,), name)

    def flatten(self, x, start_dim=1, end_dim=-1, name=None):
        """torch.flatten: axes start_dim..end_dim into one (a dynamic batch stays in front)."""
        label = name or "flatten"
        r = len(x.shape)
        s, e = _axis(start_dim, r, label), _axis(end_dim, r, label)
        if e < s:
            raise ValueError(f"{label}: end_dim {end_dim} comes before start_dim {start_dim}")
        if any(not isinstance(d, int) for d in x.shape[s:e + 1]) or any(not isinstance(d, int) for d in x.shape[e + 1:]):
            raise ValueError(f"{label}: the flattened axes of {fmt_shape(x.shape)} (and those after) must be static")
        lead = x.shape[:s]
        n = int(np.prod(x.shape[s:e + 1]))
        dyn = [k for k, d in enumerate(lead) if not isinstance(d, int)]
        if len(dyn) > 1:
            raise ValueError(f"{label}: at most one dynamic axis before start_dim, got {fmt_shape(x.shape)}")
        shape = tuple(-1 if k in dyn else d for k, d in enumerate(lead)) + (n,) + tuple(x.shape[e + 1:])
        return self.reshape(x, shape, name)

    def transpose(self, x, perm: Sequence[int], name=None):
        """x.permute(*perm)."""
        r = len(x.shape)
        return self._add("Transpose", T.TransposeAttrs(tuple(_axis(p, r, name or "transpose") for p in perm)), (x,),
                         name)

    def concat(self, values: Sequence, axis=1, name=None):
        """torch.cat(values, dim=axis)."""
        values = list(values)
        if not values:
            raise ValueError(f"{name or 'concat'}: needs at least one input")
        ax = _axis(axis, len(values[0].shape), name or "concat")
        while len(values) > T.MAX_CONCAT:      # one record type per arity, up to MAX_CONCAT: nest the rest
            values = [self.concat(values[:T.MAX_CONCAT], ax)] + values[T.MAX_CONCAT:]
        return self._add("Concat", T.ConcatAttrs(ax), tuple(values), name, tuple(f"input {i}" for i in range(len(values))))

    def slice(self, x, starts, ends, axes=None, steps=None, name=None):
        """x[starts:ends:steps] along axes (Python slicing, clamped; ends may pass the size;
        a negative step walks backwards, as NumPy's and ONNX's slices do, and an end of None
        runs to the axis' end in the step's direction)."""
        r = len(x.shape)
        label = name or "slice"
        axes = list(range(len(starts))) if axes is None else [_axis(a, r, label) for a in axes]
        steps = [1] * len(axes) if steps is None else list(steps)
        if not (len(starts) == len(ends) == len(axes) == len(steps)):
            raise ValueError(f"{label}: starts, ends, axes and steps must have the same length")
        per = [(0, 2 ** 62, 1)] * r
        for a, s, e, st in zip(axes, starts, ends, steps):
            end = (2 ** 62 if st > 0 else -2 ** 62) if e is None else max(min(int(e), 2 ** 62), -2 ** 62)
            per[a] = (int(s), end, int(st))
        return self._add("Slice", T.SliceAttrs(tuple(per)), (x,), name)

    def split(self, x, split_size_or_sections, dim=0, name=None):
        """torch.split: chunks of one size (the last may be smaller), or the given sizes."""
        label = name or "split"
        ax = _axis(dim, len(x.shape), label)
        size = x.shape[ax]
        if not isinstance(size, int):
            raise ValueError(f"{label}: axis {dim} is dynamic: it cannot be split")
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            sizes = [min(step, size - s) for s in range(0, size, step)]
        else:
            sizes = list(split_size_or_sections)
        if sum(sizes) != size or any(s < 1 for s in sizes):
            raise ValueError(f"{label}: sections {sizes} do not add up to axis {dim}'s size {size}")
        out, at = [], 0
        for i, s in enumerate(sizes):
            out.append(self.slice(x, [at], [at + s], [ax], name=None if name is None else f"{name}.{i}"))
            at += s
        return out

    def pad(self, x, pad: Sequence[int], mode="constant", value=0.0, name=None):
        """F.pad: pad = (last axis begin, end, the one before: begin, end, ...); modes
        constant, reflect, replicate (= ONNX's edge). A negative pad crops, as F.pad's and
        ONNX's do: the positive pads first (so a reflection may read rows the crop then cuts,
        as in PyTorch), then a slice named `name`."""
        label = name or "pad"
        r = len(x.shape)
        if len(pad) % 2 or len(pad) // 2 > r:
            raise ValueError(f"{label}: pad {tuple(pad)} must hold (begin, end) pairs for at most {r} axes")
        per = [(0, 0)] * r
        for i in range(len(pad) // 2):
            per[r - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
        modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "edge": "edge"}
        if mode not in modes:
            raise ValueError(f"{label}: mode must be 'constant', 'reflect' or 'replicate', got {mode!r}")
        grow = tuple((max(b, 0), max(e, 0)) for b, e in per)
        attrs = T.PadAttrs(grow, modes[mode], float(value))
        crops = [(ax, -min(b, 0), -min(e, 0)) for ax, (b, e) in enumerate(per) if min(b, e) < 0]
        if not crops:
            return self._add("Pad", attrs, (x,), name)
        for ax, b, e in crops:      # refused before the pad is added: a failed call adds no node
            d = x.shape[ax]
            if isinstance(d, int) and d + grow[ax][0] + grow[ax][1] - b - e < 1:
                raise ValueError(f"{label}: pads {per[ax]} on axis {ax} (size {d}) leave nothing")
        if any(b or e for b, e in grow):
            x = self._add("Pad", attrs, (x,), None if name is None else f"{name}.pad")
        return self.slice(x, [b for _, b, _ in crops], [-e if e else None for _, _, e in crops],
                          [ax for ax, _, _ in crops], name=name)

    # -- reductions -----------------------------------------------------------------------------
    def mean(self, x, dim, keepdim=False, name=None):
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        axes = tuple(sorted(_axis(d, len(x.shape), name or "mean") for d in dims))
        return self._add("Reduce", T.ReduceAttrs("mean", axes, bool(keepdim)), (x,), name)

    def amax(self, x, dim, keepdim=False, name=None):
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        axes = tuple(sorted(_axis(d, len(x.shape), name or "amax") for d in dims))
        return self._add("Reduce", T.ReduceAttrs("max", axes, bool(keepdim)), (x,), name)

    def global_avg_pool(self, x, name=None):
        """Mean over every spatial axis, kept as 1s: [N, C, 1, 1] (ONNX GlobalAveragePool)."""
        return self.mean(x, tuple(range(2, len(x.shape))), keepdim=True, name=name)

    def global_max_pool(self, x, name=None):
        return self.amax(x, tuple(range(2, len(x.shape))), keepdim=True, name=name)

    def softmax(self, x, dim=-1, name=None):
        return self._add("Softmax", T.SoftmaxAttrs(_axis(dim, len(x.shape), name or "softmax"), False), (x,), name)

    def log_softmax(self, x, dim=-1, name=None):
        return self._add("Softmax", T.SoftmaxAttrs(_axis(dim, len(x.shape), name or "log_softmax"), True), (x,),
                         name)
