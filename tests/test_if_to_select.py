"""``IfToSelect``: a run-time ``If`` on a computed value (a TFLite ``IF`` made by TensorFlow's converter,
openWakeWord's verifier heads) runs as both branches and ``R.where``: one dataflow graph that the planner and
the C export take, outputs bit-identical to the module with the ``If`` on inputs that take each branch."""

import os

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_memsched.relax.frontends.frontend import from_tflite_file
from tvm_memsched.relax.graph import function_graph
from tvm_memsched.relax.passes.if_to_select import IfToSelect, has_if, if_to_select

COVERAGE = os.path.join(os.path.dirname(__file__), "data", "coverage")


def _runner(mod):
    fn = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"]
    return lambda xs: fn(*map(tvm.runtime.tensor, xs)).numpy()


@pytest.mark.parametrize("kind", ["float32", "int8"])
def test_a_tflite_if_runs_both_branches_with_the_same_outputs(kind):
    mod = from_tflite_file(os.path.join(COVERAGE, f"if.{kind}.tflite"))
    assert has_if(mod)
    p = IfToSelect()
    flat = p(mod)
    assert p.report.converted == 1 and not p.report.refused and not has_if(flat)
    assert [gv.name_hint for gv in flat.get_global_vars()] == ["main"]
    function_graph(flat["main"])            # one dataflow block: the graph the planner schedules
    shapes = [([int(d) for d in p.ty.shape], str(p.ty.dtype)) for p in mod["main"].params]
    ref, ours = _runner(mod), _runner(flat)
    (p_shape, p_dtype), signs = shapes[0], (100, -100)
    for seed in range(4):       # the first input is the condition's operand (p > 0): both signs, both branches
        rng = np.random.default_rng(seed)
        x = [(rng.uniform(-1, 1, s) * (1 if dt == "float32" else 100)).astype(dt) for s, dt in shapes[1:]]
        took = [ref([np.full(p_shape, sign, p_dtype)] + x) for sign in signs]
        for sign, want in zip(signs, took):
            np.testing.assert_array_equal(ours([np.full(p_shape, sign, p_dtype)] + x), want)
        assert took[0].tobytes() != took[1].tobytes()


def _printing_branch():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float32"))
    with bb.function("main", [x], pure=False):
        c = bb.emit(relax.op.greater(relax.op.sum(x), relax.const(0.0, "float32")))
        loud = relax.SeqExpr([relax.BindingBlock([relax.VarBinding(relax.Var("p", relax.ObjectType()),
                                                                    relax.op.print(x, format="{}"))])], x)
        y = bb.emit(relax.If(c, loud, relax.op.negative(x)))
        bb.emit_func_output(y)
    return bb.get()


def test_a_branch_with_side_effects_keeps_its_if_and_is_refused_by_name():
    mod = _printing_branch()
    p = IfToSelect()
    out = p(mod)
    assert p.report.converted == 0 and "side effects" in p.report.refused[0] and has_if(out)
    kept, n = if_to_select(mod)
    assert n == 0 and kept.same_as(mod)         # the C export's own error names the If


def test_a_module_without_if_is_unchanged():
    mod = from_tflite_file(os.path.join(COVERAGE, "mul.float32.tflite"))
    out, n = if_to_select(mod)
    assert n == 0 and out.same_as(mod)
