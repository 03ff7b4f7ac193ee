"""rlxpy vs PyTorch CPU vs onnxruntime CPU, side by side in one process.

    python bench/conv_suite.py [--reps 30] [--only SUBSTRING] [--markdown]

Each case runs through rlxpy (default flags, plus RLX_WINOGRAD=1 / RLX_DIRECT_CONV=1 where
eligible), PyTorch (torch.set_num_threads = rlxpy's thread count) and onnxruntime (forward
cases; intra-op threads = the same). Peers are timed in alternating blocks (see time_blocks),
each getting the median of its calls after warm-up. Ratios are peer_time / rlxpy_time
(> 1: rlxpy is faster), with rlxpy at default flags; "best" uses the fastest rlxpy flag
setting. The machine's large-SGEMM GFLOP/s (numpy) is measured first and each case is
reported as a fraction of it.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import sys
import time

import numpy as np

import rlxpy as rx
from rlxpy.thunks import algos

# (name, kind, N, C_in, H, W, C_out, k, stride, pad, groups)
CASES = [
    ("ResNet-18 stem", "conv", 1, 3, 224, 224, 64, 7, 2, 3, 1),
    ("3x3 64@56", "conv", 1, 64, 56, 56, 64, 3, 1, 1, 1),
    ("3x3 s2 64->128", "conv", 1, 64, 56, 56, 128, 3, 2, 1, 1),
    ("3x3 128@28", "conv", 1, 128, 28, 28, 128, 3, 1, 1, 1),
    ("3x3 256@14", "conv", 1, 256, 14, 14, 256, 3, 1, 1, 1),
    ("3x3 512@7", "conv", 1, 512, 7, 7, 512, 3, 1, 1, 1),
    ("1x1 s2 downsample", "conv", 1, 64, 56, 56, 128, 1, 2, 0, 1),
    ("3x3 64@56 batch 8", "conv", 8, 64, 56, 56, 64, 3, 1, 1, 1),
    ("depthwise 3x3", "conv", 1, 144, 56, 56, 144, 3, 1, 1, 144),
    ("pointwise 1x1", "conv", 1, 144, 56, 56, 24, 1, 1, 0, 1),
    ("MNIST conv1", "conv", 64, 1, 28, 28, 32, 3, 1, 0, 1),
    ("MNIST conv2", "conv", 64, 32, 26, 26, 64, 3, 1, 0, 1),
    ("ConvTranspose 4x4 s2", "convT", 8, 256, 16, 16, 128, 4, 2, 1, 1),
    ("Conv3d 3x3x3", "conv3d", 1, 16, 16, 16, 32, 3, 1, 1, 1),
    ("MaxPool 3x3 s2", "maxpool", 1, 64, 112, 112, 64, 3, 2, 1, 1),
    ("backward input 3x3", "bwd_input", 8, 64, 56, 56, 64, 3, 1, 1, 1),
    ("backward weight 3x3", "bwd_weight", 8, 64, 56, 56, 64, 3, 1, 1, 1),
]


def conv_out(h, k, s, p):
    return (h + 2 * p - k) // s + 1


def case_arrays(case, rng):
    name, kind, n, c, h, w, k, ks, s, p, g = case
    f = lambda *shape: (rng.standard_normal(shape) * 0.1).astype(np.float32)  # noqa: E731
    if kind == "conv":
        return {"x": f(n, c, h, w)}, {"w": f(k, c // g, ks, ks)}
    if kind == "convT":
        return {"x": f(n, c, h, w)}, {"w": f(c, k // g, ks, ks)}
    if kind == "conv3d":
        return {"x": f(n, c, h, h, h)}, {"w": f(k, c, ks, ks, ks)}
    if kind == "maxpool":
        return {"x": f(n, c, h, w)}, {}
    oh = conv_out(h, ks, s, p)
    if kind == "bwd_input":
        return {"dy": f(n, k, oh, oh)}, {"w": f(k, c, ks, ks)}
    return {"x": f(n, c, h, w), "dy": f(n, k, oh, oh)}, {}


def flops(case):
    name, kind, n, c, h, w, k, ks, s, p, g = case
    if kind == "maxpool":
        return n * c * conv_out(h, ks, s, p) ** 2 * ks * ks
    if kind == "convT":
        return 2 * n * c * h * w * (k // g) * ks * ks
    if kind == "conv3d":
        return 2 * n * k * conv_out(h, ks, s, p) ** 3 * c * ks ** 3
    return 2 * n * k * conv_out(h, ks, s, p) * conv_out(w, ks, s, p) * (c // g) * ks * ks


def rlx_build(case):
    name, kind, n, c, h, w, k, ks, s, p, g = case

    def build(gr, v):
        if kind == "conv":
            return gr.conv(v["x"], v["w"], stride=s, padding=p, groups=g)
        if kind == "convT":
            return gr.conv_transpose2d(v["x"], v["w"], stride=s, padding=p)
        if kind == "conv3d":
            return gr.conv3d(v["x"], v["w"], stride=s, padding=p)
        if kind == "maxpool":
            return gr.pool(v["x"], "max", ks, stride=s, padding=p)
        if kind == "bwd_input":
            return gr.conv2d_backward_input(v["dy"], v["w"], (None, c, h, w), stride=s, padding=p)
        return gr.conv2d_backward_weight(v["x"], v["dy"], ks, stride=s, padding=p)
    return build


def rlx_runner(case, inputs, params, config):
    g = rx.Graph()
    vals = {nm: g.input(nm, a.shape) for nm, a in inputs.items()}
    vals.update({nm: g.param(nm, a) for nm, a in params.items()})
    g.output("y", rlx_build(case)(g, vals))
    exe = rx.compile(g, config)
    return (lambda: exe.run(inputs)["y"]), exe


def torch_runner(case, inputs, params):
    import torch
    F = torch.nn.functional
    name, kind, n, c, h, w, k, ks, s, p, g = case
    t = {nm: torch.from_numpy(a) for nm, a in {**inputs, **params}.items()}
    fns = {
        "conv": lambda: F.conv2d(t["x"], t["w"], stride=s, padding=p, groups=g),
        "convT": lambda: F.conv_transpose2d(t["x"], t["w"], stride=s, padding=p),
        "conv3d": lambda: F.conv3d(t["x"], t["w"], stride=s, padding=p),
        "maxpool": lambda: F.max_pool2d(t["x"], ks, s, p),
        "bwd_input": lambda: torch.nn.grad.conv2d_input((n, c, h, w), t["w"], t["dy"], stride=s, padding=p),
        "bwd_weight": lambda: torch.nn.grad.conv2d_weight(t["x"], (k, c, ks, ks), t["dy"], stride=s, padding=p),
    }
    fn = fns[kind]

    def run():
        with torch.no_grad():
            return fn().numpy()
    return run


def ort_runner(case, inputs, params, threads):
    """onnxruntime for the forward cases (Conv, ConvTranspose, MaxPool); None otherwise."""
    name, kind, n, c, h, w, k, ks, s, p, g = case
    if kind not in ("conv", "convT", "conv3d", "maxpool"):
        return None
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    x = inputs["x"]
    nsp = x.ndim - 2
    attrs = dict(kernel_shape=[ks] * nsp, strides=[s] * nsp, pads=[p] * (2 * nsp))
    if kind == "conv":
        attrs["group"] = g
    op = {"conv": "Conv", "convT": "ConvTranspose", "conv3d": "Conv", "maxpool": "MaxPool"}[kind]
    node = helper.make_node(op, ["x"] + (["w"] if params else []), ["y"], **attrs)
    graph = helper.make_graph([node], "case", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(params["w"], "w")] if params else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    # ORT's pool spins between calls by default, which would tax whichever peer runs next
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"x": x})[0]


def sgemm_gflops(threads):
    from threadpoolctl import threadpool_limits
    n = 2048
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    with threadpool_limits(threads, user_api="blas"):
        a @ a
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            a @ a
            ts.append(time.perf_counter() - t0)
    return 2 * n ** 3 / min(ts) / 1e9


def time_blocks(runners, reps, warmup=3, passes=2):
    """Each peer runs in a block of its own (warm-up, then reps/passes timed calls), the
    blocks alternating over `passes` rounds; the median of all a peer's calls is its time.
    Blocks rather than one call each in turn: PyTorch's OpenMP threads and numba's keep
    spinning for a while after a parallel region, and a peer timed right after the other
    would pay for that spinning."""
    samples = {k: [] for k in runners}
    for _ in range(passes):
        for k, fn in runners.items():
            time.sleep(0.1)   # let the last peer's pool threads go to sleep
            for _ in range(warmup):
                fn()
            for _ in range(max(1, reps // passes)):
                t0 = time.perf_counter()
                fn()
                samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--check", action="store_true", help="also compare every output with PyTorch's")
    args = ap.parse_args(argv)

    import torch
    base = rx.Config.from_env()
    threads = rx.compile(_tiny_graph(), base).threads
    torch.set_num_threads(threads)
    peak = sgemm_gflops(threads)
    print(f"# rlxpy {rx.__version__}, torch {torch.__version__}, threads {threads}, "
          f"numpy large-SGEMM {peak:.0f} GFLOP/s")
    header = ("case", "rlx ms", "wino ms", "direct ms", "torch ms", "ort ms", "rlx GF/s", "%SGEMM",
              "torch/rlx", "ort/rlx", "torch/best", "algo")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = []
    rng = np.random.default_rng(0)
    for case in CASES:
        if args.only and args.only not in case[0]:
            continue
        runners = exes = None
        gc.collect()            # the previous case's arenas and sessions go before this one is timed
        inputs, params = case_arrays(case, rng)
        runners, exes = {}, {}
        runners["rlx"], exes["rlx"] = rlx_runner(case, inputs, params, base)
        g = dict(x_shape=(1, case[3], 3, 3), y_shape=(1, case[6], 3, 3), kernel=(case[7], case[7]),
                 stride=(case[8], case[8]), dilation=(1, 1), groups=case[10])
        if case[1] == "conv" and algos.winograd_reason(g) is None:
            runners["wino"], exes["wino"] = rlx_runner(case, inputs, params,
                                                       rx.Config(winograd=True, num_threads=base.num_threads))
        if case[1] == "conv" and algos.direct_reason(g) is None and case[7] > 1:
            runners["direct"], exes["direct"] = rlx_runner(case, inputs, params,
                                                           rx.Config(direct_conv=True, num_threads=base.num_threads))
        runners["torch"] = torch_runner(case, inputs, params)
        o = ort_runner(case, inputs, params, threads)
        if o is not None:
            runners["ort"] = o
        if args.check:
            ref = runners["torch"]()
            for k in runners:
                out = runners[k]()
                err = float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max()))
                assert err < 2e-3, (case[0], k, err)
        ms = time_blocks(runners, args.reps)
        best = min(ms[k] for k in ("rlx", "wino", "direct") if k in ms)
        gf = flops(case) / ms["rlx"] / 1e6
        row = dict(case=case[0], ms=ms, best=best, gf=gf, torch_ratio=ms["torch"] / ms["rlx"],
                   ort_ratio=(ms["ort"] / ms["rlx"]) if "ort" in ms else None,
                   best_ratio=ms["torch"] / best, algo=exes["rlx"].thunks[0].algo)
        rows.append(row)
        cell = lambda k: f"{ms[k]:.3f}" if k in ms else "-"  # noqa: E731
        ort = f"{row['ort_ratio']:.2f}" if row["ort_ratio"] is not None else "-"
        cells = [case[0], cell("rlx"), cell("wino"), cell("direct"), cell("torch"), cell("ort"), f"{gf:.1f}",
                 f"{100 * gf / peak:.0f}%", f"{row['torch_ratio']:.2f}", ort, f"{row['best_ratio']:.2f}", row["algo"]]
        print("| " + " | ".join(cells) + " |")
        sys.stdout.flush()
    wino_gain = [r["ms"]["rlx"] / r["ms"]["wino"] for r in rows if "wino" in r["ms"]]
    print()
    print(f"geomean torch/rlx (default flags): {geomean([r['torch_ratio'] for r in rows]):.2f}")
    print(f"geomean torch/rlx (best flags):    {geomean([r['best_ratio'] for r in rows]):.2f}")
    print(f"geomean ort/rlx (forward cases):   {geomean([r['ort_ratio'] for r in rows if r['ort_ratio']]):.2f}")
    print(f"min torch/rlx: {min(r['torch_ratio'] for r in rows):.2f} "
          f"({min(rows, key=lambda r: r['torch_ratio'])['case']})")
    if wino_gain:
        print("winograd speed-up over im2col: " + ", ".join(
            f"{r['case']} {r['ms']['rlx'] / r['ms']['wino']:.2f}x" for r in rows if "wino" in r["ms"]))


def _tiny_graph():
    g = rx.Graph()
    g.output("y", g.resize_nearest2x(g.input("x", (1, 1, 1, 1))))
    return g


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
