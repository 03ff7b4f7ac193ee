"""Im2Col in rows layout: cols[(n*OH + oh)*OW + ow, (c*kh + i)*kw + j] = x[n, c, ih, iw] or 0."""
import numpy as np
from numba import prange

from .jit import kernel, parallel_kernel, u


@kernel
def im2col_naive(x, cols, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw):
    N, C, H, W = x.shape
    for n in range(N):
        for oh in range(OH):
            for ow in range(OW):
                r = (n * OH + oh) * OW + ow
                for c in range(C):
                    for i in range(KH):
                        iy = oh * sh - ph + i * dh
                        for j in range(KW):
                            ix = ow * sw - pw + j * dw
                            v = 0.0
                            if 0 <= iy < H and 0 <= ix < W:
                                v = x[n, c, iy, ix]
                            cols[r, (c * KH + i) * KW + j] = v


@kernel
def valid_range(OW, W, start, step):
    """The range [lo, hi) of o in [0, OW) for which 0 <= o*step + start < W (outputs whose
    input, or taps whose position, falls inside an axis of length W)."""
    if step == 1:       # no integer division (tens of cycles each; kernels call this per row and per pixel)
        lo = max(0, -start)
        return lo, max(lo, min(OW, W - start))
    lo = 0 if start >= 0 else (-start + step - 1) // step
    hi = 0 if W - start <= 0 else (W - start + step - 1) // step
    hi = min(hi, OW)
    return lo, max(lo, hi)


@kernel
def padded_taps(K, origin, step, end):
    """How many of a window's K taps (origin + k*step) fall before `end`: the length of the
    padded input, for average pooling's count_include_pad divisor. As ONNX counts it, with
    dilation too; taps past the end padding (ceil_mode) are not counted."""
    if end <= origin:
        return 0
    return min(K, (end - origin + step - 1) // step)


@kernel
def fill_columns(x, n, c0, Cg, r0, r1, cols, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw, OH, OW):
    """Column layout for one output tile: cols[((c*KD + kd)*KH + kh)*KW + kw, (r - r0)*OW + ow]
    = x[n, c0 + c, od*sd - pd + kd*dd, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw] (0 outside),
    for output rows r = od*OH + oh in [r0, r1). x is [N, C, D, H, W]; cols is contiguous."""
    C, D, H, W = x.shape[1], x.shape[2], x.shape[3], x.shape[4]
    T = (r1 - r0) * OW
    xf = x.reshape(x.size)
    cf = cols.reshape(cols.size)
    zero = np.float32(0.0)
    for c in range(Cg):
        plane = (n * C + c0 + c) * D
        for kd in range(KD):
            for kh in range(KH):
                for kw in range(KW):
                    row = ((c * KD + kd) * KH + kh) * KW + kw
                    start = kw * dw - pw
                    lo, hi = valid_range(OW, W, start, sw)
                    for r in range(r0, r1):
                        od = r // OH
                        oh = r - od * OH
                        iz = od * sd - pd + kd * dd
                        iy = oh * sh - ph + kh * dh
                        dst = u(row * T + (r - r0) * OW)
                        if iz < 0 or iz >= D or iy < 0 or iy >= H:
                            for ow in range(OW):
                                cf[dst + u(ow)] = zero
                            continue
                        for ow in range(lo):
                            cf[dst + u(ow)] = zero
                        src = ((plane + iz) * H + iy) * W + start   # + ow*sw >= 0 for ow >= lo
                        if sw == 1:
                            for ow in range(lo, hi):
                                cf[dst + u(ow)] = xf[u(src + ow)]
                        else:
                            for ow in range(lo, hi):
                                cf[dst + u(ow)] = xf[u(src + ow * sw)]
                        for ow in range(hi, OW):
                            cf[dst + u(ow)] = zero


@parallel_kernel
def im2col_rows_parallel(x, out, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw):
    """Rows layout [N*OH*OW, C*KH*KW], parallel over output rows (n, oh)."""
    N, C, H, W = x.shape
    for t in prange(N * OH):
        n = t // OH
        oh = t - n * OH
        for ow in range(OW):
            r = t * OW + ow
            for c in range(C):
                for i in range(KH):
                    iy = oh * sh - ph + i * dh
                    for j in range(KW):
                        ix = ow * sw - pw + j * dw
                        v = np.float32(0.0)
                        if 0 <= iy < H and 0 <= ix < W:
                            v = x[n, c, iy, ix]
                        out[r, (c * KH + i) * KW + j] = v
