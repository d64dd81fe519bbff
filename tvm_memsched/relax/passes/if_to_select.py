"""The ``IfToSelect`` pass: a run-time ``If`` whose branches are pure becomes both branches and a select.

A model that branches on a computed value (openWakeWord's heads run a second
verifier network only when the first score passes 0.5: a TFLite ``IF``; ONNX
``If`` on data) has no single dataflow graph, and ahead-of-time planning and the
C export need one. Where both branches only compute (no side effects, no state
writes, no printing), running both and keeping the chosen result with
``R.where(cond, then, else)`` gives the same outputs, bit for bit: every
operator computes the same values whether or not its result is kept, and
``where`` copies the chosen one. The cost is the other branch's work on every
run, and its tensors in the plan (which must hold the larger branch anyway).
Private functions are inlined first (TVM's TFLite importer makes each subgraph
one; :func:`tvm.relax.transform.InlinePrivateFunctions`); nested ``If`` are
converted inside out. A module without ``If`` is returned unchanged, and one
whose branches have side effects too (``report`` says why).

An ``If`` on an input a deployment fixes is better frozen with ``--input-value``
(the branch not taken then costs nothing).

Example
-------
>>> import numpy as np, tvm
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType([4], "float32"))
>>> with bb.function("main", [x]):
...     c = bb.emit(relax.op.greater(relax.op.sum(x), relax.const(0.0, "float32")))
...     two = relax.const(2.0, "float32")
...     y = bb.emit(relax.If(c, relax.op.multiply(x, two), relax.op.negative(x)))
...     _ = bb.emit_func_output(y)
>>> M = bb.get()
>>> p = IfToSelect()
>>> out = p(M)
>>> p.report.converted, len(out["main"].body.blocks), "if " in out["main"].script()
(1, 1, False)
>>> x = np.array([1, -2, 3, 4], "float32")
>>> relax.VirtualMachine(tvm.compile(out, "llvm"), tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
array([ 2., -4.,  6.,  8.], dtype=float32)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

__all__ = ["IfToSelect", "IfToSelectReport", "has_if", "if_to_select"]


@dataclass
class IfToSelectReport:
    """What :class:`IfToSelect` did: ``converted`` If nodes, ``refused`` reasons (one per If kept)."""

    converted: int = 0
    refused: list = field(default_factory=list)


def has_if(mod) -> bool:
    """True if a Relax function of ``mod`` contains an ``If``."""
    found = []
    for _, f in mod.functions.items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f.body, lambda e: found.append(1) if isinstance(e, relax.If) else None)
    return bool(found)


def _impure(branch) -> str | None:
    """Why ``branch`` (a SeqExpr) cannot run unconditionally, or None."""
    if relax.analysis.contains_impure_call(branch):
        return "a branch has side effects (an impure call)"
    bad = []

    def visit(e):
        if isinstance(e, relax.Call) and isinstance(e.op, (relax.GlobalVar, relax.ExternFunc)):
            bad.append(f"a branch calls {e.op.name_hint if isinstance(e.op, relax.GlobalVar) else e.op.global_symbol}")

    relax.analysis.post_order_visit(branch, visit)
    return bad[0] if bad else None


def _select(bb, cond, then_value, else_value, ty):
    if isinstance(ty, relax.TupleType):
        fields = [_select(bb, cond, bb.emit(relax.TupleGetItem(then_value, i)),
                          bb.emit(relax.TupleGetItem(else_value, i)), f) for i, f in enumerate(ty.fields)]
        return bb.emit(relax.Tuple(fields))
    return bb.emit(relax.op.where(cond, then_value, else_value))


@mutator
class _Flatten(PyExprMutator):
    def __init__(self, mod, report):
        super().__init__(mod)
        self.report = report

    def _emit_branch(self, seq):
        """Emit a branch's bindings into the enclosing (non-dataflow) block: its dataflow variables become
        plain ones, which :func:`relax.transform.ConvertToDataflow` turns back afterwards."""
        for block in seq.blocks:
            for b in block.bindings:
                if isinstance(b, relax.VarBinding) and isinstance(b.value, relax.If):
                    self.visit_var_binding_(b)
                elif isinstance(b, relax.VarBinding):
                    self.set_var_remap(b.var, self.builder_.emit(self.visit_expr(b.value), b.var.name))
                else:
                    self.set_var_remap(b.var, self.builder_.match_cast(self.visit_expr(b.value), b.ty,
                                                                       b.var.name))
        return self.visit_expr(seq.body)

    def visit_var_binding_(self, binding):
        value = binding.value
        if not isinstance(value, relax.If):
            return super().visit_var_binding_(binding)
        ty = binding.var.ty
        why = _impure(value.true_branch) or _impure(value.false_branch)
        if why is None and not isinstance(ty, (relax.TensorType, relax.TupleType)):
            why = f"the If gives a {type(ty).__name__}"
        if why is None and isinstance(value.cond.ty, relax.TensorType) and value.cond.ty.dtype != "bool":
            why = f"the condition is {value.cond.ty.dtype}"
        if why is not None:
            self.report.refused.append(why)
            return super().visit_var_binding_(binding)
        cond = self.visit_expr(value.cond)
        then_value = self._emit_branch(value.true_branch)
        else_value = self._emit_branch(value.false_branch)
        new = _select(self.builder_, cond, then_value, else_value, ty)
        self.set_var_remap(binding.var, new)
        self.report.converted += 1


@tvm.transform.module_pass(opt_level=0, name="IfToSelect")
class IfToSelect:
    """Turn every ``If`` with pure branches into both branches and ``R.where`` (see the module docstring);
    ``report`` (:class:`IfToSelectReport`) says how many and why any were kept."""

    def __init__(self):
        self.report = IfToSelectReport()

    def transform_module(self, mod, ctx):
        self.report = IfToSelectReport()
        if not has_if(mod):
            return mod
        mod = relax.transform.InlinePrivateFunctions()(mod)
        flat = _Flatten(mod, self.report)
        for gv, func in list(mod.functions.items()):
            if isinstance(func, relax.Function):
                mod[gv] = flat.visit_expr(func)
        if self.report.refused:
            return mod
        mod = relax.transform.ConvertToDataflow(min_size=1)(mod)
        return _merge_dataflow_blocks(mod)


def if_to_select(mod) -> tuple:
    """``(module, If converted)`` for a consumer that needs one dataflow graph (the C export, ``info``):
    :class:`IfToSelect`'s module where ``mod`` has an ``If`` and every one converts, else ``mod`` unchanged
    (a loop, a WHILE imported as a recursive function, or a branch with side effects: the consumer's own
    error then names the control flow it cannot take).

    >>> import tvm
    >>> if_to_select(tvm.IRModule())[1]
    0
    """
    if not has_if(mod):
        return mod, 0
    p = IfToSelect()
    out = p(mod)
    return (mod, 0) if p.report.refused else (out, p.report.converted)


def _merge_dataflow_blocks(mod):
    """Each function's consecutive dataflow blocks (what the conversion leaves between the import's block and
    the inlined branches) as one block."""
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function) or len(func.body.blocks) < 2:
            continue
        if not all(isinstance(b, relax.DataflowBlock) for b in func.body.blocks):
            continue
        bindings = [b for blk in func.body.blocks for b in blk.bindings]
        body = relax.SeqExpr([relax.DataflowBlock(bindings)], func.body.body)
        mod[gv] = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    return relax.transform.Normalize()(mod)
