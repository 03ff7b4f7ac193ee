"""Every RLX_* flag, read in this one module into a frozen Config.

Each flag is declared once in FLAGS: its environment name, the Config field it sets, its
default and its parser. Every parser is strict: a value it does not know is an error
naming the flag and listing the accepted values. No other module reads os.environ for an
RLX_* variable (tests/test_architecture.py greps the package for it).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Tuple

_TRUE = ("1", "on", "true", "yes")
_FALSE = ("0", "off", "false", "no")


def _refuse(name: str, raw: str, accepted: str) -> ValueError:
    return ValueError(f"{name}={raw!r} is not a valid value; accepted: {accepted}")


def parse_bool(name: str, raw: str) -> bool:
    v = raw.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise _refuse(name, raw, ", ".join(_TRUE + _FALSE))


def parse_winograd(name: str, raw: str):
    """RLX_WINOGRAD: on/off (F(2x2,3x3)), or f2 / f4 for the tile."""
    v = raw.strip().lower()
    if v in ("f2", "f4"):
        return True if v == "f2" else "f4"
    try:
        return parse_bool(name, raw)
    except ValueError:
        raise _refuse(name, raw, ", ".join(_TRUE + _FALSE + ("f2", "f4"))) from None


def parse_positive_int(name: str, raw: str) -> int:
    try:
        n = int(raw.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise _refuse(name, raw, "a positive integer")
    return n


def choice_parser(*accepted: str) -> Callable[[str, str], str]:
    """A parser for a flag that takes one of a few names (case-insensitive)."""
    def parse(name: str, raw: str) -> str:
        v = raw.strip().lower()
        if v not in accepted:
            raise _refuse(name, raw, ", ".join(accepted))
        return v
    return parse


TRITON_ALGOS = ("auto", "simple", "igemm", "igemm_nchw")
SIMD_WIDTHS = (16, 8, 1)
# algo names a conv-family node may be forced to (RLX_CONV_ALGO; DESIGN.md lists them)
CONV_ALGOS = ("auto", "naive", "im2col", "direct", "winograd", "gemm1x1", "depthwise", "col2im", "simd_direct",
              "nchwc_direct", "nchwc_1x1", "nchwc_plain_in", "nchwc_depthwise", "nchwc_pool", "parallel",
              "winograd_f4", "nchwc_wgrad", "nchwc_subpixel",
              "nchwc_pool_backward")


def parse_path(name: str, raw: str) -> str:
    return os.path.expanduser(raw.strip())


def parse_per_image(name: str, raw: str) -> float:
    v = raw.strip().lower()
    if v in _FALSE:
        return 0.0
    try:
        mib = float(v)
    except ValueError:
        mib = -1.0
    if not mib >= 0:          # (NaN too)
        raise _refuse(name, raw, "off or a size in MiB >= 0 (0: off)")
    return mib


def parse_simd_width(name: str, raw: str) -> int:
    v = raw.strip()
    if v not in tuple(str(w) for w in SIMD_WIDTHS):
        raise _refuse(name, raw, ", ".join(str(w) for w in SIMD_WIDTHS))
    return int(v)


@dataclass(frozen=True)
class Flag:
    env: str                               # the environment variable
    field: str                             # the Config field it sets
    parse: Callable[[str, str], object]    # (flag name, raw value) -> value, or ValueError
    doc: str


FLAGS: Tuple[Flag, ...] = (
    Flag("RLX_FAST_CONV", "fast_conv", parse_bool,
         "default on; off sends every record to its reference kernel"),
    Flag("RLX_WINOGRAD", "winograd", parse_winograd,
         "Winograd on eligible 3x3 convs: on or f2 for F(2x2,3x3), f4 for F(4x4,3x3) on the blocked layout"),
    Flag("RLX_DIRECT_CONV", "direct_conv", parse_bool,
         "the direct kernel for stride-1, dilation-1 convs"),
    Flag("RLX_CONV_ALGO", "conv_algo", choice_parser(*CONV_ALGOS),
         "force a conv-family algo by name on every node where it is eligible (explain() says why where not)"),
    Flag("RLX_NUM_THREADS", "num_threads", parse_positive_int,
         "threads of the CPU kernels' pool (default: the cores this process may use: affinity, cgroup quota)"),
    Flag("RLX_SIMD_WIDTH", "simd_width", parse_simd_width,
         "float32 lanes of the CPU vector kernels: 16 (AVX-512F), 8 (AVX2+FMA) or 1; default: the host's widest"),
    Flag("RLX_TRITON_ALGO", "triton_algo", choice_parser(*TRITON_ALGOS),
         "GPU conv kernel family: auto, simple, igemm (channels-last x) or igemm_nchw (x read in place)"),
    Flag("RLX_CUDA_GRAPH", "cuda_graph", parse_bool,
         "GPU: replay a CUDA graph from an arena's second run on (default on)"),
    Flag("RLX_PROFILE", "profile", parse_bool,
         "every run prints one line per thunk to stderr: time, GFLOP/s, algo"),
    Flag("RLX_VALIDATE", "validate", parse_bool,
         "every run checks each thunk against its reference kernel; an error names the first failing node"),
    Flag("RLX_AUTOTUNE", "autotune", parse_bool,
         "time the eligible exact kernels of every conv-family node, keep the fastest that passes validation"),
    Flag("RLX_CACHE_DIR", "cache_dir", parse_path,
         "where autotuning keeps its choices (default: the user cache directory, e.g. ~/.cache/rlxpy)"),
    Flag("RLX_PER_IMAGE", "per_image_mib", parse_per_image,
         "at batch > 1, chains of blocked CPU kernels touching a value of at least this many MiB run image by "
         "image, the values inside held one image at a time (default 4; off or 0: whole batches)"),
    Flag("RLX_IN_PLACE", "in_place", parse_bool,
         "default on: a concat whose inputs are contiguous slices of its output (along the channels at batch 1) "
         "has them written there, and a reshape of a plain value reads its bytes: no copy (off: both copy)"),
    Flag("RLX_PLAN_CACHE", "plan_cache", parse_positive_int,
         "plans (input shapes) an executable keeps, least recently used evicted with its arenas (default 8)"),
)


@dataclass(frozen=True)
class Config:
    fast_conv: bool = True               # RLX_FAST_CONV
    winograd: object = False             # RLX_WINOGRAD: False, True (F(2x2,3x3)) or "f4" (F(4x4,3x3))
    direct_conv: bool = False            # RLX_DIRECT_CONV
    conv_algo: str = "auto"              # RLX_CONV_ALGO
    num_threads: Optional[int] = None    # RLX_NUM_THREADS; None: the cores this process may use
    simd_width: Optional[int] = None     # RLX_SIMD_WIDTH; None: the host's widest (checked by the CPU backend)
    triton_algo: str = "auto"            # RLX_TRITON_ALGO
    cuda_graph: bool = True              # RLX_CUDA_GRAPH
    profile: bool = False                # RLX_PROFILE
    validate: bool = False               # RLX_VALIDATE
    autotune: bool = False               # RLX_AUTOTUNE
    cache_dir: Optional[str] = None      # RLX_CACHE_DIR; None: default_cache_dir()
    plan_cache: int = 8                  # RLX_PLAN_CACHE
    per_image_mib: float = 4.0           # RLX_PER_IMAGE; 0: off
    in_place: bool = True                # RLX_IN_PLACE

    def __post_init__(self):
        if self.conv_algo not in CONV_ALGOS:
            raise ValueError(f"Config.conv_algo={self.conv_algo!r}; accepted: {', '.join(CONV_ALGOS)}")
        if self.triton_algo not in TRITON_ALGOS:
            raise ValueError(f"Config.triton_algo={self.triton_algo!r}; accepted: {', '.join(TRITON_ALGOS)}")
        if self.winograd not in (False, True, "f4"):
            raise ValueError(f"Config.winograd={self.winograd!r}; accepted: False, True, 'f4'")
        if self.simd_width is not None and self.simd_width not in SIMD_WIDTHS:
            raise ValueError(f"Config.simd_width={self.simd_width!r}; accepted: None, 16, 8, 1")
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise ValueError(f"Config.num_threads={self.num_threads!r}; accepted: None or a positive integer")
        if not isinstance(self.per_image_mib, (int, float)) or not self.per_image_mib >= 0:
            raise ValueError(f"Config.per_image_mib={self.per_image_mib!r}; accepted: a number of MiB >= 0 (0: off)")
        if not isinstance(self.plan_cache, int) or self.plan_cache < 1:
            raise ValueError(f"Config.plan_cache={self.plan_cache!r}; accepted: a positive integer")

    @property
    def tuning_dir(self) -> str:
        """Where autotuning keeps its choices: RLX_CACHE_DIR, else the user cache directory."""
        return self.cache_dir or default_cache_dir()

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Config":
        """The flags from `env` (default os.environ); an unset or empty flag keeps its default."""
        env = os.environ if env is None else env
        values = {}
        for flag in FLAGS:
            raw = env.get(flag.env)
            if raw is not None and raw.strip() != "":
                values[flag.field] = flag.parse(flag.env, raw)
        return cls(**values)

    def replace(self, **changes) -> "Config":
        return dataclasses.replace(self, **changes)


def default_cache_dir() -> str:
    """The user cache directory, as platformdirs would name it (not a dependency for one path):
    $XDG_CACHE_HOME/rlxpy or ~/.cache/rlxpy; ~/Library/Caches/rlxpy on macOS; %LOCALAPPDATA%\\rlxpy\\Cache
    on Windows."""
    import sys
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
        return os.path.join(base, "rlxpy", "Cache")
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Caches/rlxpy")
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rlxpy")
