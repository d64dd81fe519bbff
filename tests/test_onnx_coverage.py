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


def _run_both(model, feeds: dict):
    """(ours, onnxruntime's) outputs of ``model`` on ``feeds``."""
    import tvm
    from tvm import relax

    buf = model.SerializeToString()
    ref = ort.InferenceSession(buf, providers=["CPUExecutionProvider"]).run(None, feeds)
    mod = from_onnx_bytes(buf)
    names = [str(p.name) for p in mod["main"].params]
    out = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](
        *[tvm.runtime.tensor(feeds[n]) for n in names])
    outs = [out] if hasattr(out, "numpy") else list(out)
    return [np.asarray(o.numpy()) for o in outs], ref


@pytest.mark.parametrize("cond", [True, False])
def test_a_constant_only_a_branch_reads_survives_folding(cond):
    """Silero VAD's decoder: a Constant of the main graph read only inside an ``If`` on a run-time input
    (was: dropped by the folding, the branch's Gather left without its index)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])

    def branch(name, op):
        nodes = [helper.make_node("Gather", ["x", "idx"], ["g_" + name], axis=0),
                 helper.make_node(op, ["g_" + name], ["out_" + name])]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("out_" + name, TensorProto.FLOAT,
                                                                                 [1])])

    nodes = [helper.make_node("Constant", [], ["idx"], value=numpy_helper.from_array(np.array([1], np.int64))),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("then", "Neg"),
                              else_branch=branch("else", "Abs"))]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, c], [y]), opset_imports=[helper.make_opsetid("", 15)])
    feeds = {"x": np.array([1.0, -2.0, 3.0, -4.0], np.float32), "c": np.array(cond)}
    (got,), (ref,) = _run_both(model, feeds)
    np.testing.assert_array_equal(got, ref)
    assert got.tolist() == ([2.0] if cond else [2.0])


def test_pads_computed_inside_nested_branches_fold():
    """torch's ``F.pad`` export inside an ``If`` branch, itself inside a branch taken by a constant condition:
    the pads (``Shape`` of a constant, ``Concat``, ``Transpose``, ``Reshape``) fold in the subgraphs, and the
    inlined branch's nested ``If`` reads the renamed tensors."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12])

    def inner(name, mode):
        p = name + "_"
        nodes = [helper.make_node("Shape", ["outer_two"], [p + "n"]),                          # [2]
                 helper.make_node("Concat", ["outer_two", p + "n"], [p + "cat"], axis=0),       # [0, 2, 2]
                 helper.make_node("Slice", [p + "cat", "s0", "s1"], [p + "zero"]),             # [0]
                 helper.make_node("Concat", [p + "zero", p + "zero", p + "n", p + "n"], [p + "pp"], axis=0),
                 helper.make_node("Reshape", [p + "pp", "shape22"], [p + "m"]),               # per axis
                 helper.make_node("Transpose", [p + "m"], [p + "mt"], perm=[1, 0]),
                 helper.make_node("Reshape", [p + "mt", "shape4"], [p + "pads"]),               # [0, 2, 0, 2]
                 helper.make_node("Pad", ["x_in", p + "pads"], ["out_" + name], mode=mode)]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("out_" + name, TensorProto.FLOAT,
                                                                                 [1, 12])])

    def outer(name):
        nodes = [helper.make_node("Identity", ["x"], ["x_in"]),
                 helper.make_node("Constant", [], ["outer_two"],
                                  value=numpy_helper.from_array(np.array([0, 2], np.int64))),
                 helper.make_node("If", ["c"], ["out_" + name], then_branch=inner(name + "_t", "reflect"),
                                  else_branch=inner(name + "_e", "edge"))]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("out_" + name, TensorProto.FLOAT,
                                                                                 [1, 12])])

    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
             [("s0", [0]), ("s1", [1]), ("shape22", [2, 2]), ("shape4", [4]), ("k", 3)]]
    nodes = [helper.make_node("Constant", [], ["three"], value=numpy_helper.from_array(np.array(3, np.int64))),
             helper.make_node("Equal", ["three", "k"], ["always"]),
             helper.make_node("If", ["always"], ["y"], then_branch=outer("then"), else_branch=outer("else"))]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, c], [y], inits),
                              opset_imports=[helper.make_opsetid("", 15)])
    folded = fold_shapes(model)
    pads = [n for g in [sub for n in folded.graph.node for a in n.attribute if a.HasField("g") for sub in [a.g]]
            for n in g.node if n.op_type == "Pad"]
    assert [n.op_type for n in folded.graph.node if n.op_type == "If"] == ["If"] and len(pads) == 2
    for cond in (True, False):
        feeds = {"x": np.arange(8, dtype=np.float32).reshape(1, 8), "c": np.array(cond)}
        (got,), (ref,) = _run_both(model, feeds)
        np.testing.assert_array_equal(got, ref)


def test_slice_of_opset_9_reads_its_attributes():
    """AECMOS (opset 9): ``Slice`` with ``starts`` / ``ends`` / ``axes`` attributes, which TVM's converter reads
    from inputs: the model is carried to opset 13 by ONNX's version converter first."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    node = helper.make_node("Slice", ["x"], ["y"], axes=[0, 1], starts=[1, 1], ends=[3, 100])
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 9)])
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3)}
    (got,), (ref,) = _run_both(model, feeds)
    np.testing.assert_array_equal(got, ref)
    assert got.tolist() == [[4.0, 5.0], [7.0, 8.0]]


def test_same_padding_computed_in_floats_folds_into_a_constant_pad():
    """timm's "same" padding as ``torch.onnx.export`` writes it (NASNet-A Large: 28 such pads): ``clip(ceil(H / s)
    - 1) * s + k - H, 0)`` computed in floats from the input's shape, cast back to integers and split into a
    begin and an end pad. TVM's importer refuses a ``Pad`` whose pads are not constant ("Dynamic pads")."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 9])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    f = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    i = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "hw_at"], ["hw"], axis=0),
             helper.make_node("Cast", ["hw"], ["hwf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["hwf", "stride"], ["q"]), helper.make_node("Ceil", ["q"], ["c"]),
             helper.make_node("Sub", ["c", "one"], ["c1"]), helper.make_node("Mul", ["c1", "stride"], ["m"]),
             helper.make_node("Add", ["m", "window"], ["a"]), helper.make_node("Sub", ["a", "hwf"], ["p"]),
             helper.make_node("Clip", ["p", "zero"], ["pc"]),
             helper.make_node("Cast", ["pc"], ["pad"], to=TensorProto.INT64),
             helper.make_node("Div", ["pad", "two"], ["begin"]), helper.make_node("Sub", ["pad", "begin"], ["end"]),
             helper.make_node("Concat", ["zeros", "begin", "zeros", "end"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")]
    inits = [i("hw_at", [2, 3]), f("stride", 2.0), f("one", 1.0), f("window", 3.0), f("zero", 0.0), i("two", 2),
             i("zeros", [0, 0])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    assert [n.op_type for n in fold_shapes(model).graph.node] == ["Pad"]
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 2, 8, 9)).astype(np.float32)}
    (got,), (ref,) = _run_both(model, feeds)
    assert got.shape == ref.shape == (1, 2, 9, 11)            # pads (0, 1) rows and (1, 1) columns
    np.testing.assert_array_equal(got, ref)
