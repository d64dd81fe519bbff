"""ShrinkWorkspace: kernels without full-size temporaries, bit-identical to TVM's kernels."""

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir
from tvm.script import tirx as T

from tvm_memsched.relax.passes import shrink_workspace as sw
from tvm_memsched.relax.compare import compare
from tvm_memsched.relax.pipeline import pipeline, stages
from tvm_memsched.relax.testing import weight
from tvm_memsched.relax.analysis.workspace import lowered_workspace_bytes, workspace_bytes
from tvm_memsched.transform import ShrinkWorkspace

LLVM = tvm.target.Target({"kind": "llvm"})


def fused_kernels(build):
    """The PrimFuncs of a one-function Relax model after TVM's legalization and fusion."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(build.shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(build(x))
        bb.emit_func_output(y)
    st = stages(LLVM)
    with LLVM:
        mod = tvm.transform.Sequential(st["dispatch"] + st["legalize"])(bb.finalize())
    return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}


def conv_bias_relu(x):
    rng = np.random.default_rng(0)
    y = relax.op.nn.conv2d(x, weight(rng, 8, 4, 3, 3), padding=(1, 1), data_layout="NHWC", kernel_layout="OIHW")
    y = relax.op.add(y, relax.const(rng.standard_normal(8).astype("float32")))
    return relax.op.nn.relu(y)


conv_bias_relu.shape = (1, 10, 10, 4)


def pool_pad_add(x):
    """max pool, then padding of the channels, then an add: the epilogue covers more than the pool computes."""
    p = relax.op.nn.max_pool2d(x, pool_size=(2, 2), strides=(2, 2), layout="NHWC")
    p = relax.op.nn.pad(p, [0, 0, 0, 0, 0, 0, 0, 4])
    return relax.op.add(p, relax.const(np.arange(4 * 4 * 8, dtype="float32").reshape(1, 4, 4, 8)))


pool_pad_add.shape = (1, 8, 8, 4)


def run_kernel(func, out_fill):
    """Run a PrimFunc (built for LLVM) on fixed random inputs; returns every argument afterwards.

    The output (the last parameter) starts filled with ``out_fill``: two runs with
    different fills agree only where both kernels wrote every output element.
    """
    lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), LLVM)
    rng = np.random.default_rng(0)
    args = []
    for k, p in enumerate(func.params):  # buffer parameters: shape and dtype on the parameter itself
        shape, dtype = [int(s) for s in p.shape], str(p.dtype)
        data = rng.standard_normal(shape) if k < len(func.params) - 1 else np.full(shape, out_fill)
        args.append(tvm.runtime.tensor(data.astype(dtype)))
    lib["main"](*args)
    return [a.numpy() for a in args]


def assert_bit_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def test_conv_with_padding_bias_and_relu_keeps_no_temporary():
    (name, func), = [(n, f) for n, f in fused_kernels(conv_bias_relu).items() if "conv2d" in n]
    new, steps = sw.shrink_func(func)
    assert any(s.startswith("inline pad") for s in steps) and any("(per element)" in s for s in steps)
    before, after = lowered_workspace_bytes(func, LLVM), lowered_workspace_bytes(new, LLVM)
    assert before >= 10 * 10 * 8 * 4 and after <= 4  # the accumulator of one output element
    assert_bit_identical(run_kernel(func, 1.0), run_kernel(new, -1.0))
    again, steps = sw.shrink_func(new)  # an already scheduled kernel is left alone
    assert again.same_as(new) and steps == []


def test_epilogue_wider_than_its_reduction_is_computed_inside_it():
    """reverse_compute_at would drop the padded channels here; the check refuses it, compute_at is exact."""
    (func,) = [f for n, f in fused_kernels(pool_pad_add).items() if "pool" in n]
    sch = s_tir.Schedule(func)
    sch = sw._inline_stages(sch, [])
    pool = sch.get_sblock("pool_max")
    add = sch.get_consumers(pool)[0]
    wrong = sch.copy()
    wrong.reverse_compute_at(add, sw.attach_loop(wrong, pool), preserve_unit_loops=True)
    assert not sw.runs_each_instance_once(wrong, add)  # TVM accepts it, but half of the output is never written
    assert sw.runs_each_instance_once(sch, add)
    new, steps = sw.shrink_func(func)
    assert "pool_max inside T_add" in steps
    assert lowered_workspace_bytes(new, LLVM) < lowered_workspace_bytes(func, LLVM)
    assert_bit_identical(run_kernel(func, 1.0), run_kernel(new, -1.0))


@T.prim_func(s_tir=True)
def _pairs(a: T.Buffer((8, 4), "float32"), out: T.Buffer((1,), "float32")):
    s = T.sblock_alloc_buffer((8,), "float32")
    for i, k in T.grid(8, 4):
        with T.sblock("rows"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                s[vi] = T.float32(0)
            s[vi] = s[vi] + a[vi, vk]
    for z, i in T.grid(1, 8):
        with T.sblock("pairs"):
            vz, vi = T.axis.remap("SR", [z, i])
            with T.init():
                out[vz] = T.float32(0)
            out[vz] = out[vz] + s[vi] * s[7 - vi]


@T.prim_func(s_tir=True)
def _local(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
    t = T.sblock_alloc_buffer((64,), "float32", scope="local")
    for i in range(64):
        with T.sblock("t"):
            vi = T.axis.spatial(64, i)
            t[vi] = a[vi] * T.float32(2)
    for i in range(64):
        with T.sblock("b"):
            vi = T.axis.spatial(64, i)
            b[vi] = t[vi] + T.float32(1)


@pytest.mark.parametrize("func", [_pairs, _local], ids=["whole-buffer-reader", "local-scope"])
def test_no_op_on_kernels_it_cannot_improve(func):
    new, steps = sw.shrink_func(func)
    assert new.same_as(func) and steps == []
    mod, report = sw.shrink_workspace(tvm.IRModule({"k": func}), LLVM)
    assert mod["k"].same_as(func) and [(r.kernel, r.steps) for r in report] == [("k", [])]


def test_pass_report_and_module_numerics():
    from tvm_memsched.relax.testing import branchy_module

    shrink = ShrinkWorkspace(target=LLVM)
    st = stages(LLVM)
    with LLVM:
        fused = tvm.transform.Sequential(st["dispatch"] + st["legalize"])(branchy_module(branches=2))
        new = shrink(fused)
    changed = [r for r in shrink.report if r.steps]
    assert changed and all(r.after < r.before for r in changed)
    assert [r.after for r in shrink.report] == sorted((r.after for r in shrink.report), reverse=True)
    assert shrink.saved == {r.kernel: r.before - r.after for r in changed}
    for r in changed:
        assert workspace_bytes(sw.compact(new[r.kernel])) < workspace_bytes(sw.compact(fused[r.kernel]))


def test_on_by_default_in_pipeline_and_compare():
    from tvm_memsched.relax.testing import random_module

    assert "ShrinkWorkspace" in pipeline(LLVM).pass_names()
    assert "ShrinkWorkspace" not in pipeline(LLVM, shrink_workspace=False).pass_names()
    mod = random_module(seed=4, n_ops=10)
    on, off = compare(mod, method="rpo"), compare(mod, method="rpo", shrink_workspace=False)
    assert on.numerics_ok and on.max_abs_diff == 0.0  # bit-identical to TVM's default build
    assert on.memsched_workspace_max_bytes < off.memsched_workspace_max_bytes == off.workspace_max_bytes


@pytest.mark.parametrize("mode", ["memory", "speed"])
def test_lowered_workspace_shortcut_equals_lowering(mode):
    """A kernel whose compacted form keeps at most one buffer is measured without lowering: the number is what
    TVM's TIR pipeline leaves, on TVM's fused kernels and on ShrinkWorkspace's."""
    from tvm_memsched.relax.testing import branchy_module
    from tvm_memsched.relax.analysis.workspace import lower_func

    st = stages(LLVM)
    with LLVM:
        fused = relax.transform.FuseTIR()(relax.transform.FuseOps()(
            tvm.transform.Sequential(st["dispatch"] + st["legalize"])(branchy_module(branches=3))))
        shrunk, _ = sw.shrink_workspace(fused, mode=mode)
    shortcut = 0
    for mod in (fused, shrunk):
        for gv, f in mod.functions_items():
            if isinstance(f, tvm.tirx.PrimFunc):
                assert lowered_workspace_bytes(f, LLVM, gv.name_hint) == \
                    workspace_bytes(lower_func(f, LLVM, gv.name_hint)), gv.name_hint
                shortcut += len([a for a in sw.internal_allocations(sw.compact(f)) if a[1] == "global"]) <= 1
    assert shortcut
