"""Which kernel a record runs, decided at compile time from the Config and the geometry.

Each chooser returns (algo, why); `why` says what was chosen and why the faster
alternatives were not, so `explain()` can show it. Kernel names are in DESIGN.md; never
reuse one for another kernel.
"""
from __future__ import annotations

from typing import Tuple

from ..cpu_kernels.config import Config

# The im2col column buffer is planned into the arena; past this size a conv takes the
# reference kernel instead of asking for gigabytes of scratch.
IM2COL_CAP_BYTES = 2 << 30

Choice = Tuple[str, str]

def reference(family: str, config: Config) -> Choice:
    if not config.fast_conv:
        return "naive", "RLX_FAST_CONV=0: reference kernel"
    return "naive", f"no fast {family} kernel yet: reference kernel"


def choose_simple(family: str, config: Config) -> Choice:
    return reference(family, config)


def choose_conv2d_1x1(g: dict, config: Config) -> Choice:
    return reference("conv2d_1x1", config)


def choose_conv2d(g: dict, config: Config) -> Tuple[str, str, int]:
    """(algo, why, scratch bytes)."""
    return reference("conv2d", config) + (0,)


def choose_conv3d(g: dict, config: Config) -> Tuple[str, str, int]:
    return reference("conv3d", config) + (0,)


def choose_conv_transpose(family: str, g: dict, config: Config) -> Tuple[str, str, int]:
    return reference(family, config) + (0,)


def choose_conv2d_backward_input(g: dict, config: Config) -> Tuple[str, str, int]:
    return reference("conv2d_backward_input", config) + (0,)


def choose_conv2d_backward_weight(g: dict, config: Config) -> Tuple[str, str, int]:
    return reference("conv2d_backward_weight", config) + (0,)
