"""Dynamically quantized ONNX models, as onnxruntime's own quantizer (``quantize_dynamic``) writes them:
``ConvInteger`` / ``MatMulInteger`` behind ``DynamicQuantizeLinear``, and ``com.microsoft.DynamicQuantizeLSTM``
(:mod:`tvm_memsched.relax.frontends.onnx_integer`, :mod:`tvm_memsched.relax.frontends.onnx_recurrent`).
onnxruntime is run with exact integer products (``session.x64quantprecision``) and one thread, as
``compare`` runs it: the integer layers then equal it bit for bit."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_cli import run
from tvm_memsched.relax.frontends.onnx_frontend import from_onnx_bytes, quantizes_at_run_time

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")


def _reference(buf, feeds):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.x64quantprecision", "1")
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(buf, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _ours(buf, feeds):
    import tvm
    from tvm import relax

    mod = from_onnx_bytes(buf)
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(feeds[str(p.name)]) for p in mod["main"].params])
    return [o.numpy() for o in (out if isinstance(out, (list, tuple)) or not hasattr(out, "numpy") else [out])]


def _quantized(model, tmp_path, weight_type, per_channel):
    import onnx

    src, dst = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(model, str(src))
    quantization.quantize_dynamic(str(src), str(dst), weight_type=getattr(quantization.QuantType, weight_type),
                                  per_channel=per_channel)
    return onnx.load(str(dst))


def _cnn(rng, rank: int = 2):
    """conv (strided, padded, bias) -> Relu -> depthwise conv (auto_pad SAME_UPPER) -> Flatten -> Gemm."""
    sp = [8] * rank
    w1 = rng.standard_normal([8, 3] + [3] * rank).astype(np.float32) * 0.3
    w2 = rng.standard_normal([8, 1] + [3] * rank).astype(np.float32) * 0.3
    wf = rng.standard_normal((10, 8 * 4 ** rank)).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1] * (2 * rank), strides=[2] * rank),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "W2"], ["d"], auto_pad="SAME_UPPER", group=8),
             helper.make_node("Flatten", ["d"], ["f"]),
             helper.make_node("Gemm", ["f", "Wf"], ["y"], transB=1)]
    inits = [numpy_helper.from_array(w1, "W"), numpy_helper.from_array(w2, "W2"), numpy_helper.from_array(wf, "Wf"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "B")]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3] + sp)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("weight_type,per_channel", [("QInt8", False), ("QUInt8", False), ("QInt8", True)])
def test_conv_integer_and_matmul_integer_equal_onnxruntime(tmp_path, rank, weight_type, per_channel):
    rng = np.random.default_rng(rank)
    q = _quantized(_cnn(rng, rank), tmp_path, weight_type, per_channel)
    ops = [n.op_type for n in q.graph.node]
    assert ops.count("ConvInteger") == 2 and "MatMulInteger" in ops and quantizes_at_run_time(q)
    buf = q.SerializeToString()
    feeds = {"x": rng.uniform(-2, 2, [1, 3] + [8] * rank).astype(np.float32)}
    got, want = _ours(buf, feeds), _reference(buf, feeds)
    # integer products, then the same float scaling: equal
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def test_conv_integer_pads_with_the_zero_point():
    """uint8 activations with zero point 128 and a uint8 kernel with zero point 3: padding is the real 0."""
    rng = np.random.default_rng(5)
    w = rng.integers(0, 255, (4, 2, 3, 3), dtype=np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 2, 1, 0], strides=[1, 2],
                            dilations=[1, 1])
    g = helper.make_graph([node], "ci", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 2, 6, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(128, np.uint8), "xz"),
                           numpy_helper.from_array(np.array(3, np.uint8), "wz")])
    buf = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    feeds = {"x": rng.integers(0, 255, (1, 2, 6, 7), dtype=np.uint8)}
    got, want = _ours(buf, feeds), _reference(buf, feeds)
    assert got[0].dtype == np.int32 and np.array_equal(got[0], want[0])


def _lstm(rng, dirs, batch, seq, inp, hid, bias, peep, init, **attrs):
    names, inits = ["x", "W", "R"], [
        numpy_helper.from_array(rng.standard_normal((dirs, 4 * hid, inp)).astype(np.float32) * 0.4, "W"),
        numpy_helper.from_array(rng.standard_normal((dirs, 4 * hid, hid)).astype(np.float32) * 0.4, "R")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, inp])]
    names.append("B" if bias else "")
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 8 * hid)).astype(np.float32) * 0.2, "B"))
    names.append("")
    if init:
        names += ["h0", "c0"]
        ins += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [dirs, batch, hid]) for n in ("h0", "c0")]
    else:
        names += ["", ""]
    if peep:
        names.append("P")
        inits.append(numpy_helper.from_array(rng.standard_normal((dirs, 3 * hid)).astype(np.float32) * 0.3, "P"))
    node = helper.make_node("LSTM", names, ["Y", "Yh", "Yc"], hidden_size=hid,
                            direction="bidirectional" if dirs == 2 else "forward", **attrs)
    g = helper.make_graph([node], "lstm", ins, [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                                for n in ("Y", "Yh", "Yc")], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


LSTMS = {
    "forward": dict(dirs=1, batch=1, seq=6, inp=5, hid=4, bias=True, peep=False, init=False),
    "bidirectional_peepholes_states": dict(dirs=2, batch=1, seq=5, inp=3, hid=6, bias=True, peep=True, init=True),
    "batch3_clip_no_bias": dict(dirs=1, batch=3, seq=4, inp=4, hid=5, bias=False, peep=False, init=True, clip=1.5),
    "input_forget": dict(dirs=1, batch=1, seq=4, inp=4, hid=5, bias=True, peep=False, init=False, input_forget=1),
}


@pytest.mark.parametrize("case", sorted(LSTMS))
@pytest.mark.parametrize("weight_type,per_channel", [("QInt8", False), ("QUInt8", True)])
def test_dynamic_quantize_lstm_equals_onnxruntime(tmp_path, case, weight_type, per_channel):
    rng = np.random.default_rng(len(case))
    q = _quantized(_lstm(rng, **LSTMS[case]), tmp_path, weight_type, per_channel)
    assert [(n.op_type, n.domain) for n in q.graph.node] == [("DynamicQuantizeLSTM", "com.microsoft")]
    buf = q.SerializeToString()
    feeds = {i.name: rng.uniform(-1.5, 1.5, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in q.graph.input}
    got, want = _ours(buf, feeds), _reference(buf, feeds)
    # same quantized products; onnxruntime's Sigmoid/Tanh are polynomial approximations (last bits differ)
    assert len(got) == 3 and all(a.shape == b.shape for a, b in zip(got, want))
    assert max(float(np.max(np.abs(a - b))) for a, b in zip(got, want)) < 1e-5


def test_dynamic_quantize_lstm_with_zero_points_per_column_is_refused_by_name(tmp_path):
    """onnxruntime reads one zero point per direction (and refuses others); so does the importer, by name."""
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(3)
    q = _quantized(_lstm(rng, **LSTMS["forward"]), tmp_path, "QUInt8", True)
    for t in q.graph.initializer:
        if t.name.endswith("zero_point") and "W" in t.name.split("_")[0]:
            z = nh.to_array(t).copy()
            z.reshape(-1)[-1] ^= 1
            t.CopyFrom(nh.from_array(z, t.name))
    with pytest.raises(Exception, match="zero points of W differ along the gate columns"):
        from_onnx_bytes(q.SerializeToString())


@pytest.mark.slow
def test_compare_and_micro_on_a_dynamically_quantized_model(tmp_path):
    """``compare`` checks against onnxruntime and says the model quantizes at run time; ``micro --run`` builds
    the integer convolutions and the quantized LSTM for the board and gets TVM's outputs."""
    import onnx

    rng = np.random.default_rng(7)
    cnn = _cnn(rng)
    lstm = _lstm(rng, dirs=1, batch=1, seq=1, inp=10, hid=6, bias=True, peep=False, init=False)
    g = cnn.graph
    g.node.append(helper.make_node("Unsqueeze", ["y", "axis0"], ["seq"]))
    node = lstm.graph.node[0]
    node.input[0] = "seq"
    for k in (1, 2, 3):                      # the LSTM's W, R, B: apart from the convolution's W and B
        node.input[k] = "lstm_" + node.input[k]
    for t in lstm.graph.initializer:
        t.name = "lstm_" + t.name
    g.node.append(node)
    g.initializer.extend(list(lstm.graph.initializer) + [numpy_helper.from_array(np.array([0], np.int64), "axis0")])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 1, 1, 6]))
    q = _quantized(cnn, tmp_path, "QInt8", False)
    assert {"ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM"} <= {n.op_type for n in q.graph.node}
    path = tmp_path / "cnn_lstm.dynamic.onnx"
    onnx.save(q, str(path))
    proc = run("compare", str(path), "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ours vs onnxruntime (CPU)" in proc.stdout and "MISMATCH" not in proc.stdout
    assert "quantizes activations at run time" in proc.stdout
    proc = run("micro", str(path), "-b", "mps2-an386", "--out", str(tmp_path / "fw"), "--run", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "max abs error vs TVM" in proc.stdout and "(ok)" in proc.stdout
