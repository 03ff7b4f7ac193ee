"""Executables across processes: pickle (Dask and Ray ship what they run this way) and
exe.save(path) / rx.load(path).

What travels: the graph as the executable rewrote it (nodes with their frozen attrs;
params once, as arrays: pickle keeps one copy of an array however often it is referenced),
the Config, the per-node algos the user forced and the ones autotuning chose, and the
backend's name. Not numba code, plans or arenas: the receiving process rebuilds them (its
numba cache makes that fast) for its own CPU and core count, so a worker pinned to one
core plans one worker's scratch.
"""
from __future__ import annotations

import pickle

FORMAT = 1


def executable_state(exe) -> dict:
    if exe.backend.name != "cpu":
        raise TypeError(f"a {exe.backend.name} executable can't be pickled (its arenas are device memory); "
                        f"pickle the graph and compile it where it runs")
    state = {name: getattr(exe, name) for name in exe._STATE}
    chosen = {}
    for tuned in list(exe.tuned.values()):
        chosen.update({node: t.algo for node, t in tuned.items()})
    state["algos"] = {**chosen, **exe.algos}       # autotuned choices run again without timing
    state["autotune"] = False
    state["backend"] = exe.backend.name
    return state


def restore_executable(exe, state: dict) -> None:
    from ..backends import backend_named
    backend = backend_named(state["backend"])
    for name in exe._STATE:
        setattr(exe, name, state[name])
    exe.backend = exe.reference_backend = backend
    exe.tuned = {}
    exe.threads = backend.threads(exe.config)
    exe._start()


def save(exe, path) -> None:
    from .. import __version__
    with open(path, "wb") as f:
        pickle.dump({"format": FORMAT, "rlxpy": __version__, "executable": exe}, f, protocol=pickle.HIGHEST_PROTOCOL)


def load(path):
    """An executable stored by exe.save(path). Only load files you trust: this is pickle."""
    with open(path, "rb") as f:
        data = pickle.load(f)
    if not isinstance(data, dict) or data.get("format") != FORMAT or "executable" not in data:
        raise ValueError(f"{path}: not an rlxpy executable file (format {FORMAT}); write it with exe.save(path)")
    return data["executable"]
