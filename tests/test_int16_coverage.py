"""16x8 models (int16 activations, int8 weights, int64 biases): our integer kernels against TFLite Micro, bit for bit.

Each test builds one-operator models (or runs the converter-made coverage files of
``tests/data/coverage``), lowers them with ``lower_int8`` (which must leave no float
island), compiles them for the host and compares every output bit for bit with
TFLite Micro's Python interpreter, the ground truth of what a microcontroller
computes, or, for the operators TFLite Micro has no int16 kernel for (EXP, LOG,
REDUCE_PROD, REDUCE_MAX, REDUCE_MIN, RESIZE_BILINEAR), LiteRT's reference kernels.
Element-wise operators are checked on all 65,536 int16 values at once; models put
several operators with independent random quantizations side by side, so one
compilation and one interpreter run check many parameter sets. The
microcontroller runs (QEMU) are marked slow.
"""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import coverage_models as C
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.int8 import params16 as P16
from tvm_memsched.relax.int8.lower import lower_int8
from tvm_memsched.tflite.builder import ModelBuilder, tfl
from tvm_memsched.tflite.verify import litert_run_sequence, tflm_run

tvm = pytest.importorskip("tvm")
B, O = tfl.BuiltinOperator, tfl.BuiltinOptions
ALL16 = np.arange(-32768, 32768, dtype=np.int16).reshape(1, 256, 256)


# ----------------------------------------------------------------- models
def q16(mb, name, shape, scale, dtype=np.int16, zp=0, data=None, qd=0):
    """A symmetric (zero point 0, as TFLite's 16x8 scheme has it) per-tensor or per-channel tensor."""
    scale = np.atleast_1d(np.asarray(scale, np.float32))
    return mb.tensor(name, list(shape), dtype, data=data, scale=scale, zero_point=np.repeat(zp, scale.size),
                     quantized_dimension=qd)


def scale(rng, lo=2e-5, hi=2e-4) -> float:
    return float(np.float32(rng.uniform(lo, hi)))


def options(cls, **fields):
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def weighted(mb, rng, name, x, x_scale, kind, *, bias="int64", act=0, cout=4, k=3, stride=1,
             pad=tfl.Padding.SAME, multiplier=2, per_channel=True):
    """A 16x8 CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED or TRANSPOSE_CONV reading tensor ``x``; returns its
    output tensor. ``bias``: "int64", "int32" (TFLite Micro's int32 accumulator), "int16" or None."""
    xs = [int(d) for d in mb.tensors[x].shape]
    if kind == "fc":
        shape_w, qd, oc = [cout, xs[-1]], 0, cout
    elif kind == "dw":
        oc = xs[3] * multiplier
        shape_w, qd = [1, k, k, oc], 3
    else:
        oc = cout
        shape_w, qd = [oc, k, k, xs[3]], 0
    ws = rng.uniform(0.002, 0.02, oc if per_channel else 1).astype(np.float32)
    w = q16(mb, f"{name}_w", shape_w, ws, np.int8, data=rng.integers(-127, 128, shape_w).astype(np.int8), qd=qd)
    ins = [w, x] if kind == "tc" else [x, w]
    if bias is not None:
        dt = {"int64": np.int64, "int32": np.int32, "int16": np.int16}[bias]
        limit = {"int64": 3_000_000, "int32": 300_000, "int16": 30_000}[bias]
        bs = (np.float32(x_scale) * ws).astype(np.float32)
        ins.append(q16(mb, f"{name}_b", [oc], bs, dt, data=rng.integers(-limit, limit, oc).astype(dt)))
    ys = scale(rng, 4e-5, 4e-4)
    if kind == "fc":
        y = q16(mb, f"{name}_y", [xs[0], oc], ys)
        mb.op(B.FULLY_CONNECTED, ins, [y], O.FullyConnectedOptions,
              options(tfl.FullyConnectedOptionsT, fusedActivationFunction=act), version=7)
        return y
    h, w_ = xs[1], xs[2]
    if kind == "tc":
        oh, ow = (h * stride, w_ * stride) if pad == tfl.Padding.SAME else ((h - 1) * stride + k, (w_ - 1) * stride + k)
        shape_t = mb.tensor(f"{name}_shape", [4], np.int32, data=np.array([xs[0], oh, ow, oc], np.int32))
        y = q16(mb, f"{name}_y", [xs[0], oh, ow, oc], ys)
        mb.op(B.TRANSPOSE_CONV, [shape_t] + ins, [y], O.TransposeConvOptions,
              options(tfl.TransposeConvOptionsT, padding=pad, strideH=stride, strideW=stride,
                      fusedActivationFunction=act), version=4)
        return y
    oh, ow = (math.ceil(h / stride), math.ceil(w_ / stride)) if pad == tfl.Padding.SAME else \
        ((h - k) // stride + 1, (w_ - k) // stride + 1)
    y = q16(mb, f"{name}_y", [xs[0], oh, ow, oc], ys)
    if kind == "dw":
        o = options(tfl.DepthwiseConv2DOptionsT, depthMultiplier=multiplier)
        code, opt = B.DEPTHWISE_CONV_2D, O.DepthwiseConv2DOptions
    else:
        o = options(tfl.Conv2DOptionsT)
        code, opt = B.CONV_2D, O.Conv2DOptions
    o.padding, o.strideH, o.strideW, o.fusedActivationFunction = pad, stride, stride, act
    o.dilationHFactor = o.dilationWFactor = 1
    mb.op(code, ins, [y], opt, o, version=4)
    return y


def side_by_side(rng, specs):
    """A model with one input per spec and the spec's operators on it: ``spec(mb, rng, name, x, x_scale)``
    returns the output tensor; inputs are (shape, scale) pairs."""
    mb = ModelBuilder()
    inputs, outputs = [], []
    for n, (shape, sx, spec) in enumerate(specs):
        x = q16(mb, f"x{n}", shape, sx)
        inputs.append(x)
        outputs.append(spec(mb, rng, f"op{n}", x, sx))
    return mb.finish(inputs, outputs)


def unary(code, opt=None, out_scale=None, out_dtype=np.int16, out_shape=None, extra=()):
    """Spec of a one-input operator (``extra``: constant inputs ``f(mb, name) -> tensor``)."""
    def spec(mb, rng, name, x, sx):
        shape = out_shape or [int(d) for d in mb.tensors[x].shape]
        y = q16(mb, f"{name}_y", shape, out_scale if out_scale is not None else sx, out_dtype)
        mb.op(code, [x] + [e(mb, name) for e in extra], [y], *(opt or (0, None)))
        return y
    return spec


def prelu(out_scale):
    """Spec of PRELU with an int8 slope per channel (last axis), as TFLite Micro takes it for int16."""
    def spec(mb, rng, name, x, sx):
        shape = [int(d) for d in mb.tensors[x].shape]
        alpha = mb.tensor(f"{name}_alpha", [1, 1, shape[-1]], np.int8, scale=0.01, zero_point=3,
                          data=rng.integers(-128, 128, [1, 1, shape[-1]]).astype(np.int8))
        y = q16(mb, f"{name}_y", shape, out_scale)
        mb.op(B.PRELU, [x, alpha], [y])
        return y
    return spec


def const_i32(values):
    return lambda mb, name: mb.tensor(f"{name}_c", [len(values)], np.int32, data=np.array(values, np.int32))


# ----------------------------------------------------------------- runners
def inputs_of(buf, rng):
    from tvm_memsched.tflite.builder import load

    sg = load(buf).subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        shape = [int(d) for d in t.shape]
        dt = {tfl.TensorType.INT16: np.int16, tfl.TensorType.INT8: np.int8}[t.type]
        info = np.iinfo(dt)
        out.append(rng.integers(info.min, info.max + 1, shape).astype(dt))
    return out


def ours(buf, inputs, expect=None):
    """Our host build's outputs; asserts that every quantized operator became an integer kernel."""
    from tvm_memsched.relax.compare import run_vm

    mod, report = lower_int8(from_tflite_bytes(buf))
    assert report.islands == [], report.islands
    if expect is not None:
        assert report.lowered == expect, report.lowered
    return [np.asarray(o) for o in run_vm(tvm.compile(mod, "llvm"), inputs)]


def tflm(buf, inputs):
    return [np.asarray(o) for o in tflm_run(buf, {str(i): v for i, v in enumerate(inputs)})]


def litert(buf, inputs):
    return [np.asarray(o) for o in litert_run_sequence(buf, [inputs], reference_kernels=True)[0].values()]


def assert_identical(got, ref):
    assert len(got) == len(ref)
    for k, (a, b) in enumerate(zip(got, ref)):
        b = np.asarray(b).reshape(a.shape)
        assert a.dtype == b.dtype, (k, a.dtype, b.dtype)
        if not np.array_equal(a, b):
            bad = np.flatnonzero(a != b)
            raise AssertionError(f"output {k}: {bad.size} of {a.size} differ, e.g. at {bad[:5]}: "
                                 f"ours {a.ravel()[bad[:5]]} reference {b.ravel()[bad[:5]]}")


def check(buf, inputs, reference=tflm, expect=None):
    assert_identical(ours(buf, inputs, expect), reference(buf, inputs))


# ----------------------------------------------------------------- convolutions and fully connected
@pytest.mark.parametrize("seed", [0, 1])
def test_convolutions_int64_and_int32_accumulators(seed):
    """CONV_2D (int64 bias, ReLU, stride 2; int32 bias: TFLite Micro's int32 accumulator; none) and
    DEPTHWISE_CONV_2D (multiplier 2, int64 bias or none), per-channel weights."""
    rng = np.random.default_rng(seed)

    def conv(**kw):
        return lambda mb, r, name, x, sx: weighted(mb, r, name, x, sx, "conv", **kw)

    def dw(**kw):
        return lambda mb, r, name, x, sx: weighted(mb, r, name, x, sx, "dw", **kw)

    buf = side_by_side(rng, [([1, 7, 6, 3], scale(rng), conv(act=1, stride=2)),
                             ([1, 5, 5, 2], scale(rng), conv(bias="int32", pad=tfl.Padding.VALID)),
                             ([1, 4, 5, 3], scale(rng), conv(bias=None, per_channel=False)),
                             ([1, 5, 4, 3], scale(rng), dw(act=3)),
                             ([1, 4, 4, 2], scale(rng), dw(bias=None, stride=2))])
    check(buf, inputs_of(buf, rng), expect={"CONV_2D": 3, "DEPTHWISE_CONV_2D": 2})


@pytest.mark.parametrize("seed", [0, 1])
def test_fully_connected_and_transpose_conv(seed):
    """FULLY_CONNECTED per tensor (int64 bias) and per channel (int32 bias; none), TRANSPOSE_CONV with an
    int64 bias, TFLite Micro's int16 bias (widened to int64) or none."""
    rng = np.random.default_rng(seed)

    def fc(**kw):
        return lambda mb, r, name, x, sx: weighted(mb, r, name, x, sx, "fc", cout=5, **kw)

    def tc(**kw):
        return lambda mb, r, name, x, sx: weighted(mb, r, name, x, sx, "tc", cout=3, k=3, **kw)

    buf = side_by_side(rng, [([2, 24], scale(rng), fc(per_channel=False, act=1)),
                             ([3, 16], scale(rng), fc(bias="int32")),
                             ([1, 8], scale(rng), fc(bias=None)),
                             ([1, 3, 4, 2], scale(rng), tc(stride=2)),
                             ([1, 3, 3, 2], scale(rng), tc(bias="int16", pad=tfl.Padding.VALID)),
                             ([1, 2, 3, 4], scale(rng), tc(bias=None, stride=2, pad=tfl.Padding.VALID))])
    check(buf, inputs_of(buf, rng), expect={"FULLY_CONNECTED": 3, "TRANSPOSE_CONV": 3})


def test_bias_less_operator_asking_for_an_int32_accumulator_is_refused():
    rng = np.random.default_rng(0)
    mb = ModelBuilder()
    x = q16(mb, "x", [1, 4], 1e-4)
    w = q16(mb, "w", [3, 4], 0.01, np.int8, data=rng.integers(-127, 128, [3, 4]).astype(np.int8))
    y = q16(mb, "y", [1, 3], 1e-3)
    mb.op(B.FULLY_CONNECTED, [x, w], [y], O.FullyConnectedOptions,
          options(tfl.FullyConnectedOptionsT, quantizedBiasType=tfl.TensorType.INT32), version=7)
    with pytest.raises(Exception, match="quantized_bias_type int32"):
        from_tflite_bytes(mb.finish([x], [y]))


# ----------------------------------------------------------------- element-wise binary, pools, reductions
def binary_model(rng, ops):
    """Two-input operators side by side (every operand a model input)."""
    mb = ModelBuilder()
    ins, outs = [], []
    for n, (code, opt_cls, act, shape, shape2, same_q) in enumerate(ops):
        sa = scale(rng)
        a = q16(mb, f"a{n}", shape, sa)
        b = q16(mb, f"b{n}", shape2, sa if same_q else scale(rng))
        y = q16(mb, f"y{n}", np.broadcast_shapes(tuple(shape), tuple(shape2)), sa if same_q else scale(rng, 4e-5, 4e-4))
        o = opt_cls() if opt_cls is not None else None
        if o is not None and hasattr(o, "fusedActivationFunction"):
            o.fusedActivationFunction = act
        opts = {B.ADD: O.AddOptions, B.SUB: O.SubOptions, B.MUL: O.MulOptions,
                B.SQUARED_DIFFERENCE: O.SquaredDifferenceOptions, B.MAXIMUM: O.MaximumMinimumOptions,
                B.MINIMUM: O.MaximumMinimumOptions}[code]
        mb.op(code, [a, b], [y], opts if o is not None else 0, o, version=3 if code in (B.ADD, B.SUB) else 2)
        ins += [a, b]
        outs.append(y)
    return mb.finish(ins, outs)


@pytest.mark.parametrize("seed", [0, 1])
def test_add_sub_mul_squared_difference_maximum_minimum(seed):
    """ADD and SUB (left shift 15, ratios in double), MUL, SQUARED_DIFFERENCE (left shift 0), MAXIMUM and
    MINIMUM, with broadcasting and fused ReLU, random scales. MAXIMUM and MINIMUM (equal quantization, as TFLite
    requires) are imported on the stored int16 values: nothing to lower, and no float island."""
    rng = np.random.default_rng(seed)
    s = [1, 4, 5, 3]
    buf = binary_model(rng, [(B.ADD, tfl.AddOptionsT, 1, s, s, False),
                             (B.ADD, tfl.AddOptionsT, 0, s, [1, 1, 1, 3], False),
                             (B.SUB, tfl.SubOptionsT, 0, s, s, False),
                             (B.SUB, tfl.SubOptionsT, 3, s, [1, 4, 1, 1], False),
                             (B.MUL, tfl.MulOptionsT, 0, s, s, False), (B.MUL, tfl.MulOptionsT, 1, s, [3], False),
                             (B.SQUARED_DIFFERENCE, None, 0, s, s, False),
                             (B.MAXIMUM, None, 0, s, s, True), (B.MINIMUM, None, 0, s, [1, 1, 5, 3], True)])
    check(buf, inputs_of(buf, rng), expect={"ADD": 2, "SUB": 2, "MUL": 2, "SQUARED_DIFFERENCE": 1})


def pool(code, k, stride, pad, act=0):
    def spec(mb, rng, name, x, sx):
        n, h, w, c = [int(d) for d in mb.tensors[x].shape]
        oh, ow = (math.ceil(h / stride), math.ceil(w / stride)) if pad == tfl.Padding.SAME else \
            ((h - k) // stride + 1, (w - k) // stride + 1)
        y = q16(mb, f"{name}_y", [n, oh, ow, c], sx)
        mb.op(code, [x], [y], O.Pool2DOptions, options(tfl.Pool2DOptionsT, padding=pad, strideH=stride,
                                                       strideW=stride, filterHeight=k, filterWidth=k,
                                                       fusedActivationFunction=act))
        return y
    return spec


def reduction(code, axes, keep, out_shape, out_scale=None):
    return unary(code, (O.ReducerOptions, options(tfl.ReducerOptionsT, keepDims=keep)), out_scale=out_scale,
                 out_shape=out_shape, extra=[const_i32(axes)])


def test_pools_mean_sum():
    rng = np.random.default_rng(2)
    buf = side_by_side(rng, [([1, 6, 7, 3], scale(rng), pool(B.AVERAGE_POOL_2D, 3, 2, tfl.Padding.SAME)),
                             ([1, 5, 5, 2], scale(rng), pool(B.AVERAGE_POOL_2D, 2, 1, tfl.Padding.VALID, act=1)),
                             ([1, 6, 6, 3], scale(rng), pool(B.MAX_POOL_2D, 3, 2, tfl.Padding.SAME, act=3)),
                             ([1, 5, 4, 3], scale(rng), reduction(B.MEAN, [1, 2], True, [1, 1, 1, 3], 2e-5)),
                             ([2, 3, 5], scale(rng), reduction(B.MEAN, [2], False, [2, 3], 9e-5)),
                             ([1, 4, 6, 3], scale(rng), reduction(B.SUM, [2], False, [1, 4, 3], 6e-4))])
    check(buf, inputs_of(buf, rng), expect={"AVERAGE_POOL_2D": 2, "MAX_POOL_2D": 1, "MEAN": 2, "SUM": 1})


# ----------------------------------------------------------------- one-input operators on every int16 value
def test_activations_on_every_int16_value():
    """LOGISTIC and TANH (power-of-two and other input scales), RELU, RELU6 (TFLite Micro's clamp without
    requantization), LEAKY_RELU, PRELU, ABS and QUANTIZE (int16 -> int16, int16 -> int8) on all 65,536
    inputs."""
    rng = np.random.default_rng(3)
    t15 = 2.0 ** -15
    specs = [(list(ALL16.shape), 2.0 ** -12, unary(B.LOGISTIC, out_scale=t15)),
             (list(ALL16.shape), scale(rng, 1e-4, 6e-4), unary(B.LOGISTIC, out_scale=t15)),
             (list(ALL16.shape), 2.0 ** -11, unary(B.TANH, out_scale=t15)),
             (list(ALL16.shape), scale(rng, 1e-4, 6e-4), unary(B.TANH, out_scale=t15)),
             (list(ALL16.shape), scale(rng), unary(B.RELU, out_scale=scale(rng))),
             (list(ALL16.shape), 3e-4, unary(B.RELU6, out_scale=2e-4)),
             (list(ALL16.shape), scale(rng), unary(B.LEAKY_RELU, (O.LeakyReluOptions,
                                                                  options(tfl.LeakyReluOptionsT, alpha=0.3)),
                                                   out_scale=scale(rng))),
             (list(ALL16.shape), scale(rng), prelu(scale(rng))),
             (list(ALL16.shape), scale(rng), unary(B.ABS, out_scale=scale(rng))),
             (list(ALL16.shape), scale(rng), unary(B.QUANTIZE, out_scale=scale(rng))),
             (list(ALL16.shape), 1e-4, unary(B.QUANTIZE, out_scale=0.02, out_dtype=np.int8))]
    buf = side_by_side(rng, specs)
    check(buf, [ALL16] * len(specs), expect={"LOGISTIC": 2, "TANH": 2, "RELU": 1, "RELU6": 1, "LEAKY_RELU": 1,
                                             "PRELU": 1, "ABS": 1, "QUANTIZE": 2})


def test_rsqrt_on_every_non_negative_int16_value():
    """RSQRT's Newton-Raphson inverse square root (TFLite Micro refuses negative inputs)."""
    rng = np.random.default_rng(4)
    x = np.arange(0, 32768, dtype=np.int16).reshape(1, 128, 256)
    specs = [(list(x.shape), scale(rng, 1e-5, 1e-3), unary(B.RSQRT, out_scale=scale(rng, 1e-4, 1e-2)))
             for _ in range(2)]
    buf = side_by_side(rng, specs)
    check(buf, [x] * 2, expect={"RSQRT": 2})


def test_softmax():
    rng = np.random.default_rng(5)
    specs = [([3, 17], scale(rng, 5e-5, 5e-4), unary(B.SOFTMAX, (O.SoftmaxOptions, options(tfl.SoftmaxOptionsT,
                                                                                            beta=1.0)),
                                                     out_scale=2.0 ** -15)) for _ in range(3)]
    buf = side_by_side(rng, specs)
    check(buf, inputs_of(buf, rng), expect={"SOFTMAX": 3})


def test_requantize_int8_to_int16():
    mb = ModelBuilder()
    x = mb.tensor("x", [1, 256], np.int8, scale=0.02, zero_point=-5)
    y = q16(mb, "y", [1, 256], 3e-4)
    mb.op(B.QUANTIZE, [x], [y])
    buf = mb.finish([x], [y])
    check(buf, [np.arange(-128, 128, dtype=np.int8).reshape(1, 256)], expect={"QUANTIZE": 1})


# ----------------------------------------------------------------- LiteRT's reference kernels
def test_operators_only_litert_runs():
    """EXP and LOG (LiteRT's interpolated tables, on every int16 value), REDUCE_PROD (a product rescaled at
    each step), REDUCE_MAX, REDUCE_MIN and RESIZE_BILINEAR (integer, three coordinate modes): TFLite Micro
    has no int16 kernel for them; LiteRT's reference kernels are the reference."""
    rng = np.random.default_rng(6)

    def resize(align, half):
        return unary(B.RESIZE_BILINEAR, (O.ResizeBilinearOptions,
                                         options(tfl.ResizeBilinearOptionsT, alignCorners=align,
                                                 halfPixelCenters=half)),
                     out_shape=[1, 7, 9, 2], extra=[const_i32([7, 9])])

    x16 = scale(rng, 1e-4, 3e-4)
    specs = [(list(ALL16.shape), x16, unary(B.EXP, out_scale=scale(rng, 1e-4, 1e-3))),
             (list(ALL16.shape), x16, unary(B.LOG, out_scale=scale(rng, 1e-4, 1e-3))),
             ([1, 4, 3, 3], 1.0 / 16384, reduction(B.REDUCE_PROD, [1, 2], False, [1, 3], 2.0 ** -13)),
             ([2, 3, 5], scale(rng), None), ([2, 3, 5], scale(rng), None),
             ([1, 4, 5, 2], scale(rng), resize(False, False)), ([1, 4, 5, 2], scale(rng), resize(True, False)),
             ([1, 4, 5, 2], scale(rng), resize(False, True))]
    specs[3] = (specs[3][0], specs[3][1], reduction(B.REDUCE_MAX, [1], True, [2, 1, 5]))
    specs[4] = (specs[4][0], specs[4][1], reduction(B.REDUCE_MIN, [0, 2], False, [3]))
    buf = side_by_side(rng, specs)
    inputs = inputs_of(buf, rng)
    inputs[0] = inputs[1] = ALL16
    # REDUCE_MAX and REDUCE_MIN of equal quantization are imported on the stored values (nothing to lower)
    check(buf, inputs, reference=litert, expect={"EXP": 1, "LOG": 1, "REDUCE_PROD": 1, "RESIZE_BILINEAR": 3})


def test_lut_and_sigmoid_tables_match_tflite_prepare():
    """The Python side of the tables: SOFTMAX's exp table follows exp on [-10, 0] in Q0.15 within its
    interpolation bias, TANH and LOGISTIC at 0 and saturated, RSQRT's special case of 1."""
    exp_lut = P16.lut16(P16.expf, 10 / 65535, 32767, 2 / 65535, 0)
    exact = np.exp(np.linspace(-10.0, 0.0, 513)) * 32768
    assert exp_lut.dtype == np.int16 and exp_lut[512] == 32767 and np.all(np.diff(exp_lut) >= 0)
    assert np.max(np.abs(exp_lut[:512] - exact[:512])) <= 2
    mult, shift = P16.sigmoid_params(2.0 ** -12, tanh=True)
    assert P16.tanh16(0, mult, shift) == 0 and P16.tanh16(32767, mult, shift) == 32767
    assert P16.logistic16(0, *P16.sigmoid_params(2.0 ** -12, tanh=False)) == 16384
    from tvm_memsched.relax.int8.fixedpoint import inv_sqrt_multiplier

    assert inv_sqrt_multiplier(1) == ((1 << 31) - 1, 0)


# ----------------------------------------------------------------- the converter's files
#: converter-made files whose structure the builders above do not write (the int64 bias as the converter stores
#: it, QUANTIZE before CONCATENATION / PACK / MAXIMUM, a resource variable, float model inputs and outputs,
#: quantized data movement)
COVERAGE = ["conv_2d", "transpose_conv", "variable", "concatenation", "maximum", "pack", "quantize_dequantize",
            "embedding_lookup", "mirror_pad", "reverse_v2", "gather_nd", "fill"]


@pytest.mark.parametrize("case", COVERAGE + [pytest.param("gru", marks=pytest.mark.slow)])
def test_coverage_models(case):
    """Files written by TensorFlow's converter (16x8 quantization): imported, no float island, bit-identical
    to TFLite Micro (LiteRT where TFLite Micro refuses the file), stateful ones over three invocations."""
    from tvm_memsched.relax.frontends.tflite_state import run_sequence

    entry = next(e for e in C.entries() if e["case"] == case and e["kind"] == "int16x8")
    buf = C.read(entry)
    n = 3 if "VAR_HANDLE" in entry["operators"] else 1
    seq = C.inputs(entry, buf, 0, n)
    mod = from_tflite_bytes(buf)
    low, report = lower_int8(mod)
    assert report.islands == [] and (report.total > 0 or case in ("mirror_pad", "reverse_v2", "gather_nd",
                                                                   "fill")), report.summary()
    ex = tvm.compile(low, "llvm")
    got = [[np.asarray(o) for o in outs] for outs in run_sequence(ex, mod, seq)]
    refs = C.references(buf, seq)
    name = "tflm" if not isinstance(refs["tflm"], str) else "litert"
    assert not isinstance(refs[name], str), refs
    ok, diff = C.agree(got, refs[name], True)
    assert ok, f"vs {name}: max difference {diff}"


# ----------------------------------------------------------------- the microcontroller
@pytest.mark.slow
@pytest.mark.parametrize("case", ["conv_2d", "transpose_conv", "softmax", "rsqrt", "resize_bilinear"])
def test_micro_runs_bit_identical_within_0_8_of_tflm_arena(case, tmp_path):
    """``micro --run`` on QEMU mps2-an386: bit-identical to TFLite Micro (LiteRT where TFLM refuses the file)
    and RAM total (arena, I/O, stack) at most 0.8x TFLite Micro's smallest arena."""
    import os

    path = os.path.join(C.FOLDER, f"{case}.int16x8.tflite")
    report = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "tvm_memsched.app.cli", "micro", path, "-b", "mps2-an386", "--out",
                        str(tmp_path / "m"), "--run", "--json", str(report)], capture_output=True, text=True,
                       timeout=1800)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "bit-identical (ok)" in p.stdout, p.stdout
    line = next(ln for ln in p.stdout.splitlines() if "x TFLite Micro's smallest arena" in ln)
    ratio = float(line.split("RAM total")[1].split("x")[0])
    assert ratio <= 0.8, line
    assert json.loads(report.read_text())
