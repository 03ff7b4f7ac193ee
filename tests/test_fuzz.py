"""A property-based fuzzer: random graphs of the supported ops and attributes, built through
the public API, are either refused at build time with a ValueError naming the node, or run
with the fast kernels matching the reference kernels. Never a crash, a hang or a silent
wrong number. A second one draws single convs, transposed convs and pools (1-, 2- and 3-D)
and holds both kernel sets to PyTorch in float64: an oracle that is not ours, which also
says what rlxpy must accept (whatever PyTorch runs) and refuse (a conv PyTorch refuses).

CI runs a fixed seed and budget (RLX_FUZZ_EXAMPLES, default 300 examples, derandomized);
a longer run: RLX_FUZZ_EXAMPLES=2000 python -m pytest -q tests/test_fuzz.py
(the variable is the test's own, read here, not an RLX_* flag of the runtime)."""
import os

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import rlxpy as rx  # noqa: E402

from helpers import assert_close  # noqa: E402

EXAMPLES = int(os.environ.get("RLX_FUZZ_EXAMPLES", "300"))
ACTS = ("relu", "relu6", "sigmoid", "tanh", "silu", "hardswish", "hardsigmoid", "gelu", "erf")


def small(lo, hi):
    return st.integers(lo, hi)


@st.composite
def steps(draw):
    """One op with its attributes, drawn freely (some invalid: the builder must say so)."""
    op = draw(st.sampled_from(("conv", "conv", "pool", "act", "add", "mul", "batch_norm", "concat", "slice",
                               "pad", "transpose", "mean", "softmax", "conv_transpose", "leaky_relu", "clip",
                               "sub", "div", "residual", "global_pool", "amax", "log_softmax", "resize", "split",
                               "flatten", "gelu_tanh")))
    a = {"op": op}
    if op == "residual":      # conv (+ bias) + add of its input (+ relu): the fused epilogues
        a.update(k=draw(st.sampled_from((1, 3))), bias=draw(st.booleans()), relu=draw(st.booleans()),
                 groups=draw(st.sampled_from((1, 1, 2))))
    elif op == "global_pool":
        a["kind"] = draw(st.sampled_from(("avg", "max")))
    elif op == "amax":
        a["axes"] = draw(st.sampled_from(((2, 3), (1,), (3,), (1, 2))))
    elif op == "split":
        a.update(axis=draw(small(1, 3)), size=draw(small(1, 4)), part=draw(small(0, 3)))
    elif op in ("conv", "conv_transpose"):
        a.update(k=draw(small(1, 5)), stride=draw(small(1, 3)), padding=draw(small(0, 3)), dilation=draw(small(1, 2)),
                 groups=draw(st.sampled_from((1, 1, 2, 4))), cout=draw(st.sampled_from((1, 3, 4, 8, 9, 16, 17, 32))),
                 bias=draw(st.booleans()), out_pad=draw(small(0, 1)))
    elif op == "pool":
        a.update(kind=draw(st.sampled_from(("max", "avg"))), k=draw(small(1, 4)), stride=draw(small(1, 3)),
                 padding=draw(small(0, 2)), dilation=draw(small(1, 2)), ceil=draw(st.booleans()),
                 cip=draw(st.booleans()))
    elif op == "act":
        a["fn"] = draw(st.sampled_from(ACTS))
    elif op in ("add", "mul", "sub", "div"):
        a["bshape"] = draw(st.sampled_from(("scalar", "channel", "full", "row")))
    elif op == "slice":
        a.update(axis=draw(small(1, 3)), start=draw(small(-3, 3)), end=draw(small(-2, 9)),
                 step=draw(st.sampled_from((1, 2, -1, -2))))
    elif op == "pad":
        a.update(p=draw(st.lists(small(-2, 2), min_size=4, max_size=4)),
                 mode=draw(st.sampled_from(("constant", "reflect", "replicate"))))
    elif op == "mean":
        a["axes"] = draw(st.sampled_from(((2, 3), (1,), (3,))))
    elif op == "leaky_relu":
        a["slope"] = draw(st.floats(-1, 1, allow_nan=False))
    elif op == "clip":
        a["lo"], a["hi"] = sorted(draw(st.lists(st.floats(-2, 2, allow_nan=False), min_size=2, max_size=2)))
    return a


def apply(g, x, a, name, rng):
    """The step on x through the public builder, named `name`."""
    p = lambda *shape: g.param(f"{name}.p{next(counter)}", (rng.standard_normal(shape) * 0.3).astype(np.float32))  # noqa: E731
    counter = iter(range(100))
    op, c = a["op"], x.shape[1]
    if op == "conv":
        b = p(a["cout"]) if a["bias"] else None
        w = p(a["cout"], max(1, c // a["groups"]), a["k"], a["k"])
        return g.conv(x, w, bias=b, stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                      groups=a["groups"], name=name)
    if op == "conv_transpose":
        w = p(c, max(1, a["cout"] // a["groups"]), a["k"], a["k"])
        return g.conv_transpose2d(x, w, stride=a["stride"], padding=a["padding"], output_padding=a["out_pad"],
                                  dilation=a["dilation"], groups=a["groups"], name=name)
    if op == "pool":
        return g.pool(x, a["kind"], a["k"], stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                      ceil_mode=a["ceil"], count_include_pad=a["cip"], name=name)
    if op == "act":
        return getattr(g, a["fn"])(x, name=name)
    if op == "leaky_relu":
        return g.leaky_relu(x, a["slope"], name=name)
    if op == "clip":
        return g.clip(x, a["lo"], a["hi"], name=name)
    if op in ("add", "mul", "sub", "div"):
        shape = {"scalar": (1,), "channel": (c, 1, 1), "full": tuple(x.shape[1:]), "row": (x.shape[3],)}[a["bshape"]]
        return getattr(g, op)(x, p(*shape), name=name)
    if op == "residual":
        k, groups = a["k"], a["groups"] if c % a["groups"] == 0 else 1
        y = g.conv(x, p(c, c // groups, k, k), bias=p(c) if a["bias"] else None, padding=k // 2, groups=groups,
                   name=f"{name}.conv")
        y = g.add(y, x, name=name)
        return g.relu(y, name=f"{name}.relu") if a["relu"] else y
    if op == "global_pool":
        return (g.global_avg_pool if a["kind"] == "avg" else g.global_max_pool)(x, name=name)
    if op == "amax":
        return g.amax(x, a["axes"], keepdim=True, name=name)
    if op == "log_softmax":
        return g.log_softmax(x, 1, name=name)
    if op == "gelu_tanh":
        return g.gelu(x, approximate="tanh", name=name)
    if op == "resize":
        return g.resize_nearest2x(x, name=name)
    if op == "split":
        parts = g.split(x, a["size"], a["axis"], name=name)
        return parts[min(a["part"], len(parts) - 1)]
    if op == "flatten":       # to [N, C*H*W] and back: the reorders around a plain tensor op
        return g.reshape(g.flatten(x, name=name), (-1,) + tuple(x.shape[1:]), name=f"{name}.back")
    if op == "batch_norm":
        var = g.param(f"{name}.var", (rng.random(c) + 0.5).astype(np.float32))
        return g.batch_norm(x, p(c), var, p(c), p(c), name=name)
    if op == "concat":
        return g.concat([x, g.relu(x)], axis=1, name=name)
    if op == "slice":
        return g.slice(x, [a["start"]], [a["end"]], axes=[a["axis"]], steps=[a["step"]], name=name)
    if op == "pad":
        return g.pad(x, a["p"], mode=a["mode"], name=name)
    if op == "transpose":
        return g.transpose(g.transpose(x, (0, 2, 3, 1)), (0, 3, 1, 2), name=name)
    if op == "mean":
        return g.mean(x, a["axes"], keepdim=True, name=name)
    if op == "softmax":
        return g.softmax(x, 1, name=name)
    raise AssertionError(op)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
# channels on both sides of the vector widths (8 and 16 lanes), so the blocked kernels run too
@given(c=st.sampled_from((1, 2, 3, 5, 8, 9, 16, 17, 24, 32)), h=small(1, 12), w=small(1, 12), n=small(1, 3),
       chain=st.lists(steps(), min_size=1, max_size=5))
# found by a run of 30000: a dilated window that skips over a 1x1 x (taps at -1 and 1),
# whose average the reference divided by zero and whose max (-inf) the check took for a miss
@example(c=1, h=1, w=1, n=1, chain=[
    {"op": "pool", "kind": "avg", "k": 2, "stride": 1, "padding": 1, "dilation": 2, "ceil": False, "cip": False}])
@example(c=1, h=1, w=1, n=1, chain=[
    {"op": "pool", "kind": "max", "k": 2, "stride": 1, "padding": 1, "dilation": 2, "ceil": False, "cip": False}])
# found by a run of 20000: that -inf through a leaky_relu whose slope (2.8e-276) is 0 in float32:
# NaN in the kernels and in PyTorch, -inf in the float64 reference until slopes were rounded
@example(c=1, h=1, w=1, n=1, chain=[
    {"op": "pool", "kind": "max", "k": 2, "stride": 1, "padding": 1, "dilation": 2, "ceil": False, "cip": False},
    {"op": "leaky_relu", "slope": 2.7561140211045673e-276}])
def test_random_graphs_are_refused_by_name_or_match_the_reference(c, h, w, n, chain):
    rng = np.random.default_rng(c * 1000 + h * 100 + w)
    g = rx.Graph()
    x = g.input("x", (None, c, h, w))
    y = x
    for i, a in enumerate(chain):
        name = f"step{i}_{a['op']}"
        try:
            y = apply(g, y, a, name, rng)
        except ValueError as e:
            assert name in str(e), f"the error does not name the node {name!r}: {e}"
            break
        if len(y.shape) != 4 or 0 in y.shape[1:]:
            break
    if y is x:
        y = g.identity(x)
    g.output("y", y)
    data = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}
    ref = rx.compile(g, rx.Config(fast_conv=False)).run(data)["y"]
    fast = rx.compile(g).run(data)["y"]
    assert fast.shape == ref.shape
    # NaNs and infinities (a max over a window of padding is -inf) where the reference has
    # them, with their signs; the finite values within 1e-3 of the finite scale
    assert np.array_equal(np.isnan(fast), np.isnan(ref))
    assert np.array_equal(np.isposinf(fast), np.isposinf(ref)) and np.array_equal(np.isneginf(fast), np.isneginf(ref))
    finite = np.isfinite(ref)
    assert_close(fast[finite], ref[finite], 1e-3, "fast against the reference")


# --- single conv-family nodes against PyTorch ----------------------------------------------
@st.composite
def single_ops(draw):
    op = draw(st.sampled_from(("conv", "conv_t", "max", "avg")))
    rank = draw(st.sampled_from((1, 2, 2, 3) if op != "conv_t" else (2, 2, 3)))
    per_axis = lambda lo, hi: tuple(draw(small(lo, hi)) for _ in range(rank))   # noqa: E731
    a = dict(op=op, rank=rank, c=draw(st.sampled_from((1, 2, 3, 4, 8, 16, 17))), sizes=per_axis(1, 9),
             k=per_axis(1, 4), s=per_axis(1, 3), d=per_axis(1, 2), p=per_axis(0, 2), n=draw(small(1, 2)))
    if op in ("conv", "conv_t"):
        a.update(groups=draw(st.sampled_from((1, 1, 2, a["c"]))), cout=draw(st.sampled_from((1, 3, 8, 16, 17))),
                 bias=draw(st.booleans()), out_pad=per_axis(0, 2))
    else:
        a.update(ceil=draw(st.booleans()), cip=draw(st.booleans()))
    return a


def _torch_single(a, x, w, b):
    import torch.nn.functional as F
    r = a["rank"] - 1
    if a["op"] == "conv":
        return (F.conv1d, F.conv2d, F.conv3d)[r](x, w, b, a["s"], a["p"], a["d"], a["groups"])
    if a["op"] == "conv_t":
        return (F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d)[r](
            x, w, b, a["s"], a["p"], a["out_pad"], a["groups"], a["d"])
    if a["op"] == "max":
        return (F.max_pool1d, F.max_pool2d, F.max_pool3d)[r](x, a["k"], a["s"], a["p"], a["d"], ceil_mode=a["ceil"])
    if any(d != 1 for d in a["d"]):
        raise RuntimeError("PyTorch's average pools take no dilation")
    return (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[r](x, a["k"], a["s"], a["p"], ceil_mode=a["ceil"],
                                                       count_include_pad=a["cip"])


def _build_single(g, x, a, w, b):
    b = None if b is None else g.param("b", b)
    if a["op"] == "conv":
        conv = g.conv3d if a["rank"] == 3 else g.conv
        return conv(x, g.param("w", w), b, a["s"], a["p"], a["d"], a["groups"], name="op")
    if a["op"] == "conv_t":
        conv_t = g.conv_transpose3d if a["rank"] == 3 else g.conv_transpose2d
        return conv_t(x, g.param("w", w), b, a["s"], a["p"], a["out_pad"], a["d"], a["groups"], name="op")
    return g.pool(x, a["op"], a["k"], stride=a["s"], padding=a["p"], dilation=a["d"], ceil_mode=a["ceil"],
                  count_include_pad=a["cip"], name="op")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(a=single_ops())
# found by its first run: a ceil_mode window wider than the padded input (PyTorch gives one output)
@example(a={"op": "max", "rank": 2, "c": 1, "sizes": (1, 1), "k": (1, 2), "s": (1, 2), "d": (1, 1), "p": (0, 0),
            "n": 1, "ceil": True, "cip": False})
def test_single_conv_and_pool_nodes_match_pytorch(a):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(sum(a["sizes"]) + a["c"])
    x = rng.standard_normal((a["n"], a["c"]) + a["sizes"]).astype(np.float32)
    w = b = None
    if a["op"] != "max" and a["op"] != "avg":
        per_group = max(1, (a["c"] if a["op"] == "conv" else a["cout"]) // a["groups"])
        first = a["cout"] if a["op"] == "conv" else a["c"]
        w = rng.standard_normal((first, per_group) + a["k"]).astype(np.float32)
        if a["bias"]:
            b = rng.standard_normal(a["cout"] if a["op"] == "conv" else per_group * a["groups"]).astype(np.float32)
    try:
        with torch.no_grad():
            t = lambda v: None if v is None else torch.from_numpy(v).double()   # noqa: E731
            want = _torch_single(a, t(x), t(w), t(b)).numpy()
        torch_runs = want.size > 0
    except (RuntimeError, ValueError, IndexError):
        torch_runs = False
    g = rx.Graph()
    try:
        y = _build_single(g, g.input("x", x.shape), a, w, b)
    except ValueError as e:
        assert "op" in str(e), e
        assert not torch_runs, f"rlxpy refused what PyTorch runs: {e}"
        return
    if not torch_runs:
        # ONNX's pools reach further than PyTorch's (padding past half a kernel, dilated
        # averages): the other fuzzer holds them to the reference kernels
        assert a["op"] in ("max", "avg"), "rlxpy took a conv that PyTorch refuses"
        return
    g.output("y", y)
    for config in (rx.Config(), rx.Config(fast_conv=False)):
        out = rx.compile(g, config).run({"x": x})["y"]
        assert out.shape == want.shape
        assert np.array_equal(np.isneginf(out), np.isneginf(want))
        finite = np.isfinite(want)
        assert_close(out[finite], want[finite], 1e-4, "fast" if config.fast_conv else "reference")


# --- ops around the convolutions, any rank, against PyTorch ----------------------------------
@st.composite
def tensor_ops(draw):
    rank = draw(st.integers(1, 5))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    """One op around the convolutions with its attributes and a second operand's shape."""
    op = draw(st.sampled_from(("binary", "unary", "reduce", "softmax", "transpose", "slice", "pad", "concat", "flatten",
                               "matmul", "split", "linear")))
    a = dict(op=op, shape=shape)
    ax = lambda: draw(st.integers(-rank, rank - 1))   # noqa: E731
    if op == "binary":
        # a broadcastable second shape: drop leading dims, set some to 1
        k = draw(st.integers(0, rank))
        other = list(shape[k:])
        other = [1 if draw(st.booleans()) else d for d in other]
        if draw(st.booleans()):
            other = [1] * draw(st.integers(0, 2)) + other
        a.update(fn=draw(st.sampled_from(("add", "sub", "mul", "div"))), other=tuple(other), swap=draw(st.booleans()))
    elif op == "unary":
        a.update(fn=draw(st.sampled_from(("relu", "leaky_relu", "clip", "sigmoid", "hardsigmoid", "hardswish", "silu",
                                           "gelu", "gelu_tanh", "tanh", "erf", "relu6"))),
                 p1=draw(st.floats(-3, 3)), p2=draw(st.floats(-3, 3)))
    elif op == "reduce":
        axes = draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda v: v % rank))
        a.update(fn=draw(st.sampled_from(("mean", "amax"))), axes=tuple(axes), keep=draw(st.booleans()))
    elif op == "softmax":
        a.update(axis=ax(), log=draw(st.booleans()))
    elif op == "transpose":
        a.update(perm=tuple(draw(st.permutations(range(rank)))))
    elif op == "slice":
        a.update(axis=ax(), start=draw(st.integers(-6, 6)), end=draw(st.integers(-7, 7)),
                 step=draw(st.sampled_from((1, 2, 3, -1, -2))))
    elif op == "pad":
        n = draw(st.integers(1, min(rank, 3)))
        a.update(p=tuple(draw(st.integers(-1, 3)) for _ in range(2 * n)),
                 mode=draw(st.sampled_from(("constant", "reflect", "replicate"))), value=draw(st.floats(-2, 2)))
    elif op == "concat":
        a.update(axis=ax(), extra=draw(st.integers(1, 3)))
    elif op == "flatten":
        a.update(s=ax(), e=ax())
    elif op == "matmul":
        a.update(k=draw(st.integers(1, 4)), vec=draw(st.booleans()))
    elif op == "split":
        a.update(axis=ax(), size=draw(st.integers(1, 4)), part=draw(st.integers(0, 4)))
    elif op == "linear":
        a.update(out=draw(st.integers(1, 5)), bias=draw(st.booleans()))
    return a


def _tensor_op_pair(a, rng):
    """(rlxpy builder call, PyTorch call, the extra input arrays) for case a."""
    import torch
    import torch.nn.functional as F
    T = torch.from_numpy
    op = a["op"]
    if op == "binary":
        y = rng.standard_normal(a["other"]).astype(np.float32)
        if a["fn"] == "div":
            y = np.where(np.abs(y) < 0.1, 0.5, y).astype(np.float32)
        tf = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[a["fn"]]
        if a["swap"]:
            return (lambda g, v, w: getattr(g, a["fn"])(w, v)), (lambda v, w: tf(w, v)), [y]
        return (lambda g, v, w: getattr(g, a["fn"])(v, w)), (lambda v, w: tf(v, w)), [y]
    if op == "unary":
        fn, p1, p2 = a["fn"], a["p1"], a["p2"]
        rl = {"leaky_relu": lambda g, v: g.leaky_relu(v, p1), "clip": lambda g, v: g.clip(v, p1, p2),
              "gelu_tanh": lambda g, v: g.gelu(v, approximate="tanh")}.get(fn, lambda g, v: getattr(g, fn)(v))
        tf = {"leaky_relu": lambda v: F.leaky_relu(v, p1), "clip": lambda v: torch.clamp(v, p1, p2),
              "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "gelu": lambda v: F.gelu(v.double()).float(),
              "relu6": F.relu6, "relu": F.relu, "sigmoid": torch.sigmoid, "hardsigmoid": F.hardsigmoid,
              "hardswish": F.hardswish, "silu": F.silu, "tanh": torch.tanh, "erf": torch.erf}[fn]
        return rl, tf, []
    if op == "reduce":
        if a["fn"] == "mean":
            return ((lambda g, v: g.mean(v, a["axes"], keepdim=a["keep"])),
                    (lambda v: v.mean(a["axes"], keepdim=a["keep"])), [])
        return ((lambda g, v: g.amax(v, a["axes"], keepdim=a["keep"])),
                (lambda v: torch.amax(v, a["axes"], keepdim=a["keep"])), [])
    if op == "softmax":
        if a["log"]:
            return (lambda g, v: g.log_softmax(v, a["axis"])), (lambda v: F.log_softmax(v, a["axis"])), []
        return (lambda g, v: g.softmax(v, a["axis"])), (lambda v: F.softmax(v, a["axis"])), []
    if op == "transpose":
        return (lambda g, v: g.transpose(v, a["perm"])), (lambda v: v.permute(a["perm"])), []
    if op == "slice":
        def tf(v):
            idx = [slice(None)] * v.dim()
            idx[a["axis"]] = slice(a["start"], a["end"], a["step"])
            return T(v.numpy()[tuple(idx)].copy())
        return (lambda g, v: g.slice(v, [a["start"]], [a["end"]], [a["axis"]], [a["step"]])), tf, []
    if op == "pad":
        if a["mode"] == "constant":
            return ((lambda g, v: g.pad(v, a["p"], value=a["value"])),
                    (lambda v: F.pad(v, a["p"], value=a["value"])), [])
        return (lambda g, v: g.pad(v, a["p"], mode=a["mode"])), (lambda v: F.pad(v, a["p"], mode=a["mode"])), []
    if op == "concat":
        sh = list(a["shape"]); sh[a["axis"]] = a["extra"]
        y = rng.standard_normal(sh).astype(np.float32)
        return ((lambda g, v, w: g.concat([v, w, v], a["axis"])),
                (lambda v, w: torch.cat([v, w, v], a["axis"])), [y])
    if op == "flatten":
        return (lambda g, v: g.flatten(v, a["s"], a["e"])), (lambda v: torch.flatten(v, a["s"], a["e"])), []
    if op == "matmul":
        sh = (a["shape"][-1],) if a["vec"] else (a["shape"][-1], a["k"])
        y = rng.standard_normal(sh).astype(np.float32)
        return (lambda g, v, w: g.matmul(v, w)), (lambda v, w: torch.matmul(v, w)), [y]
    if op == "split":
        part = min(a["part"], -(-a["shape"][a["axis"]] // a["size"]) - 1)
        return ((lambda g, v: g.split(v, a["size"], a["axis"])[part]),
                (lambda v: torch.split(v, a["size"], a["axis"])[part]), [])
    if op == "linear":
        w = rng.standard_normal((a["out"], a["shape"][-1])).astype(np.float32)
        b = rng.standard_normal(a["out"]).astype(np.float32) if a["bias"] else None
        return (lambda g, v: g.linear(v, g.param("w", w), None if b is None else g.param("b", b))), \
               (lambda v: F.linear(v, T(w), None if b is None else T(b))), []
    raise AssertionError(op)



@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(a=tensor_ops())
def test_tensor_ops_of_any_rank_match_pytorch(a):
    """Ops around the convolutions on rank 1-5 inputs with random attributes, broadcasts and
    axes against PyTorch: the same result on both kernel sets, and refused at build time
    exactly where PyTorch refuses (but reflect / replicate pads, which PyTorch takes on the
    last 1-3 axes of rank 2-5 inputs only)."""
    torch = pytest.importorskip("torch")
    T = torch.from_numpy
    rng = np.random.default_rng(1)
    x = rng.standard_normal(a["shape"]).astype(np.float32) * 3
    build, torch_fn, extra = _tensor_op_pair(a, rng)
    try:
        want = torch_fn(T(x), *[T(e) for e in extra]).numpy()
        torch_error = "" if want.size else "empty"
    except (RuntimeError, ValueError, IndexError, TypeError, NotImplementedError) as e:
        torch_error = str(e)
    g = rx.Graph()
    values = [g.input("x", x.shape)] + [g.input(f"e{i}", e.shape) for i, e in enumerate(extra)]
    try:
        g.output("y", build(g, *values))
    except ValueError as e:
        assert torch_error, f"rlxpy refused what PyTorch runs: {e}"
        return
    if torch_error and a["op"] == "pad" and a["mode"] != "constant" and "not supported" in torch_error:
        return
    assert not torch_error, f"rlxpy built what PyTorch refuses: {torch_error[:200]}"
    feeds = {"x": x, **{f"e{i}": e for i, e in enumerate(extra)}}
    for config in (rx.Config(), rx.Config(fast_conv=False)):
        out = rx.compile(g, config).run(feeds)["y"]
        assert out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())))
