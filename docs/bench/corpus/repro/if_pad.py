# Pad inside an If branch whose pads are computed from constants (Silero VAD v6: the whole model sits in an
# If on the sample rate; torch's F.pad export computes the pads from constants with Concat/Slice/Transpose...,
# which fold_shapes folds in the main graph but not inside If branches)
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])
def branch(name):
    p = name + "_"
    nodes = [helper.make_node("Constant", [], [p + "two"], value=numpy_helper.from_array(np.array([0, 2], np.int64))),
             helper.make_node("Concat", [p + "two", p + "two"], [p + "pads"], axis=0),   # [0, 2, 0, 2]
             helper.make_node("Pad", ["x", p + "pads"], ["out_" + name], mode="reflect")]
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("out_" + name, TensorProto.FLOAT, [1, 12])])
nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else"))]
m = helper.make_model(helper.make_graph(nodes, "g", [x, c], [y]), opset_imports=[helper.make_opsetid("", 15)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
