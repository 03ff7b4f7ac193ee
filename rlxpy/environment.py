"""python -m rlxpy env: what a bug report needs: versions, the CPU and the vector width the
kernels run, numba's threading layer and thread count, the BLAS, the cache directories and
the RLX_* flags in force. Optional packages are looked up by metadata, never imported."""
from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import List, Tuple

OPTIONAL = ("onnx", "onnxruntime", "torch", "triton", "tqdm", "matplotlib", "dask", "distributed", "ray",
            "hypothesis")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def report() -> List[Tuple[str, str]]:
    import llvmlite
    import numba
    import numpy
    import scipy
    from threadpoolctl import threadpool_info

    from . import __version__
    from .config import FLAGS, Config
    from .cpu_kernels import simd
    from .cpu_kernels.gemm import configure_threads, max_threads
    from .cpu_kernels.host import usable_cores
    from .cpu_kernels.host import cpu_model, llvm_cpu
    from .cpu_kernels.pool import pool_naive

    config = Config.from_env()
    threads = configure_threads(config.num_threads)
    _touch_parallel()
    try:
        layer = numba.threading_layer()
    except ValueError:
        layer = f"not started (requested {numba.config.THREADING_LAYER})"
    blas = "; ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads, "
                     f"{os.path.basename(i.get('filepath', ''))})" for i in threadpool_info()
                     if i.get("user_api") == "blas") or "none found"
    flags = ", ".join(f"{f.env}={os.environ[f.env]}" for f in FLAGS if os.environ.get(f.env, "").strip()) or "none set"
    rows = [
        ("rlxpy", __version__), ("python", sys.version.split()[0] + f" ({platform.platform()})"),
        ("numpy", numpy.__version__), ("scipy", scipy.__version__), ("numba", numba.__version__),
        ("llvmlite", llvmlite.__version__), ("threadpoolctl", _version("threadpoolctl")),
        ("cpu", f"{cpu_model()} (LLVM {llvm_cpu()}; {os.cpu_count()} logical cores on the host)"),
        ("simd width", f"{simd.resolve_width(config.simd_width)} float32 lanes (host runs {simd.host_widths()})"),
        ("threads", f"{threads} (cores this process may use: {usable_cores()}; numba's pool: {max_threads()}; "
                    f"RLX_NUM_THREADS "
                    f"{config.num_threads or 'unset'})"),
        ("numba threading layer", layer),
        ("blas", blas),
        ("numba cache", os.environ.get("NUMBA_CACHE_DIR") or pool_naive._cache._cache_path),
        ("autotune cache", os.path.join(config.tuning_dir, "autotune")),
        ("RLX flags", flags),
    ]
    rows += [(name, _version(name)) for name in OPTIONAL]
    return rows


def _touch_parallel() -> None:
    """numba names its threading layer only once a parallel kernel has run."""
    import numpy as np

    from .cpu_kernels.pool import pool_parallel
    x = np.zeros((1, 1, 1, 2, 2), np.float32)
    pool_parallel(x, np.zeros((1, 1, 1, 1, 1), np.float32), True, 1, 2, 2, 1, 2, 2, 0, 0, 0, 0, 0, 0, 1, 1, 1, True)


def format_report() -> str:
    rows = report()
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
