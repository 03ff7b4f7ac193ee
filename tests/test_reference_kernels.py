"""The reference kernels are the oracle of every fast kernel, so they are checked against an
implementation nobody here wrote: PyTorch CPU in float64 (through the public API, with
RLX_FAST_CONV off). Asymmetric padding, which torch's ops do not take, is applied to the
torch side with F.pad. Adjoint identities in test_adjoints.py check the same kernels
without torch."""
import numpy as np
import pytest

from helpers import assert_close, pairs, rand, run_case, run_graph, torch_pad
from rlxpy.testing import cases

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL = 1e-5  # float64 accumulation on both sides: only the final float32 rounding differs


def t64(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


@pytest.mark.parametrize("case", cases("reference"), ids=lambda c: c.id)
def test_conv_reference_matches_torch(case):
    out, exe, inputs, params = run_case(case, seed=1)
    x, w, b = inputs["x"], params["w"], params.get("b")
    kw = case.kw
    nsp = x.ndim - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
    ref = conv(torch_pad(t64(x), pairs(kw["padding"], nsp)), t64(w), None if b is None else t64(b),
               stride=kw["stride"], dilation=kw["dilation"], groups=kw["groups"])
    assert_close(out, ref.numpy(), RTOL, case.id)
    rec = exe.thunks[0]
    assert rec.algo == "naive"
    is_1x1 = nsp < 3 and all(s == 1 for s in w.shape[2:]) and kw["stride"] == 1 and kw["padding"] == 0 \
        and kw["groups"] == 1
    assert type(rec.record).__name__ == ("Conv3d" if nsp == 3 else "Conv2D1x1" if is_1x1 else "Conv2D")


# (N, C_in, spatial, C_out/g, kernel, stride, padding, output_padding, dilation, groups, bias)
CONV_T = [
    (2, 4, (5, 6), 3, (3, 4), (2, 3), ((1, 0), (2, 1)), (1, 2), 1, 2, True),
    (1, 3, (4, 4), 2, (3, 3), 1, 1, 0, 2, 1, False),
    (3, 4, (3, 5), 1, (4, 4), 2, 1, 0, 1, 4, True),          # depthwise
    (1, 1, (2, 2), 1, (2, 2), 3, 0, 2, 1, 1, False),          # stride > kernel
    (2, 4, (3, 4, 3), 2, (3, 2, 2), (2, 1, 2), ((1, 0), 0, 1), (1, 0, 0), (1, 2, 1), 2, True),
]


@pytest.mark.parametrize("case", CONV_T, ids=str)
def test_conv_transpose_reference_matches_torch(case):
    n, c, sp, kg, ker, stride, padding, out_pad, dilation, groups, bias = case
    rng = np.random.default_rng(2)
    nsp = len(sp)
    x, w = rand(rng, n, c, *sp), rand(rng, c, kg, *ker)
    b = rand(rng, kg * groups) if bias else None
    params = {"w": w} | ({"b": b} if b is not None else {})
    method = "conv_transpose3d" if nsp == 3 else "conv_transpose2d"
    out, _ = run_graph(lambda g, v: getattr(g, method)(v["x"], v["w"], bias=v.get("b"), stride=stride,
                                                       padding=padding, output_padding=out_pad,
                                                       dilation=dilation, groups=groups),
                       {"x": x}, params)
    conv_t = F.conv_transpose3d if nsp == 3 else F.conv_transpose2d
    full = conv_t(t64(x), t64(w), stride=stride, dilation=dilation, groups=groups)
    # padding (b, e) crops b from the front and e from the back; output_padding adds zeros at the back
    full = torch_pad(full, ((0, 8),) * nsp)
    index = [slice(None), slice(None)] + [slice(p[0], p[0] + out.shape[2 + i]) for i, p in enumerate(pairs(padding, nsp))]
    ref = full[tuple(index)]
    if b is not None:
        ref = ref + t64(b).reshape((1, -1) + (1,) * nsp)
    assert_close(out, ref.numpy(), RTOL, str(case))


# (kind, x shape, kernel, stride, padding, dilation, ceil_mode, count_include_pad)
POOLS = [
    ("max", (2, 3, 7, 9), 2, 2, 0, 1, True, True),
    ("max", (1, 2, 11, 10), 3, 2, 1, 2, True, True),
    ("max", (2, 2, 8, 8), 2, 3, 0, 1, False, True),          # stride > kernel
    ("max", (1, 1, 6, 7), (3, 2), (2, 1), (1, 0), 1, False, True),
    ("avg", (2, 3, 9, 8), 3, 2, 1, 1, True, False),
    ("avg", (2, 3, 9, 8), 3, 2, 1, 1, True, True),
    ("avg", (1, 4, 7, 7), 2, 1, 1, 1, False, False),
    ("avg", (3, 2, 10, 6), (4, 2), (3, 2), (2, 1), 1, True, True),
    ("max", (2, 3, 13), 3, 2, 1, 1, True, True),              # 1-D
    ("avg", (2, 3, 13), 4, 3, 2, 1, True, False),
    ("max", (1, 2, 5, 6, 7), 2, 2, 1, 1, True, True),         # 3-D
    ("avg", (2, 2, 5, 6, 7), (3, 2, 2), 2, (1, 0, 1), 1, True, False),
]


@pytest.mark.parametrize("case", POOLS, ids=str)
def test_pool_reference_matches_torch(case):
    kind, shape, k, s, p, d, ceil, cip = case
    x = rand(np.random.default_rng(3), *shape)
    out, _ = run_graph(lambda g, v: g.pool(v["x"], kind, k, stride=s, padding=p, dilation=d, ceil_mode=ceil,
                                           count_include_pad=cip), {"x": x})
    nsp = len(shape) - 2
    if kind == "max":
        fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[nsp - 1]
        ref = fn(t64(x), k, s, p, d, ceil_mode=ceil)
    else:
        fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[nsp - 1]
        ref = fn(t64(x), k, s, p, ceil_mode=ceil, count_include_pad=cip)
    assert_close(out, ref.numpy(), RTOL, str(case))


def test_max_pool_asymmetric_padding_matches_torch_on_padded_input():
    x = rand(np.random.default_rng(4), 2, 3, 7, 8)
    pads = ((1, 0), (0, 1))
    out, _ = run_graph(lambda g, v: g.pool(v["x"], "max", 2, stride=2, padding=pads), {"x": x})
    ref = F.max_pool2d(torch_pad(t64(x), pads, value=-np.inf), 2, 2)
    assert_close(out, ref.numpy(), RTOL)


# (x shape, kernel, stride, padding, dilation, ceil_mode)
MAXPOOL_BWD = [
    ((2, 3, 8, 8), 2, 2, 0, 1, False),
    ((1, 2, 9, 7), 3, 2, 1, 1, False),        # overlapping windows accumulate
    ((2, 1, 7, 9), 3, 1, 1, 2, True),
    ((3, 2, 5, 5), 2, 3, 0, 1, True),
]


def _torch_max_pool_grad(x, dy, k, s, p, d, ceil):
    xt = t64(x).requires_grad_(True)
    F.max_pool2d(xt, k, s, p, d, ceil_mode=ceil).backward(t64(dy))
    return xt.grad.numpy()


@pytest.mark.parametrize("case", MAXPOOL_BWD, ids=str)
def test_max_pool2d_backward_reference_matches_torch(case):
    shape, k, s, p, d, ceil = case
    rng = np.random.default_rng(5)
    x = rand(rng, *shape)
    y_shape = F.max_pool2d(t64(x), k, s, p, d, ceil_mode=ceil).shape
    dy = rand(rng, *y_shape)
    out, _ = run_graph(lambda g, v: g.max_pool2d_backward(v["x"], v["dy"], k, stride=s, padding=p, dilation=d,
                                                          ceil_mode=ceil), {"x": x, "dy": dy})
    assert_close(out, _torch_max_pool_grad(x, dy, k, s, p, d, ceil), RTOL, str(case))


def test_max_pool2d_backward_ties_go_to_first_in_scan_order():
    x = np.ones((1, 1, 4, 4), np.float32)        # every window is all ties
    dy = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2)
    out, _ = run_graph(lambda g, v: g.max_pool2d_backward(v["x"], v["dy"], 2), {"x": x, "dy": dy})
    expected = np.zeros((1, 1, 4, 4))
    expected[0, 0, ::2, ::2] = [[1, 2], [3, 4]]  # the top-left of each window
    assert_close(out, expected, 0)
    assert_close(out, _torch_max_pool_grad(x, dy, 2, 2, 0, 1, False), 0)


# (N, C, H, W, K, kernel, stride, padding, dilation, groups)
BACKWARD = [
    (2, 4, 7, 6, 6, (3, 3), 1, 1, 1, 1),
    (3, 6, 9, 8, 4, (3, 2), 2, (1, 0), (2, 1), 2),
    (2, 4, 8, 8, 4, (3, 3), 2, 1, 1, 4),      # depthwise
    (1, 1, 10, 9, 2, (2, 2), 3, 0, 1, 1),     # stride > kernel: some of x gets no gradient
    (2, 3, 5, 5, 5, (1, 1), 1, 0, 1, 1),
]


@pytest.mark.parametrize("case", BACKWARD, ids=str)
def test_conv2d_backward_references_match_torch_grad(case):
    n, c, h, wd, k, ker, stride, padding, dilation, groups = case
    rng = np.random.default_rng(6)
    x, w = rand(rng, n, c, h, wd), rand(rng, k, c // groups, *ker)
    y_shape = F.conv2d(t64(x), t64(w), stride=stride, padding=padding, dilation=dilation, groups=groups).shape
    dy = rand(rng, *y_shape)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    dx, _ = run_graph(lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, c, h, wd), **kw),
                      {"dy": dy}, {"w": w})
    dw, _ = run_graph(lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], ker, **kw), {"x": x, "dy": dy})
    assert_close(dx, torch.nn.grad.conv2d_input(x.shape, t64(w), t64(dy), **kw).numpy(), RTOL, "dx")
    assert_close(dw, torch.nn.grad.conv2d_weight(t64(x), w.shape, t64(dy), **kw).numpy(), RTOL, "dw")


IM2COL = [
    ((2, 3, 7, 6), (3, 3), 1, 1, 1),
    ((1, 2, 9, 9), (2, 3), 2, ((1, 0), (0, 2)), (2, 1)),
    ((3, 1, 5, 5), (1, 1), 3, 0, 1),
]


@pytest.mark.parametrize("case", IM2COL, ids=str)
def test_im2col_reference_matches_torch_unfold(case):
    shape, k, s, p, d = case
    x = rand(np.random.default_rng(7), *shape)
    out, _ = run_graph(lambda g, v: g.im2col(v["x"], k, stride=s, padding=p, dilation=d), {"x": x})
    cols = F.unfold(torch_pad(t64(x), pairs(p, 2)), k, dilation=d, stride=s)
    ref = cols.transpose(1, 2).reshape(-1, shape[1] * k[0] * k[1])
    assert_close(out, ref.numpy(), 0)


def test_resize_nearest2x_matches_torch_interpolate():
    x = rand(np.random.default_rng(8), 2, 3, 5, 4)
    out, _ = run_graph(lambda g, v: g.resize_nearest2x(v["x"]), {"x": x})
    assert_close(out, F.interpolate(t64(x), scale_factor=2, mode="nearest").numpy(), 0)


# (x shape, kernel, strides, pads [begins..., ends...], dilations, ceil_mode, count_include_pad)
DILATED_AVG_POOLS = [
    ((2, 3, 11, 9), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2), 1, 1),
    ((2, 3, 11, 9), (3, 3), (2, 2), (2, 2, 2, 2), (2, 2), 1, 0),
    ((1, 2, 10, 13), (2, 3), (1, 2), (1, 0, 2, 3), (3, 2), 0, 1),
    ((1, 2, 12), (3,), (2,), (1, 2), (2,), 1, 1),
    ((1, 2, 5, 6, 7), (2, 2, 2), (1, 2, 1), (1, 1, 1, 1, 1, 1), (2, 1, 3), 0, 0),
]


@pytest.mark.parametrize("case", DILATED_AVG_POOLS, ids=str)
def test_dilated_average_pool_matches_onnx_reference(case):
    """PyTorch refuses average pooling with dilation; ONNX (opset 19) defines it, and its
    reference evaluator is the oracle: the divisor counts dilated taps inside the padded
    input (count_include_pad) or inside the input."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    shape, k, s, pads, d, ceil, cip = case
    x = rand(np.random.default_rng(5), *shape)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=list(k), strides=list(s), pads=list(pads),
                            dilations=list(d), ceil_mode=ceil, count_include_pad=cip)
    model = helper.make_model(helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
                              opset_imports=[helper.make_opsetid("", 19)])
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    n = len(k)
    padding = tuple((pads[i], pads[n + i]) for i in range(n))
    out, _ = run_graph(lambda g, v: g.pool(v["x"], "avg", k, stride=s, padding=padding, dilation=d,
                                           ceil_mode=bool(ceil), count_include_pad=bool(cip)), {"x": x})
    assert out.shape == expected.shape
    assert_close(out, expected, RTOL, str(case))


def test_valid_range_is_every_index_inside_the_axis():
    """im2col.valid_range (the taps or outputs inside x, which every blocked kernel uses for
    its borders) against counting them one by one, unit step (its no-division path) and
    larger steps, starts before, inside and past the axis."""
    from rlxpy.cpu_kernels.im2col import valid_range
    for step in (1, 2, 3):
        for W in range(0, 7):
            for OW in range(0, 6):
                for start in range(-9, 10):
                    inside = [o for o in range(OW) if 0 <= o * step + start < W]
                    lo, hi = valid_range(OW, W, start, step)
                    assert list(range(lo, hi)) == inside, (OW, W, start, step, lo, hi)
