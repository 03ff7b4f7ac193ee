"""Dispatch tables are filled by decorators that sit next to what they register and refuse
a second entry for the same key (shape rules, compile rules, CPU and GPU kernels)."""
from typing import Callable, Dict


def registrar(table: Dict, what: str) -> Callable:
    """register(key...) -> decorator that stores fn in table[key]; a key of several parts
    is stored as a tuple."""
    def register(*key_parts):
        key = key_parts[0] if len(key_parts) == 1 else key_parts

        def deco(fn):
            if key in table:
                raise RuntimeError(f"duplicate {what} for {key}")
            table[key] = fn
            return fn
        return deco
    return register
