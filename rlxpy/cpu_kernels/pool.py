"""Pooling: reference kernels in 3-D form (1-D and 2-D pools have unit leading axes)."""
import numpy as np

from .jit import kernel


@kernel
def _max_window(x, n, c, z0, y0, x0, KD, KH, KW, dd, dh, dw):
    """PyTorch's rule: a value wins if it is greater, or NaN; ties keep the first in scan
    order. Returns (max, flat index into the (D,H,W) plane or -1 for an empty window)."""
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    best = -np.inf
    arg = -1
    for kd in range(KD):
        iz = z0 + kd * dd
        if iz < 0 or iz >= D:
            continue
        for kh in range(KH):
            iy = y0 + kh * dh
            if iy < 0 or iy >= H:
                continue
            for kw in range(KW):
                ix = x0 + kw * dw
                if ix < 0 or ix >= W:
                    continue
                v = x[n, c, iz, iy, ix]
                if arg < 0 or v > best or np.isnan(v):
                    best = v
                    arg = (iz * H + iy) * W + ix
    return best, arg


@kernel
def pool_naive(x, y, is_max, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew, dd, dh, dw,
               count_include_pad):
    """The oracle. (pd, ph, pw) begin and (ed, eh, ew) end paddings. Average pooling divides
    as PyTorch does: the window clipped to the padded input when count_include_pad, else
    clipped to the input."""
    N, C, D, H, W = x.shape
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    for n in range(N):
        for c in range(C):
            for od in range(OD):
                for oh in range(OH):
                    for ow in range(OW):
                        z0 = od * sd - pd
                        y0 = oh * sh - ph
                        x0 = ow * sw - pw
                        if is_max:
                            y[n, c, od, oh, ow] = _max_window(x, n, c, z0, y0, x0, KD, KH, KW, dd, dh, dw)[0]
                            continue
                        z1 = min(z0 + KD, D + ed)
                        y1 = min(y0 + KH, H + eh)
                        x1 = min(x0 + KW, W + ew)
                        padded_count = (z1 - z0) * (y1 - y0) * (x1 - x0)
                        z0c, y0c, x0c = max(z0, 0), max(y0, 0), max(x0, 0)
                        z1c, y1c, x1c = min(z1, D), min(y1, H), min(x1, W)
                        acc = 0.0
                        for iz in range(z0c, z1c):
                            for iy in range(y0c, y1c):
                                for ix in range(x0c, x1c):
                                    acc += np.float64(x[n, c, iz, iy, ix])
                        count = padded_count if count_include_pad else (z1c - z0c) * (y1c - y0c) * (x1c - x0c)
                        y[n, c, od, oh, ow] = acc / count


@kernel
def max_pool_backward_naive(x, dy, dx, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw):
    """dx = 0, then each window's dy goes to the element that won its forward max."""
    N, C, D, H, W = x.shape
    OD, OH, OW = dy.shape[2], dy.shape[3], dy.shape[4]
    dx[:] = 0.0
    for n in range(N):
        for c in range(C):
            for od in range(OD):
                for oh in range(OH):
                    for ow in range(OW):
                        arg = _max_window(x, n, c, od * sd - pd, oh * sh - ph, ow * sw - pw,
                                          KD, KH, KW, dd, dh, dw)[1]
                        if arg >= 0:
                            iz = arg // (H * W)
                            iy = (arg // W) % H
                            ix = arg % W
                            dx[n, c, iz, iy, ix] += dy[n, c, od, oh, ow]
