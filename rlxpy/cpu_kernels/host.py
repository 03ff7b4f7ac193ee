"""What this CPU is, in words: for tuning keys, bench headers and `python -m rlxpy env`."""
from __future__ import annotations

import platform
from functools import lru_cache


@lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo's model name on Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@lru_cache(maxsize=None)
def llvm_cpu() -> str:
    """LLVM's name for the host CPU (what numba compiles for): znver2, skylake-avx512, ..."""
    import llvmlite.binding as llvm
    return llvm.get_host_cpu_name()
