"""rlxpy vs PyTorch CPU vs onnxruntime CPU, side by side in one process.

    python bench/conv_suite.py [--reps 30] [--only SUBSTRING] [--markdown]

The header names the CPU, the SIMD width (RLX_SIMD_WIDTH, default the host's widest) and
the thread count. Each case runs through rlxpy with default flags and with every other
algo in CANDIDATES that can run it ("best": the fastest of them), PyTorch
(torch.set_num_threads = rlxpy's thread count) and onnxruntime (forward cases; intra-op
threads = the same). Peers are timed in alternating blocks (see time_blocks),
each getting the median of its calls after warm-up. Ratios are peer_time / rlxpy_time
(> 1: rlxpy is faster), with rlxpy at default flags; "best" uses the fastest rlxpy algo.
Each case's arena is reported in MiB; the machine's large-SGEMM GFLOP/s (numpy) is printed
as a ceiling to read the GFLOP/s columns against.
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
from rlxpy.config import CONV_ALGOS
from rlxpy.testing import Case, case_arrays, cases, main_thunk, one_node_graph
from rlxpy.thunks.cost import flops

CASES = cases("bench")   # rlxpy/testing.py: the table the tests draw from too


def rlx_runner(case: Case, inputs, params, config):
    exe = rx.compile(one_node_graph(case, inputs, params, dynamic_batch=False, output="y"), config)
    return (lambda: exe.run(inputs)["y"]), exe


def torch_runner(case: Case, inputs, params):
    import torch
    F = torch.nn.functional
    kw = case.kw
    t = {nm: torch.from_numpy(a) for nm, a in {**inputs, **params}.items()}
    geo = {k: kw[k] for k in ("stride", "padding") if k in kw}
    fns = {
        "conv": lambda: F.conv2d(t["x"], t["w"], groups=kw["groups"], **geo),
        "conv_transpose2d": lambda: F.conv_transpose2d(t["x"], t["w"], **geo),
        "conv3d": lambda: F.conv3d(t["x"], t["w"], **geo),
        "pool": lambda: F.max_pool2d(t["x"], kw["kernel_size"], kw["stride"], kw["padding"]),
        "conv2d_backward_input": lambda: torch.nn.grad.conv2d_input(
            (t["dy"].shape[0],) + tuple(kw["input_shape"][1:]), t["w"], t["dy"], **geo),
        "conv2d_backward_weight": lambda: torch.nn.grad.conv2d_weight(
            t["x"], (t["dy"].shape[1], t["x"].shape[1]) + tuple(kw["kernel_size"]), t["dy"], **geo),
    }
    fn = fns[case.op]

    def run():
        with torch.no_grad():
            return fn().numpy()
    return run


def ort_runner(case: Case, inputs, params, threads):
    """onnxruntime for the forward cases (Conv, ConvTranspose, MaxPool); None otherwise."""
    op = {"conv": "Conv", "conv_transpose2d": "ConvTranspose", "conv3d": "Conv", "pool": "MaxPool"}.get(case.op)
    if op is None:
        return None
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    kw, x = case.kw, inputs["x"]
    nsp = x.ndim - 2
    ks = params["w"].shape[2:] if params else (kw["kernel_size"],) * nsp
    attrs = dict(kernel_shape=list(ks), strides=[kw["stride"]] * nsp, pads=[kw["padding"]] * (2 * nsp))
    if case.op == "conv":
        attrs["group"] = kw["groups"]
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


def time_blocks(runners, reps, warmup=3, block=15):
    """Each peer runs in blocks of its own (warm-up, then `block` timed calls), the blocks
    alternating over ceil(reps / block) rounds; the median of all a peer's calls is its time.
    Blocks rather than one call each in turn: PyTorch's OpenMP threads and numba's keep
    spinning for a while after a parallel region, and a peer timed right after the other
    would pay for that spinning. This machine's speed drifts by up to 40% for minutes at a
    time (both peers alike: a noisy neighbour), so more rounds of shorter blocks would be
    fairer, but blocks of 5 calls doubled onnxruntime's single-image times in the suite
    (its first calls after an idle spell are slow): 15 calls, reps / 15 rounds."""
    samples = {k: [] for k in runners}
    passes = max(1, -(-reps // block))
    for _ in range(passes):
        for k, fn in runners.items():
            time.sleep(0.1)   # let the last peer's pool threads go to sleep
            for _ in range(warmup):
                fn()
            for _ in range(min(block, reps)):
                t0 = time.perf_counter()
                fn()
                samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


# Algos tried for "best" beside the default: every name RLX_CONV_ALGO takes but the
# reference kernel (each only where eligible: a forced algo that can't run a case falls
# back to the default choice, and is then not timed twice).
CANDIDATES = tuple(a for a in CONV_ALGOS if a not in ("auto", "naive"))


def cpu_header(threads: int) -> str:
    from rlxpy.cpu_kernels import simd
    from rlxpy.cpu_kernels.host import cpu_model, llvm_cpu
    width = simd.resolve_width(rx.Config.from_env().simd_width)
    return (f"# CPU: {cpu_model()} (LLVM host {llvm_cpu()}), SIMD width {width} float32 lanes "
            f"(host widths {simd.host_widths()}), threads {threads}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--only", default="")
    ap.add_argument("--check", action="store_true", help="also compare every output with PyTorch's")
    ap.add_argument("--plot", metavar="OUT.png", help="write the ratio per case against each peer (matplotlib)")
    args = ap.parse_args(argv)

    import torch
    base = rx.Config.from_env()
    threads = rx.compile(_tiny_graph(), base).threads
    torch.set_num_threads(threads)
    peak = sgemm_gflops(threads)
    print(cpu_header(threads))
    print(f"# rlxpy {rx.__version__}, torch {torch.__version__}, numpy large-SGEMM {peak:.0f} GFLOP/s")
    header = ("case", "algo", "rlx ms", "best ms (algo)", "torch ms", "ort ms", "rlx GF/s", "torch GF/s", "ort GF/s",
              "torch/rlx", "ort/rlx", "torch/best", "arena MiB")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = []
    for case in CASES:
        if args.only and args.only not in case.id:
            continue
        runners = exes = None
        gc.collect()            # the previous case's arenas and sessions go before this one is timed
        inputs, params = case_arrays(case, seed=0, scale=0.1)
        runners, exes = {}, {}
        runners["rlx"], exes["rlx"] = rlx_runner(case, inputs, params, base)
        own = main_thunk(exes["rlx"])
        rec = own.record
        seen = {own.algo}
        for algo in CANDIDATES:
            run, exe = rlx_runner(case, inputs, params, base.replace(conv_algo=algo))
            if main_thunk(exe).algo not in seen:
                seen.add(main_thunk(exe).algo)
                runners[algo], exes[algo] = run, exe
        runners["torch"] = torch_runner(case, inputs, params)
        o = ort_runner(case, inputs, params, threads)
        if o is not None:
            runners["ort"] = o
        if args.check:
            ref = runners["torch"]()
            for k in runners:
                out = runners[k]()
                err = float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max()))
                assert err < 2e-3, (case.id, k, err)
        ms = time_blocks(runners, args.reps)
        rlx_keys = [k for k in ms if k not in ("torch", "ort")]
        best_key = min(rlx_keys, key=lambda k: ms[k])
        best = ms[best_key]
        f = flops(rec)
        gf = f / ms["rlx"] / 1e6
        row = dict(case=case.id, ms=ms, best=best, gf=gf, torch_ratio=ms["torch"] / ms["rlx"],
                   ort_ratio=(ms["ort"] / ms["rlx"]) if "ort" in ms else None,
                   best_ratio=ms["torch"] / best, algo=own.algo)
        rows.append(row)
        cell = lambda k: f"{ms[k]:.3f}" if k in ms else "-"  # noqa: E731
        rate = lambda k: f"{f / ms[k] / 1e6:.0f}" if k in ms and f else "-"  # noqa: E731
        ort = f"{row['ort_ratio']:.2f}" if row["ort_ratio"] is not None else "-"
        best_algo = main_thunk(exes[best_key]).algo
        cells = [case.id, own.algo, cell("rlx"), f"{best:.3f} ({best_algo})", cell("torch"), cell("ort"),
                 rate("rlx"), rate("torch"), rate("ort"), f"{row['torch_ratio']:.2f}", ort, f"{row['best_ratio']:.2f}",
                 f"{exes['rlx'].plan().arena_bytes / 2**20:.1f}"]
        print("| " + " | ".join(cells) + " |")
        sys.stdout.flush()
    forward = [r for r in rows if r["ort_ratio"]]
    backward = [r for r in rows if r["ort_ratio"] is None]
    print()
    print(f"geomean torch/rlx (default flags), forward:  {geomean([r['torch_ratio'] for r in forward]):.2f}")
    print(f"geomean ort/rlx (default flags), forward:    {geomean([r['ort_ratio'] for r in forward]):.2f}")
    print(f"geomean torch/rlx (best algo), forward:      {geomean([r['best_ratio'] for r in forward]):.2f}")
    if backward:
        print(f"geomean torch/rlx (default flags), backward: {geomean([r['torch_ratio'] for r in backward]):.2f}")
    if rows:
        worst = min(rows, key=lambda r: r["torch_ratio"])
        print(f"min torch/rlx: {worst['torch_ratio']:.2f} ({worst['case']})")
    if args.plot and rows:
        plot_ratios(rows, args.plot, cpu_header(threads))
        print(f"plot: {args.plot}")


def plot_ratios(rows, path, title):
    """Peer time / rlxpy time per case (above 1: rlxpy is faster), one bar per peer."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(rows)
    fig, ax = plt.subplots(figsize=(10, 0.3 * n + 1.5))
    ys = np.arange(n)
    ax.barh(ys - 0.2, [r["torch_ratio"] for r in rows], height=0.4, label="PyTorch / rlxpy")
    ax.barh(ys + 0.2, [r["ort_ratio"] or 0.0 for r in rows], height=0.4, label="onnxruntime / rlxpy")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(ys, [r["case"] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time ratio (> 1: rlxpy faster)")
    ax.set_title(title.lstrip("# "), fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _tiny_graph():
    g = rx.Graph()
    g.output("y", g.resize_nearest2x(g.input("x", (1, 1, 1, 1))))
    return g


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
