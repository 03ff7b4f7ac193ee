"""What exe.run costs beyond its kernels: a one-conv graph on a 1x1x8x8 input against
PyTorch's F.conv2d call on the same input (issue 9's target: at most 2x); then, with
--chain N, the cost per node of a chain of N 1x1 convs + relu on 1x32x8x8 (next to no
work) through rlxpy and through onnxruntime (exported by torch), in alternating blocks.

    python bench/run_overhead.py [--reps 5000] [--chain 55]
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
    ap.add_argument("--chain", type=int, default=0, help="also time a chain of this many 1x1 convs against onnxruntime")
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
    if args.chain:
        chain_per_node(args.chain, exe.threads)


def chain_per_node(n, threads):
    """The per-node cost of a run (launch, arguments, the Python loop), against onnxruntime's."""
    import io
    import sys
    import onnxruntime as ort
    import torch
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from conv_suite import time_blocks
    module = torch.nn.Sequential(*[m for _ in range(n) for m in (torch.nn.Conv2d(32, 32, 1), torch.nn.ReLU())])
    buf = io.BytesIO()
    torch.onnx.export(module, torch.randn(1, 32, 8, 8), buf, input_names=["input"], output_names=["output"],
                      dynamo=False)
    exe = rx.compile(rx.onnx.load(buf.getvalue()))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(buf.getvalue(), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 32, 8, 8), dtype=np.float32)
    ms = time_blocks({"rlx": lambda: exe.run({"input": x}), "ort": lambda: sess.run(None, {"input": x})}, 600)
    print(f"chain of {n} 1x1 convs + relu on 1x32x8x8 ({len(exe.thunks)} thunks): rlxpy {ms['rlx'] * 1e3 / n:.2f} us "
          f"a node, onnxruntime {ms['ort'] * 1e3 / n:.2f}")


if __name__ == "__main__":
    main()
