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

import numpy as np

from .fixedpoint import (FixedPoint, calculate_input_radius, logistic_q0, multiply_by_quantized_multiplier,
                         quantize_float, quantize_multiplier, rounding_divide_by_pot, srdhm16, tanh_q0, wrap16)

__all__ = ["f32", "act_range", "conv_multipliers", "add_params", "mul_params", "mean_params", "prelu_params",
           "softmax_params", "softmax_tables", "requantize_table", "relu_table", "leaky_relu_table",
           "hard_swish_table", "logistic_table", "tanh_table", "dequantize_table", "ACTIVATIONS", "INT8_VALUES"]

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
