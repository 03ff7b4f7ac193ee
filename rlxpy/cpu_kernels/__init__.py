"""Numba kernels, one module per family; each family's reference ("naive") kernel is the oracle."""
