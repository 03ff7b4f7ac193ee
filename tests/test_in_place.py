"""Concats and reshapes that need no copy (rlxpy/thunks/in_place.py): their inputs' bytes
are their output's, so their thunks run nothing. What must hold: the numbers are the
reference's and the copying plan's, each aliased value sits where its slice of the output
is, nothing else is planned over those bytes while any of them lives, and where a slice is
not contiguous, or a value is one a caller sees or another alias holds, the copy stays."""
from __future__ import annotations

import numpy as np
import pytest

import rlxpy as rx
from rlxpy.thunks.in_place import IN_PLACE
from rlxpy.thunks.layout import stored_bytes

from helpers import REFERENCE, assert_close, rand

WIDTHS = [16, 8, 1]
pytestmark = pytest.mark.usefixtures("every_width")   # conftest: 16 and 8 lanes on any host


def _thunks(exe, shapes):
    """The plan's thunks for these input shapes, by node name (a fused thunk under each of
    its nodes' names: conv_1+relu_2)."""
    return {name: t for t in exe._compile_for(shapes).plan.thunks for name in t.node.split("+")}


def _skip_graph(rng, n, c=16):
    """A UNet level: the skip `a` is read by a chain of three convs (values planned while
    it waits) and then concatenated with the chain's end, which a 1x1 conv reads."""
    g = rx.Graph()
    x = g.input("x", (n, 4, 12, 10))
    a = g.relu(g.conv(x, g.param("w0", rand(rng, c, 4, 3, 3, scale=0.3)), padding=1), name="skip")
    t = a
    for k in range(3):
        t = g.relu(g.conv(t, g.param(f"w{k + 1}", rand(rng, c, c, 3, 3, scale=0.2)), padding=1), name=f"chain{k}")
    cat = g.concat([t, a], 1, name="cat")
    g.output("y", g.conv(cat, g.param("w4", rand(rng, 8, 2 * c, 1, 1, scale=0.3)), name="head"))
    return g


@pytest.mark.parametrize("width", WIDTHS)
def test_a_skip_concat_at_batch_1_is_written_in_place(width):
    rng = np.random.default_rng(0)
    g = _skip_graph(rng, 1)
    xv = rand(rng, 1, 4, 12, 10)
    exe = rx.compile(g, rx.Config(simd_width=width))
    th = _thunks(exe, {"x": (1, 4, 12, 10)})
    cat = th["cat"]
    assert cat.algo == IN_PLACE, exe.explain()
    # the chain's end at the concat's start, the skip right after it: one block-aligned slice each
    x0, x1, y = cat.offsets
    layout = dict(cat.layouts).get("y", "nchw")
    assert (x0, x1) == (y, y + stored_bytes((1, 16, 12, 10), layout))
    assert th["chain2"].offsets[-1] == x0 and th["skip"].offsets[-1] == x1
    out = exe.run({"x": xv})["y"]
    copied = rx.compile(g, rx.Config(simd_width=width, in_place=False))
    assert _thunks(copied, {"x": (1, 4, 12, 10)})["cat"].algo != IN_PLACE
    np.testing.assert_array_equal(out, copied.run({"x": xv})["y"])      # the same kernels, other bytes
    assert_close(out, rx.compile(g, REFERENCE).run({"x": xv})["y"], 1e-4, "in-place concat")
    assert "in place: its 2 inputs are written straight into their slices" in exe.explain()


def test_an_in_place_concat_writes_only_its_slices():
    """Every value its own bytes with guard zones around them: the producers that write into
    the concat's output write inside it, and the run is still right."""
    rng = np.random.default_rng(1)
    g = _skip_graph(rng, 1)
    xv = rand(rng, 1, 4, 12, 10)
    exe = rx.compile(g, rx.Config(), plan_memory=False, guard_bytes=256)
    assert _thunks(exe, {"x": (1, 4, 12, 10)})["cat"].algo == IN_PLACE
    assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], 1e-4, "guarded")
    assert exe.guard_violations() == []


@pytest.mark.parametrize("width", [16, 8])
def test_a_concat_copies_where_its_inputs_are_not_slices_it_owns(width):
    """Batch 2 (each input is one slice per image); one value twice; a graph input; a value
    two concats read (the first takes it, the second copies)."""
    rng = np.random.default_rng(2)
    config = rx.Config(simd_width=width)
    for n in (2, 1):
        g = _skip_graph(rng, None)
        exe = rx.compile(g, config)
        xv = rand(rng, n, 4, 12, 10)
        assert (_thunks(exe, {"x": xv.shape})["cat"].algo == IN_PLACE) == (n == 1)
        assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], 1e-4, f"batch {n}")

    g = rx.Graph()
    x = g.input("x", (1, 16, 6, 5))
    a = g.relu(g.conv(x, g.param("w", rand(rng, 16, 16, 3, 3, scale=0.3)), padding=1), name="a")
    b = g.relu(g.conv(a, g.param("v", rand(rng, 16, 16, 3, 3, scale=0.3)), padding=1), name="b")
    twice = g.concat([a, a], 1, name="twice")
    with_input = g.concat([b, x], 1, name="with_input")
    first = g.concat([a, b], 1, name="first")
    second = g.concat([b, a], 1, name="second")
    for k, v in enumerate((twice, with_input, first, second)):
        g.output(f"o{k}", g.conv(v, g.param(f"h{k}", rand(rng, 16, 32, 1, 1, scale=0.3))))
    exe = rx.compile(g, config)
    th = _thunks(exe, {"x": (1, 16, 6, 5)})
    algos = {name: th[name].algo for name in ("twice", "with_input", "first", "second")}
    assert algos["first"] == IN_PLACE and all(a != IN_PLACE for k, a in algos.items() if k != "first"), algos
    xv = rand(rng, 1, 16, 6, 5)
    out, ref = exe.run({"x": xv}), rx.compile(g, REFERENCE).run({"x": xv})
    for k in ref:
        assert_close(out[k], ref[k], 1e-4, k)


def test_a_plain_concat_in_place_needs_aligned_contiguous_slices():
    """Plain values (no blocked neighbour): along the channels at batch 1 in place when each
    slice starts on the arena's 64-byte alignment; 3 channels of 5x5 (300 bytes) do not;
    along the last axis of [1, 2, ...] a slice is two pieces; a part that is also a graph
    output keeps its own bytes (the run may write it straight into the caller's array)."""
    rng = np.random.default_rng(3)
    for c, axis, b_out, expect in ((16, 1, False, True), (3, 1, False, False), (16, 3, False, False),
                                   (16, 1, True, False)):
        g = rx.Graph()
        x = g.input("x", (1, c, 5, 5))
        a, b = g.sigmoid(x, name="a"), g.tanh(x, name="b")
        g.output("y", g.mul(g.concat([a, b], axis, name="cat"), g.param("s", np.float32([[[[2.0]]]]))))
        if b_out:
            g.output("b", b)
        exe = rx.compile(g, rx.Config(simd_width=1))
        assert (_thunks(exe, {"x": (1, c, 5, 5)})["cat"].algo == IN_PLACE) == expect, (c, axis, b_out)
        xv = rand(rng, 1, c, 5, 5)
        out = exe.run({"x": xv})
        np.testing.assert_allclose(out["y"], 2 * np.concatenate([1 / (1 + np.exp(-xv)), np.tanh(xv)], axis),
                                   rtol=1e-5, atol=1e-6)
        if b_out:
            np.testing.assert_allclose(out["b"], np.tanh(xv), rtol=1e-5, atol=1e-6)


def test_a_flatten_of_a_computed_value_reads_its_bytes():
    """The classifier's flatten after global pooling is the pooled bytes; a reshape of a graph
    input, or one whose result is a graph output, keeps its copy (the caller's arrays)."""
    rng = np.random.default_rng(4)
    g = rx.Graph()
    x = g.input("x", (1, 16, 7, 7))
    c = g.relu(g.conv(x, g.param("w", rand(rng, 32, 16, 3, 3, scale=0.2)), padding=1))
    flat = g.flatten(g.global_avg_pool(c), name="flat")
    g.output("logits", g.linear(flat, g.param("fc", rand(rng, 10, 32, scale=0.3))))
    g.output("raw", g.reshape(x, (1, -1), name="raw"))
    g.output("seen", g.reshape(c, (1, 32, 49), name="seen"))
    for config in (rx.Config(), rx.Config.from_env({"RLX_IN_PLACE": "0"})):
        exe = rx.compile(g, config)
        th = _thunks(exe, {"x": (1, 16, 7, 7)})
        assert (th["flat"].algo == IN_PLACE) == config.in_place
        if config.in_place:
            assert th["flat"].offsets[0] == th["flat"].offsets[1]
        assert th["raw"].algo != IN_PLACE and th["seen"].algo != IN_PLACE
        xv = rand(rng, 1, 16, 7, 7)
        out, ref = exe.run({"x": xv}), rx.compile(g, REFERENCE).run({"x": xv})
        for k in ref:
            assert_close(out[k], ref[k], 1e-4, k)
        np.testing.assert_array_equal(out["raw"], xv.reshape(1, -1))


def _decoder_graph(rng, c=16):
    """A UNet decoder level at any batch: the skip `a`, read by a max pool and the concat; a
    nearest 2x resize and a 2x2 stride-2 transposed conv of the level below, each read by
    the concat alone; a 1x1 conv on the concat."""
    g = rx.Graph()
    x = g.input("x", (None, 4, 8, 6))
    a = g.relu(g.conv(x, g.param("w0", rand(rng, c, 4, 3, 3, scale=0.3)), padding=1), name="skip")
    low = g.relu(g.conv(g.pool(a, "max", 2), g.param("w1", rand(rng, 2 * c, c, 3, 3, scale=0.2)), padding=1),
                 name="low")
    up = g.resize_nearest2x(low, name="up")
    t = g.conv_transpose2d(low, g.param("wt", rand(rng, 2 * c, c, 2, 2, scale=0.2)), stride=2, name="tconv")
    cat = g.concat([up, a, t], 1, name="cat")
    g.output("y", g.conv(cat, g.param("w4", rand(rng, 8, 4 * c, 1, 1, scale=0.3)), name="head"))
    return g, up


@pytest.mark.parametrize("width", [16, 8])
def test_a_decoder_concat_at_batch_3_takes_the_resize_and_the_transposed_conv_in_their_slices(width):
    """Batch 3: the concat's slices are strided, image n of each at n times the output's
    image bytes. The resize and the transposed conv (patches) write theirs straight there,
    told the stride; the concat copies only the skip, which a pool reads too. The numbers
    are the copying plan's (the same kernels) and the reference's; validate() reads the
    strided slices; with guard zones, nothing is written outside them."""
    rng = np.random.default_rng(5)
    g, _ = _decoder_graph(rng)
    xv = rand(rng, 3, 4, 8, 6)
    config, algos = rx.Config(simd_width=width), {"tconv": "nchwc_subpixel"}
    exe = rx.compile(g, config, algos=algos)
    th = _thunks(exe, {"x": xv.shape})
    cat, up, tconv, skip = th["cat"], th["up"], th["tconv"], th["skip"]
    layout = cat.layout("y")
    image = stored_bytes((1, 64, 8, 6), layout)
    slice_of = {c: stored_bytes((1, c, 8, 6), layout) for c in (32, 48)}   # where the skip and tconv start
    assert cat.algo == "nchwc_concat" and dict(cat.image_strides) == {"x0": image, "x2": image}, exe.explain()
    x0, x1, x2, y = cat.offsets
    assert (x0, x2) == (y, y + slice_of[48]) and not y <= x1 < y + 3 * image
    assert up.off("y") == x0 and up.image_stride("y", 0) == image
    assert tconv.off("y") == x2 and tconv.image_stride("y", 0) == image
    assert skip.image_strides == () and dict(skip.image_strides).get("y") is None
    explained = exe.explain()
    assert "x0, x2 written straight into their slices of the output by their producers" in explained
    assert "copies the other 1 of its 3 inputs" in explained and "writes straight into its slice" in explained
    out = exe.run({"x": xv})["y"]
    copied = rx.compile(g, rx.Config(simd_width=width, in_place=False), algos=algos)
    assert _thunks(copied, {"x": xv.shape})["cat"].image_strides == ()
    np.testing.assert_array_equal(out, copied.run({"x": xv})["y"])
    assert_close(out, rx.compile(g, REFERENCE).run({"x": xv})["y"], 1e-4, "strided concat")
    assert exe.validate({"x": xv}).ok
    guarded = rx.compile(g, config, plan_memory=False, guard_bytes=256, algos=algos)
    assert dict(_thunks(guarded, {"x": xv.shape})["cat"].image_strides) == {"x0": image, "x2": image}
    np.testing.assert_array_equal(guarded.run({"x": xv})["y"], out)
    assert guarded.guard_violations() == []


def test_a_strided_slice_needs_the_concat_as_its_only_reader():
    """The resize's output also read by a second node (then it keeps its own bytes and the
    concat copies it); at batch 1 the whole concat is in place as before; a batch of 2 after
    a batch of 3 on one executable, each right."""
    rng = np.random.default_rng(6)
    g, up = _decoder_graph(rng)
    g.output("up_sum", g.global_avg_pool(up))
    exe = rx.compile(g, rx.Config(simd_width=16), algos={"tconv": "nchwc_subpixel"})
    ref = rx.compile(g, REFERENCE)
    for n in (3, 1, 2):
        xv = rand(rng, n, 4, 8, 6)
        th = _thunks(exe, {"x": xv.shape})
        if n == 1:
            assert th["cat"].algo == IN_PLACE, exe.explain()
        else:
            assert dict(th["cat"].image_strides).keys() == {"x2"}, exe.explain()
            assert th["up"].image_strides == ()
        out, want = exe.run({"x": xv}), ref.run({"x": xv})
        for k in want:
            assert_close(out[k], want[k], 1e-4, f"{k} at batch {n}")
