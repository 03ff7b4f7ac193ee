"""The Triton lowering through the public API: compile(graph, device="cuda") against the CPU
reference kernels. Without a GPU the kernels run on the Triton interpreter
(TRITON_INTERPRET=1, set here before triton is imported) and the arena is a CPU tensor;
on a GPU the same tests run on it, and test_triton_gpu_* add realistic shapes.

Tolerances: the simple kernels and the interpreter accumulate in float32 (1e-4, as the
CPU fast kernels). On a GPU the implicit GEMM's tl.dot runs in TF32 (10-bit mantissa):
relative errors near 3e-4 to 1e-3 of the output scale, so 5e-3 there.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ON_GPU = torch.cuda.is_available()
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

import rlxpy as rx  # noqa: E402
from rlxpy.thunks import records as R  # noqa: E402

from helpers import REFERENCE, assert_close, pairs, rand, run_case, torch_pad  # noqa: E402
from rlxpy.testing import cases, one_node_graph  # noqa: E402

TOL = {"simple": 1e-4, "igemm": 5e-3 if ON_GPU else 1e-4}
TOL["igemm_nchw"] = TOL["igemm"]


def build_and_run(build, inputs, params, device, **run_kw):
    g = one_node_graph(build, inputs, params)
    exe = rx.compile(g, REFERENCE) if device == "cpu" else rx.compile(g, device="cuda")
    return exe.run(inputs, **run_kw)["out"], exe


def test_triton_import_rlxpy_loads_neither_torch_nor_triton():
    code = "import sys, rlxpy; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


CONVS = cases("gpu")


@pytest.mark.parametrize("algo", ["simple", "igemm"])
@pytest.mark.parametrize("case", CONVS, ids=lambda c: c.id)
def test_triton_conv_forward_matches_cpu_reference(case, algo, monkeypatch):
    monkeypatch.setenv("RLX_TRITON_ALGO", algo)
    ref, _, _, _ = run_case(case, REFERENCE, seed=40)
    out, exe, _, _ = run_case(case, None, seed=40, device="cuda")
    assert exe.thunks[0].algo == algo      # the record says which kernel ran, and explain() shows it
    assert f" {algo} " in exe.explain()
    assert_close(out, ref, TOL[algo], f"{algo} {case.id}")


@pytest.mark.parametrize("case", [CONVS[i] for i in (1, 2, 3, 4)], ids=lambda c: c.id)
def test_triton_igemm_reads_nchw_x_in_place(case, monkeypatch):
    """igemm_nchw: the implicit GEMM gathers x from NCHW instead of a channels-last copy."""
    test_triton_conv_forward_matches_cpu_reference(case, "igemm_nchw", monkeypatch)


# (N, C, H, W, K, kernel, stride, padding, dilation, groups)
BACKWARD = [
    (2, 4, 7, 6, 6, (3, 3), 1, 1, 1, 1),
    (2, 6, 9, 8, 4, (3, 2), 2, ((1, 0), (0, 1)), (2, 1), 2),
    (1, 4, 8, 8, 4, (3, 3), 2, 1, 1, 4),       # depthwise
    (2, 6, 7, 9, 4, (3, 2), 1, ((2, 0), (1, 1)), (1, 2), 2),   # stride 1, asymmetric pads, dilation
    (2, 16, 6, 7, 8, (3, 3), 1, 1, 1, 1),      # enough channels for the implicit GEMMs by default
]


def _expected_backward_algos(rec_dx, rec_dw, algo):
    """Which kernels `RLX_TRITON_ALGO=algo` must pick for a dx / dw record pair."""
    cin_g, cout_g = rec_dw.geometry.cin_g, rec_dw.geometry.cout_g
    dx_igemm = algo != "simple" and rec_dx.geometry.stride == (1, 1)
    dw_igemm = algo == "igemm" or (algo == "auto" and cin_g >= 8 and cout_g >= 8)
    return ("igemm" if dx_igemm else "simple"), ("igemm" if dw_igemm else "simple")


def _backward_params():
    """Every (case, algo); under the interpreter the largest case skips `simple`: the atomic
    kernels, interpreted element by element, took 130 of CI's seconds on it, and the four
    smaller cases run them too (a GPU runs it)."""
    for case in BACKWARD:
        for algo in ("auto", "simple", "igemm"):
            slow = case is BACKWARD[-1] and algo == "simple"
            yield pytest.param(case, algo, id=f"{case}-{algo}", marks=pytest.mark.skipif(
                slow and not ON_GPU, reason="the atomic kernels on 16 channels: minutes in TRITON_INTERPRET"))


@pytest.mark.parametrize("case, algo", list(_backward_params()))
def test_triton_conv_backward_matches_cpu_reference(case, algo, monkeypatch):
    monkeypatch.setenv("RLX_TRITON_ALGO", algo)
    n, c, h, wd, k, ker, stride, padding, dilation, groups = case
    rng = np.random.default_rng(41)
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    x, w = rand(rng, n, c, h, wd), rand(rng, k, c // groups, *ker)
    y, _ = build_and_run(lambda g, v: g.conv(v["x"], v["w"], **kw), {"x": x}, {"w": w}, "cpu")
    dy = rand(rng, *y.shape)
    for device in ("cpu", "cuda"):
        dx, exe_dx = build_and_run(lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, c, h, wd), **kw),
                                   {"dy": dy}, {"w": w}, device)
        dw, exe_dw = build_and_run(lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], ker, **kw),
                                   {"x": x, "dy": dy}, {}, device)
        if device == "cpu":
            ref_dx, ref_dw = dx, dw
    th_dx, th_dw = exe_dx.thunks[0], exe_dw.thunks[0]
    assert isinstance(th_dx.record, R.Conv2dBackwardInput) and isinstance(th_dw.record, R.Conv2dBackwardWeight)
    assert (th_dx.algo, th_dw.algo) == _expected_backward_algos(th_dx.record, th_dw.record, algo)
    assert_close(dx, ref_dx, TOL[th_dx.algo], "dx")
    assert_close(dw, ref_dw, TOL[th_dw.algo], "dw")


def test_triton_fused_backward_matches_separate_kernels():
    """conv2d_backward computes dx and dw in one launch; compare with the CPU reference."""
    from rlxpy.triton import dispatch
    rng = np.random.default_rng(42)
    n, c, h, wd, k = 2, 4, 6, 7, 6
    kw = dict(stride=1, padding=1, dilation=1, groups=2)
    x, w = rand(rng, n, c, h, wd), rand(rng, k, c // 2, 3, 3)
    dy = rand(rng, n, k, h, wd)
    ref_dx, _ = build_and_run(lambda g, v: g.conv2d_backward_input(v["dy"], v["w"], (None, c, h, wd), **kw),
                              {"dy": dy}, {"w": w}, "cpu")
    ref_dw, exe = build_and_run(lambda g, v: g.conv2d_backward_weight(v["x"], v["dy"], (3, 3), **kw),
                                {"x": x, "dy": dy}, {}, "cpu")
    geometry = exe.thunks[0].record.geometry
    dev = "cuda" if ON_GPU else "cpu"
    sizes = [x.size, w.size, dy.size, x.size, w.size]
    offs = np.cumsum([0] + [4 * ((s + 15) // 16 * 16) for s in sizes])
    arena = torch.zeros(int(offs[-1]) // 4, device=dev)
    for off, a in zip(offs, (x, w, dy)):
        arena[off // 4:off // 4 + a.size] = torch.from_numpy(a.ravel()).to(dev)
    dispatch.launch_backward(arena, geometry, int(offs[0]), int(offs[1]), int(offs[2]), int(offs[3]), int(offs[4]))
    dx = arena[offs[3] // 4:offs[3] // 4 + x.size].cpu().numpy().reshape(x.shape)
    dw = arena[offs[4] // 4:offs[4] // 4 + w.size].cpu().numpy().reshape(w.shape)
    assert_close(dx, ref_dx, 1e-4, "fused dx")
    assert_close(dw, ref_dw, 1e-4, "fused dw")


POOLS = [
    lambda g, v: g.pool(v["x"], "max", 3, stride=2, padding=1, ceil_mode=True),
    lambda g, v: g.pool(v["x"], "max", 2, stride=1, padding=1, dilation=2),
    lambda g, v: g.pool(v["x"], "avg", 3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    lambda g, v: g.pool(v["x"], "avg", 3, stride=2, padding=(1, 0), ceil_mode=True),
    lambda g, v: g.resize_nearest2x(v["x"]),
]


@pytest.mark.parametrize("i", range(len(POOLS)))
def test_triton_pool_and_resize_match_cpu_reference(i):
    x = rand(np.random.default_rng(43), 2, 3, 9, 8)
    x[0, 0, 0, 0] = np.nan
    ref, _ = build_and_run(POOLS[i], {"x": x}, {}, "cpu")
    out, _ = build_and_run(POOLS[i], {"x": x}, {}, "cuda")
    assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert_close(np.nan_to_num(out), np.nan_to_num(ref), 1e-5)



@pytest.mark.parametrize("kind,cip", [("avg", False), ("avg", True), ("max", True)])
def test_triton_pool_window_with_no_tap_inside_x(kind, cip):
    """A dilated window that skips over a 2-row x (taps at rows -1 and 2): 0 for an average,
    -inf for a max, as the CPU kernels (and onnxruntime, PyTorch) give."""
    x = rand(np.random.default_rng(44), 2, 3, 2, 9)

    def build(g, v):
        return g.pool(v["x"], kind, 2, stride=1, padding=1, dilation=3, count_include_pad=cip)
    ref, _ = build_and_run(build, {"x": x}, {}, "cpu")
    out, _ = build_and_run(build, {"x": x}, {}, "cuda")
    want = -np.inf if kind == "max" else 0.0
    assert ref.size and (ref == want).all()
    assert out.shape == ref.shape and (out == want).all()

@pytest.mark.parametrize("kind,cip", [("avg", False), ("avg", True), ("max", True)])
def test_triton_ceil_mode_window_wider_than_the_padded_input(kind, cip):
    """ceil_mode: a 3x3 window of stride 3 on a 2x1 plane (no padding) still gives one output,
    as in PyTorch (the window starts inside x); its average over the taps inside x."""
    import torch
    import torch.nn.functional as F
    x = rand(np.random.default_rng(46), 2, 3, 2, 1)

    def build(g, v):
        return g.pool(v["x"], kind, 3, stride=3, padding=0, ceil_mode=True, count_include_pad=cip)
    out, _ = build_and_run(build, {"x": x}, {}, "cuda")
    t = torch.from_numpy(x)
    want = (F.max_pool2d(t, 3, 3, 0, ceil_mode=True) if kind == "max"
            else F.avg_pool2d(t, 3, 3, 0, ceil_mode=True, count_include_pad=cip)).numpy()
    assert out.shape == want.shape == (2, 3, 1, 1)
    assert_close(out, want, 1e-5)


def test_triton_max_pool2d_backward_matches_cpu_reference():
    rng = np.random.default_rng(44)
    x, dy = rand(rng, 2, 3, 9, 8), rand(rng, 2, 3, 5, 4)

    def build(g, v):
        return g.max_pool2d_backward(v["x"], v["dy"], 3, stride=2, padding=1)

    ref, _ = build_and_run(build, {"x": x, "dy": dy}, {}, "cpu")
    out, _ = build_and_run(build, {"x": x, "dy": dy}, {}, "cuda")
    assert_close(out, ref, 1e-5)


def test_triton_small_cnn_and_tensor_io():
    rng = np.random.default_rng(45)
    g = rx.Graph()
    x = g.input("x", (None, 3, 8, 8))
    y = g.conv(x, g.param("w1", rand(rng, 8, 3, 3, 3, scale=0.3)), bias=g.param("b1", rand(rng, 8)), padding=1)
    y = g.pool(y, "max", 2)
    y = g.conv(y, g.param("w2", rand(rng, 8, 1, 3, 3, scale=0.3)), padding=1, groups=8)
    y = g.resize_nearest2x(y)
    y = g.conv(y, g.param("w3", rand(rng, 4, 8, 1, 1, scale=0.3)))
    g.output("y", y)
    xv = rand(rng, 2, 3, 8, 8)
    ref = rx.compile(g, REFERENCE).run({"x": xv})["y"]
    exe = rx.compile(g, device="cuda")
    assert_close(exe.run({"x": xv})["y"], ref, TOL["igemm"])
    # auto: the RGB conv has 27 taps x 8 channels for the tiles; the depthwise conv (1 output
    # channel per group) and the 1x1 conv (4 output channels) would leave them mostly padding
    convs = [t.algo for t in exe.thunks if isinstance(t.record, (R.Conv2D, R.Conv2D1x1))]
    assert convs == ["igemm", "simple", "simple"]
    xt = torch.from_numpy(xv).to(exe.device)
    out = exe.run({"x": xt}, return_tensors=True)["y"]
    assert isinstance(out, torch.Tensor) and out.device.type == exe.device.type
    assert_close(out.cpu().numpy(), ref, TOL["igemm"])
    with pytest.raises(TypeError, match="'x'.*float32"):
        exe.run({"x": xt.double()})
    assert exe.run({"x": xv})["y"].shape == ref.shape   # still usable after the refused run


def test_triton_graph_with_a_node_without_gpu_kernel_is_refused():
    g = rx.Graph()
    x = g.input("x", (1, 2, 4, 4, 4))
    g.output("y", g.conv3d(x, g.param("w", np.ones((2, 2, 1, 1, 1), np.float32)), name="vol"))
    g.output("z", g.pool(x, "max", 2, name="pool3"))
    with pytest.raises(NotImplementedError, match=r"vol \(Conv3d\).*pool3 \(Pool, rank 5\)"):
        rx.compile(g, device="cuda")


@pytest.mark.parametrize("flag, value", [("RLX_TRITON_ALGO", "fastest"), ("RLX_CUDA_GRAPH", "sometimes")])
def test_triton_gpu_flags_are_checked(flag, value, monkeypatch):
    monkeypatch.setenv(flag, value)
    g = rx.Graph()
    g.output("y", g.resize_nearest2x(g.input("x", (1, 1, 2, 2))))
    with pytest.raises(ValueError, match=f"{flag}='{value}'"):
        rx.compile(g, device="cuda")


# --- GPU only: realistic shapes against PyTorch's CUDA convolution and float64 ----------
GPU_CASES = [  # (N, C, H, K, k, stride, pad)
    (1, 64, 56, 64, 3, 1, 1), (32, 64, 56, 64, 3, 1, 1), (32, 128, 28, 128, 3, 1, 1),
    (32, 256, 14, 256, 3, 1, 1), (32, 512, 7, 512, 3, 1, 1), (1, 3, 224, 64, 7, 2, 3), (32, 64, 56, 128, 3, 2, 1),
]


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", GPU_CASES, ids=str)
def test_triton_gpu_forward_realistic_shapes(case):
    n, c, h, k, ks, s, p = case
    rng = np.random.default_rng(46)
    x, w = rand(rng, n, c, h, h), rand(rng, k, c, ks, ks, scale=(1.0 / (c * ks * ks)) ** 0.5)
    g = rx.Graph()
    g.output("y", g.conv(g.input("x", x.shape), g.param("w", w), stride=s, padding=p))
    exe = rx.compile(g, device="cuda")
    out = exe.run({"x": torch.from_numpy(x).cuda()}, return_tensors=True)["y"]
    exact = torch.nn.functional.conv2d(torch.from_numpy(x).cuda().double(), torch.from_numpy(w).cuda().double(),
                                       stride=s, padding=p)
    scale = exact.abs().max().item()
    assert (out.double() - exact).abs().max().item() <= 5e-3 * scale


def _torch_conv_exact(x, w, b, stride, padding, dilation, groups):
    return torch.nn.functional.conv2d(torch_pad(x.double(), pairs(padding, 2)), w.double(),
                                      None if b is None else b.double(), stride=stride, dilation=dilation,
                                      groups=groups)


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("algo", ["simple", "igemm"])
@pytest.mark.parametrize("case", [c for c in CONVS if len(c.inputs[0][1]) == 4], ids=lambda c: c.id)
def test_triton_gpu_forward_kernels_against_torch_float64(case, algo, monkeypatch):
    monkeypatch.setenv("RLX_TRITON_ALGO", algo)
    out, _, inputs, params = run_case(case, None, seed=47, device="cuda")
    kw = case.kw
    t = {k: torch.from_numpy(a) for k, a in {**inputs, **params}.items()}
    exact = _torch_conv_exact(t["x"], t["w"], t.get("b"), kw["stride"], kw["padding"], kw["dilation"], kw["groups"])
    assert_close(out, exact.numpy(), TOL[algo])


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("n", [1, 32])
def test_triton_gpu_backward_realistic_shapes(n):
    """The backward-input / backward-weight cases of the CPU benchmark (3x3 64@56 pad 1)."""
    gen = torch.Generator().manual_seed(48)
    x, w = torch.randn(n, 64, 56, 56, generator=gen), torch.randn(64, 64, 3, 3, generator=gen) / 24
    dy = torch.randn(n, 64, 56, 56, generator=gen)
    g = rx.Graph()
    g.output("dx", g.conv2d_backward_input(g.input("dy", tuple(dy.shape)), g.param("w", w.numpy()),
                                           (None, 64, 56, 56), padding=1))
    g.output("dw", g.conv2d_backward_weight(g.input("x", tuple(x.shape)), g.input("dy2", tuple(dy.shape)), 3,
                                            padding=1))
    out = rx.compile(g, device="cuda").run({"dy": dy.cuda(), "x": x.cuda(), "dy2": dy.cuda()}, return_tensors=True)
    xc, wc, dyc = x.cuda().double(), w.cuda().double(), dy.cuda().double()
    exact_dx = torch.nn.grad.conv2d_input(x.shape, wc, dyc, padding=1)
    exact_dw = torch.nn.grad.conv2d_weight(xc, w.shape, dyc, padding=1)
    # dx and dw both run as implicit GEMMs (TF32)
    assert (out["dx"].double() - exact_dx).abs().max().item() <= TOL["igemm"] * exact_dx.abs().max().item()
    assert (out["dw"].double() - exact_dw).abs().max().item() <= TOL["igemm"] * exact_dw.abs().max().item()


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("graphs", ["1", "0"])
def test_triton_gpu_cuda_graph_replays_see_new_inputs(graphs, monkeypatch):
    """Runs 1 (eager), 2 (capture) and 3-5 (replays) each get fresh inputs and must match the
    CPU reference; with RLX_CUDA_GRAPH=0 every run is eager."""
    monkeypatch.setenv("RLX_CUDA_GRAPH", graphs)
    rng = np.random.default_rng(49)
    g = rx.Graph()
    x = g.input("x", (2, 16, 12, 12))
    y = g.conv(x, g.param("w1", rand(rng, 16, 16, 3, 3, scale=0.2)), bias=g.param("b1", rand(rng, 16)), padding=1)
    y = g.pool(y, "max", 2)
    g.output("y", g.conv(y, g.input("w2", (8, 16, 3, 3)), padding=1))     # a weight that changes per run
    ref_exe, exe = rx.compile(g, REFERENCE), rx.compile(g, device="cuda")
    for _ in range(5):
        inputs = {"x": rand(rng, 2, 16, 12, 12), "w2": rand(rng, 8, 16, 3, 3, scale=0.2)}
        assert_close(exe.run(inputs)["y"], ref_exe.run(inputs)["y"], TOL["igemm"])
    captured = [v for v in exe._graphs.values() if isinstance(v, torch.cuda.CUDAGraph)]
    assert len(captured) == (1 if graphs == "1" else 0)


def test_triton_capture_gate_runs_a_capture_alone():
    """No shared section (a GPU run) overlaps an exclusive one (a capture), and a waiting
    capture is not starved by a stream of runs."""
    import threading
    import time
    from rlxpy.triton.executable import CaptureGate
    gate, log, lock = CaptureGate(), [], threading.Lock()

    def section(kind, hold):
        with gate.exclusive() if kind == "x" else gate.shared():
            with lock:
                log.append((kind, "in"))
            time.sleep(hold)
            with lock:
                log.append((kind, "out"))

    threads = [threading.Thread(target=section, args=("s", 0.05)) for _ in range(3)]
    threads += [threading.Thread(target=section, args=("x", 0.02))]
    threads += [threading.Thread(target=section, args=("s", 0.01)) for _ in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.005)
    for t in threads:
        t.join(timeout=10)
    shared, capturing = 0, False
    for kind, what in log:
        if kind == "x":
            assert (not capturing and shared == 0) if what == "in" else capturing, log
            capturing = what == "in"
        else:
            assert not capturing, log
            shared += 1 if what == "in" else -1
    assert len(log) == 14 and ("x", "in") in log


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
def test_triton_gpu_concurrent_runs_with_cuda_graphs():
    """Two threads share one executable: each run gets its own arena (and graph); a capture
    in one thread must not break the other's launches."""
    import threading
    rng = np.random.default_rng(50)
    g = rx.Graph()
    x = g.input("x", (2, 16, 10, 10))
    g.output("y", g.conv(x, g.param("w", rand(rng, 16, 16, 3, 3, scale=0.2)), padding=1))
    ref_exe, exe = rx.compile(g, REFERENCE), rx.compile(g, device="cuda")
    inputs = [rand(rng, 2, 16, 10, 10) for _ in range(12)]
    refs = [ref_exe.run({"x": v})["y"] for v in inputs]
    errors = []
    lockstep = threading.Barrier(2, timeout=120)   # run k of both threads together: captures meet work

    def worker(ids):
        try:
            for i in ids:
                lockstep.wait()
                assert_close(exe.run({"x": inputs[i]})["y"], refs[i], TOL["igemm"])
        except Exception as e:          # reported by the main thread
            errors.append(e)
            lockstep.abort()

    threads = [threading.Thread(target=worker, args=(range(t, 12, 2),)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", GPU_CASES + [("backward", 1), ("backward", 32)], ids=str)
def test_triton_gpu_realistic_shapes_match_cpu_reference(case):
    """The same realistic shapes against rlxpy's own CPU reference kernels (float64
    accumulation), the parity oracle of every CPU kernel: the GPU lowering and the CPU
    lowering of one graph agree."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(51)
    g = rx.Graph()
    if case[0] == "backward":
        n = case[1]
        x, w = rand(rng, n, 64, 56, 56), rand(rng, 64, 64, 3, 3, scale=1 / 24)
        dy = rand(rng, n, 64, 56, 56)
        g.output("dx", g.conv2d_backward_input(g.input("dy", dy.shape), g.param("w", w), (None, 64, 56, 56),
                                               padding=1))
        g.output("dw", g.conv2d_backward_weight(g.input("x", x.shape), g.input("dy2", dy.shape), 3, padding=1))
        inputs = {"dy": dy, "x": x, "dy2": dy}
    else:
        n, c, h, k, ks, s, p = case
        x, w = rand(rng, n, c, h, h), rand(rng, k, c, ks, ks, scale=(1.0 / (c * ks * ks)) ** 0.5)
        g.output("y", g.conv(g.input("x", x.shape), g.param("w", w), stride=s, padding=p))
        inputs = {"x": x}
    ref = rx.compile(g, REFERENCE).run(inputs)
    out = rx.compile(g, device="cuda").run(inputs)
    for name in ref:
        assert_close(out[name], ref[name], TOL["igemm"], name)


def test_triton_profile_and_validate_against_the_cpu_reference():
    """profile() times every GPU thunk; validate() checks each against the CPU's reference
    kernel on the GPU path's own inputs (TF32 tolerance for the implicit GEMM on a GPU)."""
    rng = np.random.default_rng(44)
    g = rx.Graph()
    x = g.input("x", (None, 8, 12, 12))
    y = g.conv(x, g.param("w", rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2), padding=1, name="c1")
    y = g.pool(y, "max", 2, name="p")
    g.output("y", g.conv(y, g.param("w2", rng.standard_normal((8, 16, 1, 1)).astype(np.float32)), name="c2"))
    exe = rx.compile(g, device="cuda")
    inputs = {"x": rng.standard_normal((2, 8, 12, 12)).astype(np.float32)}
    prof = exe.profile(inputs, repeat=2)
    assert [r["node"] for r in prof.rows] == [t.node for t in exe.plan().thunks] == ["c1", "p", "c2"]
    assert all(r["ms"] > 0 for r in prof.rows)
    report = exe.validate(inputs)
    assert report.ok, str(report)
    assert [r["node"] for r in report.rows] == ["c1", "p", "c2"] and {r["reference"] for r in report.rows} == {"naive"}
