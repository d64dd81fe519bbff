"""TFLite UNIDIRECTIONAL_SEQUENCE_LSTM: every float form LiteRT's kernel runs, its variable state tensors kept
from one invocation to the next as LiteRT and TFLite Micro keep them."""

import numpy as np
import pytest

import tflite_ops
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.frontends.tflite_state import run_sequence, states

FORMS = [{}, dict(cifg=True), dict(peephole=True), dict(projection=True), dict(projection=True, proj_clip=0.3),
         dict(layer_norm=True), dict(layer_norm=True, cifg=True, peephole=True), dict(time_major=True),
         dict(cell_clip=0.4), dict(act=1), dict(act=3, batch=1, steps=1)]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()) or "keras")
def test_lstm_form_equals_litert_over_invocations(form):
    import tvm

    from tvm_memsched.tflite.verify import litert_run_sequence

    rng = np.random.default_rng(1)
    buf = tflite_ops.sequence_lstm(rng, **form)
    mod = from_tflite_bytes(buf)
    assert [s.name for s in states(mod)] == ["h", "c"]
    assert all(not s.init.any() for s in states(mod))
    shape = [int(d) for d in mod["main"].params[0].ty.shape.values]
    seq = [[rng.standard_normal(shape).astype(np.float32)] for _ in range(3)]
    ours = run_sequence(tvm.compile(mod, "llvm"), mod, seq)
    ref = [list(r.values()) for r in litert_run_sequence(buf, seq, reference_kernels=True)]
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
    # the state matters: the second invocation differs from a fresh interpreter's on the same input
    fresh = litert_run_sequence(buf, seq[1:2], reference_kernels=True)[0]
    assert not np.allclose(list(fresh.values())[0], ref[1][0])
