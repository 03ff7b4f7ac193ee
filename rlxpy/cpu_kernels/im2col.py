"""Im2Col in rows layout: cols[(n*OH + oh)*OW + ow, (c*kh + i)*kw + j] = x[n, c, ih, iw] or 0."""
from .jit import kernel


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
