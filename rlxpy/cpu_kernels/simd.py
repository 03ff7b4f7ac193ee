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
    vzero(W)                zeros
    vfma(a, b, c)           a*b + c, one rounding               (llvm.fma.vWf32)
    vadd, vmul(a, b)        lane-wise                           (fadd, fmul)
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
    vt = ir.VectorType(_F32, W)
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
vmul = _binary(lambda b, x, y: b.fmul(x, y))
# PyTorch's pooling rule: a NaN in the window wins. x if (x > y or x is NaN) else y, which
# gives y when y is NaN (x > NaN is false) and x when x is.
vmax = _binary(lambda b, x, y: b.select(b.or_(b.fcmp_ordered(">", x, y), b.fcmp_unordered("uno", x, x)), x, y))
vmin = _binary(lambda b, x, y: b.select(b.or_(b.fcmp_ordered("<", x, y), b.fcmp_unordered("uno", x, x)), x, y))


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
