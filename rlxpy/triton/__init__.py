"""Optional GPU lowering: compile(graph, device="cuda"). Nothing here imports torch or
triton until that call (rlxpy.triton.executable imports them lazily)."""
