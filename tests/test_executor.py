"""The executable through the public API: runs, bad input, planning, threads, dynamic dims."""
import threading

import numpy as np
import pytest

import rlxpy as rx
from rlxpy.thunks import arena as A
from rlxpy.thunks import records as R

from helpers import REFERENCE, assert_close, rand


def issue_graph(rng):
    g = rx.Graph()
    x = g.input("x", (None, 3, 32, 32))
    w = g.param("w", rand(rng, 8, 3, 3, 3))
    b = g.param("b", rand(rng, 8))
    y = g.conv(x, w, bias=b, stride=1, padding=1)
    z = g.pool(y, "max", kernel_size=2, stride=2)
    g.output("z", z)
    return g


@pytest.fixture(scope="module")
def exe():
    return rx.compile(issue_graph(np.random.default_rng(0)), REFERENCE)


def test_issue_example_runs_and_matches_torch(exe):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(0)
    g = issue_graph(rng)
    x = rand(rng, 4, 3, 32, 32)
    out = exe.run({"x": x})
    assert set(out) == {"z"} and out["z"].shape == (4, 8, 16, 16) and out["z"].dtype == np.float32
    w, b = (g.params[g.nodes[i].output] for i in (1, 2))
    ref = F.max_pool2d(F.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                torch.from_numpy(b).double(), padding=1), 2, 2)
    assert_close(out["z"], ref.numpy(), 1e-5)
    text = exe.explain()
    for word in ("Conv2D", "Pool2D", "naive", "MFLOP", "arena:", "[4, 3, 32, 32]"):
        assert word in text


@pytest.mark.parametrize("inputs, err, words", [
    ({"y": np.zeros((1, 3, 32, 32), np.float32)}, ValueError, ["unknown input 'y'", "['x']"]),
    ({}, ValueError, ["missing input 'x'"]),
    ({"x": np.zeros((1, 3, 32, 32), np.float32), "extra": np.zeros(1, np.float32)}, ValueError, ["'extra'"]),
    ({"x": np.zeros((3, 32, 32), np.float32)}, ValueError, ["'x'", "rank 4", "(3, 32, 32)"]),
    ({"x": np.zeros((1, 4, 32, 32), np.float32)}, ValueError, ["'x'", "dim 1 must be 3"]),
    ({"x": np.zeros((1, 3, 32, 32), np.float64)}, TypeError, ["'x'", "float32", "float64"]),
    ({"x": [[1.0]]}, TypeError, ["'x'", "numpy array"]),
    ([("x", None)], TypeError, ["dict"]),
])
def test_bad_input_is_refused_and_the_executable_stays_usable(exe, inputs, err, words):
    with pytest.raises(err) as info:
        exe.run(inputs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    x = rand(np.random.default_rng(1), 2, 3, 32, 32)
    assert exe.run({"x": x})["z"].shape == (2, 8, 16, 16)


def test_dynamic_dims_must_agree_across_inputs():
    g = rx.Graph()
    a, b = g.input("a", (None, 2, 4, 4)), g.input("b", (None, 2, 8, 8))
    g.output("a2", g.resize_nearest2x(a))
    g.output("b1", g.pool(b, "max", 1))
    exe = rx.compile(g, REFERENCE)
    with pytest.raises(ValueError, match="'b'.*bound N to 2"):
        exe.run({"a": np.zeros((2, 2, 4, 4), np.float32), "b": np.zeros((3, 2, 8, 8), np.float32)})


def test_shape_errors_found_at_bind_time_name_the_node():
    g = rx.Graph()
    x = g.input("x", (1, 1, None, None))
    g.output("y", g.conv(x, g.param("w", np.ones((1, 1, 5, 5), np.float32)), name="big_kernel"))
    exe = rx.compile(g, REFERENCE)
    with pytest.raises(ValueError, match="big_kernel.*spans 5"):
        exe.run({"x": np.ones((1, 1, 3, 3), np.float32)})
    assert exe.run({"x": np.ones((1, 1, 6, 7), np.float32)})["y"].shape == (1, 1, 2, 3)


@pytest.mark.parametrize("config", [REFERENCE, rx.Config()], ids=["reference", "fast"])
def test_nan_and_inf_propagate(config):
    g = rx.Graph()
    x = g.input("x", (1, 1, 4, 4))
    g.output("conv", g.conv(x, g.param("w", np.ones((1, 1, 1, 1), np.float32))))
    g.output("max", g.pool(x, "max", 2))
    g.output("avg", g.pool(x, "avg", 2))
    xv = np.zeros((1, 1, 4, 4), np.float32)
    xv[0, 0, 0, 0], xv[0, 0, 3, 3] = np.nan, np.inf
    out = rx.compile(g, config).run({"x": xv})
    assert np.isnan(out["conv"][0, 0, 0, 0]) and np.isinf(out["conv"][0, 0, 3, 3])
    assert np.isnan(out["max"][0, 0, 0, 0]) and out["max"][0, 0, 1, 1] == np.inf
    assert np.isnan(out["avg"][0, 0, 0, 0]) and out["avg"][0, 0, 1, 1] == np.inf
    assert out["max"][0, 0, 0, 1] == 0 and out["avg"][0, 0, 1, 0] == 0


def test_non_contiguous_inputs_are_accepted(exe):
    base = rand(np.random.default_rng(2), 32, 32, 3, 2)
    x = base.transpose(3, 2, 0, 1)          # a strided view, not C-contiguous
    assert not x.flags.c_contiguous
    assert np.array_equal(exe.run({"x": x})["z"], exe.run({"x": np.ascontiguousarray(x)})["z"])


def test_outputs_are_fresh_arrays(exe):
    x = rand(np.random.default_rng(3), 1, 3, 32, 32)
    first = exe.run({"x": x})["z"]
    keep = first.copy()
    first[...] = 123.0                       # scribbling on an output changes nothing inside
    second = exe.run({"x": x})["z"]
    assert np.array_equal(second, keep)
    assert not np.shares_memory(first, second)


def test_params_are_copied_when_bound():
    g = rx.Graph()
    w = np.ones((1, 1, 1, 1), np.float32)
    x = g.input("x", (1, 1, 2, 2))
    g.output("y", g.conv(x, g.param("w", w)))
    exe = rx.compile(g, REFERENCE)
    w[...] = 5.0
    assert np.array_equal(exe.run({"x": np.ones((1, 1, 2, 2), np.float32)})["y"], np.ones((1, 1, 2, 2)))


@pytest.mark.parametrize("config", [REFERENCE, rx.Config(), rx.Config(winograd=True)], ids=["reference", "fast", "winograd"])
def test_two_threads_running_one_executable_both_get_correct_results(config):
    """Fast kernels too: their scratch slots live in the run's own arena."""
    exe = rx.compile(issue_graph(np.random.default_rng(0)), config)
    rng = np.random.default_rng(4)
    xs = [rand(rng, 2, 3, 32, 32) for _ in range(2)]
    expected = [exe.run({"x": x})["z"] for x in xs]
    results, errors = {}, []
    start = threading.Barrier(2)

    def worker(i):
        try:
            start.wait()
            for rep in range(20):
                out = exe.run({"x": xs[i]})["z"]
                if not np.array_equal(out, expected[i]):
                    results[i] = False
                    return
            results[i] = True
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == {0: True, 1: True}


def test_a_plan_is_built_once_per_concrete_shape(exe):
    p2 = exe.plan({"x": (2, 3, 32, 32)})
    assert exe.plan({"x": (2, 3, 32, 32)}) is p2
    p5 = exe.plan({"x": (5, 3, 32, 32)})
    assert p5 is not p2 and p5.outputs["z"][1] == (5, 8, 16, 16)
    exe.run({"x": np.zeros((5, 3, 32, 32), np.float32)})
    assert exe.plan() is p5                 # explain()/thunks show the last plan run


def deep_chain(rng, depth=12, c=8, hw=16):
    g = rx.Graph()
    y = g.input("x", (2, c, hw, hw))
    for i in range(depth):
        y = g.conv(y, g.param(f"w{i}", rand(rng, c, c, 3, 3, scale=0.2)), padding=1)
    g.output("y", y)
    return g


def test_deep_chain_arena_reuses_bytes_and_matches_unplanned_run():
    g = deep_chain(np.random.default_rng(5))
    planned, unplanned = rx.compile(g, REFERENCE), rx.compile(g, REFERENCE, plan_memory=False)
    p, u = planned.plan(), unplanned.plan()
    act = 2 * 8 * 16 * 16 * 4
    # 12 intermediates + input + output: reuse needs the pinned ones plus two live activations
    assert u.arena_bytes >= 13 * act
    assert p.arena_bytes <= 4 * act + sum(A.align(4 * 8 * 8 * 9) for _ in range(12))
    offsets = {t.off("y") for t in p.thunks}
    assert len(offsets) < len(p.thunks)      # intermediates really share bytes
    x = rand(np.random.default_rng(6), 2, 8, 16, 16)
    assert np.array_equal(planned.run({"x": x})["y"], unplanned.run({"x": x})["y"])


def test_planner_never_overlaps_live_buffers():
    rng = np.random.default_rng(7)
    for _ in range(50):
        bufs = []
        for vid in range(30):
            first = int(rng.integers(-1, 20))
            bufs.append(A.Buffer(vid, int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
        offsets, total = A.plan_offsets(bufs)
        for a in bufs:
            assert offsets[a.vid] % 64 == 0 and offsets[a.vid] + a.nbytes <= total
            for b in bufs:
                if a.vid < b.vid and a.first <= b.last and b.first <= a.last:
                    a0, b0 = offsets[a.vid], offsets[b.vid]
                    assert a0 + a.nbytes <= b0 or b0 + b.nbytes <= a0, (a, b)


def test_pinned_values_are_never_overlapped():
    g = deep_chain(np.random.default_rng(8), depth=4)
    p = rx.compile(g, REFERENCE).plan()
    x_off, _ = p.inputs["x"]
    y_off, _ = p.outputs["y"]
    size = 2 * 8 * 16 * 16 * 4
    for t in p.thunks[:-1]:
        assert not (t.off("y") < x_off + size and x_off < t.off("y") + size)
        assert not (t.off("y") < y_off + size and y_off < t.off("y") + size)


def test_arena_is_64_byte_aligned(exe):
    assert A.new_arena(1000).ctypes.data % 64 == 0
    assert all(t.off("x") % 64 == 0 and t.off("y") % 64 == 0 for t in exe.thunks)


def test_conv1d_lowers_to_the_2d_record_without_a_copy():
    g = rx.Graph()
    x = g.input("x", (2, 3, 17))
    g.output("y", g.conv(x, g.param("w", np.ones((4, 3, 5), np.float32)), stride=2, padding=(1,)))
    exe = rx.compile(g, REFERENCE)
    (th,) = exe.thunks                       # one thunk: no reshape/copy record
    rec = th.record
    assert isinstance(rec, R.Conv2D) and rec.geometry.x_shape == (2, 3, 1, 17) and rec.geometry.kernel == (1, 5)
    assert th.off("x") == exe.plan().inputs["x"][0]
    assert exe.run({"x": np.ones((2, 3, 17), np.float32)})["y"].shape == (2, 4, 8)


def test_1x1_unpadded_conv_lowers_to_conv2d1x1():
    g = rx.Graph()
    x = g.input("x", (1, 4, 5, 5))
    g.output("a", g.conv(x, g.param("w", np.ones((2, 4, 1, 1), np.float32))))
    g.output("b", g.conv(x, g.param("w2", np.ones((2, 4, 1, 1), np.float32)), padding=1))
    types = [type(t.record) for t in rx.compile(g, REFERENCE).thunks]
    assert types == [R.Conv2D1x1, R.Conv2D]


def _assert_plain(obj, path):
    """ints, floats, strs, bools, tuples of ints, or frozen dataclasses made of those."""
    import dataclasses
    if dataclasses.is_dataclass(obj):
        assert obj.__dataclass_params__.frozen, path
        for f in dataclasses.fields(obj):
            _assert_plain(getattr(obj, f.name), f"{path}.{f.name}")
    else:
        assert isinstance(obj, (int, float, str, bool)) or all(isinstance(i, int) for i in obj), path


def test_records_are_frozen_plain_data(exe):
    import dataclasses
    import pickle
    th = exe.thunks[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        th.algo = "im2col"
    with pytest.raises(dataclasses.FrozenInstanceError):
        th.record.geometry.groups = 2
    assert pickle.loads(pickle.dumps(th)) == th
    _assert_plain(th, "thunk")


def test_reference_config_records_naive_everywhere():
    exe = rx.compile(deep_chain(np.random.default_rng(9), depth=2), rx.Config(fast_conv=False))
    assert [t.algo for t in exe.thunks] == ["naive", "naive"]
    assert all("RLX_FAST_CONV=0" in t.why for t in exe.thunks)


def test_graph_without_outputs_is_refused():
    g = rx.Graph()
    g.input("x", (1, 1, 2, 2))
    with pytest.raises(ValueError, match="no outputs"):
        rx.compile(g)


def test_graph_changes_after_compile_do_not_leak_in(exe):
    g = rx.Graph()
    x = g.input("x", (1, 1, 4, 4))
    g.output("y", g.pool(x, "max", 2))
    e = rx.compile(g, REFERENCE)
    g.output("z", g.pool(x, "avg", 2))
    assert set(e.run({"x": np.ones((1, 1, 4, 4), np.float32)})) == {"y"}


@pytest.mark.parametrize("inputs, err, words", [
    ({"x": np.zeros((1, 3, 8, 8), np.float64)}, TypeError, ["'x'", "float32", "float64"]),
    ({"x": np.zeros((2, 3, 8, 8), np.float32)}, ValueError, ["'x'", "dim 0 must be 1"]),
    ({"y": np.zeros((1, 3, 8, 8), np.float32)}, ValueError, ["unknown input 'y'"]),
    ({"x": np.zeros((1, 3, 8, 8), np.float32), "z": np.zeros(1, np.float32)}, ValueError, ["unknown input 'z'"]),
    ({}, ValueError, ["missing input 'x'"]),
    ({"x": np.zeros((1, 3, 8, 8), np.float32).tolist()}, TypeError, ["numpy array"]),
])
def test_static_graph_fast_input_check_still_refuses_bad_input(inputs, err, words):
    """A graph whose inputs are all static checks whole shapes at once; anything that fails
    that goes through the full check, with the same messages."""
    g = rx.Graph()
    g.output("y", g.pool(g.input("x", (1, 3, 8, 8)), "max", 2))
    exe = rx.compile(g, REFERENCE)
    with pytest.raises(err) as info:
        exe.run(inputs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    good = rand(np.random.default_rng(2), 1, 3, 8, 8)
    assert np.array_equal(exe.run({"x": good})["y"], good.reshape(1, 3, 4, 2, 4, 2).max(axis=(3, 5)))


def test_a_dynamic_graphs_last_shapes_are_checked_at_once_but_still_refused_when_bad():
    """After a run, arrays of exactly the shapes it accepted skip the full check; anything
    else (another dtype, a list, another batch, dynamic dims that no longer agree) goes
    through it, with the full check's messages, and a new batch gets its own plan."""
    g = rx.Graph()
    a, b = g.input("a", (None, 2, 4, 4)), g.input("b", (None, 2, 4, 4))
    g.output("y", g.add(g.pool(a, "max", 2), g.pool(b, "avg", 2)))
    exe = rx.compile(g, REFERENCE)
    rng = np.random.default_rng(3)

    def want(av, bv):
        return av.reshape(-1, 2, 2, 2, 2, 2).max(axis=(3, 5)) + bv.reshape(-1, 2, 2, 2, 2, 2).mean(axis=(3, 5))
    for n in (2, 2, 3, 2):
        av, bv = rand(rng, n, 2, 4, 4), rand(rng, n, 2, 4, 4)
        np.testing.assert_allclose(exe.run({"a": av, "b": bv})["y"], want(av, bv), rtol=1e-6, atol=1e-6)
    good = rand(rng, 2, 2, 4, 4)
    for inputs, err, words in (({"a": good.astype(np.float64), "b": good}, TypeError, ["'a'", "float64"]),
                               ({"a": good, "b": good.tolist()}, TypeError, ["'b'", "numpy array"]),
                               ({"a": good, "b": rand(rng, 3, 2, 4, 4)}, ValueError, ["'b'", "bound N to 2"]),
                               ({"a": good}, ValueError, ["missing input 'b'"])):
        with pytest.raises(err) as info:
            exe.run(inputs)
        assert all(w in str(info.value) for w in words), str(info.value)
    np.testing.assert_allclose(exe.run({"a": good, "b": good})["y"], want(good, good), rtol=1e-6, atol=1e-6)


def test_thread_count_follows_each_executables_config():
    import numba
    g = rx.Graph()
    g.output("y", g.pool(g.input("x", (1, 1, 4, 4)), "max", 2))
    one, every = rx.compile(g, rx.Config(num_threads=1)), rx.compile(g, rx.Config())
    x = np.ones((1, 1, 4, 4), np.float32)
    one.run({"x": x})
    assert numba.get_num_threads() == 1
    every.run({"x": x})
    assert numba.get_num_threads() == every.threads == numba.config.NUMBA_NUM_THREADS
