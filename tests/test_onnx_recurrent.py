"""ONNX LSTM, GRU and RNN (TVM's importer has none): unrolled Relax against onnxruntime, streaming state,
every attribute of the specification, and the microcontroller path."""

import numpy as np
import pytest

import onnx_models
from tvm_memsched.core.errors import UnsupportedError
from tvm_memsched.relax.frontends.onnx_frontend import from_onnx_bytes

ort = pytest.importorskip("onnxruntime")


def _vm(mod):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())

    def run(*arrays):
        out = vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays])
        return [out[i].numpy() for i in range(len(out))]

    return run


def _ort(buf):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(buf, opts, providers=["CPUExecutionProvider"])
    return lambda feeds: s.run(None, feeds)


def _feeds(buf, seed=0):
    rng = np.random.default_rng(seed)
    import onnx

    g = onnx.load_model_from_string(buf).graph
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in g.input if i.name not in {t.name for t in g.initializer}}


CASES = [dict(kind=k, direction=d) for k in ("LSTM", "GRU", "RNN") for d in ("forward", "reverse", "bidirectional")]
CASES += [
    dict(kind="LSTM", bias=False, state_inputs=False),
    dict(kind="LSTM", peepholes=True, direction="bidirectional"),
    dict(kind="LSTM", clip=0.5),
    dict(kind="LSTM", input_forget=1),
    dict(kind="LSTM", activations=["HardSigmoid", "ScaledTanh", "Affine"], activation_alpha=[0.3, 0.7, 1.5],
         activation_beta=[0.4, 1.2, 0.1]),
    dict(kind="GRU", linear_before_reset=1),
    dict(kind="GRU", linear_before_reset=1, direction="bidirectional", clip=1.0),
    dict(kind="GRU", activations=["Sigmoid", "LeakyRelu"], activation_alpha=[0.1], bias=False, state_inputs=False),
    dict(kind="RNN", activations=["Relu"]),
    dict(kind="RNN", activations=["Softsign"]),
    dict(kind="RNN", activations=["Elu", "Softplus"], direction="bidirectional"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_recurrent_operator_equals_onnxruntime(case):
    buf = onnx_models.recurrent_model(**case)
    feeds = _feeds(buf)
    mod = from_onnx_bytes(buf)
    ours = _vm(mod)(*[feeds[p.name] for p in mod["main"].params])
    ref = _ort(buf)(feeds)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_batch_major_layout_is_the_sequence_major_one_transposed(kind):
    """layout=1 ([batch, seq, ...], which onnxruntime does not run) against layout=0 on transposed data."""
    b0 = onnx_models.recurrent_model(kind, direction="bidirectional")
    b1 = onnx_models.recurrent_model(kind, direction="bidirectional", layout=1)
    f0 = _feeds(b0)
    m0, m1 = from_onnx_bytes(b0), from_onnx_bytes(b1)
    f1 = {"X": f0["X"].transpose(1, 0, 2), **{k: v.transpose(1, 0, 2) for k, v in f0.items() if k != "X"}}
    r0 = _vm(m0)(*[f0[p.name] for p in m0["main"].params])
    r1 = _vm(m1)(*[f1[p.name] for p in m1["main"].params])
    np.testing.assert_array_equal(r1[0], r0[0].transpose(2, 0, 1, 3))
    for a, b in zip(r1[1:], r0[1:]):
        np.testing.assert_array_equal(a, b.transpose(1, 0, 2))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_streaming_state_carried_by_the_caller_equals_the_whole_sequence(kind):
    """Three chunks of 2 steps, each invocation's Y_h (and Y_c) fed back as the next one's initial state: the
    same outputs as one run over the 6 steps (ours and onnxruntime's)."""
    chunk = onnx_models.recurrent_model(kind, seq=2, batch=1)
    whole = onnx_models.recurrent_model(kind, seq=6, batch=1)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 1, 3)).astype(np.float32)
    zeros = np.zeros((1, 1, 5), np.float32)
    states = {"h0": zeros, "c0": zeros} if kind == "LSTM" else {"h0": zeros}
    mod = from_onnx_bytes(chunk)
    run = _vm(mod)
    ys = []
    for t in range(0, 6, 2):
        feeds = {"X": x[t:t + 2], **states}
        out = run(*[feeds[p.name] for p in mod["main"].params])
        ref = _ort(chunk)(feeds)
        for a, b in zip(out, ref):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
        ys.append(out[0])
        states = dict(zip(states, out[1:]))
    full = _ort(whole)({"X": x, **{k: zeros for k in states}})
    np.testing.assert_allclose(np.concatenate(ys), full[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(out[1:], full[1:]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_short_sequence_lengths_are_refused_by_name():
    import onnx
    from onnx import numpy_helper

    m = onnx.load_model_from_string(onnx_models.recurrent_model("GRU"))
    m.graph.initializer.append(numpy_helper.from_array(np.array([4, 2], np.int32), "lens"))
    m.graph.node[0].input[4] = "lens"
    with pytest.raises(UnsupportedError, match="GRU: sequence_lens"):
        from_onnx_bytes(m.SerializeToString())
    m.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.array([4, 4], np.int32), "lens"))
    assert from_onnx_bytes(m.SerializeToString()) is not None       # full lengths: the plain recurrence


def test_unknown_dimensions_written_as_minus_one_or_zero_are_bound_by_input_shape():
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 0, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, 0, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    buf = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(UnsupportedError, match=r"input 'x' has a symbolic shape \(\?x3x\?x8\)"):
        from_onnx_bytes(buf)
    mod = from_onnx_bytes(buf, {"x": (1, 3, 5, 8)})
    assert [int(d) for d in mod["main"].params[0].ty.shape.values] == [1, 3, 5, 8]
    with pytest.raises(UnsupportedError, match="has shape"):
        from_onnx_bytes(buf, {"x": (1, 4, 5, 8)})           # a static dimension still has to match


@pytest.mark.slow
def test_gru_and_lstm_run_on_the_microcontroller(tmp_path):
    from tvm_memsched import micro

    for kind in ("GRU", "LSTM"):
        mod = from_onnx_bytes(onnx_models.recurrent_model(kind, seq=3, batch=1))
        exp = micro.export(mod, "mps2-an386", str(tmp_path / kind), measure=False)
        r = micro.run_host(exp)
        assert r.ok, r.summary()
