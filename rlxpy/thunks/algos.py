"""Which kernel a record runs, decided at compile time from the Config, the geometry and the
thread count, and how its work is tiled.

Each chooser returns a Choice: the algo, why (what was chosen and why the faster
alternatives were not, for `explain()`), the scratch bytes it needs and its tiling. Kernel
names are listed in DESIGN.md; never reuse one for another kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod
from typing import List, Optional

from ..cpu_kernels.config import Config

# Scratch (im2col columns, col2im columns, Winograd transforms) is planned into the arena;
# past this size a conv takes the reference kernel instead of asking for gigabytes.
SCRATCH_CAP_BYTES = 2 << 30

# Column tiles of about this many bytes (64 to 1024 columns): the best of 1 to 56 output
# rows per tile on the bench shapes, where a GEMM of a few hundred columns ran at about
# 95 GFLOP/s per core and one of about 100 columns at 60-70.
TILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Choice:
    algo: str
    why: str
    scratch: int = 0      # bytes
    tile: int = 0
    k_blocks: int = 1
    aux: int = 0          # bytes of persistent per-arena data (Winograd's transformed weights)


def reference(family: str, config: Config) -> Choice:
    if not config.fast_conv:
        return Choice("naive", "RLX_FAST_CONV=0: reference kernel")
    return Choice("naive", f"no fast {family} kernel: reference kernel")


def parallel(family: str, config: Config, why: str = "parallel over the N*C planes") -> Choice:
    if not config.fast_conv:
        return reference(family, config)
    return Choice("parallel", why)


def _capped(choice: Choice) -> Choice:
    if choice.scratch <= SCRATCH_CAP_BYTES:
        return choice
    return Choice("naive", f"{choice.algo} would need {choice.scratch} bytes of scratch "
                           f"(cap {SCRATCH_CAP_BYTES}): reference kernel")


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


def _geometry(g: dict):
    x, y = g["x_shape"], g["y_shape"]
    cg = x[1] // g["groups"]
    kg = y[1] // g["groups"]
    return x, y, cg, kg, prod(g["kernel"])


def im2col_choice(g: dict, threads: int, slots: int, why: str) -> Choice:
    x, y, cg, kg, kk = _geometry(g)
    n, groups = x[0], g["groups"]
    rows, row_len = prod(y[2:-1]), y[-1]
    ck = cg * kk
    k_blocks = 1
    if n * groups < threads and kg * ck >= (1 << 20):   # weights over 4 MiB: split them, not the columns
        k_blocks = _split(n * groups, threads, kg)
    tile = _row_tiles(rows, row_len, ck, n * groups * k_blocks, threads)
    return _capped(Choice("im2col", why, slots * 4 * ck * tile * row_len, tile, k_blocks))


def _winograd_block(tiles: int) -> int:
    """2x2 tiles per work item. Measured on this 2-core machine (bench/conv_suite.py shapes):
    about a quarter of an image's tiles, 32 to 196, was best: big enough for the 16 GEMMs to
    run well, small enough that both workers get blocks."""
    return min(tiles, max(32, min(196, ceil(tiles / 4))))


def _not_taken(name: str, flag: str, requested: bool, reason: Optional[str]) -> str:
    if not requested:
        return f"{flag} off"
    return f"{name} requested but {reason}"


def winograd_reason(g: dict) -> Optional[str]:
    """None when eligible: 3x3, stride 1, dilation 1, groups 1."""
    if tuple(g["kernel"]) != (3, 3):
        return f"kernel {tuple(g['kernel'])}"
    if tuple(g["stride"]) != (1, 1):
        return f"stride {tuple(g['stride'])}"
    if tuple(g["dilation"]) != (1, 1):
        return f"dilation {tuple(g['dilation'])}"
    if g["groups"] != 1:
        return f"groups {g['groups']}"
    return None


def direct_reason(g: dict) -> Optional[str]:
    if any(s != 1 for s in g["stride"]):
        return f"stride {tuple(g['stride'])}"
    if any(d != 1 for d in g["dilation"]):
        return f"dilation {tuple(g['dilation'])}"
    return None


def is_depthwise(g: dict) -> bool:
    """One input channel per group: depthwise (groups == C_in == C_out), channel multipliers,
    and single-channel inputs such as MNIST's first conv (im2col there has K = kh*kw)."""
    return g["x_shape"][1] == g["groups"]


def choose_conv2d(g: dict, config: Config, threads: int, slots: int) -> Choice:
    """Precedence: Winograd (RLX_WINOGRAD), direct (RLX_DIRECT_CONV), depthwise, im2col+GEMM,
    and the reference kernel when the im2col scratch would pass its cap."""
    if not config.fast_conv:
        return reference("conv2d", config)
    x, y, c, k, _ = _geometry(g)
    passed: List[str] = []
    wino = winograd_reason(g)
    if config.winograd and wino is None:
        tiles = x[0] * ceil(y[2] / 2) * ceil(y[3] / 2)
        block = _winograd_block(tiles)
        k_blocks = _split(ceil(tiles / block), threads, max(1, k // 32))
        kb = ceil(k / k_blocks)
        return _capped(Choice("winograd", "RLX_WINOGRAD on: 3x3, stride 1, dilation 1, groups 1",
                                        slots * 4 * 16 * block * (c + kb), block, k_blocks,
                                        aux=64 + 4 * 16 * k * c))
    passed.append(_not_taken("winograd", "RLX_WINOGRAD", config.winograd, wino))
    direct = direct_reason(g)
    if config.direct_conv and direct is None:
        return Choice("direct", "RLX_DIRECT_CONV on: stride 1, dilation 1; " + "; ".join(passed))
    passed.append(_not_taken("direct", "RLX_DIRECT_CONV", config.direct_conv, direct))
    if is_depthwise(g):
        return Choice("depthwise", "one input channel per group: per-channel kernel; " + "; ".join(passed))
    return im2col_choice(g, threads, slots, "im2col+GEMM; " + "; ".join(passed))


def choose_conv2d_1x1(g: dict, config: Config, threads: int) -> Choice:
    if not config.fast_conv:
        return reference("conv2d_1x1", config)
    n, p = g["x_shape"][0], g["x_shape"][2] * g["x_shape"][3]
    # about 256 columns a tile (the pointwise bench case: 0.21 ms at 128-256 columns, 0.3-0.8
    # above), and a whole number of tiles per thread when one image is split
    per_image = threads * ceil(p / (threads * 256)) if n < threads else ceil(p / 256)
    tile = ceil(p / per_image)
    return Choice("gemm1x1", "1x1, stride 1, unpadded, groups 1: one GEMM per image", tile=tile)


def choose_conv3d(g: dict, config: Config, threads: int, slots: int) -> Choice:
    if not config.fast_conv:
        return reference("conv3d", config)
    return im2col_choice(g, threads, slots, "im2col+GEMM")


def choose_col2im(family: str, g: dict, config: Config, threads: int, slots: int, transposed_in: bool) -> Choice:
    """Transposed convs and conv input gradients: GEMM into columns + col2im. For a
    transposed conv the record's x is its input; for an input gradient the GEMM reads dy."""
    if not config.fast_conv:
        return reference(family, config)
    x, y, cg, kg, kk = _geometry(g)
    n, groups = x[0], g["groups"]
    if transposed_in:       # ConvTranspose: reads x [N, C_in, ...], writes y
        pin, out_per_group = prod(x[2:]), kg
    else:                   # backward input: reads dy (= y), writes dx (= x)
        pin, out_per_group = prod(y[2:]), cg
    k_blocks = _split(n * groups, threads, out_per_group)
    kb = ceil(out_per_group / k_blocks)
    return _capped(Choice("col2im", "GEMM into columns + col2im", slots * 4 * kb * kk * pin,
                                  k_blocks=k_blocks))


def choose_conv2d_backward_weight(g: dict, config: Config, threads: int, slots: int) -> Choice:
    if not config.fast_conv:
        return reference("conv2d_backward_weight", config)
    x, y, cg, kg, kk = _geometry(g)
    ck = cg * kk
    tile = _row_tiles(y[2], y[3], ck, x[0] * g["groups"], threads)
    scratch = slots * 4 * (y[1] * ck + ck * tile * y[3])
    return _capped(Choice("im2col", "im2col + GEMM accumulated per worker",
                                                    scratch, tile))
