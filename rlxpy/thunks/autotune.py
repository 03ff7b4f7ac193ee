"""Autotuning (compile(graph, autotune=True) or RLX_AUTOTUNE=1): for every conv-family node
of a plan, time the exact kernels eligible for its record on its shape, validate the
fastest against the reference kernel (one over tolerance is rejected and the next tried),
and keep the choice in an on-disk cache, so later compiles of the same shapes read it
without timing.

A candidate runs as the one-node executable of its node (the node's params, random
inputs of its concrete shapes), forced to the candidate by a per-node override, timed by
exe.profile: only the node's own thunk counts (not the reorders around it, which a graph
of blocked neighbours does not pay). Winograd variants are candidates only where
RLX_WINOGRAD allows them (they are not exact). A node the user forced (algos=, or
RLX_CONV_ALGO) is not tuned.

Cache: one JSON file per key under Config.tuning_dir / "autotune". The key names the
record type, its geometry and epilogue, whether its weight is a param, the host (CPU model,
SIMD width, threads: the backend's tuning_host) and the rlxpy version; the file holds the
key itself, so a file whose key differs, that does not parse, or whose algo is no longer
eligible is ignored with a warning (and replaced by a new measurement), never trusted.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import warnings
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional

import numpy as np

from ..config import CONV_ALGOS
from .backend import ChoiceContext
from .compile import LowerCtx, lookup
from .plan import infer_concrete, needed_nodes

CACHE_FORMAT = 1
WINOGRAD_ALGOS = ("winograd", "winograd_f4")
NOT_CANDIDATES = ("auto", "naive")      # the reference kernel is the oracle, not a candidate
REPEAT = 5


@dataclass(frozen=True)
class Tuned:
    """The outcome for one node: the algo kept, each candidate's median ms, the candidates
    rejected and why, and whether it was measured now or read from the cache."""
    node: str
    algo: str
    times_ms: Dict[str, float]
    rejected: Dict[str, str] = field(default_factory=dict)
    source: str = "measured"      # "measured" or "cache"
    penalty_ms: Dict[str, float] = field(default_factory=dict)   # reorders a candidate's layouts would add

    def cost(self, algo: str) -> float:
        return self.times_ms[algo] + self.penalty_ms.get(algo, 0.0)

    def _text(self, algo: str) -> str:
        extra = self.penalty_ms.get(algo, 0.0)
        return f"{algo} {self.times_ms[algo]:.3f} ms" + (f" (+{extra:.3f} ms reorders)" if extra else "")

    def why(self) -> str:
        others = ", ".join(self._text(a) for a in sorted(self.times_ms, key=self.cost) if a != self.algo)
        text = (f"autotuned ({self.source}): {self._text(self.algo)}, "
                f"fastest of {len(self.times_ms)}" + (f"; {others}" if others else ""))
        if self.rejected:
            text += "; rejected: " + ", ".join(f"{a} ({r})" for a, r in self.rejected.items())
        return text


def tuning_key(rec, host: str, version: str) -> str:
    epilogue = getattr(rec, "epilogue", None)
    return (f"v{CACHE_FORMAT}|rlxpy {version}|{host}|{type(rec).__name__}|{rec.geometry!r}|"
            f"epilogue={epilogue!r}|residual={getattr(rec, 'r', -1) >= 0}|"
            f"weight_const={getattr(rec, 'weight_const', None)}")


class TuningCache:
    """JSON files named by the key's hash; each holds its key, so a collision or a file
    from another version reads as stale."""

    def __init__(self, directory: str):
        self.dir = os.path.join(directory, "autotune")

    def path(self, key: str) -> str:
        return os.path.join(self.dir, hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def get(self, key: str, node: str) -> Optional[dict]:
        path = self.path(key)
        if not os.path.exists(path):
            return None
        try:
            with open(path) as f:
                entry = json.load(f)
            if not isinstance(entry, dict) or not isinstance(entry.get("algo"), str) \
                    or not isinstance(entry.get("times_ms"), dict):
                raise ValueError("missing fields")
        except (OSError, ValueError) as e:
            warnings.warn(f"autotune: ignoring the corrupt cache entry {path} for node {node!r} ({e}); "
                          f"measuring again", RuntimeWarning, stacklevel=4)
            return None
        if entry.get("key") != key:
            warnings.warn(f"autotune: ignoring the stale cache entry {path} for node {node!r} (written for "
                          f"another key); measuring again", RuntimeWarning, stacklevel=4)
            return None
        return entry

    def put(self, key: str, tuned: Tuned) -> None:
        """Written to a temporary file and renamed: a reader never sees half a file."""
        os.makedirs(self.dir, exist_ok=True)
        path = self.path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"key": key, "algo": tuned.algo, "times_ms": tuned.times_ms, "rejected": tuned.rejected,
                       "penalty_ms": tuned.penalty_ms}, f)
        os.replace(tmp, path)


def candidates(rec, exe) -> List[str]:
    """The algos the backend would run this record with when forced to them (a forced algo
    that is not eligible falls back to another: that one is not a candidate)."""
    allowed_winograd = {"f4": ("winograd_f4",), True: ("winograd",)}.get(exe.config.winograd, ())
    config = exe.config.replace(conv_algo="auto")
    out = []
    for algo in CONV_ALGOS:
        if algo in NOT_CANDIDATES or (algo in WINOGRAD_ALGOS and algo not in allowed_winograd):
            continue
        ctx = ChoiceContext(config, exe.threads, {rec.node: algo})
        try:
            if exe.backend.choose(rec, ctx).algo == algo:
                out.append(algo)
        except (NotImplementedError, ValueError):
            pass
    return out


def _one_node_graph(exe, node, shapes):
    """The node alone, its inputs graph inputs (or the same params) of concrete shapes."""
    from ..ir.graph import Graph, Node
    g = Graph()
    ids = {}
    for vid in dict.fromkeys(node.inputs):
        src = exe._nodes[vid]
        k = len(g.nodes)
        if vid in exe._params:
            g.nodes.append(Node(src.name, "Param", None, (), k, shapes[vid]))
            g.params[k] = exe._params[vid]
        else:
            g.nodes.append(Node(src.name, "Input", None, (), k, shapes[vid]))
            g.inputs[src.name] = k
        ids[vid] = k
    k = len(g.nodes)
    g.nodes.append(replace(node, inputs=tuple(ids[v] for v in node.inputs), output=k, shape=shapes[node.output]))
    g.outputs["y"] = k
    return g


def _layouts(choice, rec) -> Dict[str, str]:
    return {role: choice.layout(role) for role in ("x", "y") if role in rec.roles()}


def _copy_ms_per_byte(nbytes: int) -> float:
    """What moving bytes costs here when no reorder was timed (a blocked kernel that stores
    a plain output itself): a memory copy of that size, the median of a few."""
    import time
    if nbytes <= 0:
        return 0.0
    src = np.ones(nbytes // 8 + 1, np.float32)
    dst = np.empty_like(src)
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        runs.append(time.perf_counter() - t0)
    return sorted(runs)[2] * 1e3 / (2 * src.nbytes)


def measure(exe, node, rec, shapes, tolerances=None) -> Tuned:
    """Each candidate's own thunk timed; ranked by that time plus, for an input or output
    it stores in another layout than the untuned choice does, the reorder the graph would
    then pay (estimated at the rate of the reorders the one-node runs did time)."""
    from .executor import Executable
    from .layout import stored_bytes
    graph = _one_node_graph(exe, node, shapes)
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(graph.nodes[v].shape).astype(np.float32) for name, v in graph.inputs.items()}
    config = exe.config.replace(conv_algo="auto", autotune=False, validate=False, profile=False)
    default = _layouts(exe.backend.choose(rec, ChoiceContext(config, exe.threads, {})), rec)
    times, rejected, runs, moved = {}, {}, {}, {}
    reorder_bytes, reorder_ms = 0, 0.0
    for algo in candidates(rec, exe):
        try:
            one = Executable(graph, exe.backend, config, algos={node.name: algo})
            prof = one.profile(inputs, repeat=REPEAT)
        except Exception as e:            # a candidate that fails is rejected, never fatal
            rejected[algo] = f"failed: {type(e).__name__}: {e}"
            continue
        times[algo] = next(r["ms"] for r in prof.rows if r["node"] == node.name)
        for r in prof.rows:
            if r["op"] == "Reorder":
                reorder_bytes, reorder_ms = reorder_bytes + r["bytes"], reorder_ms + r["ms"]
        choice = _layouts(exe.backend.choose(rec, ChoiceContext(config, exe.threads, {node.name: algo})), rec)
        moved[algo] = sum(stored_bytes(shapes[getattr(rec, role)], choice[role]) + stored_bytes(
            shapes[getattr(rec, role)], default[role]) for role in choice if choice[role] != default[role])
        runs[algo] = one
    ms_per_byte = reorder_ms / reorder_bytes if reorder_bytes else _copy_ms_per_byte(max(moved.values(), default=0))
    penalty = {a: moved[a] * ms_per_byte for a in times if moved[a]}
    for algo in sorted(times, key=lambda a: times[a] + penalty.get(a, 0.0)):
        report = runs[algo].validate(inputs, tolerances)
        if report.ok:
            return Tuned(node.name, algo, times, rejected, penalty_ms=penalty)
        bad = report.failures()[0]
        rejected[algo] = f"max rel error {bad['max_rel']:.3g} > {bad['tol']:.0e}"
    raise RuntimeError(f"autotune: no candidate kernel for node {node.name!r} passed validation: {rejected}")


def _progress(items, total: int):
    """A tqdm bar on stderr when tqdm is installed (pip install "rlxpy[tune]"), else plain."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, total=total, desc="rlxpy autotune", unit="node", file=sys.stderr, leave=False,
                disable=not sys.stderr.isatty())


def autotune(exe, shapes, skip=()) -> Dict[str, Tuned]:
    """{node name: Tuned} for the conv-family nodes of the plan for these input shapes (not
    those in `skip`: forced by the user). Shapes alike in one graph are measured once."""
    from .. import __version__
    from .executor import CONV_FAMILY
    order = needed_nodes(exe._nodes, exe._outputs.values())
    concrete = infer_concrete(exe._nodes, exe._params, shapes, order)
    lower = LowerCtx(concrete, frozenset(exe._params))
    host = exe.backend.tuning_host(exe.config, exe.threads)
    cache = TuningCache(exe.config.tuning_dir)
    todo = [exe._nodes[i] for i in order if exe._nodes[i].op in CONV_FAMILY and exe._nodes[i].name not in skip]
    tuned: Dict[str, Tuned] = {}
    seen: Dict[str, Tuned] = {}
    for node in _progress(todo, len(todo)):
        rec = lookup(node.op)(node, lower)
        key = tuning_key(rec, host, __version__)
        if key in seen:
            tuned[node.name] = replace(seen[key], node=node.name)
            continue
        entry = cache.get(key, node.name)
        result = None
        if entry is not None:
            if entry["algo"] in candidates(rec, exe):
                result = Tuned(node.name, entry["algo"], {k: float(v) for k, v in entry["times_ms"].items()},
                               dict(entry.get("rejected", {})), "cache",
                               {k: float(v) for k, v in entry.get("penalty_ms", {}).items()})
            else:
                warnings.warn(f"autotune: ignoring the stale cache entry {cache.path(key)} for node {node.name!r} "
                              f"({entry['algo']!r} is not eligible for it now); measuring again",
                              RuntimeWarning, stacklevel=2)
        if result is None:
            result = measure(exe, node, rec, concrete)
            try:
                cache.put(key, result)
            except OSError as e:
                warnings.warn(f"autotune: could not write the cache under {cache.dir} ({e}); the choice holds for "
                              f"this process only", RuntimeWarning, stacklevel=2)
        tuned[node.name] = seen[key] = result
    return tuned
