"""What exe.run costs beyond its kernels: a one-conv graph on a 1x1x8x8 input against
PyTorch's F.conv2d call on the same input (issue 9's target: at most 2x).

    python bench/run_overhead.py [--reps 5000]
"""
import argparse
import statistics
import time

import numpy as np

import rlxpy as rx


def median_us(fn, reps):
    for _ in range(reps // 10):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5000)
    args = ap.parse_args()
    import torch
    g = rx.Graph()
    x = g.input("x", (1, 1, 8, 8))
    g.output("y", g.conv(x, g.param("w", np.ones((1, 1, 3, 3), np.float32)), padding=1))
    exe = rx.compile(g)
    torch.set_num_threads(exe.threads)
    xv = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    tx, tw = torch.from_numpy(xv), torch.ones(1, 1, 3, 3)
    rlx = median_us(lambda: exe.run({"x": xv}), args.reps)
    with torch.no_grad():
        ref = median_us(lambda: torch.nn.functional.conv2d(tx, tw, padding=1), args.reps)
    print(f"threads {exe.threads}; exe.run {rlx:.1f} us ({exe.thunks[0].algo}); F.conv2d {ref:.1f} us; "
          f"ratio {rlx / ref:.2f}")


if __name__ == "__main__":
    main()
