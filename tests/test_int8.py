"""Integer lowering of int8 models: TFLite's arithmetic bit for bit, against TFLite Micro and LiteRT.

Every test imports a .tflite file with our frontend, lowers it with
``lower_int8``, builds it with TVM (llvm) and runs it; the reference outputs
come from TFLite Micro's Python interpreter (its reference kernels: what
microcontrollers run) and from LiteRT's reference kernels (``BUILTIN_REF``).
Two documented divergences between the two runtimes (not ours):

* LiteRT's reference FULLY_CONNECTED rescales with ``round(acc * double scale)``
  instead of the fixed-point multiplier TFLite Micro (and LiteRT's optimized
  kernel) use: up to 1 LSB apart; we follow TFLite Micro.
* TFLite Micro's RELU6 ignores the output's quantization (it clamps the stored
  values to those of 0 and 6 in the input's); LiteRT requantizes. With equal
  parameters they agree; we follow TFLite Micro.
"""

import math

import numpy as np
import pytest

import tflite_ops as T
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.int8 import fixedpoint as fx
from tvm_memsched.relax.int8 import params as P
from tvm_memsched.relax.int8.lower import IntegerLowering, lower_int8
from tvm_memsched.relax.int8.kernels import description
from tvm_memsched.tflite.builder import ModelBuilder, tfl
from tvm_memsched.tflite.verify import tflm_run

tvm = pytest.importorskip("tvm")
B, O = T.B, T.O


# ----------------------------------------------------------------- runners
def run_ours(buf, inputs):
    from tvm_memsched.relax.compare import run_vm

    mod, report = lower_int8(from_tflite_bytes(buf))
    ex = tvm.compile(mod, "llvm")
    return run_vm(ex, inputs), report


def run_litert(buf, inputs):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=bytes(buf), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for d, v in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], v)
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def input_names(buf):
    from tvm_memsched.tflite.builder import load

    m = load(buf)
    sg = m.subgraphs[0]
    return [sg.tensors[i].name.decode() for i in sg.inputs]


def run_tflm(buf, inputs):
    return [np.asarray(o) for o in tflm_run(buf, dict(zip(input_names(buf), inputs)))]


def random_int8_inputs(buf, rng):
    from tvm_memsched.tflite.builder import load

    m = load(buf)
    sg = m.subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        if t.type == tfl.TensorType.INT8:
            out.append(rng.integers(-128, 128, list(t.shape)).astype(np.int8))
        else:
            out.append((rng.standard_normal(list(t.shape)) * 3).astype(np.float32))
    return out


def check(buf, rng=None, *, litert=True, tflm=True, litert_lsb=0, expect=None, inputs=None):
    """Run ours, TFLM and LiteRT on the same random inputs; assert bit-identical outputs."""
    rng = rng or np.random.default_rng(0)
    inputs = inputs if inputs is not None else random_int8_inputs(buf, rng)
    ours, report = run_ours(buf, inputs)
    assert not report.islands, report.islands
    if expect is not None:
        assert set(report.lowered) == set(expect), report.lowered
    if tflm:
        ref = run_tflm(buf, inputs)
        assert len(ref) == len(ours)
        for a, b in zip(ours, ref):
            assert a.shape == b.shape, f"our output {a.shape}, TFLM's {b.shape}"
            np.testing.assert_array_equal(a, b)
    if litert:
        ref = run_litert(buf, inputs)
        for a, b in zip(ours, ref):
            assert a.shape == b.shape, f"our output {a.shape}, LiteRT's {b.shape}"
            d = np.abs(a.astype(np.int64) - b.astype(np.int64))
            assert d.max() <= litert_lsb, f"{d.max()} LSB from LiteRT"
    return ours, report


# ------------------------------------------------------- fixed point arithmetic
def test_tflite_round_is_half_away_from_zero():
    assert [fx.tflite_round(v) for v in (0.5, 1.5, 2.5, -0.5, -1.5, 0.49999999999999994)] == \
        [1, 2, 3, -1, -2, 0]


def test_quantize_multiplier_reconstructs_the_scale():
    rng = np.random.default_rng(1)
    for real in rng.uniform(1e-6, 4.0, 200):
        m, s = fx.quantize_multiplier(real)
        assert (1 << 30) <= m < (1 << 31)
        assert abs(m * 2.0 ** (s - 31) - real) <= real * 2 ** -30


def test_mbqm_array_equals_scalar_reference():
    rng = np.random.default_rng(2)
    xs = rng.integers(-(1 << 24), 1 << 24, 300)
    for real in (0.0007, 0.3, 0.99, 1.7, 6.5):
        m, s = fx.quantize_multiplier(real)
        vec = fx.mbqm_array(xs, m, s)
        assert vec.tolist() == [fx.multiply_by_quantized_multiplier(int(x), m, s) for x in xs]
        # and it is the rounded product, within one unit
        assert np.all(np.abs(vec - xs * real) <= 1.0 + np.abs(xs) * real * 2 ** -29)


def test_rounding_divide_by_pot_rounds_half_away_from_zero():
    for x in range(-40, 41):
        for e in range(0, 5):
            exact = x / 2 ** e
            assert fx.rounding_divide_by_pot(x, e) == int(fx.tflite_round(exact))


def test_gemmlowp_logistic_and_tanh_are_close_to_the_real_functions():
    for raw in range(-(1 << 31), (1 << 31) - 1, 1 << 24):
        x = fx.FixedPoint(raw, 4)
        real = raw / 2 ** 27
        assert abs(fx.logistic_q0(x).raw / 2 ** 31 - 1 / (1 + np.exp(-real))) < 1e-6
        assert abs(fx.tanh_q0(x).raw / 2 ** 31 - np.tanh(real)) < 1e-6


def test_activation_ranges_follow_tflite_rounding():
    # 6 / 0.5 = 12 exactly; 0.5 / 1.0 rounds away from zero (Python's round would give 0)
    assert P.act_range("relu6", 0.5, -128) == (-128, -116)
    assert P.act_range("relu", 2.0, 1) == (1, 127)
    assert P.act_range("relu_n1_to_1", 2.0, 0) == (-1, 1)


# ---------------------------------------------------------- one operator each
@pytest.mark.parametrize("depthwise,per_channel,act,stride,pad,dil", [
    (False, True, 0, 1, tfl.Padding.SAME, 1), (False, True, 1, 2, tfl.Padding.SAME, 1),
    (False, False, 3, 2, tfl.Padding.VALID, 1), (False, True, 0, 1, tfl.Padding.VALID, 2),
    (True, True, 3, 1, tfl.Padding.SAME, 1), (True, True, 0, 2, tfl.Padding.SAME, 1),
    (True, False, 1, 2, tfl.Padding.VALID, 1)])
def test_conv_and_depthwise_are_bit_exact(depthwise, per_channel, act, stride, pad, dil):
    rng = np.random.default_rng([stride, act, dil, depthwise])
    buf = T.conv(rng, depthwise=depthwise, per_channel=per_channel, act=act, stride=stride, pad=pad, dil=dil,
                 hw=(9, 8))
    check(buf, rng, expect={"DEPTHWISE_CONV_2D" if depthwise else "CONV_2D"})


def test_depthwise_multiplier_and_conv_without_bias():
    rng = np.random.default_rng(5)
    check(T.conv(rng, depthwise=True, multiplier=2, cin=3), rng)
    check(T.conv(rng, bias=False, cin=5, cout=7), rng, litert=False)   # LiteRT requires an int8 conv bias


def test_declared_output_shapes_are_kept_or_refused():
    """An operator's result takes the shape the file declares (same element count), or the file is refused."""
    from tvm_memsched.core.errors import InputFileError
    from tvm_memsched.tflite.builder import serialize
    from tvm_memsched.tflite.reader import load_model

    rng = np.random.default_rng(9)
    buf = T.fully_connected(rng, x_shape=(1, 1, 2, 8))
    ret = from_tflite_bytes(buf)["main"].body.body
    assert [int(d) for d in ret.ty.shape] == [1, 5]
    model = load_model(T.binary(rng, tfl.BuiltinOperator.ADD))
    sg = model.subgraphs[0]
    sg.tensors[sg.outputs[0]].shape = np.array([1, 4, 4, 2], np.int32)
    with pytest.raises(InputFileError, match="ADD output 'y': the file declares shape \\[1, 4, 4, 2\\]"):
        from_tflite_bytes(serialize(model))


@pytest.mark.parametrize("act", [0, 1])
def test_fully_connected_matches_tflm_exactly(act):
    rng = np.random.default_rng(act)
    check(T.fully_connected(rng, act=act, batch=2), rng, litert_lsb=1, expect={"FULLY_CONNECTED"})
    check(T.fully_connected(rng, act=act, bias=False), rng, litert_lsb=1)
    check(T.fully_connected(rng, act=act, x_shape=(1, 1, 2, 8)), rng, litert_lsb=1)   # flattened to (1, 16)


@pytest.mark.parametrize("code", [B.ADD, B.SUB, B.MUL])
def test_binary_ops_are_bit_exact_with_broadcasting(code):
    rng = np.random.default_rng(int(code))
    check(T.binary(rng, code, act=1), rng)
    check(T.binary(rng, code, shape2=(1, 1, 1, 3)), rng)
    check(T.binary(rng, code, shape1=(1, 4, 1, 3), shape2=(1, 1, 4, 1)), rng)


@pytest.mark.parametrize("code", [B.AVERAGE_POOL_2D, B.MAX_POOL_2D])
def test_pools_are_bit_exact(code):
    check(T.pool(code), expect={"AVERAGE_POOL_2D" if code == B.AVERAGE_POOL_2D else "MAX_POOL_2D"})
    check(T.pool(code, shape=(1, 6, 6, 2), out_shape=(1, 3, 3, 2), k=2, pad=tfl.Padding.VALID, act=1))


@pytest.mark.parametrize("keep", [False, True])
def test_mean_is_bit_exact(keep):
    rng = np.random.default_rng(3)
    for hw in (3, 7):
        qin, qout = T.rand_q(rng), T.rand_q(rng)
        buf = T.unary(B.MEAN, (O.ReducerOptions, T.options(tfl.ReducerOptionsT, keepDims=keep)),
                      shape=(1, hw, hw, 8), out_shape=(1, 1, 1, 8) if keep else (1, 8), qin=qin, qout=qout,
                      extra=[T.const_i32("axes", [1, 2])])
        check(buf, rng, expect={"MEAN"})


def _unary_cases():
    lr = (O.LeakyReluOptions, T.options(tfl.LeakyReluOptionsT, alpha=0.2))
    return [("RELU", B.RELU, None, (0.05, 3), (0.1, 1)),
            ("RELU6", B.RELU6, None, (0.05, 3), (0.05, 3)),
            ("RELU_N1_TO_1", B.RELU_N1_TO_1, None, (0.02, -4), (0.01, 2)),
            ("LOGISTIC", B.LOGISTIC, None, (0.05, 3), (1 / 256, -128)),
            ("TANH", B.TANH, None, (0.04, -7), (1 / 128, 0)),
            ("HARD_SWISH", B.HARD_SWISH, None, (0.03, -10), (0.02, -20)),
            ("LEAKY_RELU", B.LEAKY_RELU, lr, (0.05, 3), (0.04, 10)),
            ("QUANTIZE", B.QUANTIZE, None, (0.05, 3), (0.1, -9))]


@pytest.mark.parametrize("name,code,opts,qin,qout", _unary_cases(), ids=[c[0] for c in _unary_cases()])
def test_table_operators_are_exact_on_every_int8_value(name, code, opts, qin, qout):
    """One-input operators become 256-entry tables: check all 256 inputs at once."""
    buf = T.unary(code, opts, shape=(1, 256), qin=qin, qout=qout)
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    check(buf, inputs=[x], expect={name} if code != B.RELU6 else set(),   # RELU6: an int8 clip (no kernel)
          tflm=code != B.RELU_N1_TO_1)   # TFLite Micro has no RELU_N1_TO_1


def test_relu6_with_different_output_quantization_follows_tflite_micro():
    buf = T.unary(B.RELU6, shape=(1, 256), qin=(0.05, 3), qout=(0.1, -20))
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    ours, _ = check(buf, inputs=[x], litert=False)
    assert not np.array_equal(ours[0], run_litert(buf, [x])[0])   # LiteRT requantizes to the output's params


@pytest.mark.parametrize("scale,depth", [(0.05, 10), (0.3, 1000), (1.0, 7)])
def test_softmax_is_bit_exact(scale, depth):
    buf = T.unary(B.SOFTMAX, (O.SoftmaxOptions, T.options(tfl.SoftmaxOptionsT, beta=1.0)), shape=(3, depth),
                  qin=(scale, 3), qout=(1 / 256, -128))
    check(buf, np.random.default_rng(depth), expect={"SOFTMAX"})


def test_prelu_with_per_channel_and_broadcast_slopes():
    for shape, zp in (((3,), 0), ((1, 1, 3), 2)):
        alpha = np.array([10, -20, 30], np.int8).reshape(shape)
        buf = T.unary(B.PRELU, shape=(1, 4, 4, 3), qin=(0.05, 3), qout=(0.04, -1),
                      extra=[lambda mb, a=alpha, z=zp: T.qtensor(mb, "alpha", a.shape, 0.01, z, data=a)])
        check(buf, expect={"PRELU"})


def test_quantize_and_dequantize_at_float_boundaries():
    mb = ModelBuilder()
    a = mb.tensor("a", [2, 50])
    q = T.qtensor(mb, "q", [2, 50], 0.05, -3)
    y = T.qtensor(mb, "y", [2, 50], 0.07, 4)
    f = mb.tensor("f", [2, 50])
    mb.op(B.QUANTIZE, [a], [q])
    mb.op(B.RELU, [q], [y])
    mb.op(B.DEQUANTIZE, [y], [f])
    buf = mb.finish([a], [f])
    # halves: x / scale = k + 0.5 exactly must round away from zero
    halves = (np.arange(100, dtype=np.float32).reshape(2, 50) - 50 + 0.5) * np.float32(0.05)
    check(buf, inputs=[halves], expect={"QUANTIZE_FLOAT", "RELU", "DEQUANTIZE"})
    check(buf, np.random.default_rng(9))


def test_data_movement_ops_run_on_int8_values():
    mb = ModelBuilder()
    a = T.qtensor(mb, "a", [1, 4, 6, 2], 0.1, 5)
    p = T.qtensor(mb, "p", [1, 6, 8, 2], 0.1, 5)
    s = T.qtensor(mb, "s", [1, 4, 8, 2], 0.1, 5)
    y1 = T.qtensor(mb, "y1", [1, 4, 3, 2], 0.1, 5)
    y2 = T.qtensor(mb, "y2", [1, 4, 5, 2], 0.1, 5)
    c = T.qtensor(mb, "c", [1, 4, 8, 2], 0.1, 5)
    pads = mb.tensor("pads", [4, 2], np.int32, data=np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    mb.op(B.PAD, [a, pads], [p])
    mb.op(B.STRIDED_SLICE, [p, T.const_i32("b", [0, 1, 0, 0])(mb), T.const_i32("e", [1, 5, 8, 2])(mb),
                            T.const_i32("st", [1, 1, 1, 1])(mb)], [s], O.StridedSliceOptions,
          tfl.StridedSliceOptionsT())
    mb.op(B.SPLIT_V, [s, T.const_i32("sz", [3, 5])(mb), mb.tensor("ax", [], np.int32, data=np.array(2, np.int32))],
          [y1, y2], O.SplitVOptions, T.options(tfl.SplitVOptionsT, numSplits=2))
    mb.op(B.CONCATENATION, [y2, y1], [c], O.ConcatenationOptions, T.options(tfl.ConcatenationOptionsT, axis=2))
    check(mb.finish([a], [c]))


def test_move_op_with_different_quantization_is_refused_by_name():
    from tvm_memsched.core.errors import InputFileError

    buf = T.unary(B.PAD, shape=(1, 2, 2, 1), out_shape=(1, 4, 4, 1), qin=(0.1, 0), qout=(0.2, 0),
                  extra=[lambda mb: mb.tensor("pads", [4, 2], np.int32,
                                              data=np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))])
    with pytest.raises(InputFileError, match="PAD with different input and output quantization"):
        from_tflite_bytes(buf)


# ------------------------------------------------------------ the pass itself
def test_unrecognised_float_operators_are_reported_as_islands():
    buf = T.unary(B.COS, shape=(1, 8), qin=(0.05, 3), qout=(0.5, -128))
    mod, report = lower_int8(from_tflite_bytes(buf))
    assert report.islands == [i for i in report.islands if i.startswith("cos (")] and len(report.islands) == 1
    assert "float islands: cos" in report.summary()
    with pytest.raises(Exception, match="left float operators: cos"):
        IntegerLowering(strict=True)(from_tflite_bytes(buf))


def test_float_models_are_left_unchanged():
    from tvm_memsched.relax.testing import branchy_module

    mod = branchy_module(branches=2)
    new, report = lower_int8(mod)
    assert new is mod and report.total == 0


def test_weights_stay_int8_constants():
    rng = np.random.default_rng(0)
    mod, report = lower_int8(from_tflite_bytes(T.conv(rng, cin=8, cout=16)))
    consts = []
    tvm.relax.analysis.post_order_visit(mod["main"].body, lambda e: consts.append(e)
                                        if isinstance(e, tvm.ir.Constant) and hasattr(e.value, "numpy") else None)
    dtypes = sorted(str(c.value.numpy().dtype) for c in consts)
    assert "float32" not in dtypes and "int8" in dtypes
    assert report.constant_bytes == sum(c.value.numpy().nbytes for c in consts)


# ------------------------------------------------- small random quantized graphs
def random_graph(rng):
    """A small random int8 network: conv / depthwise / add / mul / pools / activations / concat / mean."""
    mb = ModelBuilder()
    h = int(rng.integers(4, 9))
    c = int(rng.integers(1, 5))
    x = T.qtensor(mb, "x", [1, h, h, c], *T.rand_q(rng))
    live = [(x, [1, h, h, c])]
    n = 0
    for _ in range(int(rng.integers(3, 8))):
        n += 1
        src, shape = live[int(rng.integers(len(live)))]
        kind = rng.choice(["conv", "dw", "add", "mul", "relu", "maxpool", "avgpool", "concat", "hswish"])
        qo = T.rand_q(rng)
        if kind in ("conv", "dw"):
            oc = shape[3] if kind == "dw" else int(rng.integers(1, 6))
            k = int(rng.choice([1, 3]))
            wshape = [1, k, k, oc] if kind == "dw" else [oc, k, k, shape[3]]
            ws = rng.uniform(0.002, 0.02, oc).astype(np.float32)
            w = T.qtensor(mb, f"w{n}", wshape, ws, np.zeros(oc, int), qd=3 if kind == "dw" else 0,
                          data=rng.integers(-127, 128, wshape).astype(np.int8))
            b = T.qtensor(mb, f"b{n}", [oc], ws, np.zeros(oc, int), dtype=np.int32,
                          data=rng.integers(-2000, 2000, oc).astype(np.int32))
            out_shape = shape[:3] + [oc]
            y = T.qtensor(mb, f"t{n}", out_shape, *qo)
            if kind == "dw":
                o = T.options(tfl.DepthwiseConv2DOptionsT, padding=tfl.Padding.SAME, strideH=1, strideW=1,
                              depthMultiplier=1, fusedActivationFunction=int(rng.choice([0, 1, 3])))
                mb.op(B.DEPTHWISE_CONV_2D, [src, w, b], [y], O.DepthwiseConv2DOptions, o, version=3)
            else:
                o = T.options(tfl.Conv2DOptionsT, padding=tfl.Padding.SAME, strideH=1, strideW=1,
                              fusedActivationFunction=int(rng.choice([0, 1, 3])))
                mb.op(B.CONV_2D, [src, w, b], [y], O.Conv2DOptions, o, version=3)
        elif kind in ("add", "mul"):
            others = [t for t in live if t[1] == shape]
            other = others[int(rng.integers(len(others)))][0]
            out_shape = shape
            y = T.qtensor(mb, f"t{n}", shape, *qo)
            code, opt, cls = ((B.ADD, O.AddOptions, tfl.AddOptionsT) if kind == "add"
                              else (B.MUL, O.MulOptions, tfl.MulOptionsT))
            mb.op(code, [src, other], [y], opt, T.options(cls, fusedActivationFunction=int(rng.choice([0, 1]))),
                  version=2)
        elif kind in ("relu", "hswish"):
            out_shape = shape
            y = T.qtensor(mb, f"t{n}", shape, *qo)
            mb.op(B.RELU if kind == "relu" else B.HARD_SWISH, [src], [y])
        elif kind == "concat":
            others = [t for t in live if t[1][:3] == shape[:3]]
            other, oshape = others[int(rng.integers(len(others)))]
            if mb.tensors[other].quantization.scale != mb.tensors[src].quantization.scale or \
                    list(mb.tensors[other].quantization.zeroPoint) != list(mb.tensors[src].quantization.zeroPoint):
                continue            # int8 CONCATENATION needs equal quantization
            out_shape = shape[:3] + [shape[3] + oshape[3]]
            y = T.qtensor(mb, f"t{n}", out_shape, mb.tensors[src].quantization.scale[0],
                          mb.tensors[src].quantization.zeroPoint[0])
            mb.op(B.CONCATENATION, [src, other], [y], O.ConcatenationOptions,
                  T.options(tfl.ConcatenationOptionsT, axis=3))
        else:
            if shape[1] < 2:
                continue
            out_shape = [1, (shape[1] + 1) // 2, (shape[2] + 1) // 2, shape[3]]
            q = mb.tensors[src].quantization
            y = T.qtensor(mb, f"t{n}", out_shape, q.scale[0], q.zeroPoint[0])
            o = T.options(tfl.Pool2DOptionsT, padding=tfl.Padding.SAME, strideH=2, strideW=2, filterHeight=3,
                          filterWidth=3)
            mb.op(B.MAX_POOL_2D if kind == "maxpool" else B.AVERAGE_POOL_2D, [src], [y], O.Pool2DOptions, o)
        live.append((y, out_shape))
    outs = [live[-1][0]] + ([live[1][0]] if len(live) > 2 and rng.random() < 0.5 else [])
    return mb.finish([x], outs)


@pytest.mark.parametrize("seed", range(8))
def test_random_quantized_graphs_match_tflm_bit_for_bit(seed):
    rng = np.random.default_rng([seed, 1234])
    buf = random_graph(rng)
    check(buf, rng)


# ------------------------------------------------------------- microcontroller
def test_micro_cli_checks_an_int8_tflite_against_tflite_micro(tmp_path, capsys):
    """micro on an int8 .tflite: TFLite Micro's arena side by side, host run bit-identical to TFLite Micro."""
    import json

    from tvm_memsched.app.cli import main

    rng = np.random.default_rng(11)
    path = tmp_path / "m.tflite"
    path.write_bytes(T.conv(rng, act=1, hw=(8, 8), cin=3, cout=8))
    code = main(["micro", str(path), "--board", "mps2-an386", "--out", str(tmp_path / "c"), "--run", "--host",
                 "--no-measure", "-q"])
    out = capsys.readouterr().out
    assert code == 0
    assert "int8 lowering: 1 operators (CONV_2D 1)" in out
    assert "vs TFLite Micro: bit-identical (ok)" in out
    assert "TFLite Micro (arena)" in out
    rep = json.loads((tmp_path / "c" / "model_report.json").read_text())
    assert rep["tflm"]["min_arena"] > 0 and rep["tflite_check"]["ok"] is True
    assert {"ram_bytes", "flash_bytes", "fits"} <= set(rep)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v2", "swiftnet_like", "darts_v2_cifar_tiny", "densenet_like"])
def test_zoo_int8_models_need_no_kernel_workspace_and_no_float(name, tmp_path):
    """Every operator of the zoo's int8 files is lowered (no float island), and no integer TIR kernel keeps a
    temporary; the microkernel library's only workspace is its two-pixel column buffer (and depthwise scratch)."""
    from tvm_memsched import micro, zoo
    from tvm_memsched.micro.nn import select

    mod = from_tflite_bytes(zoo.tflite(name, "int8"))
    exp = micro.export(mod, "mps2-an386", str(tmp_path / "tvm"), measure=False, kernels="tvm")
    assert exp.int8 is not None and exp.int8["islands"] == []
    assert exp.workspace_bytes <= 16
    assert exp.arena_bytes == exp.lower_bound_bytes
    fast = micro.export(mod, "mps2-an386", str(tmp_path / "fast"), measure=False)
    assert set(fast.library_kernels.values()) >= {"conv2d", "dense"}
    # the column buffer of a convolution: two windows of kh * kw * in_c bytes, each rounded up to 4, widened
    # to int16 on a DSP core such as this Cortex-M4 (tms_conv_s8_wide: twice the bytes, unless over budget)
    # and a depthwise convolution's scratch: nine bytes per tap (offset, gathered word, validity)
    lowered, _ = lower_int8(mod)
    descs = [d for f in lowered.functions.values() if (d := description(f)) is not None]
    need = [2 * 2 * (-(-math.prod(d["w"][1:]) // 4) * 4) for d in descs if d["op"] == "conv2d"] + \
        [9 * d["w"][1] * d["w"][2] for d in descs if d["op"] == "depthwise_conv2d"]
    assert fast.workspace_bytes == max(need)
    assert fast.arena_bytes <= exp.arena_bytes * 1.05


def test_uint8_models_stay_float_and_say_so():
    """Legacy uint8 quantization (which TFLite Micro's kernels mostly refuse) is not lowered: float islands."""
    mb = ModelBuilder()
    a = T.qtensor(mb, "a", [1, 8], 0.05, 128, dtype=np.uint8)
    b = T.qtensor(mb, "b", [1, 8], 0.07, 120, dtype=np.uint8)
    y = T.qtensor(mb, "y", [1, 8], 0.1, 128, dtype=np.uint8)
    mb.op(B.ADD, [a, b], [y], O.AddOptions, tfl.AddOptionsT())
    mod, report = lower_int8(from_tflite_bytes(mb.finish([a, b], [y])))
    assert "ADD" not in report.lowered and any(i.startswith("add (") for i in report.islands)


def test_grouped_conv_and_dilated_depthwise():
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x = T.qtensor(mb, "x", [1, 6, 6, 4], 0.05, 3)
    ws = rng.uniform(0.002, 0.02, 6).astype(np.float32)
    w = T.qtensor(mb, "w", [6, 3, 3, 2], ws, np.zeros(6, int),
                  data=rng.integers(-127, 128, (6, 3, 3, 2)).astype(np.int8))     # 2 groups of 2 input channels
    b = T.qtensor(mb, "b", [6], 0.05 * ws, np.zeros(6, int), dtype=np.int32,
                  data=rng.integers(-2000, 2000, 6).astype(np.int32))
    y = T.qtensor(mb, "y", [1, 6, 6, 6], 0.1, -2)
    mb.op(B.CONV_2D, [x, w, b], [y], O.Conv2DOptions,
          T.options(tfl.Conv2DOptionsT, padding=tfl.Padding.SAME, strideH=1, strideW=1), version=3)
    check(mb.finish([x], [y]), rng, expect={"CONV_2D"})
    check(T.conv(rng, depthwise=True, dil=2, hw=(9, 9)), rng, expect={"DEPTHWISE_CONV_2D"})
