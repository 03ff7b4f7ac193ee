"""The GPU backend (rlxpy.thunks.backend.Backend): Triton kernels on an arena that is one
float32 torch tensor on the device (a CPU tensor under TRITON_INTERPRET=1).

Its choice is made before the arena is planned, like the CPU's: the implicit GEMM's
channels-last copy of x is the thunk's scratch, its re-arranged weights are persistent
bytes (filled once per arena by a prepare step when the weight is a param)."""
from __future__ import annotations

from functools import partial
from typing import Optional, Tuple

import numpy as np
import torch

from ..config import Config
from ..thunks import records as R
from ..thunks.backend import Binder, ChoiceContext, Kernel, table_kernel, table_prepare
from ..thunks.records import Choice, Record, Thunk
from . import dispatch as D

FLAG = "RLX_TRITON_ALGO"


def _conv_choice(rec, pref: str) -> Choice:
    g = rec.geometry
    if pref == "simple":
        return Choice("simple", f"{FLAG}=simple: one program per output-row tile")
    small = D.too_small_for_tiles(g, g.cin_g * g.taps)
    if pref == "auto" and small:
        return Choice("simple", f"{small}: simple kernel")
    algo = "igemm_nchw" if pref == "igemm_nchw" else "igemm"
    why = f"{FLAG}={pref}" if pref != "auto" else "implicit GEMM on tl.dot"
    scratch = 0 if algo == "igemm_nchw" else 4 * D.channels_last_floats(g.x_shape)
    return Choice(algo, why, scratch, 4 * D.k_major_weights_floats(g))


def _backward_input_choice(rec, pref: str) -> Choice:
    g = rec.geometry
    if pref != "simple" and D.dx_as_conv(g):
        return Choice("igemm", "stride 1: dx is a conv of dy with flipped weights (implicit GEMM)",
                      4 * D.channels_last_floats(g.y_shape), 4 * D.k_major_weights_floats(g))
    return Choice("simple", "Triton kernel")


def _backward_weight_choice(rec, pref: str) -> Choice:
    if pref == "simple":
        return Choice("simple", "Triton kernel")
    small = D.too_small_for_tiles(rec.geometry, rec.geometry.cin_g)  # a program's N tile: one tap's channels
    if pref != "auto" or not small:
        return Choice("igemm", "implicit GEMM over the pixels, split-K atomic tile adds")
    return Choice("simple", f"{small}: simple kernel")


CHOOSE = {R.Conv2D: _conv_choice, R.Conv2D1x1: _conv_choice, R.Conv2dBackwardInput: _backward_input_choice,
          R.Conv2dBackwardWeight: _backward_weight_choice}


class TritonBackend:
    name = "cuda"

    def __init__(self, device: torch.device):
        self.device = device
        # validate(): the implicit GEMM's tl.dot runs in TF32 on a GPU (10-bit mantissa)
        self.tolerances = {"igemm": 5e-3, "igemm_nchw": 5e-3} if device.type == "cuda" else {}

    def threads(self, config: Config) -> int:
        return 1

    def choose(self, record: Record, ctx: ChoiceContext) -> Choice:
        rule = CHOOSE.get(type(record))
        if rule is not None:
            return rule(record, ctx.config.triton_algo)
        if (type(record), "simple") not in D.EXEC:
            raise NotImplementedError(f"{record.node}: no GPU kernel for {type(record).__name__}")
        return Choice("simple", "Triton kernel")

    def binder(self, thunk: Thunk) -> Binder:
        fn = table_kernel(D.EXEC, thunk, "GPU")
        return lambda arena: partial(fn, thunk, arena)

    def prepare(self, thunk: Thunk) -> Optional[Kernel]:
        return table_prepare(D.PREPARE, thunk)

    # -- the arena: one float32 tensor ------------------------------------------------
    def new_arena(self, nbytes: int):
        # CUDA allocations are aligned to at least 256 bytes, so offsets aligned to 64 stay so
        return torch.zeros(max(nbytes // 4, 1), dtype=torch.float32, device=self.device)

    def view(self, arena, off: int, shape: Tuple[int, ...]):
        n = int(np.prod(shape))
        return arena[off // 4:off // 4 + n].view(tuple(shape))

    def copy_into(self, view, array) -> None:
        view.copy_(array if isinstance(array, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(array)))

    def output_binder(self, thunk, role, shape):
        return None             # outputs are copied out of the arena (a CUDA graph replays fixed addresses)

    def input_feeder(self, thunk, role):
        return None             # inputs are copied into the arena (a CUDA graph replays fixed addresses)

    def copy_into_layout(self, view, array, layout) -> None:
        raise NotImplementedError(f"the GPU backend stores every tensor plain, not {layout}")

    def copy_out(self, view):
        return view.clone()

    def fill(self, arena, off: int, nbytes: int, value: float) -> None:
        arena[off // 4:(off + nbytes) // 4].fill_(value)
