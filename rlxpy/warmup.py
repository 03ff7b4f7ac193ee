"""python -m rlxpy warmup: compile the CPU kernels into numba's on-disk cache ahead of use,
so a first run starts in seconds. It runs every case of the shared case table
(rlxpy.testing, tag "fast": every conv-family kernel family) on its default fast kernel,
on its reference kernel and on the vector kernels forced by name, and a small graph of
every tensor op, at the host's SIMD width (or the widths given)."""
from __future__ import annotations

import sys
from typing import Callable, Iterable, List, Optional, Tuple

import numpy as np

VECTOR_ALGOS = ("nchwc_direct", "nchwc_1x1", "nchwc_plain_in", "nchwc_depthwise", "nchwc_pool", "winograd_f4",
                "nchwc_wgrad", "nchwc_subpixel", "nchwc_pool_backward")


def tensor_ops_graph(channels: int):
    """One graph through every tensor op's kernels (blocked where the conv neighbours are)."""
    import rlxpy as rx
    rng = np.random.default_rng(0)
    p = lambda *s: g.param(f"p{next(k)}", (rng.standard_normal(s) * 0.2).astype(np.float32))  # noqa: E731
    import itertools
    k = itertools.count()
    g = rx.Graph()
    x = g.input("x", (None, channels, 8, 8))
    c = g.conv(x, p(channels, channels, 3, 3), padding=1)
    acts = [g.relu(c), g.leaky_relu(c, 0.1), g.clip(c, -1.0, 1.0), g.sigmoid(c), g.hardsigmoid(c), g.hardswish(c),
            g.silu(c), g.gelu(c), g.gelu(c, approximate="tanh"), g.tanh(c), g.erf(c)]
    y = acts[0]
    for a in acts[1:]:
        y = g.add(y, a)
    # same-shape arithmetic between blocked values (blocked kernels), and a blocked 2x resize
    y = g.div(g.mul(g.sub(y, acts[1]), acts[2]), g.add(acts[3], acts[3]))
    up = g.conv(g.resize_nearest2x(y), p(channels, channels, 3, 3), padding=1)
    y = g.div(g.mul(g.sub(y, p(1, channels, 1, 1)), p(channels, 1, 1)), p(1))
    y = g.batch_norm(g.pool(y, "avg", 2), p(channels), g.param("var", np.ones(channels, np.float32)),
                     p(channels), p(channels))
    y = g.concat([y, g.conv(y, p(channels, channels, 1, 1))], axis=1)
    y = g.pad(g.slice(y, [1], [4], axes=[2]), (2, 0, 1, 1), mode="reflect")
    y = g.pad(g.pad(y, (0, 1, 1, 0), mode="replicate"), (1, 0, 0, 1))
    s = g.softmax(g.transpose(y, (0, 2, 3, 1)), -1)
    t = g.log_softmax(g.reshape(g.mean(s, (1, 2)), (-1, 2 * channels)), 1)
    m = g.matmul(t, p(2 * channels, 4))
    head = g.linear(g.flatten(g.global_avg_pool(y)), p(4, 2 * channels), p(4))
    g.output("a", g.add(m, head))
    g.output("b", g.amax(g.global_max_pool(y), (2, 3)))
    g.output("up", up)
    return g


def jobs(widths: Iterable[int]) -> List[Tuple[str, Callable[[], None]]]:
    """(label, compile-and-run) pairs: what warmup does, one progress step each."""
    import rlxpy as rx
    from .testing import case_arrays, cases, one_node_graph
    out = []
    for width in widths:
        fast, ref = rx.Config(simd_width=width), rx.Config(simd_width=width, fast_conv=False)
        for case in cases("fast"):
            def job(case=case, fast=fast, ref=ref, width=width):
                inputs, params = case_arrays(case)
                g = one_node_graph(case, inputs, params)
                rx.compile(g, fast).run(inputs)
                rx.compile(g, ref).run(inputs)
                if width > 1:
                    for algo in VECTOR_ALGOS:
                        rx.compile(g, fast.replace(conv_algo=algo)).run(inputs)
            out.append((f"{case.id} (width {width})", job))
        def fly(fast=fast):
            # winograd_f4's conv_fly: its rule takes 512 channels at 7x7 at every width on
            # hosts with up to 2 MiB of L2 (the case table's small convs only at 16 lanes)
            g = rx.Graph()
            x = g.input("x", (1, 512, 7, 7))
            g.output("y", g.conv(x, g.param("w", np.full((512, 512, 3, 3), 0.01, np.float32)), padding=1))
            rx.compile(g, fast.replace(winograd="f4")).run({"x": np.ones((1, 512, 7, 7), np.float32)})
        if width > 1:
            out.append((f"winograd_f4 on the fly (width {width})", fly))
        for config in (fast, ref):
            def ops(config=config, width=width):
                for channels in sorted({width, 3}):
                    g = tensor_ops_graph(channels)
                    x = np.random.default_rng(1).standard_normal((2, channels, 8, 8)).astype(np.float32)
                    rx.compile(g, config).run({"x": x})
            out.append((f"tensor ops ({'reference' if not config.fast_conv else 'fast'}, width {width})", ops))
    return out


def warmup(widths: Optional[Iterable[int]] = None, only: str = "", stream=None) -> int:
    """Runs the jobs (those whose label contains `only`) with a progress bar; returns how many ran."""
    from .cpu_kernels import jit, simd
    jit._noticed = True                 # compiling is what warmup is for: no cold-compile notice
    widths = tuple(widths) if widths else (simd.resolve_width(None),)
    todo = [(label, fn) for label, fn in jobs(widths) if only in label]
    stream = stream or sys.stderr
    try:
        from tqdm import tqdm
        steps = tqdm(todo, desc="rlxpy warmup", unit="job", file=stream)
    except ImportError:
        steps = todo
    for i, (label, fn) in enumerate(steps):
        if steps is todo:
            print(f"[{i + 1}/{len(todo)}] {label}", file=stream)
        fn()
    return len(todo)
