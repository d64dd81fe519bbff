"""TFLite's integer requantization as TIR expressions (the kernels' epilogues).

Each function builds a ``tvm.tirx`` expression that computes exactly what the
same-named function of :mod:`.fixedpoint` computes on Python integers:
64-bit products, C's truncating division, arithmetic right shifts and
two's-complement wrap where TFLite's C++ wraps. Scalars given as Python ints
become immediates (per-tensor quantization: the compiler folds them);
``PrimExpr`` operands (per-channel multipliers loaded from a buffer) work too.

Example
-------
>>> import tvm
>>> from tvm import tirx
>>> x = tirx.Var("x", "int32")
>>> e = mbqm(x, 1288490189, -1)
>>> dtype(e)
'int32'
"""

from __future__ import annotations

from tvm import tirx

from .fixedpoint import INT32_MAX, INT32_MIN

__all__ = ["dtype", "i32", "i64", "mbqm", "mbqm64", "srdhm", "rdbpot", "left_shift", "right_shift_amount", "clamp",
           "cast_i32", "saturating_left_shift", "clz32"]


def dtype(e) -> str:
    """The dtype of a TIR expression (``PrimExpr.ty`` in TVM 0.27)."""
    ty = getattr(e, "ty", None)
    return str(ty) if ty is not None else str(e.dtype)   # te.TensorSlice has .dtype


def i32(v):
    """An int32 immediate or expression."""
    return tirx.const(int(v), "int32") if isinstance(v, int) else (v if dtype(v) == "int32" else v.astype("int32"))


def i64(v):
    return tirx.const(int(v), "int64") if isinstance(v, int) else (v if dtype(v) == "int64" else v.astype("int64"))


def cast_i32(e):
    """Widen an int8/uint8/int16 value to int32."""
    return e if dtype(e) == "int32" else e.astype("int32")


def srdhm(a, b, saturate: bool = False):
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` of two int32 expressions.

    ``saturate=False`` leaves out the ``a == b == INT32_MIN`` case, which cannot
    occur when ``b`` is a non-negative multiplier from ``QuantizeMultiplier``.
    Operands are used twice: pass loads or small expressions (TVM 0.27's
    NarrowDataType rejects expression-level ``Let``; kernels stage longer
    chains through one-element local buffers instead).
    """
    ab = i64(a) * i64(b)
    nudge = tirx.Select(ab >= tirx.const(0, "int64"), tirx.const(1 << 30, "int64"),
                        tirx.const(1 - (1 << 30), "int64"))
    hi = tirx.truncdiv(ab + nudge, tirx.const(1 << 31, "int64")).astype("int32")
    if not saturate:
        return hi
    overflow = tirx.all(i32(a) == tirx.const(INT32_MIN, "int32"), i32(b) == tirx.const(INT32_MIN, "int32"))
    return tirx.Select(overflow, tirx.const(INT32_MAX, "int32"), hi)


def rdbpot(x, exponent):
    """gemmlowp ``RoundingDivideByPOT`` of an int32 expression by ``2**exponent`` (int or int32 expression)."""
    if isinstance(exponent, int) and exponent == 0:
        return x
    one, zero = tirx.const(1, "int32"), tirx.const(0, "int32")
    e = i32(exponent)
    mask = (one << e) - one
    threshold = (mask >> one) + tirx.Select(x < zero, one, zero)
    return (x >> e) + tirx.Select((x & mask) > threshold, one, zero)


def left_shift(x, shift):
    """``x * (1 << max(shift, 0))`` in int32 with wrap (TFLite's pre-shift of MultiplyByQuantizedMultiplier)."""
    if isinstance(shift, int):
        return x if shift <= 0 else (i64(x) << tirx.const(shift, "int64")).astype("int32")
    return (i64(x) << tirx.max(i32(shift), tirx.const(0, "int32")).astype("int64")).astype("int32")


def right_shift_amount(shift):
    """``max(-shift, 0)``: the rounding right shift of MultiplyByQuantizedMultiplier."""
    if isinstance(shift, int):
        return max(-shift, 0)
    return tirx.max(-i32(shift), tirx.const(0, "int32"))


def mbqm(x, multiplier, shift):
    """``MultiplyByQuantizedMultiplier`` as one expression (duplicates ``x``: for short operands only)."""
    return rdbpot(srdhm(left_shift(x, shift), multiplier), right_shift_amount(shift))


def mbqm64(x, reduced_multiplier, shift):
    """TFLite's int64 ``MultiplyByQuantizedMultiplier`` of the int64 expression ``x``: ``(x * m + 2**(t - 1))
    >> t`` with ``t = 15 - shift`` and ``m`` the reduced Q15 multiplier
    (:func:`.fixedpoint.reduced_multiplier`; ints or int32 expressions), as an int32 (C's truncating cast)."""
    if isinstance(shift, int):
        total = tirx.const(15 - shift, "int64")
        rounding = tirx.const(1 << (14 - shift), "int64")
    else:
        total = tirx.const(15, "int64") - i64(shift)
        rounding = tirx.const(1, "int64") << (total - tirx.const(1, "int64"))
    return ((i64(x) * i64(reduced_multiplier) + rounding) >> total).astype("int32")


def saturating_left_shift(x, k: int):
    """gemmlowp ``SaturatingRoundingMultiplyByPOT<k>`` for ``k > 0`` on an int32 expression (used three times:
    pass a load)."""
    threshold = (1 << (31 - k)) - 1
    return tirx.Select(x > tirx.const(threshold, "int32"), tirx.const(INT32_MAX, "int32"),
                       tirx.Select(x < tirx.const(-threshold, "int32"), tirx.const(INT32_MIN, "int32"),
                                   x << tirx.const(k, "int32")))


def clz32(x, bits: int = 31):
    """Leading zero bits of a non-negative int32 expression below ``2**bits`` (32 for 0), as a sum of
    comparisons (``x`` is used ``bits`` times: pass a load)."""
    count = tirx.const(32, "int32")
    for k in range(bits):
        count = count - tirx.Select(i32(x) >= tirx.const(1 << k, "int32"), tirx.const(1, "int32"),
                                    tirx.const(0, "int32"))
    return count


def clamp(x, lo: int, hi: int):
    """``min(max(x, lo), hi)`` on int32."""
    return tirx.min(tirx.max(x, tirx.const(int(lo), "int32")), tirx.const(int(hi), "int32"))
