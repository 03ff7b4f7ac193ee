"""rlxpy: a CPU graph-compiler runtime for convolutional networks.

    g = rlxpy.Graph(); x = g.input("x", (None, 3, 32, 32)); ...; g.output("y", y)
    exe = rlxpy.compile(g); exe.run({"x": batch}); print(exe.explain())
"""
from .cpu_kernels.config import Config
from .ir.graph import Graph, Value
from .thunks.executor import Executable

__all__ = ["Graph", "Value", "Config", "Executable", "compile"]
__version__ = "0.1.0"


def compile(graph: Graph, config: Config = None, device: str = "cpu", plan_memory: bool = True):
    """Lower `graph` into an Executable. config defaults to Config.from_env(); device "cpu"
    runs numba kernels, "cuda" the optional Triton lowering; plan_memory=False gives every
    value bytes of its own (for tests that look for aliasing)."""
    if device == "cpu":
        return Executable(graph, config, plan_memory)
    if device == "cuda":
        from .triton.executable import compile_cuda
        return compile_cuda(graph, config, plan_memory)
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
