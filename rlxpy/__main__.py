"""python -m rlxpy demo: build a small CNN, compile it, run it, show which kernels ran."""
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


def main(argv) -> int:
    if argv[:1] == ["demo"]:
        demo()
        return 0
    print("usage: python -m rlxpy demo", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
