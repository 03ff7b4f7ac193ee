"""The explicit-vector layer (rlxpy/cpu_kernels/simd.py) at every width the host can run:
results against numpy, tails that touch only their lanes, PyTorch's NaN rule for max/min,
the instructions LLVM emits, and RLX_SIMD_WIDTH."""
import numba
import numpy as np
import pytest

import rlxpy as rx
from rlxpy.cpu_kernels import simd
from rlxpy.cpu_kernels.simd import (lanes, nlanes, vadd, vfma, vhsum, vlane, vload, vload_tail, vmatch, vmax, vmin,
                                    vmul, vselect, vsplat, vstore, vstore_tail, vzero)

# Every width runs on every host: LLVM splits a vector wider than the CPU's registers (16
# lanes on AVX2) into the ones it has, so results are checked everywhere; only the
# instruction test needs the host's own width.
WIDTHS = [16, 8, 1]


@numba.njit
def axpy(a, x, y, L):
    """y = a*x + y with a vector loop and a masked tail; L = lanes(W)."""
    W = nlanes(L)
    n = x.size
    av = vsplat(a, L)
    i = 0
    while i + W <= n:
        vstore(y, i, vfma(av, vload(x, i, L), vload(y, i, L)))
        i += W
    if i < n:
        vstore_tail(y, i, vfma(av, vload_tail(x, i, n - i, L), vload_tail(y, i, n - i, L)), n - i)


@numba.njit
def lanewise(x, y, out, L):
    """out rows: max, min, x*y + x, and the sums of the lanes of x (row 4, lane 0)."""
    W = nlanes(L)
    a, b = vload(x, 0, L), vload(y, 0, L)
    vstore(out, 0, vmax(a, b))
    vstore(out, W, vmin(a, b))
    vstore(out, 2 * W, vadd(vmul(a, b), a))
    vstore(out, 3 * W, vadd(vzero(L), vsplat(vhsum(a), L)))
    return vlane(a, W - 1)


@pytest.mark.parametrize("W", WIDTHS)
@pytest.mark.parametrize("n", [0, 1, 3, 7, 8, 15, 16, 17, 33, 50])
def test_axpy_with_tails_matches_numpy(W, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n + 8).astype(np.float32)
    y = rng.standard_normal(n + 8).astype(np.float32)
    guard = y[n:].copy()
    expected = (np.float64(1.5) * x[:n] + y[:n]).astype(np.float32)   # exact product, one rounding
    axpy(np.float32(1.5), x[:n], y[:n], lanes(W))
    np.testing.assert_array_max_ulp(y[:n], expected, maxulp=1)
    assert np.array_equal(y[n:], guard)      # the tail store wrote only its n lanes


@pytest.mark.parametrize("W", WIDTHS)
def test_lanewise_ops_and_the_nan_rule(W):
    x = np.arange(1, W + 1, dtype=np.float32)
    y = x[::-1].copy()
    x[0] = np.nan                              # a NaN in x: max and min are NaN in lane 0
    if W > 1:
        y[W - 1] = np.nan                      # a NaN in y: NaN in the last lane
    out = np.zeros(4 * W, np.float32)
    last = lanewise(x, y, out, lanes(W))
    both = np.isnan(x) | np.isnan(y)
    mx, mn = out[:W], out[W:2 * W]
    assert np.array_equal(np.isnan(mx), both) and np.array_equal(np.isnan(mn), both)
    assert np.array_equal(mx[~both], np.maximum(x, y)[~both]) and np.array_equal(mn[~both], np.minimum(x, y)[~both])
    np.testing.assert_array_equal(out[2 * W:3 * W][~both], (x * y + x)[~both])
    assert np.isnan(out[3 * W]) and (last == x[W - 1] or np.isnan(x[W - 1]))
    z = np.arange(W, dtype=np.float32)
    lanewise(z, z, out, lanes(W))
    assert out[3 * W] == z.sum()


@numba.njit
def masks(x, y, out, L):
    """out rows: vmatch(x, y), then vselect(that mask, x, y)."""
    W = nlanes(L)
    m = vmatch(vload(x, 0, L), vload(y, 0, L))
    vstore(out, 0, m)
    vstore(out, W, vselect(m, vload(x, 0, L), vsplat(np.float32(-7.0), L)))


@pytest.mark.parametrize("W", WIDTHS)
def test_vmatch_is_equal_or_both_nan_and_vselect_follows_it(W):
    pool = np.array([1.0, np.nan, -0.0, 0.0, np.inf, 2.0], np.float32)
    rng = np.random.default_rng(W)
    for _ in range(20):
        x, y = rng.choice(pool, W), rng.choice(pool, W)
        out = np.zeros(2 * W, np.float32)
        masks(x, y, out, lanes(W))
        want = (x == y) | (np.isnan(x) & np.isnan(y))
        assert np.array_equal(out[:W], want.astype(np.float32))
        picked = out[W:]
        assert np.array_equal(picked[~want], np.full((~want).sum(), -7.0, np.float32))
        assert np.array_equal(np.isnan(picked[want]), np.isnan(x[want]))
        assert np.array_equal(picked[want & ~np.isnan(x)], x[want & ~np.isnan(x)])


@pytest.mark.parametrize("W, register", [(16, "zmm"), (8, "ymm")])
def test_vector_fma_instructions_are_emitted(W, register):
    if W not in simd.host_widths():
        pytest.skip(f"CPU can't run {W} lanes")
    x, y = np.ones(40, np.float32), np.ones(40, np.float32)
    axpy(np.float32(1.0), x, y, lanes(W))
    asm = next(a for sig, a in axpy.inspect_asm().items() if str(sig[-1]) == f"Lanes{W}")
    assert any(line.strip().startswith("vfmadd") and register in line for line in asm.splitlines())
    if W == 8:
        assert "zmm" not in asm


def test_a_width_travels_in_the_type_so_calls_do_not_recompile():
    x, y = np.ones(40, np.float32), np.ones(40, np.float32)
    for W in simd.host_widths():
        axpy(np.float32(1.0), x, y, lanes(W))
    before = len(axpy.signatures)
    for W in simd.host_widths():
        axpy(np.float32(1.0), x, y, lanes(W))
    assert len(axpy.signatures) == before
    with pytest.raises(ValueError, match="one of"):
        lanes(4)


def test_simd_width_flag():
    assert rx.Config.from_env({"RLX_SIMD_WIDTH": "8"}).simd_width == 8
    assert rx.Config.from_env({}).simd_width is None
    with pytest.raises(ValueError, match=r"RLX_SIMD_WIDTH='4'.*16, 8, 1"):
        rx.Config.from_env({"RLX_SIMD_WIDTH": "4"})


def test_a_width_the_cpu_cannot_run_is_refused(monkeypatch):
    monkeypatch.setattr(simd, "host_widths", lambda: (8, 1))
    assert simd.resolve_width(None) == 8 and simd.resolve_width(1) == 1
    with pytest.raises(ValueError, match="RLX_SIMD_WIDTH=16: this CPU can't run 16"):
        simd.resolve_width(16)


@numba.njit
def transpose_block(a, src, src_stride, src_rows, dst, dst_stride, dst_rows, L):
    simd.vtranspose(a, src, src_stride, src_rows, a, dst, dst_stride, dst_rows, L)


@numba.njit
def columns(a, i, stride, nrows, count, L):
    """Six vectors 100*p + lane as the columns of a W x 6 block at a[i:]."""
    base = vload(a, 0, L)           # a[0:W] holds 0..W-1
    simd.vstore_columns(a, i, stride, nrows, count, base, vadd(base, vsplat(100.0, L)),
                        vadd(base, vsplat(200.0, L)), vadd(base, vsplat(300.0, L)),
                        vadd(base, vsplat(400.0, L)), vadd(base, vsplat(500.0, L)))


@pytest.mark.parametrize("W", WIDTHS)
@pytest.mark.parametrize("src_rows, dst_rows", [(None, None), (3, None), (None, 2)])
def test_vtranspose_moves_a_block_and_zero_fills_missing_rows(W, src_rows, dst_rows):
    src_rows = W if src_rows is None else min(src_rows, W)
    dst_rows = W if dst_rows is None else min(dst_rows, W)
    rng = np.random.default_rng(W)
    a = rng.standard_normal(4 * W * W + 64).astype(np.float32)
    src, ss, dst, ds = 5, W + 3, 2 * W * W + 7, W + 1          # odd strides and offsets
    block = np.stack([a[src + r * ss: src + r * ss + W] for r in range(W)])
    block[src_rows:] = 0.0
    before = a.copy()
    transpose_block(a, src, ss, src_rows, dst, ds, dst_rows, lanes(W))
    expected = before.copy()
    for r in range(dst_rows):
        expected[dst + r * ds: dst + r * ds + W] = block.T[r]
    assert np.array_equal(a, expected)         # the rows written, and nothing else


@pytest.mark.parametrize("W", WIDTHS)
@pytest.mark.parametrize("nrows, count", [(99, 6), (3, 6), (99, 4), (1, 1)])
def test_vstore_columns_writes_lane_r_of_column_p_to_row_r_and_nothing_else(W, nrows, count):
    stride = 11
    a = np.full(W + 16 * stride + 40, -7.0, np.float32)
    a[:W] = np.arange(W)
    i = W + 3
    columns(a, i, stride, nrows, count, lanes(W))
    expected = np.full_like(a, -7.0)
    expected[:W] = np.arange(W)
    for r in range(min(nrows, W)):
        for p in range(count):
            expected[i + r * stride + p] = 100 * p + r
    assert np.array_equal(a, expected)
