"""TFLite's int8 ``UNIDIRECTIONAL_SEQUENCE_LSTM`` in Relax, as TFLite Micro computes it, with integer kernels.

A fully integer quantized LSTM (TensorFlow's converter with int8 activations) has int8 input, output,
weights and hidden state, int32 biases and an int16 cell state; TFLite Micro runs it with fixed
intermediate scales (``lstm_eval_common.cc``: the gates' products at ``2**-12``, the gates at ``2**-15``)
and ignores the operator's intermediate tensors. :func:`sequence_lstm_int8` imports it as three integer
kernels per time step (:mod:`..int8.recurrent`: gates, cell state, hidden state), bit-identical to
TFLM; no float value is computed anywhere. The output and cell states are the model's state, carried
from one invocation to the next and initialised to their zero points, as for the float LSTM
(:mod:`.tflite_lstm`).

TFLM's integer LSTM has an input gate, no peepholes, no projection and no layer normalisation, per-tensor
weight scales, and a tanh cell activation; other forms are refused by name.

Example
-------
>>> is_int8_lstm_types("int8", "int8", "int16")
True
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..int8 import recurrent as K
from .tflite_lstm_spec import INPUTS, present_tensor
from .tflite_lstm_spec import tensor_name as _name

__all__ = ["sequence_lstm_int8", "is_int8_lstm_types"]

_NAME = "UNIDIRECTIONAL_SEQUENCE_LSTM"


def is_int8_lstm_types(x: str, w: str, cell: str) -> bool:
    """True for the types of TFLM's 8x8->16 integer LSTM: int8 input and weights, int16 cell state."""
    return (x, w, cell) == ("int8", "int8", "int16")


def _call(bb, kernel, args, shape, dtype):
    func = bb.add_func(kernel, str(kernel.attrs["global_symbol"]))
    bb.update_func(func, kernel.with_attr("global_symbol", func.name_hint))
    return bb.emit(relax.call_tir(func, args, relax.TensorType([int(d) for d in shape], dtype)))


def sequence_lstm_int8(conv, op, t, opts, layout):
    """Import one int8 LSTM (``conv``: the operator converter, ``t``: the operator's 24 input tensors or None,
    ``opts``: its options, ``layout``: ``(time_major, steps, batch, inputs)``)."""
    _X, _W_X, _W_H, _BIAS, _H, _C = (INPUTS[k] for k in ("x", "w_x", "w_h", "bias", "h", "c"))
    _PEEP, _PROJ_W, _PROJ_B, _LN = (INPUTS[k] for k in ("peephole", "proj_w", "proj_b", "layer_norm"))

    time_major, steps, batch, n_in = layout
    missing = [i for i in (*_W_X, *_W_H, *_BIAS) if not present_tensor(t, i)]
    extra = [i for i in (*_PEEP, _PROJ_W, _PROJ_B, *_LN) if present_tensor(t, i)]
    if missing or extra:
        raise tvm.error.OpNotImplemented(
            f"int8 {_NAME} with {'no input gate' if missing else 'peepholes, a projection or layer normalisation'}"
            f" (inputs {missing or extra}): TFLite Micro's integer LSTM takes every gate and none of these")
    act = int(opts.FusedActivationFunction())
    if act != 4:
        raise tvm.error.OpNotImplemented(f"int8 {_NAME} with cell activation {act}: TFLite Micro's integer LSTM "
                                         "takes tanh only")

    def qparams(i, kind):
        tw = t[i]
        q = tw.tensor.Quantization()
        if q is None or not q.ScaleLength():
            raise tvm.error.OpNotImplemented(f"int8 {_NAME}: {kind} '{_name(tw)}' is not quantized")
        scale = q.ScaleAsNumpy().astype(np.float32)
        zp = q.ZeroPointAsNumpy() if q.ZeroPointLength() else np.zeros(1, np.int64)
        if scale.size != 1:
            raise tvm.error.OpNotImplemented(f"int8 {_NAME}: {kind} '{_name(tw)}' has {scale.size} scales; "
                                             "TFLite Micro's integer LSTM takes one per tensor")
        return float(scale[0]), int(zp[0])

    def const(i, dtype):
        tw = t[i]
        if conv.has_expr(tw.tensor_idx) or conv.get_tensor_type_str(tw.tensor.Type()) != dtype:
            raise tvm.error.OpNotImplemented(f"int8 {_NAME}: input {i} ('{_name(tw)}') must be a constant {dtype} "
                                             "tensor")
        return np.asarray(conv.get_tensor_value(tw)).astype(dtype)

    wx = [const(i, "int8") for i in _W_X]
    wh = [const(i, "int8") for i in _W_H]
    bias = [const(i, "int32").reshape(-1) for i in _BIAS]
    n_cell, n_out = wx[0].shape[0], wh[0].shape[1]
    if any(w.shape != (n_cell, n_in) for w in wx) or any(w.shape != (n_cell, n_out) for w in wh) or \
            n_out != n_cell or any(b.size != n_cell for b in bias):
        raise tvm.error.OpNotImplemented(f"int8 {_NAME}: weights of shapes {[w.shape for w in wx + wh]} for "
                                         f"{n_in} inputs and {n_out} outputs")
    for i in (*_W_X, *_W_H):
        if qparams(i, "weights")[1] != 0:
            raise tvm.error.OpNotImplemented(f"int8 {_NAME}: weights '{_name(t[i])}' have a nonzero zero point")
    h_t, c_t = t[_H], t[_C]
    if conv.get_tensor_type_str(h_t.tensor.Type()) != "int8":
        raise tvm.error.OpNotImplemented(f"int8 {_NAME}: output state '{_name(h_t)}' is not int8")
    x_scale, x_zp = qparams(_X, "input")
    h_scale, h_zp = qparams(_H, "output state")
    c_scale, _ = qparams(_C, "cell state")
    p = K.lstm_params(x_scale, x_zp, h_scale, h_zp, c_scale, [qparams(i, "weights")[0] for i in _W_X],
                      [qparams(i, "weights")[0] for i in _W_H], float(opts.CellClip()))

    R = relax.op
    bb = conv.bb
    c8 = lambda a: relax.const(np.ascontiguousarray(a))   # noqa: E731
    wx_c, wh_c = c8(np.stack(wx)), c8(np.stack(wh))
    bias_c, table_c = c8(np.stack(bias).astype(np.int32)), c8(p.gate_table)
    sig = c8(K.SIGMOID_TABLE)
    gates_k = K.lstm_gates(batch, n_in, n_out, n_cell, x_offset=p.x_offset, h_offset=p.h_offset)
    cell_k = K.lstm_cell(batch, n_cell, forget_mul=p.forget_mul, input_mul=p.input_mul, clip=p.cell_clip)
    hidden_k = K.lstm_hidden(batch, n_cell, tanh_cell=p.tanh_cell, output_mul=p.output_mul, zero_point=p.h_zero_point)

    x = conv.get_tensor_expr(t[_X])
    h = conv.variable_state(h_t, (batch, n_out))
    cell = conv.variable_state(c_t, (batch, n_cell))
    axis = 0 if time_major else 1
    outs = []
    for s in range(steps):
        x_s = R.strided_slice(x, [axis], [s], [s + 1]) if steps > 1 else x
        x_s = bb.normalize(R.reshape(x_s, (batch, n_in)))
        gates = _call(bb, gates_k, [x_s, h, wx_c, wh_c, bias_c, table_c, sig], (4, batch, n_cell), "int16")
        cell = _call(bb, cell_k, [gates, cell], (batch, n_cell), "int16")
        h = _call(bb, hidden_k, [gates, cell, sig], (batch, n_cell), "int8")
        outs.append(h)
    conv.assign_variable_state(h_t, h)
    conv.assign_variable_state(c_t, cell)
    return R.stack(outs, axis=axis) if steps > 1 else R.expand_dims(outs[0], axis)
