"""Integer kernels of TFLite's 16x8 operators that have no int8 counterpart in :mod:`.kernels`, as TIR.

The int8 lowering turns every one-input operator into a 256-entry table; an
int16 table would have 65,536 entries (128 KiB of flash each), so these
kernels compute each element as TFLite's int16 kernel does, in int32/int64
arithmetic (no float temporaries):

* :func:`rescale`: requantization (QUANTIZE), RELU, LEAKY_RELU and ABS;
* :func:`clip`: TFLite Micro's RELU6 (a clamp in the input's quantization);
* :func:`sigmoid16`: LOGISTIC and TANH, TFLite's interpolation in
  ``sigmoid_table_uint16`` (:data:`.params16.SIGMOID_TABLE_UINT16`);
* :func:`lut16`: ``LUTLookup`` in a 513-entry table (EXP, LOG);
* :func:`softmax16`: SOFTMAX with its ``exp`` and ``1 / (1 + x)`` tables;
* :func:`rsqrt16`: RSQRT's Newton-Raphson inverse square root;
* :func:`squared_difference16`, :func:`minmax` (MAXIMUM, MINIMUM),
  :func:`reduce_minmax` (REDUCE_MAX, REDUCE_MIN), :func:`reduce_prod`,
  :func:`resize_bilinear16` and :func:`dequantize16`.

Per-element stages are :class:`.kernels.Chain` tensors computed into
one-element local buffers under the output's innermost loop, as the int8
kernels do; constants of the operator are immediates, tables are arguments.

Example
-------
>>> f = rescale((1, 4), in_dtype="int16", out_dtype="int16", in_offset=0, mult=1 << 30, shift=1, out_offset=0)
>>> [p.name for p in f.params]
['x', 'y']
"""

from __future__ import annotations

import tvm
from tvm import te, tirx

from .kernels import OPAQUE, Chain, broadcast_index, finish, reduced_index
from .tirmath import cast_i32, clamp, clz32, mbqm64, rdbpot, saturating_left_shift, srdhm

__all__ = ["rescale", "clip", "sigmoid16", "lut16", "softmax16", "rsqrt16", "squared_difference16", "minmax",
           "reduce_minmax", "reduce_prod", "resize_bilinear16", "dequantize16", "dtype_range"]


def _c(v: int, dtype: str = "int32"):
    return tirx.const(int(v), dtype)


def dtype_range(dtype: str) -> tuple[int, int]:
    """``(min, max)`` of an integer dtype.

    >>> dtype_range("int16")
    (-32768, 32767)
    """
    return int(tvm.tirx.min_value(dtype).value), int(tvm.tirx.max_value(dtype).value)


def rescale(shape, *, in_dtype: str, out_dtype: str, in_offset: int, mult, shift, out_offset: int,
            lo: int | None = None, hi: int | None = None, neg_mult=None, neg_shift=None, negate_neg: bool = False,
            absolute: bool = False, name: str = "rescale_int16") -> tvm.tirx.PrimFunc:
    """``y = clamp(out_offset + MBQM(v, mult, shift))`` with ``v = x + in_offset`` (``|v|`` if ``absolute``;
    ``mult`` None: no rescaling). ``neg_mult``/``neg_shift``: negative ``v`` rescaled by their own
    multiplier, negated if ``negate_neg`` (LEAKY_RELU). ``lo``/``hi`` default to ``out_dtype``'s range."""
    dlo, dhi = dtype_range(out_dtype)
    lo, hi = dlo if lo is None else lo, dhi if hi is None else hi
    x = te.placeholder(shape, in_dtype, "x")
    chain = Chain(shape)
    v = chain(lambda *i: cast_i32(x[i]) + _c(in_offset))
    if absolute:
        v = chain(lambda *i: tirx.abs(v[i]))
    scaled = chain.requant(v, mult, shift) if mult is not None else v
    if neg_mult is not None:
        neg = chain.requant(v, neg_mult, neg_shift)
        scaled_pos = scaled
        scaled = chain(lambda *i: tirx.Select(v[i] >= _c(0), scaled_pos[i], -neg[i] if negate_neg else neg[i]))
    y = te.compute(shape, lambda *i: clamp(scaled[i] + _c(out_offset), lo, hi).astype(out_dtype), name="y")
    return finish([x, y], name, reduce_into="y")


def clip(shape, dtype: str, lo: int, hi: int, name: str = "clip_int16") -> tvm.tirx.PrimFunc:
    """``y = min(max(x, lo), hi)`` in ``dtype`` (TFLite Micro's RELU6: no requantization)."""
    x = te.placeholder(shape, dtype, "x")
    y = te.compute(shape, lambda *i: clamp(cast_i32(x[i]), lo, hi).astype(dtype), name="y")
    return finish([x, y], name)


def sigmoid16(shape, *, multiplier: int, left_shift: int, tanh: bool, name: str = "sigmoid_int16") \
        -> tvm.tirx.PrimFunc:
    """LOGISTIC (``tanh=False``) or TANH int16 (``reference_integer_ops::Logistic`` / ``Tanh``): the input
    rescaled to ``x`` (Q3.12 of the 3/4-scaled argument), ``|x|`` interpolated in the 256-entry ``table``
    (:data:`.params16.SIGMOID_TABLE_UINT16`), then mirrored for negative ``x``; output scale 2**-15.
    ``multiplier``/``left_shift``: :func:`.params16.sigmoid_params`."""
    if multiplier == 0:
        multiplier, left_shift = 3 << left_shift, 0
    rounding = 1 << (left_shift - 1) if left_shift > 0 else 0
    frac = 8 if tanh else 9                  # fractional bits of the interpolation
    x = te.placeholder(shape, "int16", "x")
    table = te.placeholder((256,), "uint16", "table")
    chain = Chain(shape)
    xs = chain(lambda *i: (cast_i32(x[i]) * _c(multiplier) + _c(rounding)) >> _c(left_shift))
    a = chain(lambda *i: tirx.abs(xs[i]))
    uh = chain(lambda *i: tirx.min(a[i] >> _c(frac), _c(254)))
    ua = chain(lambda *i: cast_i32(table[uh[i]]))
    ub = chain(lambda *i: cast_i32(table[uh[i] + _c(1)]))
    saturated = (0xFFFF << 8) if tanh else (0x7FFF << 10)
    interp = chain(lambda *i: tirx.Select(a[i] >= _c(255 << frac), _c(saturated),
                                          (ua[i] << _c(frac)) + (a[i] & _c((1 << frac) - 1)) * (ub[i] - ua[i])))
    if tanh:
        out = chain(lambda *i: tirx.Select(xs[i] >= _c(0), interp[i] - _c(1 << 23) + _c(1 << 7),
                                           _c((1 << 23) + (1 << 7) - 1) - interp[i]) >> _c(8))
    else:
        out = chain(lambda *i: tirx.Select(xs[i] >= _c(0), interp[i] + _c(1 << 9),
                                           _c((1 << 25) + (1 << 9) - 1) - interp[i]) >> _c(10))
    y = te.compute(shape, lambda *i: out[i].astype("int16"), name="y")
    return finish([x, table, y], name, reduce_into="y")


def _lut_lookup(chain: Chain, v, lut):
    """``LUTLookup(int16 v, lut)`` as chain stages (``v`` an int32 tensor of int16 values)."""
    idx = chain(lambda *i: _c(256) + (v[i] >> _c(7)))
    base = chain(lambda *i: cast_i32(lut[idx[i]]))
    slope = chain(lambda *i: (cast_i32(lut[idx[i] + _c(1)]) - base[i]).astype("int16").astype("int32"))
    return chain(lambda *i: (base[i] + ((slope[i] * (v[i] & _c(0x7F)) + _c(64)) >> _c(7)))
                 .astype("int16").astype("int32"))


def lut16(shape, name: str = "lut_int16") -> tvm.tirx.PrimFunc:
    """``y = LUTLookup(x, table)``: TFLite's interpolated 513-entry int16 table (EXP, LOG)."""
    x = te.placeholder(shape, "int16", "x")
    table = te.placeholder((513,), "int16", "table")
    chain = Chain(shape)
    v = chain(lambda *i: cast_i32(x[i]))
    out = _lut_lookup(chain, v, table)
    y = te.compute(shape, lambda *i: out[i].astype("int16"), name="y")
    return finish([x, table, y], name, reduce_into="y")


def _scaled_exp(chain: Chain, x, mx, exp_lut, multiplier: int, shift: int, outer: int):
    """SOFTMAX int16's ``SoftMaxCalculateExp`` of every element, as stages of ``chain``."""
    diff = chain(lambda *i: cast_i32(x[i]) - mx[i[:outer]])
    scaled = chain.requant(diff, multiplier, shift)
    sym = chain(lambda *i: clamp(scaled[i] + _c(32767), -32768, 32767))
    return _lut_lookup(chain, sym, exp_lut)


def softmax16(shape, *, multiplier: int, shift: int, name: str = "softmax_int16") -> tvm.tirx.PrimFunc:
    """SOFTMAX int16 -> int16 over the last axis (``reference_ops::SoftmaxInt16``; output scale 2**-15).

    Each element's ``exp`` is ``LUTLookup`` of its rescaled difference to the row's maximum in ``exp_lut``,
    computed twice (for the row's sum and for the output) instead of kept in a row-sized buffer; the sum's
    reciprocal is ``LUTLookup`` in ``recip_lut`` (``1 / (1 + x)``) after normalising it by its leading
    zeros. Tables: :func:`.params16.softmax16_params`.
    """
    outer_shape, depth = tuple(shape[:-1]), shape[-1]
    outer = len(outer_shape)
    x = te.placeholder(shape, "int16", "x")
    exp_lut = te.placeholder((513,), "int16", "exp_lut")
    recip_lut = te.placeholder((513,), "int16", "recip_lut")
    k1 = te.reduce_axis((0, depth), "k1")
    mx = te.compute(outer_shape, lambda *r: te.max(cast_i32(x[(*r, k1)]), axis=k1), name="row_max")
    exp_a = _scaled_exp(Chain(shape, prefix="sum_t"), x, mx, exp_lut, multiplier, shift, outer)
    k2 = te.reduce_axis((0, depth), "k2")
    total = te.compute(outer_shape, lambda *r: te.sum(exp_a[(*r, k2)], axis=k2), name="row_sum")
    rows = Chain(outer_shape, prefix="row_t")
    headroom = rows(lambda *r: clz32(total[r]))
    shifted = rows(lambda *r: (((total[r].astype("int64") << (headroom[r] - _c(1)).astype("int64"))
                                + _c(1 << 13, "int64")) >> _c(14, "int64")).astype("int32"))
    sat = rows(lambda *r: clamp(shifted[r] - _c((1 << 15) + (1 << 16)), -32768, 32767))
    recip = _lut_lookup(rows, sat, recip_lut)
    exp_b = _scaled_exp(Chain(shape, prefix="t"), x, mx, exp_lut, multiplier, shift, outer)

    def output(*i):
        r = i[:outer]
        right = (_c(31) - headroom[r]).astype("int64")
        rounding = _c(1, "int64") << (right - _c(1, "int64"))
        v = ((exp_b[i].astype("int64") * recip[r].astype("int64") + rounding) >> right).astype("int32")
        return clamp(v, 0, 32767).astype("int16")

    y = te.compute(shape, output, name="y")
    func = te.create_prim_func([x, exp_lut, recip_lut, y])
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    out = sch.get_sblock("y")
    root = sch.get_sblock("root")
    blocks = [b for b in sch.get_child_blocks(root) if sch.get(b).name_hint != "y"]
    for blk in reversed(blocks):
        name_hint = sch.get(blk).name_hint
        if name_hint.startswith("sum_t"):
            sch.compute_at(blk, sch.get_loops(sch.get_sblock("row_sum"))[-1], preserve_unit_loops=False)
        else:
            loops = sch.get_loops(out)
            sch.compute_at(blk, loops[-1] if name_hint.startswith("t") else loops[outer - 1],
                           preserve_unit_loops=False)
        sch.set_scope(blk, 0, "local")
    return sch.mod["main"].with_attr("op_pattern", OPAQUE).with_attr("global_symbol", name).with_attr(
        "tvm_memsched.int8", name)


def _sat_rescale(chain: Chain, v, k: int):
    return chain(lambda *i: saturating_left_shift(v[i], k))


def rsqrt16(shape, *, in_offset: int, multiplier: int, shift: int, out_offset: int,
            name: str = "rsqrt_int16") -> tvm.tirx.PrimFunc:
    """RSQRT int16 (TFLite Micro's ``RsqrtEvalQuantized``): ``GetInvSqrtQuantizedMultiplierExp`` of
    ``v = x + in_offset`` (normalised by its leading zeros, five Newton-Raphson steps in Q3.28), applied to 1
    with 20 extra bits, then rescaled by the output multiplier (:func:`.params16.rsqrt16_params`); ``v == 0``
    gives 32767."""
    x = te.placeholder(shape, "int16", "x")
    ch = Chain(shape)
    v = ch(lambda *i: cast_i32(x[i]) + _c(in_offset))
    pairs = ch(lambda *i: ((clz32(tirx.max(v[i], _c(2)), 17) - _c(1)) >> _c(1)) - _c(1))
    normed = ch(lambda *i: tirx.max(v[i], _c(2)) << (pairs[i] << _c(1)))
    half_input = ch(lambda *i: rdbpot(normed[i] >> _c(1), 1))

    def newton_step(xk):           # x = Rescale<3>(1.5 x - (input / 2) Rescale<3>(x^3)), in Q3.28
        sq = ch(lambda *i: srdhm(xk[i], xk[i]))
        x3 = _sat_rescale(ch, ch(lambda *i: srdhm(sq[i], xk[i])), 6)
        diff = ch(lambda *i: srdhm(_c((1 << 28) + (1 << 27)), xk[i]) - srdhm(half_input[i], x3[i]))
        return _sat_rescale(ch, diff, 3)

    xk = ch(lambda *i: _c(1 << 28))
    for _ in range(5):
        xk = newton_step(xk)
    root = ch(lambda *i: srdhm(xk[i], _c(1518500250)))
    shift0 = ch(lambda *i: _c(11) - pairs[i])
    # v == 1: INT32_MAX and shift 0; a negative shift becomes a left shift of the multiplier
    inv_mult = ch(lambda *i: tirx.Select(v[i] <= _c(1), _c((1 << 31) - 1),
                                         root[i] << tirx.max(-shift0[i], _c(0))))
    inv_shift = ch(lambda *i: tirx.Select(v[i] <= _c(1), _c(0), -tirx.max(shift0[i], _c(0))))
    data = ch.requant(ch(lambda *i: _c(1)), lambda i: inv_mult[i], lambda i: inv_shift[i] + _c(20))
    out = ch.requant(data, multiplier, shift - 20)
    y = te.compute(shape, lambda *i: tirx.Select(v[i] == _c(0), _c(32767),
                                                 clamp(out[i] + _c(out_offset), -32768, 32767)).astype("int16"),
                   name="y")
    return finish([x, y], name, reduce_into="y")


def squared_difference16(a_shape, b_shape, out_shape, *, a_mult: int, a_shift: int, b_mult: int, b_shift: int,
                         out_mult: int, out_shift: int, name: str = "squared_difference_int16") \
        -> tvm.tirx.PrimFunc:
    """SQUARED_DIFFERENCE int16 (TFLite Micro, ``left_shift`` 0, zero points 0): both inputs rescaled to
    half the larger scale, the int32 square of their difference rescaled to the output."""
    a = te.placeholder(a_shape, "int16", "a")
    b = te.placeholder(b_shape, "int16", "b")
    ch = Chain(out_shape)
    sa = ch.requant(ch(lambda *i: cast_i32(a[broadcast_index(a_shape, out_shape, i)])), a_mult, a_shift)
    sb = ch.requant(ch(lambda *i: cast_i32(b[broadcast_index(b_shape, out_shape, i)])), b_mult, b_shift)
    diff = ch(lambda *i: sa[i] - sb[i])
    out = ch.requant(ch(lambda *i: diff[i] * diff[i]), out_mult, out_shift)
    y = te.compute(out_shape, lambda *i: clamp(out[i], -32768, 32767).astype("int16"), name="y")
    return finish([a, b, y], name, reduce_into="y")


def minmax(a_shape, b_shape, out_shape, dtype: str, maximum: bool, name: str = "maximum_int16") \
        -> tvm.tirx.PrimFunc:
    """MAXIMUM / MINIMUM of two equally quantized tensors: the larger / smaller integer (broadcasting)."""
    a = te.placeholder(a_shape, dtype, "a")
    b = te.placeholder(b_shape, dtype, "b")
    pick = tirx.max if maximum else tirx.min
    y = te.compute(out_shape, lambda *i: pick(a[broadcast_index(a_shape, out_shape, i)],
                                              b[broadcast_index(b_shape, out_shape, i)]), name="y")
    return finish([a, b, y], name)


def reduce_minmax(x_shape, axes, out_shape, keepdims: bool, dtype: str, maximum: bool,
                  name: str = "reduce_max_int16") -> tvm.tirx.PrimFunc:
    """REDUCE_MAX / REDUCE_MIN of an integer tensor over ``axes`` (input and output equally quantized)."""
    x = te.placeholder(x_shape, dtype, "x")
    axes = sorted(a % len(x_shape) for a in axes)
    red = [te.reduce_axis((0, x_shape[a]), f"r{a}") for a in axes]
    fn = te.max if maximum else te.min
    y = te.compute(out_shape, lambda *i: fn(x[reduced_index(x_shape, axes, keepdims, red, i)], axis=red),
                   name="y")
    return finish([x, y], name)


def reduce_prod(x_shape, axes, out_shape, keepdims: bool, *, in_offset: int, multiplier: int, shift: int,
                out_offset: int, dtype: str = "int16", name: str = "reduce_prod_int16") -> tvm.tirx.PrimFunc:
    """REDUCE_PROD (``reference_ops::QuantizedReduceProd``): the first value ``x + in_offset``, then each
    product with the next rescaled by the int64 ``MultiplyByQuantizedMultiplier`` (in the input's order: a
    sequential reduction), and the result rescaled once more; ``multiplier`` the reduced Q15 one."""
    x = te.placeholder(x_shape, dtype, "x")
    axes = sorted(a % len(x_shape) for a in axes)
    red = [te.reduce_axis((0, x_shape[a]), f"r{a}") for a in axes]

    def combine(acc, val):
        prod = mbqm64(acc[0].astype("int64") * val[0].astype("int64"), multiplier, shift)
        return tirx.Select(acc[1] > _c(0), prod, val[0]), tirx.max(acc[1], val[1])

    def identity(t0, t1):
        return _c(0, t0), _c(0, t1)

    reducer = te.comm_reducer(combine, identity, name="sequential_product")
    acc, _ = te.compute(out_shape, lambda *i: reducer(
        (cast_i32(x[reduced_index(x_shape, axes, keepdims, red, i)]) + _c(in_offset), _c(1)), axis=red),
        name="acc")
    lo, hi = dtype_range(dtype)
    y = te.compute(out_shape, lambda *i: clamp(mbqm64(acc[i].astype("int64"), multiplier, shift) + _c(out_offset),
                                               lo, hi).astype(dtype), name="y")
    return finish([x, y], name, reduce_into="y")


def resize_bilinear16(x_shape, out_shape, *, align_corners: bool, half_pixel_centers: bool, height_scale_10: int,
                      width_scale_10: int, dtype: str = "int16", name: str = "resize_bilinear_int16") \
        -> tvm.tirx.PrimFunc:
    """RESIZE_BILINEAR on integers without float (``reference_ops::ResizeBilinearInteger``): Q10 source
    coordinates, int64 weighted sums of the four neighbours, rounded half away from zero by 2**20."""
    _, h_, w_, _ = x_shape
    x = te.placeholder(x_shape, dtype, "x")

    def axis(o, scale, size):
        s = o * _c(scale) + (_c(scale // 2 - (1 << 9)) if half_pixel_centers else _c(0))
        lo = tirx.max(tirx.truncdiv(s, _c(1 << 10)), _c(0))
        hi = tirx.min(tirx.truncdiv(s + _c((1 << 10) - 1), _c(1 << 10)), _c(size - 1))
        frac = s - _c(1 << 10) * lo
        return lo, hi, frac

    def body(n, oy, ox, c):
        y0, y1, fy = axis(oy, height_scale_10, h_)
        x0, x1, fx = axis(ox, width_scale_10, w_)
        wy0, wx0 = (_c(1 << 10) - fy).astype("int64"), (_c(1 << 10) - fx).astype("int64")
        wy1, wx1 = fy.astype("int64"), fx.astype("int64")

        def px(yy, xx):
            return x[n, yy, xx, c].astype("int64")

        total = px(y0, x0) * wy0 * wx0 + px(y1, x0) * wy1 * wx0 + px(y0, x1) * wy0 * wx1 + px(y1, x1) * wy1 * wx1
        rounding = tirx.Select(total > _c(0, "int64"), _c(1 << 19, "int64"), _c(-(1 << 19), "int64"))
        return tirx.truncdiv(total + rounding, _c(1 << 20, "int64")).astype(dtype)

    y = te.compute(out_shape, body, name="y")
    return finish([x, y], name)


def dequantize16(shape, *, zero_point: int, in_dtype: str = "int16", name: str = "dequantize_int16") \
        -> tvm.tirx.PrimFunc:
    """DEQUANTIZE: ``scale[0] * float(x - zp)``, the correctly rounded product TFLite computes in double (the
    int16 difference and the float32 scale multiply exactly in double). The scale is a one-element argument:
    TVM's C code generator prints float immediates with 7 digits."""
    x = te.placeholder(shape, in_dtype, "x")
    scale = te.placeholder((1,), "float32", "scale")
    y = te.compute(shape, lambda *i: scale[0] * (cast_i32(x[i]) - _c(zero_point)).astype("float32"), name="y")
    return finish([x, scale, y], name)
