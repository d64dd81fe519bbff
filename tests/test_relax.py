"""TVM Relax integration: reorder pass, arena planner, pipeline, compare."""

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import tvm_memsched
from strategies import brute_force_optimum
from tvm_memsched.core import random_dag, simulate
from tvm_memsched.core.simulate import peak_bytes
from tvm_memsched.core.arena import Buffer, check_plan
from tvm_memsched.relax.passes.arena import collect_plans, plan_module
from tvm_memsched.relax.compare import compare, random_inputs, run_vm
from tvm_memsched.relax.graph import block_to_graph
from tvm_memsched.relax.pipeline import pipeline, stages
from tvm_memsched.relax.passes.reorder import _best_order
from tvm_memsched.relax.testing import branchy_module, random_module
from tvm_memsched.transform import ArenaPlanMemory, InlinePadding, MemoryAwareReorder

LLVM = tvm.target.Target({"kind": "llvm"})


def run(mod, inputs, pipe=None):
    ex = tvm.compile(mod, LLVM, relax_pipeline=pipe if pipe is not None else relax.get_default_pipeline(LLVM))
    return run_vm(ex, inputs)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def fused(mod):
    st = stages(LLVM)
    with LLVM:
        return tvm.transform.Sequential(st["dispatch"] + st["legalize"] + st["dataflow_lower"][:1])(mod)


@I.ir_module
class Views:
    @R.function
    def main(x: R.Tensor((1, 8, 8, 8), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.nn.conv2d(a, w, padding=[1, 1])
            r = R.reshape(b, R.shape([1, 512]))
            c = R.nn.conv2d(a, w, padding=[1, 1])
            t = (r, c)
            g = t[1]
            al = g
            d = R.add(al, b)
            e = R.nn.relu(d)
            R.output(e, r, b)
        z = R.add(e, e)  # a non-dataflow binding keeps the two blocks apart
        with R.dataflow():
            f = R.multiply(z, e)
            h = R.add(f, b)
            R.output(h)
        return (h, r)


@I.ir_module
class Branch:
    @R.function
    def main(x: R.Tensor((1, 4, 8, 8), "float32"), cond: R.Tensor((), "bool")):
        a = R.nn.relu(x)
        b = R.add(a, a)
        if cond:
            c = R.multiply(b, b)
            d = R.add(c, a)
            out = d
        else:
            c2 = R.add(b, x)
            out = c2
        e = R.nn.relu(out)
        return e


@I.ir_module
class Dyn:
    @R.function
    def main(x: R.Tensor(("n", 8), "float32")):
        with R.dataflow():
            a = R.nn.relu(x)
            b = R.add(a, a)
            c = R.multiply(b, a)
            R.output(c)
        return c


# ------------------------------------------------------------------ reorder
def test_reorder_operator_level_right_after_import():
    mod = branchy_module(branches=4)
    p = MemoryAwareReorder(method="dp")
    new = p(mod)
    assert relax.analysis.check_well_formed(new)
    rep = p.report[0]
    assert rep.peak_after <= rep.peak_before and rep.optimal
    x = random_inputs(mod["main"])
    assert_same(run(mod, x), run(new, x))


def test_reorder_kernel_level_after_fusetir_counts_workspace():
    f = fused(branchy_module(branches=3))
    p = MemoryAwareReorder(method="dp", target=LLVM)
    new = p(f)
    assert relax.analysis.check_well_formed(new)
    bg = block_to_graph(f["main"], 0, workspace=lambda gv: 7)
    # every call_tir is an op with workspace; the reshape-free block has no tokens
    assert all(op.workspace_bytes == 7 for op in bg.graph.ops if op.attrs["kind"] != "relax.concat")


def test_graph_models_aliases_tuples_and_blocks():
    func = Views["main"]
    bg = block_to_graph(func, 0)
    g = bg.graph
    kinds = {op.name.split(":")[1]: op for op in g.ops}
    # views / tuples / aliases write only zero-byte tokens
    for v in ("r", "t", "g", "al"):
        assert all(g.tensor_bytes(t) == 0 for t in kinds[v].outputs)
    # `d` reads c's tensor through t/g/al and b directly
    d_inputs = set(kinds["d"].inputs)
    assert any(t.endswith(":c") for t in d_inputs) and any(t.endswith(":b") for t in d_inputs)
    # b and r (a view of b) are used after the block: b's tensor is a graph output
    assert any(t.endswith(":b") for t in g.outputs)
    # the block after the plain binding `z` sees z, e and b as inputs from earlier blocks
    assert len(func.body.blocks) == 3
    g2 = block_to_graph(func, 2).graph
    assert len(g2.inputs) == 3
    # any valid order of the graph is a valid binding order
    for method in ("program", "rpo", "dp"):
        order = tvm_memsched.schedule(g, method).order
        bindings = bg.bindings_in(order)
        assert len(bindings) == len(func.body.blocks[0].bindings)


@pytest.mark.parametrize("method", ["rpo", "kahn", "dp", "hmcos", "auto"])
def test_reorder_with_views_tuples_and_two_blocks(method):
    new = MemoryAwareReorder(method=method)(Views)
    assert relax.analysis.check_well_formed(new)
    x = random_inputs(Views["main"])
    assert_same(run(Views, x), run(new, x))


def test_dynamic_shapes_are_skipped_with_a_message():
    p = MemoryAwareReorder()
    new = p(Dyn)
    assert p.report[0].status.startswith("skipped: ") and "dynamic" in p.report[0].status
    tvm.ir.assert_structural_equal(new, Dyn)


def test_function_without_dataflow_blocks_is_left_alone():
    p = MemoryAwareReorder()
    tvm.ir.assert_structural_equal(p(Branch), Branch)
    assert p.report == []


# -------------------------------------------------------------------- arena
def planner_input(mod):
    st = stages(LLVM)
    k = [p.info.name for p in st["finalize"]].index("StaticPlanBlockMemory")
    with LLVM:
        return tvm.transform.Sequential(st["dispatch"] + st["legalize"] + st["dataflow_lower"]
                                        + st["finalize"][:k])(mod)


@pytest.mark.parametrize("mod", [Views, Branch], ids=["views", "if"])
def test_arena_plan_aliases_outputs_and_control_flow(mod):
    planned, reports = plan_module(planner_input(mod))
    assert relax.analysis.check_well_formed(planned)
    rep = reports[0]
    assert rep.status == "planned" and rep.unplanned_outputs >= 1
    # the layout is valid: no two live buffers overlap
    bufs = [Buffer(n, size, s, e) for n, _, _, size, s, e in rep.layout]
    check_plan(bufs, {n: off for n, _, off, *_ in rep.layout}, 64)
    # the measured alloc_storage bytes are what the report says
    assert sum(collect_plans(planned)["main"]) == rep.total_bytes
    args = random_inputs(mod["main"])
    if mod is Branch:
        for cond in (True, False):
            a = [args[0], np.array(cond)]
            assert_same(run(mod, a), run(mod, a, pipeline(LLVM, method="dp")))
    else:
        assert_same(run(mod, args), run(mod, args, pipeline(LLVM, method="dp")))


def test_arena_falls_back_for_dynamic_shapes():
    planned, reports = plan_module(planner_input(Dyn))
    assert reports[0].status.startswith("fallback:")
    x = [np.random.default_rng(0).standard_normal((5, 8)).astype("float32")]
    assert_same(run(Dyn, x), run(Dyn, x, pipeline(LLVM)))


def test_pipeline_structure_and_build():
    p = pipeline(LLVM, method="dp")
    names = p.pass_names()
    assert "StaticPlanBlockMemory" not in names and "ArenaPlanMemory" in names
    assert names.index("FuseTIR") < names.index("MemoryAwareReorder") < names.index("ToNonDataflow")
    mod = branchy_module()
    ex = tvm_memsched.build(mod, LLVM, method="dp")
    x = random_inputs(mod["main"])
    out = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x[0])).numpy()
    np.testing.assert_allclose(out, run(mod, x)[0], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ compare
def test_compare_reports_fields_and_beats_default_on_branches():
    c = compare(branchy_module(branches=5, channels=8, size=16), method="dp", name="branchy")
    d = c.to_dict()
    for key in ("default_planned_bytes", "memsched_planned_bytes", "ratio", "numerics_ok"):
        assert key in d
    assert c.numerics_ok and c.memsched_planned_bytes <= c.default_planned_bytes
    assert c.memsched_planned_bytes >= c.memsched_plannable_peak_bytes


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10_000), st.integers(6, 22), st.booleans())
def test_random_relax_dags_same_numbers_as_default(seed, n_ops, multi):
    mod = random_module(seed=seed, n_ops=n_ops, multi_output=multi)
    c = compare(mod, method="auto", time_limit=2)
    assert c.numerics_ok
    assert c.memsched_planned_bytes >= c.memsched_plannable_peak_bytes
    assert c.memsched_live_peak_with_workspace_bytes <= c.default_live_peak_with_workspace_bytes


def test_weights_as_parameters():
    mod, weights = random_module(seed=5, n_ops=14, params_as_inputs=True)
    x = random_inputs(mod["main"])[:1] + weights
    assert_same(run(mod, x), run(mod, x, pipeline(LLVM, method="dp")))


def test_inline_padding_removes_pad_copies():
    ip = InlinePadding()
    c = compare(branchy_module(branches=3), method="dp", extra_passes=[ip])
    assert c.numerics_ok and ip.report
    assert c.memsched_workspace_max_bytes < c.workspace_max_bytes


def test_arena_plan_memory_pass_standalone():
    a = ArenaPlanMemory(alignment=128)
    planned = a(planner_input(branchy_module()))
    assert a.report[0].status == "planned"
    assert all(off % 128 == 0 for _, _, off, *_ in a.report[0].layout)
    assert relax.analysis.check_well_formed(planned)


@pytest.mark.slow
def test_torch_import_end_to_end():
    import torch
    from tvm.relax.frontend.torch import from_exported_program

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([torch.nn.Conv2d(8, 16, 3, padding=1) for _ in range(4)])
            self.out = torch.nn.Conv2d(64, 8, 1)

        def forward(self, x):
            return self.out(torch.cat([torch.relu(c(x)) for c in self.convs], dim=1))

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(1, 8, 16, 16)
    with torch.no_grad():
        ep = torch.export.export(net, (x,))
        ref = net(x).numpy()
    mod = from_exported_program(ep, unwrap_unit_return_tuple=True)
    c = compare(mod, method="dp", name="torch-branches")
    assert c.numerics_ok
    ours = run(mod, [x.numpy()], pipeline(LLVM, method="dp"))[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ objective with kernel workspace
@pytest.mark.parametrize("seed", range(10))
def test_reorder_objective_tensor_peak_first_or_with_workspace_first(seed):
    """The VM (workspace in a separate pool) gets the optimal tensor peak; the micro export (workspace in the
    arena) gets the optimal peak with workspace; neither is worse than the incoming order on its own ranking."""
    g = random_dag(10, seed=seed, workspace_prob=0.6, sizes=(1, 64))
    plain = g.without_workspace()
    program = [op.name for op in g.ops]
    for shared, first, second in ((True, g, plain), (False, plain, g)):
        order, res, before, after = _best_order(g, "dp", None, None, {}, shared)
        assert g.is_topological(order)
        assert before == (peak_bytes(g, program), peak_bytes(plain, program))
        assert after == (peak_bytes(g, order), peak_bytes(plain, order))
        assert peak_bytes(first, order) == brute_force_optimum(first)
        rank = (lambda pk: pk) if shared else (lambda pk: (pk[1], pk[0]))
        assert rank(after) <= rank(before)
        assert res.optimal and res.peak_bytes == brute_force_optimum(first)


def test_layout_conversion_never_copies_a_large_result_past_tvm():
    """Found by the property test above (seed 1500): a network whose result is its largest tensor, where
    channels-last convolutions would transpose the result back with both layouts alive (7,876 B vs TVM's
    6,144 B); the model's layout is kept."""
    from tvm_memsched.relax.testing import random_module

    c = compare(random_module(seed=1500, n_ops=12, multi_output=False), method="auto", time_limit=2, repeat=0)
    assert c.numerics_ok
    assert c.memsched_live_peak_with_workspace_bytes <= c.default_live_peak_with_workspace_bytes


def test_layout_conversion_judged_on_the_live_network():
    """Found by the property test (seed 595): the result is one convolution of the input, the rest dead code;
    the dead operators must not inflate the model's estimated peak that a converted network is judged against
    (7,876 B vs TVM's 6,144 B before)."""
    from tvm_memsched.relax.testing import random_module

    c = compare(random_module(seed=595, n_ops=7, multi_output=False), method="auto", time_limit=2, repeat=0)
    assert c.numerics_ok
    assert c.memsched_live_peak_with_workspace_bytes <= c.default_live_peak_with_workspace_bytes
