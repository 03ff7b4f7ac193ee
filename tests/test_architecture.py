"""The structure DESIGN.md promises, checked: the device-neutral layer imports no backend,
flags are read in one module, kernels write only their outputs and scratch, and explain()
works before the first run of a dynamic graph."""
import ast
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import rlxpy as rx
from rlxpy.cpu_kernels import dispatch

from helpers import rand

PACKAGE = pathlib.Path(rx.__file__).parent


def _imports(path: pathlib.Path):
    """Absolute module names a file imports (relative imports resolved against the package)."""
    tree = ast.parse(path.read_text())
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(parts[:len(parts) - node.level])
                yield f"{base}.{node.module}" if node.module else base
            else:
                yield node.module


def test_thunks_import_no_backend():
    offenders = [(p.name, m) for p in (PACKAGE / "thunks").glob("*.py") for m in _imports(p)
                 if m.startswith(("rlxpy.cpu_kernels", "rlxpy.triton", "numba", "torch", "triton"))]
    assert not offenders, offenders


def test_importing_the_device_neutral_layers_loads_no_backend():
    code = ("import sys, rlxpy.thunks.plan, rlxpy.thunks.executor, rlxpy.thunks.explain; "
            "print(sorted(m for m in sys.modules if m.startswith(('rlxpy.cpu_kernels', 'rlxpy.triton', "
            "'numba', 'torch', 'triton'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_only_config_reads_rlx_flags():
    pattern = re.compile(r"environ|getenv")
    offenders = []
    for p in PACKAGE.rglob("*.py"):
        if p.name == "config.py" and p.parent == PACKAGE:
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if pattern.search(line) and "RLX_" in line:
                offenders.append(f"{p.relative_to(PACKAGE)}:{i}: {line.strip()}")
            if re.search(r"""["']RLX_\w+["']""", line) and pattern.search(line):
                offenders.append(f"{p.relative_to(PACKAGE)}:{i}")
    assert not offenders, offenders
    # and the one module that does names every flag once
    from rlxpy.config import FLAGS
    assert len({f.env for f in FLAGS}) == len(FLAGS)


# Every CPU kernel in the dispatch table, with a graph that makes the backend choose it.
def _conv(**kw):
    return lambda g, v: g.conv(v["x"], v["w"], bias=v.get("b"), **kw)


GUARD_CASES = {
    # (record type, algo): (config, build, inputs, params)
    ("Conv2D", "im2col"): ({"conv_algo": "im2col"}, _conv(stride=2, padding=1), {"x": (2, 5, 9, 8)},
                           {"w": (6, 5, 3, 3), "b": (6,)}),
    ("Conv2D", "winograd"): ({"winograd": True}, _conv(padding=1), {"x": (2, 5, 9, 7)}, {"w": (6, 5, 3, 3)}),
    ("Conv2D", "direct"): ({"direct_conv": True}, _conv(padding=(1, 2)), {"x": (2, 3, 7, 6)}, {"w": (4, 3, 3, 3)}),
    ("Conv2D", "depthwise"): ({"conv_algo": "depthwise"}, _conv(padding=1, groups=4), {"x": (2, 4, 7, 6)},
                              {"w": (4, 1, 3, 3)}),
    ("Conv2D", "simd_direct"): ({"conv_algo": "simd_direct"}, _conv(padding=((1, 0), (2, 1)), dilation=(1, 2), groups=2),
                                {"x": (2, 4, 7, 9)}, {"w": (8, 2, 3, 2), "b": (8,)}),
    ("Conv2D1x1", "simd_direct"): ({"conv_algo": "simd_direct"}, _conv(), {"x": (2, 5, 6, 37)},
                                   {"w": (7, 5, 1, 1), "b": (7,)}),
    ("Conv2D1x1", "gemm1x1"): ({}, _conv(), {"x": (2, 5, 6, 7)}, {"w": (3, 5, 1, 1), "b": (3,)}),
    ("Conv2D", "nchwc_direct"): ({"conv_algo": "nchwc_direct"}, _conv(stride=(2, 1), padding=((1, 0), (2, 1)),
                                                                       dilation=(1, 2)),
                                 {"x": (2, 11, 7, 9)}, {"w": (19, 11, 3, 2), "b": (19,)}),
    ("Conv2D1x1", "nchwc_direct"): ({"conv_algo": "nchwc_direct"}, _conv(), {"x": (2, 5, 6, 37)},
                                    {"w": (7, 5, 1, 1), "b": (7,)}),
    ("Conv2D", "nchwc_1x1"): ({"conv_algo": "nchwc_1x1"}, _conv(stride=(2, 3)), {"x": (2, 11, 7, 9)},
                              {"w": (19, 11, 1, 1), "b": (19,)}),
    ("Conv2D1x1", "nchwc_1x1"): ({"conv_algo": "nchwc_1x1"}, _conv(), {"x": (2, 5, 6, 37)},
                                 {"w": (7, 5, 1, 1), "b": (7,)}),
    ("Conv2D", "nchwc_plain_in"): ({"conv_algo": "nchwc_plain_in"}, _conv(stride=2, padding=((1, 0), (2, 1))),
                                   {"x": (2, 3, 9, 8)}, {"w": (17, 3, 3, 2), "b": (17,)}),
    ("Conv2D1x1", "nchwc_plain_in"): ({"conv_algo": "nchwc_plain_in"}, _conv(), {"x": (2, 2, 5, 7)},
                                      {"w": (9, 2, 1, 1)}),
    ("Reorder", "reorder"): ({"conv_algo": "nchwc_direct"},   # col2im writes plain, the conv reads blocked
                             lambda g, v: g.conv(g.conv_transpose2d(v["x"], v["wt"], stride=2), v["w"], padding=1),
                             {"x": (2, 13, 5, 7)}, {"wt": (13, 13, 2, 2), "w": (3, 13, 3, 3)}),
    ("Conv2D", "nchwc_depthwise"): ({"conv_algo": "nchwc_depthwise"}, _conv(stride=(1, 2), padding=((2, 0), (1, 1)),
                                                                             dilation=(2, 1), groups=11),
                                    {"x": (2, 11, 8, 9)}, {"w": (11, 1, 3, 3), "b": (11,)}),
    ("Conv2D", "winograd_f4"): ({"winograd": "f4"}, _conv(padding=((1, 0), (2, 1))), {"x": (2, 11, 9, 10)},
                                {"w": (19, 11, 3, 3), "b": (19,)}),
    ("ConvTranspose2d", "nchwc_direct"): ({"conv_algo": "nchwc_direct"},
                                          lambda g, v: g.conv_transpose2d(v["x"], v["w"], bias=v["b"], padding=(1, 0)),
                                          {"x": (2, 11, 5, 6)}, {"w": (11, 9, 3, 2), "b": (9,)}),
    ("Conv2dBackwardInput", "nchwc_direct"): ({"conv_algo": "nchwc_direct"},
                                              lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, 9, 7, 6),
                                                                                   padding=1),
                                              {"dy": (2, 13, 7, 6)}, {"w": (13, 9, 3, 3)}),
    ("ConvTranspose2d", "winograd_f4"): ({"winograd": "f4"},
                                         lambda g, v: g.conv_transpose2d(v["x"], v["w"], bias=v["b"], padding=1),
                                         {"x": (2, 11, 9, 6)}, {"w": (11, 9, 3, 3), "b": (9,)}),
    ("Conv2dBackwardInput", "winograd_f4"): ({"winograd": "f4"},
                                             lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, 9, 9, 6),
                                                                                  padding=1),
                                             {"dy": (2, 13, 9, 6)}, {"w": (13, 9, 3, 3)}),
    ("ResizeNearest2x", "nchwc_resize"): ({"conv_algo": "nchwc_direct"}, lambda g, v: g.conv(g.resize_nearest2x(g.conv(v["x"], v["w"], padding=1)),
                                                                  v["w"], padding=1),
                                          {"x": (2, 11, 3, 4)}, {"w": (11, 11, 3, 3)}),
    ("Pool2D", "nchwc_pool"): ({}, lambda g, v: g.pool(v["x"], "avg", 3, stride=2, padding=1, ceil_mode=True,
                                                       count_include_pad=False), {"x": (2, 11, 7, 8)}, {}),
    ("Conv3d", "im2col"): ({"conv_algo": "im2col"}, lambda g, v: g.conv3d(v["x"], v["w"], padding=1),
                           {"x": (2, 3, 4, 5, 4)}, {"w": (4, 3, 3, 2, 3)}),
    ("Conv3d", "nchwc_direct"): ({"conv_algo": "nchwc_direct"},
                                 lambda g, v: g.conv3d(v["x"], v["w"], bias=v["b"], stride=(2, 1, 1),
                                                       padding=((1, 0), (0, 1), (2, 1)), dilation=(2, 1, 1)),
                                 {"x": (2, 11, 7, 5, 6)}, {"w": (19, 11, 3, 2, 3), "b": (19,)}),
    ("Conv3d", "nchwc_plain_in"): ({"conv_algo": "nchwc_plain_in"},
                                   lambda g, v: g.conv3d(v["x"], v["w"], bias=v["b"], stride=2, padding=1),
                                   {"x": (2, 3, 5, 6, 7)}, {"w": (17, 3, 3, 3, 2), "b": (17,)}),
    ("Conv3d", "nchwc_depthwise"): ({"conv_algo": "nchwc_depthwise"},
                                    lambda g, v: g.conv3d(v["x"], v["w"], padding=(0, 1, 2), groups=11),
                                    {"x": (2, 11, 4, 5, 6)}, {"w": (11, 1, 2, 3, 3)}),
    ("ConvTranspose3d", "nchwc_direct"): ({"conv_algo": "nchwc_direct"},
                                          lambda g, v: g.conv_transpose3d(v["x"], v["w"], bias=v["b"], padding=(1, 0, 1)),
                                          {"x": (2, 11, 4, 5, 3)}, {"w": (11, 9, 3, 2, 2), "b": (9,)}),
    ("ConvTranspose2d", "nchwc_subpixel"): ({"conv_algo": "nchwc_subpixel"},
                                            lambda g, v: g.conv_transpose2d(v["x"], v["w"], bias=v["b"], stride=(2, 3),
                                                                            padding=((1, 0), (2, 1)),
                                                                            output_padding=(1, 0)),
                                            {"x": (2, 11, 4, 5)}, {"w": (11, 9, 3, 4), "b": (9,)}),
    ("ConvTranspose3d", "nchwc_subpixel"): ({"conv_algo": "nchwc_subpixel"},
                                            lambda g, v: g.conv_transpose3d(v["x"], v["w"], stride=(2, 1, 2),
                                                                            padding=1, dilation=(1, 1, 2)),
                                            {"x": (2, 5, 3, 4, 3)}, {"w": (5, 9, 3, 2, 3)}),
    ("Conv2dBackwardInput", "nchwc_subpixel"): ({"conv_algo": "nchwc_subpixel"},
                                                lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, 9, 9, 8),
                                                                                     stride=2, padding=1),
                                                {"dy": (2, 13, 5, 4)}, {"w": (13, 9, 3, 3)}),
    ("Pool3D", "nchwc_pool"): ({}, lambda g, v: g.pool(v["x"], "max", 3, stride=2, padding=1, ceil_mode=True),
                               {"x": (2, 11, 5, 7, 6)}, {}),
    ("ConvTranspose2d", "col2im"): ({}, lambda g, v: g.conv_transpose2d(v["x"], v["w"], stride=2, padding=1),
                                    {"x": (2, 4, 4, 5)}, {"w": (4, 3, 3, 3)}),
    ("ConvTranspose3d", "col2im"): ({}, lambda g, v: g.conv_transpose3d(v["x"], v["w"], stride=2),
                                    {"x": (2, 2, 3, 3, 2)}, {"w": (2, 3, 2, 2, 2)}),
    ("Conv2dBackwardInput", "col2im"): ({}, lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, 4, 7, 6),
                                                                                 padding=1),
                                        {"dy": (2, 5, 7, 6)}, {"w": (5, 4, 3, 3)}),
    ("Conv2dBackwardWeight", "im2col"): ({"conv_algo": "im2col"},
                                         lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], 3, padding=1),
                                         {"x": (2, 4, 7, 6), "dy": (2, 5, 7, 6)}, {}),
    ("Conv2dBackwardWeight", "nchwc_wgrad"): ({"conv_algo": "nchwc_wgrad"},
                                              lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], (3, 2), stride=2,
                                                                                    padding=((1, 0), (0, 1))),
                                              {"x": (2, 13, 7, 6), "dy": (2, 11, 3, 3)}, {}),
    ("Pool2D", "parallel"): ({"conv_algo": "parallel"}, lambda g, v: g.pool(v["x"], "max", 3, stride=2, padding=1,
                                                                             ceil_mode=True),
                             {"x": (2, 3, 7, 8)}, {}),
    ("Pool3D", "parallel"): ({"conv_algo": "parallel"}, lambda g, v: g.pool(v["x"], "avg", 2, ceil_mode=True),
                             {"x": (2, 2, 3, 5, 4)}, {}),
    ("MaxPool2dBackward", "parallel"): ({"conv_algo": "parallel"}, lambda g, v: g.max_pool2d_backward(v["x"], v["dy"], 2),
                                       {"x": (2, 3, 6, 6), "dy": (2, 3, 3, 3)}, {}),
    ("MaxPool2dBackward", "nchwc_pool_backward"): ({}, lambda g, v: g.max_pool2d_backward(v["x"], v["dy"], 3, stride=2,
                                                                                         padding=1, dilation=(1, 2)),
                                                  {"x": (2, 11, 9, 8), "dy": (2, 11, 5, 3)}, {}),
    ("Im2Col", "parallel"): ({}, lambda g, v: g.im2col(v["x"], 3, padding=1), {"x": (2, 3, 5, 4)}, {}),
    ("ResizeNearest2x", "parallel"): ({}, lambda g, v: g.resize_nearest2x(v["x"]), {"x": (2, 3, 4, 5)}, {}),
    # the ops around the convs; the elementwise ones between blocked convs (lanes past C written)
    # (the first conv's output has two readers, so the sigmoid is not fused into it)
    ("Unary", "elementwise"): ({}, lambda g, v: g.add(g.conv(g.sigmoid(a := g.conv(v["x"], v["w"], padding=1)), v["w"],
                                                             padding=1), a),
                               {"x": (2, 11, 5, 4)}, {"w": (11, 11, 3, 3)}),
    ("Binary", "elementwise"): ({}, lambda g, v: g.conv(g.div(g.conv(v["x"], v["w"], padding=1), v["x"]), v["w"]),
                                {"x": (2, 11, 5, 4)}, {"w": (11, 11, 3, 3)}),
    ("Binary", "numpy"): ({}, lambda g, v: g.sub(v["x"], v["b"]), {"x": (2, 3, 4, 5)}, {"b": (3, 1, 5)}),
    ("BatchNorm", "elementwise"): ({}, lambda g, v: g.batch_norm(v["x"], v["m"], v["s"], v["w"], v["b"]),
                                   {"x": (2, 3, 4, 5)}, {"m": (3,), "s": (3,), "w": (3,), "b": (3,)}),
    ("MatMul", "blas"): ({}, lambda g, v: g.matmul(v["x"], v["w"]), {"x": (2, 3, 4, 5)}, {"w": (5, 6)}),
    ("Linear", "blas"): ({}, lambda g, v: g.linear(v["x"], v["w"], v["b"]), {"x": (20, 7)}, {"w": (5, 7), "b": (5,)}),
    ("Linear", "simd_dot"): ({}, lambda g, v: g.linear(v["x"], v["w"], v["b"]), {"x": (2, 7)},
                             {"w": (5, 7), "b": (5,)}),
    ("Reduce", "numpy"): ({}, lambda g, v: g.mean(v["x"], (1, 3)), {"x": (2, 3, 4, 5)}, {}),
    ("Reduce", "rows"): ({}, lambda g, v: g.global_max_pool(v["x"]), {"x": (2, 3, 4, 5)}, {}),
    ("Reduce", "nchwc_reduce"): ({}, lambda g, v: g.global_avg_pool(g.conv(v["x"], v["w"], padding=1)),
                                {"x": (2, 16, 5, 6)}, {"w": (16, 16, 3, 3)}),
    ("Softmax", "numpy"): ({}, lambda g, v: g.log_softmax(v["x"], 1), {"x": (2, 3, 4, 5)}, {}),
    ("Concat", "nchwc_concat"): ({"simd_width": 8}, lambda g, v: g.conv(g.concat([g.conv(v["x"], v["w"], padding=1),
                                                                                 v["x"]], 1), v["w2"], padding=1),
                                 {"x": (2, 8, 5, 4)}, {"w": (16, 8, 3, 3), "w2": (8, 24, 3, 3)}),
}


def _family(record_type) -> str:
    """A record type's name, the Concat types of every arity as one ("Concat")."""
    return re.sub(r"^Concat\d+$", "Concat", record_type.__name__)


def test_guard_cases_cover_every_cpu_kernel():
    fast = {(_family(t), algo) for t, algo in dispatch.EXEC if algo != "naive"}
    assert fast == set(GUARD_CASES)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("key", list(GUARD_CASES), ids=lambda k: f"{k[0]}-{k[1]}")
def test_kernels_write_only_their_outputs_and_scratch(key, fast):
    """Guard zones around every tensor, every scratch and persistent buffer (no reuse):
    after two runs (the second with planned data already in place) every zone is intact,
    and the chosen algo is the one named."""
    if key[0] == "Reorder" and not fast:
        pytest.skip("the reference kernels read and write plain NCHW: no reorder")
    flags, build, in_shapes, p_shapes = GUARD_CASES[key]
    rng = np.random.default_rng(60)
    g = rx.Graph()
    vals = {k: g.input(k, s) for k, s in in_shapes.items()}
    vals.update({k: g.param(k, rand(rng, *s)) for k, s in p_shapes.items()})
    g.output("out", build(g, vals))
    config = rx.Config(**flags) if fast else rx.Config(fast_conv=False)
    exe = rx.compile(g, config, plan_memory=False, guard_bytes=256)
    th = next((t for t in exe.thunks if _family(type(t.record)) == key[0]), exe.thunks[0])
    assert (_family(type(th.record)), th.algo) == (key if fast else (key[0], "naive"))
    inputs = {k: rand(rng, *s) for k, s in in_shapes.items()}
    first = exe.run(inputs)["out"]
    assert exe.guard_violations() == []
    assert np.array_equal(exe.run(inputs)["out"], first, equal_nan=True)   # (random BN variances may be < 0)
    assert exe.guard_violations() == []
    assert len(exe.plan().guards) >= 3


def test_guard_zones_catch_a_stray_write():
    """The check itself: one float written just past an output is reported."""
    g = rx.Graph()
    g.output("y", g.resize_nearest2x(g.input("x", (1, 1, 2, 2))))
    exe = rx.compile(g, rx.Config(), plan_memory=False, guard_bytes=64)
    exe.run({"x": np.ones((1, 1, 2, 2), np.float32)})
    assert exe.guard_violations() == []
    (bound,) = exe._compile_for({"x": (1, 1, 2, 2)}).pool.idle()
    arena = bound.arena
    y_end = exe.thunks[0].off("y") + 4 * 16          # the 16 outputs of a 4x4 plane
    arena[y_end // 4] = 0.0
    assert exe.guard_violations() == [(y_end, 64)]


def test_explain_of_a_dynamic_graph_before_any_run():
    """Dynamic spatial dims: binding them to 1 would fail on the 5x5 kernel; explain() shows
    a representative plan, says so, and the plan of the last run once there is one."""
    g = rx.Graph()
    x = g.input("x", (None, 2, None, None))
    g.output("y", g.conv(x, g.param("w", np.ones((3, 2, 5, 5), np.float32)), name="big_kernel"))
    exe = rx.compile(g)
    text = exe.explain()
    assert text.startswith("representative plan") and "big_kernel" in text and "x [1, 2, 8, 8]" in text
    exe.run({"x": np.ones((2, 2, 9, 11), np.float32)})
    text = exe.explain()
    assert text.startswith("plan of the last run") and "x [2, 2, 9, 11]" in text


def test_explain_names_what_no_representative_size_fixes():
    g = rx.Graph()
    x = g.input("x", (None, 1, None, None))
    g.output("y", g.conv(x, g.param("w", np.ones((1, 1, 2000, 1), np.float32)), name="too_tall"))
    exe = rx.compile(g)
    with pytest.raises(ValueError, match="representative.*too_tall"):
        exe.explain()
    assert exe.run({"x": np.ones((1, 1, 2000, 3), np.float32)})["y"].shape == (1, 1, 1, 3)


def test_xdist_groups_follow_the_simd_width_a_test_compiles_at(monkeypatch):
    """`pytest -n 2` keeps each width's tests on one worker (tests/conftest.py): a test's
    group is its width parameter, else the host's width; the Triton tests have their own."""
    from types import SimpleNamespace
    from conftest import width_group
    from rlxpy.cpu_kernels import simd

    def item(path, **params):
        return SimpleNamespace(fspath=path, callspec=SimpleNamespace(params=params))
    host = simd.resolve_width(rx.Config.from_env().simd_width)
    assert width_group(item("tests/test_nchwc.py", width=8, case="c")) == "width-8"
    assert width_group(item("tests/test_simd.py", W=1)) == "width-1"
    assert width_group(item("tests/test_nchwc.py", case="c")) == f"width-{host}"
    assert width_group(SimpleNamespace(fspath="tests/test_onnx.py")) == f"width-{host}"
    assert width_group(item("tests/test_triton.py", width=16)) == "gpu"
    monkeypatch.setenv("RLX_SIMD_WIDTH", "4")         # refused by Config: grouping must not fail collection
    assert width_group(item("tests/test_nchwc.py")) == f"width-{simd.resolve_width(None)}"
    monkeypatch.setenv("RLX_SIMD_WIDTH", "1")
    assert width_group(item("tests/test_nchwc.py")) == "width-1"


def test_a_bare_n_distributes_by_width_group_and_tells_the_workers():
    """`-n 2` alone means --dist loadgroup; a --dist the user gives is kept; without -n
    nothing changes. Each worker parses the command line again (where a bare -n reads as
    --dist load), so the controller passes its choice in the worker's input."""
    from types import SimpleNamespace as NS
    import conftest

    def dist_after(numprocesses, dist):
        config = NS(option=NS(numprocesses=numprocesses, dist=dist))
        conftest.pytest_cmdline_main(config)
        return config.option.dist
    assert dist_after(2, "no") == "loadgroup"
    assert dist_after(2, "load") == "load"
    assert dist_after(None, "no") == "no"
    node = NS(config=NS(option=NS(dist="loadgroup")), workerinput={})
    conftest.pytest_configure_node(node)
    worker = NS(option=NS(loadgroup=False), workerinput=node.workerinput)
    conftest.pytest_collection_modifyitems(worker, [])
    assert worker.option.loadgroup is True


def test_each_xdist_worker_keeps_numba_cache_in_a_folder_of_its_own():
    """Two processes saving to one numba cache index can cross their entries (conftest.py):
    under xdist every worker's kernels are cached apart."""
    import os
    import numba
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("one process: numba's own cache folders")
    assert pathlib.Path(numba.config.CACHE_DIR).name == f"numba-{worker}"
    from rlxpy.cpu_kernels import nchwc
    assert pathlib.Path(nchwc.conv._cache._cache_path).is_relative_to(numba.config.CACHE_DIR)
