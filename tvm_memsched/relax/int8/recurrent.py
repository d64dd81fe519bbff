"""Integer kernels of TFLite Micro's quantized recurrent operators (LSTM, SVDF) as TIR PrimFuncs.

TFLite Micro runs an int8 ``UNIDIRECTIONAL_SEQUENCE_LSTM`` (``lstm_eval.h``) with int8 activations and
weights, int32 biases and an int16 cell state, one time step after another. Each step here is three
kernels, each computing what TFLM's reference code computes, bit for bit:

* :func:`lstm_gates`: the four gates ``i, f, c, o`` (TFLite's order) of one step, int16 ``(4, B, C)``.
  Per gate two fully connected layers into int16 with the fixed output scale ``2**-12``: the input's
  (``x`` int8 with its zero point, the gate's bias) and the recurrent one (the int8 hidden state, no
  bias), each ``MultiplyByQuantizedMultiplier``-ed and clamped to int16, then added with int16
  saturation, then TFLite's int16 ``Logistic`` (``i``, ``f``, ``o``) or ``Tanh`` (``c``, input ``Q3.12``)
  through the 256-entry ``sigmoid_table_uint16`` with linear interpolation (:func:`sigmoid16`,
  :func:`tanh16`);
* :func:`lstm_cell`: ``cell = sat16(mul(f, cell) + mul(i, c))`` (the multiplications rescaled as TFLM's
  ``MulElementwise``), clipped to the quantized ``cell_clip``;
* :func:`lstm_hidden`: ``hidden = mul(tanh(cell), o)`` into int8 with the hidden state's zero point; the
  tanh reads the cell state at its power-of-two scale (``cell_state_scale_power``).

Every multiplier is computed at compile time as TFLM's ``Prepare`` does (:func:`lstm_params`). The kernels
read the gates and states of one step only: the memory they need is the step's, not the sequence's.

An int8 ``SVDF`` (``svdf_common.cc``, ``EvalIntegerSvdfReference``; int8 or int16 state) is three kernels:
:func:`svdf_features` (the feature products, rescaled into the state's type), :func:`svdf_shift` (every
filter's memory one column left, the features in the newest) and :func:`svdf_output` (the time products
summed over each unit's filters with the bias, rescaled into int8).

Example
-------
>>> sigmoid16(0), sigmoid16(4096), tanh16(4096, 3, 0)
(16384, 23956, 24956)
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import te, tirx

from .fixedpoint import quantize_multiplier
from .kernels import Chain, finish
from .tirmath import cast_i32, clamp

__all__ = ["SIGMOID_TABLE", "sigmoid16", "tanh16", "tanh_params", "LstmParams", "lstm_params", "lstm_gates",
           "lstm_cell", "lstm_hidden", "svdf_features", "svdf_shift", "svdf_output"]

#: TFLite's ``sigmoid_table_uint16`` (``kernels/internal/common.h``): sigmoid(i / 24) in 0.16 fixed point
SIGMOID_TABLE = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064,
    42688, 43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464,
    50942, 51409, 51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503,
    56823, 57133, 57433, 57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370,
    60565, 60753, 60935, 61110, 61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666,
    62778, 62886, 62990, 63090, 63186, 63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968,
    64030, 64090, 64148, 64204, 64257, 64308, 64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687,
    64721, 64754, 64786, 64816, 64845, 64873, 64900, 64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079,
    65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208, 65221, 65234, 65246, 65258, 65269, 65280, 65291,
    65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367, 65374, 65381, 65387, 65393, 65399, 65404,
    65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449, 65453, 65456, 65459, 65462, 65465,
    65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491, 65493, 65495, 65497, 65498,
    65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513, 65514, 65515, 65516,
    65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524, 65525, 65525,
    65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530, 65530,
    65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534,
    65535], np.uint16)

_I16 = (-32768, 32767)


def sigmoid16(x: int) -> int:
    """``reference_integer_ops::Logistic(0, 0, ...)`` of one int16 value (input ``Q3.12``, output ``Q0.15``)."""
    v = int(x) * 3
    a = abs(v)
    uh = a >> 9
    if uh >= 255:
        r = 0x7FFF << 10
    else:
        ua, ub = int(SIGMOID_TABLE[uh]), int(SIGMOID_TABLE[uh + 1])
        r = (ua << 9) + (a & 0x1FF) * (ub - ua)
    r = r + (1 << 9) if v >= 0 else (1 << 25) - r + (1 << 9) - 1
    return r >> 10


def tanh_params(scale_power: int) -> tuple[int, int]:
    """``(input multiplier, input left shift)`` TFLM's LSTM gives ``reference_integer_ops::Tanh`` for an input
    of scale ``2**scale_power``, after its power-of-two rewrite (multiplier ``3 << shift``, shift 0)."""
    shift = 15 + int(scale_power) - 3
    if shift < 0:
        return 3, -shift
    return 3 << shift, 0


def tanh16(x: int, multiplier: int, shift: int) -> int:
    """``reference_integer_ops::Tanh`` of one int16 value (``multiplier``, ``shift``: :func:`tanh_params`)."""
    rnd = (1 << (shift - 1)) if shift > 0 else 0
    v = (int(x) * multiplier + rnd) >> shift
    a = abs(v)
    uh = a >> 8
    if uh >= 255:
        r = 0xFFFF << 8
    else:
        ua, ub = int(SIGMOID_TABLE[uh]), int(SIGMOID_TABLE[uh + 1])
        r = (ua << 8) + (a & 0xFF) * (ub - ua)
    r = r - (1 << 23) + (1 << 7) if v >= 0 else -r + (1 << 23) + (1 << 7) - 1
    return r >> 8


def _c(v: int):
    return tirx.const(int(v), "int32")


def _sigmoid_expr(x, table):
    """TIR: :func:`sigmoid16` of the int32 expression ``x`` (an int16 value; used several times: pass a load)."""
    v = x * _c(3)
    a = tirx.abs(v)
    uh = a >> _c(9)
    k = tirx.min(uh, _c(254))
    ua, ub = cast_i32(table[k]), cast_i32(table[k + 1])
    r = tirx.Select(uh >= _c(255), _c(0x7FFF << 10), (ua << _c(9)) + (a & _c(0x1FF)) * (ub - ua))
    r = tirx.Select(v >= _c(0), r + _c(1 << 9), _c((1 << 25) + (1 << 9) - 1) - r)
    return r >> _c(10)


def _tanh_expr(x, table, multiplier: int, shift: int):
    """TIR: :func:`tanh16` of the int32 expression ``x``."""
    v = x * _c(multiplier)
    if shift > 0:
        v = (v + _c(1 << (shift - 1))) >> _c(shift)
    a = tirx.abs(v)
    uh = a >> _c(8)
    k = tirx.min(uh, _c(254))
    ua, ub = cast_i32(table[k]), cast_i32(table[k + 1])
    r = tirx.Select(uh >= _c(255), _c(0xFFFF << 8), (ua << _c(8)) + (a & _c(0xFF)) * (ub - ua))
    r = tirx.Select(v >= _c(0), r - _c((1 << 23) - (1 << 7)), _c((1 << 23) + (1 << 7) - 1) - r)
    return r >> _c(8)


class LstmParams:
    """What TFLM's ``PrepareGateParametersInteger`` computes for an int8 LSTM (see :func:`lstm_params`)."""

    def __init__(self, gate_table, x_offset, h_offset, forget_mul, input_mul, output_mul, h_zero_point,
                 cell_clip, tanh_cell):
        self.gate_table = gate_table      # int32 (4, 4): input multiplier, shift, recurrent multiplier, shift
        self.x_offset, self.h_offset = x_offset, h_offset
        self.forget_mul, self.input_mul, self.output_mul = forget_mul, input_mul, output_mul
        self.h_zero_point = h_zero_point
        self.cell_clip = cell_clip        # quantized clip (int16) or None
        self.tanh_cell = tanh_cell        # (multiplier, shift) of the cell state's tanh


def _mul_params(s1: float, s2: float, s_out: float) -> tuple[int, int]:
    """``CreateInterGateMulParams``: the multiplier of ``s1 * s2 / s_out`` (double precision)."""
    return quantize_multiplier(float(np.float32(s1)) * float(np.float32(s2)) / float(np.float32(s_out)))


def lstm_params(x_scale: float, x_zp: int, h_scale: float, h_zp: int, cell_scale: float, wx_scales, wh_scales,
                cell_clip: float) -> LstmParams:
    """TFLM's quantization parameters of an int8 LSTM: ``wx_scales`` / ``wh_scales`` the per-tensor scales of
    the input and recurrent weights of gates ``i, f, c, o``; the gates' fully connected outputs at scale
    ``2**-12``, the gates at ``2**-15``.

    >>> p = lstm_params(0.0078, -1, 0.0026, -11, 2 ** -15, [0.0037] * 4, [0.0039] * 4, 0.0)
    >>> p.forget_mul, p.tanh_cell
    ((1073741824, -14), (3, 3))
    """
    fc_out = np.float32(0.000244140625)
    rows = []
    for sx, sh in zip(wx_scales, wh_scales):
        # GetQuantizedConvolutionMultipler: the product in float, the quotient in double
        mx, shx = quantize_multiplier(float(np.float32(x_scale) * np.float32(sx)) / float(fc_out))
        mh, shh = quantize_multiplier(float(np.float32(h_scale) * np.float32(sh)) / float(fc_out))
        rows.append([mx, shx, mh, shh])
    gate_out = 0.000030517578125
    power = _checked_log2(cell_scale)
    clip = None
    if cell_clip > 0:
        clip = int(min(max(float(np.float32(cell_clip)) / float(np.float32(cell_scale)), -32768.0), 32767.0))
    return LstmParams(np.asarray(rows, np.int32), -int(x_zp), -int(h_zp),
                      _mul_params(gate_out, cell_scale, cell_scale), _mul_params(gate_out, gate_out, cell_scale),
                      _mul_params(gate_out, gate_out, h_scale), int(h_zp), clip, tanh_params(power))


def _checked_log2(x: float) -> int:
    """``tflite::CheckedLog2``'s rounded exponent (float arithmetic)."""
    lg = np.float32(math.log(np.float32(x))) * np.float32(1.0 / np.float32(math.log(2.0)))
    return int(math.copysign(math.floor(abs(float(lg)) + 0.5), float(lg)))


def _table():
    return te.placeholder((256,), "uint16", "sigmoid_table")


def lstm_gates(batch: int, n_in: int, n_out: int, n_cell: int, *, x_offset: int, h_offset: int,
               name: str = "lstm_gates_int8") -> tvm.tirx.PrimFunc:
    """One step's gates ``(x, h, wx, wh, bias, table, sigmoid_table) -> gates``: ``x`` int8 ``(B, I)``, ``h``
    int8 ``(B, O)``, ``wx`` int8 ``(4, C, I)``, ``wh`` int8 ``(4, C, O)``, ``bias`` int32 ``(4, C)``, ``table``
    int32 ``(4, 4)`` (per gate the input and recurrent multipliers and shifts), ``gates`` int16
    ``(4, B, C)``: ``i, f, o`` through the int16 sigmoid, ``c`` through the int16 tanh (input ``Q3.12``)."""
    x = te.placeholder((batch, n_in), "int8", "x")
    h = te.placeholder((batch, n_out), "int8", "h")
    wx = te.placeholder((4, n_cell, n_in), "int8", "wx")
    wh = te.placeholder((4, n_cell, n_out), "int8", "wh")
    bias = te.placeholder((4, n_cell), "int32", "bias")
    table = te.placeholder((4, 4), "int32", "table")
    sig = _table()
    shape = (4, batch, n_cell)
    rk = te.reduce_axis((0, n_in), "rk")
    rj = te.reduce_axis((0, n_out), "rj")
    acc_x = te.compute(shape, lambda g, b, c: te.sum((cast_i32(x[b, rk]) + _c(x_offset)) * cast_i32(wx[g, c, rk]),
                                                     axis=rk), name="acc_x")
    acc_h = te.compute(shape, lambda g, b, c: te.sum((cast_i32(h[b, rj]) + _c(h_offset)) * cast_i32(wh[g, c, rj]),
                                                     axis=rj), name="acc_h")
    ch = Chain(shape)
    tot_x = ch(lambda g, b, c: acc_x[g, b, c] + bias[g, c])
    fx = ch.requant(tot_x, lambda i: table[i[0], 0], lambda i: table[i[0], 1])
    fh = ch.requant(acc_h, lambda i: table[i[0], 2], lambda i: table[i[0], 3])
    pre = ch(lambda *i: clamp(clamp(fx[i], *_I16) + clamp(fh[i], *_I16), *_I16))
    y = te.compute(shape, lambda g, b, c: tirx.Select(
        g == 2, _tanh_expr(pre[g, b, c], sig, 3, 0), _sigmoid_expr(pre[g, b, c], sig)).astype("int16"), name="y")
    return finish([x, h, wx, wh, bias, table, sig, y], name, reduce_into="y")


def lstm_cell(batch: int, n_cell: int, *, forget_mul, input_mul, clip, name: str = "lstm_cell_int16"):
    """One step's cell state ``(gates, cell) -> cell``: ``sat16(mul(f, cell) + mul(i, c))`` clipped to
    ``[-clip, clip]`` (None: not clipped); ``forget_mul`` / ``input_mul``: (multiplier, shift)."""
    gates = te.placeholder((4, batch, n_cell), "int16", "gates")
    cell = te.placeholder((batch, n_cell), "int16", "cell")
    shape = (batch, n_cell)
    ch = Chain(shape)
    fc = ch.requant(ch(lambda b, c: cast_i32(gates[1, b, c]) * cast_i32(cell[b, c])), *forget_mul)
    ic = ch.requant(ch(lambda b, c: cast_i32(gates[0, b, c]) * cast_i32(gates[2, b, c])), *input_mul)
    lo, hi = (-clip, clip) if clip is not None else _I16

    def out(b, c):
        v = clamp(clamp(fc[b, c], *_I16) + clamp(ic[b, c], *_I16), *_I16)
        return clamp(v, lo, hi).astype("int16")

    y = te.compute(shape, out, name="y")
    return finish([gates, cell, y], name, reduce_into="y")


def lstm_hidden(batch: int, n_cell: int, *, tanh_cell, output_mul, zero_point: int,
                name: str = "lstm_hidden_int8"):
    """One step's hidden state ``(gates, cell, sigmoid_table) -> hidden`` int8: ``mul(tanh(cell), o)`` plus
    the zero point, clamped (``tanh_cell``: :func:`tanh_params` of the cell state's scale)."""
    gates = te.placeholder((4, batch, n_cell), "int16", "gates")
    cell = te.placeholder((batch, n_cell), "int16", "cell")
    sig = _table()
    shape = (batch, n_cell)
    ch = Chain(shape)
    t = ch(lambda b, c: _tanh_expr(cast_i32(cell[b, c]), sig, *tanh_cell))
    p = ch.requant(ch(lambda b, c: t[b, c] * cast_i32(gates[3, b, c])), *output_mul)
    y = te.compute(shape, lambda b, c: clamp(p[b, c] + _c(zero_point), -128, 127).astype("int8"), name="y")
    return finish([gates, cell, sig, y], name, reduce_into="y")


def svdf_features(batch: int, n_in: int, n_filter: int, *, x_offset: int, mul, state_dtype: str, state_zp: int,
                  name: str = "svdf_features_int8"):
    """SVDF's feature products ``(x, weights_feature) -> features`` ``(B, F)`` in the state's type, as TFLM's
    ``EvalIntegerSvdfReference`` writes them into the newest column of the state: the int32 sum of
    ``w * (x - zero point)``, ``MultiplyByQuantizedMultiplier``-ed (``mul``), clamped to the state's type,
    plus the state's zero point (wrapped to the state's type, as C's conversion does)."""
    x = te.placeholder((batch, n_in), "int8", "x")
    w = te.placeholder((n_filter, n_in), "int8", "w")
    shape = (batch, n_filter)
    rk = te.reduce_axis((0, n_in), "rk")
    acc = te.compute(shape, lambda b, f: te.sum(cast_i32(w[f, rk]) * (cast_i32(x[b, rk]) + _c(x_offset)), axis=rk),
                     name="acc")
    ch = Chain(shape)
    scaled = ch.requant(acc, *mul)
    info = np.iinfo(state_dtype)
    y = te.compute(shape, lambda b, f: (clamp(scaled[b, f], int(info.min), int(info.max)) + _c(state_zp))
                   .astype(state_dtype), name="y")
    return finish([x, w, y], name, reduce_into="y")


def svdf_shift(batch: int, n_filter: int, memory: int, dtype: str, name: str = "svdf_shift"):
    """SVDF's state update ``(state, features) -> state``: each filter's ``memory`` columns shifted left by one,
    the features in the last (``state`` ``(B, F * memory)``, any type)."""
    state = te.placeholder((batch, n_filter * memory), dtype, "state")
    feat = te.placeholder((batch, n_filter), dtype, "features")

    def body(b, k):
        j = tirx.floormod(k, memory)
        return tirx.if_then_else(j == memory - 1, feat[b, tirx.floordiv(k, memory)],
                                 state[b, tirx.min(k + 1, n_filter * memory - 1)])

    y = te.compute((batch, n_filter * memory), body, name="y")
    return finish([state, feat, y], name)


def svdf_output(batch: int, n_filter: int, memory: int, rank: int, *, state_dtype: str, state_zp: int, mul,
                out_zp: int, has_bias: bool, name: str = "svdf_output_int8"):
    """SVDF's output ``(state, weights_time, [bias]) -> y`` int8 ``(B, F / rank)``: per filter the int32 sum of
    ``weights_time * (state - zero point)`` over its memory, summed over the ``rank`` filters of a unit with
    the bias, ``MultiplyByQuantizedMultiplier``-ed (``mul``), plus the output zero point, clamped to int8 (TFLM
    applies no activation to an integer SVDF)."""
    units = n_filter // rank
    state = te.placeholder((batch, n_filter * memory), state_dtype, "state")
    wt = te.placeholder((n_filter, memory), state_dtype, "wt")
    params = [state, wt]
    shape = (batch, units)
    rr = te.reduce_axis((0, rank), "rr")
    rm = te.reduce_axis((0, memory), "rm")
    acc = te.compute(shape, lambda b, u: te.sum(
        cast_i32(wt[u * rank + rr, rm]) * (cast_i32(state[b, (u * rank + rr) * memory + rm]) - _c(state_zp)),
        axis=[rr, rm]), name="acc")
    ch = Chain(shape)
    if has_bias:
        bias = te.placeholder((units,), "int32", "bias")
        params.append(bias)
        acc = ch(lambda b, u: acc[b, u] + bias[u])
    scaled = ch.requant(acc, *mul)
    y = te.compute(shape, lambda b, u: clamp(scaled[b, u] + _c(out_zp), -128, 127).astype("int8"), name="y")
    return finish(params + [y], name, reduce_into="y")
