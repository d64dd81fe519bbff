"""``--input-value NAME=V``: an input a deployment fixes (a sample rate a streaming model branches on) frozen to
a constant in .onnx and .tflite files, what it decides folded away, outputs equal the reference runtime fed
the same value."""

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_memsched.app.models import load_relax_spec, parse_input_shapes, tflite_bytes
from tvm_memsched.core.errors import MemschedError, UnsupportedError
from tvm_memsched.core.input_values import InputValueArg

ort = pytest.importorskip("onnxruntime")


def _sr_model(path):
    """Silero VAD's shape: ``y = If(sr == 16000, relu(x) * 2, -x)``, ``sr`` an int64 scalar input."""
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"]), helper.make_node("Mul", ["t", "two"], ["r"])],
                               "then", [], [vi("r", TensorProto.FLOAT, None)],
                               [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["r"])], "else", [], [vi("r", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Equal", ["sr", "k"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, ["n", 8]), vi("sr", TensorProto.INT64, [])],
                          [vi("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array(16000, np.int64), "k")])
    with open(path, "wb") as f:
        f.write(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return str(path)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tvm_memsched", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": os.getcwd()})


@pytest.mark.parametrize("sr,branch", [(16000, "multiply"), (8000, "negate")])
def test_a_frozen_onnx_input_imports_the_branch_it_selects(tmp_path, sr, branch):
    import tvm
    from tvm import relax

    path = _sr_model(tmp_path / "m.onnx")
    mod, _ = load_relax_spec(path, parse_input_shapes(["x=2x8", InputValueArg(f"sr={sr}")]))
    assert [p.name for p in mod["main"].params] == ["x"]
    assert "R.If" not in mod["main"].script() and "if " not in mod["main"].script()
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    got = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x, "sr": np.array(sr)})[0]
    np.testing.assert_array_equal(got, ref)
    assert np.array_equal(got, np.maximum(x, 0) * 2 if branch == "multiply" else -x)


def test_compare_checks_a_frozen_model_against_onnxruntime_fed_the_same_value(tmp_path):
    path = _sr_model(tmp_path / "m.onnx")
    r = _cli("compare", path, "--input-shape", "x=1x8", "--input-value", "sr=16000")
    assert r.returncode == 0, r.stderr
    assert "ours vs onnxruntime (CPU)" in r.stdout and "(ok)" in r.stdout.split("onnxruntime (CPU)")[1]


def test_micro_runs_an_if_on_an_input_as_both_branches_unless_the_input_is_frozen(tmp_path):
    path = _sr_model(tmp_path / "m.onnx")
    r = _cli("micro", path, "-b", "mps2-an386", "--input-shape", "x=1x8", "--out", str(tmp_path / "both"))
    assert r.returncode == 0, r.stderr
    assert "branches       1 run-time If run as both branches and a select" in r.stdout
    r = _cli("micro", path, "-b", "mps2-an386", "--input-shape", "x=1x8", "--input-value", "sr=8000",
             "--out", str(tmp_path / "one"))
    assert r.returncode == 0, r.stderr
    assert "branches" not in r.stdout


@pytest.mark.parametrize("items,message", [
    (["x=2x8", InputValueArg("rate=16000")], "--input-value names unknown input(s) rate; the inputs are x, sr"),
    (["x=2x8", InputValueArg("sr=0.5")], "input 'sr' (int64) the value 0.5, which int64 cannot hold"),
    (["x=2x8", InputValueArg("sr=1,2")], "gives input 'sr' 2 values; its shape scalar holds 1"),
    ([InputValueArg("x=1")], "input 'x' has open dimensions (?x8); give them with --input-shape"),
])
def test_bad_input_values_are_refused_by_name(tmp_path, items, message):
    path = _sr_model(tmp_path / "m.onnx")
    with pytest.raises(UnsupportedError) as e:
        load_relax_spec(path, parse_input_shapes(items))
    assert message in str(e.value)


@pytest.mark.parametrize("item", ["sr", "sr=", "=3", "sr=16k", "sr=1;2"])
def test_malformed_input_values_are_refused(item):
    with pytest.raises(MemschedError, match="bad --input-value"):
        parse_input_shapes([InputValueArg(item)])


def test_cli_refuses_input_values_where_nothing_can_be_frozen(tmp_path):
    r = _cli("compare", "zoo:resnet", "--input-value", "x=1")
    assert r.returncode == 2 and "--input-value are for model files" in r.stderr and "Traceback" not in r.stderr
    r = _cli("compare", _sr_model(tmp_path / "m.onnx"), "--input-value", "sr=sixteen")
    assert r.returncode == 2 and "bad --input-value 'sr=sixteen'" in r.stderr


def _tflite_with_a_gain_input(path):
    """``y = relu(x * gain)``, ``gain`` a [1, 4] input (float32)."""
    from tvm_memsched.tflite.builder import ModelBuilder, tfl

    mb = ModelBuilder()
    x, gain, t, y = (mb.tensor(n, [1, 4]) for n in ("x", "gain", "t", "y"))
    mb.op(tfl.BuiltinOperator.MUL, [x, gain], [t])
    mb.op(tfl.BuiltinOperator.RELU, [t], [y])
    with open(path, "wb") as f:
        f.write(mb.finish(inputs=[x, gain], outputs=[y]))
    return str(path)


def test_a_frozen_tflite_input_is_a_constant_litert_tflm_and_our_build_agree_on(tmp_path):
    import tvm
    from tvm import relax

    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.tflite.verify import litert_run_sequence, tflm_run

    path = _tflite_with_a_gain_input(tmp_path / "m.tflite")
    shapes = parse_input_shapes([InputValueArg("gain=0.5,-1,2,3")])
    frozen = tflite_bytes(path, shapes)
    x = np.array([[1.0, 2.0, -3.0, 4.0]], np.float32)
    original = litert_run_sequence(open(path, "rb").read(), [[x, np.array([[0.5, -1, 2, 3]], np.float32)]],
                                   reference_kernels=True)[0]
    lite = litert_run_sequence(frozen, [[x]], reference_kernels=True)[0]
    micro = tflm_run(frozen, {0: x})
    mod = from_tflite_bytes(frozen, path)
    assert len(mod["main"].params) == 1
    ours = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = np.maximum(x * np.array([0.5, -1, 2, 3], np.float32), 0)
    for got in (list(original.values())[0], list(lite.values())[0], micro[0], ours):
        np.testing.assert_array_equal(np.asarray(got).reshape(1, 4), want)


def test_a_tflite_input_value_is_checked_against_its_type_and_shape(tmp_path):
    path = _tflite_with_a_gain_input(tmp_path / "m.tflite")
    with pytest.raises(UnsupportedError, match="gives input 'gain' 3 values; its shape 1x4 holds 4"):
        tflite_bytes(path, parse_input_shapes([InputValueArg("gain=1,2,3")]))
    with pytest.raises(UnsupportedError, match="--input-value names unknown input"):
        tflite_bytes(path, parse_input_shapes([InputValueArg("k=1")]))


@pytest.mark.parametrize("p", [1.0, -1.0])
def test_a_converter_made_tflite_frozen_on_its_branch_input_equals_litert_fed_the_value(p):
    """TensorFlow's converter's IF model (``p > 0`` picks the branch): ``p`` frozen, both branches."""
    import tvm
    from tvm import relax

    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.tflite.verify import litert_run_sequence, tflm_run

    path = os.path.join(os.path.dirname(__file__), "data", "coverage", "if.float32.tflite")
    frozen = tflite_bytes(path, parse_input_shapes([InputValueArg(f"p={p}")]))
    x = np.random.default_rng(0).standard_normal((1, 6, 6, 3)).astype(np.float32)
    with open(path, "rb") as f:
        want = list(litert_run_sequence(f.read(), [[np.array([p], np.float32), x]], reference_kernels=True)[0]
                    .values())[0]
    mod = from_tflite_bytes(frozen, path)
    assert [str(v.name) for v in mod["main"].params] == ["x"]
    ours = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_array_equal(ours, want)
    np.testing.assert_array_equal(tflm_run(frozen, {0: x})[0], want)
