"""Dims, shapes and the output-size arithmetic every op shares.

A Dim is an int (static) or a str (dynamic: a name such as "N", bound at run time).
Sizes derived from a dynamic dim are dynamic too; their names are the expression that
computes them, so two derivations of the same size compare equal at build time. Every
shape is checked again with concrete ints when a plan is built for the bound inputs.
"""
from __future__ import annotations

from typing import Sequence, Tuple, Union

Dim = Union[int, str]
Shape = Tuple[Dim, ...]
Pad = Tuple[int, int]  # (begin, end) padding of one spatial axis


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def fmt_shape(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def as_tuple(value, n: int, what: str, node: str) -> Tuple[int, ...]:
    """An int or a length-n sequence of ints, as PyTorch takes stride/dilation/kernel."""
    if isinstance(value, (int,)) and not isinstance(value, bool):
        return (int(value),) * n
    try:
        items = tuple(value)
    except TypeError:
        raise TypeError(f"{node}: {what} must be an int or a tuple of {n} ints, got {value!r}") from None
    if len(items) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ValueError(f"{node}: {what} must be an int or a tuple of {n} ints, got {value!r}")
    return tuple(int(v) for v in items)


def as_pads(value, n: int, node: str) -> Tuple[Pad, ...]:
    """padding as an int, a per-axis tuple of ints, or a per-axis tuple of (begin, end) pairs."""
    if isinstance(value, int) and not isinstance(value, bool):
        pads = ((value, value),) * n
    else:
        try:
            items = tuple(value)
        except TypeError:
            raise TypeError(f"{node}: padding must be an int, {n} ints or {n} (begin, end) pairs, got {value!r}") from None
        if len(items) != n:
            raise ValueError(f"{node}: padding must have {n} entries (one per spatial axis), got {value!r}")
        pads = []
        for p in items:
            if isinstance(p, int) and not isinstance(p, bool):
                pads.append((p, p))
            elif isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(q, int) for q in p):
                pads.append((int(p[0]), int(p[1])))
            else:
                raise ValueError(f"{node}: padding entry {p!r} is neither an int nor a (begin, end) pair")
        pads = tuple(pads)
    for b, e in pads:
        if b < 0 or e < 0:
            raise ValueError(f"{node}: padding must be >= 0, got {value!r}")
    return tuple(pads)


def check_positive(values: Sequence[int], what: str, node: str) -> None:
    if any(v < 1 for v in values):
        raise ValueError(f"{node}: {what} must be >= 1, got {tuple(values)}")


def conv_out(size: Dim, k: int, stride: int, pad: Pad, dilation: int, node: str, axis: int) -> Dim:
    """floor((in + pb + pe - dilation*(k-1) - 1) / stride) + 1, refused below 1."""
    span = dilation * (k - 1) + 1
    if isinstance(size, str):
        return f"({size}+{pad[0] + pad[1] - span})//{stride}+1"
    padded = size + pad[0] + pad[1]
    if span > padded:
        raise ValueError(
            f"{node}: kernel on spatial axis {axis} spans {span} (k={k}, dilation={dilation}) "
            f"but the padded input is only {padded} ({size} + pads {pad})")
    return (padded - span) // stride + 1


def pool_out(size: Dim, k: int, stride: int, pad: Pad, dilation: int, ceil_mode: bool,
             node: str, axis: int) -> Dim:
    """PyTorch's pooling_output_shape: with ceil_mode the last window must start inside the
    input or its begin padding, and may reach past the end padding (so with ceil_mode a
    window wider than the padded input still gives one output, as in PyTorch and ONNX)."""
    span = dilation * (k - 1) + 1
    if isinstance(size, str):
        return f"pool({size},{k},{stride},{pad[0]},{pad[1]},{dilation},{int(ceil_mode)})"
    padded = size + pad[0] + pad[1]
    num = padded - span + (stride - 1 if ceil_mode else 0)
    out = num // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad[0]:
        out -= 1
    if out < 1:
        raise ValueError(
            f"{node}: pooling window on spatial axis {axis} spans {span} (k={k}, dilation={dilation}) "
            f"but the padded input is only {padded} ({size} + pads {pad})"
            + (f" and stride {stride} with ceil_mode leaves no window" if ceil_mode else ""))
    return out


def transpose_out(size: Dim, k: int, stride: int, pad: Pad, dilation: int, out_pad: int,
                  node: str, axis: int) -> Dim:
    """(in-1)*stride - pb - pe + dilation*(k-1) + output_padding + 1, refused below 1."""
    if isinstance(size, str):
        return f"({size}-1)*{stride}+{dilation * (k - 1) + out_pad + 1 - pad[0] - pad[1]}"
    out = (size - 1) * stride - pad[0] - pad[1] + dilation * (k - 1) + out_pad + 1
    if out < 1:
        raise ValueError(f"{node}: transposed output size on spatial axis {axis} would be {out} (< 1)")
    return out
