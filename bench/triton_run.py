"""exe.run end to end on the GPU: a small CNN, eager launches against CUDA-graph replay,
and PyTorch eager on the same layers.

    python bench/triton_run.py [--batch 1]

Times exe.run(inputs, return_tensors=True) with a CUDA input tensor (so no host copies),
median of --reps runs after warm-up, wall clock after a synchronize.
"""
import argparse
import os
import statistics
import time

import numpy as np
import torch

import rlxpy as rx

F = torch.nn.functional


def small_cnn(rng):
    """conv3x3(3->32)+bias, maxpool, conv3x3(32->64), maxpool, conv3x3(64->64), resize x2, 1x1(64->16)."""
    shapes = {"w1": (32, 3, 3, 3), "b1": (32,), "w2": (64, 32, 3, 3), "w3": (64, 64, 3, 3), "w4": (16, 64, 1, 1)}
    return {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in shapes.items()}


def build(p, shape):
    g = rx.Graph()
    y = g.conv(g.input("x", shape), g.param("w1", p["w1"]), bias=g.param("b1", p["b1"]), padding=1)
    y = g.pool(y, "max", 2)
    y = g.pool(g.conv(y, g.param("w2", p["w2"]), padding=1), "max", 2)
    y = g.resize_nearest2x(g.conv(y, g.param("w3", p["w3"]), padding=1))
    g.output("y", g.conv(y, g.param("w4", p["w4"])))
    return g


def torch_cnn(x, t):
    y = F.max_pool2d(F.conv2d(x, t["w1"], t["b1"], padding=1), 2)
    y = F.max_pool2d(F.conv2d(y, t["w2"], padding=1), 2)
    y = F.interpolate(F.conv2d(y, t["w3"], padding=1), scale_factor=2, mode="nearest")
    return F.conv2d(y, t["w4"])


def median_us(fn, reps):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", default="1,32")
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = True
    p = small_cnn(np.random.default_rng(0))
    t = {k: torch.from_numpy(v).cuda() for k, v in p.items()}
    print("| batch | rlx eager us | rlx graph us | torch eager us | torch/rlx graph | max rel err |")
    print("|---|---|---|---|---|---|")
    for n in [int(b) for b in args.batch.split(",")]:
        x = torch.randn(n, 3, 64, 64, device="cuda")
        row = {}
        for graphs in ("0", "1"):
            os.environ["RLX_CUDA_GRAPH"] = graphs
            exe = rx.compile(build(p, (n, 3, 64, 64)), device="cuda")
            row[graphs] = median_us(lambda: exe.run({"x": x}, return_tensors=True), args.reps)
            out = exe.run({"x": x}, return_tensors=True)["y"]
        ref = torch_cnn(x, t)
        exact = torch_cnn(x.double(), {k: v.double() for k, v in t.items()})
        err = ((out.double() - exact).abs().max() / exact.abs().max()).item()
        tus = median_us(lambda: torch_cnn(x, t), args.reps)
        assert ref.shape == out.shape
        print(f"| {n} | {row['0']:.0f} | {row['1']:.0f} | {tus:.0f} | {tus / row['1']:.2f} | {err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
