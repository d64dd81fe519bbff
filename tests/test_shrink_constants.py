"""ShrinkConstants: broadcast constants back at their stored shape; identical constants stored once."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_memsched import micro
from tvm_memsched.relax.compare import random_inputs, run_vm
from tvm_memsched.relax.pipeline import pipeline
from tvm_memsched.relax.passes.shrink_constants import shrink_constants, smallest_broadcast

LLVM = tvm.target.Target({"kind": "llvm"})
SHAPE = [1, 4, 4, 3]


def model(body):
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(SHAPE, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(body(bb, x))
        bb.emit_func_output(y)
    return bb.finalize()


def frontend_prelu(alpha):
    """PReLU as TVM's TFLite frontend imports it: on the flattened tensor with a broadcast slope.

    A float16 slope is cast to float32 first (the frontend's DEQUANTIZE of float16 weights).
    """
    def body(bb, x):
        a = relax.const(alpha)
        if alpha.dtype == np.float16:
            a = bb.emit(relax.op.astype(a, "float32"))
        a = bb.emit(relax.op.broadcast_to(a, SHAPE))
        y = bb.emit(relax.op.nn.prelu(relax.op.reshape(x, [48]), relax.op.reshape(a, [48]), axis=0))
        return relax.op.reshape(y, SHAPE)
    return model(body)


def constants(mod):
    out = []
    relax.analysis.post_order_visit(mod["main"], lambda e: out.append(e.value.numpy().shape)
                                    if isinstance(e, tvm.ir.Constant) and hasattr(e.value, "numpy") else None)
    return out


def ops(mod):
    out = []
    relax.analysis.post_order_visit(mod["main"], lambda e: out.append(e.op.name)
                                    if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op) else None)
    return out


def assert_bit_identical_builds(mod, new):
    """``new`` through our pipeline (without ShrinkConstants) gives the bits of ``mod`` through TVM's default."""
    x = random_inputs(mod["main"], seed=1)
    ref = run_vm(tvm.compile(mod, LLVM, relax_pipeline=relax.get_default_pipeline(LLVM)), x)
    got = run_vm(tvm.compile(new, LLVM, relax_pipeline=pipeline(LLVM, method="rpo", shrink_constants=False)), x)
    assert [a.tobytes() for a in ref] == [b.tobytes() for b in got]


@pytest.mark.parametrize("alpha, small, op", [
    (np.float32([0.25, -0.5, 2.0]), (3,), "relax.nn.prelu"),                        # per channel
    (np.float32([0.5]), (1,), "relax.nn.prelu"),                                     # one slope
    (np.float16([0.25, -0.5, 1.5]), (3,), "relax.nn.prelu"),                         # float16 weights
    (np.arange(12, dtype="float32").reshape(4, 1, 3) / 7 - 0.5, (1, 4, 1, 3), "relax.where"),  # rows, channels
], ids=["channel", "scalar", "float16", "two-axes"])
def test_prelu_slope_back_at_its_small_shape(alpha, small, op):
    mod = frontend_prelu(alpha)
    new, report = shrink_constants(mod)
    assert [(s.op, s.before_bytes, s.after_bytes) for s in report] == [("relax.nn.prelu", 192, 4 * alpha.size)]
    assert [c for c in constants(new) if c != ()] == [small]  # (where compares with a scalar zero)
    assert op in ops(new) and "relax.broadcast_to" not in ops(new) and "relax.reshape" not in ops(new)
    assert_bit_identical_builds(mod, new)


def test_repeating_operand_of_an_elementwise_op_shrinks_and_others_stay():
    rng = np.random.default_rng(0)
    tiled = np.broadcast_to(rng.standard_normal(3).astype("float32"), SHAPE).copy()
    varied = rng.standard_normal(SHAPE).astype("float32")
    mod = model(lambda bb, x: relax.op.multiply(bb.emit(relax.op.add(x, relax.const(tiled))), relax.const(varied)))
    new, report = shrink_constants(mod)
    assert [(s.op, s.before_bytes, s.after_bytes) for s in report] == [("relax.add", 192, 12)]
    assert sorted(constants(new)) == [(1, 1, 1, 3), tuple(SHAPE)]
    assert_bit_identical_builds(mod, new)


def test_repeats_are_bitwise():
    assert smallest_broadcast(np.float32([[0.0], [-0.0]])).shape == (2, 1)       # +0 and -0 differ
    assert smallest_broadcast(np.float32([[np.nan, 1], [np.nan, 1]])).shape == (1, 2)
    assert smallest_broadcast(np.int8([[3, 3], [3, 3]])).shape == (1, 1)


def prelu_tflite(identical_adds=True):
    """A .tflite file: PRELU with a [1, 1, C] slope, then two ADDs of equal constants (separate buffers, shapes)."""
    from tvm_memsched.tflite.builder import ModelBuilder, tfl

    mb = ModelBuilder()
    x = mb.tensor("x", SHAPE)
    alpha = mb.tensor("alpha", [1, 1, 3], data=np.float32([[[0.1, 0.2, 0.3]]]))
    p = mb.tensor("p", SHAPE)
    mb.op(tfl.BuiltinOperator.PRELU, [x, alpha], [p])
    c = np.float32([1.5, -2.0, 0.75])
    a = mb.tensor("a", SHAPE)
    mb.op(tfl.BuiltinOperator.ADD, [p, mb.tensor("c1", [3], data=c)], [a])
    y = mb.tensor("y", SHAPE)
    c2 = (c if identical_adds else c + 1).reshape(1, 1, 3)
    mb.op(tfl.BuiltinOperator.ADD, [a, mb.tensor("c2", [1, 1, 3], data=c2)], [y])
    return mb.finish(inputs=[x], outputs=[y])


def tvm_import(buf):
    """The .tflite file as TVM's own TFLite frontend imports it (PRELU slope broadcast to the whole tensor)."""
    import tflite
    from tvm.relax.frontend.tflite import from_tflite

    return from_tflite(tflite.Model.GetRootAsModel(buf, 0))


def test_micro_stores_the_model_weights_once(tmp_path):
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    mod = tvm_import(prelu_tflite())
    exp = micro.export(mod, "mps2-an386", str(tmp_path / "a"), measure=False)
    as_imported = micro.export(mod, "mps2-an386", str(tmp_path / "b"), measure=False, shrink_constants=False)
    assert [s["op"] for s in exp.shrunk_constants] == ["relax.nn.prelu"]
    assert "1 broadcast constants kept at their small shape (ShrinkConstants): 180 B less flash" in exp.summary()
    assert exp.params_bytes == 2 * 12  # the slope and one copy of the added constant: what the file stores
    assert as_imported.params_bytes == 48 * 4 + 12  # the slope broadcast to the tensor
    blobs = [a.tobytes() for a in exp.program.params]
    assert len(blobs) == len(set(blobs)) == exp.params_bytes // 12
    assert open(exp.files["params"]).read().count("_param_") == len(blobs)
    assert micro.run_host(exp).ok and micro.run_host(as_imported).ok
    distinct = micro.export(tvm_import(prelu_tflite(identical_adds=False)), "mps2-an386",
                            str(tmp_path / "c"), measure=False)
    assert distinct.params_bytes == 3 * 12
    # our frontend keeps the slope at its stored shape from the start: nothing left to shrink
    ours = micro.export(from_tflite_bytes(prelu_tflite()), "mps2-an386", str(tmp_path / "d"), measure=False)
    assert ours.shrunk_constants == [] and ours.params_bytes == 2 * 12


def test_on_by_default_in_pipeline_and_compare():
    from tvm_memsched.relax.compare import compare

    assert pipeline(LLVM).pass_names()[:2] == ["IntegerLowering", "ShrinkConstants"]
    assert "ShrinkConstants" not in pipeline(LLVM, shrink_constants=False).pass_names()
    c = compare(frontend_prelu(np.float32([0.25, -0.5, 2.0])), method="rpo")
    assert c.numerics_ok and c.max_abs_diff == 0.0
