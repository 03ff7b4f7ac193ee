"""Shape inference and validation when a node is added: refused with a message naming the
node, the attribute and the numbers; the graph is unchanged by a refused node."""
import numpy as np
import pytest

import rlxpy as rx


def graph_with_input(shape=(None, 4, 10, 10)):
    g = rx.Graph()
    return g, g.input("x", shape)


def w(*shape):
    return np.zeros(shape, np.float32)


def test_output_shapes_follow_pytorch_formulas():
    g, x = graph_with_input((2, 4, 10, 11))
    assert g.conv(x, g.param("w", w(6, 2, 3, 3)), stride=2, padding=((1, 0), (2, 1)), groups=2).shape == (2, 6, 5, 6)
    assert g.conv_transpose2d(x, g.param("wt", w(4, 3, 4, 4)), stride=2, padding=1, output_padding=1).shape == (2, 3, 21, 23)
    assert g.pool(x, "max", 3, stride=2, ceil_mode=True).shape == (2, 4, 5, 5)
    assert g.pool(x, "avg", 2).shape == (2, 4, 5, 5)              # stride defaults to the kernel
    assert g.im2col(x, 3, padding=1).shape == (2 * 10 * 11, 36)
    assert g.resize_nearest2x(x).shape == (2, 4, 20, 22)


def test_dynamic_batch_is_kept_symbolic():
    g, x = graph_with_input()
    y = g.conv(x, g.param("w", w(8, 4, 3, 3)), padding=1)
    assert y.shape == ("N", 8, 10, 10)


def test_ceil_mode_last_window_must_start_inside_input():
    # in=5, k=2, s=2, pad=1: ceil gives 4 windows, but the 4th would start at 6 - 1 = 5 >= 5
    g, x = graph_with_input((1, 1, 5, 5))
    assert g.pool(x, "max", 2, stride=2, padding=1, ceil_mode=True).shape == (1, 1, 3, 3)


@pytest.mark.parametrize("build, words", [
    (lambda g, x: g.conv(x, g.param("w", w(8, 3, 3, 3))), ["conv", "3*groups=3", "C=4"]),
    (lambda g, x: g.conv(x, g.param("w", w(8, 2, 3, 3)), groups=3), ["C_in=4", "groups=3"]),
    (lambda g, x: g.conv(x, g.param("w", w(6, 1, 3, 3)), groups=4), ["C_out=6", "groups=4"]),
    (lambda g, x: g.conv(x, g.param("w", w(8, 4, 3))), ["weight", "rank 4"]),
    (lambda g, x: g.conv(x, g.param("w", w(8, 4, 13, 3))), ["spans 13", "padded input is only 10"]),
    (lambda g, x: g.conv(x, g.param("w", w(8, 4, 3, 3)), bias=g.param("b", w(7))), ["bias", "[8]", "[7]"]),
    (lambda g, x: g.conv(x, g.param("w", w(8, 4, 3, 3)), stride=0), ["stride", ">= 1"]),
    (lambda g, x: g.conv(x, g.param("w", w(8, 4, 3, 3)), padding=-1), ["padding", ">= 0"]),
    (lambda g, x: g.conv(x, g.param("w", w(8, 4, 3, 3)), stride=(1, 2, 3)), ["stride", "2 ints"]),
    (lambda g, x: g.conv_transpose2d(x, g.param("w", w(4, 2, 3, 3)), stride=2, output_padding=2),
     ["output_padding=2", "stride (2)"]),
    (lambda g, x: g.conv_transpose2d(x, g.param("w", w(5, 2, 3, 3))), ["C_in=4", "dim 0 is 5"]),
    (lambda g, x: g.pool(x, "max", 3, padding=3), ["padding", "window's reach"]),
    (lambda g, x: g.pool(x, "mean", 3), ["'max' or 'avg'"]),
    (lambda g, x: g.pool(x, "avg", 3, dilation=2, padding=5), ["padding", "dilation*(k-1) = 4"]),
    (lambda g, x: g.pool(x, "max", 12), ["spans 12"]),
    (lambda g, x: g.conv3d(x, g.param("w", w(8, 4, 3, 3, 3))), ["rank 5"]),
    (lambda g, x: g.conv2d_backward_weight(x, g.input("dy", (None, 8, 9, 9)), 3), ["dy", "[N, 8, 8, 8]", "9, 9"]),
    (lambda g, x: g.conv2d_backward_input(g.input("dy", (None, 8, 8, 8)), g.param("w", w(8, 4, 3, 3)),
                                          (None, 4, 11, 10)), ["dy", "[N, 8, 9, 8]"]),
    (lambda g, x: g.max_pool2d_backward(x, g.input("dy", (None, 4, 4, 4)), 2), ["dy", "[N, 4, 5, 5]"]),
])
def test_invalid_nodes_are_refused_with_the_numbers(build, words):
    g, x = graph_with_input()
    n_before = len(g.nodes)
    with pytest.raises(ValueError) as err:
        build(g, x)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert all(n.op in ("Input", "Param") for n in g.nodes[n_before:])  # no op node was added


def test_node_name_is_in_the_message():
    g, x = graph_with_input()
    with pytest.raises(ValueError, match="my_conv"):
        g.conv(x, g.param("w", w(8, 3, 3, 3)), name="my_conv")


def test_param_must_be_float32():
    g = rx.Graph()
    with pytest.raises(TypeError, match="'w'.*float64"):
        g.param("w", np.zeros((2, 2)))


def test_value_from_another_graph_is_refused():
    g1, x1 = graph_with_input()
    g2 = rx.Graph()
    with pytest.raises(ValueError, match="another graph"):
        g2.conv(x1, g2.param("w", w(8, 4, 3, 3)))
    with pytest.raises(ValueError, match="another graph"):
        g2.output("y", x1)


def test_output_name_used_twice_is_refused():
    g, x = graph_with_input()
    y = g.pool(x, "max", 2)
    g.output("y", y)
    with pytest.raises(ValueError, match="output name 'y' is already used"):
        g.output("y", x)


def test_duplicate_names_are_refused():
    g, x = graph_with_input()
    with pytest.raises(ValueError, match="'x'"):
        g.input("x", (1, 2, 3, 4))
    g.pool(x, "max", 2, name="p")
    with pytest.raises(ValueError, match="'p' already exists"):
        g.pool(x, "max", 2, name="p")


def test_bad_input_dims_are_refused():
    g = rx.Graph()
    with pytest.raises(ValueError, match="dim 1"):
        g.input("x", (None, 0, 4, 4))


def test_dispatch_tables_refuse_a_second_entry_for_a_key():
    from rlxpy.ir.ops import shape_rule
    from rlxpy.thunks.compile import compile_rule, lookup
    with pytest.raises(RuntimeError, match="duplicate shape rule for Conv"):
        shape_rule("Conv")(lambda *a: None)
    with pytest.raises(RuntimeError, match="duplicate compile rule for Pool"):
        compile_rule("Pool")(lambda *a: None)
    with pytest.raises(NotImplementedError, match="no compile rule for Einsum"):
        lookup("Einsum")
