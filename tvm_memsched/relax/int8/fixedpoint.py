"""TFLite's integer arithmetic in exact Python: multipliers, rounding shifts, gemmlowp fixed point.

Everything here reproduces a C++ function of TensorFlow Lite (Micro) or gemmlowp
bit for bit, on Python integers with explicit two's-complement wrapping where
the C++ code wraps, and on ``numpy.float32`` where the C++ code computes in
``float``. The integer-lowering pass uses it to compute quantization
parameters at compile time (what TFLite's ``Prepare`` functions do) and to
build exact look-up tables for the element-wise int8 operators (every int8
input value is run through the reference algorithm once).

Example
-------
>>> quantize_multiplier(0.25)
(1073741824, -1)
>>> multiply_by_quantized_multiplier(1000, *quantize_multiplier(0.3))
300
>>> rounding_divide_by_pot(-5, 1), rounding_divide_by_pot(5, 1)
(-3, 3)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["wrap32", "wrap16", "tflite_round", "quantize_multiplier", "srdhm", "srdhm16",
           "rounding_divide_by_pot", "multiply_by_quantized_multiplier", "mbqm_array", "quantize_float",
           "calculate_input_radius", "FixedPoint", "exp_on_negative_values", "logistic_q0", "tanh_q0",
           "one_over_one_plus_x_for_x_in_0_1", "rounding_half_sum", "count_leading_zeros",
           "INT32_MIN", "INT32_MAX", "reduced_multiplier", "multiply_by_quantized_multiplier_64"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def wrap32(x: int) -> int:
    """``x`` as a C ``int32_t`` (two's-complement wrap)."""
    return ((int(x) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def wrap16(x: int) -> int:
    """``x`` as a C ``int16_t`` (two's-complement wrap)."""
    return ((int(x) + (1 << 15)) & 0xFFFF) - (1 << 15)


def tflite_round(x: float) -> float:
    """``std::round``: to nearest, halves away from zero (``TfLiteRound``)."""
    ax = abs(float(x))
    r = math.floor(ax)
    if ax - r >= 0.5:      # exact: ax - floor(ax) has no rounding error for doubles
        r += 1
    return math.copysign(r, x)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``tflite::QuantizeMultiplier`` (double rounding build): ``(multiplier Q31, shift)``."""
    real = float(real)
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = int(tflite_round(q * (1 << 31)))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        shift, q_fixed = 0, 0
    return q_fixed, shift


def srdhm(a: int, b: int) -> int:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int32 (NEON VQRDMULH)."""
    if a == b == INT32_MIN:
        return INT32_MAX
    ab = a * b
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    return wrap32(_cdiv(ab + nudge, 1 << 31))


def srdhm16(a: int, b: int) -> int:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int16."""
    if a == b == -(1 << 15):
        return (1 << 15) - 1
    ab = a * b
    nudge = (1 << 14) if ab >= 0 else 1 - (1 << 14)
    return wrap16(_cdiv(ab + nudge, 1 << 15))


def _cdiv(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def rounding_divide_by_pot(x: int, exponent: int) -> int:
    """gemmlowp ``RoundingDivideByPOT``: ``x / 2**exponent`` rounded to nearest, halves away from zero."""
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (1 if x < 0 else 0)
    return (x >> exponent) + (1 if remainder > threshold else 0)


def multiply_by_quantized_multiplier(x: int, multiplier: int, shift: int) -> int:
    """``tflite::MultiplyByQuantizedMultiplier(int32 x, ...)`` with TFLite's default double rounding."""
    left = shift if shift > 0 else 0
    right = 0 if shift > 0 else -shift
    return rounding_divide_by_pot(srdhm(wrap32(x * (1 << left)), multiplier), right)


def mbqm_array(x, multiplier, shift) -> np.ndarray:
    """Vectorised :func:`multiply_by_quantized_multiplier` (numpy int64 arithmetic, broadcasting).

    >>> mbqm_array(np.array([1000, -1000]), *quantize_multiplier(0.3)).tolist()
    [300, -300]
    """
    x = np.asarray(x, dtype=np.int64)
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    left = np.maximum(s, 0)
    right = np.maximum(-s, 0)
    xs = x * (np.int64(1) << left)
    xs = ((xs + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    ab = xs * m
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    num = ab + nudge
    hi = np.where(num >= 0, num >> 31, -((-num) >> 31))   # truncating division by 2**31
    hi = np.where((xs == INT32_MIN) & (m == INT32_MIN), INT32_MAX, hi)
    hi = ((hi + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    mask = (np.int64(1) << right) - 1
    rem = hi & mask
    thr = (mask >> 1) + (hi < 0)
    return (hi >> right) + (rem > thr)


def reduced_multiplier(multiplier: int) -> int:
    """The Q15 multiplier of TFLite's int64 ``MultiplyByQuantizedMultiplier`` (rounded from the Q31 one).

    >>> reduced_multiplier(1 << 30), reduced_multiplier((1 << 31) - 1)
    (16384, 32767)
    """
    return (int(multiplier) + (1 << 15)) >> 16 if multiplier < 0x7FFF0000 else 0x7FFF


def multiply_by_quantized_multiplier_64(x: int, multiplier: int, shift: int) -> int:
    """``tflite::MultiplyByQuantizedMultiplier(int64 x, ...)`` (the 16x8 kernels' int64 accumulators): one
    rounding, half up, with the reduced multiplier; the result as a C ``int32_t``.

    >>> multiply_by_quantized_multiplier_64(1000, *quantize_multiplier(0.3))
    300
    """
    total_shift = 15 - int(shift)
    return wrap32((int(x) * reduced_multiplier(multiplier) + (1 << (total_shift - 1))) >> total_shift)


def quantize_float(f: float, scale, zero_point: int) -> int:
    """TFLite's ``Quantize`` helper for activation ranges: ``zero_point + round(float(f) / float(scale))``.

    The division is in ``float`` (as in ``CalculateActivationRangeQuantized``).
    """
    return int(zero_point) + int(tflite_round(float(np.float32(f) / np.float32(scale))))


def calculate_input_radius(input_integer_bits: int, input_left_shift: int, total_signed_bits: int = 31) -> int:
    """``tflite::CalculateInputRadius``."""
    max_input_rescaled = (1.0 * ((1 << input_integer_bits) - 1) * (1 << (total_signed_bits - input_integer_bits))
                          / (1 << input_left_shift))
    return int(math.floor(max_input_rescaled))


def rounding_half_sum(a: int, b: int) -> int:
    """gemmlowp ``RoundingHalfSum`` on int32."""
    s = a + b
    return wrap32(_cdiv(s + (1 if s >= 0 else -1), 2))


def count_leading_zeros(x: int) -> int:
    """Leading zero bits of a non-negative int32 (32 for 0), as ``__builtin_clz`` would give."""
    return 32 - int(x).bit_length() if x > 0 else 32


def _srmbpot(x: int, exponent: int) -> int:
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<exponent>`` on int32."""
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (31 - exponent)) - 1
    if x > threshold:
        return INT32_MAX
    if x < -threshold:
        return INT32_MIN
    return wrap32(x << exponent)


class FixedPoint:
    """A gemmlowp ``FixedPoint<int32_t, integer_bits>`` value (``raw`` is the int32 representation)."""

    __slots__ = ("raw", "ibits")

    def __init__(self, raw: int, ibits: int):
        self.raw, self.ibits = wrap32(raw), ibits

    @property
    def fbits(self) -> int:
        return 31 - self.ibits

    @classmethod
    def one(cls, ibits: int) -> "FixedPoint":
        return cls(INT32_MAX if ibits == 0 else 1 << (31 - ibits), ibits)

    @classmethod
    def constant_pot(cls, exponent: int, ibits: int) -> "FixedPoint":
        return cls(1 << (31 - ibits + exponent), ibits)

    def __add__(self, o):
        return FixedPoint(self.raw + o.raw, self.ibits)

    def __sub__(self, o):
        return FixedPoint(self.raw - o.raw, self.ibits)

    def __neg__(self):
        return FixedPoint(-self.raw, self.ibits)

    def __mul__(self, o):
        return FixedPoint(srdhm(self.raw, o.raw), self.ibits + o.ibits)

    def rescale(self, ibits: int) -> "FixedPoint":
        return FixedPoint(_srmbpot(self.raw, self.ibits - ibits), ibits)

    def exact_mul_by_pot(self, exponent: int) -> "FixedPoint":
        return FixedPoint(self.raw, self.ibits + exponent)

    def srmbpot(self, exponent: int) -> "FixedPoint":
        return FixedPoint(_srmbpot(self.raw, exponent), self.ibits)


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: FixedPoint) -> FixedPoint:
    constant_term = FixedPoint(1895147668, 0)
    constant_1_over_3 = FixedPoint(715827883, 0)
    x = a + FixedPoint.constant_pot(-3, 0)
    x2 = x * x
    x3 = x2 * x
    x4 = x2 * x2
    x4_over_4 = x4.srmbpot(-2)
    x4_over_24_plus_x3_over_6_plus_x2_over_2 = (((x4_over_4 + x3) * constant_1_over_3) + x2).srmbpot(-1)
    return constant_term + constant_term * (x + x4_over_24_plus_x3_over_6_plus_x2_over_2)


_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401),
           (4, 242))


def exp_on_negative_values(a: FixedPoint) -> FixedPoint:
    """gemmlowp ``exp_on_negative_values``: ``exp(a)`` for ``a <= 0`` as a Q0.31 FixedPoint."""
    ib, fb = a.ibits, a.fbits
    one_quarter = FixedPoint.constant_pot(-2, ib)
    mask = one_quarter - FixedPoint(1, ib)
    a_mod_quarter_minus_one_quarter = FixedPoint(a.raw & mask.raw, ib) - one_quarter
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(a_mod_quarter_minus_one_quarter.rescale(0))
    remainder = (a_mod_quarter_minus_one_quarter - a).raw
    for exponent, multiplier in _BARREL:
        if ib > exponent:
            shift = fb + exponent
            if remainder & (1 << shift):
                result = result * FixedPoint(multiplier, 0)
    if ib > 5:
        clamp = FixedPoint(-(1 << (36 - ib)), ib)
        if a.raw < clamp.raw:
            result = FixedPoint(0, 0)
    if a.raw == 0:
        result = FixedPoint.one(0)
    return result


def one_over_one_plus_x_for_x_in_0_1(a: FixedPoint) -> FixedPoint:
    """gemmlowp ``one_over_one_plus_x_for_x_in_0_1`` (Newton-Raphson division, Q0.31)."""
    half_denominator = FixedPoint(rounding_half_sum(a.raw, FixedPoint.one(0).raw), 0)
    x = FixedPoint(1515870810, 2) + half_denominator * FixedPoint(-1010580540, 2)
    for _ in range(3):
        half_denominator_times_x = half_denominator * x
        one_minus = FixedPoint.one(2) - half_denominator_times_x
        x = x + (x * one_minus).rescale(2)
    return x.exact_mul_by_pot(-1).rescale(0)


def _one_minus_x_over_one_plus_x_for_x_in_0_1(a: FixedPoint) -> FixedPoint:
    half_denominator = FixedPoint(rounding_half_sum(a.raw, FixedPoint.one(0).raw), 0)
    x = FixedPoint(1515870810, 2) + half_denominator * FixedPoint(-1010580540, 2)
    for _ in range(3):
        half_denominator_times_x = half_denominator * x
        one_minus = FixedPoint.one(2) - half_denominator_times_x
        x = x + (x * one_minus).rescale(2)
    return (x - FixedPoint.one(2)).rescale(0)


def logistic_q0(a: FixedPoint) -> FixedPoint:
    """gemmlowp ``logistic`` for any ``a``: Q0.31 result."""
    if a.raw == 0:
        return FixedPoint(1 << 30, 0)
    positive = a.raw > 0
    abs_input = a if positive else -a
    result_if_positive = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(-abs_input))
    return result_if_positive if positive else FixedPoint.one(0) - result_if_positive


def tanh_q0(a: FixedPoint) -> FixedPoint:
    """gemmlowp ``tanh`` for any ``a``: Q0.31 result."""
    if a.raw == 0:
        return FixedPoint(0, 0)
    negative = a.raw < 0
    n = a if negative else -a
    t = _one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n.exact_mul_by_pot(1)))
    return -t if negative else t
