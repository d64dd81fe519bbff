"""Dynamic-range quantized ("hybrid") .tflite models: imported as LiteRT's builtin kernels compute them."""

import functools

import numpy as np
import pytest

from tvm_memsched.tflite.builder import ModelBuilder, load, opcode_name, tfl

pytest.importorskip("ai_edge_litert")

B = tfl.BuiltinOperator


def litert(buf, x, resolver="BUILTIN_REF"):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=buf, experimental_op_resolver_type=getattr(OpResolverType, resolver))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


@functools.lru_cache(maxsize=4)
def _compiled(buf):
    import tvm
    from tvm import relax

    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    return relax.VirtualMachine(tvm.compile(from_tflite_bytes(buf), "llvm"), tvm.cpu())


def ours(buf, x):
    """Our host build of ``buf`` (compiled once per file) run on ``x``."""
    import tvm

    return _compiled(bytes(buf))["main"](tvm.runtime.tensor(x)).numpy()


def inputs(shape, seed=0):
    """Mixed signs, all positive (a ReLU's output), all zero, and a wide range."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    wide = (x * np.exp(3 * rng.standard_normal(shape))).astype(np.float32)
    return {"mixed": x, "positive": np.abs(x), "zero": np.zeros(shape, np.float32), "wide": wide}


def one_op(kind, scales="channel", act=tfl.ActivationFunctionType.NONE, asymmetric=False, stride=1,
           padding="SAME", channels=6, seed=0, qdim=None, bias_size=None, multiplier=1):
    """One hybrid operator: int8 weights (``scales``: per channel, per tensor, or per channel all equal;
    ``qdim`` overrides their axis, ``bias_size`` the bias's length, to make broken files)."""
    rng = np.random.default_rng(seed)
    mb = ModelBuilder()
    if kind == "fc":
        x = mb.tensor("x", [2, 20])
        wshape, axis, out_shape = (channels, 20), 0, [2, channels]
    elif kind == "tconv":                        # TRANSPOSE_CONV: (output shape, weights, input, bias)
        x = mb.tensor("x", [1, 5, 6, 4])
        wshape, axis = (channels, 3, 3, 4), 0
        out_shape = [1, 5 * stride, 6 * stride, channels] if padding == "SAME" else \
            [1, 4 * stride + 3, 5 * stride + 3, channels]
    else:
        x = mb.tensor("x", [1, 9, 9, 4])
        oc = 4 * multiplier if kind == "dw" else channels
        wshape = (1, 3, 3, oc) if kind == "dw" else (channels, 3, 3, 4)
        axis = 3 if kind == "dw" else 0
        o = -(-9 // stride) if padding == "SAME" else (9 - 3) // stride + 1
        out_shape = [1, o, o, oc]
    n = wshape[axis]
    s = {"channel": rng.uniform(0.002, 0.02, n), "tensor": np.full(1, 0.01), "equal": np.full(n, 0.01)}[scales]
    q = rng.integers(-127, 128, wshape).astype(np.int8)
    w = mb.tensor("w", wshape, np.int8, data=q, scale=s, zero_point=[0] * len(s),
                  quantized_dimension=axis if qdim is None else qdim)
    nb = out_shape[-1] if bias_size is None else bias_size
    b = mb.tensor("b", [nb], np.float32, data=rng.standard_normal(nb).astype(np.float32))
    y = mb.tensor("y", out_shape)
    pad = getattr(tfl.Padding, padding)
    if kind == "tconv":
        shape = mb.tensor("shape", [4], np.int32, data=np.array(out_shape, np.int32))
        opt = tfl.TransposeConvOptionsT()
        opt.padding, opt.strideH, opt.strideW, opt.fusedActivationFunction = pad, stride, stride, act
        mb.op(B.TRANSPOSE_CONV, [shape, w, x, b], [y], tfl.BuiltinOptions.TransposeConvOptions, opt, version=4)
    elif kind == "fc":
        opt = tfl.FullyConnectedOptionsT()
        opt.fusedActivationFunction, opt.asymmetricQuantizeInputs = act, asymmetric
        mb.op(B.FULLY_CONNECTED, [x, w, b], [y], tfl.BuiltinOptions.FullyConnectedOptions, opt,
              version=12 if len(s) > 1 else 3)
    elif kind == "dw":
        opt = tfl.DepthwiseConv2DOptionsT()
        opt.padding, opt.strideH, opt.strideW, opt.depthMultiplier = pad, stride, stride, multiplier
        opt.dilationHFactor = opt.dilationWFactor = 1
        opt.fusedActivationFunction = act
        mb.op(B.DEPTHWISE_CONV_2D, [x, w, b], [y], tfl.BuiltinOptions.DepthwiseConv2DOptions, opt, version=6)
    else:
        opt = tfl.Conv2DOptionsT()
        opt.padding, opt.strideH, opt.strideW = pad, stride, stride
        opt.dilationHFactor = opt.dilationWFactor = 1
        opt.fusedActivationFunction = act
        mb.op(B.CONV_2D, [x, w, b], [y], tfl.BuiltinOptions.Conv2DOptions, opt, version=5 if len(s) > 1 else 2)
    return mb.finish(inputs=[x], outputs=[y]), [int(d) for d in mb.tensors[x].shape]


A = tfl.ActivationFunctionType
CASES = [("conv", dict(scales="channel")), ("conv", dict(scales="tensor")), ("conv", dict(scales="equal")),
         ("conv", dict(stride=2, act=A.RELU6)), ("conv", dict(padding="VALID", act=A.RELU)),
         ("dw", dict()), ("dw", dict(stride=2, act=A.RELU)), ("dw", dict(scales="equal")), ("dw", dict(multiplier=2)),
         ("fc", dict(scales="tensor")), ("fc", dict(scales="channel")), ("fc", dict(asymmetric=True)),
         ("fc", dict(scales="tensor", asymmetric=True, act=A.RELU_N1_TO_1)),
         ("tconv", dict()), ("tconv", dict(stride=2, act=A.RELU)), ("tconv", dict(scales="tensor", stride=2)),
         ("tconv", dict(padding="VALID", stride=2, act=A.RELU6)), ("tconv", dict(padding="VALID", stride=1))]


@pytest.mark.parametrize("kind,kw", CASES, ids=[f"{k}-{'-'.join(f'{a}={b}' for a, b in kw.items())}"
                                                 for k, kw in CASES])
def test_one_hybrid_operator_equals_litert_reference_kernels(kind, kw):
    """Each quantizer (asymmetric / symmetric), rescale order and activation: the very floats of LiteRT's
    builtin reference kernels (which the optimized builtin ones equal to a unit in the last place)."""
    buf, shape = one_op(kind, **kw)
    for label, x in inputs(shape).items():
        ref, got = litert(buf, x), ours(buf, x)
        assert np.array_equal(got, ref), (label, float(np.max(np.abs(got - ref))))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ds_cnn", "mobilenet_v1_025"])
def test_zoo_hybrid_models_equal_litert_reference_kernels(name):
    """Whole networks: a one-ulp difference in one layer would move the next layer's quantization and show."""
    from tvm_memsched import zoo

    buf = zoo.tflite(name, "hybrid")
    shape = [int(d) for d in load(buf).subgraphs[0].tensors[0].shape]
    for label, x in inputs(shape, seed=3).items():
        assert np.array_equal(ours(buf, x), litert(buf, x)), label


def test_zoo_writes_hybrid_models_as_the_converter_does():
    from tvm_memsched import zoo
    from tvm_memsched.tflite.quantization import quantization_scheme

    buf, buf32 = zoo.tflite("ds_cnn", "hybrid"), zoo.tflite("ds_cnn")
    m = load(buf)
    assert quantization_scheme(m) == "dynamic-range (hybrid)" and len(buf) < 0.4 * len(buf32)
    sg = m.subgraphs[0]
    versions = {opcode_name(m.operatorCodes[op.opcodeIndex]): m.operatorCodes[op.opcodeIndex].version
                for op in sg.operators}
    assert versions["CONV_2D"] == 5 and versions["DEPTHWISE_CONV_2D"] == 6 and versions["FULLY_CONNECTED"] == 12
    for op in sg.operators:
        name = opcode_name(m.operatorCodes[op.opcodeIndex])
        if name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            w = sg.tensors[op.inputs[1]]
            assert w.type == tfl.TensorType.INT8 and len(w.quantization.scale) == w.shape[3 if "DEPTH" in name else 0]
            assert sg.tensors[op.inputs[2]].type == tfl.TensorType.FLOAT32


def test_each_hybrid_operator_is_one_described_kernel_over_int8_weights():
    """One kernel per hybrid operator, reading the float input and the int8 weights (no quantized copy of the
    input, no widened weights), described so the microcontroller library can take it."""
    from collections import Counter

    import tvm
    from tvm import relax

    from tvm_memsched import zoo
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.relax.int8.kernels import description
    from tvm_memsched.relax.passes.float_kernels import widened_types

    mod = from_tflite_bytes(zoo.tflite("ds_cnn", "hybrid"))
    ops = Counter()

    def visit(e):
        if isinstance(e, relax.Call) and e.op.same_as(tvm.ir.Op.get("relax.call_tir")):
            d = description(mod[e.args[0]])
            if d is not None and d["op"].startswith("hybrid_"):
                ops[d["op"]] += 1
                x, w = e.args[1].fields[:2]
                assert str(x.ty.dtype) == "float32" and isinstance(w, tvm.ir.Constant) and str(w.ty.dtype) == "int8"

    relax.analysis.post_order_visit(mod["main"].body, visit)
    assert ops == {"hybrid_conv2d": 5, "hybrid_depthwise_conv2d": 4, "hybrid_dense": 1}
    assert not widened_types(mod["main"])


@pytest.mark.parametrize("asymmetric", [False, True])
def test_quantization_params_follow_litert_rules(asymmetric):
    """The per-batch kernel: scale, inverse and zero point against LiteRT's rules written out in numpy."""
    import tvm

    from tvm_memsched.relax.frontends.tflite_hybrid import quantization_params

    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    x[1] = np.abs(x[1])          # all positive: zero point -128
    x[2] = 0.0                   # all zero: scale 1, inverse 0
    x[3] = -np.abs(x[3])         # all negative: zero point 127
    f = tvm.tirx.build(quantization_params((5, 7), asymmetric), target="llvm")
    out = tvm.runtime.tensor(np.zeros((5, 3), np.float32))
    f(tvm.runtime.tensor(x), out)
    got = out.numpy()
    for b, row in enumerate(x):
        if asymmetric:
            fmin, fmax = np.float32(min(row.min(), 0)), np.float32(max(row.max(), 0))
            if fmin == fmax:
                want = (1.0, 0.0, 0.0)
            else:
                scale = float(np.float32(fmax - fmin)) / 255.0
                lo, hi = float(fmin) / scale, float(fmax) / scale
                zpd = -128 - lo if 128 + abs(lo) < 127 + abs(hi) else 127 - hi
                zp = -128 if zpd <= -128 else 127 if zpd >= 127 else float(np.sign(zpd) * np.floor(abs(zpd) + 0.5))
                s32 = np.float32(scale)
                want = (s32, np.float32(1) / s32, zp)
        else:
            rng_ = np.float32(max(abs(row.min()), abs(row.max())))
            want = (1.0, 0.0, 0.0) if rng_ == 0 else (rng_ / np.float32(127), np.float32(127) / rng_, 0.0)
        assert np.array_equal(got[b], np.array(want, np.float32)), (b, got[b], want)
    if asymmetric:
        assert got[1, 2] == -128 and got[3, 2] == 127


@pytest.mark.parametrize("kind,kw,message", [
    ("conv", dict(bias_size=1), "bias of 1 values for 6 output channels"),
    ("fc", dict(bias_size=2), "bias of 2 values for 6 output channels"),
    ("conv", dict(qdim=3), "6 scales along axis 3; expected 1 or 6 along axis 0"),
    ("dw", dict(scales="tensor"), "need one scale per channel"),
])
def test_hybrid_weights_litert_would_not_use_are_refused_by_name(kind, kw, message):
    """A bias that would broadcast, scales along another axis, a per-tensor depthwise scale: refused, never
    computed some other way."""
    from tvm_memsched.core.errors import MemschedError
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    buf, _ = one_op(kind, **kw)
    with pytest.raises(MemschedError, match=message):
        from_tflite_bytes(buf)


@pytest.mark.parametrize("rows,zero_point,k,message", [
    (1, 3, 4, "nonzero zero point"),
    (0, 0, 4, "input 'x' has shape \\[0, 4\\]"),   # an empty input: named, not handed to TVM as a kernel shape
    (1, 0, 65794, "sum 65794 products per output, more than the 65793"),   # int32 sums could overflow
])
def test_refused_hybrid_operators_are_named(rows, zero_point, k, message):
    from tvm_memsched.core.errors import MemschedError
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    mb = ModelBuilder()
    x = mb.tensor("x", [rows, k])
    w = mb.tensor("w", [3, k], np.int8, data=np.ones((3, k), np.int8), scale=[0.5], zero_point=[zero_point])
    y = mb.tensor("y", [rows, 3])
    mb.op(B.FULLY_CONNECTED, [x, w, -1], [y], tfl.BuiltinOptions.FullyConnectedOptions,
          tfl.FullyConnectedOptionsT(), version=3)
    with pytest.raises(MemschedError, match=message):
        from_tflite_bytes(mb.finish(inputs=[x], outputs=[y]))
