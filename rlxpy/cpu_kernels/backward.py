"""Conv gradients. The input gradient's reference is the transposed conv's reference
(conv_transpose.conv_transpose_naive): dx = conv_transpose(dy, w) with dx's shape given."""
import numpy as np

from .jit import kernel


@kernel
def conv2d_backward_weight_naive(x, dy, dw, sh, sw, ph, pw, dh, dwl, groups):
    """The oracle: dw[k, c, i, j] = sum over n, oh, ow of dy[n,k,oh,ow] * x[n, g*Cg+c, oh*s-p+i*d, ...],
    accumulated in float64. x [N,C,H,W], dy [N,K,OH,OW], dw [K, C/g, kh, kw]."""
    N, C, H, W = x.shape
    K, OH, OW = dy.shape[1], dy.shape[2], dy.shape[3]
    _, Cg, KH, KW = dw.shape
    Kg = K // groups
    for k in range(K):
        c0 = (k // Kg) * Cg
        for c in range(Cg):
            for i in range(KH):
                for j in range(KW):
                    acc = 0.0
                    for n in range(N):
                        for oh in range(OH):
                            iy = oh * sh - ph + i * dh
                            if iy < 0 or iy >= H:
                                continue
                            for ow in range(OW):
                                ix = ow * sw - pw + j * dwl
                                if ix < 0 or ix >= W:
                                    continue
                                acc += np.float64(dy[n, k, oh, ow]) * np.float64(x[n, c0 + c, iy, ix])
                    dw[k, c, i, j] = acc
