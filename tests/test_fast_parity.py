"""Every fast kernel against its reference kernel, through the public API: the same graph
compiled with a fast Config and with RLX_FAST_CONV off. Each case also asserts which
algorithm ran, so a silent fallback to the reference kernel fails the test.

Tolerances are relative to max(1, max|reference|) (helpers.assert_close); the reference
accumulates in float64.
- GEMM-based kernels (im2col, gemm1x1, col2im, depthwise, direct) accumulate in float32 in
  a different order: the error grows like sqrt(reduction length) * 2^-24, far under 1e-4
  for the reductions here (<= 64*9*... terms).
- Winograd rounds in its transforms too: inputs are combined in sums of up to 4 terms and
  outputs of up to 9 (A^T M A), and the filter transform multiplies by 1/2, so each product
  carries a few extra roundings and cancellation between large partial sums: 1e-3.
"""
import numpy as np
import pytest

import rlxpy as rx
from rlxpy.cpu_kernels import choose as algos

from helpers import REFERENCE, assert_close, rand, run_graph

FAST = rx.Config()
WINOGRAD = rx.Config(winograd=True)
DIRECT = rx.Config(direct_conv=True)
CONFIGS = {"default": FAST, "winograd": WINOGRAD, "direct": DIRECT}
TOL = {"im2col": 1e-4, "gemm1x1": 1e-4, "direct": 1e-4, "depthwise": 1e-4, "winograd": 1e-3}


def expected_conv2d_algo(config, k, stride, dilation, groups, c, kout, pointwise):
    """DESIGN.md's precedence, restated: Winograd, direct, (depthwise), im2col; 1x1 -> GEMM."""
    if pointwise:
        return "gemm1x1"
    if config.winograd and k == (3, 3) and stride == (1, 1) and dilation == (1, 1) and groups == 1:
        return "winograd"
    if config.direct_conv and stride == (1, 1) and dilation == (1, 1):
        return "direct"
    if c == groups:              # one input channel per group
        return "depthwise"
    return "im2col"


def _pair(v, n):
    return tuple(v) if isinstance(v, tuple) else (v,) * n


# (N, C, spatial, K, kernel, stride, padding, dilation, groups, bias)
CONV_CASES = [
    (1, 3, (9, 11), 8, (3, 3), 1, 1, 1, 1, True),              # winograd-eligible, odd output
    (3, 5, (7, 8), 6, (3, 3), 1, ((2, 0), (1, 2)), 1, 1, False),  # winograd with asymmetric pads
    (3, 4, (10, 9), 6, (3, 3), 1, 0, 1, 2, True),              # groups 2
    (1, 64, (13, 13), 64, (3, 3), 1, 1, 1, 1, True),           # C >= 64
    (3, 72, (7, 6), 80, (3, 3), 1, 1, 1, 1, False),            # C >= 64, N > 1, tiny image
    (2, 8, (11, 11), 8, (3, 3), 1, 1, 1, 8, True),             # depthwise
    (1, 16, (15, 14), 16, (5, 5), 2, 2, 1, 16, False),         # depthwise stride 2
    (2, 6, (13, 12), 6, (3, 3), 1, 2, 2, 6, True),             # depthwise dilation 2
    (1, 1, (9, 9), 4, (3, 3), 1, 0, 1, 1, False),              # C = 1 (the per-channel kernel)
    (2, 1, (10, 9), 3, (2, 3), 2, 1, 1, 1, True),              # C = 1, stride 2
    (2, 2, (8, 8), 6, (3, 3), 1, 1, 1, 2, True),               # channel multiplier 3
    (3, 6, (12, 11), 4, (3, 3), 1, 2, 2, 1, True),             # dilation 2
    (1, 4, (15, 16), 8, (3, 3), 2, 1, 1, 1, True),             # stride 2
    (3, 3, (11, 10), 5, (2, 2), 3, 0, 1, 1, False),            # stride > kernel
    (2, 3, (23, 21), 16, (7, 7), 2, 3, 1, 1, True),            # a stem-like conv
    (3, 12, (5, 7), 10, (1, 1), 1, 0, 1, 1, True),             # 1x1 -> Conv2D1x1
    (1, 64, (14, 14), 32, (1, 1), 2, 0, 1, 1, False),          # 1x1 stride 2 -> im2col
    (2, 4, (6, 6), 4, (4, 2), 1, ((0, 3), (1, 0)), 1, 2, True),
    (3, 3, (17,), 8, (5,), 2, ((2, 1),), 2, 1, True),          # 1-D
    (1, 4, (20,), 4, (3,), 1, 1, 1, 4, False),                 # 1-D depthwise
    (1, 8, (16,), 12, (3,), 1, 1, 1, 1, True),                 # 1-D stride 1 (direct-eligible)
]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv_fast_kernels_match_reference(case, name):
    config = CONFIGS[name]
    n, c, sp, k, ker, stride, padding, dilation, groups, bias = case
    rng = np.random.default_rng(20)
    x, w = rand(rng, n, c, *sp), rand(rng, k, c // groups, *ker)
    params = {"w": w} | ({"b": rand(rng, k)} if bias else {})

    def build(g, v):
        return g.conv(v["x"], v["w"], bias=v.get("b"), stride=stride, padding=padding, dilation=dilation,
                      groups=groups)

    ref, _ = run_graph(build, {"x": x}, params, REFERENCE)
    out, exe = run_graph(build, {"x": x}, params, config)
    nsp = len(sp)
    lift = (lambda t: (1,) + t) if nsp == 1 else (lambda t: t)
    pointwise = ker == (1,) * nsp and _pair(stride, nsp) == (1,) * nsp and padding == 0 and groups == 1
    algo = expected_conv2d_algo(config, lift(tuple(ker)), lift(_pair(stride, nsp)), lift(_pair(dilation, nsp)),
                                groups, c, k, pointwise)
    assert exe.thunks[0].algo == algo, exe.explain()
    assert_close(out, ref, TOL[algo], f"{name} {algo} {case}")


def test_winograd_with_a_weight_that_changes_between_runs():
    """A weight that is a graph input is transformed on every run, not cached."""
    g = rx.Graph()
    x, w = g.input("x", (2, 8, 9, 9)), g.input("w", (8, 8, 3, 3))
    g.output("y", g.conv(x, w, padding=1))
    fast, ref = rx.compile(g, WINOGRAD), rx.compile(g, REFERENCE)
    assert fast.thunks[0].algo == "winograd" and not fast.thunks[0].record.weight_const
    rng = np.random.default_rng(21)
    xv = rand(rng, 2, 8, 9, 9)
    for _ in range(2):
        wv = rand(rng, 8, 8, 3, 3)
        assert_close(fast.run({"x": xv, "w": wv})["y"], ref.run({"x": xv, "w": wv})["y"], TOL["winograd"])


def test_winograd_param_transform_is_cached_per_arena_and_stays_right():
    rng = np.random.default_rng(22)
    x = rand(rng, 1, 16, 10, 10)
    build = lambda g, v: g.conv(v["x"], v["w"], padding=1)  # noqa: E731
    params = {"w": rand(rng, 16, 16, 3, 3)}
    ref, _ = run_graph(build, {"x": x}, params, REFERENCE)
    out, exe = run_graph(build, {"x": x}, params, WINOGRAD)
    assert exe.thunks[0].record.weight_const and exe.thunks[0].persistent_bytes > 0
    for _ in range(3):
        assert_close(exe.run({"x": x})["out"], ref, TOL["winograd"])


def test_im2col_scratch_over_the_cap_takes_the_reference_kernel(monkeypatch):
    monkeypatch.setattr(algos, "SCRATCH_CAP_BYTES", 1024)
    rng = np.random.default_rng(23)
    x = rand(rng, 1, 8, 12, 12)
    out, exe = run_graph(lambda g, v: g.conv(v["x"], v["w"], padding=1), {"x": x}, {"w": rand(rng, 8, 8, 3, 3)}, FAST)
    rec = exe.thunks[0]
    assert rec.algo == "naive" and "cap 1024" in rec.why and rec.scratch_bytes == 0
    assert "cap 1024" in exe.explain()


def test_explain_says_why_winograd_was_not_taken():
    rng = np.random.default_rng(24)
    _, exe = run_graph(lambda g, v: g.conv(v["x"], v["w"], stride=2, padding=1), {"x": rand(rng, 1, 4, 8, 8)},
                       {"w": rand(rng, 4, 4, 3, 3)}, WINOGRAD)
    assert exe.thunks[0].algo == "im2col"
    assert "winograd requested but stride (2, 2)" in exe.explain()


# --- the other families -------------------------------------------------------------------

def _conv3d(g, v, **kw):
    return g.conv3d(v["x"], v["w"], bias=v.get("b"), **kw)


# (name, builder, inputs shapes, params shapes, expected algo)
OTHER_CASES = [
    ("conv3d", lambda g, v: g.conv3d(v["x"], v["w"], bias=v["b"], stride=(1, 2, 1), padding=((1, 0), 1, (0, 2)),
                                     dilation=(1, 1, 2), groups=2),
     {"x": (3, 4, 5, 6, 7)}, {"w": (6, 2, 3, 2, 3), "b": (6,)}, "im2col"),
    ("conv3d 64ch", lambda g, v: g.conv3d(v["x"], v["w"], padding=1),
     {"x": (1, 64, 4, 5, 6)}, {"w": (8, 64, 3, 3, 3)}, "im2col"),
    ("conv_transpose2d", lambda g, v: g.conv_transpose2d(v["x"], v["w"], bias=v["b"], stride=(2, 3),
                                                         padding=((1, 0), (2, 1)), output_padding=(1, 2), groups=2),
     {"x": (3, 4, 5, 6)}, {"w": (4, 3, 3, 4), "b": (6,)}, "col2im"),
    ("conv_transpose2d 4x4 s2", lambda g, v: g.conv_transpose2d(v["x"], v["w"], stride=2, padding=1),
     {"x": (1, 64, 5, 5)}, {"w": (64, 32, 4, 4)}, "col2im"),
    ("conv_transpose2d dilation", lambda g, v: g.conv_transpose2d(v["x"], v["w"], stride=3, dilation=2,
                                                                  output_padding=1),
     {"x": (2, 1, 3, 4)}, {"w": (1, 2, 2, 2)}, "col2im"),
    ("conv_transpose3d", lambda g, v: g.conv_transpose3d(v["x"], v["w"], bias=v["b"], stride=(2, 1, 2),
                                                         padding=((1, 0), 0, 1), output_padding=(1, 0, 0),
                                                         dilation=(1, 2, 1), groups=2),
     {"x": (3, 4, 3, 4, 3)}, {"w": (4, 2, 3, 2, 2), "b": (4,)}, "col2im"),
    ("backward_input", lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, 6, 9, 8), stride=2,
                                                            padding=((1, 0), (0, 1)), dilation=(2, 1), groups=2),
     {"dy": (3, 4, 3, 4)}, {"w": (4, 3, 3, 2)}, "col2im"),
    ("backward_input 64ch", lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, 64, 9, 9), padding=1),
     {"dy": (1, 64, 9, 9)}, {"w": (64, 64, 3, 3)}, "col2im"),
    ("backward_weight", lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], (3, 2), stride=2,
                                                              padding=((1, 0), (0, 1)), dilation=(2, 1), groups=2),
     {"x": (3, 6, 9, 8), "dy": (3, 4, 3, 4)}, {}, "im2col"),
    ("backward_weight 64ch", lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], 3, padding=1),
     {"x": (3, 64, 9, 9), "dy": (3, 64, 9, 9)}, {}, "im2col"),
    ("backward_weight depthwise", lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], 3, padding=1, groups=4),
     {"x": (1, 4, 7, 7), "dy": (1, 4, 7, 7)}, {}, "im2col"),
    ("max pool ceil", lambda g, v: g.pool(v["x"], "max", 3, stride=2, padding=1, ceil_mode=True),
     {"x": (3, 5, 12, 11)}, {}, "parallel"),
    ("max pool dilation", lambda g, v: g.pool(v["x"], "max", 3, stride=1, padding=1, dilation=2),
     {"x": (1, 2, 9, 8)}, {}, "parallel"),
    ("avg pool ceil no-pad-count", lambda g, v: g.pool(v["x"], "avg", 3, stride=2, padding=1, ceil_mode=True,
                                                       count_include_pad=False),
     {"x": (3, 5, 12, 11)}, {}, "parallel"),
    ("avg pool 1-D", lambda g, v: g.pool(v["x"], "avg", 4, stride=3, padding=2, ceil_mode=True),
     {"x": (3, 2, 13)}, {}, "parallel"),
    ("max pool 3-D", lambda g, v: g.pool(v["x"], "max", 2, stride=2, padding=1, ceil_mode=True),
     {"x": (1, 3, 5, 6, 7)}, {}, "parallel"),
    ("max_pool2d_backward", lambda g, v: g.max_pool2d_backward(v["x"], v["dy"], 3, stride=2, padding=1),
     {"x": (3, 4, 9, 8), "dy": (3, 4, 5, 4)}, {}, "parallel"),
    ("im2col", lambda g, v: g.im2col(v["x"], (3, 2), stride=2, padding=((1, 0), (0, 2)), dilation=(2, 1)),
     {"x": (3, 5, 9, 9)}, {}, "parallel"),
    ("resize", lambda g, v: g.resize_nearest2x(v["x"]), {"x": (3, 4, 5, 7)}, {}, "parallel"),
]


@pytest.mark.parametrize("case", OTHER_CASES, ids=lambda c: c[0])
def test_other_fast_kernels_match_reference(case):
    name, build, in_shapes, p_shapes, algo = case
    rng = np.random.default_rng(25)
    inputs = {k: rand(rng, *s) for k, s in in_shapes.items()}
    params = {k: rand(rng, *s) for k, s in p_shapes.items()}
    ref, _ = run_graph(build, inputs, params, REFERENCE)
    out, exe = run_graph(build, inputs, params, FAST)
    assert exe.thunks[0].algo == algo, exe.explain()
    assert_close(out, ref, 1e-4, name)


def small_cnn(rng):
    def p(name, *shape):
        return g.param(name, rand(rng, *shape, scale=0.2))

    g = rx.Graph()
    x = g.input("x", (None, 3, 15, 16))
    y = g.conv(x, p("w1", 16, 3, 3, 3), bias=p("b1", 16), padding=1)
    y = g.pool(y, "max", 2, stride=2, ceil_mode=True)
    y = g.conv(y, p("w2", 16, 1, 3, 3), padding=1, groups=16)
    y = g.conv(y, p("w3", 32, 16, 1, 1))
    y = g.conv_transpose2d(y, p("w4", 32, 8, 4, 4), stride=2, padding=1)
    y = g.resize_nearest2x(y)
    y = g.conv(y, p("w5", 4, 8, 3, 3), bias=p("b5", 4), padding=(1, 1))
    g.output("y", y)
    return g


@pytest.mark.parametrize("env", [{}, {"RLX_WINOGRAD": "1"}, {"RLX_DIRECT_CONV": "1"},
                                 {"RLX_WINOGRAD": "1", "RLX_DIRECT_CONV": "1"}, {"RLX_NUM_THREADS": "1"}],
                         ids=str)
def test_small_cnn_under_each_flag_setting_matches_reference(env):
    rng = np.random.default_rng(26)
    g = small_cnn(rng)
    x = rand(rng, 3, 3, 15, 16)
    config = rx.Config.from_env(env)
    exe = rx.compile(g, config)
    out = exe.run({"x": x})["y"]
    ref = rx.compile(g, REFERENCE).run({"x": x})["y"]
    assert_close(out, ref, 1e-3)
    algos_run = [t.algo for t in exe.thunks]
    assert "naive" not in algos_run
    if config.winograd:
        assert algos_run.count("winograd") == 2
    elif config.direct_conv:
        assert algos_run.count("direct") == 3


def test_fast_conv_off_sends_every_thunk_to_its_reference_kernel(monkeypatch):
    g = small_cnn(np.random.default_rng(27))
    monkeypatch.setenv("RLX_FAST_CONV", "0")
    monkeypatch.setenv("RLX_WINOGRAD", "1")
    exe = rx.compile(g)
    assert {t.algo for t in exe.thunks} == {"naive"}
