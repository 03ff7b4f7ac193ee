"""Shared test helpers: one-node graphs run through the public API, and tolerances."""
from __future__ import annotations

import numpy as np

import rlxpy as rx
from rlxpy.testing import case_arrays, main_thunk, one_node_graph, rand  # noqa: F401  (re-exported)

REFERENCE = rx.Config(fast_conv=False)


def run_graph(build, inputs: dict, params: dict = None, config=REFERENCE, plan_memory=True, device="cpu"):
    """build(g, values) -> output Value (or a Case); values holds the inputs (dynamic batch)
    and params. Returns (output array, executable)."""
    g = one_node_graph(build, inputs, params)
    exe = rx.compile(g, config, device=device, plan_memory=plan_memory)
    return exe.run(inputs)["out"], exe


def run_case(case, config=REFERENCE, seed=0, device="cpu"):
    """A case of rlxpy.testing's table as a one-node graph: (output, executable, inputs, params)."""
    inputs, params = case_arrays(case, seed)
    out, exe = run_graph(case, inputs, params, config, device=device)
    return out, exe, inputs, params


def assert_close(actual, expected, rtol, what=""):
    """Elementwise |a - e| <= rtol * max(1, max|e|): a relative bound that does not blow
    up where a single output happens to be near zero."""
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    err = float(np.abs(actual.astype(np.float64) - expected).max()) if expected.size else 0.0
    assert err <= rtol * scale, f"{what}: max abs error {err:.3g} > {rtol} * {scale:.3g}"


def pairs(padding, n):
    """Builder padding (an int, per-axis ints or (begin, end) pairs) as n (begin, end) pairs."""
    if isinstance(padding, int):
        return ((padding, padding),) * n
    return tuple(p if isinstance(p, tuple) else (p, p) for p in padding)


def torch_pad(x, pads, value=0.0):
    """Asymmetric padding on the torch side (torch's convs take symmetric padding only);
    F.pad takes the last axis first."""
    import torch
    flat = []
    for b, e in reversed(pads):
        flat += [b, e]
    return torch.nn.functional.pad(x, flat, value=value)
