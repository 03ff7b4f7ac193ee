"""Image by image (rlxpy/thunks/segments.py): chains of blocked kernels at batch > 1 run one
image at a time, the values inside a chain held one image at a time."""
import numpy as np
import pytest

import rlxpy as rx
from rlxpy.config import Config
from rlxpy.cpu_kernels import simd
from rlxpy.thunks.segments import Segment, depth_first

RNG = np.random.default_rng(5)
WIDTHS = simd.host_widths()


def _w(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def inverted_residual_net(extra_output=False):
    """stem 3x3 -> depthwise -> 1x1 -> (1x1 expand, depthwise s2, 1x1) -> max pool -> 3x3 with
    the pool's output added -> global pool: the kernels a segment takes, a residual inside.
    The same weights on every call."""
    rng = np.random.default_rng(9)
    g = rx.Graph()
    x = g.input("x", (None, 3, 18, 18))
    a = g.relu(g.conv(x, g.param("w0", _w(rng, 16, 3, 3, 3)), g.param("b0", _w(rng, 16)), padding=1, name="stem"))
    d = g.relu6(g.conv(a, g.param("w1", _w(rng, 16, 1, 3, 3)), padding=1, groups=16, name="dw"))
    p = g.conv(d, g.param("w2", _w(rng, 24, 16, 1, 1)), name="project")
    e = g.relu6(g.conv(p, g.param("w3", _w(rng, 40, 24, 1, 1)), name="expand"))
    s = g.relu6(g.conv(e, g.param("w4", _w(rng, 40, 1, 3, 3)), stride=2, padding=1, groups=40, name="dw_s2"))
    q = g.conv(s, g.param("w5", _w(rng, 24, 40, 1, 1)), name="project2")
    m = g.pool(q, "max", 2, name="pool")
    r = g.relu(g.add(g.conv(m, g.param("w6", _w(rng, 24, 24, 3, 3)), padding=1, name="conv"), m, name="res"))
    g.output("y", g.global_avg_pool(r, name="gap"))
    if extra_output:
        g.output("mid", e)       # a value inside the chain that is also a graph output
    return g


# every kernel a segment may take, forced (at width 1 the default takes none of them)
BLOCKED = {"stem": "nchwc_plain_in", "dw": "nchwc_depthwise", "project": "nchwc_1x1", "expand": "nchwc_1x1",
           "dw_s2": "nchwc_depthwise", "project2": "nchwc_1x1", "pool": "nchwc_pool", "conv": "nchwc_direct"}


def _x(batch):
    return RNG.standard_normal((batch, 3, 18, 18)).astype(np.float32)


def _segments(exe, batch):
    return exe._compile_for({"x": (batch, 3, 18, 18)}).plan.segments


@pytest.mark.parametrize("width", WIDTHS)
def test_a_chain_runs_image_by_image_with_the_whole_batchs_numbers(width):
    x = _x(3)
    whole = rx.compile(inverted_residual_net(), Config(simd_width=width, per_image_mib=0), algos=BLOCKED)
    each = rx.compile(inverted_residual_net(), Config(simd_width=width, per_image_mib=0.001), algos=BLOCKED)
    ref = rx.compile(inverted_residual_net(), Config(fast_conv=False))
    segs = _segments(each, 3)
    assert segs and all(s.stop - s.start >= 2 and s.images == 3 and s.internal for s in segs)
    ran = {t.node.split("+")[0]: t.algo for t in each.plan().thunks if type(t.record).__name__ != "Reorder"}
    assert all(ran[node] == algo for node, algo in BLOCKED.items())
    # every kernel of the table is inside a segment
    inside = {each.plan().thunks[k].node.split("+")[0] for s in segs for k in range(s.start, s.stop)}
    assert inside == set(BLOCKED)
    assert not _segments(whole, 3)
    y_each, y_whole = each.run({"x": x})["y"], whole.run({"x": x})["y"]
    # the same kernels on the same numbers, an image at a time: bit for bit the same
    np.testing.assert_array_equal(y_each, y_whole)
    y_ref = ref.run({"x": x})["y"]
    assert np.abs(y_each - y_ref).max() <= 1e-4 * np.abs(y_ref).max()
    # every image's slice of the chain's output, not only the first image's
    for n in range(3):
        single = each.run({"x": x[n:n + 1]})["y"]
        np.testing.assert_allclose(single[0], y_each[n], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("width", WIDTHS)
def test_values_inside_a_segment_take_one_image_so_the_arena_shrinks(width):
    # the table's kernels forced: the default choice differs by width (at 16 lanes it takes a
    # plain kernel for a node of 24 channels, and the one segment left holds no large value)
    whole = rx.compile(inverted_residual_net(), Config(simd_width=width, per_image_mib=0), algos=BLOCKED)
    each = rx.compile(inverted_residual_net(), Config(simd_width=width, per_image_mib=0.001), algos=BLOCKED)
    x = _x(4)
    whole.run({"x": x})
    each.run({"x": x})
    plan = each.plan()
    assert plan.arena_bytes < whole.plan().arena_bytes
    seg = plan.segments[0]
    # explain() says which thunks run image by image
    text = each.explain()
    assert "image by image with thunks" in text
    assert all("image by image" in t.why for t in plan.thunks[seg.start:seg.stop])
    assert all("image by image" not in t.why for t in whole.plan().thunks)


def test_batch_one_and_the_off_switch_run_whole_batches():
    exe = rx.compile(inverted_residual_net(), Config(per_image_mib=0.001))
    assert not _segments(exe, 1)
    assert _segments(exe, 2)                    # the same executable, another batch: its own plan
    assert not _segments(rx.compile(inverted_residual_net(), Config(per_image_mib=0)), 2)
    # the default threshold (4 MiB) leaves this small net's values whole
    assert not _segments(rx.compile(inverted_residual_net()), 4)
    # an endless threshold takes nothing (and the plan still builds and runs)
    never = rx.compile(inverted_residual_net(), Config(per_image_mib=float("inf")))
    assert not _segments(never, 3)
    assert np.isfinite(never.run({"x": _x(3)})["y"]).all()


def test_a_graph_output_inside_the_chain_is_written_whole():
    x = _x(3)
    each = rx.compile(inverted_residual_net(extra_output=True), Config(per_image_mib=0.001))
    whole = rx.compile(inverted_residual_net(extra_output=True), Config(per_image_mib=0))
    got, want = each.run({"x": x}), whole.run({"x": x})
    for seg in _segments(each, 3):
        assert not any(v in seg.internal for v in each.plan().outputs.values())
    np.testing.assert_array_equal(got["mid"], want["mid"])
    np.testing.assert_array_equal(got["y"], want["y"])


def test_profile_and_validate_see_every_thunk_of_a_segmented_plan():
    exe = rx.compile(inverted_residual_net(), Config(per_image_mib=0.001))
    x = {"x": _x(3)}
    exe.run(x)
    plan = exe.plan()
    assert plan.segments
    prof = exe.profile(x, repeat=2)
    assert [r["node"] for r in prof.rows] == [t.node for t in plan.thunks]
    assert all(r["ms"] > 0 for r in prof.rows)
    report = exe.validate(x)             # checks each thunk's whole output: a plan without segments
    assert report.ok, report.first_failure
    np.testing.assert_array_equal(exe.run(x)["y"], rx.compile(inverted_residual_net(),
                                                              Config(per_image_mib=0)).run(x)["y"])


def test_depth_first_order_interleaves_a_segments_images():
    segs = [Segment(1, 3, 2, frozenset({7}))]
    assert depth_first(4, segs) == [(0, -1, 0), (1, 0, 1), (2, 0, 1), (1, 1, 1), (2, 1, 1), (3, -1, 0)]
    assert depth_first(3, [Segment(0, 2, 3, frozenset({7}), step=2)]) == [(0, 0, 2), (1, 0, 2), (0, 2, 1), (1, 2, 1),
                                                                          (2, -1, 0)]
    assert depth_first(2, []) == [(0, -1, 0), (1, -1, 0)]


@pytest.mark.parametrize("raw,mib", [("off", 0.0), ("0", 0.0), ("2.5", 2.5), ("8", 8.0), ("inf", float("inf"))])
def test_the_flag_takes_off_or_a_size(raw, mib):
    assert Config.from_env({"RLX_PER_IMAGE": raw}).per_image_mib == mib


@pytest.mark.parametrize("raw", ["-1", "big", "nan"])
def test_a_bad_flag_value_names_the_flag(raw):
    with pytest.raises(ValueError, match="RLX_PER_IMAGE"):
        Config.from_env({"RLX_PER_IMAGE": raw})
    with pytest.raises(ValueError, match="per_image_mib"):
        Config(per_image_mib=-1)


def test_rlx_profile_prints_a_line_per_images_call_with_its_own_work(capsys):
    exe = rx.compile(inverted_residual_net(), Config(per_image_mib=0.001, profile=True), algos=BLOCKED)
    x = {"x": _x(3)}
    exe.run(x)
    capsys.readouterr()
    exe.run(x)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlx ")]
    plan = exe.plan()
    seg = plan.segments[0]
    inside = [t.node for t in plan.thunks[seg.start:seg.stop]]
    for node in inside:
        assert sum(ln.endswith(" " + node) for ln in lines) == seg.images
    outside = [t.node for k, t in enumerate(plan.thunks) if not seg.start <= k < seg.stop]
    for node in outside:
        assert sum(ln.endswith(" " + node) for ln in lines) == 1


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "unet", "audio1d"])
def test_whole_models_image_by_image_give_the_whole_batchs_numbers(name):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("torch")
    from cnn_models import MODELS, export
    data = export(name)[0]
    x = RNG.standard_normal((3,) + MODELS[name][1][1:]).astype(np.float32)
    each = rx.compile(rx.onnx.load(onnx.load_from_string(data)), Config(per_image_mib=0.001))
    whole = rx.compile(rx.onnx.load(onnx.load_from_string(data)), Config(per_image_mib=0))
    got = each.run({"input": x})["output"]
    assert each.plan().segments
    np.testing.assert_array_equal(got, whole.run({"input": x})["output"])
