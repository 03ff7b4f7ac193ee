"""The suite on pytest-xdist workers (`pytest -n 2`, the README's test command).

Most of the suite's time is numba compiling every vector kernel once per SIMD width. So
tests are grouped by the width whose kernels they compile (their `width` or `W` parameter,
else the host's), and `-n` distributes by group (`--dist loadgroup`, unless another `--dist`
is given), which keeps each group on one worker: the two workers then compile different
vector kernels (only the small width-free ones, such as the reference kernels, are
compiled by both).

Each worker keeps numba's on-disk cache in a folder of its own. numba updates a kernel's
cache index by reading it, adding an entry and writing it back; two processes saving new
entries of one kernel at once can each number their data file the same, leaving an entry
that points at the other process's machine code. Both workers compile the reference kernels,
so a shared folder would risk exactly that.
"""
import os
from pathlib import Path

import pytest

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and "NUMBA_CACHE_DIR" not in os.environ:
    # set before anything imports numba: numba reads it once, at import
    os.environ["NUMBA_CACHE_DIR"] = str(Path(__file__).resolve().parent.parent / ".pytest_cache" / f"numba-{_WORKER}")


@pytest.hookimpl(tryfirst=True)      # before xdist's own hook turns a bare -n into --dist load
def pytest_cmdline_main(config):
    option = config.option
    if getattr(option, "numprocesses", None) and getattr(option, "dist", None) == "no":
        option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)  # an xdist hook: the controller tells each worker its --dist
def pytest_configure_node(node):
    node.workerinput["rlxpy_dist"] = node.config.option.dist


def width_group(item) -> str:
    """The xdist group of a test: the SIMD width it compiles kernels at, or "gpu" for the
    Triton tests (their CPU side is the reference kernels, which every group compiles)."""
    if Path(str(item.fspath)).name == "test_triton.py":
        return "gpu"
    params = getattr(getattr(item, "callspec", None), "params", {})
    width = params.get("width", params.get("W"))
    if isinstance(width, int) and width in (16, 8, 1):
        return f"width-{width}"
    import rlxpy as rx
    from rlxpy.cpu_kernels import simd
    try:
        forced = rx.Config.from_env().simd_width       # RLX_SIMD_WIDTH where set
        return f"width-{simd.resolve_width(forced)}"
    except ValueError:      # a width this CPU can't run: the tests that read the flag say so
        return f"width-{simd.resolve_width(None)}"


@pytest.hookimpl(tryfirst=True)      # before xdist's own hook reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    # a worker parses the command line again, where a bare -n read as --dist load
    if getattr(config, "workerinput", {}).get("rlxpy_dist") == "loadgroup":
        config.option.loadgroup = True
    for item in items:
        if not any(m.name == "xdist_group" for m in item.iter_markers()):
            item.add_marker(pytest.mark.xdist_group(width_group(item)))


@pytest.fixture
def every_width(monkeypatch):
    """Every vector width runs on any host: a width the CPU lacks (16 on AVX2) is compiled
    for it anyway, and LLVM splits each vector into the registers the CPU has (correct, not
    fast). The host's widest stays first, so the default width is still the host's. (The
    import inside: numba must not be imported before NUMBA_CACHE_DIR is set above.)"""
    from rlxpy.cpu_kernels import simd
    real = simd.host_widths()
    monkeypatch.setattr(simd, "host_widths", lambda: real + tuple(w for w in (16, 8) if w not in real))
