"""rlxpy's Triton kernels vs PyTorch's CUDA convolution on the same GPU.

    python bench/triton_suite.py [--batches 1,32] [--simple] [--only NAME] [--no-backward] [--nchw]

Each kernel is timed on arena views, without host copies but with whatever its launcher
does on the device (the implicit GEMM's channels-last copy of x, the zeroing of an
atomically accumulated output), twice: replayed from a CUDA graph
(triton.testing.do_bench_cudagraph: GPU time) and launched from Python
(triton.testing.do_bench: adds the Python-side launch cost); medians after warm-up. PyTorch
runs F.conv2d / torch.nn.grad with cuDNN, TF32 allowed (the implicit GEMM's tl.dot is TF32
too), timed the same two ways. Prints TFLOP/s and the ratio torch_time / rlx_time
(> 1: rlxpy faster), plus the max error of each against a float64 result.
"""
import argparse
import functools
import os

import torch
import triton.testing

import rlxpy as rx
from rlxpy.testing import cases

# medians of the timed repeats (do_bench's default is the mean)
do_bench = functools.partial(triton.testing.do_bench, return_mode="median")
do_bench_graph = functools.partial(triton.testing.do_bench_cudagraph, return_mode="median")


def timed(fn, **kw):
    """(GPU time from CUDA-graph replays, time of launches from Python) in ms. The first is
    what the kernels cost and what exe.run pays once it replays its graph; the second adds
    the Python-side launch cost, which bounds a sub-0.1 ms kernel launched alone."""
    fn()       # compile and autotune outside the graph
    return do_bench_graph(fn), do_bench(fn, **kw)


F = torch.nn.functional
# the forward cases of the shared table that this suite times, at every --batches size
GPU_LABELS = ("ResNet-18 stem", "3x3 64@56", "3x3 s2 64->128", "3x3 128@28", "3x3 256@14", "3x3 512@7",
              "1x1 s2 downsample", "pointwise 1x1")
CASES = [c for c in cases("bench") if c.label in GPU_LABELS]


def conv_of(case):
    """(C_in, H, C_out, k, stride, pad) of a square 2-D conv case."""
    (_, x), (_, w) = case.inputs[0], case.params[0]
    return x[1], x[2], w[0], w[2], case.kw["stride"], case.kw["padding"]


def arena_with_inputs(exe, inputs):
    """An arena of the inputs' plan (with its bound calls) holding the inputs."""
    bound = exe._compile_for(exe.check_inputs(inputs)).pool.acquire()
    for name, view in bound.inputs:
        exe.backend.copy_into(view, inputs[name])
    return bound


def kernel_of(exe, inputs):
    """The first thunk's bound launcher and a view of the output: times the kernel alone."""
    bound = arena_with_inputs(exe, inputs)
    launch, th = bound.calls[0]
    out = bound.outputs[0][1]
    return launch, (lambda: out), th


IGEMM = "igemm"     # the forward implicit GEMM's algo (--nchw: igemm_nchw)


def rel_err(a, exact):
    return ((a.double() - exact).abs().max() / exact.abs().max()).item()


def bench_forward(name, n, c, h, k, ks, s, p, with_simple):
    torch.manual_seed(0)
    x = torch.randn(n, c, h, h, device="cuda")
    w = torch.randn(k, c, ks, ks, device="cuda") / (c * ks * ks) ** 0.5
    g = rx.Graph()
    g.output("y", g.conv(g.input("x", tuple(x.shape)), g.param("w", w.cpu().numpy()), stride=s, padding=p))
    exact = F.conv2d(x.double(), w.double(), stride=s, padding=p)
    flops = 2 * exact.numel() * c * ks * ks
    rows = []
    torch_ms = timed(lambda: F.conv2d(x, w, stride=s, padding=p))
    torch_err = rel_err(F.conv2d(x, w, stride=s, padding=p), exact)
    for algo in ([IGEMM, "simple"] if with_simple else [IGEMM]):
        os.environ["RLX_TRITON_ALGO"] = algo
        exe = rx.compile(g, device="cuda")
        launch, out, rec = kernel_of(exe, {"x": x})
        launch()
        err = rel_err(out(), exact)
        ms = timed(launch)
        rows.append((f"{name} N={n}", rec.algo, ms, torch_ms, flops, err, torch_err))
    return rows


def bench_backward(n, with_simple):
    c = k = 64
    h, ks, p = 56, 3, 1
    torch.manual_seed(0)
    x = torch.randn(n, c, h, h, device="cuda")
    w = torch.randn(k, c, ks, ks, device="cuda") / (c * ks * ks) ** 0.5
    dy = torch.randn(n, k, h, h, device="cuda")
    flops = 2 * n * k * h * h * c * ks * ks
    rows = []
    for kind in ("backward input", "backward weight"):
        g = rx.Graph()
        if kind == "backward input":
            g.output("d", g.conv2d_backward_input(g.input("dy", tuple(dy.shape)), g.param("w", w.cpu().numpy()),
                                                  (None, c, h, h), padding=p))
            inputs = {"dy": dy}
            ref = lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, padding=p)  # noqa: E731
            exact = torch.nn.grad.conv2d_input(x.shape, w.double(), dy.double(), padding=p)
        else:
            g.output("d", g.conv2d_backward_weight(g.input("x", tuple(x.shape)), g.input("dy", tuple(dy.shape)), ks,
                                                   padding=p))
            inputs = {"x": x, "dy": dy}
            ref = lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, padding=p)  # noqa: E731
            exact = torch.nn.grad.conv2d_weight(x.double(), w.shape, dy.double(), padding=p)
        torch_ms = timed(ref)
        for algo in (["igemm", "simple"] if with_simple else ["igemm"]):
            os.environ["RLX_TRITON_ALGO"] = algo
            exe = rx.compile(g, device="cuda")
            launch, out, rec = kernel_of(exe, inputs)
            launch()
            err = rel_err(out(), exact)
            # the atomic (simple) kernels take seconds at batch 32: timed only at batch 1
            ms = timed(launch, warmup=5, rep=50) if n == 1 or algo == "igemm" else (float("nan"),) * 2
            rows.append((f"3x3 64@56 {kind} N={n}", rec.algo, ms, torch_ms, flops, err, rel_err(ref(), exact)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--simple", action="store_true", help="also time the simple (reference) kernels, at batch 1")
    ap.add_argument("--no-backward", action="store_true", help="forward cases only")
    ap.add_argument("--only", default="", help="forward cases whose name contains this")
    ap.add_argument("--nchw", action="store_true", help="implicit GEMM reads NCHW x in place (no channels-last copy)")
    args = ap.parse_args()
    global IGEMM
    IGEMM = "igemm_nchw" if args.nchw else "igemm"
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    print("| case | rlx kernel | rlx us | torch us | rlx TFLOP/s | torch TFLOP/s | torch/rlx | "
          "launched: rlx us | torch us | torch/rlx | rlx rel err | torch rel err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in [int(b) for b in args.batches.split(",")]:
        rows = []
        for case in [c for c in CASES if args.only in c.id]:
            rows += bench_forward(case.id, n, *conv_of(case), with_simple=args.simple and n == 1)
        if not args.no_backward:
            rows += bench_backward(n, args.simple and n == 1)
        for name, algo, (ms, ms_l), (tms, tms_l), flops, err, terr in rows:
            print(f"| {name} | {algo} | {ms * 1e3:.1f} | {tms * 1e3:.1f} | {flops / ms / 1e9:.1f} | "
                  f"{flops / tms / 1e9:.1f} | {tms / ms:.2f} | {ms_l * 1e3:.1f} | {tms_l * 1e3:.1f} | "
                  f"{tms_l / ms_l:.2f} | {err:.1e} | {terr:.1e} |", flush=True)


if __name__ == "__main__":
    main()
