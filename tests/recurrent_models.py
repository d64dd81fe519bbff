"""Quantized recurrent TFLite models built by hand (TensorFlow's converter writes only some of them): int8
UNIDIRECTIONAL_SEQUENCE_LSTM with random quantization, hybrid LSTM, float and int8 SVDF."""

import numpy as np

from tflite_ops import options, qtensor
from tvm_memsched.tflite.builder import ModelBuilder, tfl

B, O = tfl.BuiltinOperator, tfl.BuiltinOptions


def int8_lstm(rng, *, steps=3, batch=1, n_in=3, n_cell=4, time_major=False, cell_clip=0.0, cell_power=None):
    """An int8 LSTM as TFLite Micro runs it (int8 activations and weights, int32 biases, int16 cell state of
    scale ``2**cell_power``), every scale and zero point random; both states variable tensors."""
    mb = ModelBuilder()
    sx, zx = float(np.float32(rng.uniform(0.004, 0.05))), int(rng.integers(-128, 128))
    sh, zh = float(np.float32(rng.uniform(0.002, 0.03))), int(rng.integers(-128, 128))
    power = int(rng.integers(-15, -9)) if cell_power is None else cell_power
    x = qtensor(mb, "x", [steps, batch, n_in] if time_major else [batch, steps, n_in], sx, zx)
    ins = [x]
    ws = {}
    for kind, n in (("x", n_in), ("h", n_cell)):
        for g in "ifco":
            s = float(np.float32(rng.uniform(0.001, 0.01)))
            ws[kind, g] = s
            ins.append(qtensor(mb, f"w{kind}_{g}", [n_cell, n], s, 0,
                               data=rng.integers(-127, 128, [n_cell, n]).astype(np.int8)))
    ins += [-1, -1, -1]
    for g in "ifco":
        ins.append(qtensor(mb, f"b_{g}", [n_cell], sx * ws["x", g], 0, dtype=np.int32,
                           data=rng.integers(-20000, 20000, [n_cell]).astype(np.int32)))
    ins += [-1, -1]
    ins.append(qtensor(mb, "h", [batch, n_cell], sh, zh))
    mb.tensors[-1].isVariable = True
    ins.append(qtensor(mb, "c", [batch, n_cell], 2.0 ** power, 0, dtype=np.int16))
    mb.tensors[-1].isVariable = True
    ins += [-1, -1, -1, -1]
    y = qtensor(mb, "y", [steps, batch, n_cell] if time_major else [batch, steps, n_cell], sh, zh)
    o = options(tfl.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=4, cellClip=cell_clip,
                projClip=0.0, timeMajor=time_major)
    mb.op(B.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [y], O.UnidirectionalSequenceLSTMOptions, o, version=1)
    return mb.finish([x], [y])


def int8_inputs(buf, rng, count):
    """``count`` random int8 input sets of a one-input model ``buf``."""
    from tvm_memsched.tflite.builder import load

    sg = load(buf).subgraphs[0]
    shape = [int(d) for d in sg.tensors[sg.inputs[0]].shape]
    return [[rng.integers(-128, 128, shape).astype(np.int8)] for _ in range(count)]


def svdf(rng, *, batch=1, n_in=5, units=3, rank=2, memory=4, act=0, bias=True, kind="float32",
         state_dtype=np.int16):
    """SVDF (TensorFlow's converter does not write it): float32, or int8 with an int16 (or int8) activation
    state and time weights, every scale and zero point random; the state a variable tensor."""
    mb = ModelBuilder()
    n_filter = units * rank
    o = options(tfl.SVDFOptionsT, rank=rank, fusedActivationFunction=act)
    if kind == "float32":
        x = mb.tensor("x", [batch, n_in])
        ins = [x, mb.tensor("wf", [n_filter, n_in], data=rng.uniform(-0.6, 0.6, [n_filter, n_in]).astype(np.float32)),
               mb.tensor("wt", [n_filter, memory], data=rng.uniform(-0.6, 0.6, [n_filter, memory]).astype(np.float32)),
               mb.tensor("b", [units], data=rng.uniform(-0.3, 0.3, [units]).astype(np.float32)) if bias else -1,
               mb.tensor("state", [batch, n_filter * memory])]
        mb.tensors[-1].isVariable = True
        y = mb.tensor("y", [batch, units])
    else:
        f32 = lambda v: float(np.float32(v))      # noqa: E731
        sx, zx = f32(rng.uniform(0.005, 0.05)), int(rng.integers(-128, 128))
        swf, swt = f32(rng.uniform(0.002, 0.02)), f32(rng.uniform(0.0005, 0.005))
        wide = np.dtype(state_dtype) == np.int16
        ss, zs = (f32(rng.uniform(0.0002, 0.002)), 0) if wide else (f32(rng.uniform(0.01, 0.05)), int(rng.integers(-20, 20)))
        so, zo = f32(rng.uniform(0.01, 0.1)), int(rng.integers(-128, 128))
        info = np.iinfo(state_dtype)
        x = qtensor(mb, "x", [batch, n_in], sx, zx)
        ins = [x, qtensor(mb, "wf", [n_filter, n_in], swf, 0,
                          data=rng.integers(-127, 128, [n_filter, n_in]).astype(np.int8)),
               qtensor(mb, "wt", [n_filter, memory], swt, 0, dtype=state_dtype,
                       data=rng.integers(info.min // 2, info.max // 2, [n_filter, memory]).astype(state_dtype)),
               qtensor(mb, "b", [units], f32(np.float32(ss) * np.float32(swt)), 0, dtype=np.int32,
                       data=rng.integers(-2000, 2000, [units]).astype(np.int32)),
               qtensor(mb, "state", [batch, n_filter * memory], ss, zs, dtype=state_dtype)]
        mb.tensors[-1].isVariable = True
        y = qtensor(mb, "y", [batch, units], so, zo)
    mb.op(B.SVDF, ins, [y], O.SVDFOptions, o, version=1 if kind == "float32" else 3)
    return mb.finish([x], [y])
