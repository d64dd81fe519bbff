"""ONNX graphs for the tests, written with onnx.helper: the operators public model zoos use, including the
run-time shape arithmetic exporters emit (Shape/Gather/Unsqueeze/Concat feeding Reshape, ConstantOfShape)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def zoo_ops_model(batch="N", channels: int = 8, size: int = 16, classes: int = 10, seed: int = 0,
                  extra_nodes=()) -> bytes:
    """Conv -> BatchNormalization -> Relu, + ConstantOfShape(Shape(x)), * Unsqueeze(gamma), two branches
    (Conv 1x1, MaxPool) -> Concat, channel shuffle (Reshape/Transpose/Reshape with a batch taken from Shape),
    AveragePool, GlobalAveragePool, Flatten, Gemm. ``batch``: a symbolic name or an int."""
    rng = np.random.default_rng(seed)
    c, c2 = channels, 2 * channels
    f32 = np.float32
    inits = [
        _init("w1", rng.standard_normal((c, 3, 3, 3)).astype(f32) * 0.3), _init("b1", np.zeros(c, f32)),
        _init("bn_s", rng.uniform(0.5, 1.5, c).astype(f32)), _init("bn_b", rng.standard_normal(c).astype(f32) * .1),
        _init("bn_m", rng.standard_normal(c).astype(f32) * .1), _init("bn_v", rng.uniform(0.5, 1.5, c).astype(f32)),
        _init("gamma", rng.uniform(0.5, 1.5, c).astype(f32)), _init("axes_023", np.array([0, 2, 3], np.int64)),
        _init("w2", rng.standard_normal((c, c, 1, 1)).astype(f32) * 0.3), _init("b2", np.zeros(c, f32)),
        _init("zero", np.array(0, np.int64)), _init("axes_0", np.array([0], np.int64)),
        _init("shape5", np.array([2, c, size, size], np.int64)), _init("shape4", np.array([c2, size, size], np.int64)),
        _init("wfc", rng.standard_normal((classes, c2)).astype(f32) * 0.3), _init("bfc", np.zeros(classes, f32)),
    ]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["a", "bn_s", "bn_b", "bn_m", "bn_v"], ["b"]),
        n("Relu", ["b"], ["c"]),
        n("Shape", ["c"], ["s"]),
        n("ConstantOfShape", ["s"], ["z"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1])),
        n("Add", ["c", "z"], ["d"]),
        n("Unsqueeze", ["gamma", "axes_023"], ["g"]),
        n("Mul", ["d", "g"], ["e"]),
        n("Conv", ["e", "w2", "b2"], ["f1"]),
        n("MaxPool", ["e"], ["f2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        n("Concat", ["f1", "f2"], ["cat"], axis=1),
        n("Shape", ["cat"], ["s2"]),
        n("Gather", ["s2", "zero"], ["nb"], axis=0),
        n("Unsqueeze", ["nb", "axes_0"], ["nb1"]),
        n("Concat", ["nb1", "shape5"], ["shp5"], axis=0),
        n("Reshape", ["cat", "shp5"], ["r5"]),
        n("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
        n("Concat", ["nb1", "shape4"], ["shp4"], axis=0),
        n("Reshape", ["t5", "shp4"], ["sh"]),
        n("AveragePool", ["sh"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        n("GlobalAveragePool", ["p"], ["gp"]),
        n("Flatten", ["gp"], ["fl"]),
        n("Gemm", ["fl", "wfc", "bfc"], ["y"], transB=1),
    ] + list(extra_nodes)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])
    out = extra_nodes[-1].output[0] if extra_nodes else "y"
    y = helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, classes])
    g = helper.make_graph(nodes, "zoo_ops", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def unsupported_model() -> bytes:
    """:func:`zoo_ops_model` ending in two operators TVM's ONNX frontend does not know."""
    return zoo_ops_model(batch=1, extra_nodes=[helper.make_node("FancyOp", ["y"], ["y2"]),
                                               helper.make_node("Celu", ["y2"], ["y3"])])


def recurrent_model(kind: str, *, direction: str = "forward", layout: int = 0, bias: bool = True,
                    state_inputs: bool = True, peepholes: bool = False, seq: int = 4, batch: int = 2,
                    inputs: int = 3, hidden: int = 5, seed: int = 0, opset: int = 14, **attrs) -> bytes:
    """One ONNX ``LSTM``/``GRU``/``RNN`` node with random weights; ``state_inputs``: initial states as graph
    inputs ``h0`` (and ``c0``), outputs ``Y``, ``Y_h`` (and ``Y_c``); ``attrs``: further node attributes."""
    rng = np.random.default_rng(seed)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
    dirs = 2 if direction == "bidirectional" else 1
    f32 = np.float32
    inits = [_init("W", rng.uniform(-1, 1, (dirs, gates * hidden, inputs)).astype(f32)),
             _init("R", rng.uniform(-1, 1, (dirs, gates * hidden, hidden)).astype(f32))]
    names = ["X", "W", "R", ""]
    if bias:
        inits.append(_init("B", rng.uniform(-1, 1, (dirs, 2 * gates * hidden)).astype(f32)))
        names[3] = "B"
    xs = [seq, batch, inputs] if layout == 0 else [batch, seq, inputs]
    hs = [dirs, batch, hidden] if layout == 0 else [batch, dirs, hidden]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, xs)]
    names.append("")                                     # sequence_lens
    states = ["h0", "c0"] if kind == "LSTM" else ["h0"]
    for s in states:
        names.append(s if state_inputs else "")
        if state_inputs:
            graph_inputs.append(helper.make_tensor_value_info(s, TensorProto.FLOAT, hs))
    if peepholes:
        inits.append(_init("P", rng.uniform(-1, 1, (dirs, 3 * hidden)).astype(f32)))
        names.append("P")
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node_attrs = dict(hidden_size=hidden, direction=direction, **attrs)
    if layout:
        node_attrs["layout"] = 1
    node = helper.make_node(kind, names, outs, **node_attrs)
    g = helper.make_graph([node], kind.lower(), graph_inputs,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()
