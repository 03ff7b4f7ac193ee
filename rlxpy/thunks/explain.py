"""explain(): one row per thunk (node, op, record type, algo and why, shapes, FLOPs, arena
offset and bytes of its output and scratch) and the arena's total size."""
from __future__ import annotations

from ..ir.shape import fmt_shape
from . import records as R
from .cost import flops
from .layout import PLAIN, stored_bytes


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _shape(plan, vid: int) -> str:
    layout = plan.layouts.get(vid, PLAIN)
    return fmt_shape(plan.shapes[vid]) + ("" if layout == PLAIN else f"[{layout}]")


def explain_plan(plan, nodes) -> str:
    by_name = {n.name: n for n in nodes}
    rows = []
    total_flops = 0
    for i, th in enumerate(plan.thunks):
        rec = th.record
        node = by_name.get(rec.node)
        op = node.op if node is not None else type(rec).__name__      # a Reorder has no graph node
        ins = " ".join(_shape(plan, getattr(rec, r)) for r in rec.INPUTS if getattr(rec, r) != R.ABSENT)
        outs = [getattr(rec, r) for r in rec.OUTPUTS]
        f = flops(rec)
        total_flops += f
        mem = f"@{th.output_offsets[0]} {_human(stored_bytes(plan.shapes[outs[0]], plan.layouts.get(outs[0], PLAIN)))}"
        if th.scratch_bytes:
            mem += f" + scratch @{th.scratch_off} {_human(th.scratch_bytes)}"
        if th.persistent_bytes:
            mem += f" + persistent @{th.persistent_off} {_human(th.persistent_bytes)}"
        rows.append((str(i), rec.node, op, type(rec).__name__, th.algo,
                     f"{ins} -> {' '.join(_shape(plan, v) for v in outs)}", f"{f / 1e6:.1f}", mem, th.why))
    head = ("#", "node", "op", "record", "algo", "shapes", "MFLOP", "arena (offset, bytes)", "why")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in [head] + rows]
    lines.append(f"arena: {plan.arena_bytes} bytes ({_human(plan.arena_bytes)}); without reuse "
                 f"{plan.sum_value_bytes} bytes; {len(plan.thunks)} thunks, {total_flops / 1e6:.1f} MFLOP")
    return "\n".join(lines)
