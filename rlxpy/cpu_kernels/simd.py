"""Explicit float32 vectors for numba kernels: a numba type whose data model is an LLVM
vector <W x float>, and a few intrinsics on it.

Plain numba loops don't vectorize register-tiled kernels (LLVM can't prove the
accumulators don't alias the weights: 10-17 GFLOP/s a core, scalar FMAs). With these, a
kernel still reads as loops, but every vector operation below is one LLVM instruction on
W lanes (W = 16: AVX-512 zmm registers; 8: AVX2 ymm; 1: scalar).

The width is a compile-time constant of each kernel, carried by the *type* of one
argument: a kernel takes `L = simd.lanes(W)` (a Lanes object; its numba type is
LanesType(W)), passes L to the intrinsics and gets the int with `nlanes(L)`. numba then
compiles and caches on disk one specialization per width (its cache key already includes
the host CPU), and a call dispatches on the type alone. (numba.literally on an int
argument measured 60 ms per call: each call retries the non-literal compile first.)

    nlanes(L)               W, an int
    vload(a, i, W)          W lanes a[i:i+W]                    (load <W x float>, align 4)
    vload_tail(a, i, n, W)  lanes < n from a[i:], the rest 0    (one scalar load per live lane)
    vstore(a, i, v)         a[i:i+W] = v
    vstore_tail(a, i, v, n) a[i:i+n] = v[:n]
    vsplat(x, W)            x in every lane                     (insertelement + shufflevector)
    vbcast(a, i, W)         a[i] in every lane                  (vbroadcastss from memory)
    vtranspose(a, .., b, ..) a W x W block of a, transposed to b (log2(W) stages of shufflevector)
    vstore_columns(a, ...)  6 vectors as columns of W rows      (transpose, masked stores)
    vzero(W)                zeros
    vfma(a, b, c)           a*b + c, one rounding               (llvm.fma.vWf32)
    vadd, vsub, vmul(a, b)  lane-wise                           (fadd, fsub, fmul)
    vmax, vmin(a, b)        lane-wise, NaN wins as in PyTorch's pooling (fcmp + select)
    vhsum(v)                the sum of the lanes
    vlane(v, k)             lane k as a float32
"""
from __future__ import annotations

from functools import lru_cache

import llvmlite.ir as ir
from numba import types
from numba.core import cgutils
from numba.extending import NativeValue, intrinsic, models, register_model, typeof_impl, unbox

from ..config import SIMD_WIDTHS

_F32 = ir.FloatType()
_I32 = ir.IntType(32)


class FloatVec(types.Type):
    """W float32 lanes held in one LLVM vector value."""

    def __init__(self, width: int):
        self.width = width
        super().__init__(name=f"FloatVec{width}")


@register_model(FloatVec)
class _FloatVecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(_F32, fe_type.width))


@lru_cache(maxsize=None)
def vec(width: int) -> FloatVec:
    return FloatVec(width)


class Lanes:
    """What a kernel is given for its width: simd.lanes(16), simd.lanes(8), simd.lanes(1)."""
    __slots__ = ("width",)

    def __init__(self, width: int):
        if width not in SIMD_WIDTHS:
            raise ValueError(f"a vector width is one of {SIMD_WIDTHS}, got {width!r}")
        self.width = width

    def __repr__(self) -> str:
        return f"lanes({self.width})"


class LanesType(types.Type):
    def __init__(self, width: int):
        self.width = width
        super().__init__(name=f"Lanes{width}")


@lru_cache(maxsize=None)
def lanes(width: int) -> Lanes:
    return Lanes(width)


@lru_cache(maxsize=None)
def lanes_type(width: int) -> LanesType:
    return LanesType(width)


@typeof_impl.register(Lanes)
def _typeof_lanes(val, c):
    return lanes_type(val.width)


register_model(LanesType)(models.OpaqueModel)


@unbox(LanesType)
def _unbox_lanes(typ, obj, c):
    return NativeValue(c.context.get_dummy_value())


def _width(w):
    """The width an intrinsic's width argument carries (a LanesType, or an int literal), or
    None."""
    if isinstance(w, LanesType):
        return w.width
    if isinstance(w, types.IntegerLiteral) and w.literal_value in SIMD_WIDTHS:
        return w.literal_value
    return None


@intrinsic
def nlanes(typingctx, w):
    W = _width(w)
    if W is None:
        return None

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.IntType(64), W)
    return types.intp(w), codegen


def _element_ptr(context, builder, arr_ty, arr, idx, idx_ty):
    ary = context.make_array(arr_ty)(context, builder, arr)
    i = context.cast(builder, idx, idx_ty, types.intp)
    return builder.gep(ary.data, [i])


def _is_f32_array(a) -> bool:
    return isinstance(a, types.Array) and a.dtype == types.float32 and a.layout in "CA" and a.ndim == 1


@intrinsic(prefer_literal=True)
def vload(typingctx, a, i, w):
    W = _width(w)
    if W is None or not _is_f32_array(a):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return builder.load(builder.bitcast(ptr, ir.VectorType(_F32, W).as_pointer()), align=4)
    return vec(W)(a, i, w), codegen


@intrinsic(prefer_literal=True)
def vload_tail(typingctx, a, i, n, w):
    W = _width(w)
    if W is None or not _is_f32_array(a):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        count = context.cast(builder, args[2], sig.args[2], types.intp)
        slot = cgutils.alloca_once_value(builder, ir.Constant(ir.VectorType(_F32, W), [0.0] * W))
        for lane in range(W):      # only the live lanes are read: a tail never reads past the array
            live = builder.icmp_signed(">", count, ir.Constant(count.type, lane))
            with builder.if_then(live):
                x = builder.load(builder.gep(ptr, [ir.Constant(ir.IntType(64), lane)]))
                builder.store(builder.insert_element(builder.load(slot), x, ir.Constant(_I32, lane)), slot)
        return builder.load(slot)
    return vec(W)(a, i, n, w), codegen


@intrinsic
def vstore(typingctx, a, i, v):
    if not (_is_f32_array(a) and isinstance(v, FloatVec)):
        return None
    W = v.width

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        builder.store(args[2], builder.bitcast(ptr, ir.VectorType(_F32, W).as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(a, i, v), codegen


@intrinsic
def vstore_tail(typingctx, a, i, v, n):
    if not (_is_f32_array(a) and isinstance(v, FloatVec)):
        return None
    W = v.width

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        count = context.cast(builder, args[3], sig.args[3], types.intp)
        for lane in range(W):
            live = builder.icmp_signed(">", count, ir.Constant(count.type, lane))
            with builder.if_then(live):
                x = builder.extract_element(args[2], ir.Constant(_I32, lane))
                builder.store(x, builder.gep(ptr, [ir.Constant(ir.IntType(64), lane)]))
        return context.get_dummy_value()
    return types.void(a, i, v, n), codegen


def _splat(builder, x, W):
    """x (a float32, or an int32 for a mask) in every one of W lanes."""
    vt = ir.VectorType(x.type, W)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(_I32, W), [0] * W))


@intrinsic(prefer_literal=True)
def vsplat(typingctx, x, w):
    W = _width(w)
    if W is None or not isinstance(x, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return _splat(builder, context.cast(builder, args[0], sig.args[0], types.float32), W)
    return vec(W)(x, w), codegen


@intrinsic(prefer_literal=True)
def vbcast(typingctx, a, i, w):
    """a[i] in every lane: one scalar load (no wraparound of a negative index) and a splat."""
    W = _width(w)
    if W is None or not _is_f32_array(a):
        return None

    def codegen(context, builder, sig, args):
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        return _splat(builder, builder.load(ptr, align=4), W)
    return vec(W)(a, i, w), codegen


def _transposed(builder, rows, W):
    """W vectors of W lanes, transposed: log2(W) stages, stage s swapping bit s of the row
    and the lane index (the off-diagonal s x s blocks of every 2s x 2s block)."""
    rows = list(rows)
    s = 1
    while s < W:
        for i in range(W):
            if i & s:
                continue
            lo = [lane if not lane & s else W + (lane ^ s) for lane in range(W)]
            hi = [(lane ^ s) if not lane & s else W + lane for lane in range(W)]
            a_, b_ = rows[i], rows[i ^ s]
            rows[i] = builder.shuffle_vector(a_, b_, ir.Constant(ir.VectorType(_I32, W), lo))
            rows[i ^ s] = builder.shuffle_vector(a_, b_, ir.Constant(ir.VectorType(_I32, W), hi))
        s *= 2
    return rows


@intrinsic(prefer_literal=True)
def vtranspose(typingctx, a, src, src_stride, src_rows, b, dst, dst_stride, dst_rows, w):
    """A W x W block transposed: rows r < src_rows of a[src + r * src_stride:][:W] (the
    others zero) in, rows r < dst_rows of the transpose out to b[dst + r * dst_stride:][:W]
    (b may be a). log2(W) stages of shufflevector, each swapping one bit of the row and
    lane indices."""
    W = _width(w)
    if W is None or not (_is_f32_array(a) and _is_f32_array(b)):
        return None
    vt = ir.VectorType(_F32, W)

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        src_, sstride, srows = (context.cast(builder, v, t, types.intp) for v, t in zip(args[1:4], sig.args[1:4]))
        dst_, dstride, drows = (context.cast(builder, v, t, types.intp) for v, t in zip(args[5:8], sig.args[5:8]))
        base = context.make_array(sig.args[0])(context, builder, args[0]).data
        out = context.make_array(sig.args[4])(context, builder, args[4]).data
        rows = []
        for r in range(W):
            slot = cgutils.alloca_once_value(builder, ir.Constant(vt, [0.0] * W))
            with builder.if_then(builder.icmp_signed(">", srows, ir.Constant(i64, r))):
                at = builder.add(src_, builder.mul(sstride, ir.Constant(i64, r)))
                builder.store(builder.load(builder.bitcast(builder.gep(base, [at]), vt.as_pointer()), align=4), slot)
            rows.append(builder.load(slot))
        rows = _transposed(builder, rows, W)
        for r in range(W):
            with builder.if_then(builder.icmp_signed(">", drows, ir.Constant(i64, r))):
                at = builder.add(dst_, builder.mul(dstride, ir.Constant(i64, r)))
                builder.store(rows[r], builder.bitcast(builder.gep(out, [at]), vt.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(a, src, src_stride, src_rows, b, dst, dst_stride, dst_rows, w), codegen


def _masked_store(builder, value, ptr, count, W):
    """Lanes < count of value to ptr (llvm.masked.store: vmaskmovps with AVX2, a k-mask
    with AVX-512): nothing past them is touched."""
    vt = ir.VectorType(_F32, W)
    mask = builder.icmp_signed("<", ir.Constant(ir.VectorType(_I32, W), list(range(W))),
                               _splat(builder, builder.trunc(count, _I32), W))
    pt = builder.bitcast(ptr, vt.as_pointer())
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [vt, pt.type, _I32, mask.type]),
                                        f"llvm.masked.store.v{W}f32.p0")
    builder.call(fn, [value, pt, ir.Constant(_I32, 4), mask])


@intrinsic
def vstore_columns(typingctx, a, i, stride, nrows, count, v0, v1, v2, v3, v4, v5):
    """Six vectors as the columns of a W x 6 block: lane r of v_p to a[i + r * stride + p],
    for rows r < nrows and columns p < count (a tile of 6 pixels x W channels into W
    planes of plain NCHW: a transpose in registers, then one masked store per row)."""
    vs = (v0, v1, v2, v3, v4, v5)
    if not (_is_f32_array(a) and _same_vecs(*vs)):
        return None
    W = v0.width

    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        ptr = _element_ptr(context, builder, sig.args[0], args[0], args[1], sig.args[1])
        stride_, nrows_, count_ = (context.cast(builder, v, t, types.intp) for v, t in zip(args[2:5], sig.args[2:5]))
        cols = list(args[5:11])
        if W < len(cols):                   # W = 1: one row, element by element
            for p, v in enumerate(cols):
                with builder.if_then(builder.icmp_signed(">", count_, ir.Constant(i64, p))):
                    builder.store(builder.extract_element(v, ir.Constant(_I32, 0)),
                                  builder.gep(ptr, [ir.Constant(i64, p)]))
            return context.get_dummy_value()
        rows = _transposed(builder, cols + [ir.Constant(ir.VectorType(_F32, W), [0.0] * W)] * (W - len(cols)), W)
        full = builder.icmp_signed("==", count_, ir.Constant(i64, len(cols)))
        for r in range(W):
            with builder.if_then(builder.icmp_signed(">", nrows_, ir.Constant(i64, r))):
                at = builder.gep(ptr, [builder.mul(stride_, ir.Constant(i64, r))])
                with builder.if_else(full) as (whole, part):
                    with whole:     # 4 + 2 lanes, plain stores (a masked store is slow on AMD before Zen 4)
                        for first, n in ((0, 4), (4, 2)):
                            sub = builder.shuffle_vector(rows[r], ir.Constant(rows[r].type, ir.Undefined),
                                                         ir.Constant(ir.VectorType(_I32, n), list(range(first, first + n))))
                            dst = builder.bitcast(builder.gep(at, [ir.Constant(i64, first)]), sub.type.as_pointer())
                            builder.store(sub, dst, align=4)
                    with part:
                        _masked_store(builder, rows[r], at, count_, W)
        return context.get_dummy_value()
    return types.void(a, i, stride, nrows, count, v0, v1, v2, v3, v4, v5), codegen


@intrinsic(prefer_literal=True)
def vzero(typingctx, w):
    W = _width(w)
    if W is None:
        return None

    def codegen(context, builder, sig, args):
        return ir.Constant(ir.VectorType(_F32, W), [0.0] * W)
    return vec(W)(w), codegen


def _same_vecs(*tys) -> bool:
    return all(isinstance(t, FloatVec) for t in tys) and len({t.width for t in tys}) == 1


@intrinsic
def vfma(typingctx, a, b, c):
    if not _same_vecs(a, b, c):
        return None

    def codegen(context, builder, sig, args):
        vt = ir.VectorType(_F32, a.width)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt, vt]),
                                             f"llvm.fma.v{a.width}f32")
        return builder.call(fma, args)
    return a(a, b, c), codegen


def _binary(build):
    @intrinsic
    def op(typingctx, a, b):
        if not _same_vecs(a, b):
            return None

        def codegen(context, builder, sig, args):
            return build(builder, *args)
        return a(a, b), codegen
    return op


vadd = _binary(lambda b, x, y: b.fadd(x, y))
vsub = _binary(lambda b, x, y: b.fsub(x, y))
vmul = _binary(lambda b, x, y: b.fmul(x, y))
# PyTorch's pooling rule: a NaN in the window wins. x if (x > y or x is NaN) else y, which
# gives y when y is NaN (x > NaN is false) and x when x is.
vmax = _binary(lambda b, x, y: b.select(b.or_(b.fcmp_ordered(">", x, y), b.fcmp_unordered("uno", x, x)), x, y))
vmin = _binary(lambda b, x, y: b.select(b.or_(b.fcmp_ordered("<", x, y), b.fcmp_unordered("uno", x, x)), x, y))


def _mask(b, bits, ty):
    """An i1 vector as floats: 1.0 where set, else 0.0 (masks stay float vectors, so the
    kernels need no second vector type)."""
    return b.select(bits, ir.Constant(ty, [1.0] * ty.count), ir.Constant(ty, [0.0] * ty.count))


# 1.0 where x == y or both are NaN (the element a max pool's NaN rule picked), else 0.0
vmatch = _binary(lambda b, x, y: _mask(b, b.or_(b.fcmp_ordered("==", x, y), b.and_(b.fcmp_unordered("uno", x, x),
                                                                                  b.fcmp_unordered("uno", y, y))),
                                       x.type))


@intrinsic
def vselect(typingctx, m, a, b):
    """a where the mask m is not 0.0, else b (m from vmatch)."""
    if not _same_vecs(m, a, b):
        return None

    def codegen(context, builder, sig, args):
        m_, x, y = args
        return builder.select(builder.fcmp_unordered("une", m_, ir.Constant(m_.type, [0.0] * m.width)), x, y)
    return a(m, a, b), codegen


@intrinsic
def vhsum(typingctx, v):
    if not isinstance(v, FloatVec):
        return None

    def codegen(context, builder, sig, args):
        total = builder.extract_element(args[0], ir.Constant(_I32, 0))
        for lane in range(1, v.width):
            total = builder.fadd(total, builder.extract_element(args[0], ir.Constant(_I32, lane)))
        return total
    return types.float32(v), codegen


@intrinsic
def vlane(typingctx, v, k):
    if not (isinstance(v, FloatVec) and isinstance(k, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], context.cast(builder, args[1], sig.args[1], types.int32))
    return types.float32(v, k), codegen


# --- the host ------------------------------------------------------------------------
FLAG = "RLX_SIMD_WIDTH"


def host_widths() -> tuple:
    """The widths this CPU can run, widest first: 16 with AVX-512F, 8 with AVX2 and FMA, 1."""
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    widths = []
    if features.get("avx512f"):
        widths.append(16)
    if features.get("avx2") and features.get("fma"):
        widths.append(8)
    return tuple(widths) + (1,)


def resolve_width(requested) -> int:
    """The width kernels are compiled for: the Config's simd_width (RLX_SIMD_WIDTH), else the
    host's widest; a width the host can't run is an error naming the flag."""
    widths = host_widths()
    if requested is None:
        return widths[0]
    if requested not in widths:
        raise ValueError(f"{FLAG}={requested}: this CPU can't run {requested} float32 lanes; "
                         f"it runs {', '.join(str(w) for w in widths)}")
    return requested
