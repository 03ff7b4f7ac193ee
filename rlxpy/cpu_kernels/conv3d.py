"""Forward convolution, reference kernel in 3-D form (1-D and 2-D convs run it with
unit leading spatial axes), plus the fast 3-D kernels."""
import numpy as np

from .jit import kernel


@kernel
def conv_naive(x, w, b, y, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups):
    """The oracle. x [N,C,D,H,W], w [K,C/g,kd,kh,kw], b [K] or empty, y [N,K,OD,OH,OW];
    pd/ph/pw are the begin paddings (the end padding is implied by y's shape).
    Accumulates in float64 so that it is the most accurate kernel we have."""
    N, C, D, H, W = x.shape
    K, Cg, KD, KH, KW = w.shape
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    Kg = K // groups
    for n in range(N):
        for k in range(K):
            c0 = (k // Kg) * Cg
            bias = np.float64(b[k]) if b.size > 0 else 0.0
            for od in range(OD):
                for oh in range(OH):
                    for ow in range(OW):
                        acc = 0.0
                        for c in range(Cg):
                            for kd in range(KD):
                                iz = od * sd - pd + kd * dd
                                if iz < 0 or iz >= D:
                                    continue
                                for kh in range(KH):
                                    iy = oh * sh - ph + kh * dh
                                    if iy < 0 or iy >= H:
                                        continue
                                    for kw in range(KW):
                                        ix = ow * sw - pw + kw * dw
                                        if ix < 0 or ix >= W:
                                            continue
                                        acc += np.float64(x[n, c0 + c, iz, iy, ix]) * np.float64(w[k, c, kd, kh, kw])
                        y[n, k, od, oh, ow] = acc + bias
