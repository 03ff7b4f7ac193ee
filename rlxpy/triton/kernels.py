"""Triton kernels for the GPU lowering. Imported only by rlxpy.triton.dispatch, lazily.

The simple kernels follow the starting design: one program per (b, c_out, oh, ow-tile) of
BLOCK_OW output columns, pid = ((b*C_OUT + c_out)*OH + oh)*num_ow_tiles + ow_tile, one
weight scalar per tap; zero padding comes from the load masks. They are the GPU-side
reference. The implicit-GEMM forward computes the same conv as tiles of
[BLOCK_M output pixels x BLOCK_K taps] @ [BLOCK_K taps x BLOCK_N output channels] on
tl.dot, gathering input taps straight from x (no im2col buffer in memory); the stride-1
input gradient runs on it too, and the weight gradient has an implicit GEMM of its own
over the pixels. nchw_to_nhwc makes the channels-last operand. Measurements and the
reasons for the loop and layout choices: bench/GPU_NOTES.md.

Geometry (kernel, stride, begin padding, dilation, groups) is compile-time constant; the
end padding is implied by OH/OW.
"""
import triton
import triton.language as tl


@triton.jit
def _fwd_program(pid, num_ow_tiles, C_OUT, OH, OW, BLOCK_OW: tl.constexpr):
    ow_tile = pid % num_ow_tiles
    t = pid // num_ow_tiles
    oh = t % OH
    t = t // OH
    co = t % C_OUT
    b = t // C_OUT
    ow = ow_tile * BLOCK_OW + tl.arange(0, BLOCK_OW)
    return b, co, oh, ow, ow < OW


@triton.jit
def conv2d_forward(x_ptr, w_ptr, b_ptr, y_ptr, C_IN, H, W, C_OUT, OH, OW, num_ow_tiles,
                   KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                   PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                   GROUPS: tl.constexpr, CIN_G: tl.constexpr, COUT_G: tl.constexpr, HAS_BIAS: tl.constexpr,
                   BLOCK_OW: tl.constexpr):
    """y[b, co, oh, ow-tile] = sum over the (C_IN/G)*KH*KW taps of co's group (+ bias)."""
    b, co, oh, ow, mask = _fwd_program(tl.program_id(0), num_ow_tiles, C_OUT, OH, OW, BLOCK_OW)
    c0 = (co // COUT_G) * CIN_G
    acc = tl.zeros([BLOCK_OW], dtype=tl.float32)
    for ci in range(CIN_G):
        for kh in tl.static_range(KH):
            ih = oh * SH - PH + kh * DH
            for kw in tl.static_range(KW):
                iw = ow * SW - PW + kw * DW
                m = mask & (iw >= 0) & (iw < W) & (ih >= 0) & (ih < H)
                xv = tl.load(x_ptr + ((b * C_IN + c0 + ci) * H + ih) * W + iw, mask=m, other=0.0)
                wv = tl.load(w_ptr + ((co * CIN_G + ci) * KH + kh) * KW + kw)
                acc += xv * wv
    if HAS_BIAS:
        acc += tl.load(b_ptr + co)
    tl.store(y_ptr + ((b * C_OUT + co) * OH + oh) * OW + ow, acc, mask=mask)


@triton.jit
def conv2d_backward(x_ptr, w_ptr, dy_ptr, dx_ptr, dw_ptr, C_IN, H, W, C_OUT, OH, OW, num_ow_tiles,
                    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                    PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                    GROUPS: tl.constexpr, CIN_G: tl.constexpr, COUT_G: tl.constexpr, DO_DX: tl.constexpr,
                    DO_DW: tl.constexpr, BLOCK_OW: tl.constexpr):
    """Over the forward grid: dx[b, c, ih, iw] += dy * w (atomic: receptive fields overlap
    when stride < kernel) and/or dw[co, ci, kh, kw] += <dy tile, x tile> (atomic across
    programs). dx and dw must be zeroed first. DO_DX and DO_DW pick the kernel:
    conv2d_backward_dx, conv2d_backward_dw, or both in one launch (conv2d_backward)."""
    b, co, oh, ow, mask = _fwd_program(tl.program_id(0), num_ow_tiles, C_OUT, OH, OW, BLOCK_OW)
    c0 = (co // COUT_G) * CIN_G
    dy = tl.load(dy_ptr + ((b * C_OUT + co) * OH + oh) * OW + ow, mask=mask, other=0.0)
    for ci in range(CIN_G):
        for kh in tl.static_range(KH):
            ih = oh * SH - PH + kh * DH
            for kw in tl.static_range(KW):
                iw = ow * SW - PW + kw * DW
                m = mask & (iw >= 0) & (iw < W) & (ih >= 0) & (ih < H)
                xoff = ((b * C_IN + c0 + ci) * H + ih) * W + iw
                woff = ((co * CIN_G + ci) * KH + kh) * KW + kw
                if DO_DX:
                    tl.atomic_add(dx_ptr + xoff, dy * tl.load(w_ptr + woff), mask=m)
                if DO_DW:
                    xv = tl.load(x_ptr + xoff, mask=m, other=0.0)
                    tl.atomic_add(dw_ptr + woff, tl.sum(dy * xv, axis=0))


@triton.jit
def conv2d_igemm(x_ptr, wk_ptr, b_ptr, y_ptr, N, C_IN, H, W, C_OUT, OH, OW,
                 KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                 PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                 GROUPS: tl.constexpr, CIN_G: tl.constexpr, COUT_G: tl.constexpr, HAS_BIAS: tl.constexpr,
                 X_NHWC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Implicit GEMM. Grid (cdiv(N*OH*OW, BLOCK_M), cdiv(C_OUT/G, BLOCK_N), G).

    One flat loop over K = KH*KW*ceil(CIN_G/BLOCK_K) chunks, so that the compiler's software
    pipeline (num_stages) overlaps the loads of chunk i+1.. with the tl.dot of chunk i across
    taps; a loop per tap drains the pipeline nine times for a 3x3 kernel. Operands are
    contiguous along K so that their loads are 16-byte vectors and tl.dot gets K-major
    tiles: x as xt [N, H, W, C_IN] (channels last; X_NHWC=False reads NCHW x in place, with
    loads contiguous along the pixels instead), the weights as wk [C_OUT, KH*KW*CIN_G]
    ordered (kh, kw, c). A chunk's tap only shifts each pixel's address by a scalar."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    g = tl.program_id(2)
    K_CHUNKS: tl.constexpr = (CIN_G + BLOCK_K - 1) // BLOCK_K
    EVEN_K: tl.constexpr = CIN_G % BLOCK_K == 0
    K_TOTAL: tl.constexpr = KH * KW * CIN_G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < N * OH * OW
    n_ok = offs_n < COUT_G
    b = offs_m // (OH * OW)
    rem = offs_m % (OH * OW)
    oh = rem // OW
    ow = rem % OW
    ih0 = oh * SH - PH
    iw0 = ow * SW - PW
    co = g * COUT_G + offs_n
    if X_NHWC:
        pix = b * (H * W * C_IN) + g * CIN_G + (ih0 * W + iw0) * C_IN      # tap (0, 0), channel 0
        ch = offs_k
    else:
        pix = b * (H * W * C_IN) + g * CIN_G * (H * W) + ih0 * W + iw0
        ch = offs_k * (H * W)
    w_rows = wk_ptr + co * K_TOTAL
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if CIN_G < BLOCK_K:
        # few channels per group (an RGB stem): chunks of the flattened (kh, kw, c) axis, so
        # that a chunk is not mostly padding; the tap then varies along the chunk
        for k0 in range(0, K_TOTAL, BLOCK_K):
            kk = k0 + offs_k
            k_ok = kk < K_TOTAL
            c = kk % CIN_G
            kh = kk // CIN_G // KW
            kw = kk // CIN_G % KW
            ih = ih0[:, None] + (kh * DH)[None, :]
            iw = iw0[:, None] + (kw * DW)[None, :]
            a_ok = m_ok[:, None] & k_ok[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            if X_NHWC:
                a_ptrs = x_ptr + pix[:, None] + ((kh * DH * W + kw * DW) * C_IN + c)[None, :]
            else:
                a_ptrs = x_ptr + pix[:, None] + (c * (H * W) + kh * DH * W + kw * DW)[None, :]
            a = tl.load(a_ptrs, mask=a_ok, other=0.0)
            bw = tl.load(w_rows[None, :] + kk[:, None], mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc = tl.dot(a, bw, acc)
    else:
        for t in range(0, KH * KW * K_CHUNKS):
            tap = t // K_CHUNKS
            c0 = (t % K_CHUNKS) * BLOCK_K
            kh = tap // KW
            kw = tap % KW
            ih = ih0 + kh * DH
            iw = iw0 + kw * DW
            a_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            if X_NHWC:
                a_ptrs = x_ptr + (pix + (kh * DH * W + kw * DW) * C_IN + c0)[:, None] + ch[None, :]
            else:
                a_ptrs = x_ptr + (pix + kh * DH * W + kw * DW + c0 * (H * W))[:, None] + ch[None, :]
            w_ptrs = w_rows[None, :] + (tap * CIN_G + c0 + offs_k)[:, None]
            if EVEN_K:
                a = tl.load(a_ptrs, mask=a_ok[:, None], other=0.0)
                bw = tl.load(w_ptrs, mask=n_ok[None, :], other=0.0)
            else:
                k_ok = c0 + offs_k < CIN_G
                a = tl.load(a_ptrs, mask=a_ok[:, None] & k_ok[None, :], other=0.0)
                bw = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc = tl.dot(a, bw, acc)
    if HAS_BIAS:
        acc += tl.load(b_ptr + co, mask=n_ok, other=0.0)[None, :]
    y_ptrs = y_ptr + ((b * C_OUT)[:, None] + co[None, :]) * (OH * OW) + (oh * OW + ow)[:, None]
    tl.store(y_ptrs, acc, mask=m_ok[:, None] & n_ok[None, :])


# On a GPU the tile shape is autotuned per conv shape; the interpreter takes one fixed config.
IGEMM_CONFIGS = [
    triton.Config(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk), num_warps=nw, num_stages=ns)
    for bm, bn, bk, nw, ns in [(128, 64, 32, 4, 4), (128, 128, 32, 8, 3), (64, 64, 32, 4, 4), (128, 64, 64, 4, 3)]
]
conv2d_igemm_tuned = triton.autotune(IGEMM_CONFIGS, key=["N", "C_IN", "H", "W", "C_OUT", "OH", "OW"])(conv2d_igemm)


@triton.jit
def _dw_chunk(acc, t, x_ptr, dy_ptr, co, ci, m_ok, n_ok, offs_k, chunks, kh, kw, C_IN, H, W, C_OUT, OW, OHW,
              SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr,
              DH: tl.constexpr, DW: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += dy[chunk t, co]^T-tile @ x[chunk t shifted by the tap, ci]-tile."""
    b = t // chunks
    r = (t % chunks) * BLOCK_K + offs_k          # output pixels oh*OW + ow of image b
    r_ok = r < OHW
    oh = r // OW
    ow = r % OW
    ih = oh * SH - PH + kh * DH
    iw = ow * SW - PW + kw * DW
    x_ok = r_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    a = tl.load(dy_ptr + (b * C_OUT + co)[:, None] * OHW + r[None, :], mask=m_ok[:, None] & r_ok[None, :], other=0.0)
    xv = tl.load(x_ptr + (b * C_IN + ci)[None, :] * (H * W) + (ih * W + iw)[:, None],
                 mask=x_ok[:, None] & n_ok[None, :], other=0.0)
    return tl.dot(a, xv, acc)


@triton.jit
def conv2d_igemm_dw(x_ptr, dy_ptr, dw_ptr, N, C_IN, H, W, C_OUT, OH, OW, OHW,
                    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                    PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                    GROUPS: tl.constexpr, CIN_G: tl.constexpr, COUT_G: tl.constexpr, INTERPRETED: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Weight gradient as an implicit GEMM over the pixels, split along them:
    dw[co, c, kh, kw] = sum_p dy[p, co] * x[p shifted by the tap, c].

    Grid (cdiv(C_OUT/G, BLOCK_M), KH*KW*cdiv(C_IN/G, BLOCK_N), G*SPLIT). A program owns one
    tap, a [BLOCK_M output channels x BLOCK_N input channels] tile of it, and every SPLIT-th
    share of the N*ceil(OH*OW/BLOCK_K) pixel chunks; each share is added into the zeroed dw
    with one atomic tile add (SPLIT adds per element, not one per pixel as in the atomic
    starting design). Both operands are read from NCHW in place, contiguous along the
    pixels, which is the GEMM's K (OHW = OH*OW is passed so that the compiler can prove
    16-byte alignment of dy rows when it is a multiple of 16). The chunk loop is a `for`
    (software-pipelined) on a GPU; the interpreter cannot take a range with run-time
    bounds, so it gets a `while`."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    SPLIT = tl.num_programs(2) // GROUPS
    g = tl.program_id(2) // SPLIT
    split = tl.program_id(2) % SPLIT
    N_TILES: tl.constexpr = (CIN_G + BLOCK_N - 1) // BLOCK_N
    tap = pid_n // N_TILES
    kh = tap // KW
    kw = tap % KW
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid_n % N_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < COUT_G
    n_ok = offs_n < CIN_G
    co = g * COUT_G + offs_m
    ci = g * CIN_G + offs_n
    chunks = tl.cdiv(OHW, BLOCK_K)
    total = N * chunks
    per = tl.cdiv(total, SPLIT)
    lo = split * per
    hi = tl.minimum(total, lo + per)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if INTERPRETED:
        t = lo
        while t < hi:
            acc = _dw_chunk(acc, t, x_ptr, dy_ptr, co, ci, m_ok, n_ok, offs_k, chunks, kh, kw, C_IN, H, W, C_OUT, OW,
                            OHW, SH, SW, PH, PW, DH, DW, BLOCK_K)
            t += 1
    else:
        for t in range(lo, hi):
            acc = _dw_chunk(acc, t, x_ptr, dy_ptr, co, ci, m_ok, n_ok, offs_k, chunks, kh, kw, C_IN, H, W, C_OUT, OW,
                            OHW, SH, SW, PH, PW, DH, DW, BLOCK_K)
    dw_ptrs = dw_ptr + (offs_m[:, None] + g * COUT_G) * (CIN_G * KH * KW) + offs_n[None, :] * (KH * KW) + tap
    tl.atomic_add(dw_ptrs, acc, mask=m_ok[:, None] & n_ok[None, :])


IGEMM_DW_CONFIGS = [
    triton.Config(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk), num_warps=nw, num_stages=ns)
    for bm, bn, bk, nw, ns in [(64, 64, 32, 4, 4), (128, 64, 32, 4, 4), (64, 64, 64, 4, 3), (128, 128, 32, 8, 3)]
]
# autotuning runs the kernel several times: dw_ptr (an exactly sized view) is zeroed before each
conv2d_igemm_dw_tuned = triton.autotune(IGEMM_DW_CONFIGS, key=["N", "C_IN", "H", "W", "C_OUT", "OH", "OW"],
                                        reset_to_zero=["dw_ptr"])(conv2d_igemm_dw)


@triton.jit
def pool2d(x_ptr, y_ptr, total, H, W, OH, OW,
           KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
           PH: tl.constexpr, PW: tl.constexpr, EH: tl.constexpr, EW: tl.constexpr,
           DH: tl.constexpr, DW: tl.constexpr, IS_MAX: tl.constexpr, COUNT_PAD: tl.constexpr,
           BLOCK: tl.constexpr):
    """One lane per output of the flattened [N*C, OH, OW]; PyTorch's max (NaN wins) and
    average (divisor by count_include_pad) rules, as the CPU reference."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    ow = offs % OW
    oh = (offs // OW) % OH
    plane = offs // (OW * OH)
    h0 = oh * SH - PH
    w0 = ow * SW - PW
    if IS_MAX:
        acc = tl.full([BLOCK], float("-inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
    cnt = tl.zeros([BLOCK], dtype=tl.int32)
    for kh in tl.static_range(KH):
        ih = h0 + kh * DH
        for kw in tl.static_range(KW):
            iw = w0 + kw * DW
            m = ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            v = tl.load(x_ptr + (plane * H + ih) * W + iw, mask=m, other=0.0)
            if IS_MAX:
                acc = tl.where(m & ((v > acc) | (v != v)), v, acc)
            else:
                acc += v
            cnt += m.to(tl.int32)
    if not IS_MAX:
        if COUNT_PAD:
            # the taps inside the padded input (with dilation too, as ONNX counts them)
            hh = tl.minimum(KH, (H + EH - h0 + DH - 1) // DH)
            ww = tl.minimum(KW, (W + EW - w0 + DW - 1) // DW)
            acc = acc / (hh * ww).to(tl.float32)
        else:
            acc = acc / tl.maximum(cnt, 1).to(tl.float32)   # lanes past the end have no taps
    tl.store(y_ptr + offs, acc, mask=ok)


@triton.jit
def max_pool2d_backward(x_ptr, dy_ptr, dx_ptr, total, H, W, OH, OW,
                        KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                        PH: tl.constexpr, PW: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                        BLOCK: tl.constexpr):
    """Each window's dy goes (atomically) to its first maximum in scan order, NaN winning."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    ow = offs % OW
    oh = (offs // OW) % OH
    plane = offs // (OW * OH)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    arg = tl.full([BLOCK], -1, tl.int32)
    for kh in tl.static_range(KH):
        ih = oh * SH - PH + kh * DH
        for kw in tl.static_range(KW):
            iw = ow * SW - PW + kw * DW
            m = ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            idx = (plane * H + ih) * W + iw
            v = tl.load(x_ptr + idx, mask=m, other=0.0)
            take = m & ((arg < 0) | (v > best) | (v != v))
            best = tl.where(take, v, best)
            arg = tl.where(take, idx, arg)
    dy = tl.load(dy_ptr + offs, mask=ok, other=0.0)
    tl.atomic_add(dx_ptr + arg, dy, mask=ok & (arg >= 0))


@triton.jit
def resize_nearest2x(x_ptr, y_ptr, total, H, W, BLOCK: tl.constexpr):
    """One lane per output of [N*C, 2H, 2W]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    ow = offs % (2 * W)
    oh = (offs // (2 * W)) % (2 * H)
    plane = offs // (4 * H * W)
    v = tl.load(x_ptr + (plane * H + oh // 2) * W + ow // 2, mask=ok, other=0.0)
    tl.store(y_ptr + offs, v, mask=ok)


@triton.jit
def nchw_to_nhwc(x_ptr, y_ptr, C, P, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    """y[b, p, c] = x[b, c, p] (P = H*W). Grid (cdiv(P, BLOCK_P), cdiv(C, BLOCK_C), N). A tile
    is read along p and written along c, both coalesced: the compiler moves it through shared
    memory in between (torch's permute().contiguous() ran at a third of copy bandwidth)."""
    offs_p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    b = tl.program_id(2).to(tl.int64)
    ok = (offs_c[:, None] < C) & (offs_p[None, :] < P)
    tile = tl.load(x_ptr + b * C * P + offs_c[:, None] * P + offs_p[None, :], mask=ok)
    tl.store(y_ptr + b * C * P + offs_p[None, :] * C + offs_c[:, None], tile, mask=ok)
