"""Per-thunk profiles: exe.profile(inputs) times every thunk of the plan (the median over
repeats, after a warm-up run) and returns a Profile: a table, rows as dicts, a Chrome /
Perfetto trace and (with matplotlib) a bar chart. RLX_PROFILE=1 prints one line per thunk
of every run instead (ProfileLine)."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from statistics import median
from typing import Callable, Dict, List, Sequence

from ..ir.shape import fmt_shape
from .cost import flops, traffic_bytes
from .records import Reorder

ROW_KEYS = ("node", "op", "algo", "ms", "percent", "gflops", "gbs", "record", "shapes")


def timed(fn, sync: Callable[[], None]) -> float:
    """Seconds one bound call takes, the device waited for before and after."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def time_thunks(calls: Sequence, repeat: int, sync: Callable[[], None]) -> List[float]:
    """Seconds per bound call: the median of `repeat` passes over all of them in run order
    (each pass is a whole run, so every thunk sees the caches a run leaves it)."""
    times: List[List[float]] = [[] for _ in calls]
    for _ in range(repeat):
        for k, (fn, _thunk) in enumerate(calls):
            times[k].append(timed(fn, sync))
    return [median(t) for t in times]


def _op_of(thunk, ops: Dict[str, str]) -> str:
    return "Reorder" if isinstance(thunk.record, Reorder) else ops.get(thunk.node, type(thunk.record).__name__)


def thunk_row(thunk, plan, seconds: float, ops: Dict[str, str]) -> dict:
    f, nbytes = flops(thunk.record), traffic_bytes(thunk, plan)
    out = thunk.record.value_ids()[-1]
    return dict(node=thunk.node, op=_op_of(thunk, ops), algo=thunk.algo, ms=seconds * 1e3,
                gflops=f / seconds / 1e9 if seconds > 0 else 0.0,
                gbs=nbytes / seconds / 1e9 if seconds > 0 else 0.0,
                record=type(thunk.record).__name__, shapes=fmt_shape(plan.shapes[out]), flops=f, bytes=nbytes)


@dataclass(frozen=True)
class Profile:
    """rows: one dict per thunk, in run order, with the keys ROW_KEYS (and flops, bytes);
    total_ms: the sum of the thunks' medians (what a run spends in kernels)."""
    rows: List[dict]
    total_ms: float
    repeat: int
    inputs: str

    @classmethod
    def of(cls, plan, nodes, seconds: Sequence[float], repeat: int) -> "Profile":
        ops = {n.name: n.op for n in nodes}
        rows = [thunk_row(t, plan, s, ops) for t, s in zip(plan.thunks, seconds)]
        total = sum(r["ms"] for r in rows)
        for r in rows:
            r["percent"] = 100.0 * r["ms"] / total if total > 0 else 0.0
        inputs = ", ".join(f"{n} {fmt_shape(s)}" for n, (_, s) in plan.inputs.items())
        return cls(rows, total, repeat, inputs)

    def __str__(self) -> str:
        head = ("#", "node", "op", "algo", "ms", "%", "GFLOP/s", "GB/s")
        body = [(str(i), r["node"], r["op"], r["algo"], f"{r['ms']:.3f}", f"{r['percent']:.1f}",
                 f"{r['gflops']:.1f}" if r["flops"] else "-", f"{r['gbs']:.1f}") for i, r in enumerate(self.rows)]
        widths = [max(len(row[i]) for row in body + [head]) for i in range(len(head))]
        right = {0, 4, 5, 6, 7}
        fmt = lambda row: "  ".join(c.rjust(w) if i in right else c.ljust(w)   # noqa: E731
                                    for i, (c, w) in enumerate(zip(row, widths)))
        total_flops = sum(r["flops"] for r in self.rows)
        rate = total_flops / self.total_ms / 1e6 if self.total_ms > 0 else 0.0
        return "\n".join([f"profile: {self.inputs}; median of {self.repeat} runs per thunk", fmt(head)]
                         + [fmt(b) for b in body]
                         + [f"total {self.total_ms:.3f} ms in {len(self.rows)} thunks, "
                            f"{total_flops / 1e6:.1f} MFLOP, {rate:.1f} GFLOP/s"])

    def by_algo(self) -> Dict[str, float]:
        """Milliseconds per algo, largest first."""
        acc: Dict[str, float] = {}
        for r in self.rows:
            acc[r["algo"]] = acc.get(r["algo"], 0.0) + r["ms"]
        return dict(sorted(acc.items(), key=lambda kv: -kv[1]))

    def chrome_trace(self) -> dict:
        """Trace-event JSON (the format chrome://tracing and Perfetto open): one complete
        event ("ph": "X") per thunk, laid end to end at their median times, in microseconds."""
        events, ts = [], 0.0
        for i, r in enumerate(self.rows):
            dur = r["ms"] * 1e3
            events.append({"name": r["node"], "cat": r["algo"], "ph": "X", "ts": round(ts, 3),
                           "dur": round(dur, 3), "pid": 1, "tid": 1,
                           "args": {"index": i, "op": r["op"], "algo": r["algo"], "record": r["record"],
                                    "shape": r["shapes"], "gflops": round(r["gflops"], 3),
                                    "gbs": round(r["gbs"], 3)}})
            ts += dur
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"inputs": self.inputs, "repeat": self.repeat, "total_ms": self.total_ms}}

    def save_chrome_trace(self, path) -> None:
        with open(path, "w") as f:
            json.dump(self.chrome_trace(), f)

    def plot(self, path, title: str = "") -> None:
        """A PNG of the time per thunk as horizontal bars, colored by algo (needs matplotlib:
        pip install "rlxpy[plot]")."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError('Profile.plot needs matplotlib: pip install "rlxpy[plot]"') from None
        algos = list(self.by_algo())
        colors = {a: plt.get_cmap("tab20")(i % 20) for i, a in enumerate(algos)}
        n = len(self.rows)
        fig, ax = plt.subplots(figsize=(9, max(2.5, 0.22 * n + 1.2)))
        ax.barh(range(n), [r["ms"] for r in self.rows], color=[colors[r["algo"]] for r in self.rows])
        ax.set_yticks(range(n), [r["node"] for r in self.rows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("ms (median per thunk)")
        ax.set_title(title or f"{self.inputs}: {self.total_ms:.2f} ms")
        handles = [plt.Rectangle((0, 0), 1, 1, color=colors[a]) for a in algos]
        ax.legend(handles, algos, fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


class ProfileLine:
    """RLX_PROFILE=1: a run's bound calls, each timed and printed as it finishes."""

    def __init__(self, plan, nodes, sync: Callable[[], None], stream=None):
        self.plan, self.sync = plan, sync
        self.ops = {n.name: n.op for n in nodes}
        self.stream = stream or sys.stderr

    def wrap(self, fn, th):
        """The bound call, timed and printed as it finishes."""
        def call():
            r = thunk_row(th, self.plan, timed(fn, self.sync), self.ops)
            rate = f"{r['gflops']:8.1f} GFLOP/s" if r["flops"] else f"{r['gbs']:8.1f} GB/s   "
            print(f"rlx {r['ms']:9.3f} ms {rate}  {r['algo']:<20} {r['op']:<18} {r['node']}", file=self.stream)
        return call
