"""simd_direct (the first explicit-vector conv) against the default kernel and PyTorch.

    python bench/simd_direct.py [--reps 20]

Prints the host and thread count, then the kernel alone on 3x3 64@56 (one thread and all
threads, plus the zero-bordered copy of x it needs), then per stride-1 conv case of the
shared table: exe.run at default flags, with RLX_CONV_ALGO=simd_direct at 16 and 8 lanes
(where the CPU runs them), and PyTorch's F.conv2d, medians in ms.
"""
import argparse
import statistics
import time

import numba
import numpy as np

import rlxpy as rx
from rlxpy.cpu_kernels import direct_simd, simd
from rlxpy.testing import case_arrays, cases, one_node_graph


def median_ms(fn, reps):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def kernel_alone(reps):
    c, k, oh = 64, 64, 56
    lanes = simd.host_widths()[0]
    hp, wp = oh + 2, -(-oh // (2 * lanes)) * 2 * lanes + 2
    xp = np.random.rand(1, c, hp, wp).astype(np.float32)
    x = np.random.rand(1, c, oh, oh).astype(np.float32)
    w = np.random.rand(-(-k // direct_simd.KB) * c * 9 * direct_simd.KB).astype(np.float32)
    y = np.zeros((1, k, oh, oh), np.float32)
    b = np.zeros(0, np.float32)
    flops = 2 * k * oh * oh * c * 9
    serial = numba.njit(nogil=True)(direct_simd.conv2d_simd_direct.py_func)
    for name, fn in (("1 thread", serial), (f"{numba.get_num_threads()} threads", direct_simd.conv2d_simd_direct)):
        ms = median_ms(lambda: fn(xp, w, b, y, hp, wp, 1, 1, 1, c, 3, 3, simd.lanes(lanes)), reps)
        print(f"kernel alone, 3x3 64@56, {lanes} lanes, {name}: {ms:.2f} ms ({flops / ms / 1e6:.0f} GFLOP/s)")
    ms = median_ms(lambda: direct_simd.pad_input(x, xp, hp, wp, 1, 1), reps)
    print(f"zero-bordered copy of x: {ms:.3f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import torch
    threads = rx.compile(one_node_graph(lambda g, v: g.resize_nearest2x(v["x"]),
                                        {"x": np.zeros((1, 1, 1, 1), np.float32)})).threads
    torch.set_num_threads(threads)
    import llvmlite.binding as llvm
    print(f"# {llvm.get_host_cpu_name()}, SIMD widths {simd.host_widths()}, threads {threads}")
    kernel_alone(args.reps)
    widths = [w for w in (16, 8) if w in simd.host_widths()]
    print("| case | default | " + " | ".join(f"simd_direct {w}" for w in widths) + " | PyTorch |")
    print("|---|---|" + "---|" * len(widths) + "---|")
    for case in cases("bench"):
        if case.op != "conv" or case.kw["stride"] != 1:
            continue
        inputs, params = case_arrays(case, 0, 0.1)
        g = one_node_graph(case, inputs, params, dynamic_batch=False)
        exe = rx.compile(g)
        cells = [f"{median_ms(lambda: exe.run(inputs), args.reps):.3f} ({exe.thunks[0].algo})"]
        for w in widths:
            e = rx.compile(g, rx.Config(conv_algo="simd_direct", simd_width=w))
            cells.append(f"{median_ms(lambda: e.run(inputs), args.reps):.3f}")
        t = {k: torch.from_numpy(v) for k, v in {**inputs, **params}.items()}
        with torch.no_grad():
            cells.append(f"{median_ms(lambda: torch.nn.functional.conv2d(t['x'], t['w'], padding=case.kw['padding'], groups=case.kw['groups']), args.reps):.3f}")
        print(f"| {case.id} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
