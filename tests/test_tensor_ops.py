"""The ops around the convolutions, through the public API, against PyTorch (an oracle
independent of ours) with the fast kernels and with the reference kernels; shape errors
that name the node; the blocked layout flowing through elementwise ops; batch norm folded
into the conv before it."""
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlxpy as rx

from helpers import REFERENCE, rand

CONFIGS = [rx.Config(), REFERENCE]
RNG = np.random.default_rng(70)
X = rand(RNG, 2, 5, 6, 7)
X[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]         # specials go through as PyTorch's do

X_NAN_LATE = rand(RNG, 2, 5, 6, 7)
X_NAN_LATE[1, 2, 4, 3:6] = [np.inf, np.nan, 1e30]   # a NaN after a larger value still wins a max
X_NAN_LATE[0, 1, 5, 6] = -np.inf

W_LIN, B_LIN = rand(RNG, 4, 7), rand(RNG, 4)
BN = [rand(RNG, 5), np.abs(rand(RNG, 5)) + 0.5, rand(RNG, 5), rand(RNG, 5)]
T = torch.from_numpy

# name -> (build(g, values), torch function of the inputs, inputs)
CASES = {
    "relu": (lambda g, v: g.relu(v["x"]), F.relu, {"x": X}),
    "leaky_relu": (lambda g, v: g.leaky_relu(v["x"], 0.2), lambda x: F.leaky_relu(x, 0.2), {"x": X}),
    # a slope under float32's range is 0, as PyTorch rounds it: -inf * 0 is NaN there too
    "leaky_relu_tiny_slope": (lambda g, v: g.leaky_relu(v["x"], 1e-300), lambda x: F.leaky_relu(x, 1e-300),
                              {"x": X}),
    "relu6": (lambda g, v: g.relu6(v["x"]), F.relu6, {"x": X}),
    "clip": (lambda g, v: g.clip(v["x"], -0.5, 0.25), lambda x: torch.clamp(x, -0.5, 0.25), {"x": X}),
    "clip_min_over_max": (lambda g, v: g.clip(v["x"], 0.5, -0.25), lambda x: torch.clamp(x, 0.5, -0.25), {"x": X}),
    "sigmoid": (lambda g, v: g.sigmoid(v["x"]), torch.sigmoid, {"x": X}),
    "hardsigmoid": (lambda g, v: g.hardsigmoid(v["x"]), F.hardsigmoid, {"x": X}),
    "hardswish": (lambda g, v: g.hardswish(v["x"]), F.hardswish, {"x": X}),
    "silu": (lambda g, v: g.silu(v["x"]), F.silu, {"x": X}),
    # gelu's reference in float64: PyTorch's float32 vector path gives NaN for +inf on some
    # CPUs (2.13 on a Zen5 with AVX-512) and inf on others; its float64 path gives inf
    "gelu": (lambda g, v: g.gelu(v["x"]), lambda x: F.gelu(x.double()).float(), {"x": X}),
    "gelu_tanh": (lambda g, v: g.gelu(v["x"], approximate="tanh"), lambda x: F.gelu(x, approximate="tanh"), {"x": X}),
    "tanh": (lambda g, v: g.tanh(v["x"]), torch.tanh, {"x": X}),
    "erf": (lambda g, v: g.erf(v["x"]), torch.erf, {"x": X}),
    "add_same": (lambda g, v: g.add(v["x"], v["y"]), torch.add, {"x": X, "y": rand(RNG, 2, 5, 6, 7)}),
    "sub_channel": (lambda g, v: g.sub(v["x"], v["y"]), torch.sub, {"x": X, "y": rand(RNG, 5, 1, 1)}),
    "mul_rank_up": (lambda g, v: g.mul(v["y"], v["x"]), lambda x, y: y * x, {"x": X, "y": rand(RNG, 7)}),
    "div": (lambda g, v: g.div(v["x"], v["y"]), torch.div, {"x": X, "y": rand(RNG, 2, 5, 6, 7)}),
    "matmul": (lambda g, v: g.matmul(v["x"], v["y"]), torch.matmul, {"x": X, "y": rand(RNG, 5, 7, 3)}),
    "matmul_vectors": (lambda g, v: g.matmul(v["a"], v["b"]), torch.matmul, {"a": rand(RNG, 5), "b": rand(RNG, 5)}),
    "linear": (lambda g, v: g.linear(v["x"], g.param("w", W_LIN), g.param("b", B_LIN)),
               lambda x: F.linear(x, T(W_LIN), T(B_LIN)), {"x": X}),
    "flatten": (lambda g, v: g.flatten(v["x"]), lambda x: torch.flatten(x, 1), {"x": X}),
    "reshape": (lambda g, v: g.reshape(v["x"], (-1, 6, 7)), lambda x: x.reshape(-1, 6, 7), {"x": X}),
    "transpose": (lambda g, v: g.transpose(v["x"], (0, 2, -1, 1)), lambda x: x.permute(0, 2, 3, 1), {"x": X}),
    "concat": (lambda g, v: g.concat([v["x"], v["y"], v["x"]], 1), lambda x, y: torch.cat([x, y, x], 1),
               {"x": X, "y": rand(RNG, 2, 3, 6, 7)}),
    "slice": (lambda g, v: g.slice(v["x"], [1, -5], [4, 100], [1, 3], [2, 1]), lambda x: x[:, 1:4:2, :, -5:],
              {"x": X}),
    # backward slices against NumPy's (torch refuses negative steps): through index 0 (end None
    # or past the start of the axis), stopping short of it, and a step of -2 from the last entry
    "slice_backward": (lambda g, v: g.slice(v["x"], [-1, 4, 3], [None, 0, -100], [3, 1, 2], [-1, -2, -1]),
                       lambda x: T(np.ascontiguousarray(x.numpy()[:, 4:0:-2, 3::-1, ::-1])), {"x": X}),
    "slice_backward_short": (lambda g, v: g.slice(v["x"], [5, -1], [1, -6], [2, 3], [-3, -1]),
                             lambda x: T(np.ascontiguousarray(x.numpy()[:, :, 5:1:-3, -1:-6:-1])), {"x": X}),
    "split": (lambda g, v: g.split(v["x"], 2, 1)[2], lambda x: torch.split(x, 2, 1)[2], {"x": X}),
    "pad_constant": (lambda g, v: g.pad(v["x"], (1, 2, 0, 3), value=1.5), lambda x: F.pad(x, (1, 2, 0, 3), value=1.5),
                     {"x": X}),
    "pad_reflect": (lambda g, v: g.pad(v["x"], (1, 2, 2, 3), mode="reflect"),
                    lambda x: F.pad(x, (1, 2, 2, 3), mode="reflect"), {"x": X}),
    "pad_replicate": (lambda g, v: g.pad(v["x"], (1, 2, 2, 3), mode="replicate"),
                      lambda x: F.pad(x, (1, 2, 2, 3), mode="replicate"), {"x": X}),
    # negative pads crop, as F.pad's do (PyTorch pads first: a reflection reads rows the crop cuts)
    "pad_crop_constant": (lambda g, v: g.pad(v["x"], (-1, 2, 1, -2), value=1.5),
                          lambda x: F.pad(x, (-1, 2, 1, -2), value=1.5), {"x": X}),
    "pad_crop_reflect": (lambda g, v: g.pad(v["x"], (3, -4, -2, 0), mode="reflect"),
                         lambda x: F.pad(x, (3, -4, -2, 0), mode="reflect"), {"x": X}),
    "pad_crop_replicate": (lambda g, v: g.pad(v["x"], (-2, -1, 2, -1), mode="replicate"),
                           lambda x: F.pad(x, (-2, -1, 2, -1), mode="replicate"), {"x": X}),
    "pad_crop_only": (lambda g, v: g.pad(v["x"], (-1, -1, 0, -3)), lambda x: F.pad(x, (-1, -1, 0, -3)), {"x": X}),
    "global_avg_pool": (lambda g, v: g.global_avg_pool(v["x"]), lambda x: F.adaptive_avg_pool2d(x, 1), {"x": X}),
    "global_max_pool": (lambda g, v: g.global_max_pool(v["x"]), lambda x: F.adaptive_max_pool2d(x, 1), {"x": X}),
    "mean": (lambda g, v: g.mean(v["x"], (1, 3)), lambda x: x.mean((1, 3)), {"x": X}),
    "mean_trailing": (lambda g, v: g.mean(v["x"], (-1, 2)), lambda x: x.mean((2, 3)), {"x": X}),
    "global_max_pool_nan_late": (lambda g, v: g.global_max_pool(v["x"]), lambda x: F.adaptive_max_pool2d(x, 1),
                                 {"x": X_NAN_LATE}),
    "softmax": (lambda g, v: g.softmax(v["x"], 1), lambda x: F.softmax(x, 1), {"x": X}),
    "log_softmax": (lambda g, v: g.log_softmax(v["x"], -1), lambda x: F.log_softmax(x, -1), {"x": X}),
    "batch_norm": (lambda g, v: g.batch_norm(v["x"], *[g.param(f"bn{i}", a) for i, a in enumerate(BN)], eps=1e-3),
                   lambda x: F.batch_norm(x, *map(T, BN), training=False, eps=1e-3), {"x": X}),
}


@pytest.mark.parametrize("config", CONFIGS, ids=["fast", "reference"])
@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_pytorch(name, config):
    build, torch_fn, inputs = CASES[name]
    g = rx.Graph()
    values = {k: g.input(k, (None,) + a.shape[1:] if k == "x" else a.shape) for k, a in inputs.items()}
    g.output("out", build(g, values))
    exe = rx.compile(g, config)
    out = exe.run(inputs)["out"]
    want = torch_fn(*[T(a) for a in inputs.values()]).numpy()
    assert out.shape == want.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6, equal_nan=True)
    if not config.fast_conv:
        assert {t.algo for t in exe.thunks} == {"naive"}


W_SAME = rand(RNG, 4, 3, 4, 3)        # an even kernel height: 'same' pads its extra row at the end


@pytest.mark.parametrize("config", CONFIGS, ids=["fast", "reference"])
@pytest.mark.parametrize("rank, padding, dilation", [(2, "same", 1), (2, "same", (2, 1)), (2, "valid", 1),
                                                     (1, "same", 2), (3, "same", 1)])
def test_string_padding_matches_pytorch(rank, padding, dilation, config):
    """F.conv1d/2d/3d's padding='same' (stride 1; an odd total pad's extra at the end) and 'valid'."""
    w = {1: W_SAME[:, :, :, 0], 2: W_SAME, 3: W_SAME[:, :, :, :, None].repeat(2, 4)}[rank]
    x = rand(RNG, 2, 3, *(9, 7, 6)[:rank])
    g = rx.Graph()
    conv = g.conv3d if rank == 3 else g.conv
    g.output("y", conv(g.input("x", x.shape), g.param("w", w), padding=padding, dilation=dilation))
    out = rx.compile(g, config).run({"x": x})["y"]
    torch_conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]
    want = torch_conv(T(x), T(w), padding=padding, dilation=dilation).numpy()
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_same_padding_with_a_stride_is_refused_as_in_pytorch():
    g = rx.Graph()
    x = g.input("x", (1, 3, 8, 8))
    with pytest.raises(ValueError, match=re.escape("c: padding='same' is not supported for strided convolutions")):
        g.conv(x, g.param("w", W_SAME), stride=2, padding="same", name="c")
    with pytest.raises(ValueError, match="c: padding must be an int, a tuple, 'valid' or 'same', got 'full'"):
        g.conv(x, g.param("w2", W_SAME), padding="full", name="c")


@pytest.mark.parametrize("width", [16, 8])
@pytest.mark.parametrize("rows, cols, k", [(8, 1000, 37), (130, 3, 37), (1, 1, 5), (200, 70, 37), (1, 33, 64),
                                           (1, 30, 37), (3, 20, 19), (16, 9, 40), (17, 9, 40)])
def test_linear_kernels_cover_every_row_and_column_once(every_width, rows, cols, k, width):
    """The fast linears against numpy: vector dot products up to DOT_ROWS rows (one row
    against 4 weight rows at a time, an item's last columns with the row split in quarters,
    rows in fours with a missing 4th, feature tails past the vectors),
    SGEMMs over blocks of rows x blocks of columns above; with a bias."""
    from rlxpy.cpu_kernels import tensor_dispatch
    rng = np.random.default_rng(72)
    x, w, b = rand(rng, rows, k), rand(rng, cols, k), rand(rng, cols)
    g = rx.Graph()
    g.output("y", g.linear(g.input("x", x.shape), g.param("w", w), g.param("b", b)))
    exe = rx.compile(g, rx.Config(simd_width=width))
    assert exe.thunks[0].algo == ("simd_dot" if rows <= tensor_dispatch.DOT_ROWS else "blas")
    np.testing.assert_allclose(exe.run({"x": x})["y"], x.astype(np.float64) @ w.T + b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axes, algo", [((2, 3), "rows"), ((-1,), "rows"), ((1, 3), "numpy"), ((0,), "numpy")])
def test_reductions_over_trailing_axes_take_the_row_kernel(axes, algo):
    g = rx.Graph()
    g.output("y", g.mean(g.input("x", X.shape), axes))
    exe = rx.compile(g)
    assert exe.thunks[0].algo == algo, exe.explain()
    np.testing.assert_allclose(exe.run({"x": X_NAN_LATE})["y"], X_NAN_LATE.astype(np.float64).mean(axes),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("build, message", [
    (lambda g, x: g.add(x, g.input("y", (3, 7))), "add_0: shapes [N, 5, 6, 7] and [3, 7] do not broadcast"),
    (lambda g, x: g.linear(x, g.param("w", np.zeros((4, 6), np.float32))), "takes 6 input features"),
    (lambda g, x: g.reshape(x, (-1, 11)), None),
    (lambda g, x: g.transpose(x, (0, 1, 1, 2)), "is not a permutation"),
    (lambda g, x: g.concat([x, g.input("y", (2, 5, 6, 8))], 1), "outside axis 1"),
    (lambda g, x: g.slice(x, [3], [3], [2]), "is empty"),
    (lambda g, x: g.pad(x, (7, 0), mode="reflect"), "must be smaller than its size 7"),
    (lambda g, x: g.pad(x, (-4, -3), name="crop"), "crop: pads (-4, -3) on axis 3 (size 7) leave nothing"),
    (lambda g, x: g.pad(x, (1, 0, 2, -9), name="crop"), "crop: pads (2, -9) on axis 2 (size 6) leave nothing"),
    (lambda g, x: g.softmax(x, 4), "axis 4 is out of range"),
    (lambda g, x: g.leaky_relu(x, 1e300), "leaky_relu_0: negative_slope 1e+300 cannot be converted to float32"),
    (lambda g, x: g.clip(x, max=-1e40, name="c"), "c: max -1e+40 cannot be converted to float32 without overflow"),
])
def test_bad_ops_are_refused_at_build_time_naming_the_node(build, message):
    g = rx.Graph()
    x = g.input("x", (None, 5, 6, 7))
    n = len(g.nodes)
    if message is None:     # a size only known at run time: refused when the plan is built
        g.output("y", build(g, x))
        exe = rx.compile(g)
        with pytest.raises(ValueError, match=r"reshape_\d+: cannot reshape \[2, 5, 6, 7\]"):
            exe.run({"x": X})
        assert exe.run({"x": rand(RNG, 11, 5, 6, 7)})["y"].shape == (210, 11)   # still usable
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        build(g, x)
    assert len([nd for nd in g.nodes if nd.op not in ("Input", "Param")]) == n - 1   # nothing added


def test_the_blocked_layout_flows_through_elementwise_ops_without_reorders():
    """conv -> sigmoid -> conv -> add (residual) -> relu -> conv: one layout from the input
    to the last conv, which writes the plain output itself; padded lanes after sigmoid
    (f(0) = 0.5) are written as zeros, and a division of them would be 0/0."""
    rng = np.random.default_rng(71)
    g = rx.Graph()
    x = g.input("x", (None, 11, 9, 8))
    a = g.sigmoid(g.conv(x, g.param("w1", rand(rng, 13, 11, 3, 3, scale=0.2)), padding=1))
    b = g.conv(a, g.param("w2", rand(rng, 11, 13, 3, 3, scale=0.2)), padding=1)
    c = g.relu(g.add(b, x))
    d = g.div(c, g.add(c, g.sigmoid(c)))
    g.output("y", g.conv(d, g.param("w3", rand(rng, 11, 11, 3, 3, scale=0.2)), padding=1))
    exe = rx.compile(g, rx.Config(simd_width=8))
    xv = rand(rng, 2, 11, 9, 8)
    out = exe.run({"x": xv})["y"]
    assert [t.algo for t in exe.thunks].count("reorder") == 0
    assert all(dict(t.layouts).get("y", "nchw8c") == "nchw8c" for t in exe.thunks[:-1])
    ref = rx.compile(g, REFERENCE).run({"x": xv})["y"]
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_batch_norm_after_a_conv_is_folded_into_it_and_explain_shows_both():
    rng = np.random.default_rng(72)
    w, b = rand(rng, 8, 3, 3, 3, scale=0.3), rand(rng, 8)
    stats = [rand(rng, 8), np.abs(rand(rng, 8)) + 0.5, rand(rng, 8), rand(rng, 8)]
    g = rx.Graph()
    x = g.input("x", (None, 3, 10, 10))
    c = g.conv(x, g.param("w", w), bias=g.param("b", b), padding=1, name="conv1")
    y = g.batch_norm(c, *[g.param(f"s{i}", s) for i, s in enumerate(stats)], eps=1e-3, name="bn1")
    g.output("y", g.relu(y))
    xv = rand(rng, 2, 3, 10, 10)
    want = F.relu(F.batch_norm(F.conv2d(T(xv), T(w), T(b), padding=1), *map(T, stats), eps=1e-3)).numpy()
    for config, algos in ((rx.Config(), {"conv1": "im2col"}), (REFERENCE, None)):
        exe = rx.compile(g, config, algos=algos)
        np.testing.assert_allclose(exe.run({"x": xv})["y"], want, rtol=1e-5, atol=1e-5)
        assert [t.node for t in exe.thunks] == ["conv1+bn1+relu_0"]      # the relu is its epilogue
        assert "conv1+bn1+relu_0" in exe.explain()
    assert rx.compile(g, algos={"conv1": "im2col"}).thunks[0].algo == "im2col"    # the override follows the fold


def test_batch_norm_whose_conv_output_is_also_read_elsewhere_is_not_folded():
    rng = np.random.default_rng(73)
    g = rx.Graph()
    x = g.input("x", (1, 3, 6, 6))
    c = g.conv(x, g.param("w", rand(rng, 4, 3, 3, 3)), padding=1)
    y = g.batch_norm(c, *[g.param(f"s{i}", np.abs(rand(rng, 4)) + 0.5) for i in range(4)])
    g.output("y", g.add(y, c))
    exe = rx.compile(g)
    assert [type(t.record).__name__ for t in exe.thunks if t.algo != "reorder"][:2] == ["Conv2D", "BatchNorm"]
    xv = rand(rng, 1, 3, 6, 6)
    np.testing.assert_allclose(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"],
                               rtol=1e-5, atol=1e-5)


def _resnet_block(rng, last, c=16):
    g = rx.Graph()
    x = g.input("x", (None, c, 9, 8))
    w1, w2 = (g.param(f"w{i}", rand(rng, c, c, 3, 3, scale=0.2)) for i in (1, 2))
    a = g.relu(g.conv(x, w1, bias=g.param("b1", rand(rng, c)), padding=1, name="conv1"), name="relu1")
    y = getattr(g, last)(g.add(g.conv(a, w2, padding=1, name="conv2"), x, name="add"), name="act")
    g.output("y", y)
    return g


@pytest.mark.parametrize("last, torch_fn, native", [("relu6", F.relu6, True), ("gelu", F.gelu, False)])
@pytest.mark.parametrize("config", CONFIGS, ids=["fast", "reference"])
def test_a_conv_takes_in_its_residual_add_and_activation(config, last, torch_fn, native):
    """conv1 + relu and conv2 + add + (relu6 | gelu) run as one thunk each, named after the
    nodes they cover, against PyTorch's unfused computation. The blocked conv applies relu,
    clip and the residual in its store; other activations (and other kernels) take a pass
    over y after the kernel."""
    from rlxpy.cpu_kernels import dispatch
    rng = np.random.default_rng(74)
    g = _resnet_block(rng, last)
    exe = rx.compile(g, config, plan_memory=False, guard_bytes=256)      # and it writes only y
    fused = [t for t in exe.thunks if t.algo != "reorder"]
    assert [t.node for t in fused] == ["conv1+relu1", "conv2+add+act"]
    assert "residual add + " in fused[1].why
    if config.fast_conv:
        assert [dispatch.native_epilogue(t) for t in fused] == [True, native]
    # explain() says where the epilogue runs: in the kernel's store, or a pass over y after it
    in_store = [config.fast_conv, config.fast_conv and native]
    assert [t.why.endswith(" in its store") for t in fused] == in_store, exe.explain()
    assert [t.why.endswith(" in one pass over y") for t in fused] == [not s for s in in_store]
    xv = rand(rng, 2, 16, 9, 8)
    p = {g.nodes[v].name: T(a) for v, a in g.params.items()}
    xt = T(xv)
    a = F.relu(F.conv2d(xt, p["w1"], p["b1"], padding=1))
    want = torch_fn(F.conv2d(a, p["w2"], padding=1) + xt).numpy()
    np.testing.assert_allclose(exe.run({"x": xv})["y"], want, rtol=1e-4, atol=1e-5)
    assert exe.guard_violations() == []


@pytest.mark.parametrize("width", [16, 8])
def test_first_layer_and_depthwise_convs_apply_relu6_in_their_store(width, every_width):
    """A MobileNet block: stem conv (3 input channels: nchwc_plain_in) + relu6, depthwise
    3x3 + relu6, 1x1 conv. Both fused activations run in the blocked kernels' stores (no
    pass over y), write nothing else, and match PyTorch."""
    from rlxpy.cpu_kernels import dispatch
    rng = np.random.default_rng(77)
    g = rx.Graph()
    x = g.input("x", (None, 3, 11, 10))
    a = g.clip(g.conv(x, g.param("w1", rand(rng, 16, 3, 3, 3, scale=0.5)), bias=g.param("b1", rand(rng, 16)),
                      stride=2, padding=1, name="stem"), 0.0, 6.0, name="r1")
    d = g.clip(g.conv(a, g.param("w2", rand(rng, 16, 1, 3, 3)), padding=1, groups=16, name="dw"), 0.0, 6.0,
               name="r2")
    g.output("y", g.conv(d, g.param("w3", rand(rng, 8, 16, 1, 1)), name="pw"))
    exe = rx.compile(g, rx.Config(simd_width=width), plan_memory=False, guard_bytes=256)
    th = {t.node: t for t in exe.thunks}
    assert (th["stem+r1"].algo, th["dw+r2"].algo) == ("nchwc_plain_in", "nchwc_depthwise"), exe.explain()
    assert dispatch.native_epilogue(th["stem+r1"]) and dispatch.native_epilogue(th["dw+r2"])
    xv = rand(rng, 2, 3, 11, 10)
    p = {g.nodes[v].name: T(a) for v, a in g.params.items()}
    ta = F.relu6(F.conv2d(T(xv), p["w1"], p["b1"], stride=2, padding=1))
    want = F.conv2d(F.relu6(F.conv2d(ta, p["w2"], padding=1, groups=16)), p["w3"]).numpy()
    np.testing.assert_allclose(exe.run({"x": xv})["y"], want, rtol=1e-4, atol=1e-4)
    assert exe.guard_violations() == []


def test_a_conv_whose_output_is_read_elsewhere_is_not_fused():
    rng = np.random.default_rng(75)
    g = rx.Graph()
    x = g.input("x", (1, 8, 6, 6))
    c = g.conv(x, g.param("w", rand(rng, 8, 8, 3, 3)), padding=1, name="conv")
    g.output("y", g.relu(c, name="relu"))
    g.output("c", c)
    exe = rx.compile(g)
    assert "conv" in [t.node for t in exe.thunks] and "relu" in [t.node for t in exe.thunks]
    out = exe.run({"x": rand(rng, 1, 8, 6, 6)})
    np.testing.assert_array_equal(out["y"], np.maximum(out["c"], 0))


def test_a_concat_of_whole_channel_blocks_between_blocked_convs_needs_no_reorder():
    """A UNet's skip: conv outputs and the input concatenated on the channels (16, 8 and
    16: whole blocks of 8) feed a conv; with 5 channels in one input it is a plain copy
    with reorders around it. Both against the reference, at batch 2 and 1."""
    rng = np.random.default_rng(76)
    for c_skip, blocked in ((16, True), (5, False)):
        g = rx.Graph()
        x = g.input("x", (None, c_skip, 9, 8))
        a = g.relu(g.conv(x, g.param("w1", rand(rng, 16, c_skip, 3, 3, scale=0.2)), padding=1))
        b = g.conv(x, g.param("w2", rand(rng, 8, c_skip, 3, 3, scale=0.2)), padding=1)
        c = g.concat([a, b, x], 1, name="skip")
        g.output("y", g.conv(c, g.param("w3", rand(rng, 16, 24 + c_skip, 3, 3, scale=0.2)), padding=1))
        exe = rx.compile(g, rx.Config(simd_width=8))
        th = {t.node: t for t in exe.thunks}
        assert th["skip"].algo == ("nchwc_concat" if blocked else "naive"), exe.explain()
        assert ("reorder" in [t.algo for t in exe.thunks]) != blocked
        for n in (2, 1):               # at batch 1 each block is copied in several runs (items for every thread)
            xv = rand(rng, n, c_skip, 9, 8)
            ref = rx.compile(g, REFERENCE).run({"x": xv})["y"]
            np.testing.assert_allclose(exe.run({"x": xv})["y"], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_erf32_matches_scipy_across_its_pieces():
    """The float32 erf of the fast kernels (erf and GELU) against scipy's, in float64: within
    3e-7 relative (2 float32 ulps) on every piece and at its joins, exact at the specials."""
    from scipy.special import erf
    edges = np.array([1.0, 2.0, 3.0, 3.46, 3.92], np.float32)
    x = np.concatenate([np.linspace(-5, 5, 40001, dtype=np.float32), np.nextafter(edges, 0), edges,
                        np.nextafter(edges, 9), -edges, np.float32([1e-30, -1e-30, 1e-8, 0.0, -0.0])])
    g = rx.Graph()
    g.output("y", g.erf(g.input("x", x.shape)))
    exe = rx.compile(g)
    assert exe.thunks[0].algo == "elementwise"
    got, want = exe.run({"x": x})["y"].astype(np.float64), erf(x.astype(np.float64))
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)) < 3e-7
    specials = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0])
    out = exe.run({"x": np.resize(specials, x.shape)})["y"][:5]
    assert np.isnan(out[0]) and list(out[1:3]) == [1.0, -1.0] and out[3] == 0.0 and np.signbit(out[4])


def _gelu_written_out(g, x, swap=False, sqrt2=np.sqrt(2.0)):
    """x * (1 + erf(x / sqrt 2)) * 0.5, as torch's ONNX exporter writes GELU before opset 20."""
    c = lambda name, v: g.param(name, np.float32([v]))  # noqa: E731
    e = g.erf(g.div(x, c("sqrt2", sqrt2)))
    s = g.add(c("one", 1.0), e) if swap else g.add(e, c("one", 1.0))
    if swap:
        return g.mul(x, g.mul(s, c("half", 0.5)))
    return g.mul(g.mul(x, s), c("half", 0.5))


@pytest.mark.parametrize("swap", [False, True])
def test_gelu_written_out_becomes_one_node_fused_into_the_conv(swap):
    """The five nodes become one gelu (its name lists them), which the conv before it then
    takes as its epilogue; the result is PyTorch's GELU of the conv."""
    rng = np.random.default_rng(73)
    g = rx.Graph()
    x = g.input("x", (2, 16, 30))
    w = rand(rng, 16, 16, 3)
    c = g.conv(x, g.param("w", w), padding=1, name="c")
    g.output("y", _gelu_written_out(g, c, swap))
    exe = rx.compile(g)
    convs = [t for t in exe.thunks if t.algo != "reorder"]
    assert len(convs) == 1 and convs[0].node.startswith("c+div_"), exe.explain()
    assert "erf" in convs[0].node and "then gelu" in convs[0].why
    xv = rand(rng, 2, 16, 30)
    want = F.gelu(F.conv1d(T(xv), T(w), padding=1)).numpy()
    np.testing.assert_allclose(exe.run({"x": xv})["y"], want, rtol=1e-4, atol=1e-5)


def test_gelu_look_alikes_stay_as_written():
    """Another constant than sqrt 2, or an intermediate read elsewhere: no rewrite (the
    values are still right)."""
    rng = np.random.default_rng(74)
    xv = rand(rng, 3, 8)
    for build in (lambda g, x: (_gelu_written_out(g, x, sqrt2=2.0),),
                  lambda g, x: (_gelu_written_out(g, x), g.erf(g.div(x, g.param("s", np.float32([np.sqrt(2.0)])))))):
        g = rx.Graph()
        x = g.input("x", (3, 8))
        outs = build(g, x)
        g.output("y", outs[0])
        exe = rx.compile(g)
        assert not any(t.why and "gelu" in t.node for t in exe.thunks)
        ref = rx.compile(g, REFERENCE).run({"x": xv})["y"]
        np.testing.assert_allclose(exe.run({"x": xv})["y"], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("width", [16, 8])
@pytest.mark.parametrize("pool", ["global_avg_pool", "global_max_pool", "mean23"])
def test_global_pooling_after_a_blocked_conv_reads_the_blocked_layout(every_width, pool, width):
    """After a blocked conv, global pooling (and a mean over every spatial axis) reads the
    blocked layout itself: no reorder thunk. Channels not a multiple of the width, pixels
    not a multiple of 4 (the kernel's unroll), a NaN in one channel for the max."""
    rng = np.random.default_rng(75)
    g = rx.Graph()
    x = g.input("x", (3, 16, 7, 9))
    c = g.conv(x, g.param("w", rand(rng, 3 * width - 5, 16, 3, 3)), padding=1, name="c")
    y = g.mean(c, (2, 3)) if pool == "mean23" else getattr(g, pool)(c)
    g.output("y", y)
    exe = rx.compile(g, rx.Config(simd_width=width))
    assert [t.algo for t in exe.thunks] == ["nchwc_direct", "nchwc_reduce"], exe.explain()
    xv = rand(rng, 3, 16, 7, 9)
    xv[1, :, 2, 3] = np.nan if pool == "global_max_pool" else 0.0
    ref = rx.compile(g, REFERENCE).run({"x": xv})["y"]
    out = exe.run({"x": xv})["y"]
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.nanmax(np.abs(ref)), equal_nan=True)
    if pool == "global_max_pool":
        assert np.isnan(out[1]).all() and not np.isnan(out[0]).any()
