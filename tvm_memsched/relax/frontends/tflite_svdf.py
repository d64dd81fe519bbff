"""TFLite ``SVDF`` in Relax (float32, and int8 as TFLite Micro computes it), its memory carried as model state.

SVDF (singular value decomposition filter, keyword spotting's time-filtered layers) keeps an *activation
state* variable tensor ``(batch, filters * memory)``: at each invocation every filter's memory moves one
column left, the newest column gets the filter's feature product with the input (``weights_feature``
``(filters, inputs)``), and each unit's output is the sum over its ``rank`` filters of the time weights
(``weights_time`` ``(filters, memory)``) times the memory, plus the bias, through the fused activation
(TFLM's ``svdf_common.cc``). TensorFlow's converter does not write SVDF; TFLite Micro and LiteRT run it.

:func:`svdf` imports it as TFLM computes it:

* float32: the feature product, the shifted state, the time product and the rank sum as Relax operators;
* int8 (int8 or int16 state and time weights, int32 bias): three integer kernels
  (:mod:`..int8.recurrent`: features, shift, output), bit-identical to TFLM, no float value; the
  multipliers as TFLM's ``PrepareSvdf`` computes them (the scale quotients in float).

The state is the model's state (:mod:`.tflite_state`), initialised from the file (zeros, or the zero point).

Example
-------
>>> svdf_multipliers(0.02, 0.004, 0.001, 0.0005, 0.05)[0]
(1374389504, -3)
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..int8 import recurrent as K
from ..int8.fixedpoint import quantize_multiplier
from .tflite_lstm_spec import present_tensor
from .tflite_lstm_spec import tensor_name as _name

__all__ = ["svdf", "svdf_multipliers"]

_NAME = "SVDF"


def svdf_multipliers(x_scale, wf_scale, state_scale, wt_scale, out_scale):
    """TFLM's two multipliers of an int8 SVDF: ``x * weights_feature / state`` and
    ``state * weights_time / output``, each quotient computed in float, then ``QuantizeMultiplier``."""
    f = np.float32
    s1 = float(f(f(x_scale) * f(wf_scale)) / f(state_scale))
    s2 = float(f(f(state_scale) * f(wt_scale)) / f(out_scale))
    return quantize_multiplier(s1), quantize_multiplier(s2)


def _call(bb, kernel, args, shape, dtype):
    func = bb.add_func(kernel, str(kernel.attrs["global_symbol"]))
    bb.update_func(func, kernel.with_attr("global_symbol", func.name_hint))
    return bb.emit(relax.call_tir(func, args, relax.TensorType([int(d) for d in shape], dtype)))


def svdf(conv, op):
    """Import one ``SVDF`` (``conv``: the operator converter of :mod:`.tflite_converter`)."""
    from tflite.SVDFOptions import SVDFOptions

    from .tflite_lstm import ACTIVATIONS
    from .tflite_lstm import activation as _activation

    t = list(conv.get_input_tensors(op))
    if len(t) != 5:
        raise tvm.error.OpNotImplemented(f"{_NAME} with {len(t)} inputs; TFLite's has 5")
    (out_t,) = conv.get_output_tensors(op)
    opts = SVDFOptions()
    o = op.BuiltinOptions()
    opts.Init(o.Bytes, o.Pos)
    rank = int(opts.Rank())
    x_t, wf_t, wt_t, b_t, s_t = t
    types = [conv.get_tensor_type_str(tw.tensor.Type()) for tw in (x_t, wf_t, wt_t, s_t)]
    x_shape = [int(d) for d in conv.get_tensor_shape(x_t)]
    wf_shape = [int(d) for d in conv.get_tensor_shape(wf_t)]
    wt_shape = [int(d) for d in conv.get_tensor_shape(wt_t)]
    if len(x_shape) != 2 or len(wf_shape) != 2 or len(wt_shape) != 2 or rank < 1 or wf_shape[0] % rank or \
            wf_shape[1] != x_shape[1] or wt_shape[0] != wf_shape[0]:
        raise tvm.error.OpNotImplemented(f"{_NAME}: input {x_shape}, weights_feature {wf_shape}, weights_time "
                                         f"{wt_shape} and rank {rank} do not fit (TFLite Micro's SVDF)")
    batch, n_in = x_shape
    n_filter, memory = wt_shape
    units = n_filter // rank
    if not s_t.tensor.IsVariable():
        raise tvm.error.OpNotImplemented(f"{_NAME}: activation state '{_name(s_t)}' is not a variable tensor")
    for tw in (wf_t, wt_t) + ((b_t,) if present_tensor(t, 3) else ()):
        if conv.has_expr(tw.tensor_idx):
            raise tvm.error.OpNotImplemented(f"{_NAME}: '{_name(tw)}' must be a constant")
    has_bias = present_tensor(t, 3)
    state = conv.variable_state(s_t, (batch, n_filter * memory))
    x = conv.get_tensor_expr(x_t)
    bb = conv.bb
    R = relax.op
    if types == ["float32"] * 4:
        act_kind = int(opts.FusedActivationFunction())
        act = _activation(act_kind, _NAME)
        wf = np.asarray(conv.get_tensor_value(wf_t), np.float32)
        wt = np.asarray(conv.get_tensor_value(wt_t), np.float32)
        feat = R.matmul(x, relax.const(np.ascontiguousarray(wf.T)))                          # (B, F)
        old = R.reshape(state, (batch, n_filter, memory))
        newest = R.expand_dims(feat, [2])
        new = newest if memory == 1 else R.concat([R.strided_slice(old, [2], [1], [memory]), newest], axis=2)
        new = bb.normalize(new)
        scratch = R.sum(R.multiply(new, relax.const(wt)), axis=[2])                         # (B, F)
        y = R.sum(R.reshape(scratch, (batch, units, rank)), axis=[2])
        if has_bias:
            y = R.add(y, relax.const(np.asarray(conv.get_tensor_value(b_t), np.float32).reshape(units)))
        conv.assign_variable_state(s_t, bb.normalize(R.reshape(new, (batch, n_filter * memory))))
        return act(y)
    if types[0] == "int8" and types[1] == "int8" and types[2] == types[3] and types[2] in ("int8", "int16"):
        return _svdf_int8(conv, t, out_t, state, x, rank, (batch, n_in, n_filter, memory, units), types[2], has_bias)
    raise tvm.error.OpNotImplemented(
        f"{_NAME} with input {types[0]}, weights {types[1]}/{types[2]} and state {types[3]}: float32 and int8 "
        f"(int8 or int16 state, as TFLite Micro runs it) are supported; activations {sorted(ACTIVATIONS)}")


def _svdf_int8(conv, t, out_t, state, x, rank, sizes, state_dtype, has_bias):
    """The int8 SVDF as TFLM's ``EvalIntegerSvdfReference`` computes it (see the module docstring)."""
    batch, n_in, n_filter, memory, units = sizes
    x_t, wf_t, wt_t, b_t, s_t = t

    def qparams(tw):
        q = tw.tensor.Quantization()
        if q is None or not q.ScaleLength():
            raise tvm.error.OpNotImplemented(f"int8 {_NAME}: '{_name(tw)}' is not quantized")
        if q.ScaleLength() != 1:
            raise tvm.error.OpNotImplemented(f"int8 {_NAME}: '{_name(tw)}' has {q.ScaleLength()} scales; TFLite "
                                             "Micro's SVDF takes one per tensor")
        return float(q.ScaleAsNumpy()[0]), int(q.ZeroPointAsNumpy()[0]) if q.ZeroPointLength() else 0

    if not has_bias:
        raise tvm.error.OpNotImplemented(f"int8 {_NAME} without a bias: TFLite Micro's integer SVDF needs one")
    if conv.get_tensor_type_str(out_t.tensor.Type()) != "int8" or \
            conv.get_tensor_type_str(b_t.tensor.Type()) != "int32":
        raise tvm.error.OpNotImplemented(f"int8 {_NAME}: output '{_name(out_t)}' must be int8 and bias "
                                         f"'{_name(b_t)}' int32")
    (sx, zx), (swf, _), (swt, _), (ss, zs), (so, zo) = (qparams(tw) for tw in (x_t, wf_t, wt_t, s_t, out_t))
    mul1, mul2 = svdf_multipliers(sx, swf, ss, swt, so)
    wf = np.asarray(conv.get_tensor_value(wf_t)).astype(np.int8)
    wt = np.asarray(conv.get_tensor_value(wt_t)).astype(state_dtype)
    bias = np.asarray(conv.get_tensor_value(b_t)).astype(np.int32).reshape(units)
    bb = conv.bb
    feat = _call(bb, K.svdf_features(batch, n_in, n_filter, x_offset=-zx, mul=mul1, state_dtype=state_dtype,
                                     state_zp=zs), [x, relax.const(wf)], (batch, n_filter), state_dtype)
    new = _call(bb, K.svdf_shift(batch, n_filter, memory, state_dtype), [state, feat], (batch, n_filter * memory),
                state_dtype)
    conv.assign_variable_state(s_t, new)
    return _call(bb, K.svdf_output(batch, n_filter, memory, rank, state_dtype=state_dtype, state_zp=zs, mul=mul2,
                                   out_zp=zo, has_bias=True),
                 [new, relax.const(np.ascontiguousarray(wt)), relax.const(bias)], (batch, units), "int8")
