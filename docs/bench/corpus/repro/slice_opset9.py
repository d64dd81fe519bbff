# Slice of opset 1-9 (starts/ends/axes as attributes), as in the AECMOS export (opset 9): Slice(h0, axes=[0],
# starts=[0], ends=[2]) of the GRU state input
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1, 3])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 3])
nodes = [helper.make_node("Slice", ["x"], ["y"], axes=[0], starts=[0], ends=[2])]
m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 9)])
m.ir_version = 7
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])
