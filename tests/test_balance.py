"""Work items that fall evenly on the threads (rlxpy.cpu_kernels.balance): the model of
numba's static schedule against numba itself, the splits nchwc_1x1 and nchwc_direct pick at
batch 1 (counted here by walking the kernels' own item order, tile by tile), and the
kernels' sums on those splits against the reference."""
import itertools
from math import ceil

import numba
import numpy as np
import pytest

import rlxpy as rx
from rlxpy.cpu_kernels import balance, choose, nchwc, nchwc_1x1
from rlxpy.thunks.geometry import ConvGeometry

from helpers import REFERENCE, assert_close, rand

TP = nchwc.TP
pytestmark = pytest.mark.usefixtures("every_width")   # conftest: 16 and 8 lanes on any host



@numba.njit(parallel=True, cache=True)
def _who_ran(n, out):
    for i in numba.prange(n):
        out[i] = numba.get_thread_id()


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one numba thread: nothing to split")
@pytest.mark.parametrize("n", [2, 3, 9, 15, 33, 100])
def test_shares_are_numbas_static_schedule(n):
    """Each thread runs one contiguous range of a prange, the first ones one more: the
    counts balance.shares predicts, in order."""
    saved = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        out = np.full(n, -1, np.int64)
        _who_ran(n, out)
    finally:
        numba.set_num_threads(saved)
    runs = [len(list(g)) for _, g in itertools.groupby(out)]
    assert len(runs) == 2, out                                  # two contiguous ranges
    assert runs == balance.shares([1.0] * n, 2)


def test_balance_scores_the_busiest_thread():
    assert balance.shares([3, 1, 1, 1, 1], 2) == [5.0, 2.0]       # 3 items, then 2
    assert balance.balance([1, 1, 1, 1], 2) == 1.0
    assert balance.balance([3, 1, 1, 1, 1], 2) == pytest.approx(7 / 10)
    assert balance.run_cost(14, 6, 2) == 2 + 2 / 6                # a 2-pixel sliver: a third of a tile
    assert balance.run_cost(16, 6, 2) == 3.0                      # 4 live pixels: a whole tile


def _geo(n, c, k, hw, ks):
    pad = (ks // 2,) * 2
    return ConvGeometry((n, c, hw, hw), (n, k, hw, hw), (ks, ks), (1, 1), pad, pad, (1, 1), 1)


def _tile_work(pixels, lo, hi):
    """Tiles a kernel runs for the pixels [lo, hi) of a plane: whole tiles from lo, and a
    last partial tile as a whole one unless it is a sliver at the plane's end."""
    q, work = lo, 0.0
    while q < hi:
        live = min(TP, hi - q)
        work += live / TP if (hi == pixels and live <= nchwc.SLIVER) else 1.0
        q += TP
    return work


def _threads_work(loads):
    """Each of 2 threads' work: numba's ranges, recounted here (the first gets ceil(n / 2))."""
    half = ceil(len(loads) / 2)
    return sum(loads[:half]), sum(loads[half:])


def _1x1_threads_work(g, lanes, chunk, gpairs):
    """conv1x1's items in its prange order (image, group of pairs, run of pixels)."""
    ocb = ceil(g.y_shape[1] / lanes)
    pairs = ceil(ocb / 2)
    pixels = g.y_shape[2] * g.y_shape[3]
    loads = []
    for _ in range(g.x_shape[0]):
        for gp in range(ceil(pairs / gpairs)):
            blocks = min(ocb, 2 * (gp + 1) * gpairs) - 2 * gp * gpairs
            for lo in range(0, pixels, chunk):
                loads.append(blocks / 2 * _tile_work(pixels, lo, min(pixels, lo + chunk)))
    return _threads_work(loads)


# MobileNetV2's 1x1 convs at batch 1 that the usual cut (about 8 tiles a run, 4 items a
# thread) split unevenly on 2 threads (balance 0.75-0.92 before the change)
MOBILENET_1X1 = [(144, 32, 28), (192, 64, 14), (64, 384, 14), (384, 64, 14), (384, 96, 14), (576, 96, 14)]


@pytest.mark.parametrize("c,k,hw", MOBILENET_1X1)
def test_nchwc_1x1_items_fall_evenly_at_batch_1(c, k, hw):
    g = _geo(1, c, k, hw, 1)
    chunk, gpairs = nchwc_1x1.work_split(g, 16, 2)
    a, b = _1x1_threads_work(g, 16, chunk, gpairs)
    assert chunk % TP == 0 and gpairs >= 1
    assert min(a, b) / max(a, b) >= 0.94, (chunk, gpairs, a, b)
    # the weights of a group still fit the budget
    assert gpairs * ceil(c / 16) * 16 * 16 * 2 * 4 <= max(nchwc_1x1.WEIGHT_BYTES, ceil(c / 16) * 16 * 16 * 2 * 4)


@pytest.mark.parametrize("c,k,hw", [(24, 144, 56), (64, 128, 56), (96, 576, 14)])
@pytest.mark.parametrize("n", [1, 8])
def test_nchwc_1x1_even_splits_keep_runs_of_8_tiles(c, k, hw, n):
    """Where runs of 8 tiles already fall evenly, they stay."""
    g = _geo(n, c, k, hw, 1)
    chunk, gpairs = nchwc_1x1.work_split(g, 16, 2)
    a, b = _1x1_threads_work(g, 16, chunk, gpairs)
    assert min(a, b) / max(a, b) >= balance.EVEN_ENOUGH
    assert chunk == (7 if hw == 14 else 8) * TP         # 14x14: 33 tiles as 5 runs of 7, not 4 of 8 and a sliver


def _direct_threads_work(g, lanes, chunk):
    """conv's items (pixel-major: a run of pixels through every output block, batch 1)."""
    pixels = g.y_shape[2] * g.y_shape[3]
    return _threads_work([_tile_work(pixels, lo, min(pixels, lo + chunk)) for lo in range(0, pixels, chunk)])


@pytest.mark.parametrize("c,k", [(32, 64), (64, 64)])
def test_nchwc_direct_items_fall_evenly_at_batch_1(c, k):
    """UNet's 3x3 convs at 16x16: 43 tiles, which runs of 6 split 24 + 19."""
    g = _geo(1, c, k, 16, 3)
    assert nchwc.pixel_major(g, 16)
    chunk = nchwc.items(g, 16, 2)
    a, b = _direct_threads_work(g, 16, chunk)
    assert chunk % TP == 0 and chunk >= 2 * TP                   # conv_lone steps 12 pixels
    assert min(a, b) / max(a, b) >= 0.94, (chunk, a, b)


@pytest.mark.parametrize("c,k", [(16, 32), (32, 32)])
def test_nchwc_direct_keeps_runs_of_8_tiles_where_they_are_even_enough(c, k):
    """32x32: 171 tiles in runs of 8 fall 88 + 83, within balance.EVEN_ENOUGH: they stay."""
    g = _geo(1, c, k, 32, 3)
    chunk = nchwc.items(g, 16, 2)
    a, b = _direct_threads_work(g, 16, chunk)
    assert chunk == 8 * TP and (a + b) / (2 * max(a, b)) >= balance.EVEN_ENOUGH


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("shape", ["1x1 576->96 @14", "3x3 64->64 @16"])
def test_rebalanced_splits_give_the_reference_sums(width, shape):
    """The rebalanced runs (17 tiles of a 33-tile plane, 11 of 43) end mid-row and past a
    plane's sliver: the kernels' sums on them against the reference, blocked with relu and
    plain as the graph output."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread: the usual cut stays")
    rng = np.random.default_rng(5)
    ks, c, k, hw = (1, 576, 96, 14) if shape.startswith("1x1") else (3, 64, 64, 16)
    g = rx.Graph()
    x = g.input("x", (1, c, hw, hw))
    y = g.relu(g.conv(x, g.param("w", rand(rng, k, c, ks, ks) * 0.1), bias=g.param("b", rand(rng, k)),
                      padding=ks // 2, name="first"))
    g.output("y", g.conv(y, g.param("w2", rand(rng, k, k, ks, ks) * 0.1), padding=ks // 2, name="second"))
    exe = rx.compile(g, rx.Config(simd_width=width, num_threads=2))    # the splits below are 2 threads'
    assert exe.threads == 2
    feeds = {"x": rand(rng, 1, c, hw, hw)}
    got, want = exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"]
    for th in exe.thunks:
        assert th.algo == ("nchwc_1x1" if ks == 1 else "nchwc_direct"), exe.explain()
        geo = th.record.geometry.lifted(2)
        if ks == 1:
            assert (th.tiling.tile, th.tiling.k_blocks) == nchwc_1x1.work_split(geo, width, 2)
            a, b = _1x1_threads_work(geo, width, th.tiling.tile, th.tiling.k_blocks)
        else:
            assert th.tiling.tile == nchwc.items(geo, width, 2)
            a, b = _direct_threads_work(geo, width, th.tiling.tile)
        assert min(a, b) / max(a, b) >= 0.94
    first = exe.thunks[0]
    if width == 16:      # the usual cut would not have been even: 7 tiles a run (1x1), 6 (3x3)
        usual = _1x1_threads_work(_geo(1, c, k, hw, 1), 16, 7 * TP, 1) if ks == 1 else \
            _direct_threads_work(_geo(1, c, k, hw, 3), 16, 6 * TP)
        assert min(usual) / max(usual) < 0.93 and first.tiling.tile not in (6 * TP, 7 * TP)
    assert_close(got, want, 1e-4, f"{shape} {width}")


def _dw_geo(n, c, hw, stride=1):
    o = (hw + 2 - 3) // stride + 1
    return ConvGeometry((n, c, hw, hw), (n, c, o, o), (3, 3), (stride, stride), (1, 1), (1, 1), (1, 1), c)


def _rows_each_thread_writes(g, lanes, threads, rows):
    """The output rows each thread writes, walking nchwc.depthwise's items (image, run of
    rows, channel block: the blocks innermost) in numba's static schedule."""
    cb, oh = -(-g.x_shape[1] // lanes), g.y_shape[2]
    runs = -(-oh // rows)
    items = [(n, r) for n in range(g.x_shape[0]) for r in range(runs) for _ in range(cb)]
    out, at = [], 0
    for share in map(int, balance.shares([1] * len(items), threads)):
        out.append({(n, h) for n, r in items[at:at + share] for h in range(r * rows, min(oh, (r + 1) * rows))})
        at += share
    return out


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_lone_images_depthwise_splits_its_rows_over_the_threads(lanes):
    """MobileNetV2 at batch 1: a 384-channel depthwise conv at 14x14 was one run of 14 rows,
    so its threads split the channels; in runs of 7 each thread writes half the rows, all
    channels (as the one-group 1x1 expansion before it wrote them). Where x's kernel split
    the channels, 7 rows (4 + 3), a second image, 3 threads (14 rows don't divide), and 28
    rows (already 2 runs): the usual rows."""
    g = _dw_geo(1, 384, 14)
    usual = nchwc.rows_per_item(g, lanes, 2)
    assert usual == 14 and _rows_each_thread_writes(g, lanes, 2, usual)[0] == {(0, h) for h in range(14)}
    rows = choose.depthwise_rows(g, lanes, 2)
    assert rows == 7
    assert [sorted(h for _, h in part) for part in _rows_each_thread_writes(g, lanes, 2, rows)] == \
        [list(range(7)), list(range(7, 14))]
    assert choose.depthwise_rows(_dw_geo(1, 192, 28, 2), lanes, 2) == 7       # the stride-2 one into 14x14
    assert choose.depthwise_rows(g, lanes, 2, x_splits_channels=True) == 14   # x made channels-split: follow it
    for g, threads in ((_dw_geo(1, 960, 7), 2), (_dw_geo(2, 384, 14), 2), (_dw_geo(1, 384, 14), 3),
                       (_dw_geo(1, 192, 28), 2)):
        assert choose.depthwise_rows(g, lanes, threads) == nchwc.rows_per_item(g, lanes, threads), (g, threads)


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("c,e", [(64, 384), (96, 576)])
def test_a_depthwise_conv_follows_its_expansions_split(width, c, e):
    """An inverted residual's middle at batch 1 on 2 threads: 1x1 expansion, depthwise 3x3
    with relu6 in its store, 1x1 projection. After an expansion of one group of outputs
    (split by pixels) the depthwise rows run 7 a thread; after one cut in groups of output
    channels (MobileNetV2's 96 -> 576 at 16 lanes) they stay one run of 14, each thread on
    the channels it made. Both against the reference."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one thread: the rows stay one run")
    rng = np.random.default_rng(6)
    g = rx.Graph()
    x = g.input("x", (1, c, 14, 14))
    ex = g.clip(g.conv(x, g.param("we", rand(rng, e, c, 1, 1) * 0.2), name="expand"), 0.0, 6.0)
    d = g.clip(g.conv(ex, g.param("wd", rand(rng, e, 1, 3, 3) * 0.3), bias=g.param("bd", rand(rng, e)),
                      padding=1, groups=e, name="dw"), 0.0, 6.0)
    g.output("y", g.conv(d, g.param("wp", rand(rng, c, e, 1, 1) * 0.1)))
    exe = rx.compile(g, rx.Config(simd_width=width, num_threads=2))
    th = {name: t for t in exe.thunks for name in t.node.split("+")}
    assert th["expand"].algo == "nchwc_1x1" and th["dw"].algo == "nchwc_depthwise", exe.explain()
    groups_of_channels = 2 * th["expand"].tiling.k_blocks < -(-e // width)
    if width == 16:
        assert groups_of_channels == (e == 576)
    assert th["dw"].tiling.tile == (14 if groups_of_channels else 7)
    feeds = {"x": rand(rng, 1, c, 14, 14)}
    assert_close(exe.run(feeds)["y"], rx.compile(g, REFERENCE).run(feeds)["y"], 1e-4, f"depthwise {e} {width}")
