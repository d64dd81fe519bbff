"""FloatKernels: float32 conv2d / matmul chains as described TE kernels computing TVM's very floats."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_memsched.relax.passes.float_kernels import FloatKernels, lower_float
from tvm_memsched.relax.int8.kernels import description


def run(mod, inputs):
    ex = tvm.compile(mod, target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy()


def nhwc_block(act="relu", residual=True, depthwise=False, seed=0):
    """conv (NHWC, HWIO weights) + bias [+ residual] + activation, then a matmul + bias head."""
    rng = np.random.default_rng(seed)
    c = 6
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 7, 5, c], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            if depthwise:
                w = relax.const(rng.standard_normal((3, 3, c, 1)).astype("float32"))
                y = bb.emit(relax.op.nn.conv2d(x, w, padding=(1, 1), groups=c, data_layout="NHWC",
                                               kernel_layout="HWOI"))
            else:
                w = relax.const(rng.standard_normal((3, 3, c, c)).astype("float32"))
                y = bb.emit(relax.op.nn.conv2d(x, w, strides=(1, 1), padding=(1, 1), data_layout="NHWC",
                                               kernel_layout="HWIO"))
            y = bb.emit(relax.op.add(y, relax.const(rng.standard_normal(c).astype("float32"))))
            if residual:
                y = bb.emit(relax.op.add(y, x))
            if act == "relu":
                y = bb.emit(relax.op.nn.relu(y))
            elif act == "clip":
                y = bb.emit(relax.op.clip(y, 0.0, 6.0))
            elif act == "minmax":
                y = bb.emit(relax.op.minimum(relax.op.maximum(y, relax.const(np.float32(-1.0))),
                                             relax.const(np.float32(1.0))))
            f = bb.emit(relax.op.reshape(y, [1, 7 * 5 * c]))
            wf = relax.const(rng.standard_normal((7 * 5 * c, 4)).astype("float32"))
            out = bb.emit(relax.op.add(relax.op.matmul(f, wf), relax.const(rng.standard_normal(4).astype("float32"))))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.finalize()


@pytest.mark.parametrize("act,residual,depthwise", [("relu", True, False), ("clip", False, False),
                                                    ("minmax", True, False), (None, False, True),
                                                    ("relu", True, True)])
def test_chains_become_one_described_kernel_with_tvms_floats(act, residual, depthwise):
    mod = nhwc_block(act, residual, depthwise)
    new, rep = lower_float(mod)
    assert rep.lowered == {"DEPTHWISE_CONV_2D" if depthwise else "CONV_2D": 1, "FULLY_CONNECTED": 1}
    descs = [description(f) for f in new.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    conv = next(d for d in descs if d and "conv" in d["op"])
    assert conv["residual"] == residual and conv["has_bias"]
    assert (conv["lo"], conv["hi"]) == {"relu": (0.0, None), "clip": (0.0, 6.0), "minmax": (-1.0, 1.0),
                                        None: (None, None)}[act]
    names = [b.value.op.name for b in new["main"].body.blocks[0].bindings if isinstance(b.value, relax.Call)]
    assert "relax.nn.conv2d" not in names and "relax.nn.relu" not in names and "relax.matmul" not in names
    x = np.random.default_rng(1).standard_normal((1, 7, 5, 6)).astype("float32")
    assert np.array_equal(run(mod, [x]), run(new, [x]))


def test_nchw_and_shared_intermediates_are_left_to_tvm():
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 3, 8, 8], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, relax.const(rng.standard_normal((4, 3, 3, 3)).astype("float32"))))
            out = bb.emit_output(relax.op.add(y, y))
        bb.emit_func_output(out)
    mod = bb.finalize()
    new, rep = lower_float(mod)
    assert rep.total == 0


def test_pass_form_and_zoo_model_numerics():
    from tvm_memsched import zoo
    from tvm_memsched.relax.compare import random_inputs
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    mod = from_tflite_bytes(zoo.tflite("resnet8", "float32"))
    p = FloatKernels()
    new = p(mod)
    assert p.report.lowered == {"CONV_2D": 9, "FULLY_CONNECTED": 1}
    x = random_inputs(mod["main"], seed=3)
    assert np.array_equal(run(mod, x), run(new, x))
