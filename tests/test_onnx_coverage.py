"""ONNX graphs as exporters write them: an ``If`` whose condition folds to a constant becomes the branch it
takes, outputs equal onnxruntime's."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_memsched.relax.frontends.onnx_fold import fold_shapes
from tvm_memsched.relax.frontends.onnx_frontend import from_onnx_bytes

ort = pytest.importorskip("onnxruntime")


def _if_model(threshold: int):
    """``y = If(x.shape[1] > threshold, relu(x) * 2, -x) + x``; both branches name their result ``r`` and the
    then-branch has an initializer and an intermediate of its own."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Mul", ["t", "two"], ["r"])], "then", [],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["r"])], "else", [],
                               [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
             helper.make_node("Greater", ["c", "k"], ["cond"]),
             helper.make_node("If", ["cond"], ["y0"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Sigmoid", ["x"], ["u"]), helper.make_node("Add", ["y0", "u"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(threshold, np.int64), "k")]
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("threshold,branch", [(2, "Relu"), (5, "Neg")])
def test_if_with_a_constant_condition_is_the_branch_it_takes(threshold, branch):
    import tvm
    from tvm import relax

    model = _if_model(threshold)
    ops = [n.op_type for n in fold_shapes(model).graph.node]
    assert "If" not in ops and branch in ops and ("Neg" in ops) == (branch == "Neg")
    buf = model.SerializeToString()
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    ref = ort.InferenceSession(buf, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = from_onnx_bytes(buf)
    got = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
