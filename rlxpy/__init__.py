"""rlxpy: a CPU graph-compiler runtime for convolutional networks.

    g = rlxpy.Graph(); x = g.input("x", (None, 3, 32, 32)); ...; g.output("y", y)
    exe = rlxpy.compile(g); exe.run({"x": batch}); print(exe.explain())
"""
from .config import Config
from .ir.graph import Graph, Value
from .thunks.executor import Executable

__all__ = ["Graph", "Value", "Config", "Executable", "compile", "load", "onnx", "distributed"]
__version__ = "0.1.0"


def __getattr__(name):
    """rlxpy.onnx and rlxpy.distributed are imported on first use: `import rlxpy` imports
    neither the onnx package nor dask or ray."""
    if name in ("onnx", "distributed"):
        import importlib
        return importlib.import_module(".onnx", __name__)
    raise AttributeError(f"module 'rlxpy' has no attribute {name!r}")


def compile(graph: Graph, config: Config = None, device: str = "cpu", plan_memory: bool = True,
            guard_bytes: int = 0, algos: dict = None, autotune: bool = None) -> Executable:
    """Lower `graph` into an Executable. config defaults to Config.from_env(); device "cpu"
    runs numba kernels, "cuda" the optional Triton lowering. plan_memory=False gives every
    value bytes of its own, and guard_bytes > 0 (with it) puts guard zones around every
    tensor: both are for tests that look for aliasing and stray writes. algos={node name:
    algo} forces a conv-family node's kernel where eligible (before RLX_CONV_ALGO; CPU only).
    autotune=True (default: RLX_AUTOTUNE) times the eligible exact kernels of every
    conv-family node and keeps the fastest that passes validation, cached on disk under
    RLX_CACHE_DIR (CPU only)."""
    config = Config.from_env() if config is None else config
    if device == "cpu":
        from .cpu_kernels.backend import CPU
        return Executable(graph, CPU, config, plan_memory, guard_bytes, algos, autotune)
    if device == "cuda":
        if autotune:
            raise NotImplementedError("compile(..., device='cuda', autotune=True): autotuning is CPU-only; "
                                      "Triton tunes its GPU kernels' tiles itself")
        if algos:
            raise NotImplementedError("compile(..., device='cuda', algos=...): per-node overrides are CPU-only; "
                                      "RLX_TRITON_ALGO picks the GPU's conv kernels")
        from .triton.executable import compile_cuda
        return compile_cuda(graph, config, plan_memory, guard_bytes)
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def load(path) -> Executable:
    """An executable stored with exe.save(path) (graph, config, chosen algos), compiled anew
    for this machine. Only load files you trust: the format is pickle."""
    from .thunks.persist import load as _load
    return _load(path)
