"""Backends by name, imported when asked for: what an unpickled executable runs on (the
device-neutral layers in rlxpy/thunks import no backend themselves)."""


def backend_named(name: str):
    if name == "cpu":
        from .cpu_kernels.backend import CPU
        return CPU
    raise ValueError(f"no backend named {name!r} can be restored here (only 'cpu' executables are pickled)")
