"""Every fast kernel against its reference kernel, through the public API: the same graph
compiled with a fast Config and with RLX_FAST_CONV off. Each case also asserts which
algorithm ran, so a silent fallback to the reference kernel fails the test.

Tolerances are relative to max(1, max|reference|) (helpers.assert_close); the reference
accumulates in float64.
- GEMM-based kernels (im2col, gemm1x1, col2im, depthwise, direct) accumulate in float32 in
  a different order: the error grows like sqrt(reduction length) * 2^-24, far under 1e-4
  for the reductions here (<= 64*9*... terms).
- The vector kernels (nchwc_direct, nchwc_plain_in, simd_direct) accumulate in float32 with
  FMAs, one rounding per multiply-add, in another order: 1e-4 as the GEMM kernels.
- Winograd rounds in its transforms too: inputs are combined in sums of up to 4 terms and
  outputs of up to 9 (A^T M A), and the filter transform multiplies by 1/2, so each product
  carries a few extra roundings and cancellation between large partial sums: 1e-3.
"""
import numpy as np
import pytest

import rlxpy as rx
from rlxpy.testing import cases
from rlxpy.cpu_kernels import choose as algos
from rlxpy.cpu_kernels import simd

from helpers import REFERENCE, assert_close, main_thunk, rand, run_case, run_graph

FAST = rx.Config()
WINOGRAD = rx.Config(winograd=True)
DIRECT = rx.Config(direct_conv=True)
CONFIGS = {"default": FAST, "winograd": WINOGRAD, "direct": DIRECT}
TOL = {"nchwc_depthwise": 1e-4, "im2col": 1e-4, "gemm1x1": 1e-4, "direct": 1e-4, "depthwise": 1e-4, "simd_direct": 1e-4, "winograd": 1e-3,
       "nchwc_direct": 1e-4, "nchwc_1x1": 1e-4, "nchwc_plain_in": 1e-4}


def expected_conv2d_algo(config, case):
    """DESIGN.md's precedence, restated from the case's own fields: Winograd, direct, then
    the default rule: with vectors (more than 1 lane), a plain-input vector conv for fewer
    input channels than lanes (groups 1, up to 2-D) and the blocked depthwise kernel
    (multiplier 1); the per-plane depthwise kernel (one input channel per group); with
    vectors, the blocked conv where a group's channels are whole blocks (or there is one
    group), however padded; im2col. 1x1 unpadded stride-1
    groups-1 -> the blocked GEMM where padding adds at most a third or there is a whole
    block of input channels, else the plain GEMM."""
    kw, (_, x), (_, w) = case.kw, case.inputs[0], case.params[0]
    nsp = len(x) - 2
    lanes = simd.resolve_width(config.simd_width)
    k, stride, dilation, groups = w[2:], _pair(kw["stride"], nsp), _pair(kw["dilation"], nsp), kw["groups"]
    c, kout = x[1], w[0]
    blocks = lambda n: -(-n // lanes) * lanes  # noqa: E731
    if k == (1,) * nsp and stride == (1,) * nsp and kw["padding"] == 0 and groups == 1:
        return "nchwc_1x1" if lanes > 1 and (blocks(c) * blocks(kout) <= 1.34 * c * kout or c >= lanes) else "gemm1x1"
    if config.winograd and k == (3, 3) and stride == (1, 1) and dilation == (1, 1) and groups == 1:
        return "winograd"
    if config.direct_conv and all(s == 1 for s in stride) and all(d == 1 for d in dilation):
        return "direct"
    if lanes > 1 and nsp <= 2 and groups == 1 and c < lanes:
        return "nchwc_plain_in"
    if lanes > 1 and nsp <= 2 and c == groups == kout:   # depthwise, multiplier 1
        return "nchwc_depthwise"
    if c == groups:      # one input channel per group
        return "depthwise"
    if lanes == 1:
        return "im2col"
    whole = groups == 1 or ((c // groups) % lanes == 0 and (kout // groups) % lanes == 0)
    if nsp <= 2 and whole:           # however padded its channels
        unpadded = not np.any(kw["padding"])
        return "nchwc_1x1" if k == (1,) * nsp and unpadded and groups == 1 else "nchwc_direct"
    return "im2col"


def case_of_conv(n, c, h, w, k, ksize, **kw):
    from rlxpy.testing import conv
    return conv(n, c, (h, w), k, (ksize, ksize), **kw)


def _pair(v, n):
    return tuple(v) if isinstance(v, tuple) else (v,) * n


CONV_CASES = [c for c in cases("fast") if c.op == "conv"]
OTHER_CASES = [c for c in cases("fast") if c.op != "conv"]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_conv_fast_kernels_match_reference(case, name):
    config = CONFIGS[name]
    ref, _, _, _ = run_case(case, REFERENCE, seed=20)
    out, exe, _, _ = run_case(case, config, seed=20)
    algo = expected_conv2d_algo(config, case)
    assert main_thunk(exe).algo == algo, exe.explain()
    assert_close(out, ref, TOL[algo], f"{name} {algo} {case.id}")


SIMD_WIDTHS = [pytest.param(w, marks=pytest.mark.skipif(w not in simd.host_widths(), reason=f"CPU can't run {w} lanes"))
               for w in (16, 8, 1)]


@pytest.mark.parametrize("width", SIMD_WIDTHS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_simd_direct_matches_reference_at_every_width(case, width):
    """RLX_CONV_ALGO=simd_direct at RLX_SIMD_WIDTH=16, 8 and 1: every stride-1 conv takes it
    (any kernel, dilation, groups, padding; 1-D); the others keep the default choice and
    explain() says why."""
    config = rx.Config(conv_algo="simd_direct", simd_width=width)
    ref, _, _, _ = run_case(case, REFERENCE, seed=21)
    out, exe, _, _ = run_case(case, config, seed=21)
    th = main_thunk(exe)
    strided = any(s != 1 for s in _pair(case.kw["stride"], len(case.inputs[0][1]) - 2))
    if strided:
        assert th.algo == expected_conv2d_algo(rx.Config(simd_width=width), case) and \
            "simd_direct not eligible (stride" in th.why
    else:
        assert (th.algo, th.tiling.lanes) == ("simd_direct", width), exe.explain()
    assert_close(out, ref, TOL[th.algo], f"{th.algo} {width} {case.id}")


def test_simd_direct_with_a_weight_that_changes_between_runs():
    """A weight that is a graph input is packed on every run, not once per arena."""
    g = rx.Graph()
    x, w = g.input("x", (2, 7, 9, 10)), g.input("w", (9, 7, 3, 3))
    g.output("y", g.conv(x, w, padding=1))
    fast, ref = rx.compile(g, rx.Config(conv_algo="simd_direct")), rx.compile(g, REFERENCE)
    assert fast.thunks[0].algo == "simd_direct" and not fast.thunks[0].record.weight_const
    rng = np.random.default_rng(22)
    xv = rand(rng, 2, 7, 9, 10)
    for _ in range(2):
        wv = rand(rng, 9, 7, 3, 3)
        assert_close(fast.run({"x": xv, "w": wv})["y"], ref.run({"x": xv, "w": wv})["y"], TOL["simd_direct"])


def test_conv_algo_flag():
    assert rx.Config.from_env({"RLX_CONV_ALGO": "simd_direct"}).conv_algo == "simd_direct"
    with pytest.raises(ValueError, match=r"RLX_CONV_ALGO='fastest'.*naive, im2col.*simd_direct"):
        rx.Config.from_env({"RLX_CONV_ALGO": "fastest"})


@pytest.mark.parametrize("algo, expected", [("naive", "naive"), ("im2col", "im2col"), ("winograd", "winograd"),
                                            ("direct", "direct"), ("nchwc_direct", "nchwc_direct"),
                                            ("nchwc_plain_in", "nchwc_plain_in"), ("col2im", "nchwc_direct")])
def test_conv_algo_forces_where_eligible_and_says_why_where_not(algo, expected):
    rng = np.random.default_rng(23)
    _, exe = run_graph(lambda g, v: g.conv(v["x"], v["w"], padding=1), {"x": rand(rng, 1, 16, 8, 8)},
                       {"w": rand(rng, 16, 16, 3, 3)}, rx.Config(conv_algo=algo))
    th = main_thunk(exe)
    assert th.algo == expected
    assert (f"RLX_CONV_ALGO={algo} not eligible" in th.why) == (algo == "col2im")


def test_fast_conv_off_wins_over_conv_algo():
    rng = np.random.default_rng(24)
    _, exe = run_graph(lambda g, v: g.conv(v["x"], v["w"], padding=1), {"x": rand(rng, 1, 4, 8, 8)},
                       {"w": rand(rng, 4, 4, 3, 3)}, rx.Config(fast_conv=False, conv_algo="simd_direct"))
    assert exe.thunks[0].algo == "naive"


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
    assert main_thunk(exe).algo == expected_conv2d_algo(FAST, case_of_conv(1, 4, 8, 8, 4, 3, stride=2, padding=1))
    assert "winograd requested but stride (2, 2)" in exe.explain()


# --- the other families -------------------------------------------------------------------
# the fast algo each op takes without vectors (transposed and input gradient: col2im; ...);
# with vectors pools take nchwc_pool and Conv3d the 2-D default's vector kernels
OTHER_ALGO = {"conv3d": "im2col", "conv_transpose2d": "col2im", "conv_transpose3d": "col2im",
              "conv2d_backward_input": "col2im", "conv2d_backward_weight": "im2col", "pool": "parallel",
              "max_pool2d_backward": "parallel", "im2col": "parallel", "resize_nearest2x": "parallel"}


def expected_conv3d_algo(case):
    """The 2-D default rule with vectors, restated for Conv3d (which has no 1x1 GEMM, no
    Winograd and no per-plane depthwise kernel)."""
    (_, x), (_, w) = case.inputs[0], case.params[0]
    c, k, groups, lanes = x[1], w[0], case.kw["groups"], simd.resolve_width(None)
    if lanes == 1:
        return "im2col"
    if groups == 1 and c < lanes:
        return "nchwc_plain_in"
    if c == groups == k:
        return "nchwc_depthwise"
    blocks = lambda n: -(-n // lanes) * lanes  # noqa: E731
    whole = groups == 1 or ((c // groups) % lanes == 0 and (k // groups) % lanes == 0)
    return "nchwc_direct" if whole else "im2col"


@pytest.mark.parametrize("case", OTHER_CASES, ids=lambda c: c.id)
def test_other_fast_kernels_match_reference(case):
    ref, _, _, _ = run_case(case, REFERENCE, seed=25)
    out, exe, _, _ = run_case(case, FAST, seed=25)
    vectors = simd.resolve_width(None) > 1
    expected = {"pool": "nchwc_pool", "max_pool2d_backward": "nchwc_pool_backward"}.get(case.op) if vectors else None
    expected = expected or OTHER_ALGO[case.op]
    if case.op == "conv3d":
        expected = expected_conv3d_algo(case)
    if case.op == "conv2d_backward_weight" and _runs_as_vector_weight_grad(case):
        expected = "nchwc_wgrad"
    if case.op in ("conv_transpose2d", "conv_transpose3d", "conv2d_backward_input") and _runs_as_vector_conv(case):
        expected = "nchwc_direct"
    assert main_thunk(exe).algo == expected, exe.explain()
    assert_close(out, ref, 1e-4, case.id)


def _runs_as_vector_conv(case):
    """The default rule for a transposed conv or input gradient, restated: stride 1,
    padding within the dilated kernel, and the forward conv it equals (channels in -> out)
    one the blocked kernel takes by default (see expected_conv2d_algo)."""
    kw, lanes = case.kw, simd.resolve_width(None)
    (_, w) = case.params[0]
    if case.op == "conv2d_backward_input":
        cin, cout = w[0], kw["input_shape"][1]          # dy's channels -> dx's
    else:
        cin, cout = w[0], w[1] * kw["groups"]           # x's -> y's
    nsp = len(w) - 2
    groups, k = kw["groups"], w[2:]
    pads = [p if isinstance(p, tuple) else (p, p) for p in _pair(kw["padding"], nsp)]
    reach = [d * (kk - 1) for d, kk in zip(_pair(kw["dilation"], nsp), k)]
    if lanes == 1 or _pair(kw["stride"], nsp) != (1,) * nsp:
        return False
    if any(p > r for pr, r in zip(pads, reach) for p in pr):
        return False
    blocks = lambda n: -(-n // lanes) * lanes  # noqa: E731
    if groups > 1:
        return (cin // groups) % lanes == 0 and (cout // groups) % lanes == 0
    return blocks(cin) * blocks(cout) <= 1.34 * cin * cout


def _runs_as_vector_weight_grad(case):
    """The weight gradient's default rule, restated: with vectors, a group's channels whole
    blocks (or one group), and output channels padded to blocks times input channels
    padded to tiles of 6 at most a third more than the real ones."""
    lanes = simd.resolve_width(None)
    (_, x), (_, dy) = case.inputs
    groups = case.kw["groups"]
    cg, kg = x[1] // groups, dy[1] // groups
    if lanes == 1 or (groups > 1 and (cg % lanes or kg % lanes)):
        return False
    padded_k = -(-kg // lanes) * lanes if groups == 1 else kg
    return padded_k * -(-cg // 6) * 6 <= 1.34 * kg * cg


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


def test_per_node_algos_go_before_rlx_conv_algo_and_are_checked():
    rng = np.random.default_rng(28)
    g = rx.Graph()
    x = g.input("x", (None, 4, 9, 9))
    a = g.conv(x, g.param("wa", rand(rng, 4, 4, 3, 3)), padding=1, name="a")
    b = g.conv(a, g.param("wb", rand(rng, 4, 4, 3, 3)), padding=1, name="b")
    c = g.conv(b, g.param("wc", rand(rng, 4, 4, 3, 3)), stride=2, name="c")
    g.output("y", c)
    exe = rx.compile(g, rx.Config(conv_algo="winograd"), algos={"a": "simd_direct", "c": "direct"})
    th = {t.node: t for t in exe.thunks}
    assert th["a"].algo == "simd_direct" and "algos['a']=simd_direct" in th["a"].why
    assert th["b"].algo == "winograd"                     # RLX_CONV_ALGO where no override
    default = expected_conv2d_algo(FAST, case_of_conv(2, 4, 9, 9, 4, 3, stride=2))
    assert th["c"].algo == default and "algos['c']=direct not eligible (stride (2, 2))" in th["c"].why
    xv = rand(rng, 2, 4, 9, 9)
    assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], TOL["winograd"])
    with pytest.raises(ValueError, match="no node named 'z'"):
        rx.compile(g, algos={"z": "im2col"})
    with pytest.raises(ValueError, match=r"algos\['a'\]='fast'.*known: auto, naive"):
        rx.compile(g, algos={"a": "fast"})
    with pytest.raises(ValueError, match=r"'x' \(Input\) is not a conv-family node"):
        rx.compile(g, algos={"x": "im2col"})


def test_forcing_gemm1x1_or_col2im_forces_them_where_the_default_takes_a_vector_kernel():
    """A forced algo names the kernel, not the default rule: a stride-1 transposed conv takes
    col2im under RLX_CONV_ALGO=col2im (by default it runs as a vector conv), and a 1x1 conv
    between blocked kernels keeps gemm1x1 under algos= (asked again as their neighbour)."""
    rng = np.random.default_rng(29)
    g = rx.Graph()
    x = g.input("x", (1, 16, 6, 6))
    g.output("y", g.conv_transpose2d(x, g.param("w", rand(rng, 16, 16, 3, 3)), padding=1))
    th = main_thunk(rx.compile(g, rx.Config(conv_algo="col2im")))
    assert th.algo == "col2im"
    g = rx.Graph()
    x = g.input("x", (1, 16, 6, 6))
    a = g.conv(x, g.param("w0", rand(rng, 16, 16, 3, 3)), padding=1, name="a")
    b = g.conv(a, g.param("w1", rand(rng, 16, 16, 1, 1)), name="b")
    g.output("y", g.conv(b, g.param("w2", rand(rng, 16, 16, 3, 3)), padding=1, name="c"))
    exe = rx.compile(g, rx.Config(), algos={"b": "gemm1x1"})
    th = {t.node: t for t in exe.thunks}
    assert th["b"].algo == "gemm1x1" and "algos['b']=gemm1x1" in th["b"].why
    xv = rand(rng, 1, 16, 6, 6)
    assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], 1e-4)
