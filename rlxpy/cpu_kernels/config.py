"""The RLX_* flags, read in one place into a frozen Config."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping, Optional

_TRUE = ("1", "on", "true", "yes")
_FALSE = ("0", "off", "false", "no")


def parse_bool_flag(name: str, env: Mapping[str, str], default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a valid value; accepted: {', '.join(_TRUE + _FALSE)}")


def parse_threads_flag(name: str, env: Mapping[str, str]) -> Optional[int]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{name}={raw!r} is not a valid value; accepted: a positive integer")
    return n


@dataclass(frozen=True)
class Config:
    fast_conv: bool = True      # RLX_FAST_CONV (default on): off sends every thunk to its reference kernel
    winograd: bool = False      # RLX_WINOGRAD: Winograd F(2x2,3x3) for eligible 3x3 convs
    direct_conv: bool = False   # RLX_DIRECT_CONV: direct kernel for stride-1, dilation-1 convs
    num_threads: Optional[int] = field(default=None)  # RLX_NUM_THREADS; None: all cores

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Config":
        env = os.environ if env is None else env
        return cls(fast_conv=parse_bool_flag("RLX_FAST_CONV", env, True),
                   winograd=parse_bool_flag("RLX_WINOGRAD", env, False),
                   direct_conv=parse_bool_flag("RLX_DIRECT_CONV", env, False),
                   num_threads=parse_threads_flag("RLX_NUM_THREADS", env))
