"""Pooling in 3-D form (1-D and 2-D pools have unit leading axes): the reference kernels
and their parallel versions (parallel over the N*C planes, which are independent)."""
import numpy as np
from numba import prange

from .im2col import padded_taps, valid_range
from .jit import kernel, parallel_kernel, u


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
def _pool_plane(x, y, n, c, is_max, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew, dd, dh, dw,
                count_include_pad):
    """One (n, c) plane, tap by tap. Average pooling divides as PyTorch (and, with dilation,
    ONNX) does: by the taps inside the padded input when count_include_pad, else by the
    taps inside the input. A window with no tap inside the input (ONNX's dilation or
    padding past half the kernel) averages to 0, as onnxruntime's (and the GPU kernel's);
    its max is -inf, as PyTorch's."""
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    for od in range(OD):
        for oh in range(OH):
            for ow in range(OW):
                z0 = od * sd - pd
                y0 = oh * sh - ph
                x0 = ow * sw - pw
                if is_max:
                    y[n, c, od, oh, ow] = _max_window(x, n, c, z0, y0, x0, KD, KH, KW, dd, dh, dw)[0]
                    continue
                acc = 0.0
                inside = 0
                for kd in range(KD):
                    iz = z0 + kd * dd
                    for kh in range(KH):
                        iy = y0 + kh * dh
                        for kw in range(KW):
                            ix = x0 + kw * dw
                            if 0 <= iz < D and 0 <= iy < H and 0 <= ix < W:
                                acc += np.float64(x[n, c, iz, iy, ix])
                                inside += 1
                padded = (padded_taps(KD, z0, dd, D + ed) * padded_taps(KH, y0, dh, H + eh) *
                          padded_taps(KW, x0, dw, W + ew))
                y[n, c, od, oh, ow] = acc / max(1, padded if count_include_pad else inside)


@kernel
def pool_naive(x, y, is_max, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew, dd, dh, dw, count_include_pad):
    """The oracle: plane after plane. (pd, ph, pw) begin and (ed, eh, ew) end paddings."""
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            _pool_plane(x, y, n, c, is_max, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew, dd, dh, dw,
                        count_include_pad)


@kernel
def _fast_plane(xf, yf, p, is_max, D, H, W, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew,
                dd, dh, dw, count_include_pad):
    """Plane p of flat x and y: the same windows and rules as the reference, with tap ranges
    clipped once per output and float32 sums. The max of a window does not depend on the
    order its values are visited in (NaN wins whenever one is present)."""
    xo, yo = p * D * H * W, p * OD * OH * OW
    for od in range(OD):
        z0 = od * sd - pd
        zl, zh = valid_range(KD, D, z0, dd)
        for oh in range(OH):
            y0 = oh * sh - ph
            yl, yh = valid_range(KH, H, y0, dh)
            for ow in range(OW):
                x0 = ow * sw - pw
                xl, xh = valid_range(KW, W, x0, dw)
                acc = np.float32(-np.inf) if is_max else np.float32(0.0)
                for kd in range(zl, zh):
                    for kh in range(yl, yh):
                        row = xo + ((z0 + kd * dd) * H + y0 + kh * dh) * W + x0
                        for kw in range(xl, xh):
                            v = xf[u(row + kw * dw)]
                            if is_max:
                                acc = v if (v > acc or v != v) else acc
                            else:
                                acc += v
                if not is_max:
                    if count_include_pad:
                        count = (padded_taps(KD, z0, dd, D + ed) * padded_taps(KH, y0, dh, H + eh) *
                                 padded_taps(KW, x0, dw, W + ew))
                    else:
                        count = (zh - zl) * (yh - yl) * (xh - xl)
                    acc = acc / np.float32(max(1, count))      # no tap inside x: 0, as the reference
                yf[u(yo + (od * OH + oh) * OW + ow)] = acc


@kernel
def _max_into(yf, at, v):
    m = yf[u(at)]
    yf[u(at)] = v if (v > m or v != v) else m     # NaN wins, as in the reference


@kernel
def _max_row_tested(xf, yf, xr, yr, start, sw, W, ow_from, ow_to):
    """One tap folded into outputs [ow_from, ow_to) of a row, each tested against the row's
    ends (the clipped columns): output ow reads input column ow*sw + start."""
    for ow in range(ow_from, ow_to):
        ix = ow * sw + start
        if 0 <= ix < W:
            _max_into(yf, yr + ow, xf[u(xr + ix)])


@kernel
def _max_plane2d(xf, yf, p, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw):
    """A 2-D max-pool plane a row at a time: each input row in the window is folded into the
    output row tap by tap, in one pass over the columns whose taps all fall inside the row
    (no bounds tests there) and tap-tested passes over the few at either end."""
    xo, yo = p * H * W, p * OH * OW
    c_lo, c_hi = valid_range(OW, W - (KW - 1) * dw, -pw, sw)
    for oh in range(OH):
        yr = yo + oh * OW
        for ow in range(OW):
            yf[u(yr + ow)] = np.float32(-np.inf)
        for kh in range(KH):
            iy = oh * sh - ph + kh * dh
            if iy < 0 or iy >= H:
                continue
            xr = xo + iy * W
            for kw in range(KW):
                start = kw * dw - pw
                for ow in range(c_lo, c_hi):
                    _max_into(yf, yr + ow, xf[u(xr + ow * sw + start)])
                _max_row_tested(xf, yf, xr, yr, start, sw, W, 0, min(c_lo, OW))
                _max_row_tested(xf, yf, xr, yr, start, sw, W, max(c_lo, c_hi), OW)


@parallel_kernel
def pool_parallel(x, y, is_max, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew, dd, dh, dw, count_include_pad):
    """Parallel over the N*C planes."""
    D, H, W = x.shape[2], x.shape[3], x.shape[4]
    OD, OH, OW = y.shape[2], y.shape[3], y.shape[4]
    xf, yf = x.reshape(x.size), y.reshape(y.size)
    for p in prange(x.shape[0] * x.shape[1]):
        if is_max and D == 1 and KD == 1:
            _max_plane2d(xf, yf, p, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw)
        else:
            _fast_plane(xf, yf, p, is_max, D, H, W, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, ed, eh, ew,
                        dd, dh, dw, count_include_pad)


@kernel
def _max_backward_plane(x, dy, dx, n, c, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw):
    """dx[n, c] = 0, then each window's dy goes to the element that won its forward max."""
    H, W = x.shape[3], x.shape[4]
    OD, OH, OW = dy.shape[2], dy.shape[3], dy.shape[4]
    for iz in range(x.shape[2]):
        for iy in range(H):
            for ix in range(W):
                dx[n, c, iz, iy, ix] = 0.0
    for od in range(OD):
        for oh in range(OH):
            for ow in range(OW):
                arg = _max_window(x, n, c, od * sd - pd, oh * sh - ph, ow * sw - pw, KD, KH, KW, dd, dh, dw)[1]
                if arg >= 0:
                    dx[n, c, arg // (H * W), (arg // W) % H, arg % W] += dy[n, c, od, oh, ow]


@kernel
def max_pool_backward_naive(x, dy, dx, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw):
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            _max_backward_plane(x, dy, dx, n, c, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw)


@parallel_kernel
def max_pool_backward_parallel(x, dy, dx, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw):
    """Parallel over planes: a plane's gradient only lands in that plane."""
    C = x.shape[1]
    for p in prange(x.shape[0] * C):
        n = p // C
        _max_backward_plane(x, dy, dx, n, p - n * C, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw)
