"""Where the time of one rlxpy conv goes: im2col fill, GEMM, the whole kernel, and run().

    python bench/profile_conv.py [N C H W K k stride pad]     (default: 1 64 56 56 64 3 1 1)

Every part is timed alone (median of repeated calls after warm-up), single-threaded and
with all of RLX_NUM_THREADS, so the README can say which part a missed target is made of.
"""
import sys
import time

import numpy as np

import rlxpy as rx
from rlxpy.cpu_kernels import conv2d, gemm, im2col


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def main(argv):
    n, c, h, w, k, ks, s, p = [int(a) for a in argv] if argv else [1, 64, 56, 56, 64, 3, 1, 1]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((k, c, ks, ks)) * 0.1).astype(np.float32)
    g = rx.Graph()
    g.output("y", g.conv(g.input("x", x.shape), g.param("w", wt), stride=s, padding=p))
    exe = rx.compile(g)
    wexe = rx.compile(g, rx.Config(winograd=True))
    threads = exe.threads
    oh = (h + 2 * p - ks) // s + 1
    ck, cols_n = c * ks * ks, oh * oh
    cols = np.empty((ck, cols_n), np.float32)
    y = np.empty((k, cols_n), np.float32)
    x5 = x[:1].reshape(1, c, 1, h, w)
    flops = 2 * n * k * cols_n * ck
    print(f"conv N={n} C={c} H=W={h} K={k} k={ks} s={s} p={p}: {flops / 1e6:.0f} MFLOP, threads {threads}")
    print(exe.explain().splitlines()[2])
    fill = median_ms(lambda: im2col.fill_columns(x5, 0, 0, c, 0, oh, cols, 1, ks, ks, 1, s, s, 0, p, p, 1, 1, 1,
                                                 oh, oh))
    print(f"  im2col fill, one image, 1 thread:       {fill:7.3f} ms")
    ms = median_ms(lambda: gemm.sgemm(False, False, k, cols_n, ck, wt.ctypes.data, ck, cols.ctypes.data,
                                      cols_n, False, y.ctypes.data, cols_n))
    print(f"  one whole-image GEMM, BLAS 1 thread:    {ms:7.3f} ms  ({2 * k * cols_n * ck / ms / 1e6:.0f} GFLOP/s)")
    rec = exe.thunks[0]
    run = median_ms(lambda: exe.run({"x": x}))
    print(f"  exe.run, {rec.algo} (tile {rec.tiling.tile} rows, {rec.tiling.k_blocks} k-blocks): {run:7.3f} ms "
          f"({flops / run / 1e6:.0f} GFLOP/s)")
    if wexe.thunks[0].algo == "winograd":
        wrec = wexe.thunks[0]
        u = np.empty((16, k, c), np.float32)
        conv2d.winograd_filter_transform(wt, u)
        scratch = np.empty(wrec.scratch_bytes // 4, np.float32)
        yy = np.empty((n, k, oh, oh), np.float32)
        slot = wrec.scratch_bytes // 4 // threads
        kern = median_ms(lambda: conv2d.conv2d_winograd(x, u, np.zeros(0, np.float32), yy, p, p, scratch, slot,
                                                        wrec.tiling.tile, wrec.tiling.k_blocks))
        wrun = median_ms(lambda: wexe.run({"x": x}))
        print(f"  winograd kernel alone (block {wrec.tiling.tile}):    {kern:7.3f} ms; exe.run {wrun:7.3f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
