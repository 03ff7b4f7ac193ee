"""The command line (python -m rlxpy ...), run in-process through its main(argv): env,
profile, bench, warmup; and the one-line notice before a cold compile."""
import functools
import json

import numba
import numpy as np
import pytest

from rlxpy.__main__ import main
from rlxpy.cpu_kernels import jit


def small_model(path):
    """Conv 3x3 (8 -> 16) + Relu + GlobalAveragePool, dynamic batch, as ONNX."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 1, 1])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_env_reports_versions_width_threads_and_the_flags_set(capsys, monkeypatch):
    monkeypatch.setenv("RLX_NUM_THREADS", "1")
    assert main(["env"]) == 0
    lines = dict(line.split(None, 1) if not line.startswith(("simd width", "numba threading", "RLX flags",
                                                             "numba cache", "autotune cache"))
                 else (line[:22].strip(), line[22:].strip()) for line in capsys.readouterr().out.splitlines())
    assert lines["numba"].strip() == numba.__version__
    import rlxpy as rx
    from rlxpy.cpu_kernels import simd
    width = simd.resolve_width(rx.Config.from_env().simd_width)     # RLX_SIMD_WIDTH where set
    assert lines["simd width"].startswith(f"{width} float32 lanes")
    assert lines["threads"].startswith("1 ")
    assert "RLX_NUM_THREADS=1" in lines["RLX flags"]
    assert lines["numba threading layer"] in ("omp", "tbb", "workqueue")


def test_profile_command_prints_the_table_and_writes_a_trace(tmp_path, capsys):
    path = small_model(tmp_path / "m.onnx")
    trace = tmp_path / "t.json"
    assert main(["profile", str(path), "--batch", "2", "--repeat", "2", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "profile: x [2, 8, 10, 10]" in out and "GFLOP/s" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert events and all(e["name"] in out for e in events)
    assert any(e["name"].startswith("conv") for e in events)


def test_bench_command_compares_with_onnxruntime_per_batch(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    path = small_model(tmp_path / "m.onnx")
    assert main(["bench", str(path), "--batch", "1", "3", "--runs", "2"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln[:5].strip().isdigit()]
    assert [r[0] for r in rows] == ["1", "3"]
    for r in rows:
        mine, theirs, ratio = map(float, r[1:4])
        # the times are printed to 0.001 ms: a tiny model's ratio is known only that well
        slack = 0.005 + (theirs / mine) * (0.0005 / mine + 0.0005 / theirs)
        assert abs(ratio - theirs / mine) <= slack


def test_warmup_runs_the_selected_jobs(capsys):
    from rlxpy.cpu_kernels.pool import pool_naive
    from rlxpy.testing import cases
    case = next(c for c in cases("fast") if c.op == "pool")
    assert main(["warmup", "--only", case.id]) == 0
    assert "warmup: 1 jobs" in capsys.readouterr().out
    assert pool_naive.overloads                             # its reference kernel compiled (or loaded)


def test_cold_compile_notice_is_one_line_once_per_process(monkeypatch, capsys):
    monkeypatch.setattr(jit, "_noticed", False)
    monkeypatch.setattr(jit, "_index_exists", lambda d: False)
    fresh = numba.njit(cache=True)(lambda a: a + 1)        # never called: nothing compiled in this process
    calls = [functools.partial(fresh, 1)]
    assert jit.cold_kernels(calls) == [fresh]
    assert jit.notice_if_cold(calls) and not jit.notice_if_cold(calls)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlxpy: compiling numba kernels")
    fresh(1)
    assert jit.cold_kernels(calls) == []                   # compiled now: warm


def test_bound_calls_go_straight_to_the_compiled_kernel_after_the_first():
    """A bound numba call resolves the compiled overload on its first call and calls its entry
    point after that (numba's per-call type dispatch cost 15-35 us a kernel); a call sharing
    the resolved entry uses it at once; other callables stay partials."""
    import numpy as np
    kernel = numba.njit(lambda a, k: a[0] + k)
    call = jit.bound_call(kernel, (np.ones(3), 2))
    assert isinstance(call, jit.FastCall) and call.entry[0] is None and jit.cold_kernels([call]) == []
    assert call() == 3
    (sig,) = kernel.signatures
    assert call.entry[0] is kernel.overloads[sig].entry_point
    assert call() == 3
    assert list(jit.dispatchers_in(call)) == [kernel]            # the cold notice still sees it
    again = jit.bound_call(kernel, (np.zeros(3), 5), call.entry)
    assert again() == 5
    plain = jit.bound_call(len, ([1, 2],))
    assert isinstance(plain, functools.partial) and plain() == 2


def test_an_executables_kernels_are_called_by_entry_point_from_the_second_run():
    import numpy as np
    import rlxpy as rx
    rng = np.random.default_rng(0)
    g = rx.Graph()
    x = g.input("x", (1, 16, 9, 9))
    y = g.relu(g.conv(x, g.param("w", rng.standard_normal((16, 16, 3, 3)).astype(np.float32)), padding=1))
    g.output("y", g.global_avg_pool(g.conv(y, g.param("w2", rng.standard_normal((16, 16, 3, 3)).astype(np.float32)))))
    exe = rx.compile(g)
    xv = rng.standard_normal((1, 16, 9, 9)).astype(np.float32)
    first = exe.run({"x": xv})["y"]
    (bound,) = exe._compile_for({"x": (1, 16, 9, 9)}).pool.idle()
    direct = {i for _, i, _ in bound.direct}         # replaced each run by a call into the returned array
    fast = [fn for i, (fn, _) in enumerate(bound.calls) if isinstance(fn, jit.FastCall) and i not in direct]
    assert fast and all(f.entry[0] is not None and f.entry[0] is not f.func for f in fast)
    np.testing.assert_array_equal(exe.run({"x": xv})["y"], first)
