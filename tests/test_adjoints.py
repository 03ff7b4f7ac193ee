"""Adjoint identities check the conv-family reference kernels without any peer library:
for a linear map A and its adjoint A*, <A x, y> == <x, A* y> for every x, y."""
import numpy as np
import pytest

from helpers import rand, run_graph

# (N, C, H, W, K, kernel, stride, padding, dilation, groups)
GEOMETRIES = [
    (2, 4, 9, 7, 6, (3, 3), 1, ((1, 2), (0, 1)), 1, 2),
    (3, 3, 8, 10, 3, (3, 2), (2, 3), ((2, 0), (1, 1)), (2, 1), 3),
    (1, 1, 6, 6, 1, (4, 4), 2, ((0, 3), (2, 1)), 1, 1),
]


def dot(a, b):
    return float(np.dot(a.astype(np.float64).ravel(), b.astype(np.float64).ravel()))


@pytest.mark.parametrize("case", GEOMETRIES, ids=str)
def test_conv_adjoints(case):
    n, c, h, wd, k, ker, stride, padding, dilation, groups = case
    rng = np.random.default_rng(10)
    x, w = rand(rng, n, c, h, wd), rand(rng, k, c // groups, *ker)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y, _ = run_graph(lambda g, v: g.conv(v["x"], v["w"], **kw), {"x": x}, {"w": w})
    dy = rand(rng, *y.shape)
    dx, _ = run_graph(lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, c, h, wd), **kw),
                      {"dy": dy}, {"w": w})
    dw, _ = run_graph(lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], ker, **kw), {"x": x, "dy": dy})
    lhs = dot(y, dy)
    assert abs(lhs - dot(x, dx)) <= 1e-5 * max(1.0, abs(lhs)) * 10, "conv vs backward input"
    assert abs(lhs - dot(w, dw)) <= 1e-5 * max(1.0, abs(lhs)) * 10, "conv vs backward weight"


def test_conv_transpose_is_the_adjoint_of_conv():
    rng = np.random.default_rng(11)
    c, k, groups = 4, 6, 2
    w = rand(rng, k, c // groups, 3, 2)     # conv weight [K, C/g, ...] = transposed weight [C_in=K, C_out/g=C/g, ...]
    kw = dict(stride=(2, 1), padding=((1, 0), (1, 1)), dilation=(1, 2), groups=groups)
    x = rand(rng, 2, c, 9, 8)
    y, _ = run_graph(lambda g, v: g.conv(v["x"], v["w"], **kw), {"x": x}, {"w": w})
    dy = rand(rng, *y.shape)
    # output_padding makes the transposed output exactly x's shape again
    xt, _ = run_graph(lambda g, v: g.conv_transpose2d(v["dy"], v["w"], output_padding=(1, 0), **kw),
                      {"dy": dy}, {"w": w})
    assert xt.shape == x.shape
    assert abs(dot(y, dy) - dot(x, xt)) <= 1e-4 * max(1.0, abs(dot(y, dy)))
