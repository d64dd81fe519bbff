"""The integer kernels of TFLite's 16x8 operators (int16 activations, int8 weights) for :mod:`.lower`.

:func:`~.lower.lower_int8` hands every match with an int16 tensor
(:func:`uses_int16`) to :func:`emit_int16`, which returns the ``call_tir`` of
the kernel computing what TFLite Micro's int16 kernel computes (LiteRT's
reference kernel for the operators TFLite Micro lacks: EXP, LOG, REDUCE_MAX,
REDUCE_MIN, REDUCE_PROD, RESIZE_BILINEAR), or None where that kernel would
refuse the operator's quantization (the group then stays a float island, reported).

What differs from the int8 kernels:

* CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV accumulate in
  int64 with an int64 bias (int32 when the file's bias is int32: CONV_2D and
  FULLY_CONNECTED) and requantize with the int64
  ``MultiplyByQuantizedMultiplier`` (reduced Q15 multipliers); the
  convolutions ignore zero points, as TFLite Micro's int16 kernels do;
* ADD and SUB pre-shift by 15 bits instead of 20;
* RELU6 clamps in the input's quantization without requantizing (TFLite
  Micro's ``Relu6Quantized``);
* element-wise operators compute per element (:mod:`.kernels16`), LOGISTIC and
  TANH by TFLite's interpolation, SOFTMAX, EXP and LOG through TFLite's
  513-entry interpolated tables (:mod:`.params16`).

Example
-------
>>> from tvm_memsched.relax.int8.lower16 import INT16_OPS
>>> "SOFTMAX" in INT16_OPS
True
"""

from __future__ import annotations

import numpy as np
from tvm import relax

from . import kernels as K
from . import kernels16 as K16
from . import params as P
from . import params16 as P16
from .fixedpoint import quantize_float, quantize_multiplier, reduced_multiplier
from .patterns import Match

__all__ = ["uses_int16", "emit_int16", "INT16_OPS"]

#: the operators :func:`emit_int16` has kernels for
INT16_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB", "MUL",
                       "MEAN", "SUM", "AVERAGE_POOL_2D", "MAX_POOL_2D", "RELU", "RELU6", "LEAKY_RELU", "LOGISTIC",
                       "TANH", "SOFTMAX", "QUANTIZE", "QUANTIZE_FLOAT", "DEQUANTIZE", "ABS", "EXP", "LOG", "RSQRT",
                       "SQUARED_DIFFERENCE", "MAXIMUM", "MINIMUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD",
                       "RESIZE_BILINEAR", "CONCATENATION", "PRELU"})


def _dtype(e) -> str:
    ty = getattr(e, "ty", None)
    return str(ty.dtype) if isinstance(ty, relax.TensorType) else ""


def _shape(e) -> tuple:
    from ..ir import static_shape

    return tuple(static_shape(e.ty))


def uses_int16(m: Match) -> bool:
    """True if an input or the output of ``m`` is int16."""
    return any(_dtype(e) == "int16" for e in list(m.inputs) + [m.var])


def _pot_15(scale) -> bool:
    ok, log2 = P16.checked_log2(scale)
    return ok and log2 == -15


def emit_int16(em, m: Match):
    """The ``call_tir`` replacing the 16x8 match ``m`` (see the module docstring), or None."""
    fn = _EMITTERS.get(m.op)
    return None if fn is None else fn(em, m)


def _requant(mults, shifts, offset: int, act, *, wide: bool, bias=None):
    """``(Requant, channel table rows as constants)``; ``wide``: reduced multipliers for int64 sums.
    An int32 ``bias`` goes in the table's first row (an int64 one is an argument of its own)."""
    if wide:
        mults = [reduced_multiplier(v) for v in mults]
    rows = [] if bias is None else [np.asarray(bias, np.int32)]
    if len(set(zip(mults, shifts))) == 1:
        rq = K.Requant(int(mults[0]), int(shifts[0]), offset, *act, wide=wide)
    else:
        rq = K.Requant(None, None, offset, *act, wide=wide)
        rows += [np.array(mults, np.int32), np.array(shifts, np.int32)]
    return rq, ([np.stack(rows)] if rows else [])


def _weighted_args(em, m: Match, table, wide: bool):
    """The constant arguments of a weighted kernel after ``x``: weights, channel table, int64 bias."""
    args = [em.const(m.consts["weight"])] + [em.const(a) for a in table]
    if wide and "bias" in m.consts:
        bias = np.ascontiguousarray(m.consts["bias"], np.int64)
        em.const_bytes += bias.nbytes
        args.append(relax.const(bias, "int64"))      # relax.const would narrow an int64 array to int32
    return args


def _conv(em, m: Match):
    x, qx, w = m.inputs[0], m.qin[0], m.consts["weight"]
    if _dtype(x) != "int16" or _dtype(m.var) != "int16":
        return None
    bias = m.consts.get("bias")
    wide = bias is None or bias.dtype != np.int32
    mults, shifts = P.conv_multipliers(qx.s, m.consts["w_scales"], m.qout.s)
    # TFLite Micro's int16 convolutions use neither zero point
    rq, table = _requant(mults, shifts, 0, m.act, wide=wide, bias=None if wide else bias)
    dm = m.attrs.get("depth_multiplier", 0)
    f = K.conv2d(_shape(x), w.shape, _shape(m.var), strides=m.attrs["strides"], padding=m.attrs["padding"],
                 dilation=m.attrs["dilation"], groups=1 if dm else m.attrs["groups"], depth_multiplier=dm,
                 in_offset=0, requant=rq, has_bias=bias is not None, in_dtype="int16", out_dtype="int16",
                 name="dwconv_int16" if dm else "conv2d_int16", acc_dtype="int64" if wide else "int32")
    return em.call(m, f, "dwconv_int16" if dm else "conv2d_int16", [x] + _weighted_args(em, m, table, wide))


def _transpose_conv(em, m: Match):
    x, qx, w = m.inputs[0], m.qin[0], m.consts["weight"]
    if _dtype(x) != "int16" or _dtype(m.var) != "int16":
        return None
    mults, shifts = P.conv_multipliers(qx.s, m.consts["w_scales"], m.qout.s)
    rq, table = _requant(mults, shifts, 0, m.act, wide=True)
    f = K.transpose_conv2d(_shape(x), w.shape, _shape(m.var), strides=m.attrs["strides"],
                           padding=m.attrs["padding"], in_offset=0, requant=rq, has_bias="bias" in m.consts,
                           in_dtype="int16", out_dtype="int16", name="transpose_conv_int16", acc_dtype="int64")
    return em.call(m, f, "transpose_conv_int16", [x] + _weighted_args(em, m, table, True))


def _dense(em, m: Match):
    x, qx, w = m.inputs[0], m.qin[0], m.consts["weight"]
    if _dtype(x) != "int16" or _dtype(m.var) != "int16":
        return None
    bias = m.consts.get("bias")
    wide = bias is None or bias.dtype != np.int32
    scales = m.consts["w_scales"]
    if m.attrs["per_channel"] or bias is not None:
        mults, shifts = P.conv_multipliers(qx.s, scales, m.qout.s)
    else:
        mult, shift = quantize_multiplier(float(np.float32(qx.s) * np.float32(scales[0])) / P.f32(m.qout.s))
        mults, shifts = [mult] * w.shape[0], [shift] * w.shape[0]
    rq, table = _requant(mults, shifts, m.qout.zp, m.act, wide=wide, bias=None if wide else bias)
    f = K.dense(_shape(x), w.shape, in_offset=-qx.zp, w_offset=-m.consts["w_zero_point"], requant=rq,
                has_bias=bias is not None, out_dtype="int16", name="dense_int16", in_dtype="int16",
                acc_dtype="int64" if wide else "int32")
    return em.call(m, f, "dense_int16", [x] + _weighted_args(em, m, table, wide))


def _all_int16(m: Match) -> bool:
    return all(_dtype(e) == "int16" for e in list(m.inputs) + [m.var])


def _add_sub(em, m: Match):
    if not _all_int16(m):
        return None
    qa, qb = m.qin
    # the TFLite Micro we check against computes SUB's ratios in double, as ADD's (measured on sub.int16x8)
    p = P.add_params(qa.s, qb.s, m.qout.s, left_shift=15)
    rq = K.Requant(p["out_mult"], p["out_shift"], m.qout.zp, *m.act)
    f = K.binary_add(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), a_offset=-qa.zp, b_offset=-qb.zp,
                     left_shift=p["left_shift"], a_mult=p["a_mult"], a_shift=p["a_shift"], b_mult=p["b_mult"],
                     b_shift=p["b_shift"], out=rq, negate_b=m.op == "SUB", name=m.op.lower() + "_int16",
                     dtype="int16")
    return em.call(m, f, m.op.lower() + "_int16", list(m.inputs))


def _mul(em, m: Match):
    qa, qb = m.qin
    if not _all_int16(m) or qa.zp or qb.zp or m.qout.zp:
        return None                         # TFLite Micro's int16 MUL requires zero points 0
    mult, shift = P.mul_params(qa.s, qb.s, m.qout.s)
    f = K.binary_mul(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), a_offset=0, b_offset=0,
                     out=K.Requant(mult, shift, 0, *m.act), name="mul_int16", dtype="int16")
    return em.call(m, f, "mul_int16", list(m.inputs))


def _mean_sum(em, m: Match):
    if not _all_int16(m):
        return None
    x, qx = m.inputs[0], m.qin[0]
    ishape = _shape(x)
    if m.op == "MEAN":
        mult, shift = P.mean_params(qx.s, m.qout.s, int(np.prod([ishape[a] for a in m.attrs["axes"]])))
    else:
        mult, shift = quantize_multiplier(P.f32(qx.s) / P.f32(m.qout.s))
    f = K.mean(ishape, m.attrs["axes"], _shape(m.var), m.attrs["keepdims"], in_offset=-qx.zp, mult=mult,
               shift=shift, out_offset=m.qout.zp, name=m.op.lower() + "_int16", dtype="int16")
    return em.call(m, f, m.op.lower() + "_int16", [x])


def _pool(em, m: Match):
    if not _all_int16(m):
        return None
    build = K.avg_pool2d if m.op == "AVERAGE_POOL_2D" else K.max_pool2d
    name = "avg_pool_int16" if m.op == "AVERAGE_POOL_2D" else "max_pool_int16"
    f = build(_shape(m.inputs[0]), _shape(m.var), pool=m.attrs["pool"], strides=m.attrs["strides"],
              padding=m.attrs["padding"], lo=m.act[0], hi=m.act[1], name=name, dtype="int16")
    return em.call(m, f, name, [m.inputs[0]])


def _unary_call(em, m: Match, f, name: str, extra=()):
    return em.call(m, f, name, [m.inputs[0]] + [em.const(a) for a in extra])


def _rescaled(em, m: Match, name: str, mult, shift, *, lo=None, hi=None, **kw):
    x, qx = m.inputs[0], m.qin[0]
    lo = m.act[0] if lo is None else max(lo, m.act[0])
    hi = m.act[1] if hi is None else min(hi, m.act[1])
    f = K16.rescale(_shape(x), in_dtype=_dtype(x), out_dtype=_dtype(m.var), in_offset=-qx.zp, mult=mult,
                    shift=shift, out_offset=m.qout.zp, lo=lo, hi=hi, name=name, **kw)
    return _unary_call(em, m, f, name)


def _quantize(em, m: Match):
    """QUANTIZE between integer types (``Requantize``)."""
    qx, qo = m.qin[0], m.qout
    mult, shift = quantize_multiplier(P.f32(qx.s) / P.f32(qo.s))
    return _rescaled(em, m, "requantize_int16", mult, shift)


def _relu(em, m: Match):
    if not _all_int16(m) or m.qin[0].zp or m.qout.zp:
        return None
    mult, shift = quantize_multiplier(P.f32(m.qin[0].s) / P.f32(m.qout.s))
    return _rescaled(em, m, "relu_int16", mult, shift, lo=P.act_range("relu", m.qout.s, 0, -32768, 32767)[0])


def _relu6(em, m: Match):
    """TFLite Micro's int16 RELU6: ``clamp(x, zero point, quantized 6)`` in the input's quantization."""
    if not _all_int16(m):
        return None
    qx = m.qin[0]
    six = min(32767, max(-32768, quantize_float(6.0, qx.s, qx.zp)))
    f = K16.clip(_shape(m.inputs[0]), "int16", qx.zp, six, name="relu6_int16")
    return _unary_call(em, m, f, "relu6_int16")


def _leaky_relu(em, m: Match):
    if not _all_int16(m):
        return None
    qx, qo = m.qin[0], m.qout
    ma, sa = quantize_multiplier(P.f32(qx.s) * P.f32(m.attrs["alpha"]) / P.f32(qo.s))
    mi, si = quantize_multiplier(P.f32(qx.s) / P.f32(qo.s))
    return _rescaled(em, m, "leaky_relu_int16", mi, si, neg_mult=abs(ma), neg_shift=sa, negate_neg=ma < 0)


def _abs(em, m: Match):
    if not _all_int16(m) or m.qin[0].zp or m.qout.zp:
        return None
    p = P16.abs16_params(m.qin[0].s, m.qout.s)
    return _rescaled(em, m, "abs_int16", *(p or (None, None)), absolute=True)


def _sigmoid(em, m: Match):
    if not _all_int16(m) or m.qin[0].zp or m.qout.zp or not _pot_15(m.qout.s):
        return None
    tanh = m.op == "TANH"
    mult, shift = P16.sigmoid_params(m.qin[0].s, tanh=tanh)
    name = "tanh_int16" if tanh else "logistic_int16"
    f = K16.sigmoid16(_shape(m.inputs[0]), multiplier=mult, left_shift=shift, tanh=tanh, name=name)
    return _unary_call(em, m, f, name, [P16.SIGMOID_TABLE_UINT16])


def _softmax(em, m: Match):
    qx, qo = m.qin[0], m.qout
    if not _all_int16(m) or qx.zp or qo.zp or abs(float(qo.s) - 1 / 32768) > 0.001 / 32768:
        return None
    mult, shift, exp_lut, recip_lut = P16.softmax16_params(qx.s, m.attrs["beta"])
    f = K16.softmax16(_shape(m.inputs[0]), multiplier=mult, shift=shift)
    return _unary_call(em, m, f, "softmax_int16", [exp_lut, recip_lut])


def _table_op(em, m: Match):
    if not _all_int16(m):
        return None
    qx, qo = m.qin[0], m.qout
    make = P16.exp16_table if m.op == "EXP" else P16.log16_table
    name = m.op.lower() + "_int16"
    return _unary_call(em, m, K16.lut16(_shape(m.inputs[0]), name=name), name, [make(qx.s, qx.zp, qo.s, qo.zp)])


def _rsqrt(em, m: Match):
    if not _all_int16(m) or m.qin[0].zp or m.qout.zp:
        return None
    mult, shift = P16.rsqrt16_params(m.qin[0].s, m.qout.s)
    f = K16.rsqrt16(_shape(m.inputs[0]), in_offset=0, multiplier=mult, shift=shift, out_offset=0)
    return _unary_call(em, m, f, "rsqrt_int16")


def _squared_difference(em, m: Match):
    qa, qb = m.qin
    if not _all_int16(m) or qa.zp or qb.zp or m.qout.zp:
        return None
    p = P16.squared_difference16_params(qa.s, qb.s, m.qout.s)
    f = K16.squared_difference16(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), **p)
    return em.call(m, f, "squared_difference_int16", list(m.inputs))


def _same_quantization(m: Match) -> bool:
    return all(q.same_as(m.qout) for q in m.qin)


def _minmax(em, m: Match):
    if not _all_int16(m) or not _same_quantization(m):
        return None
    name = m.op.lower() + "_int16"
    f = K16.minmax(_shape(m.inputs[0]), _shape(m.inputs[1]), _shape(m.var), "int16", m.op == "MAXIMUM", name=name)
    return em.call(m, f, name, list(m.inputs))


def _reduce(em, m: Match):
    if not _all_int16(m):
        return None
    x, qx = m.inputs[0], m.qin[0]
    name = m.op.lower() + "_int16"
    if m.op == "REDUCE_PROD":
        if qx.zp or m.qout.zp:
            return None
        ishape = _shape(x)
        count = int(np.prod([ishape[a] for a in m.attrs["axes"]]))
        mult, shift = P16.prod_scaling(qx.s, m.qout.s, count)
        f = K16.reduce_prod(ishape, m.attrs["axes"], _shape(m.var), m.attrs["keepdims"], in_offset=0,
                            multiplier=reduced_multiplier(mult), shift=shift, out_offset=0, name=name)
    else:
        if not _same_quantization(m):
            return None
        f = K16.reduce_minmax(_shape(x), m.attrs["axes"], _shape(m.var), m.attrs["keepdims"], "int16",
                              m.op == "REDUCE_MAX", name=name)
    return _unary_call(em, m, f, name)


def _resize(em, m: Match):
    if not _all_int16(m) or not _same_quantization(m):
        return None
    (_, h, w, _), (_, oh, ow, _) = _shape(m.inputs[0]), _shape(m.var)
    align = m.attrs["align_corners"]
    f = K16.resize_bilinear16(_shape(m.inputs[0]), _shape(m.var), align_corners=align,
                              half_pixel_centers=m.attrs["half_pixel_centers"],
                              height_scale_10=P16.resize_scale_10(h, oh, align),
                              width_scale_10=P16.resize_scale_10(w, ow, align))
    return _unary_call(em, m, f, "resize_bilinear_int16")


def _quantize_float(em, m: Match):
    if _dtype(m.var) != "int16":
        return None
    f = K.quantize(_shape(m.inputs[0]), scale_f32=m.qout.s, zero_point=m.qout.zp, out_dtype="int16",
                   name="quantize_int16", scale_arg=True)
    return em.call(m, f, "quantize_int16", [m.inputs[0], em.const(np.float32([m.qout.s]))])


def _dequantize(em, m: Match):
    q = m.qin[0]
    f = K16.dequantize16(_shape(m.inputs[0]), zero_point=q.zp)
    return em.call(m, f, "dequantize_int16", [m.inputs[0], em.const(np.float32([q.s]))])


def _prelu(em, m: Match):
    """PRELU int16 with an int8 slope (TFLite Micro's ``BroadcastPrelu4DSlow``, multipliers in double)."""
    qx, qa = m.qin[0], m.consts["alpha_q"]
    alpha = m.consts["alpha"]
    if not _all_int16(m) or alpha.dtype != np.int8:
        return None
    m1, s1, m2, s2 = P.prelu_params(qx.s, qa.s, m.qout.s)
    f = K.prelu(_shape(m.inputs[0]), alpha.shape, in_offset=-qx.zp, alpha_offset=-qa.zp, mult1=m1, shift1=s1,
                mult2=m2, shift2=s2, out_offset=m.qout.zp, name="prelu_int16", dtype="int16")
    return em.call(m, f, "prelu_int16", [m.inputs[0], em.const(alpha)])


def _concat(em, m: Match):
    if not _all_int16(m) or not _same_quantization(m):
        return None
    return relax.op.concat(relax.Tuple(list(m.inputs)), axis=m.attrs["axis"])


def _integer_quantize(em, m: Match):
    return _quantize(em, m) if all(_dtype(e) in ("int8", "int16") for e in list(m.inputs) + [m.var]) else None


_EMITTERS = {"CONV_2D": _conv, "DEPTHWISE_CONV_2D": _conv, "TRANSPOSE_CONV": _transpose_conv,
             "FULLY_CONNECTED": _dense, "ADD": _add_sub, "SUB": _add_sub, "MUL": _mul, "MEAN": _mean_sum,
             "SUM": _mean_sum, "AVERAGE_POOL_2D": _pool, "MAX_POOL_2D": _pool, "RELU": _relu, "RELU6": _relu6,
             "LEAKY_RELU": _leaky_relu, "LOGISTIC": _sigmoid, "TANH": _sigmoid, "SOFTMAX": _softmax,
             "QUANTIZE": _integer_quantize, "QUANTIZE_FLOAT": _quantize_float, "DEQUANTIZE": _dequantize,
             "ABS": _abs, "EXP": _table_op, "LOG": _table_op, "RSQRT": _rsqrt,
             "SQUARED_DIFFERENCE": _squared_difference, "MAXIMUM": _minmax, "MINIMUM": _minmax,
             "REDUCE_MAX": _reduce, "REDUCE_MIN": _reduce, "REDUCE_PROD": _reduce, "RESIZE_BILINEAR": _resize,
             "CONCATENATION": _concat, "PRELU": _prelu}
