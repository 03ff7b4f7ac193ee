"""The backend protocol: what the device-neutral layers ask of a device.

The plan builder asks `choose` for every record before the arena is planned, so each
backend's scratch and persistent bytes are planned into the arena with everything else.
The executor asks `kernel` for the callable of every bound thunk, and the arena pool asks
`prepare` for what must be computed once per arena from params (packed or re-arranged
weights) and uses the arena operations to make arenas and move inputs and outputs.

Implementations: rlxpy.cpu_kernels.backend.CpuBackend (numba) and
rlxpy.triton.backend.TritonBackend. A test may add a third; nothing here imports either.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Tuple

from ..config import Config
from .records import Choice, Record, Thunk

Kernel = Callable[[Thunk, Any], None]   # kernel(thunk, arena)


@dataclass(frozen=True)
class ChoiceContext:
    """What a backend may consult when it chooses: the Config and the workers a parallel
    kernel will run on (one scratch slot each)."""
    config: Config
    threads: int


class Backend(Protocol):
    name: str          # "cpu", "cuda"

    def threads(self, config: Config) -> int:
        """Set up the calling thread's kernel pool; return the worker count kernels are planned for."""

    def choose(self, record: Record, ctx: ChoiceContext) -> Choice:
        """Algo, why, tiling, scratch and persistent bytes of one record."""

    def kernel(self, thunk: Thunk) -> Kernel:
        """The callable that runs a bound thunk; NotImplementedError naming the node if none."""

    def prepare(self, thunk: Thunk) -> Optional[Kernel]:
        """What fills this thunk's persistent bytes once per arena (after params are copied in), or None."""

    def new_arena(self, nbytes: int) -> Any:
        """A zeroed, 64-byte-aligned float32 buffer of nbytes."""

    def write(self, arena: Any, off: int, array: Any) -> None:
        """Copy an input (any strides) into the arena at byte offset off."""

    def read(self, arena: Any, off: int, shape: Tuple[int, ...]) -> Any:
        """A fresh copy of the tensor at byte offset off."""

    def fill(self, arena: Any, off: int, nbytes: int, value: float) -> None:
        """Set nbytes at off to value (guard bytes)."""

    def view(self, arena: Any, off: int, shape: Tuple[int, ...]) -> Any:
        """The tensor at byte offset off, in place (no copy)."""


def table_kernel(table, thunk: Thunk, device: str) -> Kernel:
    """A backend's kernel for a thunk from its (record type, algo) table."""
    try:
        return table[(type(thunk.record), thunk.algo)]
    except KeyError:
        raise NotImplementedError(f"{thunk.node}: no {device} kernel for {type(thunk.record).__name__} with algo "
                                  f"{thunk.algo!r}") from None


def table_prepare(table, thunk: Thunk) -> Optional[Kernel]:
    """A backend's prepare step from its table: only for a weight that is a param (prepare
    steps are registered only for record types that have weight_const)."""
    fn = table.get((type(thunk.record), thunk.algo))
    return fn if fn is not None and thunk.record.weight_const else None
