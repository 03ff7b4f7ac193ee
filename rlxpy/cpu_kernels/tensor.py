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

from .gemm import sgemm
from .jit import inlined, parallel_kernel, u
from .simd import nlanes, vfma, vhsum, vload, vstore, vzero

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
# One function per activation, inlined at numba's IR level into one kernel per activation
# (UNARY, EPILOGUE below): no branch on the activation in the loop, which then vectorizes
# (relu on 800K floats took 3.2 ms with a branch on a code, see README; GELU over 512K floats
# 4.3 ms with the activation a jitted call per element, 0.8 inlined).
@inlined
def act_identity(v, alpha, beta):
    return v


@inlined
def act_relu(v, alpha, beta):
    return np.float32(0.0) if v < 0 else v


@inlined
def act_leaky_relu(v, alpha, beta):
    return v * alpha if v < 0 else v


@inlined
def act_clip(v, alpha, beta):
    """min(max(v, lo), hi): hi everywhere when lo > hi, as torch.clamp; a NaN stays NaN."""
    t = alpha if v < alpha else v
    return beta if t > beta else t


@inlined
def act_sigmoid(v, alpha, beta):
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-v))


@inlined
def act_hardsigmoid(v, alpha, beta):
    t = alpha * v + beta
    return np.float32(0.0) if t < 0 else (np.float32(1.0) if t > 1 else t)


@inlined
def act_hardswish(v, alpha, beta):
    t = v + np.float32(3.0)
    t = np.float32(0.0) if t < 0 else (np.float32(6.0) if t > 6 else t)
    return v * t / np.float32(6.0)


@inlined
def act_silu(v, alpha, beta):
    return v / (np.float32(1.0) + np.exp(-v))


# erf in float32 arithmetic, no libm call (math.erf is a scalar call per element: GELU over
# 512K floats took 1.8 ms): x * P(x^2) on [0, 1), a polynomial in x - centre on [1, 2),
# [2, 3) and [3, 3.92), 1 beyond; odd (erf(-0) = -0); NaN stays NaN. Coefficients and their
# error (at most 6e-8 relative in float64, about an ulp more in float32) from bench/fit_erf.py.
_f = np.float32


def _nine(*c):
    """Coefficients c0.. as nine float32s (zeros after the last): one Horner form for all."""
    return tuple(map(_f, c + (0.0,) * (9 - len(c))))


ERF_SMALL = _nine(1.128379150e+00, -3.761241472e-01, 1.128078875e-01, -2.672698146e-02, 4.934506853e-03,
                  -5.696655952e-04)
ERF_1_2 = _nine(9.661051464e-01, 1.189300751e-01, -1.783954165e-01, 1.387634910e-01, -4.459944833e-02,
                -1.503332560e-02, 1.933343002e-02, -3.834634551e-03, -2.401931335e-03)
ERF_2_3 = _nine(9.995930388e-01, 2.178318026e-03, -5.444540360e-03, 8.348284994e-03, -8.645452388e-03,
                6.143384302e-03, -2.655046344e-03, 4.030348457e-04)
ERF_3_3_92 = _nine(9.999990085e-01, 7.212647920e-06, -2.477910088e-05, 5.155821427e-05, -8.379596272e-05,
                   1.305462345e-04, -1.132181215e-04)


@inlined
def _horner9(t, c):
    c0, c1, c2, c3, c4, c5, c6, c7, c8 = c
    return c0 + t * (c1 + t * (c2 + t * (c3 + t * (c4 + t * (c5 + t * (c6 + t * (c7 + t * c8)))))))


@inlined
def erf32(v):
    """Every piece is computed and one selected, so a loop of these vectorizes (0.5 ms over
    512K floats on 2 cores, math.erf 1.8)."""
    a = abs(v)
    r = a * _horner9(a * a, ERF_SMALL)
    r = r if a < _f(1.0) else _horner9(a - _f(1.5), ERF_1_2)
    r = r if a < _f(2.0) else _horner9(a - _f(2.5), ERF_2_3)
    r = r if a < _f(3.0) else _horner9(a - _f(3.46), ERF_3_3_92)
    r = min(r if a < _f(3.92) else _f(1.0), _f(1.0))
    return r if v > _f(0.0) else (-r if v < _f(0.0) else v)      # erf(+-0) = +-0; NaN stays NaN


@inlined
def act_gelu(v, alpha, beta):
    return np.float32(0.5) * v * (np.float32(1.0) + erf32(v * np.float32(0.7071067811865476)))


@inlined
def act_gelu_tanh(v, alpha, beta):
    return np.float32(0.5) * v * (np.float32(1.0) + np.tanh(np.float32(_SQRT_2_OVER_PI) *
                                                            (v + np.float32(0.044715) * v * v * v)))


@inlined
def act_tanh(v, alpha, beta):
    return np.tanh(v)


@inlined
def act_erf(v, alpha, beta):
    return erf32(v)


ACTIVATION = {"identity": act_identity, "relu": act_relu, "leaky_relu": act_leaky_relu, "clip": act_clip,
              "sigmoid": act_sigmoid, "hardsigmoid": act_hardsigmoid, "hardswish": act_hardswish, "silu": act_silu,
              "gelu": act_gelu, "gelu_tanh": act_gelu_tanh, "tanh": act_tanh, "erf": act_erf}


@inlined
def op_add(a, b):
    return a + b


@inlined
def op_sub(a, b):
    return a - b


@inlined
def op_mul(a, b):
    return a * b


@inlined
def op_div(a, b):
    return a / b


ARITHMETIC = {"add": op_add, "sub": op_sub, "mul": op_mul, "div": op_div}


@inlined
def _live(r, CB, C, V):
    """Live lanes of row r: rows are (image, channel block) of a blocked tensor; a plain
    tensor passes CB = C = V = 1 (every element live)."""
    return min(V, C - (r % CB) * V)


@inlined
def _unary(x, y, f, alpha, beta, total, row_len, CB, C, V):
    """y = f(x) over flat x, y of `total` floats in rows of row_len (f: an ACTIVATION): a
    blocked tensor's rows are its (image, channel block) planes, and lanes past C are
    written as zeros. Inlined into one cached kernel per activation (UNARY)."""
    a32, b32 = np.float32(alpha), np.float32(beta)
    for r in prange((total + row_len - 1) // row_len):
        base = r * row_len
        end = min(total, base + row_len)
        live = _live(r, CB, C, V)
        if live == V:
            for i in range(base, end):
                y[i] = f(x[i], a32, b32)
        else:
            for i in range(base, end):
                y[i] = f(x[i], a32, b32) if (i - base) % V < live else np.float32(0.0)


@inlined
def _binary_same(a, b, y, f, total, row_len, CB, C, V):
    """y = f(a, b) for two same-shape, same-layout operands (rows as in _unary; f: an
    ARITHMETIC). Inlined into one cached kernel per operation (BINARY_SAME)."""
    for r in prange((total + row_len - 1) // row_len):
        base = r * row_len
        end = min(total, base + row_len)
        live = _live(r, CB, C, V)
        if live == V:
            for i in range(base, end):
                y[i] = f(a[i], b[i])
        else:
            for i in range(base, end):
                y[i] = f(a[i], b[i]) if (i - base) % V < live else np.float32(0.0)


@parallel_kernel
def channel_affine(x, y, scale, shift, N, C, S):
    """y[n, c, s] = x[n, c, s] * scale[c] + shift[c] (batch norm, plain layout)."""
    for p in prange(N * C):
        c = p % C
        sc, sh = np.float32(scale[c]), np.float32(shift[c])
        for s in range(S):
            y[p * S + s] = x[p * S + s] * sc + sh


# --- fast: GEMMs on SciPy's single-threaded BLAS, split over numba's pool -----------------------
# (numpy's own BLAS is a second thread pool: its threads spin after each call and took the
# cores from the next numba kernels, 2.5x slower ResNet-18 runs, measured)
@parallel_kernel
def linear(x, w, b, y, rows, k, o, row_blocks, col_blocks):
    """y[rows, o] = x[rows, k] @ w[o, k].T (+ b): work items are (block of rows, block of
    output columns), one SGEMM each, so w is read once per row block (per row, a batch of
    8 read the 5 MB of a 1280 -> 1000 head 8 times: 4.1 ms against onnxruntime's 0.3)."""
    rstep = (rows + row_blocks - 1) // row_blocks
    cstep = (o + col_blocks - 1) // col_blocks
    for it in prange(row_blocks * col_blocks):
        rb = it // col_blocks
        r0 = rb * rstep
        r1 = min(rows, r0 + rstep)
        c0 = (it - rb * col_blocks) * cstep
        c1 = min(o, c0 + cstep)
        if r1 > r0 and c1 > c0:
            sgemm(False, True, r1 - r0, c1 - c0, k, x.ctypes.data + 4 * r0 * k, k, w.ctypes.data + 4 * c0 * k, k,
                  False, y.ctypes.data + 4 * (r0 * o + c0), o)
            if b.size > 0:
                for r in range(r0, r1):
                    for c in range(c0, c1):
                        y[r * o + c] += b[c]


@inlined
def _dot4(x, w, xo0, xo1, xo2, xo3, wo0, wo1, wo2, wo3, k, L):
    """4 dot products of k floats: x at xo_i with w at wo_i (4 rows of x against one weight
    row: the same wo four times, each weight vector loaded once; or the 4 quarters of one
    row): vectors, then the tail."""
    V = nlanes(L)
    a0, a1, a2, a3 = vzero(L), vzero(L), vzero(L), vzero(L)
    body = k - k % V
    for kk in range(0, body, V):
        a0 = vfma(vload(w, wo0 + kk, L), vload(x, xo0 + kk, L), a0)
        a1 = vfma(vload(w, wo1 + kk, L), vload(x, xo1 + kk, L), a1)
        a2 = vfma(vload(w, wo2 + kk, L), vload(x, xo2 + kk, L), a2)
        a3 = vfma(vload(w, wo3 + kk, L), vload(x, xo3 + kk, L), a3)
    s0, s1, s2, s3 = vhsum(a0), vhsum(a1), vhsum(a2), vhsum(a3)
    for kk in range(body, k):
        s0 += w[wo0 + kk] * x[xo0 + kk]
        s1 += w[wo1 + kk] * x[xo1 + kk]
        s2 += w[wo2 + kk] * x[xo2 + kk]
        s3 += w[wo3 + kk] * x[xo3 + kk]
    return s0, s1, s2, s3


@inlined
def _bias_at(b, c):
    """The bias of output column c (b empty: none)."""
    return b[c] if b.size > 0 else np.float32(0.0)


@parallel_kernel
def linear_dot(x, w, b, y, rows, k, o, per, L):
    """y[rows, o] = x[rows, k] @ w[o, k].T (+ b) for a few rows: per output column, the
    weight row (contiguous) read once for 4 rows at a time (a missing 4th row repeats the
    last, its sum not stored). One row goes against 4 weight rows at a time (20 KB read in
    one sweep: MobileNetV2's 1280 -> 1000 head, weights from memory, 0.20 -> 0.12 ms on
    Zen3; one weight row split in 4 streams before), an item's last columns one at a
    time with the row in quarters. Work items: runs of `per` columns."""
    for it in prange((o + per - 1) // per):
        c_end = min(o, (it + 1) * per)
        c_four = it * per
        if rows == 1:               # one row: 4 weight rows at a time against it, x loaded once
            while c_four + 4 <= c_end:
                wo = c_four * k
                s0, s1, s2, s3 = _dot4(x, w, 0, 0, 0, 0, wo, wo + k, wo + 2 * k, wo + 3 * k, k, L)
                y[c_four] = s0 + _bias_at(b, c_four)
                y[c_four + 1] = s1 + _bias_at(b, c_four + 1)
                y[c_four + 2] = s2 + _bias_at(b, c_four + 2)
                y[c_four + 3] = s3 + _bias_at(b, c_four + 3)
                c_four += 4
        for c in range(c_four, c_end):
            bias = _bias_at(b, c)
            if rows == 1:           # one row: its 4 quarters as the 4 streams (the same sum, reordered)
                q, wo = k // 4, c * k
                s0, s1, s2, s3 = _dot4(x, w, 0, q, 2 * q, 3 * q, wo, wo + q, wo + 2 * q, wo + 3 * q, q, L)
                t = s0 + s1 + s2 + s3
                for kk in range(4 * q, k):
                    t += w[wo + kk] * x[kk]
                y[c] = t + bias
                continue
            for r0 in range(0, rows, 4):
                r1, r2, r3 = min(r0 + 1, rows - 1), min(r0 + 2, rows - 1), min(r0 + 3, rows - 1)
                wo = c * k
                s0, s1, s2, s3 = _dot4(x, w, r0 * k, r1 * k, r2 * k, r3 * k, wo, wo, wo, wo, k, L)
                y[r0 * o + c] = s0 + bias
                if r0 + 1 < rows:
                    y[r1 * o + c] = s1 + bias
                if r0 + 2 < rows:
                    y[r2 * o + c] = s2 + bias
                if r0 + 3 < rows:
                    y[r3 * o + c] = s3 + bias


@parallel_kernel
def reduce_rows(x, y, rows, width, mean):
    """y[r] = the mean (or max) of x[r * width:(r + 1) * width], summed in float64; the max
    is NaN where the row holds one (numpy's and PyTorch's rule). np.mean over the last two
    axes of [8, 1280, 7, 7] (MobileNetV2's global pooling) took 0.43 ms; this about 0.05."""
    for r in prange(rows):
        base = r * width
        if mean:
            acc = 0.0
            for i in range(width):
                acc += x[base + i]
            y[r] = acc / width
        else:
            m = x[base]
            for i in range(1, width):
                v = x[base + i]
                if v > m or v != v:
                    m = v
                if m != m:
                    break
            y[r] = m


@parallel_kernel
def batched_matmul(a, b, y, a_off, b_off, m, n, k):
    """y[i] = a[a_off[i]] @ b[b_off[i]] for every batch entry i (offsets in floats of the
    [m, k] and [k, n] matrices: NumPy's broadcasting of the batch dims, resolved once)."""
    for i in prange(a_off.size):
        sgemm(False, False, m, n, k, a.ctypes.data + 4 * a_off[i], k, b.ctypes.data + 4 * b_off[i], n, False,
              y.ctypes.data + 4 * i * m * n, n)


def batch_offsets(a_shape, b_shape, y_shape):
    """The float offsets of each batch entry's matrices in a and b (NumPy's broadcasting)."""
    batch = tuple(y_shape[:-2])
    ia = np.arange(int(np.prod(a_shape[:-2], dtype=np.int64))).reshape(a_shape[:-2]) if len(a_shape) > 2 else 0
    ib = np.arange(int(np.prod(b_shape[:-2], dtype=np.int64))).reshape(b_shape[:-2]) if len(b_shape) > 2 else 0
    ia, ib = np.broadcast_to(ia, batch).reshape(-1), np.broadcast_to(ib, batch).reshape(-1)
    return (ia * a_shape[-2] * a_shape[-1]).astype(np.int64), (ib * b_shape[-2] * b_shape[-1]).astype(np.int64)


@inlined
def _epilogue(y, r, f, alpha, beta, total, row_len, CB, C, V):
    """A fused conv's epilogue, in place: y = f(y + r) (r empty: y = f(y)), rows and the
    lanes past C as in _unary. Inlined into one cached kernel per activation (EPILOGUE).
    The residual test and the live-lanes test stay out of the element loops, and y is
    indexed unsigned (jit.u): with numba's wraparound of a signed index LLVM could not tell
    that each load and store of y is the same element, and left the loop scalar (GELU's
    pass over 512K floats: 1.8 ms, 0.7 vectorized)."""
    a32, b32 = np.float32(alpha), np.float32(beta)
    has_r = r.size > 0
    for row in prange((total + row_len - 1) // row_len):
        base = row * row_len
        end = min(total, base + row_len)
        live = _live(row, CB, C, V)
        if has_r:
            for i in range(base, end):
                j = u(i)
                y[j] = f(y[j] + r[j], a32, b32)
        else:
            for i in range(base, end):
                j = u(i)
                y[j] = f(y[j], a32, b32)
        if live < V:
            for i in range(base, end):
                if (i - base) % V >= live:
                    y[i] = np.float32(0.0)


# --- one cached kernel per function ----------------------------------------------------------
# Each inlines its body with the function as a global: numba's on-disk cache can't hold a
# kernel that takes a jitted function as an argument (its key holds the dispatcher, a new
# object in every process: it never hit, and saving a new specialization failed with
# "underlying object has vanished", numba #2956 / #9348, which the fuzzer found).
@parallel_kernel
def unary_identity(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_identity, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_identity(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_identity, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_relu(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_relu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_relu(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_relu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_leaky_relu(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_leaky_relu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_leaky_relu(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_leaky_relu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_clip(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_clip, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_clip(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_clip, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_sigmoid(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_sigmoid, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_sigmoid(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_sigmoid, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_hardsigmoid(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_hardsigmoid, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_hardsigmoid(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_hardsigmoid, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_hardswish(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_hardswish, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_hardswish(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_hardswish, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_silu(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_silu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_silu(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_silu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_gelu(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_gelu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_gelu(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_gelu, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_gelu_tanh(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_gelu_tanh, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_gelu_tanh(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_gelu_tanh, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_tanh(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_tanh, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_tanh(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_tanh, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def unary_erf(x, y, alpha, beta, total, row_len, CB, C, V):
    _unary(x, y, act_erf, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def epilogue_erf(y, r, alpha, beta, total, row_len, CB, C, V):
    _epilogue(y, r, act_erf, alpha, beta, total, row_len, CB, C, V)


@parallel_kernel
def binary_add(a, b, y, total, row_len, CB, C, V):
    _binary_same(a, b, y, op_add, total, row_len, CB, C, V)


@parallel_kernel
def binary_sub(a, b, y, total, row_len, CB, C, V):
    _binary_same(a, b, y, op_sub, total, row_len, CB, C, V)


@parallel_kernel
def binary_mul(a, b, y, total, row_len, CB, C, V):
    _binary_same(a, b, y, op_mul, total, row_len, CB, C, V)


@parallel_kernel
def binary_div(a, b, y, total, row_len, CB, C, V):
    _binary_same(a, b, y, op_div, total, row_len, CB, C, V)


UNARY = {"identity": unary_identity, "relu": unary_relu, "leaky_relu": unary_leaky_relu, "clip": unary_clip, "sigmoid": unary_sigmoid, "hardsigmoid": unary_hardsigmoid, "hardswish": unary_hardswish, "silu": unary_silu, "gelu": unary_gelu, "gelu_tanh": unary_gelu_tanh, "tanh": unary_tanh, "erf": unary_erf}
EPILOGUE = {"identity": epilogue_identity, "relu": epilogue_relu, "leaky_relu": epilogue_leaky_relu, "clip": epilogue_clip, "sigmoid": epilogue_sigmoid, "hardsigmoid": epilogue_hardsigmoid, "hardswish": epilogue_hardswish, "silu": epilogue_silu, "gelu": epilogue_gelu, "gelu_tanh": epilogue_gelu_tanh, "tanh": epilogue_tanh, "erf": epilogue_erf}
BINARY_SAME = {"add": binary_add, "sub": binary_sub, "mul": binary_mul, "div": binary_div}


@parallel_kernel
def concat_blocks(a, src_off, src_blocks, src_copied, y0, N, CBy, SV, parts, L):
    """Blocked inputs [N, src_blocks[i], SV] at a[src_off[i]:] into blocked y [N, CBy, SV]
    at a[y0:], along the blocks (SV: a block's floats); an input whose src_copied[i] is 0
    is already in its slice (written there by its producer) and not copied. Work items:
    (image, block of y, one of `parts` runs of it): numpy's concatenate copied on one thread
    (the UNet's 48-channel concat at batch 8: 114 us against onnxruntime's 67)."""
    run = (SV // nlanes(L) + parts - 1) // parts * nlanes(L)
    for it in prange(N * CBy * parts):
        V = nlanes(L)
        part = it % parts
        r = it // parts
        cb = r % CBy
        n = r // CBy
        i = 0
        base = 0
        while cb >= base + src_blocks[i]:
            base += src_blocks[i]
            i += 1
        if src_copied[i] == 0:
            continue
        src = src_off[i] + (n * src_blocks[i] + cb - base) * SV
        dst = y0 + r * SV
        for q in range(part * run, min(SV, part * run + run), V):
            vstore(a, dst + q, vload(a, src + q, L))
