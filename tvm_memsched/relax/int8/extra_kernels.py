"""More of TFLite's int8 kernels as TIR: arithmetic, comparisons, normalisations, resizing, reductions.

The companions of :mod:`.kernels` (same conventions: one scheduled ``PrimFunc``
per TFLite operator, every step TFLite's integer arithmetic, element-wise int32
stages computed under the output's innermost loop into one-element local
buffers, so no kernel needs a workspace), for the operators whose reference
kernels are more than a requantization:

* :func:`squared_difference` (``SquaredDifference``: both inputs rescaled with a
  left shift of 7, the squared difference requantized);
* :func:`compare` (EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL:
  ``ComparisonWithScaling``, bool output);
* :func:`div` (``DivElementwise``: the reciprocal of the divisor from a table
  of TFLite's ``GetReciprocal``, the quotient scaled with its headroom);
* :func:`resize_bilinear` (``ResizeBilinearInteger``: 10-bit fixed-point
  coordinates, int64 interpolation);
* :func:`l2_normalization` (``reference_integer_ops::L2Normalization``: the sum
  of squares per row, gemmlowp's inverse square root in Q3.28);
* :func:`log_softmax` (``LogSoftmaxQuantized``: exponentials from a table, the
  row's fixed-point logarithm);
* :func:`reduce_prod` (LiteRT's ``QuantizedReduceProd``: each product step
  rescaled, in the order TFLite multiplies);
* :func:`cumsum` (``reference_ops::CumSum`` for int8: the inputs rescaled with a
  left shift of 20 and summed from a start that is the rescaled zero point);
* :func:`arg_min_max` (ARG_MAX / ARG_MIN written straight as the file's index type:
  TVM's ``argmax`` gives int64 indexes, whose cast to int32 kept a whole int64
  temporary on the stack).

Row-wise kernels (L2 normalization, log-softmax) compute per-row values under
the row loop and per-element values under the innermost loop
(:func:`finish_rows`).

Example
-------
>>> f = compare((1, 4), (1, 4), (1, 4), "greater", a=(1, 1 << 30, -1), b=(0, 1 << 30, -1))
>>> [str(p.name) for p in f.params], str(f.params[-1].ty.dtype)
(['a', 'b', 'y'], 'bool')
"""

from __future__ import annotations

import tvm
from tvm import te, tirx

from .kernels import OPAQUE, Chain, Requant, finish, leading_zeros, reduced_index
from .tirmath import cast_i32, clamp, i64, rdbpot, srdhm

__all__ = ["squared_difference", "compare", "div", "resize_bilinear", "l2_normalization", "log_softmax",
           "reduce_prod", "cumsum", "arg_min_max", "finish_rows", "COMPARISONS"]

#: TFLite comparison operators by Relax name
COMPARISONS = {"equal": "EQUAL", "not_equal": "NOT_EQUAL", "greater": "GREATER", "greater_equal": "GREATER_EQUAL",
               "less": "LESS", "less_equal": "LESS_EQUAL"}


def _c(v: int, dtype: str = "int32"):
    return tirx.const(int(v), dtype)


def _bidx(shape, out_shape, idx):
    """Index into an operand of ``shape`` broadcast (numpy rules) to ``out_shape``."""
    lead = len(out_shape) - len(shape)
    return tuple(0 if shape[k] == 1 and out_shape[k + lead] != 1 else idx[k + lead] for k in range(len(shape)))


def _scaled(chain: Chain, x, shape, out_shape, offset: int, left: int, mult: int, shift: int):
    """``MultiplyByQuantizedMultiplierSmallerThanOneExp((x + offset) << left, mult, shift)`` of the int8
    operand ``x`` read broadcast."""
    pre = chain(lambda *i: (cast_i32(x[_bidx(shape, out_shape, i)]) + _c(offset)) * _c(1 << left))
    return chain.requant(pre, mult, shift)


def squared_difference(a_shape, b_shape, out_shape, *, a, b, out: Requant,
                       name: str = "squared_difference_int8") -> tvm.tirx.PrimFunc:
    """int8 SQUARED_DIFFERENCE; ``a``/``b`` are ``(offset, multiplier, shift)`` of each input (left shift 7),
    ``out`` the requantization of the squared difference."""
    x = te.placeholder(a_shape, "int8", "a")
    y = te.placeholder(b_shape, "int8", "b")
    chain = Chain(out_shape)
    sa = _scaled(chain, x, a_shape, out_shape, a[0], 7, a[1], a[2])
    sb = _scaled(chain, y, b_shape, out_shape, b[0], 7, b[1], b[2])
    diff = chain(lambda *i: sa[i] - sb[i])
    sq = chain(lambda *i: diff[i] * diff[i])
    return finish([x, y, out.output(chain, sq)], name, reduce_into="y")


def compare(a_shape, b_shape, out_shape, op: str, *, a, b, name: str | None = None) -> tvm.tirx.PrimFunc:
    """int8 comparison ``op`` (a key of :data:`COMPARISONS`) of both inputs rescaled to a common scale
    (``a``/``b``: ``(offset, multiplier, shift)``, left shift 8), a bool tensor."""
    x = te.placeholder(a_shape, "int8", "a")
    y = te.placeholder(b_shape, "int8", "b")
    chain = Chain(out_shape)
    sa = _scaled(chain, x, a_shape, out_shape, a[0], 8, a[1], a[2])
    sb = _scaled(chain, y, b_shape, out_shape, b[0], 8, b[1], b[2])
    fn = {"equal": lambda u, v: u == v, "not_equal": lambda u, v: u != v, "greater": lambda u, v: u > v,
          "greater_equal": lambda u, v: u >= v, "less": lambda u, v: u < v, "less_equal": lambda u, v: u <= v}[op]
    out = te.compute(out_shape, lambda *i: fn(sa[i], sb[i]), name="y")
    return finish([x, y, out], name or f"{op}_int8", reduce_into="y")


def _bit_length8(u):
    """Bits of an int32 expression in [0, 255] (0 for 0)."""
    total = _c(0)
    for k in range(8):
        total = total + tirx.Select(u >= _c(1 << k), _c(1), _c(0))
    return total


def div(a_shape, b_shape, out_shape, *, a_offset: int, b_offset: int, out: Requant,
        name: str = "div_int8") -> tvm.tirx.PrimFunc:
    """int8 DIV (TFLite's ``DivElementwise``). ``recip`` is an int32 ``(2, 256)`` table indexed by the
    divisor's stored value: TFLite's ``GetReciprocal`` of ``|b - zp_b|`` (Q0.31) and its shift (row 1);
    ``out`` holds the output multiplier, its shift and the clamp. The dividend (sign-corrected) is scaled
    by its headroom, multiplied by the reciprocal, and the result shifted by ``out.shift - recip shift -
    headroom``."""
    x = te.placeholder(a_shape, "int8", "a")
    y = te.placeholder(b_shape, "int8", "b")
    recip = te.placeholder((2, 256), "int32", "recip")
    chain = Chain(out_shape)
    bv = chain(lambda *i: cast_i32(y[_bidx(b_shape, out_shape, i)]))
    v1 = chain(lambda *i: tirx.Select(bv[i] + _c(b_offset) < _c(0), _c(-1), _c(1))
               * (cast_i32(x[_bidx(a_shape, out_shape, i)]) + _c(a_offset)))
    # CountLeadingSignBits of |v1| <= 255: 31 - bit length of (v1 >= 0 ? v1 : ~v1)
    head = chain(lambda *i: _c(31) - _bit_length8(tirx.Select(v1[i] >= _c(0), v1[i], _c(-1) - v1[i])))
    quot = chain(lambda *i: srdhm((i64(v1[i]) << i64(head[i])).astype("int32"), recip[0, bv[i] + _c(128)]))
    scaled = chain(lambda *i: srdhm(quot[i], _c(out.multiplier)))
    res = chain(lambda *i: _rdbpot_x86(scaled[i], recip[1, bv[i] + _c(128)] + head[i] - _c(out.shift)))
    y_out = te.compute(out_shape, lambda *i: clamp(res[i] + _c(out.offset), out.lo, out.hi).astype("int8"),
                       name="y")
    return finish([x, y, recip, y_out], name, reduce_into="y")


def _rdbpot_x86(x, exponent):
    """gemmlowp ``RoundingDivideByPOT(x, exponent)`` as TFLite's x86 build computes it for any exponent in [0, 69]
    (DIV's ``-total_shift`` exceeds 31 for small quotients; C leaves such shifts undefined): the mask
    ``(1ll << exponent) - 1`` truncated to int32, the shift of ``x`` by ``exponent & 31`` (x86 masks shift
    counts), so that TFLite Micro's reference interpreter is matched on every target."""
    mask = (tirx.const(1, "int64") << i64(tirx.bitwise_and(exponent, _c(63)))) - tirx.const(1, "int64")
    mask = mask.astype("int32")
    threshold = (mask >> _c(1)) + tirx.Select(x < _c(0), _c(1), _c(0))
    return (x >> tirx.bitwise_and(exponent, _c(31))) + tirx.Select(tirx.bitwise_and(x, mask) > threshold, _c(1), _c(0))


def _interp(v, scale: int, half_pixel: bool, size: int):
    """``ComputeInterpolationValuesInteger``: ``(scaled, lower, upper)`` int32 expressions of the loop
    variable ``v`` (C's truncating divisions)."""
    scaled = v * _c(scale) + _c(scale // 2 - (1 << 9)) if half_pixel else v * _c(scale)
    lo = tirx.max(tirx.truncdiv(scaled, _c(1 << 10)), _c(0))
    hi = tirx.min(tirx.truncdiv(scaled + _c((1 << 10) - 1), _c(1 << 10)), _c(size - 1))
    return scaled, lo, hi


def resize_scales(in_size: int, out_size: int, align_corners: bool) -> int:
    """The 10-bit fixed-point scale ``ResizeBilinearInteger`` uses along one axis.

    >>> resize_scales(6, 9, False), resize_scales(6, 9, True)
    (683, 640)
    """
    if align_corners and out_size > 1:
        return ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    return ((1 << 10) * in_size + out_size // 2) // out_size


def resize_bilinear(x_shape, out_shape, *, align_corners: bool, half_pixel: bool, dtype: str = "int8",
                    name: str = "resize_bilinear_int8") -> tvm.tirx.PrimFunc:
    """int8 RESIZE_BILINEAR, NHWC, on the stored values (TFLite's ``ResizeBilinearInteger``; the input and
    output quantization are the same)."""
    _, h, w, _ = x_shape
    _, oh, ow, _ = out_shape
    sh, sw = resize_scales(h, oh, align_corners), resize_scales(w, ow, align_corners)
    x = te.placeholder(x_shape, dtype, "x")

    def body(n, yy, xx, c):
        iy, y0, y1 = _interp(yy, sh, half_pixel, h)
        ix, x0, x1 = _interp(xx, sw, half_pixel, w)
        one = _c(1 << 10)
        dy, dx = iy - one * y0, ix - one * x0

        def tap(r, s, wy, wx):
            return i64(cast_i32(x[n, r, s, c])) * i64(wy) * i64(wx)

        return tap(y0, x0, one - dy, one - dx) + tap(y1, x0, dy, one - dx) + tap(y0, x1, one - dy, dx) + \
            tap(y1, x1, dy, dx)

    acc = te.compute(out_shape, body, name="acc")
    half = tirx.const(1 << 19, "int64")
    y = te.compute(out_shape, lambda *i: tirx.truncdiv(acc[i] + tirx.Select(acc[i] > tirx.const(0, "int64"), half,
                                                                              -half),
                                                        tirx.const(1 << 20, "int64")).astype(dtype), name="y")
    return finish([x, y], name, reduce_into="y")


def finish_rows(tensors, name: str, rank: int) -> tvm.tirx.PrimFunc:
    """PrimFunc of ``tensors`` (inputs ..., output ``y``) with every stage named ``t*`` computed under the
    output's innermost loop and every other stage (per-row values, their reductions) under its loop ``rank
    - 1`` (the row; at the top for ``rank`` 0, a single row), one element each (on the stack: see
    :func:`.kernels.schedule_reductions`)."""
    from tvm import s_tir

    sch = s_tir.Schedule(te.create_prim_func(list(tensors)))
    out = sch.get_sblock("y")
    root = sch.get_sblock("root")
    others = [b for b in sch.get_child_blocks(root) if sch.get(b).name_hint != "y"]
    for blk in reversed(others):
        loops = sch.get_loops(out)
        if sch.get(blk).name_hint.startswith("t") or rank:
            at = loops[-1] if sch.get(blk).name_hint.startswith("t") else loops[rank - 1]
            sch.compute_at(blk, at, preserve_unit_loops=False)
    return sch.mod["main"].with_attr("op_pattern", OPAQUE).with_attr("global_symbol", name).with_attr(
        "tvm_memsched.int8", name)


def _srmbpot(x, exponent: int):
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` of an int32 expression (``x`` used thrice)."""
    if exponent == 0:
        return x
    if exponent < 0:
        return rdbpot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    return tirx.Select(x > _c(threshold), _c((1 << 31) - 1),
                       tirx.Select(x < _c(-threshold), _c(-(1 << 31)), x << _c(exponent)))


def _inv_sqrt(rows: Chain, acc):
    """TFLite's ``GetInvSqrtQuantizedMultiplierExp(acc, kReverseShift)`` for int32 ``acc`` in ``[0, 2**29)``:
    ``(multiplier, shift)`` tensors of ``rows``."""
    clz = leading_zeros(rows, rows(lambda *r: tirx.max(acc[r], _c(2))))
    pairs = rows(lambda *r: tirx.truncdiv(clz[r] - _c(1), _c(2)) - _c(1))
    shifted = rows(lambda *r: acc[r] << (_c(2) * pairs[r]))
    half_in = rows(lambda *r: rdbpot(shifted[r] >> _c(1), 1))

    def newton(e):               # x = 3/2 x - x**3 input/2, in Q3.28
        x2 = rows(lambda *r: srdhm(e[r], e[r], saturate=True))
        x3 = rows(lambda *r: _srmbpot(srdhm(x2[r], e[r], saturate=True), 6))
        t1 = rows(lambda *r: srdhm(_c((1 << 28) + (1 << 27)), e[r]))
        t2 = rows(lambda *r: srdhm(half_in[r], x3[r], saturate=True))
        return rows(lambda *r: _srmbpot(t1[r] - t2[r], 3))

    est = rows(lambda *r: _c(1 << 28))
    for _ in range(5):
        est = newton(est)
    raw = rows(lambda *r: srdhm(est[r], _c(1518500250)))
    shift = rows(lambda *r: _c(11) - pairs[r])               # before the reversal
    # a negative shift goes into the multiplier (int32 wrap, as TFLite's ``<<=``)
    wide = rows(lambda *r: tirx.Select(shift[r] < _c(0), (i64(raw[r]) << i64(-shift[r])).astype("int32"), raw[r]))
    small = rows(lambda *r: acc[r] <= _c(1))
    mult = rows(lambda *r: tirx.Select(small[r], _c((1 << 31) - 1), wide[r]))
    rev = rows(lambda *r: tirx.Select(small[r], _c(0), -tirx.max(shift[r], _c(0))))
    return mult, rev


#: largest last axis :func:`l2_normalization` takes: 255**2 times it stays below 2**29
L2_MAX_DEPTH = (1 << 29) // (255 * 255)


def l2_normalization(shape, *, in_offset: int, name: str = "l2_normalization_int8") -> tvm.tirx.PrimFunc:
    """int8 L2_NORMALIZATION over the last axis (TFLite's ``reference_integer_ops::L2Normalization``): output
    scale 1/128, zero point 0, whatever the output tensor says. The last axis is at most
    :data:`L2_MAX_DEPTH` long."""
    outer, depth = tuple(shape[:-1]), shape[-1]
    if depth > L2_MAX_DEPTH:
        raise ValueError(f"L2_NORMALIZATION over {depth} values: at most {L2_MAX_DEPTH}")
    x = te.placeholder(shape, "int8", "x")
    k = te.reduce_axis((0, depth), "k")
    acc = te.compute(outer, lambda *r: te.sum((cast_i32(x[(*r, k)]) + _c(in_offset))
                                              * (cast_i32(x[(*r, k)]) + _c(in_offset)), axis=k), name="row_acc")
    rows = Chain(outer, prefix="row_t")
    mult, shift = _inv_sqrt(rows, acc)
    elems = Chain(shape, prefix="t")
    v = elems(lambda *i: cast_i32(x[i]) + _c(in_offset))
    q = elems.requant(v, lambda i: mult[i[:-1]], lambda i: shift[i[:-1]] + _c(7))
    y = te.compute(shape, lambda *i: clamp(q[i], -128, 127).astype("int8"), name="y")
    return finish_rows([x, y], name, len(outer))


def _wrap(e):
    """An int64 expression as C's int32 (two's-complement wrap)."""
    return e.astype("int32")


def _srmbpot_param(x, exponent):
    """TFLite's ``SaturatingRoundingMultiplyByPOTParam`` for an exponent expression ``>= 0``."""
    threshold = (tirx.const(1, "int64") << i64(_c(31) - exponent)) - tirx.const(1, "int64")
    return tirx.Select(i64(x) > threshold, _c((1 << 31) - 1),
                       tirx.Select(i64(x) < -threshold, _c(-(1 << 31)), _wrap(i64(x) << i64(exponent))))


def _saturate32(e):
    return tirx.max(tirx.min(e, tirx.const((1 << 31) - 1, "int64")), tirx.const(-(1 << 31), "int64")).astype("int32")


def _one_over_one_plus_x(rows: Chain, a):
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (Q0.31 in and out) of the tensor ``a``."""
    s = rows(lambda *r: i64(a[r]) + tirx.const((1 << 31) - 1, "int64"))
    half = rows(lambda *r: tirx.truncdiv(s[r] + tirx.Select(s[r] >= tirx.const(0, "int64"), tirx.const(1, "int64"),
                                                             tirx.const(-1, "int64")),
                                         tirx.const(2, "int64")).astype("int32"))
    x = rows(lambda *r: _wrap(i64(srdhm(half[r], _c(-1010580540), saturate=True)) + tirx.const(1515870810, "int64")))

    def newton(e):
        hdx = rows(lambda *r: srdhm(half[r], e[r], saturate=True))
        prod = rows(lambda *r: srdhm(e[r], _wrap(tirx.const(1 << 29, "int64") - i64(hdx[r])), saturate=True))
        return rows(lambda *r: _wrap(i64(e[r]) + i64(_srmbpot(prod[r], 2))))

    for _ in range(3):
        x = newton(x)
    return rows(lambda *r: _srmbpot(x[r], 1))


def _log_x_ge_1(rows: Chain, z, input_bits: int, output_bits: int):
    """TFLite's ``log_x_for_x_greater_than_or_equal_to_1_impl<output_bits, input_bits>`` of the tensor ``z`` (raw
    Q``input_bits`` values >= 1): raw Q``output_bits`` logarithms."""
    accum = output_bits + 1
    sqrt_half, sqrt_sqrt_half, log_2 = _c(1518500250), _c(1805811301), _c(1488522236)
    alpha_n, alpha_d, alpha_i, alpha_f = _c(117049297), _c(127690142), _c(1057819769), _c(638450708)
    quarter = i64(_c(536870912 >> accum))               # Rescale<accum>(1/4): exact
    clz_a = leading_zeros(rows, z)
    r_a_tmp = rows(lambda *r: _srmbpot_param(z[r], clz_a[r] - _c(1)))
    r_a = rows(lambda *r: _srmbpot_param(srdhm(r_a_tmp[r], sqrt_half, saturate=True), _c(1)))
    adj_a = rows(lambda *r: _saturate32(i64(_srmbpot_param(_c(input_bits) - clz_a[r], _c(31 - accum))) + quarter))
    z_b = rows(lambda *r: srdhm(z[r], sqrt_half, saturate=True))
    clz_b = leading_zeros(rows, z_b)
    head_b = rows(lambda *r: clz_b[r] - _c(1))
    r_b = rows(lambda *r: _srmbpot_param(z[r], head_b[r]))
    adj_b = rows(lambda *r: _saturate32(i64(_srmbpot_param(_c(input_bits) - head_b[r], _c(31 - accum))) - quarter))
    rr = rows(lambda *r: tirx.min(r_a[r], r_b[r]))
    adj = rows(lambda *r: tirx.max(adj_a[r], adj_b[r]))
    ps = rows(lambda *r: i64(rr[r]) + i64(sqrt_sqrt_half))
    p = rows(lambda *r: tirx.truncdiv(ps[r] + tirx.Select(ps[r] >= tirx.const(0, "int64"), tirx.const(1, "int64"),
                                                           tirx.const(-1, "int64")), tirx.const(2, "int64"))
             .astype("int32"))
    q = rows(lambda *r: _wrap((i64(rr[r]) - i64(sqrt_sqrt_half)) * tirx.const(2, "int64")))
    csq = rows(lambda *r: srdhm(q[r], q[r], saturate=True))
    qc = rows(lambda *r: srdhm(q[r], csq[r], saturate=True))
    num = rows(lambda *r: _wrap(i64(srdhm(q[r], rr[r], saturate=True)) + i64(srdhm(qc[r], alpha_n, saturate=True))))
    inner = rows(lambda *r: _wrap(i64(alpha_i) + i64(q[r]) + i64(srdhm(alpha_d, csq[r], saturate=True))))
    den = rows(lambda *r: _wrap(i64(srdhm(p[r], inner[r], saturate=True)) + i64(srdhm(alpha_f, q[r], saturate=True))))
    recip = _one_over_one_plus_x(rows, den)
    num_scaled = rows(lambda *r: rdbpot(num[r], accum))
    total = rows(lambda *r: _wrap(i64(srdhm(adj[r], log_2, saturate=True))
                                  + i64(srdhm(num_scaled[r], recip[r], saturate=True))))
    return rows(lambda *r: _srmbpot(total[r], accum - output_bits))


def log_softmax(shape, *, mult: int, left_shift: int, reverse_divisor: int, reverse_shift: int, diff_min: int,
                name: str = "log_softmax_int8") -> tvm.tirx.PrimFunc:
    """int8 LOG_SOFTMAX over the last axis (TFLite's ``LogSoftmaxQuantized``; output scale 16/256, zero point
    127). ``sum_table`` (int32, indexed by ``x - max(row) + 255``) holds each difference's exponential in the
    Q12 accumulator (0 below ``diff_min``: :func:`.params.softmax_tables`); the row's sum goes through
    TFLite's fixed-point logarithm, and each element's output is its rescaled difference minus the log-sum."""
    outer, depth = tuple(shape[:-1]), shape[-1]
    x = te.placeholder(shape, "int8", "x")
    table = te.placeholder((256,), "int32", "sum_table")
    k1 = te.reduce_axis((0, depth), "k1")
    k2 = te.reduce_axis((0, depth), "k2")
    mx = te.compute(outer, lambda *r: te.max(cast_i32(x[(*r, k1)]), axis=k1), name="row_max")
    total = te.compute(outer, lambda *r: te.sum(table[cast_i32(x[(*r, k2)]) - mx[r] + _c(255)], axis=k2),
                       name="row_sum")
    rows = Chain(outer, prefix="row_t")
    log = _log_x_ge_1(rows, total, 12, 5)
    shifted = rows(lambda *r: _wrap(i64(log[r]) - tirx.const(1 << 31, "int64")))
    adj = rows.requant(shifted, reverse_divisor, reverse_shift)
    limit = rows(lambda *r: tirx.max(adj[r], _c(diff_min - 1)))
    elems = Chain(shape, prefix="t")
    diff = elems(lambda *i: cast_i32(x[i]) - mx[i[:-1]])
    q5 = elems.requant(diff, mult, left_shift)
    out = elems(lambda *i: rdbpot(_wrap(i64(q5[i]) - i64(log[i[:-1]])), 31 - 5 - 4) + _c(127))
    y = te.compute(shape, lambda *i: tirx.Select(diff[i] > limit[i[:-1]], clamp(out[i], -128, 127), _c(-128))
                   .astype("int8"), name="y")
    return finish_rows([x, table, y], name, len(outer))


def _mbqm64(x, multiplier: int, shift: int):
    """TFLite's ``MultiplyByQuantizedMultiplier(int64_t x, ...)``: the multiplier rounded to 16 bits, one
    rounding shift; an int32 expression of the int64 ``x``."""
    reduced = (multiplier + (1 << 15)) >> 16 if multiplier < 0x7FFF0000 else 0x7FFF
    total = 15 - shift
    return ((x * tirx.const(reduced, "int64") + tirx.const(1 << (total - 1), "int64"))
            >> tirx.const(total, "int64")).astype("int32")


def reduce_prod(x_shape, axes, out_shape, keepdims: bool, *, in_offset: int, mult: int, shift: int,
                out_offset: int, name: str = "reduce_prod_int8") -> tvm.tirx.PrimFunc:
    """int8 REDUCE_PROD (LiteRT's ``QuantizedReduceProd``; TFLite Micro has none): the product over ``axes`` in
    TFLite's order (row-major), each step ``MBQM64(product * (x + in_offset))``, then once more for the
    first factor, plus the output offset. A sequential reduction whose first step takes the value itself
    (the accumulator starts at a sentinel no product reaches)."""
    x = te.placeholder(x_shape, "int8", "x")
    axes = sorted(a % len(x_shape) for a in axes)
    red = [te.reduce_axis((0, x_shape[a]), f"r{a}") for a in axes]
    first = tirx.const(-(1 << 63), "int64")

    def combine(acc, v):
        return tirx.Select(acc == first, v, _mbqm64(acc * v, mult, shift).astype("int64"))

    product = te.comm_reducer(combine, lambda dtype: first, name="quantized_prod")

    def index(out_idx):
        return reduced_index(x_shape, axes, keepdims, red, out_idx)

    acc = te.compute(out_shape, lambda *i: product(i64(cast_i32(x[index(i)]) + _c(in_offset)), axis=red),
                     name="acc")
    y = te.compute(out_shape, lambda *i: clamp(_mbqm64(acc[i], mult, shift) + _c(out_offset), -128, 127)
                   .astype("int8"), name="y")
    return finish([x, y], name, reduce_into="y")


def cumsum(shape, axis: int, *, exclusive: bool, reverse: bool, in_offset: int, in_mult: int, in_shift: int,
           out: Requant, name: str = "cumsum_int8") -> tvm.tirx.PrimFunc:
    """int8 CUMSUM along ``axis`` (TFLite's ``CumSum`` with ``ArithmeticParams``): each element rescaled,
    ``MBQM((x + in_offset) << 20)``, summed over the prefix (the suffix if ``reverse``; without the element
    itself if ``exclusive``) onto TFLite's start value ``MBQM(in_offset << 20)``, then requantized by ``out``."""
    x = te.placeholder(shape, "int8", "x")
    r = te.reduce_axis((0, shape[axis]), "r")
    start = rdbpot(srdhm(_c(in_offset * (1 << 20)), _c(in_mult)), -in_shift) if in_shift <= 0 else None
    if start is None:
        raise ValueError("CUMSUM: an input multiplier of one half has a negative shift")

    def body(*i):
        k = i[axis]
        inside = (r > k if exclusive else r >= k) if reverse else (r < k if exclusive else r <= k)
        v = (cast_i32(x[i[:axis] + (r,) + i[axis + 1:]]) + _c(in_offset)) * _c(1 << 20)
        return te.sum(tirx.if_then_else(inside, rdbpot(srdhm(v, _c(in_mult)), -in_shift), _c(0)), axis=r)

    acc = te.compute(shape, body, name="acc")
    chain = Chain(shape)
    total = chain(lambda *i: acc[i] + start)
    return finish([x, out.output(chain, total)], name, reduce_into="y")


def arg_min_max(shape, axis: int, *, is_min: bool, out_dtype: str = "int32", in_dtype: str = "int8",
                name: str | None = None) -> tvm.tirx.PrimFunc:
    """ARG_MAX (ARG_MIN if ``is_min``) of an integer tensor over ``axis`` (TFLite's ``ArgMinMax``: the first
    index of the extreme value), indexes written as ``out_dtype``."""
    x = te.placeholder(shape, in_dtype, "x")
    r = te.reduce_axis((0, shape[axis]), "r")
    out_shape = tuple(shape[:axis]) + tuple(shape[axis + 1:])

    def combine(a, b):        # a: (index, value) so far, b: the next (index, value); the first value is taken
        better = (b[1] < a[1]) if is_min else (b[1] > a[1])
        take = tirx.any(a[0] < _c(0), better)
        return tirx.Select(take, b[0], a[0]), tirx.Select(take, b[1], a[1])

    reducer = te.comm_reducer(combine, lambda t0, t1: (_c(-1), tirx.const(0, t1)), name="arg_min_max")
    idx, _ = te.compute(out_shape, lambda *i: reducer((r.var.astype("int32"), x[i[:axis] + (r,) + i[axis:]]),
                                                      axis=r), name="acc")
    y = te.compute(out_shape, lambda *i: idx[i].astype(out_dtype), name="y")

    def schedule(func):                  # both the index and the value accumulators: one element each (stack)
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        acc = sch.get_sblock("acc")
        sch.compute_at(acc, sch.get_loops(sch.get_sblock("y"))[-1], preserve_unit_loops=False)
        return sch.mod["main"]

    return finish([x, y], name or ("arg_min" if is_min else "arg_max") + "_" + in_dtype, schedule=schedule)
