"""info names a .tflite's quantization scheme: each scheme built here with the flatbuffer API."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tvm_memsched.tflite.builder import ModelBuilder, load, tfl
from tvm_memsched.tflite.quantization import quantization_scheme

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fc(act_dtype, w_dtype, dequantize=False, act_scale=None):
    mb = ModelBuilder()
    q = dict(scale=[act_scale], zero_point=[0]) if act_scale else {}
    x = mb.tensor("x", [1, 4], act_dtype, **q)
    wq = dict(scale=[0.5] * 3, zero_point=[0] * 3) if np.dtype(w_dtype).kind == "i" else {}
    w = mb.tensor("w", [3, 4], w_dtype, data=np.ones((3, 4), w_dtype), **wq)
    if dequantize:
        wf = mb.tensor("wf", [3, 4])
        mb.op(tfl.BuiltinOperator.DEQUANTIZE, [w], [wf])
        w = wf
    y = mb.tensor("y", [1, 3], act_dtype, **q)
    mb.op(tfl.BuiltinOperator.FULLY_CONNECTED, [x, w, -1], [y])
    return mb.finish(inputs=[x], outputs=[y])


@pytest.mark.parametrize("args,scheme", [
    ((np.float32, np.float32), "float32"),
    ((np.float32, np.int8), "dynamic-range (hybrid)"),
    ((np.float32, np.float16, True), "float16 weights"),
    ((np.float32, np.int8, True), "int8 weights"),
    ((np.int8, np.int8, False, 0.1), "full integer (int8)"),
    ((np.int16, np.int8, False, 0.1), "int16x8"),
])
def test_schemes(args, scheme):
    assert quantization_scheme(load(_fc(*args))) == scheme


def test_info_prints_the_scheme(tmp_path):
    path = tmp_path / "hybrid.tflite"
    path.write_bytes(_fc(np.float32, np.int8))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "tvm_memsched", "info", str(path), "--json"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["quantization"] == "dynamic-range (hybrid)"


def test_zoo_writes_float16_weight_models_litert_runs():
    """zoo:NAME:float16: every convolution and dense weight and bias stored float16 and widened by DEQUANTIZE
    (version 3); LiteRT runs it and computes the float32 model on the rounded weights."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from tvm_memsched import zoo
    from tvm_memsched.tflite.builder import load, opcode_name

    buf, buf32 = zoo.tflite("ds_cnn", "float16"), zoo.tflite("ds_cnn")
    m = load(buf)
    assert quantization_scheme(m) == "float16 weights" and len(buf) < 0.6 * len(buf32)
    sg = m.subgraphs[0]
    deq = [op for op in sg.operators if opcode_name(m.operatorCodes[op.opcodeIndex]) == "DEQUANTIZE"]
    assert deq and all(m.operatorCodes[op.opcodeIndex].version == 3 for op in deq)
    outs = []
    for b in (buf, buf32):
        it = Interpreter(model_content=b, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        it.allocate_tensors()
        d = it.get_input_details()[0]
        it.set_tensor(d["index"], np.linspace(-1, 1, int(np.prod(d["shape"])), dtype=np.float32).reshape(d["shape"]))
        it.invoke()
        outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
    assert 0 < np.max(np.abs(outs[0] - outs[1])) < 0.05 * np.max(np.abs(outs[1]))


def test_zoo_float16_spec_in_info_and_graph():
    from tvm_memsched.app.models import load_graph_spec, parse_zoo_spec

    assert parse_zoo_spec("zoo:ds_cnn:float16") == ("ds_cnn", "float16")
    assert sum(load_graph_spec("zoo:ds_cnn:float16").size) == sum(load_graph_spec("zoo:ds_cnn").size)  # float32
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "tvm_memsched", "info", "zoo:ds_cnn:float16", "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["quantization"] == "float16 weights"
