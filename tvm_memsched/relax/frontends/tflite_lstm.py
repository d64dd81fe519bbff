"""TFLite ``UNIDIRECTIONAL_SEQUENCE_LSTM`` in Relax, unrolled over its static sequence, as LiteRT computes it.

TVM 0.27's converter takes only the coupled input-forget form (no input gate), without peepholes,
projection or layer normalisation, and fails on the state tensors the converter writes empty. Keras'
LSTM, which TensorFlow's converter fuses into this operator, has an input gate. :func:`sequence_lstm`
imports every float form LiteRT's kernel (``lstm_eval.cc``) runs, step by step:

* gates ``i`` (absent: coupled, ``i = 1 - f``), ``f``, ``c``, ``o``: input and recurrent products, then
  peepholes (``f``/``i`` read the previous cell state, ``o`` the new one), then either the bias or the
  layer normalisation (mean and standard deviation over the cells, ``1e-8`` under the root, times its
  coefficients, then the bias), then the activation (``sigmoid`` for ``i``/``f``/``o``, the operator's
  activation for ``c``);
* ``cell = f * cell + i * c``, clipped to ``cell_clip``; ``hidden = o * activation(cell)``, projected
  (``proj_weights``, ``proj_bias``, clipped to ``proj_clip``) when the model has a projection;
* batch-major or time-major input (``time_major``).

The input products of every step are one matrix product over the sequence; each step adds one product
of the recurrent weights.

The output and cell states are *variable* tensors: LiteRT and TFLite Micro keep them from one invocation
to the next (the model is stateful whether or not Keras called it so). They become the model's state
(:mod:`.tflite_state`): a parameter of ``main`` holding their value before the invocation, initialised
from the file (zeros), and a result holding it after, which the microcontroller export keeps in a static
buffer.

Example
-------
>>> ACTIVATIONS[4]
'tanh'
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .tflite_hybrid import hybrid_dense
from .tflite_lstm_spec import INPUTS, tensor_name

__all__ = ["sequence_lstm", "ACTIVATIONS", "activation", "dequantized_half"]

#: TFLite's ActivationFunctionType -> the function the LSTM applies to its cell gate and cell state
ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6", 4: "tanh"}

# input tensor indices of the operator (TFLite's lstm_shared.h)
_X, _W_X, _W_H, _PEEP, _BIAS = (INPUTS[k] for k in ("x", "w_x", "w_h", "peephole", "bias"))
_PROJ_W, _PROJ_B, _H, _C, _LN = (INPUTS[k] for k in ("proj_w", "proj_b", "h", "c", "layer_norm"))
#: inputs that a dynamic-range quantized ("hybrid") LSTM stores int8 with a scale
_HYBRID_WEIGHTS = frozenset((*_W_X, *_W_H, *_PEEP, _PROJ_W))


def _activation(kind: int, name: str):
    op = relax.op
    k = ACTIVATIONS.get(int(kind))
    if k is None:
        raise tvm.error.OpNotImplemented(f"{name} with activation function {int(kind)}: LiteRT's LSTM takes "
                                         "none, relu, relu_n1_to_1, relu6 or tanh")
    return {"none": lambda x: x, "relu": op.nn.relu, "relu6": lambda x: op.clip(x, 0.0, 6.0),
            "relu_n1_to_1": lambda x: op.clip(x, -1.0, 1.0), "tanh": op.tanh}[k]


def sequence_lstm(conv, op):
    """Import one float ``UNIDIRECTIONAL_SEQUENCE_LSTM`` (``conv``: the TFLite operator converter of
    :mod:`.tflite_converter`, which keeps the state tensors)."""
    from tflite.UnidirectionalSequenceLSTMOptions import UnidirectionalSequenceLSTMOptions

    name = "UNIDIRECTIONAL_SEQUENCE_LSTM"
    t = conv.get_input_tensors(op)
    if len(t) not in (20, 24):
        raise tvm.error.OpNotImplemented(f"{name} with {len(t)} inputs; TFLite's has 20 or 24")
    t = list(t) + [None] * (24 - len(t))
    (out_t,) = conv.get_output_tensors(op)
    opts = UnidirectionalSequenceLSTMOptions()
    o = op.BuiltinOptions()
    opts.Init(o.Bytes, o.Pos)
    if opts.DiagonalRecurrentTensors():
        raise tvm.error.OpNotImplemented(f"{name} with diagonal recurrent weights")

    def present(i):
        return t[i] is not None and t[i].tensor_idx >= 0

    halves = []
    scales = {}             # input index -> the scale of its int8 weights (hybrid LSTM)

    def const(i):
        if conv.has_expr(t[i].tensor_idx):
            v = dequantized_half(conv, t[i])
            if v is None:
                raise tvm.error.OpNotImplemented(f"{name}: input {i} ('{_name(t[i])}') must be a constant (or the "
                                                 "DEQUANTIZE of a float16 constant)")
            halves.append(i)
            return v.astype(np.float32)
        v = conv.get_tensor_value(t[i])
        dtype = conv.get_tensor_type_str(t[i].tensor.Type())
        if dtype == "int8" and i in _HYBRID_WEIGHTS and t[i].qnn_params is not None:
            q = t[i].tensor.Quantization()
            scale, zp = q.ScaleAsNumpy().astype(np.float32), q.ZeroPointAsNumpy() if q.ZeroPointLength() else [0]
            if scale.size != 1 or np.any(np.asarray(zp) != 0):
                raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(t[i])}' need one scale and a zero "
                                                 f"zero point (have {scale.size} scales), as LiteRT takes them")
            scales[i] = np.float32(scale[0])
            return np.asarray(v, np.int8)
        if dtype != "float32":
            raise tvm.error.OpNotImplemented(f"{name}: {dtype} input {i} ('{_name(t[i])}') of a float32 LSTM")
        return np.asarray(v, np.float32)

    x_shape = [int(d) for d in conv.get_tensor_shape(t[_X])]
    if len(x_shape) != 3:
        raise tvm.error.OpNotImplemented(f"{name}: input of shape {x_shape}; expected rank 3")
    time_major = bool(opts.TimeMajor())
    steps, batch = (x_shape[0], x_shape[1]) if time_major else (x_shape[1], x_shape[0])
    n_in = x_shape[2]
    x_type = conv.get_tensor_type_str(t[_X].tensor.Type())
    if x_type != "float32":
        from .tflite_lstm_int8 import sequence_lstm_int8

        if x_type != "int8" or conv.get_tensor_type_str(t[_C].tensor.Type()) != "int16":
            raise tvm.error.OpNotImplemented(
                f"{name} with {x_type} input and {conv.get_tensor_type_str(t[_C].tensor.Type())} cell state: "
                "float32, int8 (int16 cell state, as TFLite Micro runs it) and hybrid LSTMs are supported")
        return sequence_lstm_int8(conv, op, t, opts, (time_major, steps, batch, n_in))
    cifg = not present(_W_X[0])
    gates = [g for g in range(4) if not (cifg and g == 0)]
    wx = [const(_W_X[g]) for g in gates]
    wh = [const(_W_H[g]) for g in gates]
    n_cell = wx[0].shape[0]
    n_out = wh[0].shape[1]
    if any(w.shape != (n_cell, n_in) for w in wx) or any(w.shape != (n_cell, n_out) for w in wh):
        raise tvm.error.OpNotImplemented(f"{name}: weights of shapes {[w.shape for w in wx + wh]} for "
                                         f"{n_in} inputs")
    hybrid = wx[0].dtype == np.int8
    if any((w.dtype == np.int8) != hybrid for w in wx + wh):
        raise tvm.error.OpNotImplemented(f"{name}: some weights int8, some float")
    peep = {g: _widened(const(_PEEP[k]), scales.get(_PEEP[k])).reshape(n_cell) for k, g in enumerate((0, 1, 3))
            if present(_PEEP[k]) and not (cifg and g == 0)}
    layer_norm = {g: const(_LN[g]).reshape(n_cell) for g in gates if present(_LN[g])}
    if layer_norm and len(layer_norm) != len(gates):
        raise tvm.error.OpNotImplemented(f"{name}: layer normalisation of some gates only")
    bias = {g: const(_BIAS[g]).reshape(n_cell) if present(_BIAS[g]) else np.zeros(n_cell, np.float32)
            for g in gates}
    proj = const(_PROJ_W) if present(_PROJ_W) else None
    proj_b = const(_PROJ_B).reshape(-1) if present(_PROJ_B) else None
    if proj is None and n_out != n_cell:
        raise tvm.error.OpNotImplemented(f"{name}: {n_out} outputs for {n_cell} cells without a projection")
    act = _activation(opts.FusedActivationFunction(), name)
    cell_clip, proj_clip = float(opts.CellClip()), float(opts.ProjClip())

    R = relax.op
    bb = conv.bb

    def emit(e):
        return bb.normalize(e)

    def c(a):
        a = np.ascontiguousarray(a, np.float32)
        if halves and a.size > 1 and np.array_equal(a.astype(np.float16).astype(np.float32), a):
            # weights stored float16 in the file stay float16 constants widened where used (as DEQUANTIZE
            # imports them): the float kernels keep them float16 in flash
            return R.astype(relax.const(a.astype(np.float16)), "float32")
        return relax.const(a)

    g_n = len(gates)
    x = conv.get_tensor_expr(t[_X])
    if time_major:
        x = R.permute_dims(x, [1, 0, 2])                                         # [batch, steps, inputs]
    asymmetric = bool(opts.AsymmetricQuantizeInputs())

    def dense(v, rows, w_list, keys, b):
        """``v`` (rows, K) times the weights ``w_list`` (stacked by rows; their input indices ``keys``), plus the
        bias ``b`` (None: none): a float product, or a hybrid one as LiteRT's hybrid LSTM computes it."""
        w = np.concatenate(w_list, 0)
        if hybrid:
            s = np.concatenate([np.full(wk.shape[0], scales[k], np.float32) for wk, k in zip(w_list, keys)])
            return hybrid_dense(bb, v, (rows, w.shape[1]), w, s, b, asymmetric=asymmetric)
        y = R.matmul(v, c(w.T))
        return y if b is None else R.add(y, c(b))

    x_proj = dense(R.reshape(x, (batch * steps, n_in)), batch * steps, wx, [_W_X[g] for g in gates],
                   None if layer_norm else np.concatenate([bias[g] for g in gates]))
    x_proj = emit(R.reshape(x_proj, (batch, steps, g_n * n_cell)))
    h = conv.variable_state(t[_H], (batch, n_out))
    cell = conv.variable_state(t[_C], (batch, n_cell))
    one = relax.const(1.0, "float32")
    eps = relax.const(1e-8, "float32")

    def gate(z, k, g, cell_for_peephole):
        v = R.strided_slice(z, [1], [k * n_cell], [(k + 1) * n_cell])
        if g in peep:
            v = R.add(v, R.multiply(c(peep[g]), cell_for_peephole))
        if layer_norm:
            mean = R.mean(v, axis=[1], keepdims=True)
            d = R.subtract(v, mean)
            var = R.mean(R.multiply(d, d), axis=[1], keepdims=True)
            v = R.add(R.multiply(R.multiply(d, R.rsqrt(R.add(var, eps))), c(layer_norm[g])), c(bias[g]))
        return emit(R.sigmoid(v) if g != 2 else act(v))

    outs = []
    for s in range(steps):
        z = emit(R.add(R.squeeze(R.strided_slice(x_proj, [1], [s], [s + 1]), [1]),
                       dense(h, batch, wh, [_W_H[g] for g in gates], None)))
        k = {g: i for i, g in enumerate(gates)}
        f = gate(z, k[1], 1, cell)
        i = gate(z, k[0], 0, cell) if not cifg else emit(R.subtract(one, f))
        g = gate(z, k[2], 2, cell)
        cell = R.add(R.multiply(f, cell), R.multiply(i, g))
        if cell_clip > 0:
            cell = R.clip(cell, -cell_clip, cell_clip)
        cell = emit(cell)
        o_gate = gate(z, k[3], 3, cell)
        h = emit(R.multiply(o_gate, act(cell)))
        if proj is not None:
            h = dense(h, batch, [proj], [_PROJ_W], proj_b)
            if proj_clip > 0:
                h = R.clip(h, -proj_clip, proj_clip)
            h = emit(h)
        outs.append(h)
    conv.assign_variable_state(t[_H], h)
    conv.assign_variable_state(t[_C], cell)
    y = R.stack(outs, axis=0 if time_major else 1)
    return y


def _widened(w, scale):
    """Peephole weights as float32: int8 ones (a hybrid LSTM's) times their scale, as LiteRT recovers them."""
    return w if scale is None else (w.astype(np.float32) * np.float32(scale)).astype(np.float32)


def dequantized_half(conv, tw):
    """The float16 constant (numpy) that a DEQUANTIZE operator of ``conv``'s subgraph widens into the tensor
    ``tw`` (TensorFlow's float16 quantization writes an LSTM's weights so), else None."""
    sg = conv.subgraph
    for k in range(sg.OperatorsLength()):
        op = sg.Operators(k)
        if tw.tensor_idx not in op.OutputsAsNumpy() or conv.get_op_code_str(op) != "DEQUANTIZE":
            continue
        (src,) = conv.get_input_tensors(op)
        if conv.get_tensor_type_str(src.tensor.Type()) != "float16" or conv.has_expr(src.tensor_idx):
            return None
        return np.asarray(conv.get_tensor_value(src), np.float16)
    return None


def activation(kind: int, name: str):
    """The Relax function of TFLite's fused activation ``kind`` (refused by ``name`` if the LSTM lacks it)."""
    return _activation(kind, name)


def _name(tw) -> str:
    return tensor_name(tw)
