"""The channel-blocked layout (NCHWc) and its vector convolutions, through the public API:
every conv case of the table against the reference kernels at every SIMD width (16, 8 and
1 lanes on any host: conftest's every_width), the layout plan (where reorders go, and where none are needed), channels padded
inside the layout and never seen, and weights that change between runs."""
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

import rlxpy as rx
from rlxpy.cpu_kernels import nchwc, simd
from rlxpy.testing import _axes, cases
from rlxpy.thunks.layout import PLAIN, blocked, lanes_of, stored_bytes, stored_shape

from helpers import REFERENCE, assert_close, main_thunk, rand, run_case

TOL = 1e-4       # float32 FMAs in another order than the float64 reference (test_fast_parity's table)
WIDTHS = [16, 8, 1]
pytestmark = pytest.mark.usefixtures("every_width")   # conftest: 16 and 8 lanes on any host

CONV_CASES = [c for c in cases("fast") if c.op in ("conv", "conv3d")]     # 1-, 2- and 3-D


def _why_not_blocked(case, width):
    """Why nchwc_direct can't run a case, restated from its fields (None: it can)."""
    (_, x), (_, w) = case.inputs[0], case.params[0]
    groups = case.kw["groups"]
    if groups > 1 and ((x[1] // groups) % width or (w[0] // groups) % width):
        return "not whole blocks"
    return None


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_nchwc_direct_matches_reference_at_every_width(case, width):
    ref, _, _, _ = run_case(case, REFERENCE, seed=40)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_direct", simd_width=width), seed=40)
    th = main_thunk(exe)
    why = _why_not_blocked(case, width)
    if why is None:
        assert (th.algo, th.tiling.lanes) == ("nchwc_direct", width), exe.explain()
        assert th.layouts == (("x", blocked(width)),)      # y is the graph output: written plain
        assert [t.algo for t in exe.thunks] == ["nchwc_direct"]   # x is copied in blocked: no reorder thunk
        assert exe.plan().input_layouts == {"x": blocked(width)}
    else:
        assert th.algo != "nchwc_direct" and "RLX_CONV_ALGO=nchwc_direct not eligible" in th.why
        assert why.split()[0] in th.why
    assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("order", ["pixels", "pairs", "pairs-images"])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_nchwc_direct_every_item_order(case, order, width, monkeypatch):
    """Chunks of pixels outer (the weights under the budget), pairs of output blocks outer
    per image (over it), or pairs outer of a batch's images (pair_major, forced here for any
    batch of 2 or more): the same sums, whatever the cut, against the reference kernels."""
    from rlxpy.cpu_kernels import nchwc
    if _why_not_blocked(case, width):
        pytest.skip("not a blocked case")
    monkeypatch.setattr(nchwc, "PIXEL_MAJOR_WEIGHT_BYTES", 1 << 40 if order == "pixels" else 0)
    monkeypatch.setattr(nchwc, "STRIDED_PIXEL_MAJOR_L2_SHARE", 0.0)
    monkeypatch.setattr(nchwc, "PAIR_MAJOR_RATIO", 0.0 if order == "pairs-images" else float("inf"))
    ref, _, _, _ = run_case(case, REFERENCE, seed=41)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_direct", simd_width=width), seed=41)
    th = main_thunk(exe)
    (_, x), (_, w), groups = case.inputs[0], case.params[0], case.kw["groups"]
    blocks = -(-(w[0] // groups) // width)                  # a group's output blocks
    per_tile = 4 if width == 16 and blocks % 4 == 0 else 2  # quads at 16 lanes where they fit
    pairs = -(-blocks // per_tile)
    images = order == "pairs-images" and x[0] > 1
    expect = pairs if order == "pixels" else 0 if images else 1
    assert th.algo == "nchwc_direct" and th.tiling.k_blocks == expect, exe.explain()
    assert ("pixels split" if order == "pixels" else "output blocks split") in th.why
    assert ("through the batch's images" in th.why) == images, th.why
    assert_close(out, ref, TOL, f"nchwc_direct order {order} {width} {case.id}")


def test_l2_bytes_reads_the_level_2_cache_of_sysfs(tmp_path):
    """host.l2_bytes: sysfs's level-2 data or unified cache (not L1's, not the L3), its size
    in K or M, past entries that are not caches or can't be read; where the host does not
    say, L2_FALLBACK_BYTES."""
    from rlxpy.cpu_kernels import host
    for index, (level, kind, size) in enumerate((("1", "Data", "48K"), ("1", "Instruction", "32K"),
                                                 ("2", "Unified", "2048K"), ("3", "Unified", "96M"))):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "level").write_text(level + "\n")
        (d / "type").write_text(kind + "\n")
        (d / "size").write_text(size + "\n")
    (tmp_path / "uevent").write_text("")                    # sysfs's other entries are passed over
    (tmp_path / "index1" / "level").unlink()                 # as is an index that can't be read
    assert host.l2_bytes.__wrapped__(str(tmp_path)) == 2 << 20
    (tmp_path / "index2" / "size").write_text("1M\n")
    assert host.l2_bytes.__wrapped__(str(tmp_path)) == 1 << 20
    assert host.l2_bytes.__wrapped__(str(tmp_path / "absent")) == host.L2_FALLBACK_BYTES


@pytest.mark.parametrize("l2, stride, split", [
    (2 << 20, 2, "pixels"),            # 295 KB of weights within half a 2 MiB L2: strided, so pixels outer
    (2 << 20, 1, "output blocks"),     # the same weights at stride 1: past PIXEL_MAJOR_WEIGHT_BYTES
    (512 << 10, 2, "output blocks"),   # half a 512 KiB L2 (Zen 2, Zen 3): past it
])
def test_a_strided_conv_splits_pixels_while_its_weights_fit_half_the_l2(l2, stride, split, monkeypatch):
    """nchwc.pixel_major: a stride-2 conv 64 -> 128 (3x3, 16 lanes: 294,912 bytes of packed
    weights, over the 256 KiB of PIXEL_MAJOR_WEIGHT_BYTES) takes pixels outer on a host whose
    L2 holds them twice, output blocks outer otherwise; the same sums either way."""
    from rlxpy.cpu_kernels import nchwc
    monkeypatch.setattr(nchwc, "l2_bytes", lambda: l2)
    rng = np.random.default_rng(5)
    g = rx.Graph()
    x = g.input("x", (1, 64, 13, 13))
    g.output("y", g.conv(x, g.param("w", rand(rng, 128, 64, 3, 3)), stride=stride, padding=1, name="c"))
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_direct", simd_width=16))
    th = main_thunk(exe)
    assert nchwc.packed_floats(th.record.geometry, 16) * 4 > nchwc.PIXEL_MAJOR_WEIGHT_BYTES
    assert th.algo == "nchwc_direct" and f"{split} split over the threads" in th.why, exe.explain()
    assert "6 pixels x 4 blocks" in th.why                               # 8 blocks of 16: quads
    assert th.tiling.k_blocks == (2 if split == "pixels" else 1)        # both quads a chunk, or 1
    feeds = {"x": rand(rng, 1, 64, 13, 13)}
    assert_close(exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"], TOL, f"{l2} {stride}")


SLIVER_CASES = [   # (x shape, w shape, conv kwargs): a plane whose last tile holds 1 or 2 pixels
    ((2, 16, 7, 7), (24, 16, 3, 3), dict(padding=1)),                        # 49 = 8 x 6 + 1, an odd block
    ((1, 17, 9, 9), (16, 17, 3, 3), dict(stride=2, padding=1)),              # 5x5 = 25 = 4 x 6 + 1
    ((1, 8, 6, 8), (32, 8, 3, 3), dict(padding=(2, 1), dilation=2)),         # 4x8 = 32 = 5 x 6 + 2
    ((1, 8, 4, 2), (16, 8, 3, 3), dict(padding=1)),                          # 8 = 6 + 2: one at the left border
    ((2, 32, 7, 7), (32, 16, 3, 3), dict(padding=1, groups=2)),              # per group
    ((1, 8, 3, 7, 7), (16, 8, 3, 3, 3), dict(padding=1)),                    # 3-D: each output plane's
]


def _conv_add_relu(xs, ws, kw, rng):
    """A graph y = relu(conv(x) + bias + r), the conv named "c" (3-D for a rank-5 x), and
    the conv's value."""
    g = rx.Graph()
    x = g.input("x", xs)
    conv = g.conv3d if len(xs) == 5 else g.conv
    c = conv(x, g.param("w", rand(rng, *ws)), bias=g.param("b", rand(rng, ws[0])), name="c", **kw)
    r = g.input("r", tuple(c.shape))
    g.output("y", g.relu(g.add(c, r)))
    return g, c


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("shapes", SLIVER_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_nchwc_direct_last_tile_of_one_or_two_pixels(shapes, width):
    """A plane's last tile of 1-2 pixels runs a pixel at a time (the rest in tiles of 6),
    border taps skipped, with the bias and a fused residual add + relu in its store: against
    the reference kernels at every width."""
    (xs, ws, kw), rng = shapes, np.random.default_rng(77)
    g, c = _conv_add_relu(xs, ws, kw, rng)
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_direct", simd_width=width))
    th = main_thunk(exe)
    assert th.algo == "nchwc_direct" and "residual add + relu" in th.why, exe.explain()
    feeds = {"x": rand(rng, *xs), "r": rand(rng, *c.shape)}
    assert_close(exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"], TOL, f"sliver {xs} {width}")


# 6 pixels x 4 blocks at 16 lanes (a group's output blocks a multiple of 4): inside and border
# tiles, a plane's last 1-2 pixels, groups, dilation, asymmetric padding, input channels not
# a multiple of the width, 1-D and 3-D, several quads, a residual add + relu in the store.
QUAD_CASES = [
    ((1, 64, 13, 13), (64, 64, 3, 3), dict(padding=1)),                       # one quad, inside + border
    ((2, 20, 11, 9), (128, 20, 3, 3), dict(stride=2, padding=((1, 0), (2, 1)))),  # two quads, C_in padded
    ((1, 128, 7, 7), (128, 64, 3, 3), dict(padding=2, dilation=2, groups=2)),  # a quad per group; 49 = 8 x 6 + 1
    ((1, 32, 7, 7), (64, 32, 3, 3), dict(padding=1)),                          # every tile a border tile + sliver
    ((2, 16, 3, 7, 7), (64, 16, 3, 3, 3), dict(padding=1)),                    # 3-D: planes of padding skipped
    ((2, 24, 20), (64, 24, 5), dict(padding=4, dilation=2)),                   # 1-D
    ((1, 16, 6, 20), (80, 16, 3, 3), dict(padding=1)),                         # 5 blocks: pairs and a lone block
]


@pytest.mark.parametrize("width", [16, 8])
@pytest.mark.parametrize("order", ["pixels", "pairs", "pairs-images"])
@pytest.mark.parametrize("shapes", QUAD_CASES, ids=lambda c: "x".join(map(str, c[0])) + "-k" + str(c[1][0]))
def test_nchwc_direct_quad_tiles_at_16_lanes(shapes, order, width, monkeypatch):
    """At 16 lanes a group whose output blocks come in fours runs 6 pixels x 4 blocks tiles
    (the explain line says so), in every item order; at 8 lanes, or with 5 blocks, pairs.
    Against the reference kernels, with the bias and a fused residual add + relu."""
    from rlxpy.cpu_kernels import nchwc
    monkeypatch.setattr(nchwc, "PIXEL_MAJOR_WEIGHT_BYTES", 1 << 40 if order == "pixels" else 0)
    monkeypatch.setattr(nchwc, "STRIDED_PIXEL_MAJOR_L2_SHARE", 0.0)
    monkeypatch.setattr(nchwc, "PAIR_MAJOR_RATIO", 0.0 if order == "pairs-images" else float("inf"))
    (xs, ws, kw), rng = shapes, np.random.default_rng(78)
    g, c = _conv_add_relu(xs, ws, kw, rng)
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_direct", simd_width=width))
    th = main_thunk(exe)
    blocks = -(-(ws[0] // kw.get("groups", 1)) // width)
    quads = width == 16 and blocks % 4 == 0
    assert th.algo == "nchwc_direct" and "residual add + relu" in th.why, exe.explain()
    assert f"6 pixels x {4 if quads else 2} blocks of {width} channels" in th.why, th.why
    units = -(-blocks // (4 if quads else 2))
    images = order == "pairs-images" and xs[0] > 1
    assert th.tiling.k_blocks == (units if order == "pixels" else 0 if images else 1), th.why
    feeds = {"x": rand(rng, *xs), "r": rand(rng, *c.shape)}
    assert_close(exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"], TOL, f"quad {xs} {width} {order}")


@pytest.mark.parametrize("width", [16])           # the parameter puts it in the 16-lane xdist group
@pytest.mark.parametrize("stride, algo", [(1, "nchwc_direct"), (2, "nchwc_subpixel")])
def test_transposed_convs_to_64_channels_run_quads_at_16_lanes(stride, algo, width):
    """A transposed conv runs as forward convs of nchwc.conv (stride 1 whole, stride 2 per
    subpixel phase): to 64 channels at 16 lanes those take 6 x 4 tiles too. Against the
    reference kernels, with a bias and an odd plane."""
    from rlxpy.cpu_kernels import nchwc
    rng = np.random.default_rng(79)
    g = rx.Graph()
    x = g.input("x", (2, 32, 7, 9))
    y = g.conv_transpose2d(x, g.param("w", rand(rng, 32, 64, 3, 3)), bias=g.param("b", rand(rng, 64)),
                           stride=stride, padding=1, name="t")
    g.output("y", y)
    exe = rx.compile(g, rx.Config(simd_width=width, conv_algo=algo))
    th = main_thunk(exe)
    assert th.algo == algo, exe.explain()
    fwd = nchwc.as_forward(th.record)[0] if stride == 1 else None
    if fwd is not None:
        assert nchwc.tile_blocks(fwd, width) == 4 and "6 pixels x 4 blocks" in th.why, th.why
    feeds = {"x": rand(rng, 2, 32, 7, 9)}
    assert_close(exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"], TOL, f"transposed s{stride}")


def _why_not_1x1(case):
    """Why nchwc_1x1 can't run a case, restated from its fields (None: it can)."""
    (_, x), (_, w) = case.inputs[0], case.params[0]
    if any(k != 1 for k in w[2:]):
        return "not 1x1"
    if np.any(case.kw["padding"]):
        return "padded"
    if case.kw["groups"] != 1:
        return "groups"
    if len(x) == 5:
        return "3-D"
    return None


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_nchwc_1x1_matches_reference_at_every_width(case, width):
    ref, _, _, _ = run_case(case, REFERENCE, seed=42)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_1x1", simd_width=width), seed=42)
    th = main_thunk(exe)
    why = _why_not_1x1(case)
    if why is None:
        assert (th.algo, th.tiling.lanes) == ("nchwc_1x1", width), exe.explain()
        assert [t.algo for t in exe.thunks] == ["nchwc_1x1"]      # x copied in blocked, y written plain
    else:
        assert th.algo != "nchwc_1x1" and "RLX_CONV_ALGO=nchwc_1x1 not eligible" in th.why
        assert why.split()[0] in th.why
    assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


@pytest.mark.parametrize("width", [8, 16])
def test_nchwc_1x1_pair_groups_lone_block_and_epilogue(monkeypatch, width):
    """Output pairs split over work items (a weight budget of one pair), a lone last block
    (5 blocks), a strided 1x1 between blocked neighbours with relu and a residual add fused
    into its store: against the reference kernels."""
    from rlxpy.cpu_kernels import nchwc_1x1
    monkeypatch.setattr(nchwc_1x1, "WEIGHT_BYTES", 1)
    rng = np.random.default_rng(47)
    k = 5 * width - 3
    g = rx.Graph()
    x = g.input("x", (2, 13, 11, 9))
    a = g.conv(x, g.param("wa", rand(rng, k, 13, 3, 3)), padding=1, name="a")
    b = g.conv(a, g.param("wb", rand(rng, k, k, 1, 1)), bias=g.param("bb", rand(rng, k)), stride=2, name="b")
    r = g.conv(a, g.param("wr", rand(rng, k, k, 3, 3)), stride=2, padding=1, name="r")
    g.output("y", g.conv(g.relu(g.add(b, r)), g.param("wc", rand(rng, 6, k, 3, 3)), padding=1, name="c"))
    exe = rx.compile(g, rx.Config(simd_width=width))
    th = {t.node.split("+")[0]: t for t in exe.thunks if t.algo != "reorder"}
    assert th["b"].algo == "nchwc_1x1" and th["b"].tiling.k_blocks == 1, exe.explain()
    assert dict(th["b"].layouts)["y"] == blocked(width) and "residual add + relu" in th["b"].why, exe.explain()
    xv = rand(rng, 2, 13, 11, 9)
    assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], TOL, "nchwc_1x1 pair groups")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_nchwc_plain_in_matches_reference_at_every_width(case, width):
    ref, _, _, _ = run_case(case, REFERENCE, seed=41)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_plain_in", simd_width=width), seed=41)
    th = main_thunk(exe)
    (_, x) = case.inputs[0]
    if case.kw["groups"] == 1:
        assert (th.algo, th.tiling.lanes, th.layouts) == ("nchwc_plain_in", width, ()), exe.explain()
        assert len(exe.thunks) == 1                        # x read in place, y written plain: no reorder
    else:
        assert th.algo != "nchwc_plain_in" and "nchwc_plain_in not eligible" in th.why
    assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


@pytest.mark.parametrize("width", [8, 16])
def test_nchwc_plain_in_rows_whose_every_tap_is_padding_and_border_columns(width):
    """A padding wider than the dilated kernel: whole output rows and columns see only
    padding (the kernel rows inside x are empty ranges, the columns read the slab's zeros:
    bias, then relu), and a row splits into tiles of 6 and a partial one; against the
    reference kernels, with relu fused into the store of blocked y."""
    rng = np.random.default_rng(48)
    g = rx.Graph()
    x = g.input("x", (2, 3, 7, 20))
    c = g.conv(x, g.param("w", rand(rng, 11, 3, 2, 3)), bias=g.param("b", rand(rng, 11)), stride=(1, 2),
               padding=((4, 3), (5, 4)), dilation=(2, 1), name="c")
    g.output("y", g.conv(g.relu(c), g.param("w2", rand(rng, 4, 11, 1, 1)), name="d"))
    exe = rx.compile(g, rx.Config(simd_width=width))
    th = {t.node.split("+")[0]: t for t in exe.thunks if t.algo != "reorder"}
    assert th["c"].algo == "nchwc_plain_in" and "relu" in th["c"].why, exe.explain()
    xv = rand(rng, 2, 3, 7, 20)
    ref = rx.compile(g, REFERENCE)
    assert_close(exe.run({"x": xv})["y"], ref.run({"x": xv})["y"], TOL, "plain_in all-padding rows")


@pytest.mark.parametrize("width", [8, 1])
@pytest.mark.parametrize("cols", range(8, 14))
def test_nchwc_plain_in_every_tail_of_a_rows_interior(width, cols):
    """A row of cols pixels: whole tiles of 6 (12 for a lone output block), then a partial
    tile whose pixels past the row read the slab's zeros and are not stored. Every tail
    length, at stride 1 and (with a 5x5 kernel) stride 2, against the reference kernels."""
    rng = np.random.default_rng(cols)
    for k, stride in ((3, 1), (5, 2)):
        g = rx.Graph()
        x = g.input("x", (1, 3, 5, cols * stride))
        g.output("y", g.conv(x, g.param("w", rand(rng, 19, 3, k, k)), bias=g.param("b", rand(rng, 19)),
                             stride=stride, padding=k // 2, name="c"))
        exe = rx.compile(g, rx.Config(conv_algo="nchwc_plain_in", simd_width=width))
        assert main_thunk(exe).algo == "nchwc_plain_in", exe.explain()
        xv = rand(rng, 1, 3, 5, cols * stride)
        assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], TOL,
                     f"plain_in {cols} columns, {k}x{k} stride {stride}")


@pytest.mark.parametrize("width", [16, 8])
@pytest.mark.parametrize("rows", [1, 2, 3, 5])
def test_nchwc_plain_in_slabs_of_every_run_of_rows(width, rows, monkeypatch):
    """Each work item copies the input rows its run of output rows reads (stride, dilation,
    padding rows above and below x, a last run shorter than the others) into one padded
    slab: every run length, 2-D and 3-D, a lone output block and several, against the
    reference kernels."""
    from rlxpy.cpu_kernels import nchwc
    monkeypatch.setattr(nchwc, "plain_in_rows", lambda g, threads: rows)
    rng = np.random.default_rng(90 + rows)
    for shape, k, kernel, stride, padding, dilation in [
            ((2, 3, 11, 9), width, (3, 3), (2, 1), ((3, 1), (1, 2)), (2, 1)),
            ((1, 2, 13, 17), width + 3, (5, 3), 1, 2, (1, 2)),
            ((1, 1, 5, 6, 7), 5, (3, 2, 3), (1, 2, 1), 1, 1)]:
        g = rx.Graph()
        x = g.input("x", shape)
        conv = g.conv3d if len(shape) == 5 else g.conv
        g.output("y", g.relu(conv(x, g.param("w", rand(rng, k, shape[1], *kernel)), bias=g.param("b", rand(rng, k)),
                                  stride=stride, padding=padding, dilation=dilation, name="c")))
        exe = rx.compile(g, rx.Config(conv_algo="nchwc_plain_in", simd_width=width))
        th = main_thunk(exe)
        assert (th.algo, th.tiling.tile) == ("nchwc_plain_in", rows), exe.explain()
        xv = rand(rng, *shape)
        assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], TOL,
                     f"plain_in {rows} rows {shape} {width}")


def _chain(rng, c=5, k=11):
    """conv -> conv -> (pool, output) and conv -> output: channels not a multiple of any width."""
    g = rx.Graph()
    x = g.input("x", (None, c, 13, 10))
    a = g.conv(x, g.param("wa", rand(rng, k, c, 3, 3)), bias=g.param("ba", rand(rng, k)), padding=1, name="a")
    b = g.conv(a, g.param("wb", rand(rng, 9, k, 3, 2)), stride=(2, 1), padding=((1, 0), (0, 1)), name="b")
    p = g.pool(b, "max", 2, name="p")
    d = g.conv(b, g.param("wd", rand(rng, 3, 9, 1, 1)), name="d")
    g.output("p", p)
    g.output("d", d)
    g.output("b", b)
    return g


@pytest.mark.parametrize("width", WIDTHS)
def test_a_chain_stays_blocked_between_vector_convs_and_reorders_only_at_its_edges(width):
    rng = np.random.default_rng(42)
    g = _chain(rng)
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_direct", simd_width=width), algos={"p": "nchwc_pool"})
    xv = rand(rng, 2, 5, 13, 10)
    out, ref = exe.run({"x": xv}), rx.compile(g, REFERENCE).run({"x": xv})
    for name in ref:
        assert_close(out[name], ref[name], TOL, name)
    steps = [(t.node, t.algo, dict(t.layouts)) for t in exe.thunks]
    bl = blocked(width)
    # x copied in blocked; a writes blocked for b; b is read blocked by the pool and d, and
    # reordered for the graph output; the pool and d write their outputs plain
    assert exe.plan().input_layouts == {"x": bl}
    assert steps == [("a", "nchwc_direct", {"x": bl, "y": bl}),
                     ("b", "nchwc_direct", {"x": bl, "y": bl}),
                     ("p", "nchwc_pool", {"x": bl}),
                     ("d", "nchwc_direct", {"x": bl}),
                     ("b:nchw", "reorder", {"x": bl})]
    text = exe.explain()
    assert f"[{bl}]" in text and bl + " -> nchw" in text


def test_padded_channels_are_written_by_every_kernel_not_left_from_a_zeroed_arena():
    """Poison every value and scratch a thunk writes with NaN before a run: a kernel that
    relied on the arena's first zeros for the channels past C (the padding of the last
    block), which a consumer reads as whole vectors, would turn the output NaN."""
    rng = np.random.default_rng(43)
    g = _chain(rng)
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_direct"))
    xv = rand(rng, 2, 5, 13, 10)
    first = exe.run({"x": xv})
    plan = exe.plan()
    (bound,) = exe._compile_for({"x": xv.shape}).pool.idle()
    poisoned = 0
    for th in plan.thunks:
        roles, vids = th.record.roles(), th.record.value_ids()
        for role in th.record.OUTPUTS:
            vid = vids[roles.index(role)]
            n = stored_bytes(plan.shapes[vid], plan.layouts.get(vid, PLAIN)) // 4
            bound.arena[th.off(role) // 4: th.off(role) // 4 + n] = np.nan
            poisoned += n
        if th.scratch_bytes:
            bound.arena[th.scratch_off // 4: (th.scratch_off + th.scratch_bytes) // 4] = np.nan
    assert poisoned > 0
    again = exe.run({"x": xv})
    for name in first:
        assert np.array_equal(again[name], first[name]), name


WEIGHT_INPUT_CASES = {   # op -> (builder, x shape, w shape): weights a graph input
    "conv": (lambda g, x, w, b: g.conv(x, w, bias=b, padding=1), (2, 3, 9, 10), (17, 3, 3, 3)),
    "conv3d": (lambda g, x, w, b: g.conv3d(x, w, bias=b, padding=1), (2, 3, 5, 6, 4), (17, 3, 3, 2, 3)),
    "conv_transpose3d": (lambda g, x, w, b: g.conv_transpose3d(x, w, bias=b, padding=1), (2, 3, 5, 6, 4),
                         (3, 17, 3, 2, 3)),
}


@pytest.mark.parametrize("op, algo", [("conv", "nchwc_direct"), ("conv", "nchwc_plain_in"),
                                      ("conv3d", "nchwc_direct"), ("conv3d", "nchwc_plain_in"),
                                      ("conv_transpose3d", "nchwc_direct")])
def test_a_weight_that_is_a_graph_input_is_packed_every_run(op, algo):
    build, xs, ws = WEIGHT_INPUT_CASES[op]
    g = rx.Graph()
    x, w, b = g.input("x", xs), g.input("w", ws), g.input("b", (17,))
    g.output("y", build(g, x, w, b))
    fast, ref = rx.compile(g, rx.Config(conv_algo=algo)), rx.compile(g, REFERENCE)
    assert main_thunk(fast).algo == algo and not main_thunk(fast).record.weight_const
    rng = np.random.default_rng(44)
    xv = rand(rng, *xs)
    for _ in range(2):
        feed = {"x": xv, "w": rand(rng, *ws), "b": rand(rng, 17)}
        assert_close(fast.run(feed)["y"], ref.run(feed)["y"], TOL)


@pytest.mark.parametrize("op", ["conv3d", "conv_transpose3d"])
def test_param_weights_of_every_conv_record_are_packed_once_per_arena(op, monkeypatch):
    """Conv3d and transposed convs have prepare steps too: a param is packed when the arena
    is bound, not on every run (the pack is counted)."""
    from rlxpy.cpu_kernels import dispatch, nchwc
    build, xs, ws = WEIGHT_INPUT_CASES[op]
    rng = np.random.default_rng(46)
    g = rx.Graph()
    x = g.input("x", xs)
    g.output("y", build(g, x, g.param("w", rand(rng, *ws)), g.param("b", rand(rng, 17))))
    packs = []
    real = nchwc.pack
    monkeypatch.setattr(nchwc, "pack", lambda *a: (packs.append(1), real(*a))[1])
    fast = rx.compile(g, rx.Config(conv_algo="nchwc_direct"))
    th = main_thunk(fast)
    assert th.record.weight_const and not dispatch.packs_every_run(th)
    xv = rand(rng, *xs)
    outs = [fast.run({"x": xv})["y"] for _ in range(3)]
    assert len(packs) == 1
    ref = rx.compile(g, REFERENCE).run({"x": xv})["y"]
    for out in outs:
        assert_close(out, ref, TOL)


def test_a_dynamic_batch_gets_a_plan_per_size():
    rng = np.random.default_rng(45)
    g = _chain(rng)
    exe, ref = rx.compile(g, rx.Config(conv_algo="nchwc_direct")), rx.compile(g, REFERENCE)
    for n in (1, 3, 2):
        xv = rand(rng, n, 5, 13, 10)
        out, want = exe.run({"x": xv}), ref.run({"x": xv})
        assert_close(out["d"], want["d"], TOL, f"batch {n}")


def test_the_default_rule_takes_the_vector_kernels_where_they_pay():
    rng = np.random.default_rng(46)
    lanes = simd.resolve_width(None)
    g = rx.Graph()
    x = g.input("x", (1, 3, 16, 16))
    a = g.conv(x, g.param("w1", rand(rng, 4 * lanes, 3, 3, 3)), padding=1, name="stem")
    b = g.conv(a, g.param("w2", rand(rng, 4 * lanes, 4 * lanes, 3, 3)), padding=1, name="body")
    g.output("y", b)
    th = {t.node: t for t in rx.compile(g).thunks}
    if lanes > 3:
        assert th["stem"].algo == "nchwc_plain_in" and "3 input channels" in th["stem"].why
    assert th["body"].algo == "nchwc_direct"
    assert "stem:" + blocked(lanes) not in th      # the stem writes the blocked layout itself


@pytest.mark.parametrize("width", [16, 8])
def test_padded_channels_keep_a_vector_kernel_never_im2col(width):
    """Channels far from whole blocks (width + width/4 -> the same, 1.6 x 1.6 padded; 3 width
    - 2 -> 1, 16x / 8x padded outputs) keep the blocked conv, a 1x1 from a whole block of
    inputs the blocked GEMM; each says what the padding rule would have said and matches
    the reference."""
    rng = np.random.default_rng(48)
    g = rx.Graph()
    c1, c2 = width + width // 4, 3 * width - 2
    x1, x2, x3 = g.input("x1", (2, c1, 11, 13)), g.input("x2", (1, c2, 9, 9)), g.input("x3", (2, width + 2, 6, 7))
    g.output("a", g.conv(x1, g.param("wa", rand(rng, c1, c1, 3, 3)), padding=1, name="a"))
    g.output("b", g.conv(x2, g.param("wb", rand(rng, 1, c2, 3, 3)), stride=2, name="b"))
    g.output("p", g.conv(x3, g.param("wp", rand(rng, 2, width + 2, 1, 1)), name="p"))
    exe = rx.compile(g, rx.Config(simd_width=width))
    th = {t.node: t for t in exe.thunks}
    assert th["a"].algo == "nchwc_direct" and "2.6x padded in blocks" in th["a"].why, th["a"].why
    assert "still faster than im2col" in th["a"].why
    assert th["b"].algo == "nchwc_direct" and "still faster than im2col" in th["b"].why, th["b"].why
    assert th["p"].algo == "nchwc_1x1" and "still faster than gemm1x1" in th["p"].why, th["p"].why
    feeds = {"x1": rand(rng, 2, c1, 11, 13), "x2": rand(rng, 1, c2, 9, 9), "x3": rand(rng, 2, width + 2, 6, 7)}
    got, want = exe.run(feeds), rx.compile(g, REFERENCE).run(feeds)
    for name in want:
        assert_close(got[name], want[name], TOL, f"{name} {width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_a_large_input_is_reordered_in_spans_of_pixels_to_the_same_blocked_values(width):
    """to_blocked cuts a plane of 37 x 41 = 1517 pixels into spans (5 at 16 lanes, 8 at 8 and
    1), the last ending in pixels past whole vectors, and 20 channels into a padded block:
    a max pool (exact) over the reordered input equals the reference pool, at every width."""
    from rlxpy.cpu_kernels import nchwc
    rng = np.random.default_rng(48)
    g = rx.Graph()
    x = g.input("x", (2, 20, 37, 41))
    g.output("y", g.pool(x, "max", 3, stride=1, padding=1, name="p"))
    exe = rx.compile(g, rx.Config(simd_width=width, conv_algo="nchwc_pool"))
    assert [t.algo for t in exe.thunks] == ["nchwc_pool"] and exe.plan().input_layouts["x"] == blocked(width), \
        exe.explain()
    assert 37 * 41 // (nchwc.REORDER_SPAN_VECTORS * width) > 1         # more than one span
    feeds = {"x": rand(rng, 2, 20, 37, 41)}
    np.testing.assert_array_equal(exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"])


def test_runs_of_rows_are_evened_out():
    """nchwc._rows_for: about 512 pixels a run, at least 4 items a thread where the plane
    allows, then the same count of runs made as even as whole rows allow (28 rows in 2 runs:
    14 + 14, not 18 + 10), so threads splitting a plane by rows get equal shares."""
    from math import ceil
    from rlxpy.cpu_kernels import nchwc
    assert nchwc._rows_for(12, 28, 28, 2) == 14
    for outer in (1, 4, 12, 36):
        for ow in (7, 14, 28, 56, 112):
            for oh in range(1, 120):
                rows = nchwc._rows_for(outer, oh, ow, 2)
                first = max(1, min(oh, 512 // ow))          # before evening out
                while first > 1 and outer * ceil(oh / first) < 8:
                    first = ceil(first / 2)
                assert 1 <= rows <= first and ceil(oh / rows) == ceil(oh / first)
                assert rows == 1 or ceil(oh / (rows - 1)) > ceil(oh / rows)      # the smallest such rows


def test_layout_names_and_shapes():
    assert lanes_of(PLAIN) == 0 and lanes_of(blocked(16)) == 16 and blocked(8) == "nchw8c"
    assert stored_shape((2, 5, 3, 4), PLAIN) == (2, 5, 3, 4)
    assert stored_shape((2, 5, 3, 4), blocked(8)) == (2, 1, 12, 8)
    assert stored_shape((2, 17, 7), blocked(8)) == (2, 3, 7, 8)
    assert stored_bytes((1, 16, 2, 2), blocked(16)) == 4 * 16 * 4
    with pytest.raises(ValueError, match="unknown layout 'nhwc'"):
        lanes_of("nhwc")


def test_an_input_that_a_plain_consumer_also_reads_stays_plain_and_is_reordered_once():
    rng = np.random.default_rng(47)
    g = rx.Graph()
    x = g.input("x", (2, 9, 6, 7))
    a = g.conv(x, g.param("wa", rand(rng, 10, 9, 3, 3)), padding=1, name="a")
    b = g.conv(x, g.param("wb", rand(rng, 10, 9, 1, 3)), name="b")
    r = g.im2col(x, 3, padding=1, name="r")          # a kernel with no blocked form
    for name, v in (("a", a), ("b", b), ("r", r)):
        g.output(name, v)
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_direct"))
    lanes = simd.resolve_width(None)
    assert exe.plan().input_layouts == {"x": PLAIN}
    assert [(t.node, t.algo) for t in exe.thunks] == [("x:" + blocked(lanes), "reorder"), ("a", "nchwc_direct"),
                                                      ("b", "nchwc_direct"), ("r", "parallel")]
    xv = rand(rng, 2, 9, 6, 7)
    out, ref = exe.run({"x": xv}), rx.compile(g, REFERENCE).run({"x": xv})
    for name in ref:
        assert_close(out[name], ref[name], TOL, name)


def test_an_input_copied_in_blocked_may_have_any_strides():
    rng = np.random.default_rng(48)
    g = rx.Graph()
    x = g.input("x", (2, 9, 6, 7))
    g.output("y", g.conv(x, g.param("w", rand(rng, 10, 9, 3, 3)), padding=1))
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_direct"))
    base = rand(rng, 7, 6, 9, 2)
    xv = base.transpose(3, 2, 1, 0)                   # not C-contiguous
    assert exe.plan().input_layouts["x"] != PLAIN and not xv.flags.c_contiguous
    assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": np.ascontiguousarray(xv)})["y"], TOL)


POOL_CASES = [c for c in cases("fast") + cases("reference") if c.op == "pool"]     # 1-, 2- and 3-D



def _onnx_average_pool(x, kernel, pads, dilations, count_include_pad):
    """onnxruntime's AveragePool (opset 19, which takes dilations) on x."""
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=list(kernel), pads=list(pads),
                            dilations=list(dilations), count_include_pad=int(count_include_pad))
    graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _mean_inside(x, kernel, padding, dilation):
    """The mean of each window's taps inside x (count_include_pad off; stride 1), 0 for a
    window with none: numpy loops, the rule written out."""
    (kh, kw), (ph, pw), (dh, dw) = kernel, padding, dilation
    n, c, h, w = x.shape
    oh, ow = h + 2 * ph - dh * (kh - 1), w + 2 * pw - dw * (kw - 1)
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            taps = [(i - ph + a * dh, j - pw + b * dw) for a in range(kh) for b in range(kw)]
            taps = [(r, q) for r, q in taps if 0 <= r < h and 0 <= q < w]
            if taps:
                y[:, :, i, j] = np.mean([x[:, :, r, q] for r, q in taps], axis=0, dtype=np.float64)
    return y


# (x shape, kernel, padding, dilation): windows whose taps skip over x into the padding
# (ONNX allows it; onnxruntime when the padding is under the kernel, so every output row of
# those is empty); a 20-channel x pads its last block
EMPTY_WINDOW_POOLS = [
    ((1, 20, 2, 9), (2, 2), (1, 1), (3, 3)),           # rows -1 and 2 of 2
    ((2, 3, 3, 13), (2, 3), (1, 0), (4, 1)),           # rows -1 and 3 of 3
    ((1, 20, 2, 3, 9), (2, 1, 2), (1, 0, 1), (3, 1, 3)),   # 3-D: planes -1 and 2 of 2
]


def _pool_runs(g, x, want, width, what):
    """The reference, parallel and nchwc_pool kernels all give `want` (the pool named "p")."""
    for config, algo in ((REFERENCE, None), (rx.Config(simd_width=width), "parallel"),
                         (rx.Config(simd_width=width), "nchwc_pool")):
        exe = rx.compile(g, config, algos={"p": algo} if algo else None)
        assert algo is None or main_thunk(exe).algo == algo, exe.explain()
        assert_close(exe.run({"x": x})["y"], want, 1e-5, f"{what} {algo} {width}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", EMPTY_WINDOW_POOLS, ids=str)
def test_a_window_with_no_tap_inside_x_pools_to_zero_or_minus_inf(case, width):
    """A window whose every tap lies in the padding: its average is 0, as onnxruntime
    returns (with or without count_include_pad; the reference kernel divided by zero and
    failed the run), its max -inf, as PyTorch's max_pool2d returns; on every kernel and
    width. (Found by the fuzzer with RLX_FUZZ_EXAMPLES=30000.)"""
    shape, kernel, padding, dilation = case
    x = rand(np.random.default_rng(61), *shape)
    for cip in (False, True):
        want = _onnx_average_pool(x, kernel, list(padding) * 2, dilation, cip)
        assert want.size and not want.any()
        g = rx.Graph()
        g.output("y", g.pool(g.input("x", shape), "avg", kernel, stride=1, padding=padding, dilation=dilation,
                             count_include_pad=cip, name="p"))
        _pool_runs(g, x, want, width, f"avg cip={cip}")
    if len(kernel) == 2:
        torch = pytest.importorskip("torch")
        g = rx.Graph()
        g.output("y", g.pool(g.input("x", shape), "max", kernel, stride=1, padding=padding, dilation=dilation,
                             name="p"))
        want = torch.nn.functional.max_pool2d(torch.from_numpy(x), kernel, 1, padding, dilation).numpy()
        assert want.size and np.isneginf(want).all()
        for config, algo in ((REFERENCE, None), (rx.Config(simd_width=width), "parallel"),
                             (rx.Config(simd_width=width), "nchwc_pool")):
            got = rx.compile(g, config, algos={"p": algo} if algo else None).run({"x": x})["y"]
            assert got.shape == want.shape and np.isneginf(got).all(), f"max {algo} {width}"


# (x shape, kernel, stride, padding): with ceil_mode, windows wider than the padded input
# that start inside it (PyTorch and ONNX give one output; refused as "too wide" before)
CEIL_OVERRUN_POOLS = [((1, 1, 1, 1), (1, 2), (1, 2), (0, 0)), ((2, 3, 1, 3), (2, 3), (2, 2), (0, 1)),
                      ((1, 17, 2, 1), (3, 3), (3, 3), (1, 1)), ((1, 16, 2, 2), (3, 3), (2, 2), (0, 0))]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CEIL_OVERRUN_POOLS, ids=str)
def test_ceil_mode_windows_wider_than_the_padded_input_match_pytorch(case, width):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    shape, kernel, stride, padding = case
    x = rand(np.random.default_rng(62), *shape)
    t = torch.from_numpy(x)
    for kind, cip in (("max", True), ("avg", True), ("avg", False)):
        g = rx.Graph()
        g.output("y", g.pool(g.input("x", shape), kind, kernel, stride=stride, padding=padding, ceil_mode=True,
                             count_include_pad=cip, name="p"))
        want = (F.max_pool2d(t, kernel, stride, padding, ceil_mode=True) if kind == "max" else
                F.avg_pool2d(t, kernel, stride, padding, ceil_mode=True, count_include_pad=cip)).numpy()
        _pool_runs(g, x, want, width, f"{kind} cip={cip}")


@pytest.mark.parametrize("width", WIDTHS)
def test_windows_in_the_padding_beside_full_ones_average_to_zero(width):
    """Padding as large as the window's reach (which onnxruntime refuses and ONNX allows)
    over a one-row x: output row 1's windows (rows -1 and 1) are all padding and average to
    0, rows 0 and 2 hold the mean of their taps inside x, in one output; checked against
    the rule written out in numpy."""
    x = rand(np.random.default_rng(62), 1, 20, 1, 14)
    kernel, padding, dilation = (2, 3), (2, 4), (2, 2)
    want = _mean_inside(x, kernel, padding, dilation)
    assert not want[0, 0].all() and want[0, 0].any()          # both kinds of window
    g = rx.Graph()
    g.output("y", g.pool(g.input("x", x.shape), "avg", kernel, stride=1, padding=padding, dilation=dilation,
                         count_include_pad=False, name="p"))
    _pool_runs(g, x, want, width, "avg beside the padding")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: c.id)
def test_nchwc_pool_matches_reference_with_nans_at_every_width(case, width):
    """Max pools keep PyTorch's rule (a NaN in the window wins); average pools divide as
    PyTorch does (count_include_pad, windows clipped by ceil_mode)."""
    from rlxpy.testing import case_arrays, one_node_graph
    inputs, _ = case_arrays(case, seed=49)
    inputs["x"].reshape(-1)[[0, 7, 30]] = np.nan
    g = one_node_graph(case, inputs)
    exe = rx.compile(g, rx.Config(simd_width=width, conv_algo="nchwc_pool"))
    out, ref = exe.run(inputs)["out"], rx.compile(g, REFERENCE).run(inputs)["out"]
    assert (main_thunk(exe).algo, main_thunk(exe).tiling.lanes) == ("nchwc_pool", width)
    assert np.array_equal(np.isnan(out), np.isnan(ref)) and np.isnan(ref).any()
    finite = ~np.isnan(ref)
    assert_close(out[finite], ref[finite], 1e-5, case.id)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_nchwc_depthwise_matches_reference_at_every_width(case, width):
    ref, _, _, _ = run_case(case, REFERENCE, seed=50)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_depthwise", simd_width=width), seed=50)
    th = main_thunk(exe)
    (_, x), (_, w) = case.inputs[0], case.params[0]
    if case.kw["groups"] == x[1] == w[0]:
        assert (th.algo, th.tiling.lanes) == ("nchwc_depthwise", width), exe.explain()
    else:
        assert th.algo != "nchwc_depthwise" and "nchwc_depthwise not eligible" in th.why
    assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


def test_a_final_vector_kernel_writes_the_returned_array_itself_and_runs_stay_independent():
    """An output no thunk reads is written by its kernel straight into the array the run
    returns (no copy out of the arena); an output another node reads is copied out."""
    rng = np.random.default_rng(51)
    g = _chain(rng)
    exe, ref = rx.compile(g, rx.Config(conv_algo="nchwc_direct")), rx.compile(g, REFERENCE)
    x1, x2 = rand(rng, 2, 5, 13, 10), rand(rng, 2, 5, 13, 10)
    r1 = exe.run({"x": x1})
    plan = exe.plan()
    assert set(plan.sole_outputs) == {"p", "d", "b"}     # b's reorder is its only producer and no thunk reads it
    (bound,) = exe._compile_for({"x": x1.shape}).pool.idle()
    assert {name for name, _, _ in bound.direct} == {"p", "d"}   # vector kernels; b comes out of a reorder
    arena = bound.arena
    for name in ("p", "d"):
        assert not np.shares_memory(r1[name], arena)
    r2 = exe.run({"x": x2})
    want1, want2 = ref.run({"x": x1}), ref.run({"x": x2})
    for name in want1:
        assert_close(r1[name], want1[name], TOL, name)   # the first run's arrays are not the second's
        assert_close(r2[name], want2[name], TOL, name)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_plain_input_kernel_reads_a_graph_input_where_the_caller_holds_it(width):
    """A plain input whose one reader is nchwc_plain_in is read in place: nothing is copied
    into its arena slot (it stays zero) and the output is the reference's. An input read by
    two thunks, or handed over read-only or non-contiguous, or smaller than
    IN_PLACE_MIN_BYTES, is copied in as before; every run stays right, also with both kinds
    of call on one executable."""
    from rlxpy.thunks.executor import IN_PLACE_MIN_BYTES
    rng = np.random.default_rng(53)
    g = rx.Graph()
    x = g.input("x", (None, 3, None, None))
    s = g.input("s", (None, 2, 9, 9))
    y = g.relu(g.conv(x, g.param("w", rand(rng, 24, 3, 3, 3)), g.param("b", rand(rng, 24)), stride=2, padding=1,
                      name="stem"))
    g.output("y", g.pool(y, "max", kernel_size=2, stride=2))
    ws = g.param("ws", rand(rng, 8, 2, 3, 3))
    g.output("s1", g.conv(s, ws, padding=1, name="s1"))           # s has two readers
    g.output("s2", g.conv(s, ws, stride=2, name="s2"))
    algos = {"stem": "nchwc_plain_in", "s1": "nchwc_plain_in", "s2": "nchwc_plain_in"}
    exe, ref = rx.compile(g, rx.Config(simd_width=width), algos=algos), rx.compile(g, REFERENCE)
    xv, sv = rand(rng, 2, 3, 39, 44), rand(rng, 2, 2, 9, 9)
    assert xv.nbytes >= IN_PLACE_MIN_BYTES
    got = exe.run({"x": xv, "s": sv})
    assert {t.algo for t in exe.thunks if t.node in algos} == {"nchwc_plain_in"}, exe.explain()
    compiled = exe._compile_for({"x": xv.shape, "s": sv.shape})
    assert [name for name, _, _ in compiled.pool.input_feeds] == ["x"]
    (bound,) = compiled.pool.idle()
    slot = dict(bound.inputs)
    assert not slot["x"].any()                          # never copied in
    assert_close(slot["s"], sv, 0.0, "s copied in")
    want = ref.run({"x": xv, "s": sv})
    for name in want:
        assert_close(got[name], want[name], TOL, f"{name} {width}")
    ro = xv.copy()
    ro.flags.writeable = False
    for xin in (ro, np.asfortranarray(xv), xv[:, :, :, ::-1].copy()[:, :, :, ::-1], rand(rng, 2, 3, 39, 44)):
        got, want = exe.run({"x": xin, "s": sv}), ref.run({"x": xin, "s": sv})
        for name in want:
            assert_close(got[name], want[name], TOL, f"{name} {width} in place or copied")
    small = rand(rng, 2, 3, 9, 10)                      # under IN_PLACE_MIN_BYTES: copied in
    got, want = exe.run({"x": small, "s": sv}), ref.run({"x": small, "s": sv})
    (bound,) = exe._compile_for({"x": small.shape, "s": sv.shape}).pool.idle()
    assert_close(dict(bound.inputs)["x"], small, 0.0, "small x copied in")
    for name in want:
        assert_close(got[name], want[name], TOL, f"{name} {width} small")


# Winograd F(4x4,3x3): its transforms scale by up to 8 (A), 5 (B) and 1/24 (G), so rounding
# grows with cancellation; 1e-3 of the output scale, as F(2x2,3x3) in test_fast_parity.
F4_TOL = 1e-3


ON_THE_FLY = "filters transformed on the fly"


def square_geometry(n, c, hw):
    """What winograd_f4's sizing rules read of a conv's geometry: n images of c channels,
    hw x hw planes in and out (the 3x3 pad-1 convs they were measured on)."""
    return SimpleNamespace(x_shape=(n, c, hw, hw), y_shape=(n, c, hw, hw))


@pytest.fixture(params=["conv", "conv_fly"])
def f4_kernel(request, monkeypatch):
    """winograd_f4's kernel forced for the test: U packed once (conv) or the raw filters
    transformed in registers each run (conv_fly), whatever its rule would pick."""
    from rlxpy.cpu_kernels import winograd_f4
    monkeypatch.setattr(winograd_f4, "on_the_fly", lambda g, lanes: request.param == "conv_fly")
    return request.param


def assert_f4_kernel(th, kernel, width):
    """The thunk ran winograd_f4 at this width, with this kernel (explain's words and tiling)."""
    from rlxpy.cpu_kernels import winograd_f4
    assert (th.algo, th.tiling.lanes) == ("winograd_f4", width), th.why
    assert (ON_THE_FLY in th.why) == (kernel == "conv_fly"), th.why
    assert (th.tiling.tile == winograd_f4.fly_tiles(width)) == (kernel == "conv_fly"), th.tiling


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c.id)
def test_winograd_f4_matches_reference_at_every_width(case, width, f4_kernel):
    (_, x), (_, w) = case.inputs[0], case.params[0]
    kw = case.kw
    eligible = len(x) == 4 and w[2:] == (3, 3) and kw["stride"] == 1 and kw["dilation"] == 1 and kw["groups"] == 1
    if f4_kernel == "conv_fly" and not eligible:
        pytest.skip("not a 2-D 3x3 stride-1 conv: checked once, with the kernel choice untouched")
    ref, _, _, _ = run_case(case, REFERENCE, seed=52)
    out, exe, _, _ = run_case(case, rx.Config(winograd="f4", simd_width=width), seed=52)
    th = main_thunk(exe)
    if eligible:
        assert_f4_kernel(th, f4_kernel, width)
        assert_close(out, ref, F4_TOL, f"winograd_f4 {f4_kernel} {width} {case.id}")
    else:
        assert th.algo != "winograd_f4"
        assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


def test_winograd_f4_error_is_stated_and_bounded():
    """README: the F(4x4,3x3) error against float64, next to F(2x2,3x3) and the direct kernel,
    on 64 -> 64 channels (a sum of 576 products), small odd planes to exercise edge tiles."""
    rng = np.random.default_rng(53)
    g = rx.Graph()
    x = g.input("x", (2, 64, 15, 13))
    g.output("y", g.conv(x, g.param("w", rand(rng, 64, 64, 3, 3, scale=0.1)), padding=1))
    xv = rand(rng, 2, 64, 15, 13)
    ref = rx.compile(g, REFERENCE).run({"x": xv})["y"].astype(np.float64)
    scale = np.abs(ref).max()
    err = {}
    for name, config in (("f4", rx.Config(winograd="f4")), ("f2", rx.Config(winograd=True)),
                         ("direct", rx.Config(conv_algo="nchwc_direct"))):
        exe = rx.compile(g, config)
        err[name] = float(np.abs(exe.run({"x": xv})["y"] - ref).max() / scale)
    assert err["f4"] < 1e-4 and err["f2"] < 1e-4 and err["direct"] < 1e-5
    assert err["f4"] > err["direct"]          # the transforms do cost precision


def test_rlx_winograd_f4_flag():
    assert rx.Config.from_env({"RLX_WINOGRAD": "f4"}).winograd == "f4"
    assert rx.Config.from_env({"RLX_WINOGRAD": "f2"}).winograd is True
    assert rx.Config.from_env({"RLX_WINOGRAD": "on"}).winograd is True
    with pytest.raises(ValueError, match=r"RLX_WINOGRAD='f6'.*f2, f4"):
        rx.Config.from_env({"RLX_WINOGRAD": "f6"})
    with pytest.raises(ValueError, match="Config.winograd"):
        rx.Config(winograd="f3")


@pytest.mark.parametrize("split", [(6, 1), (6, 3), (12, 2), (18, 1), (18, 5)])
def test_winograd_f4_any_work_split_gives_the_same_sums(split, monkeypatch):
    """Blocks of 6, 12 or 18 tiles (a 15x13 plane has 16: partial blocks) times 1 to 5
    output-channel groups (80 channels: 5 pairs at 8 lanes, a lone block at 16) over a
    batch of 2: every cut against the reference kernel."""
    from rlxpy.cpu_kernels import winograd_f4
    monkeypatch.setattr(winograd_f4, "work_split", lambda g, lanes, threads: split)
    rng = np.random.default_rng(54)
    g = rx.Graph()
    x = g.input("x", (2, 24, 15, 13))
    g.output("y", g.conv(x, g.param("w", rand(rng, 80, 24, 3, 3, scale=0.1)), padding=1))
    xv = rand(rng, 2, 24, 15, 13)
    want = rx.compile(g, REFERENCE).run({"x": xv})["y"]
    for width in WIDTHS:
        exe = rx.compile(g, rx.Config(winograd="f4", simd_width=width))
        th = main_thunk(exe)
        assert (th.algo, th.tiling.tile, th.tiling.k_blocks) == ("winograd_f4",) + split, exe.explain()
        assert f"{split[0]} tiles x {split[1]} output-channel group" in th.why
        assert_close(exe.run({"x": xv})["y"], want, F4_TOL, f"split {split} width {width}")


def test_winograd_f4_work_split_keeps_both_workers_busy():
    """Small planes split the output channels (both workers busy, each reading its half of
    U); 16 tiles (256 channels at 14x14) stay one block, so U is read once; one worker never
    splits (it would only repeat the input transform)."""
    from rlxpy.cpu_kernels import winograd_f4
    geo = square_geometry
    for c, hw in ((512, 7), (256, 14), (128, 28)):
        tb, kg = winograd_f4.work_split(geo(1, c, hw), 8, 2)
        tiles = -(-hw // 4) ** 2
        assert tb >= tiles or -(-tiles // tb) % 2 == 0, (c, hw, tb, kg)   # no worker idles on a lone block
        assert kg % 2 == 0 or -(-tiles // tb) % 2 == 0, (c, hw, tb, kg)
    assert winograd_f4.work_split(geo(1, 256, 14), 8, 2)[0] == 18
    for c, hw in ((512, 7), (256, 14), (64, 56)):
        assert winograd_f4.work_split(geo(1, c, hw), 8, 1)[1] == 1


def test_winograd_f4_transforms_filters_on_the_fly_where_measured_faster(monkeypatch):
    """on_the_fly's rule on a 1 MiB L2 (the Zen4 it was measured on; winograd_f4.on_the_fly
    has the numbers): at 16 lanes a batch of at most 2 groups of 4 tiles, or a U over 4 MiB;
    at 8 lanes and 1 only a U over 16 MiB on planes of at most 4 tiles."""
    from rlxpy.cpu_kernels import winograd_f4
    monkeypatch.setattr(winograd_f4, "l2_bytes", lambda: 1 << 20)

    def fly(n, c, hw, lanes):
        return winograd_f4.on_the_fly(square_geometry(n, c, hw), lanes)
    assert all(fly(*a, 16) for a in ((1, 512, 7), (8, 512, 7), (1, 256, 14), (4, 256, 14), (1, 256, 28), (1, 64, 7),
                                     (2, 16, 7)))
    assert not any(fly(*a, 16) for a in ((1, 128, 28), (4, 128, 14), (1, 128, 56), (3, 16, 7)))
    assert all(fly(*a, lanes) for a in ((1, 512, 7), (2, 512, 7), (8, 512, 7)) for lanes in (8, 1))
    assert not any(fly(*a, lanes) for a in ((1, 512, 14), (1, 256, 14), (1, 256, 7), (1, 64, 7)) for lanes in (8, 1))


def test_conv_fly_split_gives_every_worker_the_same_items():
    """Tile groups (4 tiles at 16 lanes) times runs of output blocks: a multiple of the
    workers, with the fewest runs (each repeats its group's input transform)."""
    from rlxpy.cpu_kernels import winograd_f4

    def split(n, c, hw, threads, lanes=16):
        return winograd_f4.fly_split(square_geometry(n, c, hw), lanes, threads)
    for n, threads in itertools.product(range(1, 9), (1, 2, 3, 4)):
        runs = split(n, 512, 7, threads)          # n images of 4 tiles: n groups
        assert (n * runs) % threads == 0, (n, threads, runs)
        assert runs == min(r for r in range(1, threads + 1) if (n * r) % threads == 0)
    assert split(1, 16, 7, 4) == 1                # one output block: one run, whatever the workers
    assert split(1, 512, 7, 2, lanes=8) == 1      # 8 lanes: 2 groups of 2 tiles


def test_winograd_f4_on_the_fly_keeps_the_raw_filters():
    """A 64 -> 64 conv on a 7x7 plane at 16 lanes (4 tiles, one group): conv_fly, said by
    explain, its persistent buffer the raw filters (9 floats a channel pair, not U's 36),
    the bias and a block of zeros; at 8 lanes the packed U."""
    rng = np.random.default_rng(57)
    g = rx.Graph()
    x = g.input("x", (1, 64, 7, 7))
    g.output("y", g.conv(x, g.param("w", rand(rng, 64, 64, 3, 3, scale=0.1)), padding=1))
    fly = main_thunk(rx.compile(g, rx.Config(winograd="f4", simd_width=16)))
    assert_f4_kernel(fly, "conv_fly", 16)
    assert "1 group(s) of 4 tiles, against 0.6 MiB of transformed filters read every run" in fly.why
    assert fly.persistent_bytes == 4 * (9 * 64 * 64 + 64 + 16)
    packed = main_thunk(rx.compile(g, rx.Config(winograd="f4", simd_width=8)))
    assert_f4_kernel(packed, "conv", 8)
    assert packed.persistent_bytes == 4 * (36 * 64 * 64 + 64 + 8)


@pytest.mark.parametrize("runs", [1, 2, 3])
@pytest.mark.parametrize("width", WIDTHS)
def test_conv_fly_groups_cross_images_in_any_split(width, runs, monkeypatch):
    """conv_fly's tile groups take the batch's tiles in order across images: 3 images of
    5x6 (4 tiles each: 3 groups of 4 at 16 lanes, 6 of 2 at 8 and 1) and of 3x3 (a tile
    each: a group with a dead tile at every width); 1 to 3 runs of output blocks (40
    channels, 3 or 5 blocks); asymmetric padding; guard zones around every buffer; the
    reference kernel's sums."""
    from rlxpy.cpu_kernels import winograd_f4
    monkeypatch.setattr(winograd_f4, "on_the_fly", lambda g, lanes: True)
    monkeypatch.setattr(winograd_f4, "fly_split", lambda g, lanes, threads: runs)
    rng = np.random.default_rng(58)
    for shape in ((3, 24, 5, 6), (3, 24, 3, 3)):
        g = rx.Graph()
        x = g.input("x", shape)
        g.output("y", g.conv(x, g.param("w", rand(rng, 40, 24, 3, 3, scale=0.2)), g.param("b", rand(rng, 40)),
                             padding=((1, 0), (2, 1))))
        xv = rand(rng, *shape)
        want = rx.compile(g, REFERENCE).run({"x": xv})["y"]
        exe = rx.compile(g, rx.Config(winograd="f4", simd_width=width), plan_memory=False, guard_bytes=256)
        th = main_thunk(exe)
        assert_f4_kernel(th, "conv_fly", width)
        assert th.tiling.k_blocks == runs
        for _ in range(2):
            assert_close(exe.run({"x": xv})["y"], want, F4_TOL, f"conv_fly {width} {runs} {shape}")
            assert exe.guard_violations() == []


TRANSPOSED_CASES = [c for c in cases("fast") if c.op in ("conv_transpose2d", "conv_transpose3d", "conv2d_backward_input")]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", TRANSPOSED_CASES, ids=lambda c: c.id)
def test_stride1_transposed_convs_and_input_gradients_run_as_vector_convs(case, width):
    """Stride 1: the forward conv of the input (or dy) with flipped, per-group transposed
    weights and padding d*(k-1) - p; other strides say why not and keep col2im."""
    ref, _, _, _ = run_case(case, REFERENCE, seed=55)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_direct", simd_width=width), seed=55)
    th = main_thunk(exe)
    stride = case.kw["stride"]
    groups, (_, w) = case.kw["groups"], case.params[0]
    cout = case.kw["input_shape"][1] if case.op == "conv2d_backward_input" else w[1] * groups
    whole = groups == 1 or ((w[0] // groups) % width == 0 and (cout // groups) % width == 0)
    if stride == 1 and whole:
        assert (th.algo, th.tiling.lanes) == ("nchwc_direct", width), exe.explain()
        assert "flipped, transposed weights" in th.why
    else:
        assert th.algo == "col2im" and "nchwc_direct not eligible" in th.why
    assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", TRANSPOSED_CASES, ids=lambda c: c.id)
def test_rlx_winograd_f4_takes_stride1_3x3_transposed_convs_and_input_gradients(case, width, f4_kernel):
    kw, (_, w) = case.kw, case.params[0]
    eligible = (kw["stride"] == 1 and w[2:] == (3, 3) and kw["dilation"] == 1 and kw["groups"] == 1
                and kw["padding"] in (0, 1, 2))
    if f4_kernel == "conv_fly" and not eligible:
        pytest.skip("not a stride-1 3x3 transposed conv: checked once, with the kernel choice untouched")
    ref, _, _, _ = run_case(case, REFERENCE, seed=56)
    out, exe, _, _ = run_case(case, rx.Config(winograd="f4", simd_width=width), seed=56)
    th = main_thunk(exe)
    if eligible:
        assert_f4_kernel(th, f4_kernel, width)
        assert_close(out, ref, F4_TOL, f"winograd_f4 {f4_kernel} {width} {case.id}")
    else:
        assert th.algo != "winograd_f4"
        assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


def test_a_1x1_conv_between_blocked_neighbours_takes_the_blocked_kernel():
    """A 1x1 conv takes the blocked GEMM nchwc_1x1, between blocked kernels with no reorder
    and alone too (x copied in blocked, y written plain); with channels that blocks would
    pad many times over, the plain GEMM."""
    rng = np.random.default_rng(57)
    lanes = simd.resolve_width(None)
    if lanes == 1:
        pytest.skip("no vector kernels by default at 1 lane")
    c = 2 * lanes
    g = rx.Graph()
    x = g.input("x", (2, c, 9, 10))
    a = g.conv(x, g.param("wa", rand(rng, c, 1, 3, 3)), padding=1, groups=c, name="dw")
    b = g.conv(a, g.param("wb", rand(rng, c, c, 1, 1)), name="pw")
    d = g.conv(b, g.param("wd", rand(rng, c, c, 3, 3)), padding=1, name="body")
    g.output("y", d)
    exe = rx.compile(g)
    th = {t.node: t for t in exe.thunks}
    assert [t.algo for t in exe.thunks] == ["nchwc_depthwise", "nchwc_1x1", "nchwc_direct"]
    assert "blocked GEMM" in th["pw"].why
    xv = rand(rng, 2, c, 9, 10)
    assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], TOL)
    alone = rx.Graph()
    alone.output("y", alone.conv(alone.input("x", (2, c, 9, 10)), alone.param("w", rand(rng, c, c, 1, 1))))
    assert [t.algo for t in rx.compile(alone).thunks] == ["nchwc_1x1"]      # x copied in blocked, y written plain
    odd = rx.Graph()          # 3 -> 5 channels would be padded to whole blocks many times over: the GEMM
    odd.output("y", odd.conv(odd.input("x", (2, 3, 9, 10)), odd.param("w", rand(rng, 5, 3, 1, 1))))
    assert [t.algo for t in rx.compile(odd).thunks] == ["gemm1x1"]


@pytest.mark.parametrize("width", [16, 8])
def test_a_head_1x1_to_few_channels_reads_blocked_x_and_writes_plain(width, monkeypatch):
    """A segmentation head (1x1 from whole blocks of channels to fewer channels than lanes)
    after a blocked conv: nchwc_1x1 reads x blocked and writes the graph output plain, with
    no reorder between; its padded output lanes never reach y. Alone (x plain) and with input
    channels not in whole blocks it is still nchwc_1x1 from a whole block of inputs up (the
    blocked GEMM beat gemm1x1 on such shapes, choose.choose_conv2d_1x1)."""
    monkeypatch.setenv("RLX_SIMD_WIDTH", str(width))
    rng = np.random.default_rng(61)
    # (c, k, after a blocked conv, alone): 2w -> w - 1 pads by less than a third, blocked anyway
    for c, k, algo, alone_algo in ((width, 2, "nchwc_1x1", "nchwc_1x1"), (2 * width, width - 1, "nchwc_1x1", "nchwc_1x1"),
                                   (width + 3, 2, "nchwc_1x1", "nchwc_1x1")):
        g = rx.Graph()
        x = g.input("x", (3, c, 7, 11))
        body = g.relu(g.conv(x, g.param("w3", rand(rng, c, c, 3, 3)), padding=1, name="body"))
        g.output("y", g.conv(body, g.param("wh", rand(rng, k, c, 1, 1)), g.param("bh", rand(rng, k)), name="head"))
        exe = rx.compile(g)
        th = {t.node: t for t in exe.thunks}
        assert th["head"].algo == algo, exe.explain()
        if algo == "nchwc_1x1":
            assert th["head"].layout("x") == blocked(width) and th["head"].layout("y") == PLAIN
            assert not any(t.algo == "reorder" for t in exe.thunks), exe.explain()
        xv = rand(rng, 3, c, 7, 11)
        assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], TOL)
        alone = rx.Graph()
        alone.output("y", alone.conv(alone.input("x", (3, c, 7, 11)), alone.param("wh", rand(rng, k, c, 1, 1))))
        assert [t.algo for t in rx.compile(alone).thunks] == [alone_algo]


def test_a_resize_between_blocked_convs_stays_blocked():
    """A U-Net decoder step: conv -> resize -> conv keeps the blocked layout through the
    resize (asked again as a neighbour of blocked kernels); alone it stays plain."""
    rng = np.random.default_rng(58)
    lanes = simd.resolve_width(None)
    if lanes == 1:
        pytest.skip("no vector kernels by default at 1 lane")
    c = 4 * lanes - 2                                   # a padded last block
    g = rx.Graph()
    x = g.input("x", (2, c, 5, 6))
    a = g.conv(x, g.param("wa", rand(rng, c, c, 3, 3)), padding=1, name="a")
    r = g.resize_nearest2x(a, name="up")
    d = g.conv(r, g.param("wd", rand(rng, c, c, 3, 3)), padding=1, name="d")
    g.output("y", d)
    exe = rx.compile(g)
    assert [(t.node, t.algo) for t in exe.thunks] == [("a", "nchwc_direct"), ("up", "nchwc_resize"),
                                                      ("d", "nchwc_direct")]
    xv = rand(rng, 2, c, 5, 6)
    assert_close(exe.run({"x": xv})["y"], rx.compile(g, REFERENCE).run({"x": xv})["y"], TOL)
    alone = rx.Graph()
    alone.output("y", alone.resize_nearest2x(alone.input("x", (2, c, 5, 6))))
    assert [t.algo for t in rx.compile(alone).thunks] == ["parallel"]


WEIGHT_GRAD_CASES = [c for c in cases("fast") + cases("reference") if c.op == "conv2d_backward_weight"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", WEIGHT_GRAD_CASES, ids=lambda c: c.id)
def test_nchwc_wgrad_matches_reference_at_every_width(case, width):
    """The weight gradient on blocked dy and x as the graph input holds it (plain): any
    stride, padding, dilation; groups of whole blocks, else it says why not and keeps
    im2col."""
    ref, _, _, _ = run_case(case, REFERENCE, seed=57)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_wgrad", simd_width=width), seed=57)
    th = main_thunk(exe)
    (_, x), (_, dy) = case.inputs
    groups = case.kw["groups"]
    if groups == 1 or ((x[1] // groups) % width == 0 and (dy[1] // groups) % width == 0):
        assert (th.algo, th.tiling.lanes) == ("nchwc_wgrad", width), exe.explain()
        assert dict(th.layouts) == {"dy": blocked(width)}      # x read plain: never reordered
        assert len(exe.thunks) == 1          # dy copied in blocked: no reorder thunk
    else:
        assert th.algo == "im2col" and "nchwc_wgrad not eligible" in th.why
    assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


@pytest.mark.parametrize("width", WIDTHS)
def test_nchwc_wgrad_reads_x_plain_or_blocked_as_it_comes(width):
    """x is only broadcast, so nchwc_wgrad reads it as it is stored: a graph input with no
    other reader plain, where the caller holds it (its arena slot stays zero); a blocked
    conv's output blocked; a graph input a blocked conv reads too, copied in blocked once.
    dy is always blocked. Every dw against the reference kernel, at several strides,
    paddings, groups and channel counts off the width."""
    from rlxpy.thunks.executor import IN_PLACE_MIN_BYTES
    rng = np.random.default_rng(97)
    for n, c, k, hw, stride, pad, groups in [(2, width + 3, 2 * width + 1, 23, 1, 1, 1),
                                             (3, 2 * width, 2 * width, 40, 2, 0, 2)]:
        kw = dict(stride=stride, padding=pad)
        oh = (hw + 2 * pad - 3) // stride + 1
        g = rx.Graph()
        x = g.input("x", (n, c, hw, hw))
        u = g.input("u", (n, c, hw, hw))
        dy = g.input("dy", (n, k, oh, oh))
        dyh = g.input("dyh", (n, k, oh, oh))
        h = g.conv(u, g.param("w", rand(rng, c, c // groups, 3, 3)), padding=1, groups=groups, name="conv")
        g.output("h", h)
        g.output("dw_x", g.conv2d_backward_weight(x, dy, 3, groups=groups, name="from_input", **kw))
        g.output("dw_h", g.conv2d_backward_weight(h, dyh, 3, groups=groups, name="from_conv", **kw))
        g.output("dw_u", g.conv2d_backward_weight(u, dyh, 3, groups=groups, name="shared_input", **kw))
        algos = {"conv": "nchwc_direct", "from_input": "nchwc_wgrad", "from_conv": "nchwc_wgrad",
                 "shared_input": "nchwc_wgrad"}
        exe = rx.compile(g, rx.Config(simd_width=width), algos=algos)
        feeds = {"x": rand(rng, n, c, hw, hw), "u": rand(rng, n, c, hw, hw), "dy": rand(rng, n, k, oh, oh),
                 "dyh": rand(rng, n, k, oh, oh)}
        assert feeds["x"].nbytes >= IN_PLACE_MIN_BYTES
        got = exe.run(feeds)
        th = {t.node: t for t in exe.thunks}
        assert {th[nm].algo for nm in algos} == {"nchwc_direct", "nchwc_wgrad"}, exe.explain()
        assert th["from_input"].layout("x") == PLAIN
        assert th["from_conv"].layout("x") == blocked(width)
        assert th["shared_input"].layout("x") == blocked(width)
        assert all(th[nm].layout("dy") == blocked(width) for nm in ("from_input", "from_conv", "shared_input"))
        compiled = exe._compile_for({nm: a.shape for nm, a in feeds.items()})
        assert [nm for nm, _, _ in compiled.pool.input_feeds] == ["x"]
        (bound,) = compiled.pool.idle()
        assert not dict(bound.inputs)["x"].any()                   # never copied in
        want = rx.compile(g, REFERENCE).run(feeds)
        for name in want:
            assert_close(got[name], want[name], TOL, f"{name} {width} stride {stride} groups {groups}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("rows, acc_bytes", [(1, 1 << 30), (3, 1 << 30), (4, 0)])
def test_nchwc_wgrad_takes_the_pixels_a_few_rows_at_a_time(width, rows, acc_bytes, monkeypatch):
    """Each worker takes its items through chunks of `rows` output rows (the accumulators
    stored and reloaded between chunks, across images), or a whole image a chunk where its
    accumulators would outgrow ACC_BYTES."""
    from rlxpy.cpu_kernels import nchwc_wgrad
    monkeypatch.setattr(nchwc_wgrad, "ROWS", rows)
    monkeypatch.setattr(nchwc_wgrad, "ACC_BYTES", acc_bytes)
    rng = np.random.default_rng(71 + rows)
    for n, c, k, hw, stride in [(3, width + 5, 2 * width + 1, 10, 1), (2, 2 * width, width, 11, 2)]:
        g = rx.Graph()
        x = g.input("x", (n, c, hw, hw))
        oh = (hw + 2 - 3) // stride + 1
        dy = g.input("dy", (n, k, oh, oh))
        g.output("dw", g.conv2d_backward_weight(x, dy, 3, stride=stride, padding=1, name="wg"))
        exe = rx.compile(g, rx.Config(conv_algo="nchwc_wgrad", simd_width=width))
        th = main_thunk(exe)
        assert th.algo == "nchwc_wgrad"
        assert nchwc_wgrad.chunk_rows(th.record.geometry, width, 2) == (rows if acc_bytes else oh)
        feeds = {"x": rand(rng, n, c, hw, hw), "dy": rand(rng, n, k, oh, oh)}
        assert_close(exe.run(feeds)["dw"], rx.compile(g, REFERENCE).run(feeds)["dw"], TOL,
                     f"wgrad rows {rows} {width} {n}x{c}->{k}")


SUBPIXEL_CASES = [c for c in cases("fast") + cases("reference")
                  if c.op in ("conv_transpose2d", "conv_transpose3d", "conv2d_backward_input")]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", SUBPIXEL_CASES, ids=lambda c: c.id)
def test_nchwc_subpixel_matches_reference_at_every_width(case, width):
    """Any stride (one stride-1 conv per output phase), output_padding, dilation (phases
    with no taps: bias only), groups of whole blocks; else it says why not."""
    ref, _, _, _ = run_case(case, REFERENCE, seed=58)
    out, exe, _, _ = run_case(case, rx.Config(conv_algo="nchwc_subpixel", simd_width=width), seed=58)
    th = main_thunk(exe)
    groups, (_, w) = case.kw["groups"], case.params[0]
    cout = case.kw["input_shape"][1] if case.op == "conv2d_backward_input" else w[1] * groups
    if groups == 1 or ((w[0] // groups) % width == 0 and (cout // groups) % width == 0):
        assert (th.algo, th.tiling.lanes) == ("nchwc_subpixel", width), exe.explain()
        # kernel = stride, unpadded, undilated, the output s times the input: one 1x1 conv
        kernel, stride = w[2:], _axes(case.kw["stride"], len(w) - 2)
        src = case.inputs[0][1]
        dst = (case.kw["input_shape"] if case.op == "conv2d_backward_input" else
               tuple((i - 1) * s + k for i, s, k in zip(src[2:], stride, kernel)))
        one_gemm = (kernel == stride and case.kw.get("padding", 0) == 0 and case.kw.get("dilation", 1) == 1
                    and case.kw.get("output_padding", 0) == 0 and groups == 1
                    and all(o == i * s for o, i, s in zip(dst[-len(kernel):], src[2:], stride)))
        assert ("as one 1x1 vector conv" in th.why) == one_gemm, th.why
    else:
        assert th.algo == "col2im" and "nchwc_subpixel not eligible" in th.why
    assert_close(out, ref, TOL, f"{th.algo} {width} {case.id}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("n, c, k, ks, stride", [(2, 32, 32, 4, 2), (1, 64, 32, 2, 2), (2, 16, 16, 3, 1)])
def test_strided_transposed_convs_default_to_subpixel_at_16_lanes_past_a_little_work(width, n, c, k, ks, stride):
    """The default rule (choose.SUBPIXEL_MIN_LANES, SUBPIXEL_MIN_FLOPS): a strided 2-D
    transposed conv takes nchwc_subpixel at 16 lanes from 8 MFLOP on, col2im below that and
    at 8 or 1 lanes; stride 1 stays the forward conv's nchwc_direct. The default's numbers
    match the reference's."""
    rng = np.random.default_rng(67 + n + ks)
    g = rx.Graph()
    x = g.input("x", (n, c, 16, 16))
    wt = g.param("w", rand(rng, c, k, ks, ks))
    g.output("y", g.relu(g.conv_transpose2d(x, wt, g.param("b", rand(rng, k)), stride=stride, padding=1, name="t")))
    exe = rx.compile(g, rx.Config(simd_width=width))
    th = next(t for t in exe.thunks if t.node.startswith("t"))
    work = 2 * n * c * 16 * 16 * k * ks * ks
    if stride == 1:
        assert th.algo == ("nchwc_direct" if width > 1 else "col2im"), th.why
    elif width == 16 and work >= 8e6:
        assert th.algo == "nchwc_subpixel" and th.why.startswith("strided, 16 lanes"), th.why
    else:
        assert th.algo == "col2im", th.why
    feeds = {"x": rand(rng, n, c, 16, 16)}
    assert_close(exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"], TOL, f"{th.algo} {width}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("n, c, k, hw, ks", [(1, 64, 32, 16, 2), (8, 64, 32, 16, 2), (2, 20, 24, 9, 3),
                                             (1, 3, 8, 8, 2)])
def test_kernel_equal_to_stride_defaults_to_one_gemm_at_every_vector_width(width, n, c, k, hw, ks):
    """The default rule (choose.PATCHES_MIN_FLOPS): a transposed conv whose kernel equals its
    stride (a UNet's 2x2 s2) takes nchwc_subpixel's one 1x1 conv of every phase at 16 and 8
    lanes from 1 MFLOP on, col2im below that and at 1 lane; numbers as the reference's. Its
    weights are a graph input here (packed on every run), and change between runs."""
    rng = np.random.default_rng(83 + n + ks)
    g = rx.Graph()
    x = g.input("x", (n, c, hw, hw))
    w = g.input("w", (c, k, ks, ks))
    g.output("y", g.relu(g.conv_transpose2d(x, w, g.param("b", rand(rng, k)), stride=ks, name="t")))
    exe = rx.compile(g, rx.Config(simd_width=width))
    th = next(t for t in exe.thunks if t.node.startswith("t"))
    work = 2 * n * c * hw * hw * k * ks * ks
    if width > 1 and work >= 1e6:
        assert th.algo == "nchwc_subpixel" and "as one 1x1 vector conv" in th.why, th.why
    else:
        assert th.algo == "col2im", th.why
    ref = rx.compile(g, REFERENCE)
    for run in range(2):
        feeds = {"x": rand(rng, n, c, hw, hw), "w": rand(rng, c, k, ks, ks)}
        assert_close(exe.run(feeds)["y"], ref.run(feeds)["y"], TOL, f"{th.algo} {width} run {run}")


@pytest.mark.parametrize("n_in, n_out, k, s, p, d", [(5, 10, 2, 2, 0, 1), (4, 12, 3, 3, 0, 1), (5, 11, 2, 2, 0, 1),
                                                     (5, 10, 4, 2, 1, 1), (5, 8, 2, 2, 1, 1), (3, 11, 3, 3, 0, 2),
                                                     (6, 6, 1, 1, 0, 1), (4, 9, 2, 2, 0, 1)])
def test_patches_means_every_output_comes_from_exactly_one_input_pixel_and_tap(n_in, n_out, k, s, p, d):
    """subpixel.patches, restated from o = q*s - p + i*d along one axis: it holds exactly
    where every output index has one (input pixel, tap) pair and every pair lands on an
    output (the phases are then 1x1 convs of the same input, stride 1 — as one GEMM). A
    transposed conv's output is (n_in - 1)*s - 2p + d*(k - 1) + 1 + output_padding."""
    from rlxpy.cpu_kernels import subpixel
    op = n_out - ((n_in - 1) * s - 2 * p + d * (k - 1) + 1)
    assert 0 <= op < max(s, d)
    g = rx.Graph()
    x = g.input("x", (1, 4, 1, n_in))
    g.output("y", g.conv_transpose2d(x, g.param("w", np.ones((4, 3, 1, k), np.float32)), stride=(1, s),
                                     padding=(0, p), output_padding=(0, op), dilation=(1, d), name="t"))
    th = main_thunk(rx.compile(g, REFERENCE))
    hits = np.zeros(n_out, int)
    lands = True
    for q in range(n_in):
        for i in range(k):
            o = q * s - p + i * d
            if 0 <= o < n_out:
                hits[o] += 1
            else:
                lands = False
    assert subpixel.patches(th.record) == (lands and bool((hits == 1).all()))


@pytest.mark.parametrize("n_out, k, s, p, d", [(10, 4, 2, 1, 1), (9, 3, 3, 2, 2), (7, 2, 4, 0, 1), (12, 3, 2, 1, 2),
                                               (5, 5, 3, 4, 1)])
def test_subpixel_phases_cover_every_output_once_with_every_tap_once(n_out, k, s, p, d):
    """Restated from the definition o = q*s - p + i*d: each output index is in exactly one
    phase, and the (output, tap) pairs the phases cover are exactly those with a source q in
    range (q may be any integer here: the sub-convs' padding handles x's ends)."""
    from rlxpy.cpu_kernels.subpixel import axis_phases
    seen = {}
    for ph in axis_phases(n_out, k, s, p, d):
        for u in range(ph.count):
            o = ph.first + u * s
            assert o not in seen
            # forward sub-conv: output u reads x at u - pad + j * dilation with flipped tap f = taps[j]
            seen[o] = {(k - 1 - f, u - ph.pad + j * ph.dilation) for j, f in enumerate(ph.taps)}
    assert sorted(seen) == list(range(n_out))
    for o, pairs in seen.items():
        want = {(i, (o + p - i * d) // s) for i in range(k) if (o + p - i * d) % s == 0}
        assert pairs == want, o


POOL_BACKWARD_CASES = [c for c in cases("fast") + cases("reference") if c.op == "max_pool2d_backward"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", POOL_BACKWARD_CASES, ids=lambda c: c.id)
def test_nchwc_pool_backward_picks_pytorchs_winner_at_every_width(case, width):
    """x of small integers (ties in most windows: the first in scan order wins) and NaNs (a
    NaN wins; among NaNs the last), dy with an inf: the same dx as the reference, exactly
    (the same additions in the same order), inf and NaN in the same places."""
    from rlxpy.testing import case_arrays, one_node_graph
    inputs, _ = case_arrays(case, seed=59)
    rng = np.random.default_rng(59)
    inputs["x"] = rng.integers(0, 3, inputs["x"].shape).astype(np.float32)
    inputs["x"].reshape(-1)[[0, 1, 5, 17, 40]] = np.nan
    inputs["dy"].reshape(-1)[3] = np.inf
    g = one_node_graph(case, inputs)
    exe = rx.compile(g, rx.Config(simd_width=width, conv_algo="nchwc_pool_backward"))
    out, ref = exe.run(inputs)["out"], rx.compile(g, REFERENCE).run(inputs)["out"]
    assert (main_thunk(exe).algo, main_thunk(exe).tiling.lanes) == ("nchwc_pool_backward", width)
    assert np.isinf(ref).any()
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("blocks", [3, 5])
@pytest.mark.parametrize("stride", [1, 2])
def test_nchwc_1x1_last_three_blocks_in_4x3_tiles(width, blocks, stride):
    """An odd count of output blocks (the last one partial) runs its last three in 4 x 3 tiles:
    a plane of 63 or 20 pixels (4-pixel tiles and a partial one), written plain as a graph
    output, and blocked with a residual add and relu fused into the store."""
    rng = np.random.default_rng(53 + blocks)
    k = blocks * width - (1 if width > 1 else 0)
    g = rx.Graph()
    x = g.input("x", (2, 2 * width + 3, 7 * stride, 9 * stride - 1))
    w = g.param("w", rand(rng, k, 2 * width + 3, 1, 1))
    b = g.param("b", rand(rng, k))
    g.output("plain", g.conv(x, w, bias=b, stride=stride, name="plain"))
    fused = g.conv(x, w, bias=b, stride=stride, name="fused")
    r = g.input("r", tuple(fused.shape))
    g.output("y", g.relu(g.add(fused, r)))
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_1x1", simd_width=width))
    th = {t.node.split("+")[0]: t for t in exe.thunks if t.algo != "reorder"}
    for name in ("plain", "fused"):
        assert th[name].algo == "nchwc_1x1" and "the last three blocks in 4 x 3 tiles" in th[name].why, exe.explain()
    assert "residual add + relu" in th["fused"].why
    feeds = {"x": rand(rng, *x.shape), "r": rand(rng, *fused.shape)}
    got, want = exe.run(feeds), rx.compile(g, REFERENCE).run(feeds)
    for name in ("plain", "y"):
        assert_close(got[name], want[name], TOL, f"4x3 tiles {name} {width} {blocks} {stride}")


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("stride", [1, 2])
def test_nchwc_1x1_items_of_several_pairs_and_tiles_in_either_order(monkeypatch, width, stride):
    """Work items that hold several output pairs and several tiles: at stride 1 (x's run
    fits L1) each pair sweeps the item's tiles, at stride 2 each tile goes through every
    pair; one loop walks both orders, so a step that skips or repeats a (pair, tile) shows
    here. Blocked y with relu, and plain y as a graph output, against the reference."""
    from rlxpy.cpu_kernels import nchwc_1x1
    splits = []
    real_split = nchwc_1x1.work_split

    def spy(g, lanes, threads):
        splits.append(real_split(g, lanes, threads))
        return splits[-1]
    monkeypatch.setattr(nchwc_1x1, "work_split", spy)
    rng = np.random.default_rng(83 + stride)
    cin, k = width + 3, 6 * width
    g = rx.Graph()
    x = g.input("x", (2, cin, 7 * stride, 9 * stride))
    w = g.param("w", rand(rng, k, cin, 1, 1))
    b = g.param("b", rand(rng, k))
    g.output("plain", g.conv(x, w, bias=b, stride=stride, name="plain"))
    g.output("y", g.relu(g.conv(x, w, bias=b, stride=stride, name="blocked")))
    exe = rx.compile(g, rx.Config(conv_algo="nchwc_1x1", simd_width=width))
    assert [t.algo for t in exe.thunks if t.algo != "reorder"] == ["nchwc_1x1"] * 2, exe.explain()
    feeds = {"x": rand(rng, *x.shape)}
    got, want = exe.run(feeds), rx.compile(g, REFERENCE).run(feeds)
    assert splits
    for chunk, gpairs in splits:
        assert gpairs == 3 and chunk > nchwc.TP        # 3 pairs and at least 2 tiles an item
        pairs_outer = stride == 1 and chunk * 2 * width * 4 <= nchwc_1x1.X_RUN_BYTES
        assert pairs_outer == (stride == 1)
    for name in ("plain", "y"):
        assert_close(got[name], want[name], TOL, f"1x1 items {name} {width} {stride}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("plane", [(7, 7), (2, 7), (1, 13), (4, 2)])
def test_nchwc_1x1_plane_ending_in_one_or_two_pixels(monkeypatch, width, plane):
    """A plane of 6 t + 1 or 6 t + 2 pixels (7x7: 8 tiles and 1) ends in pixels computed one
    at a time after the tiles: an even count of blocks, an odd one (a lone block), an odd
    one of at least 3 (the 4 x 3 tiles take the last three), stride 1 and 2, output pairs
    split over work items (a weight budget of one pair) so the plane's end is one item's,
    written plain as a graph output and blocked with a residual add + relu in the store."""
    from rlxpy.cpu_kernels import nchwc_1x1
    monkeypatch.setattr(nchwc_1x1, "WEIGHT_BYTES", 1)
    rng = np.random.default_rng(71 + plane[0] * plane[1])
    cin = 2 * width + 3
    for blocks, stride in ((2, 1), (1, 2), (5, 1)):
        k = blocks * width - (1 if width > 1 and blocks % 2 else 0)
        g = rx.Graph()
        x = g.input("x", (2, cin, plane[0] * stride - (stride - 1), plane[1] * stride))
        w = g.param("w", rand(rng, k, cin, 1, 1))
        b = g.param("b", rand(rng, k))
        g.output("plain", g.conv(x, w, bias=b, stride=stride, name="plain"))
        fused = g.conv(x, w, bias=b, stride=stride, name="fused")
        assert tuple(fused.shape[2:]) == plane
        r = g.input("r", tuple(fused.shape))
        g.output("y", g.relu(g.add(fused, r)))
        exe = rx.compile(g, rx.Config(conv_algo="nchwc_1x1", simd_width=width))
        th = {t.node.split("+")[0]: t for t in exe.thunks if t.algo != "reorder"}
        assert th["plain"].algo == th["fused"].algo == "nchwc_1x1", exe.explain()
        assert "residual add + relu" in th["fused"].why
        feeds = {"x": rand(rng, *x.shape), "r": rand(rng, *fused.shape)}
        got, want = exe.run(feeds), rx.compile(g, REFERENCE).run(feeds)
        for name in ("plain", "y"):
            assert_close(got[name], want[name], TOL, f"sliver {name} {width} {plane} {blocks} {stride}")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("blocks, stride, groups", [(1, 1, 1), (3, 1, 1), (1, 2, 1), (3, 2, 2)])
def test_a_lone_output_block_runs_in_12_pixel_tiles(width, blocks, stride, groups):
    """A group whose output blocks end on one with no partner (1 or 3 blocks) runs it 12
    pixels (two tiles) at a time: interior and border tiles, tiles across rows, a last run of
    fewer than 12 pixels, groups, stride 2, a fused residual add + relu, and the plain-input
    kernel's rows of 12 where its one block is alone."""
    rng = np.random.default_rng(61 + blocks + stride)
    if groups == 1:       # the last block partial
        cin, k = 2 * width + 3, blocks * width - (1 if width > 1 else 0)
    else:                 # whole blocks per group, as grouped blocked convs need
        cin, k = groups * width, groups * blocks * width
    g = rx.Graph()
    x = g.input("x", (2, cin, 13 * stride, 29 * stride - 1))
    w = g.param("w", rand(rng, k, cin // groups, 3, 3))
    b = g.param("b", rand(rng, k))
    fused = g.conv(x, w, bias=b, stride=stride, padding=((1, 0), (2, 1)), groups=groups, name="direct")
    r = g.input("r", tuple(fused.shape))
    g.output("y", g.relu(g.add(fused, r)))
    xs = g.input("xs", (1, 3, 11, 41))
    g.output("stem", g.relu(g.conv(xs, g.param("ws", rand(rng, min(width, 5), 3, 3, 3)), stride=stride, padding=1,
                                   name="stem")))
    exe = rx.compile(g, rx.Config(simd_width=width), algos={"direct": "nchwc_direct", "stem": "nchwc_plain_in"})
    th = {t.node.split("+")[0]: t for t in exe.thunks if t.algo != "reorder"}
    assert th["direct"].algo == "nchwc_direct"
    if blocks == 1:      # every work item a lone block: the kernel of that tile alone
        assert "kernel conv_lone: 12 pixels x 1 block" in th["direct"].why, th["direct"].why
    else:
        assert "kernel conv: " in th["direct"].why
        assert "the lone last block in 12 pixels x 1 block tiles" in th["direct"].why
    assert "residual add + relu" in th["direct"].why
    assert th["stem"].algo == "nchwc_plain_in" and "12 pixels of a row x its one block" in th["stem"].why
    feeds = {"x": rand(rng, *x.shape), "r": rand(rng, *fused.shape), "xs": rand(rng, 1, 3, 11, 41)}
    got, want = exe.run(feeds), rx.compile(g, REFERENCE).run(feeds)
    for name in ("y", "stem"):
        assert_close(got[name], want[name], TOL, f"lone block {name} {width} {blocks} {stride} {groups}")


@pytest.mark.parametrize("hw, k, kernel, claimed", [(64, 16, "conv_lone", False), (7, 16, "conv_lone", False),
                                                  (64, 32, "conv_pairs", False), (64, 48, "conv", True),
                                                  (4, 48, "conv", False), (64, 64, "conv", False)])
def test_explain_names_the_conv_kernel_and_its_tiles(hw, k, kernel, claimed):
    """explain() names the kernel that runs and its tiles: one output block (16 channels at
    16 lanes) conv_lone's 12 x 1 tiles at any plane size; pairs alone conv_pairs; quads
    and a lone last block among pairs conv, the lone block's 12-pixel tiles claimed only
    where a work item's pixels hold more than a tile and a sliver (a 4x4 plane at batch 1
    splits into 6-pixel items). The plain-input kernel's rows of 12 wherever the output is
    one block (every pixel of a row runs in tiles over its zero-padded slab, however short
    the row)."""
    g = rx.Graph()
    x = g.input("x", (1, 16, hw, hw))
    g.output("y", g.conv(x, g.param("w", np.zeros((k, 16, 3, 3), np.float32)), padding=1, name="c"))
    xs = g.input("xs", (1, 3, hw, hw))
    g.output("s", g.conv(xs, g.param("ws", np.zeros((k, 3, 3, 3), np.float32)), padding=1, name="s"))
    exe = rx.compile(g, rx.Config(simd_width=16), algos={"c": "nchwc_direct", "s": "nchwc_plain_in"})
    th = {t.node: t for t in exe.thunks}
    assert f"kernel {kernel}: " in th["c"].why, th["c"].why
    assert nchwc.kernel_for(th["c"].record.geometry.lifted(3), 16).__name__ == kernel
    assert ("lone last block in 12 pixels" in th["c"].why) == claimed, th["c"].why
    assert ("12 pixels of a row" in th["s"].why) == (k == 16), th["s"].why


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("form", ["conv_lone", "conv_pairs"])
def test_one_form_kernels_end_their_runs_on_every_length(width, form):
    """conv_lone (one output block a group: 12 x 1 steps) and conv_pairs (pairs alone) end
    a work item's run of pixels on a short step: over planes 5 x 1 .. 5 x 14 at batch 1
    and 7 x 1 .. 7 x 14 at batch 2, stride 1 and 2, the last step of a run takes every
    length from 1 to 12 pixels (conv_lone) or 1 to 6 (conv_pairs), against the reference
    kernels, with a fused residual add + relu and a plain graph output, at every width.
    (One thread: the runs a plane splits into depend on the threads planned for.)"""
    rng = np.random.default_rng(5)
    cout = width if form == "conv_lone" else 2 * width
    step = 2 * 6 if form == "conv_lone" else 6
    last_steps = set()
    for (oh, n), ow in itertools.product(((5, 1), (7, 2)), range(1, 15)):
        stride = 1 + ow % 2
        g = rx.Graph()
        x = g.input("x", (n, width + 1, oh * stride, ow * stride))
        c = g.conv(x, g.param("w", rand(rng, cout, width + 1, 3, 3)), bias=g.param("b", rand(rng, cout)),
                   stride=stride, padding=1, name="c")
        r = g.input("r", tuple(c.shape))
        g.output("y", g.relu(g.add(c, r)))
        g.output("plain", g.conv(x, g.param("w2", rand(rng, cout, width + 1, 3, 3)), stride=stride, padding=(0, 1),
                                 name="p"))
        exe = rx.compile(g, rx.Config(simd_width=width, num_threads=1),
                         algos={"c": "nchwc_direct", "p": "nchwc_direct"})
        th = {t.node.split("+")[0]: t for t in exe.thunks if t.algo != "reorder"}
        for name in ("c", "p"):
            assert th[name].algo == "nchwc_direct" and f"kernel {form}: " in th[name].why, th[name].why
            plane = int(np.prod(th[name].record.geometry.y_shape[2:]))
            chunk = th[name].tiling.tile
            last_steps |= {min(chunk, plane - start) % step or step for start in range(0, plane, chunk)}
        feeds = {"x": rand(rng, *x.shape), "r": rand(rng, *c.shape)}
        got, want = exe.run(feeds), rx.compile(g, REFERENCE).run(feeds)
        for name in ("y", "plain"):
            assert_close(got[name], want[name], TOL, f"{form} {name} {width} {oh}x{ow} {n} {stride}")
    assert last_steps == set(range(1, step + 1)), sorted(last_steps)
