"""Seeing and checking what runs: exe.profile, RLX_PROFILE, exe.validate, RLX_VALIDATE,
and autotuning with its on-disk cache."""
import json
import warnings

import numpy as np
import pytest

import rlxpy as rx
from rlxpy.cpu_kernels import dispatch
from rlxpy.thunks import autotune as AT
from rlxpy.thunks import records as R
from rlxpy.thunks.validate import errors, unblock

RNG = np.random.default_rng(11)


def small_net():
    """conv 3x3 -> conv 3x3 s2 -> max pool -> flatten -> linear: names a, b, pool, flat, fc."""
    g = rx.Graph()
    x = g.input("x", (None, 4, 12, 12))
    a = g.conv(x, g.param("wa", RNG.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3), padding=1, name="a")
    b = g.conv(a, g.param("wb", RNG.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2), stride=2,
               padding=1, name="b")
    p = g.pool(b, "max", 2, name="pool")
    f = g.flatten(p, name="flat")
    g.output("y", g.linear(f, g.param("wf", RNG.standard_normal((5, 16 * 3 * 3)).astype(np.float32) * 0.1),
                           name="fc"))
    return g


INPUTS = {"x": RNG.standard_normal((2, 4, 12, 12)).astype(np.float32)}


# --- profile ------------------------------------------------------------------------------
def test_profile_rows_cover_every_thunk_with_the_work_it_does():
    exe = rx.compile(small_net())
    prof = exe.profile(INPUTS, repeat=3)
    thunks = exe.plan().thunks
    assert [r["node"] for r in prof.rows] == [t.node for t in thunks]
    assert [r["algo"] for r in prof.rows] == [t.algo for t in thunks]
    for r in prof.rows:
        assert {"node", "op", "algo", "ms", "gflops"} <= set(r)
        assert r["ms"] > 0
    by_node = {r["node"]: r for r in prof.rows}
    # FLOPs restated from the layer shapes: 2 * outputs * input channels * taps
    assert by_node["a"]["flops"] == 2 * (2 * 8 * 12 * 12) * 4 * 9
    assert by_node["b"]["flops"] == 2 * (2 * 16 * 6 * 6) * 8 * 9
    assert by_node["fc"]["flops"] == 2 * (2 * 5) * 144
    assert by_node["a"]["op"] == "Conv" and by_node["fc"]["op"] == "Linear"
    for r in prof.rows:
        assert r["gflops"] == pytest.approx(r["flops"] / (r["ms"] * 1e-3) / 1e9)
    assert prof.total_ms == pytest.approx(sum(r["ms"] for r in prof.rows))
    assert sum(r["percent"] for r in prof.rows) == pytest.approx(100.0)
    text = str(prof)
    assert all(t.node in text for t in thunks) and "GFLOP/s" in text


def test_profile_chrome_trace_has_one_complete_event_per_thunk(tmp_path):
    exe = rx.compile(small_net())
    prof = exe.profile(INPUTS, repeat=2)
    path = tmp_path / "trace.json"
    prof.save_chrome_trace(path)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert [e["name"] for e in events] == [r["node"] for r in prof.rows]
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)
    for e, nxt in zip(events, events[1:]):           # laid end to end, in microseconds
        assert nxt["ts"] == pytest.approx(e["ts"] + e["dur"], abs=2e-3)
    assert events[-1]["ts"] + events[-1]["dur"] == pytest.approx(prof.total_ms * 1e3, rel=1e-3, abs=1e-2)


def test_profile_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    prof = rx.compile(small_net()).profile(INPUTS, repeat=1)
    path = tmp_path / "p.png"
    prof.plot(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_and_validate_refuse_bad_repeat_bad_inputs_and_empty_batches_naming_them():
    exe = rx.compile(small_net())
    with pytest.raises(ValueError, match="repeat"):
        exe.profile(INPUTS, repeat=0)
    with pytest.raises(ValueError, match="input 'x'"):
        exe.profile({"x": np.zeros((2, 3, 12, 12), np.float32)})
    empty = {"x": np.zeros((0, 4, 12, 12), np.float32)}
    for check in (exe.profile, exe.validate):
        with pytest.raises(ValueError, match="empty batch runs no kernel"):
            check(empty)
    assert exe.run(empty)["y"].shape == (0, 5)


def test_rlx_profile_prints_one_line_per_thunk_and_keeps_outputs(capsys):
    net = small_net()
    plain = rx.compile(net).run(INPUTS)["y"]
    exe = rx.compile(net, rx.Config.from_env({"RLX_PROFILE": "1"}))
    out = exe.run(INPUTS)["y"]
    np.testing.assert_allclose(out, plain, rtol=1e-5, atol=1e-5)     # (BLAS may round by alignment)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlx ")]
    thunks = exe.plan().thunks
    assert len(lines) == len(thunks)
    for ln, t in zip(lines, thunks):
        assert ln.endswith(t.node) and t.algo in ln and " ms " in ln


# --- validate -----------------------------------------------------------------------------
def test_unblock_and_errors_restated():
    x = RNG.standard_normal((2, 5, 3, 4)).astype(np.float32)
    stored = np.zeros((2, 2, 12, 4), np.float32)         # 5 channels in blocks of 4, lanes past C zero
    for c in range(5):
        stored[:, c // 4, :, c % 4] = x[:, c].reshape(2, 12)
    np.testing.assert_array_equal(unblock(stored, x.shape, "nchw4c"), x)
    a = np.array([1.0, np.nan, np.inf, 2.0], np.float32)
    assert errors(a, a) == (0.0, 0.0)                      # NaN against NaN, inf against inf: no error
    assert errors(a, np.array([1.0, 0.0, np.inf, 2.0], np.float32))[0] == np.inf
    assert errors(np.array([3.0, 1.0], np.float32), np.array([4.0, 1.0], np.float32)) == (1.0, 0.25)


def test_validate_passes_every_thunk_of_a_sound_executable():
    exe = rx.compile(small_net())
    report = exe.validate(INPUTS)
    assert report.ok and report.first_failure is None
    assert {r["node"] for r in report.rows} == {t.node for t in exe.plan().thunks}
    assert all(r["reference"] in ("naive", "copy") for r in report.rows)
    assert "all within tolerance" in str(report)


def test_validate_uses_the_looser_tolerance_of_winograd():
    exe = rx.compile(small_net(), rx.Config(winograd=True))
    report = exe.validate(INPUTS)
    row = next(r for r in report.rows if r["node"] == "a")
    assert row["algo"] == "winograd" and row["tol"] == 1e-3 and report.ok


def _break(monkeypatch, key, noop=False):
    """The kernel of (record type, algo) made wrong: it adds 1 to y's first element (or,
    noop, writes only that)."""
    orig = dispatch.EXEC[key]

    def broken(t, arena):
        fn, args = orig(t, arena)
        first = arena[t.off("y") // 4:t.off("y") // 4 + 1]

        def bad(*a):
            if not noop:
                fn(*a)
            first[0] += 1.0
        return bad, args
    monkeypatch.setitem(dispatch.EXEC, key, broken)


def test_validate_names_the_node_whose_kernel_is_wrong_and_errors_do_not_compound(monkeypatch):
    _break(monkeypatch, (R.Conv2D, "im2col"))
    exe = rx.compile(small_net(), algos={"a": "im2col", "b": "nchwc_direct"} if _vectors() else {"a": "im2col",
                                                                                                 "b": "direct"})
    report = exe.validate(INPUTS)
    assert not report.ok and report.first_failure == "a"
    bad = report.failures()
    assert [r["node"] for r in bad] == ["a"]               # b, pool, fc got a's fast output and agree
    assert bad[0]["max_abs"] == pytest.approx(1.0, abs=1e-4)
    assert "first failure: a" in str(report)


def test_rlx_validate_raises_naming_the_node_and_leaves_the_executable_usable(monkeypatch):
    _break(monkeypatch, (R.Conv2D, "im2col"))
    config = rx.Config.from_env({"RLX_VALIDATE": "1"})
    net = small_net()
    exe = rx.compile(net, config, algos={"a": "im2col"})
    with pytest.raises(RuntimeError, match="RLX_VALIDATE: node 'a'"):
        exe.run(INPUTS)
    good = rx.compile(net, config)                         # the same graph on sound kernels runs
    ref = rx.compile(net, rx.Config(fast_conv=False)).run(INPUTS)["y"]
    np.testing.assert_allclose(good.run(INPUTS)["y"], ref, rtol=1e-4, atol=1e-5)
    assert exe.validate(INPUTS).first_failure == "a"       # still usable after the failed run


def _vectors():
    from rlxpy.cpu_kernels import simd
    return simd.resolve_width(None) > 1


# --- autotune -----------------------------------------------------------------------------
def tuned_config(tmp_path, **kw):
    return rx.Config(cache_dir=str(tmp_path), **kw)


def test_autotune_keeps_the_fastest_valid_candidate_and_explain_shows_every_time(tmp_path):
    net = small_net()
    exe = rx.compile(net, tuned_config(tmp_path), autotune=True)
    out = exe.run(INPUTS)["y"]
    ref = rx.compile(net, rx.Config(fast_conv=False)).run(INPUTS)["y"]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    (tuned,) = exe.tuned.values()
    assert set(tuned) == {"a", "b", "pool"}                # the conv-family nodes
    algos = {t.node: t.algo for t in exe.plan().thunks}
    text = exe.explain()
    for name, t in tuned.items():
        assert t.source == "measured" and algos[name] == t.algo
        assert len(t.times_ms) >= 2 and t.algo == min(t.times_ms, key=t.cost)
        assert "winograd" not in t.times_ms and "winograd_f4" not in t.times_ms   # not exact: off by default
        for algo in t.times_ms:
            assert algo in text
    assert text.count("autotuned (measured)") == 3
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 3


def test_autotune_reads_its_cache_without_timing(tmp_path, monkeypatch):
    net = small_net()
    first = rx.compile(net, tuned_config(tmp_path), autotune=True)
    first.run(INPUTS)
    monkeypatch.setattr(AT, "measure", lambda *a, **k: pytest.fail("timed again despite the cache"))
    again = rx.compile(net, tuned_config(tmp_path).replace(autotune=True))    # RLX_AUTOTUNE's field
    again.run(INPUTS)
    (t1,), (t2,) = first.tuned.values(), again.tuned.values()
    assert {n: t.algo for n, t in t1.items()} == {n: t.algo for n, t in t2.items()}
    assert all(t.source == "cache" for t in t2.values())
    assert "autotuned (cache)" in again.explain()


@pytest.mark.parametrize("damage", ["corrupt", "stale key", "ineligible algo"])
def test_autotune_ignores_a_bad_cache_entry_with_a_warning(tmp_path, damage):
    g = rx.Graph()
    x = g.input("x", (1, 4, 9, 9))
    g.output("y", g.conv(x, g.param("w", RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)), stride=2, name="c"))
    rx.compile(g, tuned_config(tmp_path), autotune=True)
    (path,) = (tmp_path / "autotune").glob("*.json")
    entry = json.loads(path.read_text())
    if damage == "corrupt":
        path.write_text("{not json")
    elif damage == "stale key":
        path.write_text(json.dumps({**entry, "key": entry["key"].replace("rlxpy ", "rlxpy 0.0.0-")}))
    else:                                                  # stride 2: Winograd can't run it
        path.write_text(json.dumps({**entry, "algo": "winograd", "times_ms": {"winograd": 0.001}}))
    with pytest.warns(RuntimeWarning, match={"corrupt": "corrupt", "stale key": "stale",
                                             "ineligible algo": "not eligible"}[damage]):
        exe = rx.compile(g, tuned_config(tmp_path), autotune=True)
    (tuned,) = exe.tuned.values()
    assert tuned["c"].source == "measured" and tuned["c"].algo != "winograd"
    assert json.loads(path.read_text())["key"] == entry["key"]       # measured again and rewritten


def test_autotune_rejects_a_fast_candidate_that_fails_validation(tmp_path, monkeypatch):
    _break(monkeypatch, (R.Conv2D, "im2col"), noop=True)   # does no work: surely the fastest, and wrong
    g = rx.Graph()
    x = g.input("x", (1, 8, 10, 10))
    g.output("y", g.conv(x, g.param("w", RNG.standard_normal((8, 8, 3, 3)).astype(np.float32)), padding=1,
                         name="c"))
    exe = rx.compile(g, tuned_config(tmp_path), autotune=True)
    t = exe.tuned[next(iter(exe.tuned))]["c"]
    assert "im2col" in t.rejected and "max rel error" in t.rejected["im2col"]
    assert t.algo != "im2col"
    assert "rejected: im2col" in exe.explain()


def test_autotune_leaves_forced_nodes_and_offers_winograd_only_where_allowed(tmp_path):
    exe = rx.compile(small_net(), tuned_config(tmp_path, winograd=True), autotune=True, algos={"b": "im2col"})
    exe.run(INPUTS)
    (tuned,) = exe.tuned.values()
    assert "b" not in tuned and {t.node: t.algo for t in exe.plan().thunks}["b"] == "im2col"
    assert "winograd" in tuned["a"].times_ms                # RLX_WINOGRAD allows it: a candidate
    assert rx.Config.from_env({"RLX_AUTOTUNE": "1", "RLX_CACHE_DIR": str(tmp_path)}).autotune
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        forced = rx.compile(small_net(), tuned_config(tmp_path, conv_algo="im2col"), autotune=True)
        forced.run(INPUTS)
    assert forced.tuned == {} and {t.algo for t in forced.plan().thunks if t.node in "ab"} == {"im2col"}                               # RLX_CONV_ALGO forces every node: nothing tuned
