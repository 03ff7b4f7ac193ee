"""How a backend may store an activation in its arena: the plain NCHW family the API uses,
or channel-blocked NCHWc (c lanes a block, channels past C zero), which the CPU backend's
explicit-vector kernels read and write. Users never see a blocked tensor: the plan builder
inserts a Reorder record wherever a consumer, or a graph output, needs another layout."""
from __future__ import annotations

from math import prod
from typing import Tuple

PLAIN = "nchw"


def blocked(lanes: int) -> str:
    return f"nchw{lanes}c"


def lanes_of(layout: str) -> int:
    """The block width of a blocked layout; 0 for plain."""
    if layout == PLAIN:
        return 0
    if layout.startswith("nchw") and layout.endswith("c") and layout[4:-1].isdigit():
        return int(layout[4:-1])
    raise ValueError(f"unknown layout {layout!r}")


def stored_shape(shape: Tuple[int, ...], layout: str) -> Tuple[int, ...]:
    """[N, C, *S] as stored: itself when plain, [N, ceil(C/c), prod(S), c] when blocked."""
    c = lanes_of(layout)
    if not c:
        return tuple(shape)
    return (shape[0], -(-shape[1] // c), prod(shape[2:]), c)


def stored_bytes(shape: Tuple[int, ...], layout: str) -> int:
    return 4 * prod(stored_shape(shape, layout))
