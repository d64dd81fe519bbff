"""One network, many exporters: the spellings of :mod:`tvm_memsched.zoo.exporter_styles` plan alike once
:class:`FoldAffineChains` and :class:`AbsorbTransposes` have written them one way, and compute what
onnxruntime (torch for ``.pt2``) computes; unit tests of both passes on small graphs."""

import io

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

from tvm_memsched.relax.compare import compare, run_vm
from tvm_memsched.relax.passes.absorb_transposes import AbsorbTransposes, absorb_transposes
from tvm_memsched.relax.passes.affine_chains import FoldAffineChains, fold_affine_chains
from tvm_memsched.relax.pipeline import pipeline
from tvm_memsched.zoo import exporter_styles, torch_nets

LLVM = tvm.target.Target({"kind": "llvm"})
SHAPE = [1, 4, 5, 5]
RNG = np.random.default_rng(0)
STATS = [RNG.uniform(0.5, 1.5, 4).astype("float32"), RNG.standard_normal(4).astype("float32"),
         RNG.standard_normal(4).astype("float32"), RNG.uniform(0.5, 1.5, 4).astype("float32")]


def _c(a):
    a = np.ascontiguousarray(a, "float32")
    return relax.const(a, "float32")


def _module(body, shape=SHAPE, dtype="float32"):
    """``main(x) = relu(body(bb, x))`` (the relu keeps the chain's result from being the output itself)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, dtype))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(body(bb, x)))
        bb.emit_func_output(y)
    return bb.finalize()


def _batch_norm(bb, x, training=False, stats=STATS, axis=1):
    bn = bb.emit(relax.op.nn.batch_norm(x, *[_c(s) for s in stats], axis=axis, epsilon=1e-5, training=training))
    return bb.emit(relax.TupleGetItem(bn, 0))


def _caffe2(bb, x):
    ones, zeros = np.ones(4, "float32"), np.zeros(4, "float32")
    h = _batch_norm(bb, x, stats=[ones, zeros, STATS[2], STATS[3]])
    h = bb.emit(relax.op.multiply(h, _c(STATS[0].reshape(1, 4, 1, 1))))
    return bb.emit(relax.op.add(h, _c(STATS[1].reshape(1, 4, 1, 1))))


def _decomposed(bb, x):
    h = bb.emit(relax.op.subtract(x, _c(STATS[2].reshape(1, 4, 1, 1))))
    std = bb.emit(relax.op.sqrt(bb.emit(relax.op.add(_c(STATS[3].reshape(1, 4, 1, 1)), _c(np.float32(1e-5))))))
    h = bb.emit(relax.op.divide(h, std))
    h = bb.emit(relax.op.multiply(h, _c(STATS[0].reshape(1, 4, 1, 1))))
    return bb.emit(relax.op.add(h, _c(STATS[1].reshape(4, 1, 1))))


def _ops(mod):
    return [b.value.op.name for blk in mod["main"].body.blocks for b in blk.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)]


def _run(mod, x):
    return run_vm(tvm.compile(mod, LLVM), [x])[0]


def _x(shape=SHAPE, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# ---------------------------------------------------------------------------------------------- unit tests
@pytest.mark.parametrize("spelling", [_batch_norm, _caffe2, _decomposed])
def test_every_batch_norm_spelling_becomes_the_same_plain_arithmetic_bit_for_bit(spelling):
    mod = _module(spelling)
    new, report = fold_affine_chains(mod)
    assert [r.form for r in report] == [["subtract", "divide", "multiply", "add"]]
    assert _ops(new) == ["relax.subtract", "relax.divide", "relax.multiply", "relax.add", "relax.nn.relu"]
    x = _x()
    x[0, :, 0, 0] = STATS[2]                    # x == mean: the cancellation the spellings must agree on
    ref = _run(mod, x)
    assert np.array_equal(_run(new, x), ref)
    # the three spellings of the same statistics give the same bits (TVM's batch norm kernel is this arithmetic)
    assert np.array_equal(_run(fold_affine_chains(_module(_batch_norm))[0], x), ref)


def _reversed_subtract(bb, x):
    """``(1 - x) * gamma``: the constant on the left of the subtraction (a GRU's ``1 - z``), cast from float16
    as a float16 model's constants are (not a plain constant: exact mode rewrites the chain)."""
    one = bb.emit(relax.op.astype(relax.const(np.float16(1.0)), "float32"))
    h = bb.emit(relax.op.subtract(one, x))
    return bb.emit(relax.op.multiply(h, _c(STATS[0].reshape(1, 4, 1, 1))))


@pytest.mark.parametrize("mode", ["exact", "scale_shift"])
def test_a_constant_minus_the_tensor_folds(mode):
    """``c - x`` is a step of the chain (negated scale); in exact mode it stays ``c - x`` (was: an operator
    ``rsubtract`` Relax does not have, a traceback on a float16 GRU)."""
    mod = _module(_reversed_subtract)
    new, report = fold_affine_chains(mod, mode)
    x = _x()
    ref = _run(mod, x)
    if mode == "exact":
        assert np.array_equal(_run(new, x), ref)
    else:
        assert [r.form for r in report] == [["multiply", "add"]]
        np.testing.assert_allclose(_run(new, x), ref, rtol=1e-6, atol=1e-6)


def test_scale_shift_is_one_multiply_and_add_within_rounding():
    mod = _module(_decomposed)
    new, report = fold_affine_chains(mod, "scale_shift")
    assert [r.form for r in report] == [["multiply", "add"]]
    assert _ops(new) == ["relax.multiply", "relax.add", "relax.nn.relu"]
    x = _x()
    gamma, beta, mean, var = (s.astype(np.float64).reshape(1, 4, 1, 1) for s in STATS)
    exact = np.maximum((x - mean) / np.sqrt(var + 1e-5) * gamma + beta, 0)
    scale = gamma / np.sqrt(var + 1e-5)
    bound = 4 * 2.0 ** -24 * (np.abs(x * scale) + np.abs(mean * scale) + np.abs(beta) + np.abs(exact))
    assert np.all(np.abs(_run(new, x) - exact) <= bound)             # a few units in the last place
    assert np.all(np.abs(_run(mod, x) - exact) <= bound)


def test_a_chain_after_a_convolution_folds_into_its_weights():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((6, 4, 3, 3)).astype("float32")

    def conv_bn(bb, x):
        y = bb.emit(relax.op.nn.conv2d(x, _c(w), padding=1))
        stats = [rng.uniform(0.5, 1.5, 6).astype("float32") for _ in range(4)]
        return _batch_norm(bb, y, stats=stats)

    mod = _module(conv_bn)
    new, report = fold_affine_chains(mod, "scale_shift", into_conv=True)
    assert [r.form for r in report] == [["conv2d", "add"]]
    assert _ops(new) == ["relax.nn.conv2d", "relax.add", "relax.nn.relu"]
    x = _x()
    ref, ours = _run(mod, x), _run(new, x)
    # not bit-identical (the weights are scaled before the sum): within float32 rounding of the 36-term sums
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # a convolution's bias alone is the canonical form already
    bias = _module(lambda bb, x: bb.emit(relax.op.add(bb.emit(relax.op.nn.conv2d(x, _c(w), padding=1)),
                                                      _c(np.ones((1, 6, 1, 1))))))
    assert fold_affine_chains(bias, "scale_shift", into_conv=True)[1] == []


def _two_uses(bb, x):
    y = bb.emit(relax.op.multiply(x, _c(STATS[0].reshape(1, 4, 1, 1))))
    return bb.emit(relax.op.add(bb.emit(relax.op.add(y, _c(np.ones((1, 4, 1, 1))))), y))


NOT_FOLDED = {
    "training batch norm": lambda bb, x: _batch_norm(bb, x, training=True),
    "two varying axes": lambda bb, x: bb.emit(relax.op.multiply(x, _c(np.arange(20).reshape(1, 4, 5, 1) + 1))),
    "constant over the tensor": lambda bb, x: bb.emit(relax.op.multiply(x, _c(np.arange(100).reshape(SHAPE)))),
    "constant enlarging the tensor": lambda bb, x: bb.emit(relax.op.add(
        bb.emit(relax.op.mean(x, axis=[2, 3], keepdims=True)), _c(np.ones(SHAPE)))),
    "c / x": lambda bb, x: bb.emit(relax.op.divide(_c(np.float32(2)), x)),
    "x * y": lambda bb, x: bb.emit(relax.op.multiply(x, bb.emit(relax.op.nn.relu(x)))),
    "already plain": lambda bb, x: bb.emit(relax.op.add(bb.emit(relax.op.multiply(x, _c(STATS[0].reshape(
        1, 4, 1, 1)))), _c(STATS[1].reshape(1, 4, 1, 1)))),
    "intermediate used twice": _two_uses,
}


@pytest.mark.parametrize("case", list(NOT_FOLDED))
def test_what_is_not_a_foldable_chain_is_left_alone(case):
    mod = _module(NOT_FOLDED[case])
    for mode in ("exact", "scale_shift"):
        new, report = fold_affine_chains(mod, mode, into_conv=mode == "scale_shift")
        assert report == [] and tvm_ffi.structural_equal(new, mod), (case, mode)


def test_integer_tensors_are_left_alone():
    mod = _module(lambda bb, x: bb.emit(relax.op.subtract(x, relax.const(np.zeros((1, 4, 1, 1), "int32")))),
                  dtype="int32")
    assert fold_affine_chains(mod)[1] == []


def test_pass_options():
    assert FoldAffineChains().info.name == "FoldAffineChains"
    with pytest.raises(ValueError, match="into_conv"):
        FoldAffineChains(into_conv=True)
    with pytest.raises(ValueError, match="unknown affine chain form"):
        FoldAffineChains("fold")
    p = FoldAffineChains()
    tvm.transform.Sequential([p])(_module(_caffe2))
    assert [r.steps for r in p.report] == [["batch_norm", "multiply", "add"]]


def _keras_block(shared_input=False, pooled_twice=False):
    """NHWC: transpose -> conv (NCHW) -> transpose, * scale + shift, relu, transpose -> max pool -> transpose."""
    rng = np.random.default_rng(3)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 8, 8, 4], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
            y = bb.emit(relax.op.nn.conv2d(t, _c(rng.standard_normal((6, 4, 3, 3))), padding=1))
            h = bb.emit(relax.op.permute_dims(y, [0, 2, 3, 1]))
            h = bb.emit(relax.op.add(bb.emit(relax.op.multiply(h, _c(rng.uniform(0.5, 1.5, 6)))),
                                     _c(rng.standard_normal(6))))
            h = bb.emit(relax.op.nn.relu(h))
            p = bb.emit(relax.op.nn.max_pool2d(bb.emit(relax.op.permute_dims(h, [0, 3, 1, 2])), 2, 2))
            out = relax.op.permute_dims(p, [0, 2, 3, 1])
            if pooled_twice:       # the NCHW pooling result is read by something else too
                out = relax.op.add(bb.emit(out), relax.op.permute_dims(p, [0, 2, 3, 1]))
            if shared_input:       # the NCHW input transpose is also a result
                out = relax.Tuple([bb.emit(out), t])
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.finalize()


def test_convolution_and_pooling_between_transposes_run_channels_last_bit_identically():
    mod = _keras_block()
    new, absorbed = absorb_transposes(mod)
    assert absorbed == ["relax.nn.conv2d", "relax.nn.max_pool2d"]
    assert "relax.permute_dims" not in _ops(new)
    c = compare(mod, LLVM, repeat=0)
    assert c.numerics_ok and c.max_abs_diff == 0        # NCHW summation order restored: bit-identical
    off = compare(mod, LLVM, repeat=0, run=False, absorb_transposes=False)
    assert c.memsched_planned_bytes < off.memsched_planned_bytes


def test_transposes_that_are_not_a_sandwich_stay():
    new, absorbed = absorb_transposes(_keras_block(pooled_twice=True))
    assert absorbed == ["relax.nn.conv2d"]                           # the pooling's result is read twice
    new, absorbed = absorb_transposes(_keras_block(shared_input=True))   # the conv reads x, t stays a result
    assert absorbed == ["relax.nn.conv2d", "relax.nn.max_pool2d"] and "relax.permute_dims" in _ops(new)
    assert AbsorbTransposes().info.name == "AbsorbTransposes"


# ------------------------------------------------------------------------- a tiny DenseNet in every style
TINY = dict(width=0.25, num_classes=10, blocks=(1, 1), growth=16)


@pytest.fixture(scope="module")
def planned():
    """style -> (our planned bytes, our outputs, the exporter's runtime's outputs) of a tiny DenseNet at 32x32."""
    return {}


def _reference(style, data, net):
    if style == "pt2":
        import torch

        with torch.no_grad():
            return net(torch.from_numpy(exporter_styles.style_input("onnx", 32))).numpy()
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {"input": exporter_styles.style_input(style, 32)})[0]


@pytest.mark.slow           # one full pipeline build per style (about 10 s each; torch.export for .pt2)
@pytest.mark.parametrize("style", exporter_styles.STYLES)
def test_tiny_densenet_style_matches_its_runtime(style, planned, tmp_path):
    from tvm_memsched.relax.frontends.frontend import from_file

    net = torch_nets.densenet(**TINY)
    path = tmp_path / f"d.{'pt2' if style == 'pt2' else 'onnx'}"
    exporter_styles.export_style(net, style, str(path), 32)
    mod = from_file(str(path))
    p = pipeline(LLVM)
    ours = run_vm(tvm.compile(mod, LLVM, relax_pipeline=p), [exporter_styles.style_input(style, 32)])[0]
    ref = _reference(style, path.read_bytes(), net)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(ref).max())))
    planned[style] = sum(sum(f.arena_bytes.values()) for f in p.arena.report)
    if style in ("caffe2", "decomposed"):
        assert p.affine.report                       # its batch norms were rewritten
    if style == "keras":
        assert p.transposes.absorbed


@pytest.mark.slow
def test_tiny_densenet_styles_plan_within_ten_percent(planned):
    if len(planned) < len(exporter_styles.STYLES):
        pytest.skip("needs every style's test first (run the module)")
    assert max(planned.values()) <= 1.10 * min(planned.values()), planned


def test_style_bytes_refuses_an_unknown_style():
    with pytest.raises(ValueError, match="unknown exporter style"):
        exporter_styles.style_bytes(torch_nets.densenet(**TINY), "mxnet", 32)
    f = io.BytesIO()
    exporter_styles.export_style(torch_nets.densenet(**TINY), "decomposed", f, 16)
    assert f.getvalue()


def test_batch_norm_spellings_of_a_tiny_densenet_import_as_the_same_operators():
    """Caffe2's batch norm + Mul + Add and the Sub / Div(Sqrt) / Mul / Add spelling of the same DenseNet become the
    same operators in the same order (so the same kernels and plans); before, one had a square root per element."""
    from tvm_memsched.relax.frontends.onnx_frontend import from_onnx_bytes

    net = torch_nets.densenet(**TINY)
    ops = {}
    for style in ("caffe2", "decomposed"):
        mod = from_onnx_bytes(exporter_styles.style_bytes(net, style, 32))
        new, report = fold_affine_chains(mod)
        assert len(report) == 7                               # every batch norm of the network
        ops[style] = _ops(relax.transform.DeadCodeElimination()(new))
        assert "relax.nn.batch_norm" not in ops[style] and "relax.sqrt" not in ops[style]
    assert ops["caffe2"] == ops["decomposed"]
