# an ONNX model whose output is a scalar (rank 0), as PLCMOS v2's 'plcmos' output
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
nodes = [helper.make_node("ReduceMean", ["x"], ["y"], keepdims=0)]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
