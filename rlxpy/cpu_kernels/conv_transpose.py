"""Transposed convolution (also the input gradient of a conv), reference kernel in 3-D form."""
import numpy as np

from .jit import kernel


@kernel
def conv_transpose_naive(x, w, b, y, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups):
    """The oracle, in gather form so that each output accumulates in float64.
    x [N,C_in,D,H,W], w [C_in, C_out/g, kd,kh,kw], y [N,C_out,OD,OH,OW]: output position o
    receives input i through tap k where o = i*s - p + k*d."""
    N, C, D, H, W = x.shape
    _, Kg, KD, KH, KW = w.shape
    K, OD, OH, OW = y.shape[1], y.shape[2], y.shape[3], y.shape[4]
    Cg = C // groups
    for n in range(N):
        for k in range(K):
            g = k // Kg
            kk = k - g * Kg
            bias = np.float64(b[k]) if b.size > 0 else 0.0
            for od in range(OD):
                for oh in range(OH):
                    for ow in range(OW):
                        acc = 0.0
                        for c in range(g * Cg, (g + 1) * Cg):
                            for kd in range(KD):
                                tz = od + pd - kd * dd
                                if tz < 0 or tz % sd != 0 or tz // sd >= D:
                                    continue
                                for kh in range(KH):
                                    ty = oh + ph - kh * dh
                                    if ty < 0 or ty % sh != 0 or ty // sh >= H:
                                        continue
                                    for kw in range(KW):
                                        tx = ow + pw - kw * dw
                                        if tx < 0 or tx % sw != 0 or tx // sw >= W:
                                            continue
                                        acc += np.float64(x[n, c, tz // sd, ty // sh, tx // sw]) * \
                                            np.float64(w[c, kk, kd, kh, kw])
                        y[n, k, od, oh, ow] = acc + bias
