"""One-operator int8 TFLite models with chosen (or random) quantization, for the int8 lowering tests."""

import math

import numpy as np

from tvm_memsched.tflite.builder import ModelBuilder, tfl

B, O = tfl.BuiltinOperator, tfl.BuiltinOptions


def qtensor(mb, name, shape, scale, zp, dtype=np.int8, data=None, qd=0):
    return mb.tensor(name, list(shape), dtype, data=data, scale=scale, zero_point=zp, quantized_dimension=qd)


def rand_q(rng, lo=0.005, hi=0.2):
    """A random per-tensor (scale, zero point) of an int8 activation."""
    return float(np.float32(rng.uniform(lo, hi))), int(rng.integers(-128, 128))


def conv(rng, *, depthwise=False, act=0, stride=1, pad=tfl.Padding.SAME, hw=(7, 6), cin=3, cout=4, k=3, dil=1,
         per_channel=True, multiplier=1, bias=True):
    """CONV_2D (OHWI weights) or DEPTHWISE_CONV_2D (1HW(C*M)) with int32 bias."""
    mb = ModelBuilder()
    (sx, zx), (sy, zy) = rand_q(rng, 0.01, 0.1), rand_q(rng, 0.02, 0.3)
    h, w = hw
    x = qtensor(mb, "x", [1, h, w, cin], sx, zx)
    oc = cin * multiplier if depthwise else cout
    wshape = [1, k, k, oc] if depthwise else [oc, k, k, cin]
    qd = 3 if depthwise else 0
    wd = rng.integers(-127, 128, wshape).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, oc if per_channel else 1).astype(np.float32)
    wt = qtensor(mb, "w", wshape, ws, np.zeros(len(ws), int), data=wd, qd=qd)
    ins = [x, wt]
    if bias:
        bd = rng.integers(-3000, 3000, [oc]).astype(np.int32)
        ins.append(qtensor(mb, "b", [oc], sx * ws, np.zeros(len(ws), int), dtype=np.int32, data=bd))
    if pad == tfl.Padding.SAME:
        oh, ow = math.ceil(h / stride), math.ceil(w / stride)
    else:
        oh, ow = (h - (k - 1) * dil - 1) // stride + 1, (w - (k - 1) * dil - 1) // stride + 1
    y = qtensor(mb, "y", [1, oh, ow, oc], sy, zy)
    if depthwise:
        o = tfl.DepthwiseConv2DOptionsT()
        o.depthMultiplier = multiplier
        code, opt = B.DEPTHWISE_CONV_2D, O.DepthwiseConv2DOptions
    else:
        o = tfl.Conv2DOptionsT()
        code, opt = B.CONV_2D, O.Conv2DOptions
    o.padding, o.strideH, o.strideW, o.fusedActivationFunction = pad, stride, stride, act
    o.dilationHFactor = o.dilationWFactor = dil
    mb.op(code, ins, [y], opt, o, version=3)
    return mb.finish([x], [y])


def fully_connected(rng, *, act=0, batch=1, k=16, n=5, bias=True, x_shape=None):
    """``x_shape``: the input's shape when it is not ``[batch, k]`` (TFLite flattens it to ``[-1, k]``)."""
    mb = ModelBuilder()
    (sx, zx), (sy, zy) = rand_q(rng, 0.01, 0.1), rand_q(rng, 0.05, 0.5)
    x = qtensor(mb, "x", list(x_shape or [batch, k]), sx, zx)
    ws = float(np.float32(rng.uniform(0.002, 0.02)))
    w = qtensor(mb, "w", [n, k], ws, 0, data=rng.integers(-127, 128, (n, k)).astype(np.int8))
    ins = [x, w]
    if bias:
        ins.append(qtensor(mb, "b", [n], sx * ws, 0, dtype=np.int32,
                           data=rng.integers(-3000, 3000, n).astype(np.int32)))
    y = qtensor(mb, "y", [batch, n], sy, zy)
    o = tfl.FullyConnectedOptionsT()
    o.fusedActivationFunction = act
    mb.op(B.FULLY_CONNECTED, ins, [y], O.FullyConnectedOptions, o, version=4)
    return mb.finish([x], [y])


def binary(rng, code, *, act=0, shape1=(1, 4, 4, 3), shape2=(1, 4, 4, 3)):
    mb = ModelBuilder()
    (s1, z1), (s2, z2), (so, zo) = rand_q(rng), rand_q(rng), rand_q(rng, 0.02, 0.4)
    a = qtensor(mb, "a", shape1, s1, z1)
    b = qtensor(mb, "b", shape2, s2, z2)
    y = qtensor(mb, "y", np.broadcast_shapes(shape1, shape2), so, zo)
    opts = {B.ADD: (O.AddOptions, tfl.AddOptionsT), B.SUB: (O.SubOptions, tfl.SubOptionsT),
            B.MUL: (O.MulOptions, tfl.MulOptionsT)}[code]
    o = opts[1]()
    o.fusedActivationFunction = act
    mb.op(code, [a, b], [y], opts[0], o, version=2)
    return mb.finish([a, b], [y])


def unary(code, options=None, *, shape=(1, 4, 4, 3), qin=(0.05, 3), qout=(0.1, 1), out_shape=None, extra=(),
          version=1):
    """A one-input operator; ``extra`` are callables adding constant inputs ``f(mb) -> tensor index``."""
    mb = ModelBuilder()
    a = qtensor(mb, "a", shape, *qin)
    y = qtensor(mb, "y", out_shape or shape, *qout)
    mb.op(code, [a] + [e(mb) for e in extra], [y], *(options or (0, None)), version=version)
    return mb.finish([a], [y])


def pool(code, *, shape=(1, 5, 5, 3), out_shape=(1, 3, 3, 3), k=3, stride=2, pad=tfl.Padding.SAME, q=(0.05, 3),
         act=0):
    o = tfl.Pool2DOptionsT()
    o.padding, o.strideH, o.strideW, o.filterHeight, o.filterWidth = pad, stride, stride, k, k
    o.fusedActivationFunction = act
    return unary(code, (O.Pool2DOptions, o), shape=shape, out_shape=out_shape, qin=q, qout=q)


def options(cls, **fields):
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def const_i32(name, values):
    return lambda mb: mb.tensor(name, [len(values)] if np.ndim(values) else [], np.int32,
                                data=np.array(values, np.int32))


def sequence_lstm(rng, *, steps=3, batch=2, n_in=3, n_cell=4, n_out=None, cifg=False, peephole=False,
                  projection=False, layer_norm=False, time_major=False, cell_clip=0.0, proj_clip=0.0, act=4):
    """A float UNIDIRECTIONAL_SEQUENCE_LSTM in each of TFLite's forms (the converter writes only Keras'):
    coupled input gate (``cifg``), peepholes, projection (``n_out`` outputs), layer normalisation, time-major
    input, cell and projection clipping; its two states are variable tensors, as the converter writes them."""
    mb = ModelBuilder()
    n_out = n_out or (n_cell if not projection else n_cell - 1)
    x = mb.tensor("x", [steps, batch, n_in] if time_major else [batch, steps, n_in])

    def w(name, shape, on=True):
        return mb.tensor(name, shape, data=rng.uniform(-0.6, 0.6, shape).astype(np.float32)) if on else -1

    ins = [x]
    ins += [w(f"wx_{g}", [n_cell, n_in], not (cifg and g == "i")) for g in "ifco"]
    ins += [w(f"wh_{g}", [n_cell, n_out], not (cifg and g == "i")) for g in "ifco"]
    ins += [w(f"peep_{g}", [n_cell], peephole and not (cifg and g == "i")) for g in "ifo"]
    ins += [w(f"b_{g}", [n_cell], not (cifg and g == "i")) for g in "ifco"]
    ins += [w("proj", [n_out, n_cell], projection), w("proj_b", [n_out], projection)]
    for name, n in (("h", n_out), ("c", n_cell)):
        ins.append(mb.tensor(name, [batch, n]))
        mb.tensors[-1].isVariable = True
    ins += [w(f"ln_{g}", [n_cell], layer_norm and not (cifg and g == "i")) for g in "ifco"]
    y = mb.tensor("y", [steps, batch, n_out] if time_major else [batch, steps, n_out])
    o = options(tfl.UnidirectionalSequenceLSTMOptionsT, fusedActivationFunction=act, cellClip=cell_clip,
                projClip=proj_clip, timeMajor=time_major)
    mb.op(B.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, [y], O.UnidirectionalSequenceLSTMOptions, o, version=1)
    return mb.finish([x], [y])


def side_by_side(models: dict) -> bytes:
    """One model computing each of ``models`` (``{name: single-graph .tflite bytes}``) on its own: their
    operators, inputs and outputs side by side in one graph (tensors renamed ``name/tensor``), so that one
    export, one firmware and one run check them all. Output ``k`` is the ``k``-th model's output."""
    from tvm_memsched.tflite.builder import load, serialize

    m = tfl.ModelT()
    m.version, m.description = 3, "side by side: " + ", ".join(models)
    m.operatorCodes, m.buffers = [], [tfl.BufferT()]
    sg = tfl.SubGraphT()
    sg.name, sg.tensors, sg.operators, sg.inputs, sg.outputs = "main", [], [], [], []
    codes: dict = {}
    for name, buf in models.items():
        part = load(buf)
        assert len(part.subgraphs) == 1, name
        src = part.subgraphs[0]
        opcode = {}
        for i, c in enumerate(part.operatorCodes):
            key = (c.builtinCode, c.deprecatedBuiltinCode, c.version, c.customCode)
            if key not in codes:
                codes[key] = len(m.operatorCodes)
                m.operatorCodes.append(c)
            opcode[i] = codes[key]
        base = len(sg.tensors)
        for t in src.tensors:
            if t.buffer:
                m.buffers.append(part.buffers[t.buffer])
                t.buffer = len(m.buffers) - 1
            t.name = f"{name}/{t.name.decode() if isinstance(t.name, bytes) else t.name}"
            sg.tensors.append(t)
        for op in src.operators:
            op.opcodeIndex = opcode[op.opcodeIndex]
            op.inputs = [int(i) + base if i >= 0 else -1 for i in op.inputs]
            op.outputs = [int(i) + base for i in op.outputs]
            sg.operators.append(op)
        sg.inputs += [int(i) + base for i in src.inputs]
        sg.outputs += [int(i) + base for i in src.outputs]
    m.subgraphs = [sg]
    return serialize(m)
