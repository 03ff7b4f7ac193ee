"""The backend protocol: what the device-neutral layers ask of a device.

The plan builder asks `choose` for every record before the arena is planned, so each
backend's scratch and persistent bytes are planned into the arena with everything else.
The executor asks `binder` for every thunk when a plan is built (a thunk no kernel can run
fails then, naming its node); when the arena pool makes an arena it binds every thunk to
it (a zero-argument call with its views made once), runs each `prepare` step (data computed
once per arena from params: packed or re-arranged weights) and makes views of the inputs
and outputs. A run then copies inputs in, calls the bound calls in order, copies outputs out.

Implementations: rlxpy.cpu_kernels.backend.CpuBackend (numba) and
rlxpy.triton.backend.TritonBackend. A test may add a third; nothing here imports either.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Protocol, Tuple

from ..config import Config
from .records import Choice, Record, Thunk

Kernel = Callable[[Thunk, Any], None]   # kernel(thunk, arena): a prepare step
Binder = Callable[[Any], Callable[[], None]]   # binder(arena) -> the thunk's call on that arena


@dataclass(frozen=True)
class ChoiceContext:
    """What a backend may consult when it chooses: the Config, the workers a parallel
    kernel will run on (one scratch slot each), per-node algo overrides
    (compile(..., algos={node name: algo}), which go before RLX_CONV_ALGO), and whether a
    neighbour's kernel stores the record's input or output blocked (a second ask, made only
    for a record first given a plain-layout kernel), and how the kernel making its x split
    the work over the threads."""
    config: Config
    threads: int
    algos: Mapping[str, str] = field(default_factory=dict)
    near_blocked: bool = False    # asked again: a neighbour reads or writes this record's x or y in a blocked layout
    x_splits_channels: bool = False   # the kernel making this record's x splits its channels (Choice.splits_channels)


class Backend(Protocol):
    name: str          # "cpu", "cuda"

    def threads(self, config: Config) -> int:
        """Set up the calling thread's kernel pool; return the worker count kernels are planned for."""

    def choose(self, record: Record, ctx: ChoiceContext) -> Choice:
        """Algo, why, tiling, scratch and persistent bytes of one record."""

    def binder(self, thunk: Thunk) -> Binder:
        """What binds the thunk's kernel to an arena; NotImplementedError naming the node if none."""

    def output_binder(self, thunk: Thunk, role: str, shape: Tuple[int, ...]) -> Optional[Callable]:
        """For a thunk whose output `role` (of this shape) is a graph output no other thunk reads: what binds
        it to an arena as a maker of (fresh output array, the call writing into it), so a
        run returns that array with no copy out of the arena; None where the kernel can't."""

    def input_feeder(self, thunk: Thunk, role: str) -> Optional[Callable]:
        """For a thunk whose input `role` is a graph input (stored plain) no other thunk reads:
        feed(bound call, flat input array) -> the call reading that array in place, so a run
        copies nothing into the arena for it; None where the kernel can't."""

    def prepare(self, thunk: Thunk) -> Optional[Kernel]:
        """What fills this thunk's persistent bytes once per arena (after params are copied in), or None."""

    def new_arena(self, nbytes: int) -> Any:
        """A zeroed, 64-byte-aligned float32 buffer of nbytes."""

    def copy_into(self, view: Any, array: Any) -> None:
        """Copy an input (any strides) into a view of the arena."""

    def copy_into_layout(self, view: Any, array: Any, layout: str) -> None:
        """Copy an input into a view of the arena stored in another layout (rlxpy.thunks.layout):
        the copy is the reorder. Only a backend whose choices prefer such layouts is asked."""

    def copy_out(self, view: Any) -> Any:
        """A fresh copy of a view of the arena."""

    def fill(self, arena: Any, off: int, nbytes: int, value: float) -> None:
        """Set nbytes at off to value (guard bytes)."""

    def view(self, arena: Any, off: int, shape: Tuple[int, ...]) -> Any:
        """The tensor at byte offset off, in place (no copy)."""


def table_kernel(table, thunk: Thunk, device: str):
    """A backend's entry for a thunk in its (record type, algo) table."""
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
