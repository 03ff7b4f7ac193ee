"""Beyond one process: pickling, save / load, Dask and Ray batch inference, worker-aware
threads, the bounded plan cache, empty batches, denormal params."""
import gc
import pickle
import weakref

import numpy as np
import pytest

import rlxpy as rx
from rlxpy.cpu_kernels import host

RNG = np.random.default_rng(12)


def net(denormal=False):
    g = rx.Graph()
    x = g.input("x", (None, 3, 16, 16))
    w = (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    if denormal:
        w[0, 0, 0, :] = [1e-40, -3e-39, 0.0]            # two subnormals and a zero
    y = g.relu(g.conv(x, g.param("w", w), padding=1, name="conv"))
    y = g.pool(y, "max", 2, name="pool")
    y = g.linear(g.flatten(y), g.param("fc", (RNG.standard_normal((10, 8 * 64)) * 0.05).astype(np.float32)),
                 name="head")
    g.output("logits", y)
    return g


IMAGES = RNG.standard_normal((64, 3, 16, 16)).astype(np.float32)


def test_executable_and_graph_round_trip_through_pickle_with_params_once():
    g = net()
    exe = rx.compile(g)
    want = exe.run({"x": IMAGES[:5]})["logits"]
    data = pickle.dumps(exe)
    params_bytes = sum(a.nbytes for a in g.params.values())
    assert params_bytes < len(data) < 2 * params_bytes + 20000     # params travel once
    again = pickle.loads(data)
    np.testing.assert_array_equal(again.run({"x": IMAGES[:5]})["logits"], want)
    g2 = pickle.loads(pickle.dumps(g))
    assert [n.name for n in g2.nodes] == [n.name for n in g.nodes]
    np.testing.assert_array_equal(rx.compile(g2).run({"x": IMAGES[:5]})["logits"], want)
    extra = g2.relu(g2.input("z", (1, 4)))                          # still buildable: fresh auto names
    assert extra.name not in [n.name for n in g.nodes[:-1]] and len({n.name for n in g2.nodes}) == len(g2.nodes)


def test_save_and_load_keep_the_chosen_algos(tmp_path):
    g = net()
    exe = rx.compile(g, algos={"conv": "im2col"})
    want = exe.run({"x": IMAGES[:3]})["logits"]
    exe.save(tmp_path / "net.rlx")
    back = rx.load(tmp_path / "net.rlx")
    np.testing.assert_array_equal(back.run({"x": IMAGES[:3]})["logits"], want)
    assert [t.algo for t in back.plan().thunks if t.node.startswith("conv") and ":" not in t.node] == ["im2col"]
    (tmp_path / "bad.rlx").write_bytes(pickle.dumps({"something": 1}))
    with pytest.raises(ValueError, match="not an rlxpy executable"):
        rx.load(tmp_path / "bad.rlx")


def test_empty_batch_returns_empty_outputs_of_the_right_shape_as_pytorch():
    torch = pytest.importorskip("torch")
    exe = rx.compile(net())
    out = exe.run({"x": np.zeros((0, 3, 16, 16), np.float32)})["logits"]
    assert out.shape == (0, 10) and out.dtype == np.float32
    tconv = torch.nn.functional.conv2d(torch.zeros(0, 3, 16, 16), torch.zeros(8, 3, 3, 3), padding=1)
    assert tuple(tconv.shape) == (0, 8, 16, 16)                    # PyTorch runs an empty batch too
    g = rx.Graph()
    g.output("y", g.conv(g.input("x", (None, 3, 16, 16)), g.param("w", np.ones((8, 3, 3, 3), np.float32)),
                         padding=1))
    assert rx.compile(g).run({"x": np.zeros((0, 3, 16, 16), np.float32)})["y"].shape == tuple(tconv.shape)
    np.testing.assert_allclose(exe.run({"x": IMAGES[:2]})["logits"].shape, (2, 10))   # still usable


def test_plan_cache_is_bounded_and_frees_evicted_arenas():
    exe = rx.compile(net(), rx.Config(plan_cache=8))
    first = None
    sizes = range(1, 101)
    held = []
    for n in sizes:
        exe.run({"x": IMAGES[:1].repeat(n, axis=0)})
        if first is None:
            (arena,) = [b.arena for c in exe._compiled.values() for b in c.pool.idle()]
            first = weakref.ref(arena.base)                         # the raw bytes the arena views
            del arena
        held.append(exe.held_bytes())
        assert len(exe._compiled) <= 8
    gc.collect()
    assert first() is None                                          # the first plan's arena is gone
    # what is held: the 8 most recent sizes' arenas, not the 100 sizes'
    assert exe.held_bytes() == sum(c.plan.arena_bytes for c in exe._compiled.values())
    assert sorted(k[0][1][0] for k in exe._compiled) == list(range(93, 101))
    assert rx.Config.from_env({"RLX_PLAN_CACHE": "3"}).plan_cache == 3
    with pytest.raises(ValueError, match="RLX_PLAN_CACHE"):
        rx.Config.from_env({"RLX_PLAN_CACHE": "0"})


def test_denormal_params_are_flushed_and_counted_in_explain():
    g = net(denormal=True)
    exe = rx.compile(g)
    assert exe.denormals_flushed == {"w": 2}
    assert "2 denormal values flushed to zero" in exe.explain()
    w = g.params[next(v for v in g.params if g.nodes[v].name == "w")]
    assert np.count_nonzero((w != 0) & (np.abs(w) < np.finfo(np.float32).tiny)) == 2   # the user's array untouched
    flushed = w.copy()
    flushed[0, 0, 0, :] = 0.0
    g2 = rx.Graph()
    x = g2.input("x", (None, 3, 16, 16))
    g2.output("y", g2.conv(x, g2.param("w", flushed), padding=1))
    g3 = rx.Graph()
    x3 = g3.input("x", (None, 3, 16, 16))
    g3.output("y", g3.conv(x3, g3.param("w", w), padding=1))
    np.testing.assert_array_equal(rx.compile(g3).run({"x": IMAGES[:2]})["y"], rx.compile(g2).run({"x": IMAGES[:2]})["y"])


def test_default_threads_follow_affinity_and_cgroup_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert host.usable_cores(str(tmp_path)) == 4                    # no quota file: the affinity
    (tmp_path / "cpu.max").write_text("150000 100000\n")             # 1.5 CPUs: 2 threads
    assert host.usable_cores(str(tmp_path)) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert host.usable_cores(str(tmp_path)) == 4
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert host.usable_cores(str(tmp_path)) == 1                    # a worker pinned to one core


# --- Dask and Ray ---------------------------------------------------------------------------
def reference_run(exe):
    return exe.run({"x": IMAGES})["logits"]


def test_dask_predict_on_a_local_cluster_matches_one_process():
    da = pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    from rlxpy.distributed import builds_here, predict
    exe = rx.compile(net())
    want = reference_run(exe)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        arr = da.from_array(IMAGES, chunks=(10, 3, 16, 16))          # a ragged last chunk of 4
        out = predict(exe, arr)
        assert out.shape == (64, 10) and out.chunks[0] == arr.chunks[0]
        got = out.compute()
        builds = client.run(builds_here)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert all(n == 1 for n in builds.values()) and len(builds) == 2   # one build per worker, reused


def test_ray_predictor_maps_batches_like_one_process():
    ray = pytest.importorskip("ray")
    from rlxpy.distributed import RayPredictor
    exe = rx.compile(net())
    want = reference_run(exe)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        ds = ray.data.from_items([{"x": IMAGES[i], "i": i} for i in range(64)])
        out = ds.map_batches(RayPredictor, fn_constructor_args=(exe,), concurrency=2, batch_format="numpy",
                             batch_size=16).take_all()
    finally:
        ray.shutdown()
    got = np.stack([row["logits"] for row in out])
    assert got.shape == (64, 10)
    # map_batches may reorder batches: match rows to images by content
    order = [int(np.argmin(np.abs(want - g).sum(axis=1))) for g in got]
    assert sorted(order) == list(range(64))
    np.testing.assert_allclose(got, want[order], rtol=1e-5, atol=1e-5)


def test_import_rlxpy_imports_no_optional_package():
    """dask, distributed, ray, tqdm and matplotlib come only with what uses them."""
    import subprocess
    import sys
    optional = ("dask", "distributed", "ray", "tqdm", "matplotlib", "onnx", "torch")
    code = ("import sys, rlxpy, rlxpy.thunks.profile, rlxpy.thunks.validate, rlxpy.thunks.autotune; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {optional!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "import sys, rlxpy; rlxpy.distributed; print('dask' in sys.modules, 'ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False"                              # rlxpy.distributed imports them when called
