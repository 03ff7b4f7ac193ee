"""The CPU backend's kernel choice: per record, the algo, why, tiling, and the scratch and
persistent bytes, decided from the Config, the geometry and the worker count.

Scratch sizes come from the kernel families (`*_slot_floats`); nothing here restates a
formula. Kernel names are listed in DESIGN.md; never reuse one for another kernel.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil, prod
from typing import Callable, Dict, List, Optional, Type

from ..config import Config
from ..registry import registrar
from ..thunks import records as R
from ..thunks.backend import ChoiceContext
from ..thunks.geometry import ConvGeometry
from ..thunks.records import Choice, Tiling
from .backward import weight_grad_slot_floats
from .conv2d import winograd_filter_floats, winograd_slot_floats
from .conv3d import im2col_slot_floats
from .conv_transpose import col2im_slot_floats
from ..thunks.layout import PLAIN, blocked, lanes_of
from . import direct_simd, nchwc, nchwc_1x1, nchwc_wgrad, simd, subpixel, winograd_f4

CHOOSE: Dict[Type[R.Record], Callable[[R.Record, ChoiceContext], Choice]] = {}
chooser = registrar(CHOOSE, "CPU chooser")   # @chooser(RecordType)

# Scratch (im2col columns, col2im columns, Winograd transforms) is planned into the arena;
# past this size a conv takes the reference kernel instead of asking for gigabytes.
SCRATCH_CAP_BYTES = 2 << 30

# Column tiles of about this many bytes (64 to 1024 columns): the best of 1 to 56 output
# rows per tile on the bench shapes, where a GEMM of a few hundred columns ran at about
# 95 GFLOP/s per core and one of about 100 columns at 60-70.
TILE_BYTES = 1 << 20


# the kernels that take nchwc.conv's `epi` argument, and the epilogues it applies in its store
# (a pass over y costs as much as a depthwise conv's own work when y has left the cache)
NATIVE_EPILOGUE_ALGOS = ("nchwc_direct", "nchwc_1x1", "nchwc_plain_in", "nchwc_depthwise")
NATIVE_EPILOGUE_RECORDS = (R.Conv2D, R.Conv2D1x1, R.Conv3d)
NATIVE_ACTS = {"": 0, "relu": 1, "clip": 1}


def epilogue_in_store(rec: R.Record, algo: str, y_layout) -> bool:
    """Whether a fused conv's kernel applies its epilogue in its own store (else a pass over y
    follows it): the blocked convs writing blocked y, residual add and relu / clip."""
    return (getattr(rec, "fused", False) and algo in NATIVE_EPILOGUE_ALGOS and type(rec) in NATIVE_EPILOGUE_RECORDS
            and rec.epilogue.act in NATIVE_ACTS and y_layout != PLAIN)


def choose(rec: R.Record, ctx: ChoiceContext) -> Choice:
    """The kernel for a record; a conv with a fused epilogue also stores y in the layout
    its kernel prefers (never plain instead) and reads the residual in that layout."""
    ch = _choose(rec, ctx)
    if not (isinstance(rec, R.ConvRecord) and rec.fused):
        return ch
    y_layout = ch.layout("y")
    layouts = ch.layouts + ((("r", y_layout),) if rec.r != R.ABSENT and y_layout != PLAIN else ())
    e = rec.epilogue
    what = " + ".join((["residual add"] if rec.r != R.ABSENT else []) + ([e.act] if e.act else []))
    in_store = epilogue_in_store(rec, ch.algo, y_layout)
    return replace(ch, layouts=layouts, plain_ok=tuple(p for p in ch.plain_ok if p != "y"),
                   why=f"{ch.why}; {what} in its store" if in_store else f"{ch.why}; then {what} in one pass over y")


def _choose(rec: R.Record, ctx: ChoiceContext) -> Choice:
    try:
        fn = CHOOSE[type(rec)]
    except KeyError:
        raise NotImplementedError(f"{rec.node}: the CPU backend has no chooser for {type(rec).__name__}") from None
    # precedence: a per-node override, then RLX_CONV_ALGO, then the flags and the default rule
    # (inside fn); RLX_FAST_CONV=0 sends everything to the reference kernels regardless
    if rec.node in ctx.algos:
        forced, source = ctx.algos[rec.node], f"algos[{rec.node!r}]"
    else:
        forced, source = ctx.config.conv_algo, "RLX_CONV_ALGO"
    if forced == "auto" or not ctx.config.fast_conv or type(rec) not in FORCED_TYPES:
        return fn(rec, ctx)
    make = FORCED.get((type(rec), forced))
    made = "no such kernel for this record type" if make is None else make(rec, ctx)
    if isinstance(made, Choice):
        return _capped(made if source == "RLX_CONV_ALGO" else
                       replace(made, why=made.why.replace("RLX_CONV_ALGO", source, 1)))
    ch = fn(rec, ctx)
    return replace(ch, why=f"{source}={forced} not eligible ({made}); {ch.why}")


def simd_direct_choice(g: ConvGeometry, ctx: ChoiceContext, why: str) -> Choice:
    lanes = _lanes(ctx)
    return Choice("simd_direct", f"{why} ({lanes} lanes)", 4 * direct_simd.scratch_floats(g, lanes),
                  4 * direct_simd.packed_weight_floats(g), Tiling(lanes=lanes))


def _then(passed) -> str:
    return "".join(f"; {p}" for p in passed)


def nchwc_choice(g: ConvGeometry, ctx: ChoiceContext, why: str, passed=(), roles=("x", "y")) -> Choice:
    lanes = _lanes(ctx)
    chunk = nchwc.items(g.lifted(2), lanes, ctx.threads)
    split = "pixels" if nchwc.pixel_major(g, lanes) else "output blocks"
    blocks = nchwc.tile_blocks(g, lanes)
    unit = "pair" if blocks == 2 else "quad"
    images = f", each {unit} through the batch's images" if nchwc.pair_major(g, lanes) else ""
    kernel = nchwc.kernel_for(g, lanes)
    if kernel is nchwc.conv_lone:
        tiles = f"12 pixels x 1 block of {lanes} channels a tile"
    else:
        lone = ", the lone last block in 12 pixels x 1 block tiles" if nchwc.lone_block_tiles(g, lanes, chunk) else ""
        tiles = f"6 pixels x {blocks} blocks of {lanes} channels a tile{lone}"
    return _capped(Choice("nchwc_direct", f"{why} (NCHW{lanes}c, kernel {kernel.__name__}: {tiles}, {split} split "
                                          f"over the threads{images}){_then(passed)}",
                          0, 4 * nchwc.packed_floats(g.lifted(2), lanes),
                          Tiling(tile=chunk, k_blocks=nchwc.pair_group(g, lanes), lanes=lanes),
                          ((roles[0], blocked(lanes)), (roles[1], blocked(lanes))), plain_ok=(roles[1],)))


def nchwc_1x1_choice(g: ConvGeometry, ctx: ChoiceContext, why: str, passed=()) -> Choice:
    lanes = _lanes(ctx)
    chunk, pairs = nchwc_1x1.work_split(g.lifted(2), lanes, ctx.threads)
    blocks = min(2 * pairs, -(-g.y_shape[1] // lanes))
    three = ", the last three blocks in 4 x 3 tiles" if nchwc_1x1.last_three_tiled(g.lifted(2), lanes, pairs) else ""
    return _capped(Choice("nchwc_1x1", f"{why} (NCHW{lanes}c GEMM: each 6-pixel tile of x through {blocks} output "
                                       f"blocks of {lanes} channels a work item{three}){_then(passed)}",
                          0, 4 * nchwc.packed_floats(g.lifted(2), lanes),
                          Tiling(tile=chunk, k_blocks=pairs, lanes=lanes),
                          (("x", blocked(lanes)), ("y", blocked(lanes))), plain_ok=("y",),
                          splits_channels=g.x_shape[0] < ctx.threads and blocks < -(-g.y_shape[1] // lanes)))


def blocked_conv_choice(g: ConvGeometry, ctx: ChoiceContext, why: str, passed=()) -> Choice:
    """The default's blocked kernel for a conv: nchwc_1x1 for a pointwise one, else nchwc_direct."""
    if nchwc_1x1.eligible(g, _lanes(ctx)) is None:
        return nchwc_1x1_choice(g, ctx, why, passed)
    return nchwc_choice(g, ctx, why, passed)


def transposed_reason(rec, eligible) -> Optional[str]:
    """None when a transposed conv or input gradient, as the forward conv it equals
    (nchwc.as_forward: stride 1), is one `eligible(geometry)` accepts; else why not."""
    fwd = nchwc.as_forward(rec)
    return fwd if isinstance(fwd, str) else eligible(fwd[0])


def transposed_nchwc_choice(rec, ctx: ChoiceContext, why: str) -> Choice:
    g, x_role, y_role = nchwc.as_forward(rec)
    return nchwc_choice(g, ctx, f"{why}: the forward conv with flipped, transposed weights", roles=(x_role, y_role))


# Past this share of padded channels (in x out, over the real ones) the blocked kernel's
# wasted FMAs cost more than im2col's column fill: the RGB stem (3 -> 64 at 8 lanes: 2.7x).
# Still the rule for stride-1 transposed convs and the weight gradient; for forward convs
# only what explain() says (_blocked_or_im2col: the blocked kernel beat im2col at any padding).
NCHWC_MAX_WASTE = 1.34


def plain_in_choice(g: ConvGeometry, ctx: ChoiceContext, why: str, passed=()) -> Choice:
    lanes = _lanes(ctx)
    rows = nchwc.plain_in_rows(g.lifted(2), ctx.threads)
    tile = (f"12 pixels of a row x its one block of {lanes} channels" if nchwc.plain_in_lone_tiles(g.lifted(2), lanes)
            else f"6 pixels of a row x 2 blocks of {lanes} channels")
    how = f"x read plain, a run of rows at a time into a zero-padded slab, y NCHW{lanes}c: {tile} a tile"
    return _capped(Choice("nchwc_plain_in", f"{why} ({how}){_then(passed)}",
                          0, 4 * nchwc.plain_in_packed_floats(g.lifted(2), lanes), Tiling(tile=rows, lanes=lanes),
                          (("y", blocked(lanes)),), plain_ok=("y",)))


def depthwise_rows(g: ConvGeometry, lanes: int, threads: int, x_splits_channels: bool = False) -> int:
    """Output rows per work item of nchwc_depthwise: nchwc.rows_per_item's, except where the
    images (and output planes) are fewer than the threads and one run of rows covers the
    plane: its items are then channel blocks, so the threads split the channels, while the
    kernel before it (a 1x1 expansion of one group of outputs, a direct conv) split the
    pixels, and each core would read what the other wrote. There, unless x's kernel split
    the channels too, the rows are cut in one run a thread, where they divide evenly.
    MobileNetV2 at batch 1 (Zen4, 2 threads), expansion + depthwise + projection: 64 -> 384
    at 14x14 0.1377 -> 0.1339 ms, the stride-2 one into 14x14 0.1065 -> 0.1028; after a
    96 -> 576 expansion cut in two groups of channels, runs of 7 rows were slower (0.2573 ->
    0.2603), so there the rows stay whole; 7 rows as 4 + 3 are not cut."""
    rows = nchwc.rows_per_item(g, lanes, threads)
    oh = g.y_shape[-2]
    if (not x_splits_channels and g.x_shape[0] * prod(g.y_shape[2:-2]) < threads and -(-oh // rows) < threads
            and oh % threads == 0):
        return oh // threads
    return rows


def depthwise_choice(g: ConvGeometry, ctx: ChoiceContext, why: str, passed=()) -> Choice:
    lanes = _lanes(ctx)
    return _capped(Choice("nchwc_depthwise", f"{why} (NCHW{lanes}c: one vector of {lanes} channels a tap, 6 "
                                             f"pixels of a row a tile){_then(passed)}",
                          0, 4 * nchwc.depthwise_packed_floats(g.lifted(2), lanes),
                          Tiling(tile=depthwise_rows(g.lifted(2), lanes, ctx.threads, ctx.x_splits_channels),
                                 lanes=lanes),
                          (("x", blocked(lanes)), ("y", blocked(lanes))), plain_ok=("y",)))


def winograd_f4_choice(g: ConvGeometry, ctx: ChoiceContext, why: str, roles=("x", "y")) -> Choice:
    lanes = _lanes(ctx)
    if winograd_f4.on_the_fly(g, lanes):
        kq = winograd_f4.fly_split(g, lanes, ctx.threads)
        u_mib = winograd_f4.u_bytes(g, lanes) / 2 ** 20
        return _capped(Choice("winograd_f4", f"{why} (F(4x4,3x3) on NCHW{lanes}c, filters transformed on the fly: "
                                             f"{winograd_f4.tile_groups(g, lanes)} group(s) of "
                                             f"{winograd_f4.fly_tiles(lanes)} tiles, against {u_mib:.1f} MiB of "
                                             f"transformed filters read every run; {kq} run(s) of output-channel "
                                             f"blocks a group)",
                              ctx.threads * 4 * winograd_f4.fly_slot_floats(g, lanes),
                              4 * winograd_f4.fly_packed_floats(g, lanes),
                              Tiling(tile=winograd_f4.fly_tiles(lanes), k_blocks=kq, lanes=lanes),
                              ((roles[0], blocked(lanes)), (roles[1], blocked(lanes))), plain_ok=(roles[1],)))
    tb, kg = winograd_f4.work_split(g, lanes, ctx.threads)
    return _capped(Choice("winograd_f4", f"{why} (F(4x4,3x3) on NCHW{lanes}c, {tb} tiles x {kg} output-channel "
                                         f"group{'s' if kg > 1 else ''} a work item)",
                          ctx.threads * 4 * winograd_f4.slot_floats(g, lanes, tb),
                          4 * winograd_f4.packed_floats(g, lanes), Tiling(tile=tb, k_blocks=kg, lanes=lanes),
                          ((roles[0], blocked(lanes)), (roles[1], blocked(lanes))), plain_ok=(roles[1],)))


def transposed_f4_choice(rec, ctx: ChoiceContext, why: str) -> Choice:
    g, x_role, y_role = nchwc.as_forward(rec)
    return winograd_f4_choice(g, ctx, f"{why}: the forward 3x3 conv with flipped, transposed weights",
                              roles=(x_role, y_role))


def nchwc_default_reason(g: ConvGeometry, lanes: int) -> Optional[str]:
    """None when the default rule takes nchwc_direct, else why not."""
    why = nchwc.eligible(g, lanes)
    if why is not None:
        return f"no vector kernel: {why}"
    c, k = g.x_shape[1], g.y_shape[1]
    waste = (-(-c // lanes) * -(-k // lanes) * lanes * lanes) / (c * k) if g.groups == 1 else 1.0
    if waste > NCHWC_MAX_WASTE:
        return f"{c} -> {k} channels would be {waste:.1f}x padded in blocks of {lanes}"
    return None


def _lanes(ctx: ChoiceContext) -> int:
    return simd.resolve_width(ctx.config.simd_width)


def _forced(build, reason=lambda rec, ctx: None):
    """An RLX_CONV_ALGO entry: build(rec, ctx) when reason(rec, ctx) is None, else the reason."""
    def make(rec, ctx):
        r = reason(rec, ctx)
        return build(rec, ctx) if r is None else r
    return make


def _of_geometry(reason):
    """A reason(geometry) as an RLX_CONV_ALGO entry's reason(rec, ctx)."""
    return lambda rec, ctx: reason(rec.geometry)


def _forced_winograd(rec, ctx):
    return choose_conv2d(rec, ChoiceContext(ctx.config.replace(winograd=True, direct_conv=False), ctx.threads))


def _forced_direct(rec, ctx):
    return choose_conv2d(rec, ChoiceContext(ctx.config.replace(winograd=False, direct_conv=True), ctx.threads))


_WHY = "RLX_CONV_ALGO"
_FORCED_SIMD_DIRECT = _forced(lambda rec, ctx: simd_direct_choice(rec.geometry, ctx, f"{_WHY}=simd_direct"),
                              _of_geometry(direct_simd.eligible))
_FORCED_NCHWC = _forced(lambda rec, ctx: nchwc_choice(rec.geometry, ctx, f"{_WHY}=nchwc_direct"),
                        lambda rec, ctx: nchwc.eligible(rec.geometry, _lanes(ctx)))
_FORCED_1X1 = _forced(lambda rec, ctx: nchwc_1x1_choice(rec.geometry, ctx, f"{_WHY}=nchwc_1x1"),
                      lambda rec, ctx: nchwc_1x1.eligible(rec.geometry, _lanes(ctx)))
_FORCED_PLAIN_IN = _forced(lambda rec, ctx: plain_in_choice(rec.geometry, ctx, f"{_WHY}=nchwc_plain_in"),
                           lambda rec, ctx: nchwc.plain_in_eligible(rec.geometry, _lanes(ctx)))
_FORCED_TRANSPOSED_NCHWC = _forced(lambda rec, ctx: transposed_nchwc_choice(rec, ctx, f"{_WHY}=nchwc_direct"),
                                   lambda rec, ctx: transposed_reason(rec, lambda g: nchwc.eligible(g, _lanes(ctx))))
_FORCED_DEPTHWISE = _forced(lambda rec, ctx: depthwise_choice(rec.geometry, ctx, f"{_WHY}=nchwc_depthwise"),
                            _of_geometry(nchwc.depthwise_eligible))
def _forced_parallel(family: str):
    """An RLX_CONV_ALGO=parallel entry: the per-plane kernel of a family."""
    return lambda rec, ctx: parallel(family, ctx.config, f"{_WHY}=parallel: over the N*C planes")


_FORCED_SUBPIXEL = _forced(lambda rec, ctx: subpixel_choice(rec, ctx, f"{_WHY}=nchwc_subpixel"),
                           lambda rec, ctx: subpixel.eligible(rec, _lanes(ctx)))
_FORCED_TRANSPOSED_F4 = _forced(lambda rec, ctx: transposed_f4_choice(rec, ctx, f"{_WHY}=winograd_f4"),
                                lambda rec, ctx: transposed_reason(rec, winograd_f4.eligible))
# (record type, algo) -> make(rec, ctx): a Choice, or why that algo can't run the record
FORCED = {
    (R.Conv2D, "naive"): lambda rec, ctx: Choice("naive", f"{_WHY}=naive: reference kernel"),
    (R.Conv2D1x1, "naive"): lambda rec, ctx: Choice("naive", f"{_WHY}=naive: reference kernel"),
    (R.Conv3d, "naive"): lambda rec, ctx: Choice("naive", f"{_WHY}=naive: reference kernel"),
    (R.ConvTranspose2d, "naive"): lambda rec, ctx: Choice("naive", f"{_WHY}=naive: reference kernel"),
    (R.ConvTranspose3d, "naive"): lambda rec, ctx: Choice("naive", f"{_WHY}=naive: reference kernel"),
    (R.Conv2dBackwardInput, "naive"): lambda rec, ctx: Choice("naive", f"{_WHY}=naive: reference kernel"),
    (R.Conv2dBackwardWeight, "naive"): lambda rec, ctx: Choice("naive", f"{_WHY}=naive: reference kernel"),
    (R.Conv2D, "im2col"): lambda rec, ctx: im2col_choice(rec.geometry, ctx, f"{_WHY}=im2col"),
    (R.Conv2dBackwardWeight, "im2col"): lambda rec, ctx: im2col_weight_grad_choice(rec.geometry, ctx,
                                                                                   f"{_WHY}=im2col"),
    (R.Conv2dBackwardWeight, "nchwc_wgrad"): _forced(lambda rec, ctx: wgrad_choice(rec.geometry, ctx,
                                                                                   f"{_WHY}=nchwc_wgrad"),
                                                     lambda rec, ctx: nchwc_wgrad.eligible(rec.geometry, _lanes(ctx))),
    (R.Conv3d, "im2col"): lambda rec, ctx: im2col_choice(rec.geometry, ctx, f"{_WHY}=im2col"),
    (R.Conv2D, "winograd"): _forced(_forced_winograd, _of_geometry(lambda g: winograd_reason(g))),   # defined below
    (R.Conv2D, "direct"): _forced(_forced_direct, _of_geometry(lambda g: direct_reason(g))),
    (R.Conv2D, "depthwise"): _forced(lambda rec, ctx: Choice("depthwise", f"{_WHY}=depthwise"),
                                     _of_geometry(lambda g: None if is_depthwise(g)
                                                  else "more than one input channel per group")),
    # forcing names the kernel's own choice, not the default rule (which may take a vector kernel)
    (R.Conv2D1x1, "gemm1x1"): lambda rec, ctx: gemm1x1_choice(rec, ctx, f"{_WHY}=gemm1x1"),
    (R.ConvTranspose2d, "col2im"): lambda rec, ctx: col2im_choice("conv_transpose2d", rec.geometry, ctx, True),
    (R.ConvTranspose3d, "col2im"): lambda rec, ctx: col2im_choice("conv_transpose3d", rec.geometry, ctx, True),
    (R.Conv2dBackwardInput, "col2im"): lambda rec, ctx: col2im_choice("conv2d_backward_input", rec.geometry, ctx,
                                                                      False),
    (R.Conv2D, "simd_direct"): _FORCED_SIMD_DIRECT,
    (R.Conv2D1x1, "simd_direct"): _FORCED_SIMD_DIRECT,
    (R.Conv2D, "nchwc_direct"): _FORCED_NCHWC,
    (R.Conv2D1x1, "nchwc_direct"): _FORCED_NCHWC,
    (R.Conv2D, "nchwc_1x1"): _FORCED_1X1,
    (R.Conv2D1x1, "nchwc_1x1"): _FORCED_1X1,
    (R.Conv2D, "nchwc_plain_in"): _FORCED_PLAIN_IN,
    (R.Conv2D1x1, "nchwc_plain_in"): _FORCED_PLAIN_IN,
    (R.Conv2D, "nchwc_depthwise"): _FORCED_DEPTHWISE,
    (R.ConvTranspose2d, "winograd_f4"): _FORCED_TRANSPOSED_F4,
    (R.Conv2dBackwardInput, "winograd_f4"): _FORCED_TRANSPOSED_F4,
    (R.ConvTranspose2d, "nchwc_direct"): _FORCED_TRANSPOSED_NCHWC,
    (R.Conv2dBackwardInput, "nchwc_direct"): _FORCED_TRANSPOSED_NCHWC,
    (R.Conv2D, "winograd_f4"): _forced(lambda rec, ctx: winograd_f4_choice(rec.geometry, ctx, f"{_WHY}=winograd_f4"),
                                       _of_geometry(winograd_f4.eligible)),
    (R.Pool2D, "parallel"): _forced_parallel("pool2d"),
    (R.MaxPool2dBackward, "parallel"): _forced_parallel("max_pool2d_backward"),
    (R.MaxPool2dBackward, "nchwc_pool_backward"): lambda rec, ctx: pool_backward_choice(rec, ctx,
                                                                                        f"{_WHY}=nchwc_pool_backward"),
    (R.Pool3D, "parallel"): _forced_parallel("pool3d"),
    (R.Pool2D, "nchwc_pool"): lambda rec, ctx: nchwc_pool_choice(rec, ctx),     # defined below
    (R.Pool3D, "nchwc_pool"): lambda rec, ctx: nchwc_pool_choice(rec, ctx),
    (R.Conv3d, "nchwc_direct"): _FORCED_NCHWC,
    (R.Conv3d, "nchwc_plain_in"): _FORCED_PLAIN_IN,
    (R.Conv3d, "nchwc_depthwise"): _FORCED_DEPTHWISE,
    (R.ConvTranspose3d, "nchwc_direct"): _FORCED_TRANSPOSED_NCHWC,
    (R.ConvTranspose2d, "nchwc_subpixel"): _FORCED_SUBPIXEL,
    (R.ConvTranspose3d, "nchwc_subpixel"): _FORCED_SUBPIXEL,
    (R.Conv2dBackwardInput, "nchwc_subpixel"): _FORCED_SUBPIXEL,
}
FORCED_TYPES = frozenset(t for t, _ in FORCED)


def reference(family: str, config: Config) -> Choice:
    if not config.fast_conv:
        return Choice("naive", "RLX_FAST_CONV=0: reference kernel")
    return Choice("naive", f"no fast {family} kernel: reference kernel")


def parallel(family: str, config: Config, why: str = "parallel over the N*C planes") -> Choice:
    if not config.fast_conv:
        return reference(family, config)
    return Choice("parallel", why)


def _capped(choice: Choice) -> Choice:
    if choice.scratch_bytes + choice.persistent_bytes <= SCRATCH_CAP_BYTES:
        return choice
    return Choice("naive", f"{choice.algo} would need {choice.scratch_bytes + choice.persistent_bytes} bytes "
                           f"of scratch (cap {SCRATCH_CAP_BYTES}): reference kernel")


def _split(items: int, threads: int, limit: int) -> int:
    """How many blocks to cut each item into so that there is work for every thread."""
    return max(1, min(limit, ceil(threads / items))) if items < threads else 1


def _row_tiles(rows: int, row_len: int, ck: int, items_per_tile: int, threads: int) -> int:
    """Output rows per column tile: about TILE_BYTES of columns, at least one row, enough
    tiles that every thread has one, and, where a nearby size allows it, a whole number of
    items per thread (numba's prange splits its range statically: 7 items on 2 threads
    run as 4 + 3)."""
    cols = max(64, min(1024, TILE_BYTES // (4 * ck)))
    tile = max(1, min(rows, cols // row_len))
    while tile > 1 and items_per_tile * ceil(rows / tile) < threads:
        tile = ceil(tile / 2)
    for t in range(tile, max(1, tile // 2) - 1, -1):
        if items_per_tile * ceil(rows / t) % threads == 0:
            return t
    return tile


def im2col_choice(g: ConvGeometry, ctx: ChoiceContext, why: str) -> Choice:
    g3 = g.lifted(3)
    n, groups, threads = g3.x_shape[0], g3.groups, ctx.threads
    rows, row_len = prod(g3.y_shape[2:-1]), g3.y_shape[-1]
    ck = g3.cin_g * g3.taps
    k_blocks = 1
    if n * groups < threads and g3.cout_g * ck >= (1 << 20):   # weights over 4 MiB: split them, not the columns
        k_blocks = _split(n * groups, threads, g3.cout_g)
    tile = _row_tiles(rows, row_len, ck, n * groups * k_blocks, threads)
    return _capped(Choice("im2col", why, ctx.threads * 4 * im2col_slot_floats(g3, tile), 0, Tiling(tile, k_blocks)))


def _winograd_block(tiles: int) -> int:
    """2x2 tiles per work item. Measured on this 2-core machine (bench/conv_suite.py shapes):
    about a quarter of an image's tiles, 32 to 196, was best: big enough for the 16 GEMMs to
    run well, small enough that both workers get blocks."""
    return min(tiles, max(32, min(196, ceil(tiles / 4))))


def _not_taken(name: str, flag: str, requested: bool, reason: Optional[str]) -> str:
    if not requested:
        return f"{flag} off"
    return f"{name} requested but {reason}"


winograd_reason = winograd_f4.winograd_reason   # F(2x2,3x3) and F(4x4,3x3) take the same convs


def direct_reason(g: ConvGeometry) -> Optional[str]:
    if any(s != 1 for s in g.stride):
        return f"stride {tuple(g.stride)}"
    if any(d != 1 for d in g.dilation):
        return f"dilation {tuple(g.dilation)}"
    return None


def is_depthwise(g: ConvGeometry) -> bool:
    """One input channel per group: depthwise (groups == C_in == C_out), channel multipliers,
    and single-channel inputs such as MNIST's first conv (im2col there has K = kh*kw)."""
    return g.x_shape[1] == g.groups


@chooser(R.Conv2D)
def choose_conv2d(rec: R.Conv2D, ctx: ChoiceContext) -> Choice:
    """Precedence: Winograd (RLX_WINOGRAD), direct (RLX_DIRECT_CONV), depthwise, im2col+GEMM,
    and the reference kernel when the im2col scratch would pass its cap."""
    config, g = ctx.config, rec.geometry
    if not config.fast_conv:
        return reference("conv2d", config)
    c, k = g.x_shape[1], g.y_shape[1]
    passed: List[str] = []
    wino = winograd_reason(g)
    if config.winograd == "f4" and wino is None and winograd_f4.eligible(g) is None:
        return winograd_f4_choice(g, ctx, "RLX_WINOGRAD=f4: 3x3, stride 1, dilation 1, groups 1")
    if config.winograd is True and wino is None:
        tiles = g.x_shape[0] * ceil(g.y_shape[2] / 2) * ceil(g.y_shape[3] / 2)
        block = _winograd_block(tiles)
        k_blocks = _split(ceil(tiles / block), ctx.threads, max(1, k // 32))
        return _capped(Choice("winograd", "RLX_WINOGRAD on: 3x3, stride 1, dilation 1, groups 1",
                              ctx.threads * 4 * winograd_slot_floats(c, k, block, k_blocks),
                              4 * winograd_filter_floats(c, k), Tiling(block, k_blocks)))
    passed.append(_not_taken("winograd", "RLX_WINOGRAD", config.winograd, wino))
    direct = direct_reason(g)
    if config.direct_conv and direct is None:
        return Choice("direct", "RLX_DIRECT_CONV on: stride 1, dilation 1; " + "; ".join(passed))
    passed.append(_not_taken("direct", "RLX_DIRECT_CONV", config.direct_conv, direct))
    lanes = simd.resolve_width(config.simd_width)
    if lanes == 1:      # no vectors (RLX_SIMD_WIDTH=1): the blocked kernels run scalar, BLAS is faster
        passed.append("vector kernels: RLX_SIMD_WIDTH=1")
    vec = _few_channels_or_depthwise(g, ctx, lanes, passed)
    if vec is not None:
        return vec
    if is_depthwise(g):
        return Choice("depthwise", "one input channel per group: per-channel kernel; " + "; ".join(passed))
    return _blocked_or_im2col(g, ctx, lanes, passed)


def _few_channels_or_depthwise(g: ConvGeometry, ctx: ChoiceContext, lanes: int, passed) -> Optional[Choice]:
    """The default's first vector kernels (2-D and 3-D): x read plain for fewer input
    channels than lanes, the blocked depthwise kernel for multiplier 1; else None."""
    if lanes > 1 and g.groups == 1 and g.x_shape[1] < lanes and nchwc.plain_in_eligible(g, lanes) is None:
        return plain_in_choice(g, ctx, f"vector direct conv, {g.x_shape[1]} input channels (< {lanes} lanes)",
                               passed)
    if lanes > 1 and nchwc.depthwise_eligible(g) is None:
        return depthwise_choice(g, ctx, "depthwise on vectors of channels", passed)
    return None


def _blocked_or_im2col(g: ConvGeometry, ctx: ChoiceContext, lanes: int, passed) -> Choice:
    """The default's last step: the blocked conv wherever it can run, whatever its padded
    channels cost; else im2col + GEMM."""
    blocked_why = "RLX_SIMD_WIDTH=1" if lanes == 1 else nchwc_default_reason(g, lanes)
    if blocked_why is None:
        return blocked_conv_choice(g, ctx, "vector conv", passed)
    if lanes > 1 and nchwc.eligible(g, lanes) is None:
        # refused for its padded channels alone, yet still faster: on the Zen5 of 2026-12-05
        # (single convs at batch 1, the reorder of x included, ms, nchwc_direct / im2col) 16
        # lanes 20 -> 20 @56 0.173 / 0.291, 20 -> 50 5x5 @24 0.112 / 0.155, 36 -> 36 @28 0.090
        # / 0.153, 64 -> 1 @56 (16x padded outputs) 0.156 / 0.497; 8 lanes 20 -> 20 @56 0.159
        # / 0.291, 12 -> 30 @56 0.135 / 0.243. (Reading x plain, nchwc_plain_in, was faster
        # alone where x's own padding is large, 0.137 on 20 -> 20 at 16 lanes, but after a
        # blocked producer it costs a reorder to plain: the blocked kernel keeps chains in
        # one layout.)
        return blocked_conv_choice(g, ctx, f"vector conv ({blocked_why}: still faster than im2col)", passed)
    return im2col_choice(g, ctx, f"im2col+GEMM ({blocked_why}); " + "; ".join(passed))


@chooser(R.Conv2D1x1)
def choose_conv2d_1x1(rec: R.Conv2D1x1, ctx: ChoiceContext) -> Choice:
    if not ctx.config.fast_conv:
        return reference("conv2d_1x1", ctx.config)
    lanes = _lanes(ctx)
    blocked_why = "RLX_SIMD_WIDTH=1" if lanes == 1 else nchwc_default_reason(rec.geometry, lanes)
    if blocked_why is None:
        # even alone, with a reorder on each side: pointwise 144 -> 24 @56 0.40 ms against
        # gemm1x1's 0.59 (bench/conv_suite.py); between blocked neighbours no reorder at all
        return nchwc_1x1_choice(rec.geometry, ctx, "1x1 as the blocked GEMM (faster than gemm1x1 even with a "
                                                   "reorder on each side)")
    if lanes > 1 and rec.geometry.x_shape[1] >= lanes and nchwc.eligible(rec.geometry, lanes) is None:
        # padded channels too, from a whole block of inputs up (Zen5, batch 1, alone with the
        # reorders, ms, nchwc_1x1 / gemm1x1): 16 lanes 20 -> 50 @56 0.054 / 0.069, 64 -> 4
        # @56 0.045 / 0.060, 100 -> 20 @28 0.031 / 0.044; 8 lanes 20 -> 50 0.059 / 0.074,
        # 64 -> 4 0.043 / 0.060; 36 -> 36 @28 a tie at both widths. Fewer input channels
        # than lanes (not measured) keep the GEMM, which reads x in place.
        return nchwc_1x1_choice(rec.geometry, ctx, f"1x1 as the blocked GEMM ({blocked_why}: still faster than "
                                                   "gemm1x1)")
    if lanes > 1 and ctx.near_blocked and few_outputs_head(rec.geometry, lanes):
        # a head after a blocked conv (a U-Net's 16 -> 2 @64): the padded output lanes cost
        # FMAs on a memory-bound conv, gemm1x1 a reorder of x to plain first: batch 8, 0.085 ms
        # against 0.079 + 0.200. Alone (x plain), gemm1x1 reads x in place.
        return nchwc_1x1_choice(rec.geometry, ctx, f"1x1 to fewer channels than {lanes} lanes after a blocked "
                                                   "neighbour, x in whole blocks: the blocked GEMM writing y plain "
                                                   "(no reorder of x)")
    return gemm1x1_choice(rec, ctx, f"1x1, stride 1, unpadded, groups 1 ({blocked_why})")


def few_outputs_head(g: ConvGeometry, lanes: int) -> bool:
    """A pointwise conv to fewer output channels than lanes from input channels in whole
    blocks (no padded input lane): only the output block is padded."""
    return g.y_shape[1] < lanes and g.x_shape[1] % lanes == 0


def gemm1x1_choice(rec: R.Conv2D1x1, ctx: ChoiceContext, why: str = "1x1, stride 1, unpadded, groups 1") -> Choice:
    x = rec.geometry.x_shape
    n, p = x[0], x[2] * x[3]
    # about 256 columns a tile (the pointwise bench case: 0.21 ms at 128-256 columns, 0.3-0.8
    # above), and a whole number of tiles per thread when one image is split
    per_image = ctx.threads * ceil(p / (ctx.threads * 256)) if n < ctx.threads else ceil(p / 256)
    return Choice("gemm1x1", f"{why}: one GEMM per image", tiling=Tiling(tile=ceil(p / per_image)))


@chooser(R.Conv3d)
def choose_conv3d(rec: R.Conv3d, ctx: ChoiceContext) -> Choice:
    """The 2-D default's vector kernels, per depth tap: plain input, depthwise, blocked; else
    im2col + GEMM."""
    if not ctx.config.fast_conv:
        return reference("conv3d", ctx.config)
    lanes, passed = _lanes(ctx), []
    if lanes == 1:
        passed.append("vector kernels: RLX_SIMD_WIDTH=1")
    return _few_channels_or_depthwise(rec.geometry, ctx, lanes, passed) or _blocked_or_im2col(rec.geometry, ctx,
                                                                                                lanes, passed)


def col2im_choice(family: str, g: ConvGeometry, ctx: ChoiceContext, transposed_in: bool) -> Choice:
    """Transposed convs and conv input gradients: GEMM into columns + col2im. For a
    transposed conv the geometry's x is its input; for an input gradient the GEMM reads dy."""
    if not ctx.config.fast_conv:
        return reference(family, ctx.config)
    n, groups = g.x_shape[0], g.groups
    if transposed_in:       # ConvTranspose: reads x [N, C_in, ...], writes y
        pin, out_per_group = prod(g.x_shape[2:]), g.cout_g
    else:                   # backward input: reads dy (= y), writes dx (= x)
        pin, out_per_group = prod(g.y_shape[2:]), g.cin_g
    k_blocks = _split(n * groups, ctx.threads, out_per_group)
    scratch = ctx.threads * 4 * col2im_slot_floats(out_per_group, k_blocks, g.taps, pin)
    return _capped(Choice("col2im", "GEMM into columns + col2im", scratch, 0, Tiling(0, k_blocks)))


def _vector_transposed(rec, ctx: ChoiceContext) -> Optional[Choice]:
    """The default for a stride-1 transposed conv or input gradient: nchwc_direct on the
    forward conv it equals, where that conv would take it. (Strided ones keep col2im:
    nchwc_subpixel ran 0.8-0.9x its speed on 4 of 5 decoder shapes on an AVX2 EPYC, see
    README.)"""
    lanes = _lanes(ctx)
    if ctx.config.fast_conv and ctx.config.winograd == "f4" and transposed_reason(rec, winograd_f4.eligible) is None:
        return transposed_f4_choice(rec, ctx, "RLX_WINOGRAD=f4, stride 1")
    if not ctx.config.fast_conv or lanes == 1:
        return None
    if transposed_reason(rec, lambda g: nchwc.eligible(g, lanes)) is not None:
        return None
    if nchwc_default_reason(nchwc.as_forward(rec)[0], lanes) is not None:
        return None
    return transposed_nchwc_choice(rec, ctx, "stride 1")


def subpixel_choice(rec, ctx: ChoiceContext, why: str) -> Choice:
    lanes = _lanes(ctx)
    src, dst = subpixel.roles(rec)
    how = (f"kernel = stride: its {prod(rec.geometry.kernel)} phases as one 1x1 vector conv, then each input "
           f"pixel's patch to its place (NCHW{lanes}c)" if subpixel.patches(rec) else
           f"one stride-1 vector conv per output phase ({len(subpixel.phases(rec))} of them, NCHW{lanes}c)")
    return _capped(Choice("nchwc_subpixel", f"{why}: {how}",
                          4 * subpixel.scratch_floats(rec, lanes), 4 * subpixel.persistent_floats(rec, lanes),
                          Tiling(lanes=lanes), ((src, blocked(lanes)), (dst, blocked(lanes))),
                          strided_out=(dst,) if subpixel.patches(rec) else ()))


# A strided 2-D transposed conv at 16 lanes takes nchwc_subpixel from this much work on:
# on a Zen5 EPYC (AVX-512, 2 threads) it ran 1.4-2.0x col2im on seven of nine decoder shapes
# (8x256@16 4x4 s2: 4.9 against 9.9 ms; 1x64@56 2x2 s2: 0.62 against 0.91), even at 37.7
# MFLOP (32@64 3x3 s2: 0.37 against 0.40) and lost only the UNet's 4.2 MFLOP 64@16 2x2 s2 at
# batch 1 (0.060 against 0.047: four phase launches for little work). At 8 lanes (AVX2
# EPYCs) it ran 0.8-0.9x col2im, which stays the default there.
SUBPIXEL_MIN_LANES = 16
SUBPIXEL_MIN_FLOPS = 8e6
# Where the kernel equals the stride (subpixel.patches: one 1x1 conv of all phases, one
# scatter) it takes any width from this much work on: on the Zen5 EPYC, 2x2 s2 decoder
# shapes (64 -> 32 @16 at batch 1 and 8, 128 -> 64 @28, 256 -> 128 @14, 8 x 32 -> 16 @64)
# ran 2.1-2.5x col2im plus its reorder at 16 lanes and 1.2-1.9x at 8; a 16 -> 16 @8 3x3 s3
# (0.3 MFLOP) 1.13x; a 3 -> 8 @32 2x2 s2 (0.2 MFLOP, channels padded 5x) 0.46-0.93x.
PATCHES_MIN_FLOPS = 1e6


def _subpixel_default(rec, ctx: ChoiceContext) -> Optional[Choice]:
    g, lanes = rec.geometry, _lanes(ctx)
    if (not ctx.config.fast_conv or lanes == 1 or max(g.stride) == 1
            or subpixel.eligible(rec, lanes) is not None):
        return None
    # a multiply-add per input value, tap and output channel of its group
    src, dst = subpixel.src_dst(rec)
    flops = 2 * prod(src) * prod(g.kernel) * (dst[1] // g.groups)
    if subpixel.patches(rec):
        if flops < PATCHES_MIN_FLOPS:
            return None
        return subpixel_choice(rec, ctx, f"from {PATCHES_MIN_FLOPS / 1e6:g} MFLOP at any width")
    if lanes < SUBPIXEL_MIN_LANES or len(g.kernel) != 2 or flops < SUBPIXEL_MIN_FLOPS:
        return None
    return subpixel_choice(rec, ctx, f"strided, {SUBPIXEL_MIN_LANES} lanes")


@chooser(R.ConvTranspose2d)
@chooser(R.ConvTranspose3d)
def choose_conv_transpose(rec, ctx: ChoiceContext) -> Choice:
    family = "conv_transpose3d" if isinstance(rec, R.ConvTranspose3d) else "conv_transpose2d"
    if (vec := _vector_transposed(rec, ctx)) is not None:
        return vec
    if (sub := _subpixel_default(rec, ctx)) is not None:
        return sub
    return col2im_choice(family, rec.geometry, ctx, transposed_in=True)


@chooser(R.Conv2dBackwardInput)
def choose_conv2d_backward_input(rec, ctx: ChoiceContext) -> Choice:
    if (vec := _vector_transposed(rec, ctx)) is not None:
        return vec
    if subpixel.patches(rec) and (sub := _subpixel_default(rec, ctx)) is not None:
        return sub
    return col2im_choice("conv2d_backward_input", rec.geometry, ctx, transposed_in=False)


def wgrad_choice(g: ConvGeometry, ctx: ChoiceContext, why: str) -> Choice:
    lanes = _lanes(ctx)
    return _capped(Choice("nchwc_wgrad", f"{why} (dy NCHW{lanes}c, x NCHW{lanes}c or plain as it comes: 6 input "
                                         f"channels x 2 blocks of {lanes} output channels a tile, one tap a work item)",
                          4 * nchwc_wgrad.scratch_floats(g, lanes), 0, Tiling(lanes=lanes),
                          (("x", blocked(lanes)), ("dy", blocked(lanes))), plain_ok=("x",)))


def wgrad_default_reason(g: ConvGeometry, lanes: int) -> Optional[str]:
    """None when the default rule takes nchwc_wgrad, else why not."""
    if lanes == 1:
        return "RLX_SIMD_WIDTH=1"
    why = nchwc_wgrad.eligible(g, lanes)
    if why is not None:
        return f"no vector kernel: {why}"
    if nchwc_wgrad.waste(g, lanes) > NCHWC_MAX_WASTE:
        return f"{g.cin_g} -> {g.cout_g} channels would be {nchwc_wgrad.waste(g, lanes):.1f}x padded"
    return None


@chooser(R.Conv2dBackwardWeight)
def choose_conv2d_backward_weight(rec, ctx: ChoiceContext) -> Choice:
    if not ctx.config.fast_conv:
        return reference("conv2d_backward_weight", ctx.config)
    g = rec.geometry
    why = wgrad_default_reason(g, _lanes(ctx))
    if why is None:
        return wgrad_choice(g, ctx, "vector weight gradient")
    return im2col_weight_grad_choice(g, ctx, f"im2col + GEMM accumulated per worker ({why})")


def im2col_weight_grad_choice(g: ConvGeometry, ctx: ChoiceContext, why: str) -> Choice:
    tile = _row_tiles(g.y_shape[2], g.y_shape[3], g.cin_g * g.taps, g.x_shape[0] * g.groups, ctx.threads)
    return _capped(Choice("im2col", why, ctx.threads * 4 * weight_grad_slot_floats(g, tile), 0, Tiling(tile)))


def nchwc_pool_choice(rec, ctx: ChoiceContext) -> Choice:
    """The blocked pool (1-, 2- and 3-D)."""
    lanes = _lanes(ctx)
    g = rec.geometry
    return Choice("nchwc_pool", f"vector {rec.kind} pool on NCHW{lanes}c: one vector of {lanes} channels a tap, 6 "
                                f"pixels of a row a tile",
                  tiling=Tiling(tile=nchwc.rows_per_item(g.lifted(3), lanes, ctx.threads), lanes=lanes),
                  layouts=(("x", blocked(lanes)), ("y", blocked(lanes))), plain_ok=("y",))


@chooser(R.Pool2D)
@chooser(R.Pool3D)
def choose_pool(rec, ctx: ChoiceContext) -> Choice:
    family = "pool3d" if isinstance(rec, R.Pool3D) else "pool2d"
    if not ctx.config.fast_conv:
        return reference(family, ctx.config)
    if _lanes(ctx) == 1:
        return parallel(family, ctx.config, "parallel over the N*C planes (RLX_SIMD_WIDTH=1: no vectors)")
    return nchwc_pool_choice(rec, ctx)


@chooser(R.MaxPool2dBackward)
def choose_max_pool2d_backward(rec, ctx: ChoiceContext) -> Choice:
    if ctx.config.fast_conv and _lanes(ctx) > 1:
        return pool_backward_choice(rec, ctx, "vector max-pool gradient")
    return parallel("max_pool2d_backward", ctx.config)


def pool_backward_choice(rec, ctx: ChoiceContext, why: str) -> Choice:
    lanes = _lanes(ctx)
    return Choice("nchwc_pool_backward", f"{why} on NCHW{lanes}c: the window's max, then dy to its winning tap, "
                                         f"{lanes} channels at once", tiling=Tiling(lanes=lanes),
                  layouts=(("x", blocked(lanes)), ("dy", blocked(lanes)), ("dx", blocked(lanes))))


@chooser(R.Im2Col)
def choose_im2col(rec, ctx: ChoiceContext) -> Choice:
    return parallel("im2col", ctx.config, "parallel over output rows")


@chooser(R.ResizeNearest2x)
def choose_resize_nearest2x(rec, ctx: ChoiceContext) -> Choice:
    lanes = _lanes(ctx)
    if ctx.config.fast_conv and ctx.near_blocked and lanes > 1:
        # between blocked kernels (a U-Net's decoder): stays blocked, sparing two reorders;
        # alone, the plain kernel needs none
        return Choice("nchwc_resize", f"between blocked neighbours: NCHW{lanes}c, one vector of channels a pixel",
                      tiling=Tiling(lanes=lanes), layouts=(("x", blocked(lanes)), ("y", blocked(lanes))),
                      strided_out=("y",))
    return parallel("resize_nearest2x", ctx.config)


@chooser(R.Reorder)
def choose_reorder(rec, ctx: ChoiceContext) -> Choice:
    g = rec.geometry
    lanes = lanes_of(g.dst) or lanes_of(g.src)
    return Choice("reorder", f"{g.src} -> {g.dst}: the layout its consumer reads", tiling=Tiling(lanes=lanes))
