"""InlineProducers: cheap element-wise producers used once are computed inside their consumer's kernel."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_memsched.relax.compare import compare
from tvm_memsched.relax.passes.inline_producers import InlineProducers, inline_producers
from tvm_memsched.relax.target import stages
from tvm_memsched.relax.testing import dense_block_module, preactivation_module, weight


def fused(mod):
    st = stages("llvm")
    with tvm.target.Target({"kind": "llvm"}):
        return tvm.transform.Sequential(st["dispatch"] + st["legalize"])(mod)


def kernels_called(mod):
    names = []
    for blk in mod["main"].body.blocks:
        for b in blk.bindings:
            v = b.value
            if isinstance(v, relax.Call) and isinstance(v.args[0], tvm.ir.GlobalVar) and len(v.args) > 1:
                names.append(v.args[0].name_hint)
    return names


def block_module(act, *, twice=False, c=8, size=12, seed=0, dtype_out=None):
    """``y = conv(x); a = act(y); z = conv(a); y + z`` (``twice``: plus a second convolution of ``a``)."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, c, size, size], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, weight(rng, c, c, 3, 3), padding=(1, 1)))
            a = bb.emit(act(y))
            if dtype_out:
                a = bb.emit(relax.op.astype(a, dtype_out))
            z = bb.emit(relax.op.nn.conv2d(a, weight(rng, c, c, 1, 1).astype(dtype_out) if dtype_out
                                           else weight(rng, c, c, 1, 1), out_dtype="float32"))
            out = relax.op.add(y, z)
            if twice:                                           # a second kernel reads ``a``
                out = relax.op.add(bb.emit(out), relax.op.nn.conv2d(a, weight(rng, c, c, 3, 3), padding=(1, 1)))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.finalize()


def test_preactivation_relu_is_computed_in_the_convolution():
    mod = fused(preactivation_module())
    assert "relu" in kernels_called(mod)
    new, merged = inline_producers(mod)
    assert merged == [("relu", "fused_conv2d_add")]
    assert "relu" not in kernels_called(new)                   # the relu tensor is gone from the program
    relax.analysis.check_well_formed(new)


def test_compare_plans_less_and_computes_the_same():
    mod = preactivation_module(channels=16, size=16)
    on = compare(mod, repeat=0)
    off = compare(mod, repeat=0, inline_producers=False)
    assert on.numerics_ok and on.max_abs_diff == 0            # bit-identical to TVM's default build
    assert off.max_abs_diff == 0
    assert on.memsched_planned_bytes < off.memsched_planned_bytes


def test_expensive_or_shared_or_shrinking_producers_stay():
    assert inline_producers(fused(block_module(relax.op.sigmoid)))[1] == []       # exp repeated per read
    assert inline_producers(fused(block_module(relax.op.nn.relu, twice=True)))[1] == []   # two uses
    # a cast to a narrower type: its input is larger than its result and would live longer
    m = fused(block_module(relax.op.nn.relu, dtype_out="float16"))
    assert all("astype" not in p for p, _ in inline_producers(m)[1])


@pytest.mark.parametrize("seed", range(4))
def test_random_networks_are_bit_identical(seed):
    from tvm_memsched.relax.testing import random_module

    mod = random_module(seed=seed, n_ops=14)
    r = compare(mod, repeat=0)
    assert r.numerics_ok and r.max_abs_diff == 0


def test_tvm_pad_before_an_integer_kernel_is_left_apart(caplog):
    """TVM's pad kernels index with int64, our integer kernels with int32: FuseTIR cannot merge them, so the
    pair is not grouped (the pass used to fail on the patch-tiled int8 MobileNetV2)."""
    from tvm_memsched import zoo
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.relax.int8.lower import lower_int8
    from tvm_memsched.tflite.reader import read_tflite
    from tvm_memsched.tflite.tiling import tile_model

    tiled, _ = tile_model(read_tflite(zoo.tflite("mobilenet_v2", "int8")), "block1/dw", (2, 2))
    mod = fused(lower_int8(from_tflite_bytes(tiled))[0])
    assert any(k.startswith("pad") for k in kernels_called(mod))
    with caplog.at_level("WARNING", logger="tvm_memsched.relax.passes.inline_producers"):
        new, merged = inline_producers(mod)
    assert "FuseTIR refused" not in caplog.text              # never grouped, not merged and given up
    assert not any(p.startswith("pad") and "int8" in c for p, c in merged)
    relax.analysis.check_well_formed(new)


def _kernel_named(mod, prefix):
    names = [n for n in kernels_called(mod) if n.startswith(prefix)]
    assert len(set(names)) == 1, names
    return mod[names[0]]


def test_a_costly_preactivation_is_computed_once_per_pixel():
    """A batch norm (a square root per element) before a 1x1 NHWC convolution: computed under the
    convolution's pixel loop, each element once, into one pixel's channels of workspace."""
    from tvm_memsched.relax.analysis.workspace import compacted_workspace_bytes
    from tvm_memsched.relax.passes.inline_producers import _computed_once

    mod = fused(dense_block_module(layers=1, channels=16, size=8))
    new, merged = inline_producers(mod, bands=False)
    assert ("fused_batch_norm_relu", "conv2d") in merged
    assert "fused_batch_norm_relu" not in kernels_called(new)
    kernel = _kernel_named(new, "fused_fused_batch_norm_relu_conv2d")
    assert _computed_once(kernel)
    assert compacted_workspace_bytes(kernel) <= 16 * 4            # one pixel of the 16-channel input
    relax.analysis.check_well_formed(new)


def test_tunable_merges_keep_every_kernel_one_loop_nest_metaschedule_can_schedule():
    """For a tuned build: a costly batch norm computed once per pixel comes out scheduled (MetaSchedule refuses
    to schedule it again), so with ``tunable`` it stays a kernel of its own; a cheap producer is still inlined,
    and MetaSchedule generates a design space for every merged kernel."""
    from tvm.s_tir import meta_schedule as ms

    from tvm_memsched.relax.passes.tune_kernels import import_tensor_intrin

    import_tensor_intrin()                 # what TuneContext imports, without its minutes of inspect.stack()
    mod = fused(dense_block_module(layers=1, channels=16, size=8))
    _, everything = inline_producers(mod, bands=False)
    _, tunable = inline_producers(mod, bands=False, tunable=True)
    assert ("fused_batch_norm_relu", "conv2d") in everything and ("fused_batch_norm_relu", "conv2d") not in tunable
    cheap = fused(block_module(lambda y: relax.op.nn.relu(y)))
    new, merged = inline_producers(cheap, tunable=True, bands=True)
    assert merged and not {p for p, _ in merged} & set(kernels_called(new))      # the relu is inlined
    for name in {c for _, c in merged}:
        kernel = next(f for gv, f in new.functions_items() if gv.name_hint.endswith(name)
                      and isinstance(f, tvm.tirx.PrimFunc))
        space = ms.space_generator.PostOrderApply(sch_rules="llvm", postprocs="llvm", mutator_probs="llvm")
        ctx = ms.TuneContext(mod=tvm.IRModule({"main": kernel}), target=tvm.target.Target(
            {"kind": "llvm", "num-cores": 2}), space_generator=space)
        assert ctx.generate_design_space()


def test_a_costly_producer_that_would_be_recomputed_stays():
    """NCHW: the 1x1 convolution's output channel loop is outside its pixels, so the batch norm would run once
    per output channel: it stays a kernel of its own."""
    mod = fused(dense_block_module(layers=1, size=8, layout="NCHW"))
    _, merged = inline_producers(mod, bands=False)
    assert not any(p.startswith("fused_batch_norm") for p, _ in merged)


def test_dense_layers_are_computed_in_bands_bit_identically():
    mod = dense_block_module(layers=2, channels=16, growth=8, size=32)
    on = compare(mod, repeat=0)
    off = compare(mod, repeat=0, inline_producers={"bands": False})
    assert on.numerics_ok and on.max_abs_diff == 0                 # bit-identical to TVM's default build
    assert off.numerics_ok and off.max_abs_diff == 0
    assert on.memsched_planned_bytes < off.memsched_planned_bytes
    assert on.memsched_live_peak_with_workspace_bytes < off.memsched_live_peak_with_workspace_bytes
    # no bottleneck tensor (32 channels: the 1x1 convolution's output and its batch norm) is left
    new, _ = inline_producers(fused(mod))
    shapes = [[int(d) for d in b.var.ty.shape] for blk in new["main"].body.blocks for b in blk.bindings
              if isinstance(b.var.ty, relax.TensorType)]
    assert [1, 32, 32, 24] in shapes and [1, 32, 32, 32] in shapes     # the concatenations are there
    assert sum(s == [1, 32, 32, 32] for s in shapes) == 1              # only the last concatenation


@pytest.mark.parametrize("bound, rows", [(1.25, 8), (1.5, 4), (2.0, 2)])
def test_the_band_is_the_fewest_rows_within_the_recompute_bound(bound, rows):
    """32 rows, a 3x3 consumer: a band of ``r`` rows computes ``r + 2`` rows of the 1x1 convolution (with the
    padding row each side), ``ceil(32 / r)`` bands, against 34 rows in one band. The 1x1 convolution runs
    exactly that often, and the band is the fewest rows within the bound."""
    from tvm import s_tir

    from tvm_memsched.relax.passes.inline_producers import _blocks_of
    from tvm_memsched.relax.passes.shrink_workspace import executions

    def ratio(r):
        return -(-32 // r) * (r + 2) / 34

    assert ratio(rows) <= bound < ratio(rows // 2)
    mod = fused(dense_block_module(layers=1, channels=16, size=32))
    new, merged = inline_producers(mod, max_recompute=bound)
    assert any("+" in p for p, _ in merged)                         # the chain was banded
    kernel = _kernel_named(new, "fused_fused_fused_batch_norm_relu_conv2d")
    sch = s_tir.Schedule(kernel)
    reds = [b.name_hint for b in _blocks_of(kernel) if any(int(iv.iter_type) for iv in b.iter_vars)]
    p_name, c_name = reds[-2], reds[-1]
    loops = [sch.get(lp) for lp in sch.get_loops(sch.get_sblock(c_name))]
    assert [int(lp.extent) for lp in loops[1:3]] == [-(-32 // rows), rows]    # (n, band, rows in it, ...)
    # the 1x1 convolution (32 outputs x 16 inputs per pixel) over (r + 2) x 34 padded pixels per band
    assert executions(sch, sch.get_sblock(p_name)) == -(-32 // rows) * (rows + 2) * 34 * 32 * 16


def test_no_band_when_every_band_recomputes_too_much():
    mod = fused(dense_block_module(layers=1, channels=16, size=32))
    _, merged = inline_producers(mod, max_recompute=1.0)            # a 3x3 band always shares rows
    assert not any("+" in p for p, _ in merged)
    with pytest.raises(ValueError, match="max_recompute"):
        InlineProducers(max_recompute=0.5)


def test_a_transition_is_computed_in_bands_with_its_batch_norm_once_per_pixel():
    """DenseNet's transition: batch norm, relu, 1x1 convolution, 2x2 average pooling. The pooling reads the
    convolution directly; the convolution runs per band of pooled rows and the batch norm under its pixel
    loop, each input element once (not once per output channel); outputs bit-identical."""
    from tvm import s_tir

    from tvm_memsched.relax.passes.inline_producers import _blocks_of
    from tvm_memsched.relax.passes.shrink_workspace import executions

    rng = np.random.default_rng(0)
    c, size = 32, 16
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, size, size, c], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            stats = [relax.const(rng.uniform(0.5, 1.5, [c]).astype("float32")) for _ in range(4)]
            bn = bb.emit(relax.op.nn.batch_norm(x, *stats, axis=3, epsilon=1e-5, training=False))
            a = bb.emit(relax.op.nn.relu(bb.emit(relax.TupleGetItem(bn, 0))))
            w = relax.const(np.transpose(weight(rng, c // 2, c, 1, 1).value.numpy(), (0, 2, 3, 1)).copy())
            y = bb.emit(relax.op.nn.conv2d(a, w, data_layout="NHWC", kernel_layout="OHWI"))
            p = bb.emit(relax.op.nn.avg_pool2d(y, 2, 2, layout="NHWC"))
            out = bb.emit_output(relax.op.concat([p, relax.op.nn.avg_pool2d(x, 2, 2, layout="NHWC")], axis=3))
        bb.emit_func_output(out)
    mod = bb.finalize()
    new, merged = inline_producers(fused(mod))
    assert any(cons.startswith("avg_pool2d") for _, cons in merged)
    (name,) = [n for n in kernels_called(new) if "conv2d" in n]
    kernel = new[name]
    sch = s_tir.Schedule(kernel)
    stages = [b for b in _blocks_of(kernel) if not any(int(iv.iter_type) for iv in b.iter_vars)]
    norm = [b for b in stages if any(str(r.source.name) == "x" or str(r.source.name).startswith("a0")
                                     for r in b.reads) and b.name_hint != "root"][0]
    assert executions(sch, sch.get_sblock(norm.name_hint)) <= size * size * c     # once per input element
    r = compare(mod, repeat=0)
    assert r.numerics_ok and r.max_abs_diff == 0


def test_chained_kernels_compiled_apart_at_llvm_o2_others_at_the_targets_level():
    """A kernel with two reductions (a chain computed in bands) is what LLVM -O3 spends seconds on without
    noalias: compiled apart it gets -O2 unless the target sets its own level; a single reduction keeps O3."""
    from tvm.script import tirx as T

    from tvm_memsched.relax.passes.aliasing import APART_LLVM_OPT_LEVEL, apart_target, chained

    @T.prim_func(s_tir=True)
    def two(a: T.Buffer((4, 4), "float32"), c: T.Buffer((4,), "float32")):
        b = T.sblock_alloc_buffer((4,), "float32")
        for i, k in T.grid(4, 4):
            with T.sblock("p"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    b[vi] = T.float32(0)
                b[vi] = b[vi] + a[vi, vk]
        for i in range(1):
            for k in range(4):
                with T.sblock("c"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        c[vi] = T.float32(0)
                    c[vi] = c[vi] + b[vk]

    assert chained(two)
    assert apart_target("llvm", two).attrs["opt-level"] == APART_LLVM_OPT_LEVEL
    assert apart_target({"kind": "llvm", "opt-level": 3}, two).attrs["opt-level"] == 3
    assert "opt-level" not in apart_target({"kind": "c"}, two).attrs
