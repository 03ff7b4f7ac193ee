"""The coefficients of rlxpy.cpu_kernels.tensor's float32 erf (erf32), fitted here by least
squares on Chebyshev nodes against scipy.special.erf, and their error (in float64; the
kernel's float32 evaluation adds about an ulp).

    python bench/fit_erf.py

erf(x) = x * P(x^2) on [0, 1) (a relative fit), then a polynomial in x - centre on [1, 2),
[2, 3) and [3, 3.92); 1 beyond (1 - erf(3.92) is below half a float32 ulp of 1). Odd.
"""
import numpy as np
from scipy.special import erf

PIECES = ((1.0, 2.0, 8), (2.0, 3.0, 7), (3.0, 3.92, 6))


def chebyshev(lo, hi, n=4000):
    return np.cos(np.linspace(0, np.pi, n)) * (hi - lo) / 2 + (hi + lo) / 2


def fit():
    t = np.clip(chebyshev(0.0, 1.0), 1e-6, 1.0)
    small, *_ = np.linalg.lstsq(np.vander(t * t, 6, increasing=True), erf(t) / t, rcond=None)
    out = [("ERF_SMALL", 0.0, small)]
    for lo, hi, deg in PIECES:
        t = chebyshev(lo, hi)
        c, *_ = np.linalg.lstsq(np.vander(t - (lo + hi) / 2, deg + 1, increasing=True), erf(t), rcond=None)
        out.append((f"ERF_{lo:g}_{hi:g}".replace(".", "_"), (lo + hi) / 2, c))
    return out


if __name__ == "__main__":
    for name, centre, c in fit():
        x = np.linspace(1e-6, 1, 20001) if name == "ERF_SMALL" else np.linspace(centre - 0.5, centre + 0.5, 20001)
        approx = x * np.polyval(c[::-1], x * x) if name == "ERF_SMALL" else np.polyval(c[::-1], x - centre)
        err = np.max(np.abs(approx - erf(x)) / erf(x))
        print(f"{name} = ({', '.join(f'{v:.9e}' for v in c)})   # centre {centre:g}, max rel err {err:.1e}")
