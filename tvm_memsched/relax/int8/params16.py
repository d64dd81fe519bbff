"""Integer parameters and tables of TFLite's 16x8 kernels (int16 activations), as their ``Prepare`` computes them.

The int16 counterparts of :mod:`.params`: each function takes the float32
scales and zero points of an operator's tensors (as stored in the model) and
returns what TFLite Micro's kernel (or, where TFLite Micro has none, LiteRT's
reference kernel) computes before running:

* the reduced Q15 multipliers of the int64 accumulators of CONV_2D,
  DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV
  (:func:`~.fixedpoint.reduced_multiplier`);
* LOGISTIC and TANH's input rescaling for their interpolated 256-entry table
  :data:`SIGMOID_TABLE_UINT16` (:func:`sigmoid_params`);
* the 513-entry interpolated look-up tables of ``LUTPopulate<int16_t>``
  (:func:`lut16`): SOFTMAX's ``exp`` and ``1 / (1 + x)``, LiteRT's EXP and LOG,
  computed in ``float`` with the C library's ``expf`` / ``logf``, as TFLite does;
* the multipliers of ABS, RSQRT, SQUARED_DIFFERENCE, REDUCE_PROD and the
  integer scales of RESIZE_BILINEAR.

A 65,536-entry table per operator would cost 128 KiB of flash: the int16
kernels compute per element instead (:mod:`.kernels16`), and the Python
functions :func:`logistic16`, :func:`tanh16`, :func:`lut16_lookup` and
:func:`rsqrt16` give the exact results they must reproduce.

Example
-------
>>> sigmoid_params(2 ** -12, tanh=False)
(0, 0)
>>> int(lut16(expf, 10 / 65535, 32767, 2 / 65535, 0)[512])
32767
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np

from .fixedpoint import inv_sqrt_multiplier, multiply_by_quantized_multiplier, quantize_multiplier, tflite_round, wrap16
from .params import f32

__all__ = ["SIGMOID_TABLE_UINT16", "expf", "logf", "checked_log2", "sigmoid_params", "logistic16", "tanh16",
           "lut16", "lut16_lookup", "softmax16_params", "exp16_table", "log16_table", "abs16_params",
           "rsqrt16_params", "rsqrt16", "squared_difference16_params",
           "resize_scale_10", "prod_scaling"]

#: TFLite's ``sigmoid_table_uint16``: sigmoid(i / 24) in Q0.16, the table LOGISTIC and TANH int16 interpolate
SIGMOID_TABLE_UINT16 = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535],
    np.uint16)

_F = np.float32


def _libm_float_function(name: str):
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return lambda x: _F(fn(float(_F(x))))


#: the C library's ``expf`` and ``logf`` (what TFLite's ``std::exp(float)`` / ``std::log(float)`` call)
expf = _libm_float_function("expf")
logf = _libm_float_function("logf")


def _roundf(x) -> np.float32:
    """``TfLiteRound(float)``: half away from zero, in float."""
    return _F(tflite_round(float(x)))


def checked_log2(x) -> tuple[bool, int]:
    """``tflite::CheckedLog2``: ``(x is a power of two within 1e-3, round(log2(x)))``, in float.

    >>> checked_log2(2 ** -15), checked_log2(0.3)[0]
    ((True, -15), False)
    """
    x_log2 = logf(x) * (_F(1.0) / logf(2.0))
    rounded = _roundf(x_log2)
    return bool(abs(x_log2 - rounded) < _F(1e-3)), int(rounded)


def sigmoid_params(input_scale, tanh: bool) -> tuple[int, int]:
    """LOGISTIC / TANH int16 ``Prepare``: ``(input_multiplier, input_left_shift)`` (0 multiplier: power-of-two
    input scale, the kernel's ``3 << shift`` path)."""
    pot, log2 = checked_log2(input_scale)
    left_shift = (15 - 3) + log2
    pot = pot and (left_shift in (0, 1) if tanh else left_shift == 0)
    if pot:
        return 0, left_shift
    multiplier = f32(input_scale) * 4096.0 * 3.0
    left_shift = 0
    while multiplier <= 32767.0 / 2.0 and left_shift <= 30:
        left_shift += 1
        multiplier *= 2.0
    return int(multiplier), left_shift


def _sigmoid_rescale(v: int, multiplier: int, left_shift: int) -> int:
    if multiplier == 0:
        multiplier, left_shift = 3 << left_shift, 0
    rounding = 1 << (left_shift - 1) if left_shift > 0 else 0
    return (int(v) * multiplier + rounding) >> left_shift


def logistic16(v: int, multiplier: int, left_shift: int) -> int:
    """``reference_integer_ops::Logistic`` (int16) of one value (output scale 2**-15)."""
    x = _sigmoid_rescale(v, multiplier, left_shift)
    a = abs(x)
    uh = a >> 9
    if uh >= 255:
        result = 0x7FFF << 10
    else:
        ua, ub = int(SIGMOID_TABLE_UINT16[uh]), int(SIGMOID_TABLE_UINT16[uh + 1])
        result = (ua << 9) + (a & 0x1FF) * (ub - ua)
    result = result + (1 << 9) if x >= 0 else (1 << 25) - result + (1 << 9) - 1
    return wrap16(result >> 10)


def tanh16(v: int, multiplier: int, left_shift: int) -> int:
    """``reference_integer_ops::Tanh`` (int16) of one value (output scale 2**-15)."""
    x = _sigmoid_rescale(v, multiplier, left_shift)
    a = abs(x)
    uh = a >> 8
    if uh >= 255:
        result = 0xFFFF << 8
    else:
        ua, ub = int(SIGMOID_TABLE_UINT16[uh]), int(SIGMOID_TABLE_UINT16[uh + 1])
        result = (ua << 8) + (a & 0xFF) * (ub - ua)
    result = result - (1 << 23) + (1 << 7) if x >= 0 else -result + (1 << 23) + (1 << 7) - 1
    return wrap16(result >> 8)


def lut16(transform, input_scale, input_zero_point: int, output_scale, output_zero_point: int) -> np.ndarray:
    """``LUTPopulate<int16_t>`` (float): 513 int16 values of ``transform`` (float32 -> float32) sampled over
    the input range, each biased by half the interpolation error at its midpoint, all in float arithmetic."""
    in_s, out_s = _F(input_scale), _F(output_scale)
    input_min = in_s * _F(-32768 - int(input_zero_point))
    input_max = in_s * _F(32767 - int(input_zero_point))
    output_min = out_s * _F(-32768 - int(output_zero_point))
    output_max = out_s * _F(32767 - int(output_zero_point))
    step = (input_max - input_min) / _F(512)
    half_step = step / _F(2)
    inv = _F(65536) / (output_max - output_min)
    lo, hi = _F(-32768), _F(32767)
    lut = np.zeros(513, np.int16)
    for i in range(512):
        val = _F(transform(input_min + _F(i) * step))
        midpoint = _F(transform(input_min + _F(i) * step + half_step))
        nxt = _F(transform(input_min + _F(i + 1) * step))
        sample = _roundf(val * inv)
        midpoint_interp = _roundf((nxt * inv + _roundf(val * inv)) / _F(2))
        midpoint_err = midpoint_interp - _roundf(midpoint * inv)
        bias = _roundf(midpoint_err / _F(2))
        lut[i] = int(min(max(sample - bias, lo), hi))
    lut[512] = int(min(max(_roundf(_F(transform(input_max)) * inv), lo), hi))
    return lut


def lut16_lookup(v: int, lut) -> int:
    """``LUTLookup(int16_t, const int16_t*)``: the table at the high 9 bits, interpolated by the low 7."""
    index = 256 + (int(v) >> 7)
    base, slope = int(lut[index]), wrap16(int(lut[index + 1]) - int(lut[index]))
    return wrap16(base + ((slope * (int(v) & 0x7F) + 64) >> 7))


def softmax16_params(input_scale, beta: float = 1.0) -> tuple[int, int, np.ndarray, np.ndarray]:
    """SOFTMAX int16 (TFLite Micro's ``CalculateSoftmaxParams``): ``(input_multiplier, input_left_shift,
    exp_lut, one_over_one_plus_x_lut)``."""
    mult, shift = quantize_multiplier(f32(input_scale) * float(_F(beta)) / (10.0 / 65535.0))
    span = _F(65535)
    exp_lut = lut16(expf, _F(10.0) / span, 32767, _F(2.0) / span, 0)
    recip_lut = lut16(lambda v: _F(1.0) / (_F(1.0) + _F(v)), _F(1.0) / span, -32768, _F(2.0) / span, 0)
    return mult, shift, exp_lut, recip_lut


def exp16_table(input_scale, input_zero_point: int, output_scale, output_zero_point: int) -> np.ndarray:
    """EXP int16 (LiteRT's ``exp.cc``): the interpolated ``expf`` table."""
    return lut16(expf, input_scale, input_zero_point, output_scale, output_zero_point)


def log16_table(input_scale, input_zero_point: int, output_scale, output_zero_point: int) -> np.ndarray:
    """LOG int16 (LiteRT's ``LogLUTPrepare``): ``logf``, and the output's lowest value for inputs <= 0."""
    output_min = _F(-32768 - int(output_zero_point)) * _F(output_scale)

    def fn(v):
        return output_min if v <= _F(0) else logf(v)

    return lut16(fn, input_scale, input_zero_point, output_scale, output_zero_point)


def abs16_params(input_scale, output_scale) -> tuple[int, int] | None:
    """ABS (TFLite Micro's ``SetAbsOutputMultiplier``): the multiplier, or None when the scales are equal."""
    if _F(input_scale) == _F(output_scale):
        return None
    return quantize_multiplier(f32(input_scale) / f32(output_scale))


def rsqrt16_params(input_scale, output_scale) -> tuple[int, int]:
    """RSQRT (TFLite Micro's ``SetRsqrtOutputMultiplier``): ``1 / (sqrt(s_in) * s_out)`` in double."""
    return quantize_multiplier(1.0 / (math.sqrt(f32(input_scale)) * f32(output_scale)))


def rsqrt16(v: int, input_zero_point: int, multiplier: int, shift: int, output_zero_point: int,
            lo: int = -32768, hi: int = 32767) -> int:
    """``RsqrtEvalQuantized`` (TFLite Micro) of one value."""
    value = int(v) - int(input_zero_point)
    if value == 0:
        return hi
    inv_mult, inv_shift = inv_sqrt_multiplier(value)
    data = multiply_by_quantized_multiplier(1, inv_mult, inv_shift + 20)
    out = multiply_by_quantized_multiplier(data, multiplier, shift - 20) + int(output_zero_point)
    return min(max(out, lo), hi)


def squared_difference16_params(scale1, scale2, scale_out) -> dict:
    """SQUARED_DIFFERENCE int16 (TFLite Micro, ``left_shift`` 0): input and output multipliers."""
    twice_max = 2.0 * float(max(_F(scale1), _F(scale2)))
    (m1, s1), (m2, s2) = quantize_multiplier(f32(scale1) / twice_max), quantize_multiplier(f32(scale2) / twice_max)
    mo, so = quantize_multiplier(twice_max * twice_max / f32(scale_out))
    return {"a_mult": m1, "a_shift": s1, "b_mult": m2, "b_shift": s2, "out_mult": mo, "out_shift": so}


def resize_scale_10(in_size: int, out_size: int, align_corners: bool) -> int:
    """``ResizeBilinearInteger``'s Q10 scale of one axis."""
    if align_corners and out_size > 1:
        return ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    return ((1 << 10) * in_size + out_size // 2) // out_size


def prod_scaling(input_scale, output_scale, count: int) -> tuple[int, int]:
    """REDUCE_PROD (LiteRT's ``GetQuantProdScaling``): each step's multiplier ``s_in / s_out ** (1 / n)``."""
    return quantize_multiplier(f32(input_scale) / math.pow(f32(output_scale), 1.0 / int(count)))
