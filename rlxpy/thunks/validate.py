"""exe.validate(inputs): every thunk's chosen kernel against its record's reference kernel,
on the same inputs.

The run goes thunk by thunk through the executable's own plan. Before each thunk, its
inputs, as the fast path holds them (upstream fast values, blocked tensors unblocked), are
copied into the reference plan's arena and the record's reference kernel runs on them, so
an error shows at the node that makes it and does not compound downstream. A Reorder is
checked as the copy it is (its output equals its input exactly).

Error per output: max_abs = max |fast - reference| (a NaN against a number, or an inf
against another value, is an infinite error; NaN against NaN is none); max_rel = max_abs /
max(1, max |reference|), the bound the tests use (not blown up by one output near zero);
ok when max_rel <= the tolerance of the chosen algo.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from .layout import lanes_of, stored_shape
from .records import ABSENT, Reorder

DEFAULT_TOLERANCE = 1e-4     # float32 kernels against the float64 references, relative to the output's scale
# Winograd transforms lose digits by design; README and tests state what each loses
TOLERANCE = {"winograd": 1e-3, "winograd_f4": 1e-2}


def tolerance(algo: str, overrides=None) -> float:
    return (overrides or {}).get(algo, TOLERANCE.get(algo, DEFAULT_TOLERANCE))


def unblock(stored: np.ndarray, shape, layout: str) -> np.ndarray:
    """A tensor as the user sees it from its stored form: [N, ceil(C/c), prod(S), c] ->
    [N, C, *S] (lanes past C dropped); a plain tensor as it is."""
    c = lanes_of(layout)
    if not c:
        return stored.reshape(shape)
    n, ch = shape[0], shape[1]
    return stored.transpose(0, 1, 3, 2).reshape(n, -1, stored.shape[2])[:, :ch].reshape(shape)


def errors(fast: np.ndarray, ref: np.ndarray):
    """(max_abs, max_rel) as the module docstring defines them."""
    if fast.size == 0:
        return 0.0, 0.0
    f, r = fast.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (f == r) | (np.isnan(f) & np.isnan(r))
        diff = np.where(same, 0.0, np.abs(f - r))
    diff = np.where(np.isnan(diff), np.inf, diff)
    max_abs = float(diff.max())
    finite = np.abs(r[np.isfinite(r)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    return max_abs, max_abs / scale


@dataclass(frozen=True)
class Report:
    """rows: one dict per checked output of every thunk, in run order: node, op, algo,
    reference (the oracle's algo), output (role), max_abs, max_rel, tol, ok."""
    rows: List[dict]
    inputs: str

    @property
    def ok(self) -> bool:
        return all(r["ok"] for r in self.rows)

    @property
    def first_failure(self) -> Optional[str]:
        """The node of the first thunk (in run order) over its tolerance, or None."""
        return next((r["node"] for r in self.rows if not r["ok"]), None)

    def failures(self) -> List[dict]:
        return [r for r in self.rows if not r["ok"]]

    def __str__(self) -> str:
        head = ("node", "op", "algo", "vs", "max abs", "max rel", "tol", "")
        body = [(r["node"], r["op"], r["algo"], r["reference"], f"{r['max_abs']:.3g}", f"{r['max_rel']:.3g}",
                 f"{r['tol']:.0e}", "ok" if r["ok"] else "FAIL") for r in self.rows]
        widths = [max(len(row[i]) for row in body + [head]) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head] + body]
        verdict = "all within tolerance" if self.ok else f"first failure: {self.first_failure}"
        return f"validate: {self.inputs}\n" + "\n".join(lines) + f"\n{len(self.rows)} outputs checked; {verdict}"


class Validation:
    """One validating pass: the executable's bound arena (inputs copied in) and a bound
    arena of the reference plan for the same shapes."""

    def __init__(self, exe, plan, bound, ref_plan, ref_bound, tolerances=None):
        self.exe, self.plan, self.bound = exe, plan, bound
        self.ref_plan, self.ref_bound = ref_plan, ref_bound
        self.ref_at = {t.node: k for k, t in enumerate(ref_plan.thunks)}
        self.ops = {n.name: n.op for n in exe._nodes}
        self.tolerances = tolerances

    def value(self, thunk, role: str) -> np.ndarray:
        """A role of a fast-path thunk as the user sees it, copied to the host."""
        vid = getattr(thunk.record, role)
        shape, layout = self.plan.shapes[vid], thunk.layout(role)
        stored = stored_shape(shape, layout)
        if role not in dict(thunk.image_strides):
            view = self.exe.backend.view(self.bound.arena, thunk.off(role), stored)
            return unblock(self.exe._to_host(view), shape, layout)
        # a slice of a wider buffer (a concat's output): its images one by one
        stride = thunk.image_stride(role, shape)
        images = [self.exe._to_host(self.exe.backend.view(self.bound.arena, thunk.off(role) + n * stride, stored[1:]))
                  for n in range(stored[0])]
        return unblock(np.stack(images), shape, layout)

    def run(self) -> List[dict]:
        rows = []
        for fn, th in self.bound.calls:
            rec = th.record
            if isinstance(rec, Reorder):
                self.exe._launch_each([(fn, th)])
                self.exe._sync()
                rows.append(self._row(th, "y", "copy", self.value(th, "y"), self.value(th, "x"), tol=0.0))
                continue
            ref = self._reference(th)
            self.exe._launch_each([(fn, th)])
            self.exe._sync()
            for role, expected in ref.items():
                rows.append(self._row(th, role, self._ref_algo(th), self.value(th, role), expected))
        return rows

    def _ref_algo(self, th) -> str:
        return self.ref_plan.thunks[self.ref_at[th.node]].algo

    def _reference(self, th) -> dict:
        """The record's reference kernel on the fast path's inputs of this thunk: its outputs by role."""
        k = self.ref_at[th.node]
        rth = self.ref_plan.thunks[k]
        rb = self.exe.reference_backend
        for role in th.record.INPUTS:
            if getattr(th.record, role) == ABSENT:
                continue
            arr = np.ascontiguousarray(self.value(th, role))
            rb.copy_into(rb.view(self.ref_bound.arena, rth.off(role), arr.shape), arr)
        self.exe._launch_each([self.ref_bound.calls[k]])
        out = {}
        for role in rth.record.OUTPUTS:
            shape = self.ref_plan.shapes[getattr(rth.record, role)]
            out[role] = np.array(rb.view(self.ref_bound.arena, rth.off(role), shape))
        return out

    def _row(self, th, role, ref_algo, fast, expected, tol=None) -> dict:
        if fast.shape != expected.shape:
            raise AssertionError(f"{th.node}: output {role} has shape {fast.shape} on the fast path and "
                                 f"{expected.shape} in the reference plan")
        max_abs, max_rel = errors(fast, expected)
        tol = tolerance(th.algo, self.tolerances) if tol is None else tol
        op = "Reorder" if isinstance(th.record, Reorder) else self.ops.get(th.node, type(th.record).__name__)
        return dict(node=th.node, op=op, algo=th.algo, reference=ref_algo, output=role,
                    max_abs=max_abs, max_rel=max_rel, tol=tol, ok=max_rel <= tol)

