"""How a parallel kernel's work items fall on the threads, and runs of tiles chosen so they
fall evenly.

numba's prange hands each thread one contiguous range of the iterations, the first
(n mod threads) threads one iteration more (its static schedule; measured with
numba.get_thread_id(): 15 items on 2 threads go 8 + 7, 10 on 3 go 4 + 3 + 3). A kernel
call lasts as long as its busiest thread, so a way of cutting the work into items is scored
by its balance: the work over (threads x the busiest thread's share), 1.0 when even.

At batch 1 the items are few and the cut matters: MobileNetV2's 64 -> 384 1x1 at 14x14 cut
into 9 runs of 4 tiles (the last a sliver) gives one thread 20 tiles and the other 13
(balance 0.825); UNet's 64 -> 64 3x3 at 16x16 in 8 runs of 6 tiles, 24 against 19 (0.896).
"""
from __future__ import annotations

from math import ceil
from typing import Callable, Iterable, List, Sequence

# Below this balance the usual cut (about 8 tiles a run) gives way to the most even one. Not
# higher: a 56x56 plane's 523 tiles in runs of 8 fall 264 + 259 (0.98), and the cuts that
# do better there are runs of 2 tiles, whose items cost more than the 2% they even out.
EVEN_ENOUGH = 0.97
# Cuts within this much of the most even one count as even: the one nearest the usual cut wins.
TIE = 0.01


def shares(loads: Sequence[float], threads: int) -> List[float]:
    """Each thread's work under numba's static schedule of len(loads) iterations."""
    n = len(loads)
    base, extra = divmod(n, threads)
    out, start = [], 0
    for t in range(threads):
        stop = start + base + (t < extra)
        out.append(float(sum(loads[start:stop])))
        start = stop
    return out


def balance(loads: Sequence[float], threads: int) -> float:
    """Work over (threads x the busiest thread's share): 1.0 when even."""
    busiest = max(shares(loads, threads))
    return sum(loads) / (threads * busiest) if busiest > 0 else 1.0


def run_cost(pixels: int, tile: int, sliver: int) -> float:
    """Tiles' worth of work in a run of pixels: whole tiles, a partial tile as a whole one,
    and a last `sliver` pixels or fewer, which the kernels run a pixel at a time, as their
    share of a tile."""
    whole, rest = divmod(pixels, tile)
    return whole + (1.0 if rest > sliver else rest / tile)


def run_costs(pixels: int, per: int, tile: int, sliver: int) -> List[float]:
    """The cost of each run of per tiles along a plane of `pixels` pixels."""
    run = per * tile
    return [run_cost(min(pixels, start + run) - start, tile, sliver) for start in range(0, pixels, run)]


def evened(tiles: int, per: int) -> int:
    """The same count of runs, as even as whole tiles allow: 43 tiles in 6 runs of 8 -> 8."""
    return ceil(tiles / ceil(tiles / per))


def candidate_runs(tiles: int, threads: int, most: int = 8) -> List[int]:
    """Tiles a run to try: 1..most, and the runs that cut a plane into 1-4 items a thread."""
    cands = set(range(1, min(most, tiles) + 1))
    cands.update(ceil(tiles / (k * threads)) for k in range(1, 5))
    return sorted({evened(tiles, p) for p in cands})


def most_even(options: Iterable, loads_of: Callable, threads: int, usual):
    """The option whose items (loads_of(option): their loads in prange order) fall most
    evenly on the threads; `usual` itself when its balance is EVEN_ENOUGH, and among options
    within TIE of the most even, the first in `options` order (callers list them nearest the
    usual cut first)."""
    if threads < 2 or balance(loads_of(usual), threads) >= EVEN_ENOUGH:
        return usual
    scored = [(balance(loads_of(o), threads), o) for o in options]
    best = max(s for s, _ in scored)
    return next(o for s, o in scored if s >= best - TIE)
