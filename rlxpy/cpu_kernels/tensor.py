"""CPU kernels of the ops around the convolutions: activations, arithmetic, batch norm,
linear / matmul, data movement, reductions, softmax.

Reference kernels (algo `naive`, the oracle) compute in float64 straight from the op's
definition. Fast kernels: `elementwise` (numba, parallel over blocks of the flat buffer;
also on the channel-blocked layout, where the lanes past C are written as zeros so the
blocked layout's invariant holds after an op with f(0) != 0, such as sigmoid), `blas`
(numpy's matmul), `numpy` (reductions and softmax in float32 with numpy). Data movement
(reshape, transpose, slice, pad, concat) has one kernel, numpy copies into the arena,
registered as `naive`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .jit import inlined, parallel_kernel

# activation -> code for the numba kernel
UNARY_CODE = {"identity": 0, "relu": 1, "leaky_relu": 2, "clip": 3, "sigmoid": 4, "hardsigmoid": 5, "hardswish": 6,
              "silu": 7, "gelu": 8, "gelu_tanh": 9, "tanh": 10, "erf": 11}
BINARY_CODE = {"add": 0, "sub": 1, "mul": 2, "div": 3}
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


# --- the oracle ------------------------------------------------------------------------------
def unary_reference(fn: str, x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """PyTorch's definitions, in float64 (a NaN stays NaN)."""
    from scipy.special import erf
    v = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if fn == "identity":
            return v
        if fn == "relu":
            return np.where(v < 0, 0.0, v)
        if fn == "leaky_relu":
            return np.where(v < 0, v * alpha, v)
        if fn == "clip":
            t = np.where(v < alpha, alpha, v)
            return np.where(t > beta, beta, t)
        if fn == "sigmoid":
            return 1.0 / (1.0 + np.exp(-v))
        if fn == "hardsigmoid":
            t = alpha * v + beta
            return np.where(t < 0, 0.0, np.where(t > 1, 1.0, t))
        if fn == "hardswish":
            t = v + 3.0
            return v * np.where(t < 0, 0.0, np.where(t > 6, 6.0, t)) / 6.0
        if fn == "silu":
            return v / (1.0 + np.exp(-v))
        if fn == "gelu":
            return 0.5 * v * (1.0 + erf(v / math.sqrt(2.0)))
        if fn == "gelu_tanh":
            return 0.5 * v * (1.0 + np.tanh(_SQRT_2_OVER_PI * (v + 0.044715 * v ** 3)))
        if fn == "tanh":
            return np.tanh(v)
        if fn == "erf":
            return erf(v)
    raise ValueError(f"unknown activation {fn!r}")


def binary_reference(fn: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[fn](a, b)


def batch_norm_affine(mean, var, w, b, eps: float):
    """(scale, shift) per channel, in float64: y = x * scale + shift."""
    scale = w.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    return scale, b.astype(np.float64) - mean.astype(np.float64) * scale


def batch_norm_reference(x, mean, var, w, b, eps: float) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    xd = x.astype(np.float64)
    return (xd - mean.astype(np.float64).reshape(shape)) / np.sqrt(var.astype(np.float64).reshape(shape) + eps) \
        * w.astype(np.float64).reshape(shape) + b.astype(np.float64).reshape(shape)


def softmax_reference(x, axis: int, log: bool) -> np.ndarray:
    v = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = v.max(axis=axis, keepdims=True)
        s = np.exp(v - m).sum(axis=axis, keepdims=True)
        return v - m - np.log(s) if log else np.exp(v - m) / s


# --- fast: numba, elementwise ------------------------------------------------------------------
@inlined
def _act(v, code, alpha, beta):
    """One activation in float32 (the code is the same for every element: LLVM unswitches it)."""
    if code == 1:
        return np.float32(0.0) if v < 0 else v
    if code == 2:
        return v * alpha if v < 0 else v
    if code == 3:                  # min(max(v, lo), hi): hi everywhere when lo > hi, as torch.clamp
        t = alpha if v < alpha else v
        return beta if t > beta else t
    if code == 4:
        return np.float32(1.0) / (np.float32(1.0) + np.exp(-v))
    if code == 5:
        t = alpha * v + beta
        return np.float32(0.0) if t < 0 else (np.float32(1.0) if t > 1 else t)
    if code == 6:
        t = v + np.float32(3.0)
        t = np.float32(0.0) if t < 0 else (np.float32(6.0) if t > 6 else t)
        return v * t / np.float32(6.0)
    if code == 7:
        return v / (np.float32(1.0) + np.exp(-v))
    if code == 8:
        return np.float32(0.5) * v * (np.float32(1.0) + np.float32(math.erf(v * np.float32(0.7071067811865476))))
    if code == 9:
        return np.float32(0.5) * v * (np.float32(1.0) + np.tanh(np.float32(_SQRT_2_OVER_PI) *
                                                                (v + np.float32(0.044715) * v * v * v)))
    if code == 10:
        return np.tanh(v)
    if code == 11:
        return np.float32(math.erf(v))
    return v


@inlined
def _arith(a, b, code):
    if code == 0:
        return a + b
    if code == 1:
        return a - b
    if code == 2:
        return a * b
    return a / b


@inlined
def _live(r, CB, C, V):
    """Live lanes of row r: rows are (image, channel block) of a blocked tensor; a plain
    tensor passes CB = C = V = 1 (every element live)."""
    return min(V, C - (r % CB) * V)


@parallel_kernel
def unary(x, y, code, alpha, beta, total, row_len, CB, C, V):
    """y = f(x) over flat x, y of `total` floats in rows of row_len: a blocked tensor's rows
    are its (image, channel block) planes, and lanes past C are written as zeros."""
    a32, b32 = np.float32(alpha), np.float32(beta)
    for r in prange((total + row_len - 1) // row_len):
        base = r * row_len
        end = min(total, base + row_len)
        live = _live(r, CB, C, V)
        if live == V:
            for i in range(base, end):
                y[i] = _act(x[i], code, a32, b32)
        else:
            for i in range(base, end):
                y[i] = _act(x[i], code, a32, b32) if (i - base) % V < live else np.float32(0.0)


@parallel_kernel
def binary_same(a, b, y, code, total, row_len, CB, C, V):
    """y = a (op) b for two same-shape, same-layout operands (rows as in unary)."""
    for r in prange((total + row_len - 1) // row_len):
        base = r * row_len
        end = min(total, base + row_len)
        live = _live(r, CB, C, V)
        if live == V:
            for i in range(base, end):
                y[i] = _arith(a[i], b[i], code)
        else:
            for i in range(base, end):
                y[i] = _arith(a[i], b[i], code) if (i - base) % V < live else np.float32(0.0)


@parallel_kernel
def channel_affine(x, y, scale, shift, N, C, S):
    """y[n, c, s] = x[n, c, s] * scale[c] + shift[c] (batch norm, plain layout)."""
    for p in prange(N * C):
        c = p % C
        sc, sh = np.float32(scale[c]), np.float32(shift[c])
        for s in range(S):
            y[p * S + s] = x[p * S + s] * sc + sh
