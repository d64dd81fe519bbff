# A constant computed in the main graph and used only inside an If branch (Silero VAD's decoder: its
# Constant / Gather / Squeeze outputs read by the If_1 / rnn If bodies)
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
def branch(name):
    return helper.make_graph([helper.make_node("Gather", ["x", "idx"], ["out_" + name], axis=0)], name, [],
                             [helper.make_tensor_value_info("out_" + name, TensorProto.FLOAT, [1])])
nodes = [helper.make_node("Constant", [], ["idx"], value=numpy_helper.from_array(np.array([1], np.int64))),
         helper.make_node("If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else"))]
m = helper.make_model(helper.make_graph(nodes, "g", [x, c], [y]), opset_imports=[helper.make_opsetid("", 15)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
