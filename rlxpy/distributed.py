"""Batch inference beyond one process: a Dask array in, a Dask array out (`predict`), and a
callable class for Ray Data's map_batches (`RayPredictor`). Neither dask nor ray is imported
by `import rlxpy`; this module imports them when called (pip install "rlxpy[dask]" or
"rlxpy[ray]").

Both ship the executable pickled (graph, params once, config and chosen algos: see
rlxpy.thunks.persist) and compile it once per worker process, where it is kept for every
later chunk or batch. A worker's executable runs as many threads as the worker was given
(a Dask worker's thread count, a Ray actor's CPUs) unless RLX_NUM_THREADS or the Config
fixed a number, so N workers on N cores don't each spin up N threads.
"""
from __future__ import annotations

import pickle
import threading
import uuid
from typing import Dict, Optional, Tuple

import numpy as np

# per worker process: payload token -> the executable built from it
_BUILT: Dict[str, object] = {}
_BUILT_LOCK = threading.Lock()
_BUILDS = [0]          # executables built in this process (tests read it on the workers)


def builds_here() -> int:
    """How many executables this process has built from shipped payloads."""
    return _BUILDS[0]


def _only(names, given: Optional[str], what: str) -> str:
    names = list(names)
    if given is not None:
        if given not in names:
            raise ValueError(f"{what}_name={given!r} is not one of the executable's {what}s {names}")
        return given
    if len(names) != 1:
        raise ValueError(f"the executable has {len(names)} {what}s {names}: pass {what}_name")
    return names[0]


def _with_threads(exe, threads: Optional[int]):
    """The executable on `threads` workers, where its Config leaves the count open."""
    if threads is None or exe.config.num_threads is not None:
        return exe
    exe.config = exe.config.replace(num_threads=max(1, int(threads)))
    exe.threads = exe.backend.threads(exe.config)
    exe._start()                      # plans (and their per-worker scratch) for that many workers
    return exe


def _built(token: str, payload: bytes, threads: Optional[int]):
    with _BUILT_LOCK:
        exe = _BUILT.get(token)
        if exe is None:
            exe = _with_threads(pickle.loads(payload), threads)
            _BUILT[token] = exe
            _BUILDS[0] += 1
    return exe


def _dask_worker_threads() -> Optional[int]:
    try:
        from distributed import get_worker
        return get_worker().state.nthreads
    except (ImportError, ValueError, AttributeError):
        return None


def _run_block(block: np.ndarray, token: str, payload: bytes, input_name: str, output_name: str) -> np.ndarray:
    exe = _built(token, payload, _dask_worker_threads())
    x = np.ascontiguousarray(block, dtype=np.float32)
    return exe.run({input_name: x})[output_name]


def output_shape(exe, input_name: str, output_name: str, shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """The output's shape for one input of this shape, by the graph's shape rules (no run)."""
    from .thunks.plan import infer_concrete, needed_nodes
    if len(exe._input_dims) != 1:
        raise ValueError(f"predict takes an executable with one input, this one has {list(exe._input_dims)}")
    order = needed_nodes(exe._nodes, exe._outputs.values())
    return tuple(infer_concrete(exe._nodes, exe._params, {input_name: tuple(shape)}, order)[exe._outputs[output_name]])


def predict(exe, array, input_name: Optional[str] = None, output_name: Optional[str] = None):
    """The executable over a Dask array chunked along its first (batch) axis: a Dask array of
    the output, one output chunk per input chunk. Other axes are made one chunk each. The
    output's chunks and meta are given, so Dask runs no probe of the function."""
    import dask.array as da
    input_name = _only(exe._input_dims, input_name, "input")
    output_name = _only(exe._outputs, output_name, "output")
    dims = exe._input_dims[input_name]
    if array.ndim != len(dims):
        raise ValueError(f"predict: input {input_name!r} has rank {len(dims)} {list(dims)}, the array has shape "
                         f"{array.shape}")
    if array.ndim > 1:
        array = array.rechunk({i: -1 for i in range(1, array.ndim)})
    out_tail = None
    out_chunks = []
    for n in array.chunks[0]:
        shape = output_shape(exe, input_name, output_name, (n,) + tuple(array.shape[1:]))
        if shape[0] != n:
            raise ValueError(f"predict: output {output_name!r} does not keep the batch axis ({shape} for a batch "
                             f"of {n})")
        out_tail = shape[1:] if out_tail is None else out_tail
        out_chunks.append(n)
    out_rank = 1 + len(out_tail)
    kw = {}
    if out_rank < array.ndim:
        kw["drop_axis"] = list(range(out_rank, array.ndim))
    elif out_rank > array.ndim:
        kw["new_axis"] = list(range(array.ndim, out_rank))
    payload = pickle.dumps(exe, protocol=pickle.HIGHEST_PROTOCOL)
    token = uuid.uuid4().hex
    return da.map_blocks(_run_block, array, token, payload, input_name, output_name, dtype=np.float32,
                         chunks=(tuple(out_chunks),) + tuple((d,) for d in out_tail),
                         meta=np.empty((0,) * out_rank, np.float32), **kw)


class RayPredictor:
    """For Ray Data: ds.map_batches(RayPredictor, fn_constructor_args=(exe,), concurrency=2,
    batch_format="numpy"). Each actor compiles the executable in __init__ (one warm-up run of
    a batch of one, which also loads the kernels) and maps a batch {input_name: array} to
    {output_name: array}."""

    def __init__(self, exe, input_name: Optional[str] = None, output_name: Optional[str] = None):
        self.input_name = _only(exe._input_dims, input_name, "input")
        self.output_name = _only(exe._outputs, output_name, "output")
        self.exe = _with_threads(exe, _ray_actor_cpus())
        shape = tuple(1 if not isinstance(d, int) else d for d in exe._input_dims[self.input_name])
        self.exe.run({self.input_name: np.zeros(shape, np.float32)})

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if self.input_name not in batch:
            raise KeyError(f"RayPredictor: the batch has columns {sorted(batch)}, not the input {self.input_name!r}")
        x = np.ascontiguousarray(np.stack(batch[self.input_name]) if batch[self.input_name].dtype == object
                                 else batch[self.input_name], dtype=np.float32)
        return {self.output_name: self.exe.run({self.input_name: x})[self.output_name]}


def _ray_actor_cpus() -> Optional[int]:
    try:
        import ray
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
        return max(1, int(cpus)) if cpus else None
    except Exception:          # not in a Ray worker, or an older API
        return None


__all__ = ["predict", "RayPredictor", "builds_here", "output_shape"]
