"""Quantized TFLite recurrent operators: int8 UNIDIRECTIONAL_SEQUENCE_LSTM bit-identical to TFLite Micro with
its state carried over invocations, integer kernels only."""

import numpy as np
import pytest

import recurrent_models as RM
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.frontends.tflite_state import run_sequence, states


def _float_ops(mod) -> list:
    """The float tensors main computes (an integer model must have none)."""
    from tvm import relax

    found = []

    def visit(e):
        ty = getattr(e, "ty", None)
        if isinstance(e, relax.Call) and isinstance(ty, relax.TensorType) and "float" in str(ty.dtype):
            found.append(e)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


def _ours_and_tflm(buf, seq):
    import tvm

    from tvm_memsched.tflite.verify import tflm_run_sequence

    mod = from_tflite_bytes(buf)
    ours = run_sequence(tvm.compile(mod, "llvm"), mod, seq)
    ref = tflm_run_sequence(buf, [{"0": s[0]} for s in seq])
    return mod, ours, ref


INT8_FORMS = [dict(seed=0), dict(seed=1, batch=2), dict(seed=2, time_major=True, batch=2),
              dict(seed=3, cell_clip=0.5, cell_power=-11), dict(seed=4, cell_power=-15, steps=1),
              dict(seed=5, cell_power=-10, n_in=5, n_cell=3)]


@pytest.mark.parametrize("form", INT8_FORMS, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_int8_lstm_bit_identical_to_tflm_over_invocations(form):
    form = dict(form)
    rng = np.random.default_rng(form.pop("seed"))
    buf = RM.int8_lstm(rng, **form)
    seq = RM.int8_inputs(buf, rng, 3)
    mod, ours, ref = _ours_and_tflm(buf, seq)
    assert [(s.name, s.dtype) for s in states(mod)] == [("h", "int8"), ("c", "int16")]
    assert not _float_ops(mod)
    for a, b in zip(ours, ref):
        assert a[0].dtype == np.int8
        np.testing.assert_array_equal(a[0], np.asarray(b[0]).reshape(a[0].shape))
    # the outputs vary and the state matters: the third invocation differs from a fresh one on its input
    assert len(np.unique(ref[2][0])) > 3
    fresh = _ours_and_tflm(buf, seq[2:])[2][0][0]
    assert not np.array_equal(fresh, ref[2][0])


def test_int8_lstm_refuses_what_tflm_cannot_run():
    from tvm_memsched.core.errors import InputFileError
    from tvm_memsched.tflite.builder import load, serialize

    rng = np.random.default_rng(7)
    m = load(RM.int8_lstm(rng))
    op = m.subgraphs[0].operators[0]
    op.inputs = np.array(op.inputs)
    op.inputs[1] = -1                                  # no input gate (CIFG): TFLM's integer LSTM needs it
    with pytest.raises(InputFileError, match="int8 UNIDIRECTIONAL_SEQUENCE_LSTM with no input gate"):
        from_tflite_bytes(serialize(m))


SVDF_FORMS = [dict(seed=0), dict(seed=1, batch=2, rank=1, act=1), dict(seed=2, memory=1, bias=False, act=3),
              dict(seed=3, kind="int8"), dict(seed=4, kind="int8", batch=2, rank=1, memory=3),
              dict(seed=5, kind="int8", state_dtype=np.int8), dict(seed=6, kind="int8", act=1, units=2, rank=3)]


@pytest.mark.parametrize("form", SVDF_FORMS, ids=lambda f: "-".join(f"{k}={getattr(v, '__name__', v)}"
                                                                    for k, v in f.items()))
def test_svdf_equals_tflm_over_invocations(form):
    """SVDF's memory carried over invocations: float32 within 1e-5 of TFLite Micro (LiteRT without a bias),
    int8 bit-identical to TFLM (which applies no activation to an integer SVDF)."""
    form = dict(form)
    rng = np.random.default_rng(form.pop("seed"))
    buf = RM.svdf(rng, **form)
    if form.get("kind") == "int8":
        seq = RM.int8_inputs(buf, rng, 3)
    else:
        seq = [[rng.uniform(-1, 1, [form.get("batch", 1), 5]).astype(np.float32)] for _ in range(3)]
    if form.get("bias", True):
        mod, ours, ref = _ours_and_tflm(buf, seq)
    else:                               # TFLite Micro crashes on an SVDF without bias: LiteRT's reference
        import tvm

        from tvm_memsched.tflite.verify import litert_run_sequence

        mod = from_tflite_bytes(buf)
        ours = run_sequence(tvm.compile(mod, "llvm"), mod, seq)
        ref = [list(r.values()) for r in litert_run_sequence(buf, seq, reference_kernels=True)]
    (st,) = states(mod)
    assert st.name == "state"
    for a, b in zip(ours, ref):
        b = np.asarray(b[0]).reshape(a[0].shape)
        if form.get("kind") == "int8":
            assert not _float_ops(mod)
            np.testing.assert_array_equal(a[0], b)
        else:
            np.testing.assert_allclose(a[0], b, rtol=1e-5, atol=1e-6)
    if form.get("memory", 4) > 1:       # the memory matters: the last invocation differs from a fresh one's
        fresh = _ours_and_tflm(buf, seq[2:])[2][0][0]
        assert not np.array_equal(fresh, ref[2][0])


# ------------------------------------------------------------------ microcontroller (QEMU mps2-an386)
def _coverage(name):
    import os

    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "coverage", name)


MICRO_CASES = {
    "lstm_int8": lambda: open(_coverage("unidirectional_sequence_lstm.int8.tflite"), "rb").read(),
    "lstm_int8_batch2": lambda: RM.int8_lstm(np.random.default_rng(1), batch=2, steps=4, n_in=8, n_cell=16),
    "svdf_int8": lambda: RM.svdf(np.random.default_rng(3), kind="int8", units=8, rank=2, memory=8, n_in=16),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(MICRO_CASES))
def test_micro_run_bit_identical_to_tflm_within_its_arena(case, tmp_path):
    """``micro --run`` on QEMU: 20 invocations with the state carried, bit-identical to TFLite Micro, in less
    RAM than TFLM's smallest arena."""
    from test_cli import run

    path = tmp_path / f"{case}.tflite"
    path.write_bytes(MICRO_CASES[case]())
    p = run("micro", str(path), "-b", "mps2-an386", "--out", str(tmp_path / "m"), "--run")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "max abs error vs TFLite Micro 0 (ok)" in p.stdout
    assert "vs TFLite Micro over 20 invocations: bit-identical (ok)" in p.stdout
    assert "at most TFLM's" in p.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", ["unidirectional_sequence_lstm_large.hybrid.tflite",
                                  "unidirectional_sequence_lstm.float16.tflite"])
def test_micro_run_hybrid_and_float16_lstm_like_litert(name, tmp_path):
    from test_cli import run

    p = run("micro", _coverage(name), "-b", "mps2-an386", "--out", str(tmp_path / "m"), "--run")
    assert p.returncode == 0, p.stderr + p.stdout
    assert "vs LiteRT reference kernels over 20 invocations" in p.stdout and "(ok)" in p.stdout
