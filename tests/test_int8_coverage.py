"""int8 operators of the coverage models in integer kernels, bit for bit as TFLite Micro computes them.

Each operator family is checked on its checked-in coverage model (``tests/data/coverage``) and on
one-operator models written here with random quantization (several seeds, negative zero points,
broadcasting): our build (``lower_int8`` + TVM's llvm) must equal TFLite Micro's outputs bit for bit
(LiteRT's reference kernels where TFLite Micro has no int8 kernel: SQRT, EXP, LOG, REDUCE_PROD) and the
lowering must leave no float island. One-input operators are checked on every int8 value at once, two-input
ones on every pair of values (a 256 x 256 broadcast).
"""

import numpy as np
import pytest

import coverage_models as C
import tflite_ops as T
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.int8.lower import lower_int8
from tvm_memsched.tflite.builder import ModelBuilder, tfl

tvm = pytest.importorskip("tvm")
B, O = T.B, T.O
BOOL = tfl.TensorType.BOOL

#: every int8 value, as one row
ALL = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
#: every pair of int8 values: ``a`` (256, 1) against ``b`` (1, 256)
PAIRS = (ALL.reshape(256, 1), ALL)


# ----------------------------------------------------------------- runners
def run_ours(buf, sets):
    """Our outputs on each input set (lowered, built once for llvm) and the lowering report."""
    from tvm_memsched.relax.compare import run_vm

    mod, report = lower_int8(from_tflite_bytes(buf))
    ex = tvm.compile(mod, "llvm")
    return [[np.asarray(o) for o in run_vm(ex, inputs)] for inputs in sets], report


def run_reference(buf, sets, runtime: str):
    """TFLite Micro's (``tflm``) or LiteRT's reference kernels' (``litert``) outputs on each input set."""
    from tvm_memsched.tflite.verify import litert_run_sequence, tflm_run_sequence

    if runtime == "tflm":
        return tflm_run_sequence(buf, [{str(i): v for i, v in enumerate(s)} for s in sets])
    return [list(r.values()) for r in litert_run_sequence(buf, [list(s) for s in sets], reference_kernels=True)]


def check(buf, inputs, runtime="tflm", lowered=None, sets=None, float_ops=()):
    """Assert our outputs equal ``runtime``'s bit for bit (on ``inputs``, or on each of ``sets``) and that the
    lowering left no float island (but for the file's own float operators ``float_ops``, by Relax name);
    returns ours."""
    sets = sets or [inputs]
    ours, report = run_ours(buf, sets)
    assert {i.split(" ")[0] for i in report.islands} == set(float_ops), report.islands
    if lowered is not None:
        assert set(report.lowered) == set(lowered), report.lowered
    for got, ref in zip(ours, run_reference(buf, sets, runtime)):
        assert len(got) == len(ref)
        for a, b in zip(got, map(np.asarray, ref)):
            assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
            bad = np.flatnonzero(a.reshape(-1) != b.reshape(-1))
            assert bad.size == 0, f"{bad.size} of {a.size} differ, e.g. at {bad[:5]}: {a.reshape(-1)[bad[:5]]} " \
                                  f"(ours) vs {b.reshape(-1)[bad[:5]]} ({runtime})"
    return ours


def check_coverage_model(case: str, lowered=None, runtime="tflm", float_ops=()):
    """The coverage model ``case``.int8 on two input sets in the manifest's ranges, against ``runtime``."""
    (entry,) = [e for e in C.entries() if e["case"] == case and e["kind"] == "int8"]
    buf = C.read(entry)
    check(buf, None, runtime, lowered, sets=C.inputs(entry, buf, 0, 2), float_ops=float_ops)


def rand_q(rng, lo=0.004, hi=0.1):
    """A random (scale, zero point), the zero point often negative or at the ends of the range."""
    zp = int(rng.choice([-128, 127, rng.integers(-128, 0), rng.integers(-128, 128)]))
    return float(np.float32(rng.uniform(lo, hi))), zp


def model(*ops):
    """A model of independent operators ``(code, ins, outs[, options[, version]])``: ``ins``/``outs`` are
    ``(shape, q)`` int8 tensors (``q`` a (scale, zero point)), ``(shape, None, dtype)`` plain ones (``BOOL``
    for bool) or ``(shape, q, dtype, data)`` constants. Its inputs are the operators' non-constant inputs,
    its outputs theirs, in order (one import, one build and one run check them all)."""
    mb = ModelBuilder()
    ins_all, outs_all = [], []

    def tensor(spec):
        shape, q = spec[0], spec[1]
        dtype = spec[2] if len(spec) > 2 else np.int8
        data = spec[3] if len(spec) > 3 else None
        kw = {"scale": q[0], "zero_point": q[1]} if q is not None else {}
        name = f"t{len(mb.tensors)}"
        if dtype == BOOL:
            return mb.tensor(name, shape, np.int8, type_code=BOOL)
        return mb.tensor(name, shape, dtype, data=data, **kw)

    for code, ins, outs, *rest in ops:
        it, ot = [tensor(s) for s in ins], [tensor(s) for s in outs]
        options = rest[0] if rest and rest[0] else (0, None)
        mb.op(code, it, ot, *options, version=rest[1] if len(rest) > 1 else 1)
        ins_all += [t for t, s in zip(it, ins) if len(s) < 4]
        outs_all += ot
    return mb.finish(ins_all, outs_all)


# ----------------------------------------------------------------- one-input tables
UNARY = [("ABS", B.ABS, "tflm", (0.02, 0.1), (0.01, 0.1)),
         ("RSQRT", B.RSQRT, "tflm", (0.002, 0.05), (0.01, 0.3)),
         ("SQRT", B.SQRT, "litert", (0.002, 0.05), (0.003, 0.05)),
         ("EXP", B.EXP, "litert", (0.005, 0.05), (0.01, 0.2)),
         ("LOG", B.LOG, "litert", (0.005, 0.05), (0.01, 0.1))]


@pytest.mark.parametrize("name,code,runtime,sin,sout", UNARY, ids=[u[0] for u in UNARY])
def test_one_input_operators_are_tables_exact_on_every_value(name, code, runtime, sin, sout):
    ops = []
    for seed in range(4):
        rng = np.random.default_rng(seed)
        qin, qout = rand_q(rng, *sin), rand_q(rng, *sout)
        if name in ("RSQRT", "SQRT", "LOG"):
            qin = (qin[0], -128)                   # TFLite fails the invocation on negative values
        if name == "ABS" and seed == 3:
            qout = qin                             # equal scales: no rescaling
        ops.append((code, [((1, 256), qin)], [((1, 256), qout)], None, 2))
    check(model(*ops), [ALL] * len(ops), runtime, {name})


@pytest.mark.parametrize("case,runtime", [("abs", "tflm"), ("rsqrt", "tflm"), ("sqrt", "litert"), ("exp", "litert"),
                                          ("log", "litert")])
def test_one_input_coverage_models(case, runtime):
    check_coverage_model(case, {case.upper()}, runtime)


# ----------------------------------------------------------------- operators on the stored values
def opts(name, **fields):
    """``(BuiltinOptions type, options object)`` of the options class ``name``."""
    return getattr(O, name), T.options(getattr(tfl, name + "T"), **fields)


def i32(values):
    v = np.asarray(values, np.int32)
    return (list(v.shape), None, np.int32, v)


def test_value_operators_run_on_int8_values():
    """MAXIMUM, MINIMUM (broadcast), REDUCE_MAX, REDUCE_MIN, ARG_MAX, ARG_MIN, REVERSE_V2, MIRROR_PAD, FILL, SELECT_V2
    and RELU6 are imported on the int8 values: no float."""
    rng = np.random.default_rng(0)
    q = (0.03, -7)
    x = ((2, 5, 4, 3), q)
    buf = model((B.MAXIMUM, [x, ((1, 1, 4, 3), q)], [x], opts("MaximumMinimumOptions"), 2),
                (B.MINIMUM, [x, ((3,), q)], [x], opts("MaximumMinimumOptions"), 2),
                (B.REDUCE_MAX, [x, i32([1, 2])], [((2, 1, 1, 3), q)], opts("ReducerOptions", keepDims=True), 2),
                (B.REDUCE_MIN, [x, i32([-1])], [((2, 5, 4), q)], opts("ReducerOptions", keepDims=False), 2),
                (B.ARG_MAX, [x, i32([3])], [((2, 5, 4), None, np.int32)], opts("ArgMaxOptions", outputType=2), 2),
                (B.ARG_MIN, [x, i32([1])], [((2, 4, 3), None, np.int32)], opts("ArgMinOptions", outputType=2), 2),
                (B.REVERSE_V2, [x, i32([2])], [x], opts("ReverseV2Options"), 2),
                (B.MIRROR_PAD, [x, i32([[0, 0], [1, 2], [2, 0], [0, 1]])], [((2, 8, 6, 4), q)],
                 opts("MirrorPadOptions", mode=0), 2),
                (B.FILL, [i32([2, 3]), ((), q)], [((2, 3), q)], opts("FillOptions"), 3),
                (B.SELECT_V2, [((2, 5, 4, 3), None, BOOL), x, ((1, 1, 4, 1), q)], [x], opts("SelectV2Options"), 2),
                (B.RELU6, [((2, 5, 4, 3), (0.05, -100))], [((2, 5, 4, 3), (0.02, 3))], None, 2))
    xs = [rng.integers(-128, 128, s).astype(np.int8) for s in
          [(2, 5, 4, 3), (1, 1, 4, 3), (2, 5, 4, 3), (3,)] + [(2, 5, 4, 3)] * 6 + [()]]
    xs[2][:, :, 1] = xs[0][:, :, 1]                         # ties: ARG_MAX / ARG_MIN take the first
    xs += [rng.integers(0, 2, (2, 5, 4, 3)).astype(bool), rng.integers(-128, 128, (2, 5, 4, 3)).astype(np.int8),
           rng.integers(-128, 128, (1, 1, 4, 1)).astype(np.int8), rng.integers(-128, 128, (2, 5, 4, 3)).astype(np.int8)]
    check(buf, xs, "tflm", {"ARG_MAX", "ARG_MIN"})     # (written as int32 by a kernel of their own)


def test_value_operators_with_different_quantization():
    """MAXIMUM with two scales stays TVM's dequantize/quantize form, reported as a float island; a REVERSE_V2
    whose output quantization differs is refused by name."""
    from tvm_memsched.core.errors import InputFileError

    buf = model((B.MAXIMUM, [((1, 8), (0.1, 0)), ((1, 8), (0.2, 0))], [((1, 8), (0.2, 0))],
                 opts("MaximumMinimumOptions"), 2))
    assert [i.split(" ")[0] for i in lower_int8(from_tflite_bytes(buf))[1].islands] == ["maximum"]
    buf = model((B.REVERSE_V2, [((1, 8), (0.1, 0)), i32([1])], [((1, 8), (0.1, 1))], opts("ReverseV2Options"), 2))
    with pytest.raises(InputFileError, match="REVERSE_V2 with different quantization"):
        from_tflite_bytes(buf)


def test_mirror_pad_symmetric():
    """SYMMETRIC mode (TVM's converter refuses it): int8 and float32."""
    rng = np.random.default_rng(7)
    q = rand_q(rng)
    buf = model((B.MIRROR_PAD, [((2, 5, 4, 3), q), i32([[1, 1], [2, 3], [4, 0], [0, 1]])], [((4, 10, 8, 4), q)],
                 opts("MirrorPadOptions", mode=1), 2),
                (B.MIRROR_PAD, [((2, 5, 4, 3), None, np.float32), i32([[0, 2], [5, 0], [1, 1], [3, 3]])],
                 [((4, 10, 6, 9), None, np.float32)], opts("MirrorPadOptions", mode=1), 2))
    check(buf, [rng.integers(-128, 128, (2, 5, 4, 3)).astype(np.int8),
                rng.standard_normal((2, 5, 4, 3)).astype(np.float32)], "tflm", set())


@pytest.mark.parametrize("case", ["maximum", "minimum", "reduce_max", "reduce_min", "arg_max", "arg_min", "reverse_v2",
                                  "mirror_pad", "fill", "select_v2", "relu6"])
def test_value_operator_coverage_models(case):
    lowered = {"select_v2": {"GREATER"}, "arg_max": {"ARG_MAX"}, "arg_min": {"ARG_MIN"}}
    check_coverage_model(case, lowered.get(case, set()))


# ----------------------------------------------------------------- SUM, REDUCE_PROD
def test_sum_and_reduce_prod_with_random_quantization():
    rng = np.random.default_rng(1)
    sum_ops, prod_ops, xs = [], [], []
    for axes, keep, out in (([1, 2], True, (2, 1, 1, 3)), ([-1], False, (2, 5, 4)), ([0, 3], False, (5, 4))):
        x = rng.integers(-128, 128, (2, 5, 4, 3)).astype(np.int8)
        sum_ops.append((B.SUM, [((2, 5, 4, 3), rand_q(rng)), i32(axes)], [(out, rand_q(rng, 0.05, 0.5))],
                        opts("ReducerOptions", keepDims=keep), 2))
        prod_ops.append((B.REDUCE_PROD, [((2, 5, 4, 3), rand_q(rng, 0.05, 0.2)), i32(axes)],
                         [(out, rand_q(rng, 0.05, 0.5))], opts("ReducerOptions", keepDims=keep), 2))
        xs.append(x)
    check(model(*sum_ops), xs, "tflm", {"SUM"})
    check(model(*prod_ops), xs, "litert", {"REDUCE_PROD"})    # TFLite Micro has no int8 REDUCE_PROD


def test_sum_and_reduce_prod_coverage_models():
    check_coverage_model("sum", {"SUM"})
    check_coverage_model("reduce_prod", {"REDUCE_PROD"}, "litert")


# ----------------------------------------------------------------- two inputs, every pair of values
def pair_ops(code, options, rng, n, out_dtype=None, version=2, **qkw):
    """``n`` operators ``code`` on (256, 1) x (1, 256) inputs, each with random quantization, and their inputs."""
    ops = []
    for _ in range(n):
        out = ((256, 256), None, out_dtype) if out_dtype is not None else ((256, 256), rand_q(rng, **qkw))
        ops.append((code, [((256, 1), rand_q(rng)), ((1, 256), rand_q(rng))], [out], options, version))
    return ops, list(PAIRS) * n


def test_squared_difference_on_every_pair():
    ops, xs = pair_ops(B.SQUARED_DIFFERENCE, opts("SquaredDifferenceOptions"), np.random.default_rng(2), 3,
                       lo=0.005, hi=0.3)
    check(model(*ops), xs, "tflm", {"SQUARED_DIFFERENCE"})


def test_div_on_every_pair_with_activations():
    rng = np.random.default_rng(3)
    ops, xs = [], []
    for act in (0, 1, 3):
        o, x = pair_ops(B.DIV, opts("DivOptions", fusedActivationFunction=act), rng, 1, version=1, lo=0.05, hi=2.0)
        ops, xs = ops + o, xs + x
    check(model(*ops), xs, "tflm", {"DIV"})


COMPARE = [B.EQUAL, B.NOT_EQUAL, B.GREATER, B.GREATER_EQUAL, B.LESS, B.LESS_EQUAL]


def test_comparisons_on_every_pair():
    rng = np.random.default_rng(4)
    names = ["EqualOptions", "NotEqualOptions", "GreaterOptions", "GreaterEqualOptions", "LessOptions",
             "LessEqualOptions"]
    ops, xs = [], []
    for code, name in zip(COMPARE, names):
        o, x = pair_ops(code, opts(name), rng, 1, out_dtype=BOOL)
        ops, xs = ops + o, xs + x
    # equal scales (TFLite's converter's usual case) and a scalar constant
    ops.append((B.GREATER, [((256, 1), (0.02, 5)), ((), (0.02, 5), np.int8, np.array(9, np.int8))],
                [((256, 1), None, BOOL)], opts("GreaterOptions"), 2))
    xs.append(PAIRS[0])
    check(model(*ops), xs, "tflm", {"EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"})


@pytest.mark.parametrize("case", ["squared_difference", "div", "equal", "not_equal", "greater", "greater_equal",
                                  "less", "less_equal", "logical_and", "select_v2"])
def test_two_input_coverage_models(case):
    # the EQUAL / NOT_EQUAL files round their inputs with float ROUND operators; NOT_EQUAL is a float one
    check_coverage_model(case, float_ops={"equal": {"round"}, "not_equal": {"round", "not_equal"}}.get(case, ()))


# ----------------------------------------------------------------- resize, normalisations
def test_resize_bilinear_in_tflite_modes():
    rng = np.random.default_rng(5)
    ops, xs = [], []
    for (h, w), (oh, ow) in (((6, 6), (9, 11)), ((5, 7), (3, 4)), ((1, 4), (1, 9)), ((4, 3), (8, 6))):
        for align, half in ((False, False), (True, False), (False, True)):
            q = rand_q(rng)
            ops.append((B.RESIZE_BILINEAR, [((1, h, w, 3), q), i32([oh, ow])], [((1, oh, ow, 3), q)],
                        opts("ResizeBilinearOptions", alignCorners=align, halfPixelCenters=half), 3))
            xs.append(rng.integers(-128, 128, (1, h, w, 3)).astype(np.int8))
    check(model(*ops), xs, "tflm", {"RESIZE_BILINEAR"})


def test_l2_normalization_and_log_softmax():
    rng = np.random.default_rng(6)
    l2, ls, x_l2, x_ls = [], [], [], []
    for shape in ((2, 3, 5), (4, 1), (7,)):
        l2.append((B.L2_NORMALIZATION, [(shape, rand_q(rng))], [(shape, (1 / 128, 0))],
                   opts("L2NormOptions", fusedActivationFunction=0), 2))
        x_l2.append(rng.integers(-128, 128, shape).astype(np.int8))
        ls.append((B.LOG_SOFTMAX, [(shape, rand_q(rng, 0.01, 0.3))], [(shape, (16 / 256, 127))],
                   opts("LogSoftmaxOptions"), 2))
        x_ls.append(rng.integers(-128, 128, shape).astype(np.int8))
    zp = l2[1][1][0][1][1]
    x_l2[1][:] = np.clip([[zp + 5], [zp - 3], [zp], [zp + 1]], -128, 127)   # sums of squares 0 and 1: special
    check(model(*l2), x_l2, "tflm", {"L2_NORMALIZATION"})
    check(model(*ls), x_ls, "tflm", {"LOG_SOFTMAX"})


@pytest.mark.parametrize("case,op", [("resize_bilinear", "RESIZE_BILINEAR"),
                                     ("resize_bilinear_align", "RESIZE_BILINEAR"),
                                     ("resize_bilinear_half_pixel", "RESIZE_BILINEAR"),
                                     ("l2_normalization", "L2_NORMALIZATION"), ("log_softmax", "LOG_SOFTMAX")])
def test_resize_and_normalisation_coverage_models(case, op):
    check_coverage_model(case, {op})


# ----------------------------------------------------------------- ELU, CUMSUM (float in the coverage files)
def test_elu_and_cumsum_in_int8():
    """TFLite Micro has int8 ELU (a table) and CUMSUM (rescaled sums); TVM's converter refuses both quantized."""
    rng = np.random.default_rng(9)
    elu = [(B.ELU, [((1, 256), rand_q(rng, 0.01, 0.05))], [((1, 256), rand_q(rng, 0.005, 0.05))]) for _ in range(3)]
    check(model(*elu), [ALL] * 3, "tflm", {"ELU"})
    ops, xs = [], []
    for axis, exclusive, reverse in ((1, False, False), (2, True, False), (0, False, True), (-1, True, True)):
        ops.append((B.CUMSUM, [((3, 4, 5), rand_q(rng)), i32(axis)], [((3, 4, 5), rand_q(rng, 0.05, 0.5))],
                    opts("CumsumOptions", exclusive=exclusive, reverse=reverse)))
        xs.append(rng.integers(-128, 128, (3, 4, 5)).astype(np.int8))
    check(model(*ops), xs, "tflm", {"CUMSUM"})


# ----------------------------------------------------------------- the microcontroller path
def micro_run(path, out, capsys):
    """``micro FILE -b mps2-an386 --run`` as a user runs it: its exit code, printout and report."""
    import json

    from tvm_memsched.app.cli import main

    code = main(["micro", str(path), "-b", "mps2-an386", "--out", str(out), "--run"])
    return code, capsys.readouterr().out, json.loads((out / "model_report.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("case", ["div", "l2_normalization", "log_softmax", "resize_bilinear_half_pixel", "equal",
                                  "relu6", "arg_max", "reduce_prod", "sqrt"])
def test_micro_runs_coverage_models_bit_identical_in_less_ram_than_tflm(case, tmp_path, capsys):
    """QEMU's mps2-an386 run equals TFLite Micro bit for bit, in at most 0.8x TFLite Micro's smallest arena;
    LiteRT's reference kernels where TFLite Micro refuses the file (REDUCE_PROD) or fails to invoke it (SQRT)."""
    (entry,) = [e for e in C.entries() if e["case"] == case and e["kind"] == "int8"]
    code, out, rep = micro_run(f"{C.FOLDER}/{entry['file']}", tmp_path, capsys)
    assert code == 0, out
    litert = case in ("reduce_prod", "sqrt")
    assert ("vs LiteRT reference kernels: bit-identical (ok)" if litert else
            "vs TFLite Micro: bit-identical (ok)") in out, out
    if case != "reduce_prod":                  # (TFLite Micro has no arena for a file it refuses)
        assert rep["ram_bytes"] <= 0.8 * rep["tflm"]["min_arena"], (rep["ram_bytes"], rep["tflm"])


@pytest.mark.slow
def test_micro_runs_new_kernels_with_random_quantization(tmp_path, capsys):
    """One model of the new kernels with random quantization (DIV and a comparison on every pair of values,
    tables on every value, SQUARED_DIFFERENCE, L2_NORMALIZATION, LOG_SOFTMAX, RESIZE_BILINEAR) through
    ``micro --run``: bit-identical to TFLite Micro on the board."""
    rng = np.random.default_rng(8)
    ops = [(B.DIV, [((256, 1), rand_q(rng)), ((1, 256), rand_q(rng))], [((256, 256), rand_q(rng, 0.05, 2.0))],
            opts("DivOptions", fusedActivationFunction=0), 1),
           (B.LESS_EQUAL, [((256, 1), rand_q(rng)), ((1, 256), rand_q(rng))], [((256, 256), None, BOOL)],
            opts("LessEqualOptions"), 2),
           (B.SQUARED_DIFFERENCE, [((16, 1), rand_q(rng)), ((1, 16), rand_q(rng))], [((16, 16), rand_q(rng))],
            opts("SquaredDifferenceOptions"), 2),
           (B.RSQRT, [((1, 256), (0.01, -128))], [((1, 256), rand_q(rng, 0.01, 0.3))], None, 2),
           (B.ABS, [((1, 256), rand_q(rng))], [((1, 256), rand_q(rng))], None, 2),
           (B.L2_NORMALIZATION, [((3, 4, 5), rand_q(rng))], [((3, 4, 5), (1 / 128, 0))],
            opts("L2NormOptions", fusedActivationFunction=0), 2),
           (B.LOG_SOFTMAX, [((3, 10), rand_q(rng, 0.01, 0.3))], [((3, 10), (16 / 256, 127))],
            opts("LogSoftmaxOptions"), 2),
           (B.RESIZE_BILINEAR, [((1, 5, 7, 2), (0.02, 3)), i32([8, 4])], [((1, 8, 4, 2), (0.02, 3))],
            opts("ResizeBilinearOptions", alignCorners=False, halfPixelCenters=True), 3)]
    path = tmp_path / "ops.tflite"
    path.write_bytes(model(*ops))
    code, out, rep = micro_run(path, tmp_path / "c", capsys)
    assert code == 0, out
    assert "vs TFLite Micro: bit-identical (ok)" in out, out
    assert rep["int8"]["islands"] == [], rep["int8"]
