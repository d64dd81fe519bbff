"""In-place execution in Relax and the C export: TIR safety analysis, planned bytes, numerics, QEMU."""

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import tirx as T

from tvm_memsched import micro
from tvm_memsched.relax.analysis.inplace import candidate_kernels, kernel_inplace_pairs
from tvm_memsched.relax.passes.aliasing import allow_aliasing
from tvm_memsched.relax.testing import weight


# --------------------------------------------------------------- TIR analysis
@T.prim_func(s_tir=True)
def relu(a: T.Buffer((4, 8), "float32"), b: T.Buffer((4, 8), "float32")):
    for i, j in T.grid(4, 8):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            b[vi, vj] = T.max(a[vi, vj], T.float32(0))


@T.prim_func(s_tir=True)
def add(a: T.Buffer((8,), "float32"), c: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("b"):
            v = T.axis.spatial(8, i)
            b[v] = a[v] + c[v]


@T.prim_func(s_tir=True)
def neighbour(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    for i in range(7):
        with T.sblock("b"):
            v = T.axis.spatial(7, i)
            b[v] = a[v] + a[v + 1]


@T.prim_func(s_tir=True)
def reverse(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("b"):
            v = T.axis.spatial(8, i)
            b[v] = a[7 - v]


@T.prim_func(s_tir=True)
def repeated(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    for k, i in T.grid(2, 8):          # every element is written twice, the second time after reading a[i]
        with T.sblock("b"):
            v = T.axis.spatial(8, i)
            b[v] = a[v] * T.float32(2)


@T.prim_func(s_tir=True)
def reduce_rows(a: T.Buffer((8, 8), "float32"), b: T.Buffer((8, 8), "float32")):
    for i, j, k in T.grid(8, 8, 8):
        with T.sblock("b"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                b[vi, vj] = T.float32(0)
            b[vi, vj] = b[vi, vj] + a[vi, vk]


@T.prim_func(s_tir=True)
def pad_then_pool(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    p = T.sblock_alloc_buffer((10,), "float32")
    for i in range(10):
        with T.sblock("p"):
            v = T.axis.spatial(10, i)
            p[v] = T.if_then_else(1 <= v and v < 9, a[v - 1], T.float32(0))
    for i in range(8):
        with T.sblock("b"):
            v = T.axis.spatial(8, i)
            b[v] = p[v] + p[v + 1] + p[v + 2]


@T.prim_func(s_tir=True)
def read_again(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("b"):
            v = T.axis.spatial(8, i)
            b[v] = a[v]
    for i in range(8):
        with T.sblock("c"):
            v = T.axis.spatial(8, i)
            b[v] = b[v] + a[7 - v]


@pytest.mark.parametrize("func,n_in,expected", [
    (relu, 1, [(0, 1)]), (add, 2, [(0, 2), (1, 2)]), (pad_then_pool, 1, [(0, 1)]),
    (neighbour, 1, []), (reverse, 1, []), (repeated, 1, []), (reduce_rows, 1, []), (read_again, 1, []),
], ids=["relu", "add", "consumed-first", "neighbour", "reverse", "repeated", "reduction", "read-after-write"])
def test_tir_safety_analysis(func, n_in, expected):
    assert kernel_inplace_pairs(func, n_in) == expected


def _run_aliased(func, n_in, out_over):
    """Compile ``func`` and run it with output buffer = input ``out_over``: the in-place result."""
    f = func.with_attr("global_symbol", "f").with_attr("tirx.noalias", False)
    lib = tvm.compile(tvm.IRModule({"f": f}), target="llvm")
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal((8,)).astype("float32") for _ in range(n_in)]
    ref_out = tvm.runtime.tensor(np.zeros(8, "float32"))
    lib["f"](*[tvm.runtime.tensor(x) for x in ins], ref_out)
    shared = [tvm.runtime.tensor(x) for x in ins]
    lib["f"](*shared, shared[out_over])
    return ref_out.numpy(), shared[out_over].numpy()


@pytest.mark.parametrize("func,n_in,ok", [(add, 2, True), (pad_then_pool, 1, True), (reverse, 1, False)])
def test_accepted_kernels_compute_the_same_in_place(func, n_in, ok):
    ref, got = _run_aliased(func, n_in, 0)
    assert np.array_equal(ref, got) == ok


# --------------------------------------------------------------- Relax paths
def residual_module(c=8, size=12, blocks=3, seed=0):
    """A residual stack: conv -> relu -> conv, + skip, relu, repeated (the peak is at the residual add)."""
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, c, size, size], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, weight(rng, c, c, 3, 3), padding=(1, 1))))
            for _ in range(blocks):
                a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(h, weight(rng, c, c, 3, 3), padding=(1, 1))))
                a = bb.emit(relax.op.nn.conv2d(a, weight(rng, c, c, 3, 3), padding=(1, 1)))
                h = bb.emit(relax.op.nn.relu(relax.op.add(a, h)))
            y = bb.emit_output(relax.op.sum(h, axis=[2, 3]))
        bb.emit_func_output(y)
    return bb.finalize()


def test_compare_plans_less_with_inplace_and_same_numbers():
    from tvm_memsched.relax.compare import compare

    c = compare(residual_module(), repeat=0)
    assert c.numerics_ok and c.max_abs_diff == 0.0
    assert c.inplace_taken > 0
    assert c.memsched_planned_bytes < c.memsched_planned_no_inplace_bytes
    assert c.memsched_plannable_peak_bytes <= c.memsched_planned_bytes
    off = compare(residual_module(), repeat=0, inplace=False)
    assert off.memsched_planned_no_inplace_bytes is None and off.inplace_taken == 0
    assert off.memsched_planned_bytes == c.memsched_planned_no_inplace_bytes


def _llvm_defines(ex) -> list[str]:
    """The ``define`` lines of the LLVM IR of every module inside a built executable."""
    stack, seen, lines = [ex.mod], set(), []
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        try:
            lines += [ln for ln in m.inspect_source("ll").splitlines() if ln.startswith("define")]
        except Exception:  # modules without LLVM source (the VM bytecode)
            pass
        stack.extend(getattr(m, "imports", ()))
    return lines


def test_aliased_kernels_lose_noalias_and_only_they(tmp_path):
    """TVM 0.27's LLVM code generator applies the module's last ``tirx.noalias`` to every kernel (``_compute_``
    functions with ``noalias`` pointers, or none): on LLVM the aliased kernels are compiled apart (an external
    module without ``noalias``), the others keep it; the C target turns the attribute off kernel by kernel."""
    from tvm_memsched.relax.pipeline import pipeline

    p = pipeline("llvm")
    with tvm.target.Target("llvm"):
        planned = p(residual_module())
        ex = tvm.compile(planned, "llvm", relax_pipeline=None)
    kernels = {k for r in p.arena.report for k in r.inplace_kernels}
    assert kernels and not kernels & {gv.name_hint for gv in planned.get_global_vars()}
    # every kernel is built now, side by side: the aliased ones in modules of their own without noalias
    assert not [f for f in planned.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    parts = [[ln for ln in m.inspect_source("ll").splitlines() if ln.startswith("define")]
             for m in planned.attrs["external_mods"]]
    aliased = [d for d in parts if any(f"@__tvm_ffi_{k}(" in ln for ln in d for k in kernels)]
    assert all(any(f"@__tvm_ffi_{k}(" in ln for d in aliased for ln in d) for k in kernels)
    assert not [ln for d in aliased for ln in d if "noalias" in ln]
    kept = [ln for d in parts if d not in aliased for ln in d if "_compute_(" in ln]
    assert kept and all("noalias" in d for d in kept)           # the other kernels keep noalias
    assert not any(f"@{k}_compute_(" in d for d in kept for k in kernels)
    assert {ln for d in parts for ln in d} <= set(_llvm_defines(ex))
    from tvm_memsched.relax.compare import random_inputs, run_vm

    ex.export_library(str(tmp_path / "m.so"))          # the kernels built apart travel with the library
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(tmp_path / "m.so")), tvm.cpu())
    inputs = random_inputs(residual_module()["main"])
    got = vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()
    np.testing.assert_array_equal(got, run_vm(tvm.compile(residual_module(), "llvm"), inputs)[0])
    mod = residual_module()
    assert allow_aliasing(mod, []) is mod
    c = pipeline({"kind": "c"})
    with tvm.target.Target({"kind": "c"}):
        planned_c = c(residual_module())
    c_kernels = {k for r in c.arena.report for k in r.inplace_kernels}
    assert c_kernels and {gv.name_hint for gv, f in planned_c.functions_items() if isinstance(f, tvm.tirx.PrimFunc)
                          and not f.attrs["tirx.noalias"]} == c_kernels


def test_micro_export_runs_in_place_on_host(tmp_path):
    on = micro.export(residual_module(), "mps2-an386", str(tmp_path / "on"), measure=False)
    off = micro.export(residual_module(), "mps2-an386", str(tmp_path / "off"), measure=False, inplace=False)
    assert on.arena_bytes < off.arena_bytes
    r = micro.run_host(on)
    assert r.ok, r.summary()
    assert r.warnings == ""


@pytest.mark.slow
def test_micro_in_place_runs_in_qemu(tmp_path):
    exp = micro.export(residual_module(), "mps2-an386", str(tmp_path), measure=False)
    r = micro.run_qemu(exp)
    assert r.ok and r.mode == "qemu mps2-an386", r.summary()


def test_candidate_kernels_finds_residual_kernels():
    from tvm_memsched.relax.target import as_target, stages

    t = as_target("llvm")
    st = stages(t)
    with t:
        m = tvm.transform.Sequential(st["dispatch"] + st["legalize"] + st["dataflow_lower"]
                                     + st["finalize"][:[p.info.name for p in st["finalize"]]
                                                      .index("StaticPlanBlockMemory")])(residual_module())
    assert candidate_kernels(m)


def test_analyzer_takes_every_proven_shift_except_on_kept_kernels():
    """A gather through divisions (a reshape-transpose) and a window both keep their shifted overlaps (the
    aliased kernels are built without noalias, test_aliased_kernels_lose_noalias_and_only_they); a kernel
    marked KEEP_NOALIAS (a fast kernel of the speed tradeoffs) gets none."""
    from tvm.script import tirx as T

    from tvm_memsched.relax.analysis.inplace import KEEP_NOALIAS, InplaceAnalyzer, kernel_inplace_shifts

    @T.prim_func(s_tir=True)
    def gather(a: T.Buffer((8, 6), "float32"), b: T.Buffer((6, 8), "float32")):
        for i, j in T.grid(6, 8):
            with T.sblock("b"):
                vi, vj = T.axis.remap("SS", [i, j])
                b[vi, vj] = a[(vi * 8 + vj) % 8, (vi * 8 + vj) // 8]

    @T.prim_func(s_tir=True)
    def window(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
        for i in range(8):
            with T.sblock("b"):
                v = T.axis.spatial(8, i)
                b[v] = a[v] + T.if_then_else(v > 0, a[v - 1], T.float32(0))

    mod = tvm.IRModule({"gather": gather, "window": window})
    args = [relax.Var("x", relax.TensorType((8, 6), "float32")), relax.Var("y", relax.TensorType((6, 8), "float32"))]
    wargs = [relax.Var("x", relax.TensorType((8,), "float32")), relax.Var("y", relax.TensorType((8,), "float32"))]
    assert any(s > 0 for _i, _o, s in kernel_inplace_shifts(gather, 1))
    assert any(s > 0 for _i, _o, s in InplaceAnalyzer(mod).pairs(mod.get_global_var("gather"), args, 1))
    assert InplaceAnalyzer(mod).pairs(mod.get_global_var("window"), wargs, 1) == [(0, 1, 4)]
    kept = tvm.IRModule({"window": window.with_attr(KEEP_NOALIAS, True)})
    assert InplaceAnalyzer(kept).pairs(kept.get_global_var("window"), wargs, 1) == []
