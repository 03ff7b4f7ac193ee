"""What this CPU is, in words: for tuning keys, bench headers and `python -m rlxpy env`."""
from __future__ import annotations

import math
import os
import platform
from functools import lru_cache
from typing import Optional


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


def _read_text(*path: str) -> str:
    """A small kernel file's text (sysfs, cgroupfs), stripped; OSError where it can't be read."""
    with open(os.path.join(*path)) as f:
        return f.read().strip()


def _cgroup_cpu_limit(root: str = "/sys/fs/cgroup") -> Optional[float]:
    """The CPU quota of this process's cgroup in cores (v2 cpu.max, else v1 cfs quota), or
    None where there is none or it can't be read."""
    try:
        quota, period = _read_text(root, "cpu.max").split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int(_read_text(root, "cpu", "cpu.cfs_quota_us"))
        period = int(_read_text(root, "cpu", "cpu.cfs_period_us"))
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cores(root: str = "/sys/fs/cgroup") -> int:
    """The cores this process may use: its CPU affinity (a Dask or Ray worker pinned to one
    core sees one), capped by a cgroup CPU quota (a container given 1.5 CPUs: 2), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    limit = _cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    return max(1, cores)


# What a core's L2 is taken to be where the host does not say (Linux's sysfs absent or
# unreadable): the smallest of the machines measured here (Zen 2, Zen 3), so a rule sized by
# it keeps the choice those machines were tuned with.
L2_FALLBACK_BYTES = 512 * 1024


def _cache_bytes(text: str) -> int:
    """sysfs's cache size ("2048K", "1M", "512") in bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


@lru_cache(maxsize=None)
def l2_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The L2 cache of one core in bytes (sysfs's level-2 data or unified cache of cpu0), or
    L2_FALLBACK_BYTES where the host does not say."""
    try:
        entries = sorted(e for e in os.listdir(root) if e.startswith("index"))
    except OSError:
        return L2_FALLBACK_BYTES
    for entry in entries:            # index0 .. indexN; an unreadable one is passed over
        try:
            level, kind = _read_text(root, entry, "level"), _read_text(root, entry, "type")
            if level == "2" and kind in ("Data", "Unified"):
                return _cache_bytes(_read_text(root, entry, "size"))
        except (OSError, ValueError):
            continue
    return L2_FALLBACK_BYTES
