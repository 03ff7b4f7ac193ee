"""The command line:
  demo                 build a small CNN, compile it, run it, show which kernels ran
  run MODEL.onnx       import, run (random inputs where no --input NAME=file.npy), print the
                       outputs' shapes, explain() and the median latency
  profile MODEL.onnx   the per-thunk profile table (--trace out.json, --plot out.png)
  bench MODEL.onnx     median latency at --batch sizes, against onnxruntime when installed
  env                  versions, CPU, SIMD width, threads, BLAS, caches: for bug reports
  warmup               compile every CPU kernel into numba's cache ahead of use"""
import argparse
import sys
import time

import numpy as np

import rlxpy as rx


def demo_graph(rng) -> rx.Graph:
    def p(name, *shape):
        return g.param(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))

    g = rx.Graph()
    x = g.input("image", (None, 3, 32, 32))
    y = g.conv(x, p("stem.w", 16, 3, 3, 3), bias=p("stem.b", 16), stride=1, padding=1, name="stem")
    y = g.pool(y, "max", kernel_size=2, stride=2, name="pool1")
    y = g.conv(y, p("dw.w", 16, 1, 3, 3), padding=1, groups=16, name="depthwise")
    y = g.conv(y, p("pw.w", 32, 16, 1, 1), name="pointwise")
    y = g.conv(y, p("down.w", 32, 32, 3, 3), stride=2, padding=1, name="down")
    y = g.conv_transpose2d(y, p("up.w", 32, 16, 4, 4), stride=2, padding=1, name="up")
    y = g.resize_nearest2x(y, name="resize")
    y = g.conv(y, p("head.w", 4, 16, 3, 3), padding=(1, 1), name="head")
    y = g.pool(y, "avg", kernel_size=4, stride=4, name="avgpool")
    g.output("logits", y)
    return g


def demo() -> None:
    rng = np.random.default_rng(0)
    g = demo_graph(rng)
    t0 = time.perf_counter()
    exe = rx.compile(g)
    batch = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    out = exe.run({"image": batch})["logits"]
    t1 = time.perf_counter()
    out2 = exe.run({"image": batch})["logits"]
    t2 = time.perf_counter()
    print(f"config: {exe.config}")
    print(exe.explain())
    print(f"output 'logits': shape {out.shape}, mean {out.mean():+.5f}, std {out.std():.5f}")
    print(f"first run (compile + numba load) {t1 - t0:.2f} s; second run {1e3 * (t2 - t1):.1f} ms; "
          f"runs agree: {np.array_equal(out, out2)}")


def _feeds(g: rx.Graph, given, batch: int, rng):
    """The model's inputs: from .npy files where given, else random, with every dynamic dim
    (the batch) bound to `batch`."""
    feeds = {}
    for spec in given:
        name, _, path = spec.partition("=")
        if name not in g.inputs or not path:
            raise SystemExit(f"--input {spec!r}: expected NAME=file.npy with NAME one of {sorted(g.inputs)}")
        feeds[name] = np.load(path).astype(np.float32)
    for name, vid in g.inputs.items():
        if name not in feeds:
            shape = tuple(d if isinstance(d, int) else batch for d in g.nodes[vid].shape)
            feeds[name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def run_model(path: str, given, batch: int, runs: int) -> None:
    g = rx.onnx.load(path)
    exe = rx.compile(g)
    feeds = _feeds(g, given, batch, np.random.default_rng(0))
    out = exe.run(feeds)
    latency = _median_ms(lambda: exe.run(feeds), runs)
    for name, arr in out.items():
        print(f"output {name!r}: shape {list(arr.shape)}")
    print(exe.explain())
    print(f"median latency over {runs} runs: {latency:.3f} ms "
          f"(inputs {', '.join(f'{k} {list(v.shape)}' for k, v in feeds.items())}; {exe.threads} threads)")


def _median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def profile_model(path: str, given, batch: int, repeat: int, trace, plot) -> None:
    g = rx.onnx.load(path)
    exe = rx.compile(g)
    prof = exe.profile(_feeds(g, given, batch, np.random.default_rng(0)), repeat=repeat)
    print(prof)
    if trace:
        prof.save_chrome_trace(trace)
        print(f"trace: {trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    if plot:
        prof.plot(plot)
        print(f"plot: {plot}")


def bench_model(path: str, batches, runs: int) -> None:
    """rlxpy against onnxruntime (when installed) on the same inputs and thread count."""
    g = rx.onnx.load(path)
    exe = rx.compile(g)
    try:
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = exe.threads
        opts.inter_op_num_threads = 1
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    except ImportError:
        session = None
    from .cpu_kernels.host import cpu_model
    print(f"# {path}: {cpu_model()}, {exe.threads} threads; median of {runs} runs after one warm-up")
    print("batch  rlxpy ms  onnxruntime ms  onnxruntime/rlxpy")
    for batch in batches:
        feeds = _feeds(g, [], batch, np.random.default_rng(batch))
        exe.run(feeds)
        mine = _median_ms(lambda: exe.run(feeds), runs)
        if session is None:
            print(f"{batch:5d}  {mine:8.3f}  {'(not installed)':>14}")
            continue
        session.run(None, feeds)
        theirs = _median_ms(lambda: session.run(None, feeds), runs)
        print(f"{batch:5d}  {mine:8.3f}  {theirs:14.3f}  {theirs / mine:17.2f}")


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlxpy")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="build, compile and run a small CNN, and explain it")
    run = sub.add_parser("run", help="import an ONNX model and run it")
    prof = sub.add_parser("profile", help="time every thunk of an ONNX model")
    for p in (run, prof):
        p.add_argument("model", help="path to an .onnx file")
        p.add_argument("--input", action="append", default=[], metavar="NAME=file.npy", help="an input's data")
        p.add_argument("--batch", type=int, default=1, help="the size of dynamic dims of random inputs (default 1)")
    run.add_argument("--runs", type=int, default=10, help="timed runs after the first (default 10)")
    prof.add_argument("--repeat", type=int, default=10, help="runs per thunk, the median kept (default 10)")
    prof.add_argument("--trace", metavar="OUT.json", help="write a Chrome / Perfetto trace")
    prof.add_argument("--plot", metavar="OUT.png", help="write a bar chart (needs matplotlib)")
    bench = sub.add_parser("bench", help="latency of an ONNX model against onnxruntime")
    bench.add_argument("model", help="path to an .onnx file")
    bench.add_argument("--batch", type=int, nargs="+", default=[1, 8], help="batch sizes (default 1 8)")
    bench.add_argument("--runs", type=int, default=20, help="timed runs per batch size (default 20)")
    sub.add_parser("env", help="versions, CPU, SIMD width, threads, BLAS and caches")
    warm = sub.add_parser("warmup", help="compile every CPU kernel into numba's on-disk cache")
    warm.add_argument("--width", type=int, action="append", choices=(16, 8, 1),
                      help="SIMD widths to compile for (default: the host's widest; repeatable)")
    warm.add_argument("--only", default="", help="only the jobs whose label contains this text")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo()
    elif args.command == "run":
        run_model(args.model, args.input, args.batch, args.runs)
    elif args.command == "profile":
        profile_model(args.model, args.input, args.batch, args.repeat, args.trace, args.plot)
    elif args.command == "bench":
        bench_model(args.model, args.batch, args.runs)
    elif args.command == "env":
        from .environment import format_report
        print(format_report())
    else:
        from .warmup import warmup
        t0 = time.perf_counter()
        n = warmup(args.width, args.only)
        print(f"warmup: {n} jobs in {time.perf_counter() - t0:.1f} s; kernels cached for the next process")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
