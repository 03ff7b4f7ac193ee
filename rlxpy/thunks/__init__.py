"""Thunk records, per-op compile functions, the arena planner and the executor."""
