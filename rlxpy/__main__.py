"""python -m rlxpy demo: build a small CNN, compile it, run it, show which kernels ran.
python -m rlxpy run MODEL.onnx [--input NAME=file.npy ...] [--batch N] [--runs R]: import an
ONNX model, run it (random inputs where none are given), print the outputs' shapes,
explain() and the median latency."""
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
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        exe.run(feeds)
        times.append(time.perf_counter() - t0)
    for name, arr in out.items():
        print(f"output {name!r}: shape {list(arr.shape)}")
    print(exe.explain())
    print(f"median latency over {runs} runs: {1e3 * float(np.median(times)):.3f} ms "
          f"(inputs {', '.join(f'{k} {list(v.shape)}' for k, v in feeds.items())}; {exe.threads} threads)")


def main(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlxpy")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="build, compile and run a small CNN, and explain it")
    run = sub.add_parser("run", help="import an ONNX model and run it")
    run.add_argument("model", help="path to an .onnx file")
    run.add_argument("--input", action="append", default=[], metavar="NAME=file.npy", help="an input's data")
    run.add_argument("--batch", type=int, default=1, help="the size of dynamic dims of random inputs (default 1)")
    run.add_argument("--runs", type=int, default=10, help="timed runs after the first (default 10)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo()
    else:
        run_model(args.model, args.input, args.batch, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
