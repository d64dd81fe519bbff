"""TFLite BATCH_MATMUL and the attention blocks around it, against TFLite Micro (and LiteRT's reference kernels).

Every kind TensorFlow's converter writes: float32 and float16 weights (within 1e-4 of TFLite Micro / LiteRT),
int8 and int16x8 (bit for bit with TFLite Micro's ``batch_matmul.cc``, lowered to one integer kernel with
no transposed or broadcast copy of an operand) and dynamic-range quantization (LiteRT's reference kernel,
which TFLite Micro refuses; its wrongly indexed shapes refused by name). Models come from
``tests/data/coverage`` (TensorFlow's converter: one operator, an attention head, Keras' MultiHeadAttention)
and from :class:`~tvm_memsched.tflite.builder.ModelBuilder` with random quantizations, ``adj_x`` /
``adj_y``, broadcast batch dimensions and constant operands.
"""

import math

import numpy as np
import pytest

import coverage_models as C
from tflite_ops import qtensor
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.frontends.tflite_batch_matmul import out_shape
from tvm_memsched.relax.int8 import fixedpoint as fx
from tvm_memsched.relax.int8.lower import lower_int8
from tvm_memsched.tflite.builder import ModelBuilder, tfl
from tvm_memsched.tflite.verify import tflm_run

tvm = pytest.importorskip("tvm")
B, O = tfl.BuiltinOperator, tfl.BuiltinOptions


# ----------------------------------------------------------------- helpers
def entry(name):
    return next(e for e in C.entries() if e["file"] == name)


def run_ours(buf, inputs, *more):
    """Our host build (integer kernels for quantized operators, TVM's default pipeline) on ``inputs`` (and
    each further input set: then a list of output lists), the lowering report and the lowered module."""
    from tvm_memsched.relax.compare import run_vm

    mod, report = lower_int8(from_tflite_bytes(buf))
    ex = tvm.compile(mod, "llvm")
    outs = [[np.asarray(o) for o in run_vm(ex, ins)] for ins in (inputs, *more)]
    return (outs if more else outs[0]), report, mod


def run_litert(buf, inputs):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=bytes(buf), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for d, v in zip(it.get_input_details(), inputs):
        it.set_tensor(d["index"], v)
    it.invoke()
    return [np.array(it.get_tensor(d["index"])) for d in it.get_output_details()]


def run_tflm(buf, inputs):
    return [np.asarray(o) for o in tflm_run(buf, {str(i): v for i, v in enumerate(inputs)})]


def ops_of(mod) -> set:
    """The Relax operators ``main`` calls (``call_tir`` for kernels)."""
    found = set()

    def visit(e):
        if isinstance(e, tvm.relax.Call) and isinstance(e.op, tvm.ir.Op):
            found.add(e.op.name.replace("relax.", ""))

    tvm.relax.analysis.post_order_visit(mod["main"].body, visit)
    return found


def options(adj_x, adj_y, asymmetric=False):
    o = tfl.BatchMatMulOptionsT()
    o.adjX, o.adjY, o.asymmetricQuantizeInputs = adj_x, adj_y, asymmetric
    return o


def quantized_bmm(rng, a_shape, b_shape, *, adj_x=False, adj_y=False, dtype=np.int8, b_const=False,
                  broadcast_b=None):
    """A quantized BATCH_MATMUL with random scales and zero points (int16: zero points 0), an output scale that
    keeps most outputs inside the range; ``b_const``: ``b`` a constant; ``broadcast_b``: ``b`` is a
    BROADCAST_TO of constant ``b`` to this shape."""
    mb = ModelBuilder()
    wide = dtype == np.int16
    info = np.iinfo(dtype)

    def q():
        return float(np.float32(rng.uniform(0.001, 0.05))), 0 if wide else int(rng.integers(-20, 21))

    (sa, za), (sb, zb) = q(), q()
    k = a_shape[-2] if adj_x else a_shape[-1]
    typical = math.sqrt(k) * (info.max / 2) ** 2 * sa * sb
    so = float(np.float32(typical / (info.max / 3) * rng.uniform(0.5, 2.0)))
    zo = 0 if wide else int(rng.integers(-20, 21))
    a = qtensor(mb, "a", a_shape, sa, za, dtype)
    ins = [a]
    if b_const or broadcast_b:
        w = qtensor(mb, "w", b_shape, sb, zb, dtype, data=rng.integers(info.min, info.max + 1, b_shape).astype(dtype))
        if broadcast_b:
            shape = mb.tensor("shape", [len(broadcast_b)], np.int32, data=np.array(broadcast_b, np.int32))
            b = qtensor(mb, "b", broadcast_b, sb, zb, dtype)
            mb.op(B.BROADCAST_TO, [w, shape], [b], version=2)
            b_shape = list(broadcast_b)
        else:
            b = w
    else:
        b = qtensor(mb, "b", b_shape, sb, zb, dtype)
        ins.append(b)
    y = qtensor(mb, "y", out_shape(a_shape, b_shape, adj_x, adj_y), so, zo, dtype)
    mb.op(B.BATCH_MATMUL, [a, b], [y], O.BatchMatMulOptions, options(adj_x, adj_y), version=1)
    return mb.finish(ins, [y])


def float_bmm(rng, a_shape, b_shape, *, adj_x=False, adj_y=False, b_const=False):
    mb = ModelBuilder()
    a = mb.tensor("a", list(a_shape))
    b = mb.tensor("b", list(b_shape), data=rng.uniform(-1, 1, b_shape).astype(np.float32) if b_const else None)
    y = mb.tensor("y", out_shape(a_shape, b_shape, adj_x, adj_y))
    mb.op(B.BATCH_MATMUL, [a, b], [y], O.BatchMatMulOptions, options(adj_x, adj_y), version=1)
    return mb.finish([a] if b_const else [a, b], [y])


def hybrid_bmm(rng, x_shape, w_shape, *, adj_x=False, adj_y=False, asymmetric=True, per_channel=False):
    """Dynamic-range quantization: float32 ``x`` times an int8 constant (one scale or one per column)."""
    mb = ModelBuilder()
    x = mb.tensor("x", list(x_shape))
    n = w_shape[-2] if adj_y else w_shape[-1]
    scales = rng.uniform(0.002, 0.02, n if per_channel else 1).astype(np.float32)
    w = mb.tensor("w", list(w_shape), np.int8, data=rng.integers(-127, 128, w_shape).astype(np.int8), scale=scales,
                  zero_point=np.zeros(scales.size, int), quantized_dimension=len(w_shape) - (2 if adj_y else 1))
    y = mb.tensor("y", out_shape(x_shape, w_shape, adj_x, adj_y))
    mb.op(B.BATCH_MATMUL, [x, w], [y], O.BatchMatMulOptions, options(adj_x, adj_y, asymmetric), version=1)
    return mb.finish([x], [y])


def int_inputs(buf, rng):
    from tvm_memsched.tflite.builder import load

    sg = load(buf).subgraphs[0]
    out = []
    for i in sg.inputs:
        t = sg.tensors[i]
        dtype = {tfl.TensorType.INT8: np.int8, tfl.TensorType.INT16: np.int16}.get(t.type)
        if dtype is None:
            out.append(rng.uniform(-2, 2, list(t.shape)).astype(np.float32))
        else:
            info = np.iinfo(dtype)
            out.append(rng.integers(info.min, info.max + 1, list(t.shape)).astype(dtype))
    return out


# ------------------------------------------------------- coverage models (TensorFlow's converter)
@pytest.mark.parametrize("name", sorted(e["file"] for e in C.entries()
                                        if e["case"] in ("batch_matmul", "batch_matmul_const")))
def test_coverage_files_match_the_runtimes(name):
    """Every kind of the converter's BATCH_MATMUL files: bit-identical to TFLite Micro for int8 and int16x8,
    float within 1e-4; the hybrid and float16 files (TFLite Micro refuses them) against LiteRT."""
    e = entry(name)
    buf = C.read(e)
    seq = C.inputs(e, buf)
    got, report, _ = run_ours(buf, seq[0])
    refs = C.references(buf, seq)
    ref = refs["tflm"] if not isinstance(refs["tflm"], str) else refs["litert"]
    assert not isinstance(ref, str), ref
    ok, worst = C.agree([got], ref, e["kind"] in ("int8", "int16x8"))
    assert ok, f"{name}: largest difference {worst}"
    if e["kind"] in ("int8", "int16x8"):
        assert report.lowered == {"BATCH_MATMUL": 1} and not report.islands, report.summary()
    else:                           # float outputs: LiteRT's reference kernels too
        assert C.agree([got], refs["litert"], False)[0]


def test_attention_head_int8_is_all_integer_and_bit_identical():
    """softmax(Q K^T / sqrt(d)) V as the converter writes it (FULLY_CONNECTED, BATCH_MATMUL with adj_y, MUL,
    SOFTMAX, BATCH_MATMUL): every operator an integer kernel, no float island, TFLite Micro's bits."""
    e = entry("attention.int8.tflite")
    buf = C.read(e)
    seq = C.inputs(e, buf)
    got, report, mod = run_ours(buf, seq[0])
    assert report.lowered == {"BATCH_MATMUL": 2, "FULLY_CONNECTED": 3, "MUL": 1, "SOFTMAX": 1}
    assert not report.islands
    assert not ops_of(mod) & {"matmul", "permute_dims", "quantize", "dequantize", "nn.softmax"}
    np.testing.assert_array_equal(got[0], run_tflm(buf, seq[0])[0])


@pytest.mark.parametrize("name", ["attention.int16x8.tflite", "multi_head_attention.int16x8.tflite"])
def test_attention_int16x8_is_all_integer_and_bit_identical(name):
    """The 16x8 attention blocks: BATCH_MATMUL's int16 kernel with the 16x8 lowering's FULLY_CONNECTED, MUL and
    SOFTMAX (:mod:`tvm_memsched.relax.int8.lower16`, a branch of its own until merged)."""
    pytest.importorskip("tvm_memsched.relax.int8.lower16", reason="the 16x8 FULLY_CONNECTED and SOFTMAX kernels")
    e = entry(name)
    buf = C.read(e)
    seq = C.inputs(e, buf)
    got, report, _ = run_ours(buf, seq[0])
    assert report.lowered.get("BATCH_MATMUL") == 2 and not report.islands, report.summary()
    np.testing.assert_array_equal(got[0], run_tflm(buf, seq[0])[0])


def test_attention_head_float32_matches_tflite_micro():
    e = entry("attention.float32.tflite")
    buf = C.read(e)
    seq = C.inputs(e, buf)
    got, _, _ = run_ours(buf, seq[0])
    ok, worst = C.agree([got], [run_tflm(buf, seq[0])], False)
    assert ok, worst


# ------------------------------------------------------- builder models, random quantizations
@pytest.mark.parametrize("a_shape,b_shape,adj_x,adj_y,b_const", [
    ((2, 4, 6), (2, 6, 5), False, False, False),
    ((3, 6, 4), (3, 6, 5), True, False, False),          # adj_x: the left operand read transposed
    ((2, 4, 6), (2, 5, 6), False, True, False),          # adj_y (Q K^T)
    ((1, 2, 5, 3), (2, 1, 3, 4), False, False, False),   # both operands broadcast along a batch dimension
    ((2, 3, 4, 6), (6, 5), False, False, True),          # a constant right operand of rank 2
    ((6, 4), (2, 3, 5, 6), True, True, True),            # rank 2 against rank 4, both transposed
])
def test_int8_batch_matmul_is_bit_identical_to_tflite_micro(a_shape, b_shape, adj_x, adj_y, b_const):
    rng = np.random.default_rng(sum(a_shape) * 7 + sum(b_shape) + 2 * adj_x + adj_y)
    buf = quantized_bmm(rng, a_shape, b_shape, adj_x=adj_x, adj_y=adj_y, b_const=b_const)
    sets = [int_inputs(buf, np.random.default_rng(seed)) for seed in range(2)]
    got, report, mod = run_ours(buf, *sets)
    assert not report.islands and report.total == 1, report.summary()
    assert not ops_of(mod) & {"matmul", "permute_dims", "broadcast_to"}
    for outs, inputs in zip(got, sets):
        np.testing.assert_array_equal(outs[0], run_tflm(buf, inputs)[0])


@pytest.mark.parametrize("a_shape,b_shape,adj_x,adj_y", [
    ((2, 4, 64), (2, 64, 5), False, False),     # sums of 64 full-range products: beyond int32, in int64
    ((1, 3, 6, 4), (2, 1, 5, 6), True, True),
])
def test_int16_batch_matmul_is_bit_identical_to_tflite_micro(a_shape, b_shape, adj_x, adj_y):
    rng = np.random.default_rng(5)
    buf = quantized_bmm(rng, a_shape, b_shape, adj_x=adj_x, adj_y=adj_y, dtype=np.int16)
    inputs = int_inputs(buf, rng)
    if a_shape[-1] == 64:          # every product near +-2**30: many int32 sums would wrap
        inputs = [rng.choice(np.array([-32768, 32767], np.int16), s) for s in (a_shape, b_shape)]
    got, report, _ = run_ours(buf, inputs)
    assert report.lowered == {"BATCH_MATMUL": 1} and not report.islands
    np.testing.assert_array_equal(got[0], run_tflm(buf, inputs)[0])


def test_int64_requantization_matches_tflite():
    """The int16 kernels' ``MultiplyByQuantizedMultiplier(int64_t, ...)``: 16-bit multiplier, one rounding."""
    mbqm = fx.multiply_by_quantized_multiplier_64
    assert mbqm(-1000, 1 << 30, 0) == -500
    assert mbqm(3, 1 << 30, 0) == 2            # 1.5 rounds up
    assert mbqm(-3, 1 << 30, 0) == -1          # -1.5 rounds up too
    # a multiplier this close to 2**31 becomes 0x7FFF of 2**15: 2**30 * 32767 / 32768
    assert mbqm(1 << 40, 0x7FFFFFFF, -10) == 1073709056


def test_broadcast_constant_feeds_the_kernel_at_its_stored_shape():
    """A BROADCAST_TO of a constant along batch dimensions feeding BATCH_MATMUL: the constant itself is the
    operand (no broadcast copy in flash or RAM), int8 and float32 alike."""
    rng = np.random.default_rng(2)
    buf = quantized_bmm(rng, (3, 4, 6), (6, 5), b_const=True, broadcast_b=(3, 6, 5))
    inputs = int_inputs(buf, rng)
    got, report, mod = run_ours(buf, inputs)
    assert report.lowered == {"BATCH_MATMUL": 1} or report.lowered == {"FULLY_CONNECTED": 1}
    assert "broadcast_to" not in ops_of(mod)
    assert report.constant_bytes == 6 * 5
    np.testing.assert_array_equal(got[0], run_tflm(buf, inputs)[0])


def test_float_batch_matmul_with_constants_and_transposes():
    rng = np.random.default_rng(4)
    for a_shape, b_shape, adj_x, adj_y, b_const in [((2, 6, 4), (2, 5, 6), True, True, False),
                                                     ((1, 2, 4, 6), (3, 1, 6, 5), False, False, True)]:
        buf = float_bmm(rng, a_shape, b_shape, adj_x=adj_x, adj_y=adj_y, b_const=b_const)
        inputs = int_inputs(buf, rng)
        got, _, _ = run_ours(buf, inputs)
        ok, worst = C.agree([got], [run_tflm(buf, inputs)], False)
        assert ok, worst


# ------------------------------------------------------- dynamic-range quantization (LiteRT only)
@pytest.mark.parametrize("x_shape,w_shape,adj_x,adj_y,asymmetric,per_channel", [
    ((2, 4, 6), (2, 6, 5), False, False, True, False),
    ((2, 6, 4), (2, 6, 5), True, False, False, True),
    ((2, 4, 6), (1, 5, 6), False, True, True, True),     # LiteRT merges the input's batch into rows here
    ((4, 6), (3, 6, 5), False, False, False, False),
])
def test_hybrid_batch_matmul_computes_litert_reference_floats(x_shape, w_shape, adj_x, adj_y, asymmetric,
                                                              per_channel):
    rng = np.random.default_rng(7)
    buf = hybrid_bmm(rng, x_shape, w_shape, adj_x=adj_x, adj_y=adj_y, asymmetric=asymmetric,
                     per_channel=per_channel)
    x = (rng.uniform(-1, 1, x_shape) * 10.0 ** rng.integers(-2, 3, x_shape[:-1] + (1,))).astype(np.float32)
    got, _, mod = run_ours(buf, [x])
    np.testing.assert_array_equal(got[0], run_litert(buf, [x])[0])
    assert "matmul" not in ops_of(mod)


@pytest.mark.parametrize("x_shape,w_shape,adj_x,why", [
    ((2, 3, 4, 6), (2, 3, 6, 5), False, "rows' scales of other batches"),
    ((2, 1, 4, 6), (2, 3, 6, 5), False, "weights' row sums of other batches"),
    ((2, 6, 4), (1, 6, 5), True, "untransposed shape"),
])
def test_hybrid_shapes_litert_indexes_wrongly_are_refused_by_name(x_shape, w_shape, adj_x, why):
    """LiteRT's reference kernel gives wrong results for these (relative errors of 0.3 to 470 against the
    float product, measured): refused with the operator, its output and the reason, never imported."""
    from tvm_memsched.core.errors import InputFileError

    buf = hybrid_bmm(np.random.default_rng(1), x_shape, w_shape, adj_x=adj_x)
    with pytest.raises(InputFileError, match=rf"BATCH_MATMUL \(operator 0, output 'y'\).*{why}"):
        from_tflite_bytes(buf)


def test_int8_product_with_int32_output_is_refused_by_name():
    from tvm_memsched.core.errors import InputFileError

    mb = ModelBuilder()
    a = qtensor(mb, "a", [2, 3], 0.1, 0)
    b = qtensor(mb, "b", [3, 4], 0.1, 0)
    y = qtensor(mb, "y", [2, 4], 0.01, 0, np.int32)
    mb.op(B.BATCH_MATMUL, [a, b], [y], O.BatchMatMulOptions, options(False, False), version=1)
    with pytest.raises(InputFileError, match=r"BATCH_MATMUL \(operator 0, output 'y'\) of int8 quantized, int8 "
                                             r"quantized, int32 quantized"):
        from_tflite_bytes(mb.finish([a, b], [y]))


# ------------------------------------------------------- microcontroller (QEMU)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["attention.int8.tflite", "multi_head_attention.int8.tflite",
                                  "batch_matmul_const.int16x8.tflite"])
def test_micro_run_is_bit_identical_to_tflite_micro_in_less_ram(name, tmp_path, capsys):
    """``micro --run`` on mps2-an386: outputs bit-identical to TFLite Micro's, RAM (arena, I/O, stack) at
    most 0.8x TFLite Micro's smallest arena."""
    import json

    from tvm_memsched.app.cli import main

    out = tmp_path / "m"
    code = main(["micro", str(C.FOLDER + "/" + name), "-b", "mps2-an386", "--out", str(out), "--run", "-q"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "vs TFLite Micro: bit-identical (ok)" in text
    rep = json.loads((out / "model_report.json").read_text())
    assert rep["tflite_check"]["tflm"]["identical"] is True
    assert rep["int8"]["islands"] == []
    assert rep["ram_bytes"] <= 0.8 * rep["tflm"]["min_arena"], (rep["ram_bytes"], rep["tflm"]["min_arena"])
