"""Integer parameters of TFLite's int8 operators, computed as their ``Prepare`` functions do.

Each function takes the float32 scales and integer zero points of an
operator's tensors (exactly as stored in the model) and returns what TFLite
Micro's kernel computes before running: multipliers and shifts from
:func:`~.fixedpoint.quantize_multiplier` of the same double (or float)
expressions, activation ranges from ``CalculateActivationRangeQuantized``,
and, for element-wise operators with one int8 input, a 256-entry look-up
table made by running the reference algorithm on every input value.

Scales are passed through ``numpy.float32`` first, so a scale given as a
Python float behaves like the model's float32 field.

Example
-------
>>> act_range("relu6", 0.05, -128)
(-128, -8)
>>> conv_multipliers(0.5, [0.01, 0.02], 0.25)
([1374389504, 1374389504], [-5, -4])
>>> int(requantize_table(0.5, 0, 0.25, 0)[128 + 3])   # 3 * 0.5 / 0.25
6
"""

from __future__ import annotations

import math

import numpy as np

from .fixedpoint import (FixedPoint, calculate_input_radius, count_leading_zeros, inv_sqrt_multiplier,
                         logistic_q0, multiply_by_quantized_multiplier, quantize_float, quantize_multiplier,
                         rounding_divide_by_pot, srdhm16, tanh_q0, wrap16)

__all__ = ["f32", "act_range", "conv_multipliers", "add_params", "mul_params", "mean_params", "prelu_params",
           "softmax_params", "softmax_tables", "requantize_table", "relu_table", "leaky_relu_table",
           "hard_swish_table", "logistic_table", "tanh_table", "dequantize_table", "abs_table", "rsqrt_table",
           "sqrt_table", "lut_populate", "exp_table", "log_table", "squared_difference_params", "comparison_params",
           "div_params", "div_reciprocals", "log_softmax_params", "reduce_prod_params", "elu_table", "cumsum_params",
           "ACTIVATIONS",
           "INT8_VALUES"]

#: Fused activations TFLite knows for quantized outputs, by name.
ACTIVATIONS = ("none", "relu", "relu6", "relu_n1_to_1")

#: every int8 value, in table order (``table[x + 128]``)
INT8_VALUES = np.arange(-128, 128, dtype=np.int32)


def f32(x) -> float:
    """``x`` rounded to float32 and widened back (a model's scale field as C++'s ``double(float)``)."""
    return float(np.float32(x))


def act_range(activation: str, scale, zero_point: int, qmin: int = -128, qmax: int = 127) -> tuple[int, int]:
    """``CalculateActivationRangeQuantized``: the int8 clamp of a fused activation."""
    if activation == "none":
        return qmin, qmax
    if activation == "relu":
        return max(qmin, quantize_float(0.0, scale, zero_point)), qmax
    if activation == "relu6":
        return max(qmin, quantize_float(0.0, scale, zero_point)), min(qmax, quantize_float(6.0, scale, zero_point))
    if activation == "relu_n1_to_1":
        return (max(qmin, quantize_float(-1.0, scale, zero_point)),
                min(qmax, quantize_float(1.0, scale, zero_point)))
    raise ValueError(f"unknown fused activation {activation!r}")


def conv_multipliers(input_scale, filter_scales, output_scale) -> tuple[list[int], list[int]]:
    """``PopulateConvolutionQuantizationParams``: per-channel ``(multipliers, shifts)``."""
    out = [quantize_multiplier(f32(input_scale) * f32(s) / f32(output_scale)) for s in np.atleast_1d(filter_scales)]
    return [m for m, _ in out], [s for _, s in out]


def add_params(scale1, scale2, scale_out, *, sub: bool = False, left_shift: int = 20) -> dict:
    """ADD / SUB int8 parameters (``left_shift`` 20, three multipliers below one; 15 for int16).

    ADD computes the ratios in double; TFLite Micro's SUB computes them in float
    (``sub_common.cc``), reproduced here.
    """
    if sub:
        s1, s2, so = np.float32(scale1), np.float32(scale2), np.float32(scale_out)
        twice_max = np.float32(2) * max(s1, s2)
        r1, r2 = float(s1 / twice_max), float(s2 / twice_max)
        ro = float(twice_max / (np.float32(1 << left_shift) * so))
    else:
        twice_max = 2 * max(f32(scale1), f32(scale2))
        r1, r2 = f32(scale1) / twice_max, f32(scale2) / twice_max
        ro = twice_max / ((1 << left_shift) * f32(scale_out))
    (m1, s1_), (m2, s2_), (mo, so_) = quantize_multiplier(r1), quantize_multiplier(r2), quantize_multiplier(ro)
    return {"left_shift": left_shift, "a_mult": m1, "a_shift": s1_, "b_mult": m2, "b_shift": s2_,
            "out_mult": mo, "out_shift": so_}


def mul_params(scale1, scale2, scale_out) -> tuple[int, int]:
    """MUL int8: ``QuantizeMultiplier(s1 * s2 / s_out)``."""
    return quantize_multiplier(f32(scale1) * f32(scale2) / f32(scale_out))


def mean_params(input_scale, output_scale, count: int) -> tuple[int, int]:
    """MEAN int8 (``QuantizedMeanOrSum``): multiplier and shift with the division by ``count`` folded in."""
    mult, shift = quantize_multiplier(f32(input_scale) / f32(output_scale))
    n = int(count)
    pot = min(n.bit_length() - 1, 32, 31 + shift)
    mult = int((mult << pot) // n)            # C's int64 division of non-negative values
    mult = ((mult + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return mult, shift - pot


def prelu_params(input_scale, alpha_scale, output_scale) -> tuple[int, int, int, int]:
    """PRELU int8: ``(mult_identity, shift_identity, mult_alpha, shift_alpha)``."""
    m1, s1 = quantize_multiplier(f32(input_scale) / f32(output_scale))
    m2, s2 = quantize_multiplier(f32(input_scale) * f32(alpha_scale) / f32(output_scale))
    return m1, s1, m2, s2


def softmax_params(input_scale, beta: float = 1.0) -> tuple[int, int, int]:
    """SOFTMAX int8 -> int8: ``(input_beta_multiplier, input_beta_left_shift, diff_min)``."""
    scaled_diff_integer_bits = 5
    real = min(float(np.float32(beta)) * f32(input_scale) * (1 << (31 - scaled_diff_integer_bits)),
               (1 << 31) - 1.0)
    mult, shift = quantize_multiplier(real)
    diff_min = -calculate_input_radius(scaled_diff_integer_bits, shift)
    return mult, shift, diff_min


def _table(fn) -> np.ndarray:
    return np.array([fn(int(v)) for v in INT8_VALUES], dtype=np.int8)


def requantize_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """QUANTIZE int8 -> int8 (``Requantize``) as a table."""
    m, s = quantize_multiplier(f32(in_scale) / f32(out_scale))
    return _table(lambda v: min(127, max(-128, multiply_by_quantized_multiplier(v - in_zp, m, s) + out_zp)))


def relu_table(in_scale, in_zp: int, out_scale, out_zp: int, act_min: float = 0.0,
               act_max: float | None = None) -> np.ndarray:
    """RELU (``act_max=None``), RELU_N1_TO_1 (-1, 1) or RELU6 (0, 6) with requantization (``ReluQuantized``)."""
    m, s = quantize_multiplier(f32(np.float32(in_scale) / np.float32(out_scale)))
    lo = max(-128, quantize_float(act_min, out_scale, out_zp))
    hi = 127 if act_max is None else min(127, quantize_float(act_max, out_scale, out_zp))
    return _table(lambda v: min(hi, max(lo, out_zp + multiply_by_quantized_multiplier(v - in_zp, m, s))))


def leaky_relu_table(in_scale, in_zp: int, out_scale, out_zp: int, alpha: float) -> np.ndarray:
    """LEAKY_RELU int8 (``QuantizeLeakyRelu``): identity and alpha multipliers computed in float."""
    ma, sa = quantize_multiplier(float(np.float32(in_scale) * np.float32(alpha) / np.float32(out_scale)))
    mi, si = quantize_multiplier(float(np.float32(in_scale) / np.float32(out_scale)))
    negative = ma < 0
    ma = -ma if negative else ma

    def fn(v):
        x = v - in_zp
        if x >= 0:
            o = out_zp + multiply_by_quantized_multiplier(x, mi, si)
        else:
            t = multiply_by_quantized_multiplier(x, ma, sa)
            o = out_zp + (-t if negative else t)
        return min(127, max(-128, o))

    return _table(fn)


def _downscale_to_int16(m: int) -> int:
    if m >= (1 << 31) - 1 - (1 << 15):
        return (1 << 15) - 1
    return (m + (1 << 15)) >> 16


def _saturating_left_shift16(v: int, amount: int) -> int:
    return min(max(v * (1 << amount), -(1 << 15)), (1 << 15) - 1)


def _sdhm16(a: int, b: int) -> int:
    """``SaturatingDoublingHighMul`` (no rounding) on int16."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    q = abs(ab) // (1 << 15)
    return wrap16(q if ab >= 0 else -q)


def hard_swish_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """HARD_SWISH int8 (``reference_ops::HardSwish`` with ``HardSwishParams`` from ``HardSwishPrepare``)."""
    hires_input_scale = np.float32(1.0 / 128.0) * np.float32(in_scale)
    reluish_scale = np.float32(3.0) / np.float32(32768.0)
    om, oe = quantize_multiplier(float(hires_input_scale / np.float32(out_scale)))
    om16 = _downscale_to_int16(om)
    rm, re = quantize_multiplier(float(hires_input_scale / reluish_scale))
    rm16 = _downscale_to_int16(rm)
    if oe > 0:
        raise ValueError("HARD_SWISH: output scale too small for TFLite's int8 kernel (output exponent > 0)")

    def fn(v):
        input_value = wrap16(v - in_zp)
        hires = wrap16(input_value * (1 << 7))
        preshift_out = srdhm16(hires, om16)
        reluish = hires
        if re > 0:
            reluish = _saturating_left_shift16(reluish, re - 1)
        reluish = srdhm16(reluish, rm16)
        if re > 0:
            reluish = _saturating_left_shift16(reluish, 1)
        if re < 0:
            reluish = rounding_divide_by_pot(reluish, -re)
        reluish = wrap16((reluish + (1 << 15)) >> 1)
        preshift_output_value = _sdhm16(reluish, preshift_out)
        out = wrap16(rounding_divide_by_pot(preshift_output_value, -oe))
        out = wrap16(out + out_zp)
        return min(127, max(-128, out))

    return _table(fn)


def _tfl_frexp_multiplier(real: float) -> tuple[int, int]:
    """The ``std::frexp`` + ``TfLiteRound`` multiplier of LOGISTIC/TANH prepare (no 2**31 correction)."""
    import math

    from .fixedpoint import tflite_round, wrap32

    q, shift = math.frexp(real)
    return wrap32(int(tflite_round(q * (1 << 31)))), shift


def logistic_table(in_scale, in_zp: int) -> np.ndarray:
    """LOGISTIC int8 (``reference_integer_ops::Logistic``); output scale 1/256, zero point -128."""
    input_integer_bits = 4
    mult, left_shift = _tfl_frexp_multiplier(f32(in_scale) * float(1 << (31 - input_integer_bits)))
    radius = calculate_input_radius(input_integer_bits, left_shift, 31)

    def fn(v):
        x = v - in_zp
        if x <= -radius:
            return -128
        if x >= radius:
            return 127
        q4 = multiply_by_quantized_multiplier(x, mult, left_shift)
        q0 = logistic_q0(FixedPoint(q4, input_integer_bits)).raw
        o = rounding_divide_by_pot(q0, 31 - 8) - 128
        return min(127, max(-128, o))

    return _table(fn)


def tanh_table(in_scale, in_zp: int) -> np.ndarray:
    """TANH int8 (``reference_integer_ops::Tanh``); output scale 1/128, zero point 0."""
    input_integer_bits = 4
    mult, left_shift = _tfl_frexp_multiplier(f32(in_scale) * float(1 << (31 - input_integer_bits)))
    radius = calculate_input_radius(input_integer_bits, left_shift, 31)

    def fn(v):
        x = v - in_zp
        if x <= -radius:
            return -128
        if x >= radius:
            return 127
        q4 = multiply_by_quantized_multiplier(x, mult, left_shift)
        q0 = tanh_q0(FixedPoint(q4, input_integer_bits)).raw
        o = rounding_divide_by_pot(q0, 31 - 7)
        return min(127, max(-128, o))

    return _table(fn)


def dequantize_table(scale, zp: int) -> np.ndarray:
    """DEQUANTIZE int8 -> float32 (``static_cast<float>(double(scale) * (x - zp))``) as a table."""
    return (f32(scale) * (INT8_VALUES.astype(np.float64) - zp)).astype(np.float32)


def softmax_tables(input_scale, beta: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """SOFTMAX int8 tables indexed by ``x - max(row) + 255``: ``exp`` (Q0.31 raw) and its Q12 accumulator term.

    Entries below TFLite's ``diff_min`` are 0, which makes the kernel's output
    there -128 exactly as TFLite's branch does.
    """
    from .fixedpoint import exp_on_negative_values, multiply_by_quantized_multiplier

    mult, shift, diff_min = softmax_params(input_scale, beta)
    exp = np.zeros(256, np.int64)
    for d in range(-255, 1):
        if d >= diff_min:
            rescaled = multiply_by_quantized_multiplier(d, mult, shift)
            exp[d + 255] = exp_on_negative_values(FixedPoint(rescaled, 5)).raw
    acc = np.array([rounding_divide_by_pot(int(v), 12) for v in exp], np.int64)
    return exp.astype(np.int32), acc.astype(np.int32)


def abs_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """ABS int8 (TFLite Micro ``AbsEvalQuantized``): ``|x - zp_in|``, rescaled by the float ratio of the scales
    unless they are equal, plus the output zero point."""
    same = np.float32(in_scale) == np.float32(out_scale)
    m, s = quantize_multiplier(float(np.float32(in_scale) / np.float32(out_scale)))

    def fn(v):
        value = abs(v - in_zp)
        o = value if same else multiply_by_quantized_multiplier(value, m, s)
        return min(127, max(-128, o + out_zp))

    return _table(fn)


def rsqrt_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """RSQRT int8 (TFLite Micro ``RsqrtEvalQuantized``): the integer inverse square root of ``x - zp_in``
    rescaled by ``1 / (sqrt(s_in) * s_out)``; 127 at the zero point. Below it, where TFLite fails the
    invocation (negative input), the table holds 127 as well."""
    real = 1.0 / float(np.sqrt(np.float32(in_scale)) * np.float32(out_scale))
    m, s = quantize_multiplier(real)

    def fn(v):
        value = v - in_zp
        if value <= 0:
            return 127
        inv, inv_shift = inv_sqrt_multiplier(value)
        data = multiply_by_quantized_multiplier(1, inv, inv_shift + 20)
        return min(127, max(-128, multiply_by_quantized_multiplier(data, m, s - 20) + out_zp))

    return _table(fn)


def sqrt_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """SQRT int8 (LiteRT ``SqrtEvalQuantized``; TFLite Micro has no int8 SQRT): ``sqrt`` of the dequantized
    value in float, divided by the output scale and *truncated*, plus the output zero point. Below the
    input zero point, where LiteRT fails the invocation (negative input), the output zero point."""
    def fn(v):
        x = np.float32(in_scale) * np.float32(v - in_zp)
        if x < 0:
            return min(127, max(-128, out_zp))
        q = np.float32(np.sqrt(x)) / np.float32(out_scale)
        return min(127, max(-128, int(q) + out_zp))

    return _table(fn)


def _libm(name: str):
    """The C library's single-precision ``name`` (``expf``, ``logf``): what LiteRT's ``std::exp(float)``
    calls on this host (numpy's float32 functions may round differently)."""
    import ctypes
    import ctypes.util

    fn = getattr(ctypes.CDLL(ctypes.util.find_library("m")), name)
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return lambda x: np.float32(fn(float(x)))


def _f2i32(x) -> int:
    """``static_cast<int32_t>(float)`` as x86 computes it (``INT32_MIN`` for NaN and values out of range)."""
    x = float(x)
    if x != x or not -2147483648.0 <= x < 2147483648.0:
        return -(1 << 31)
    return int(x)


def lut_populate(fn, in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """LiteRT's ``LUTPopulateInt8`` of the float32 function ``fn``: each int8 value dequantized in float,
    transformed, multiplied by the float inverse of the output scale, rounded half away from zero, offset
    and clamped."""
    inverse = np.float32(1) / np.float32(out_scale)

    def entry(v):
        r = np.float32(fn(np.float32(in_scale) * np.float32(v - in_zp))) * inverse
        if np.isfinite(r):           # TfLiteRound(float): half away from zero (exact in double)
            r = np.float32(math.copysign(math.floor(abs(float(r)) + 0.5), float(r)))
        return min(127, max(-128, _f2i32(r + np.float32(out_zp))))

    return _table(entry)


def exp_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """EXP int8 (LiteRT: :func:`lut_populate` of ``expf``; TFLite Micro has no int8 EXP)."""
    return lut_populate(_libm("expf"), in_scale, in_zp, out_scale, out_zp)


def log_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """LOG int8 (LiteRT: :func:`lut_populate` of ``logf``, non-positive inputs mapped to the smallest
    output value; TFLite Micro has no int8 LOG)."""
    logf = _libm("logf")
    output_min = np.float32(-128 - out_zp) * np.float32(out_scale)
    return lut_populate(lambda x: logf(x) if x > 0 else output_min, in_scale, in_zp, out_scale, out_zp)


def squared_difference_params(scale1, scale2, scale_out) -> tuple[tuple, tuple, tuple]:
    """SQUARED_DIFFERENCE int8 (TFLite Micro ``PrepareQuantized``, left shift 7): ``(multiplier, shift)`` of each
    input (their scales over twice the larger, in double) and of the output (``(2 max)**2 / (2**14 s_out)``)."""
    twice_max = 2.0 * max(f32(scale1), f32(scale2))
    out = twice_max * twice_max / float(np.float32(1 << 14) * np.float32(scale_out))
    return (quantize_multiplier(f32(scale1) / twice_max), quantize_multiplier(f32(scale2) / twice_max),
            quantize_multiplier(out))


def comparison_params(scale) -> tuple[int, int] | None:
    """EQUAL, GREATER, ... int8 (TFLite Micro ``ComparisonsPrepare``): the ``(multiplier, shift)`` of an input's
    scale itself (``QuantizeMultiplierSmallerThanOneExp``), None for a scale of 1 or more (TFLite's check)."""
    if not 0 < f32(scale) < 1:
        return None
    return quantize_multiplier(f32(scale))


def div_params(scale1, scale2, scale_out) -> tuple[int, int]:
    """DIV int8: ``QuantizeMultiplier(s1 / (s2 * s_out))``, the ratio computed in float as TFLite Micro does."""
    return quantize_multiplier(float(np.float32(scale1) / (np.float32(scale2) * np.float32(scale_out))))


def div_reciprocals(zero_point: int) -> np.ndarray:
    """DIV int8: for each stored value of the divisor, TFLite's ``GetReciprocal(|x - zp|, 31)``, the Q0.31
    reciprocal (row 0) and its ``num_bits_over_unit`` (row 1). At the zero point (a division by zero, which
    TFLite only asserts against) what its code computes there on Arm and x86: ``CountLeadingZeros(0)`` is
    32, and 0 shifted by 32 is 0.

    >>> div_reciprocals(0)[:, 128 + 3].tolist()          # 1/3 = 2/3 * 2**-1: 2/3 in Q0.31, shift 1
    [1431655762, 1]
    """
    from .fixedpoint import one_over_one_plus_x_for_x_in_0_1, wrap32

    table = np.zeros((2, 256), np.int64)
    for v in INT8_VALUES:
        x = abs(int(v) - zero_point)
        clz = count_leading_zeros(x)
        shifted = wrap32(((x << clz) & 0xFFFFFFFF) - (1 << 31))
        table[0, v + 128] = one_over_one_plus_x_for_x_in_0_1(FixedPoint(shifted, 0)).raw
        table[1, v + 128] = 31 - clz
    return table.astype(np.int32)


def log_softmax_params(input_scale) -> dict | None:
    """LOG_SOFTMAX int8 (``PreprocessLogSoftmaxScalingExp``, beta 1, 5 integer bits): the input multiplier and
    left shift of :func:`softmax_params`, the reverse scaling divisor and its shift, ``diff_min``; None where
    TFLite's preparation fails (an input scale too large for a left shift of at least 1)."""
    mult, shift, diff_min = softmax_params(input_scale, 1.0)
    if not 1 <= shift <= 30:
        return None
    divisor, rshift = quantize_multiplier((1 << (31 - shift)) / float(mult))
    if rshift > 0:
        return None
    return {"mult": mult, "left_shift": shift, "reverse_divisor": divisor, "reverse_shift": rshift,
            "diff_min": diff_min}


def reduce_prod_params(input_scale, output_scale, count: int) -> tuple[int, int]:
    """REDUCE_PROD int8 (LiteRT ``GetQuantProdScaling``): each of the ``count`` factors scaled by
    ``s_in / s_out ** (1 / count)`` (double, ``std::pow``)."""
    return quantize_multiplier(f32(input_scale) / math.pow(f32(output_scale), 1.0 / int(count)))


def elu_table(in_scale, in_zp: int, out_scale, out_zp: int) -> np.ndarray:
    """ELU int8 (TFLite Micro: ``PopulateLookupTable`` of ``x < 0 ? expf(x) - 1 : x``, as :func:`lut_populate`)."""
    expf = _libm("expf")
    return lut_populate(lambda x: np.float32(expf(x) - np.float32(1)) if x < 0 else x, in_scale, in_zp, out_scale,
                        out_zp)


def cumsum_params(in_scale, out_scale) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """CUMSUM int8 (TFLite Micro, left shift 20): ``(multiplier, shift)`` of the input (``s / 2s``: one half)
    and of the output (``2 s_in / (2**20 s_out)``); None where TFLite's check fails (an output ratio of 1 or
    more)."""
    twice = 2 * f32(in_scale)
    out = twice / ((1 << 20) * f32(out_scale))
    if not 0 < out < 1:
        return None
    return quantize_multiplier(f32(in_scale) / twice), quantize_multiplier(out)
