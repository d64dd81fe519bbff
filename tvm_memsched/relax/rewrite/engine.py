"""The rewrite engine: sites, plans, and exact binding replacement within one DataflowBlock.

A *site* (:class:`Site`) is a concat binding or a group of duplicate
computations; its *plans* (:func:`site_plans`) rewrite every user of the
concat with a matching rule and continue with the concats that commuting
rules created, up to a depth. :func:`replace_binding` rewrites exactly one
binding (not through ``rewrite_call``, which would also merge structurally
identical bindings elsewhere and change lifetimes away from the site);
:func:`merge_duplicates` shares one computation among duplicates.

Example
-------
>>> from tvm_memsched.relax.testing import branchy_module
>>> func = canonicalize(branchy_module(branches=3)["main"])
>>> [s.kind for s in find_sites(func, 0, merge=True)]
['concat']
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax

from ..graph import used_after_blocks
from ..ir import static_shape
from .context import RuleContext, concat_info, is_call, is_const, weight_params
from .registry import MERGE, Rule
from .report import RewriteSite

__all__ = ["Site", "find_sites", "site_present", "site_plans", "binding_positions", "replace_binding", "replace_bindings",
           "duplicate_groups", "merge_duplicates", "canonicalize"]


def _expr_name(expr) -> str:
    if isinstance(expr, relax.Var):
        return expr.name
    if is_const(expr):
        return "const"
    return type(expr).__name__


class _BlockState:
    """Analysis of block ``k`` of ``func``: bindings by var, users, var2val, vars used after it."""

    def __init__(self, func, k: int, after: set | None = None):
        self.func = func
        self.block = func.body.blocks[k]
        self.bindings = {b.var: b for b in self.block.bindings}
        self.users = relax.analysis.udchain(self.block)
        self.var2val = dict(relax.analysis.get_var2val(func))
        self.params = weight_params(func)
        self.after = used_after_blocks(func)[k] if after is None else after

    def context(self, order, target=None) -> RuleContext:
        return RuleContext(self.var2val, self.params, order, target)

    def why_not_site(self, var) -> str | None:
        """None if ``var`` is a concat this engine may rewrite, else the reason."""
        b = self.bindings.get(var)
        if b is None or not is_call(b.value, "relax.concat"):
            return "not a concat of this block"
        if not isinstance(var, relax.DataflowVar) or var in self.after:
            return "the concat is a block output"
        if concat_info(b.value, self.var2val) is None:
            return "dynamic or unsupported shapes"
        if not self.users.get(var):
            return "the concat is unused"
        return None

    def match(self, user_var, concat_var, rules, order):
        """The first rule that rewrites binding ``user_var`` by consuming ``concat_var``'s concat."""
        b = self.bindings.get(user_var)
        if not isinstance(b, relax.VarBinding) or not is_call(b.value):
            return None
        value, cat = b.value, self.bindings[concat_var].value
        for rule in rules:
            if value.op.name not in rule.ops or not rule.pattern.match(value, self.var2val):
                continue
            m = rule.pattern.extract_matched_expr(value, self.var2val)
            ctx = self.context(order, cat)
            if not any(c.same_as(cat) for c in rule.concats(value, m, ctx)):
                continue
            if rule.fn(value, m, ctx) is not None:
                return rule
        return None


def _flatten(expr, bb, out: list, prefix: str):
    """``expr`` with every nested call bound to a new DataflowVar (appended to ``out``), normalized."""

    def arg(a):
        if isinstance(a, (tvm.ir.Call, relax.TupleGetItem)):
            value = _flatten(a, bb, out, prefix)
            var = relax.DataflowVar(f"{prefix}{len(out)}", value.ty)
            out.append(relax.VarBinding(var, value))
            return var
        if isinstance(a, relax.Tuple):
            return relax.Tuple([arg(f) for f in a.fields])
        return a

    if isinstance(expr, tvm.ir.Call):
        return bb.normalize(relax.Call(expr.op, [arg(a) for a in expr.args], expr.attrs))
    if isinstance(expr, relax.TupleGetItem):
        return bb.normalize(relax.TupleGetItem(arg(expr.tuple_value), expr.index))
    return bb.normalize(arg(expr))


def _same_type(a, b) -> bool:
    if isinstance(a, relax.TensorType) and isinstance(b, relax.TensorType):
        return static_shape(a) == static_shape(b) and str(a.dtype) == str(b.dtype)
    if isinstance(a, relax.TupleType) and isinstance(b, relax.TupleType):
        return len(a.fields) == len(b.fields) and all(_same_type(x, y) for x, y in zip(a.fields, b.fields))
    return False


def replace_binding(func, k: int, var, expr):
    """``func`` with the binding of ``var`` in block ``k`` replaced by ``expr``; None if the type would change.

    Nested calls of ``expr`` become new bindings right before it; afterwards the
    function is canonicalized (:func:`canonicalize`), which drops the bindings
    that became unused (the replaced concat). Unlike ``rewrite_call``, nothing
    else in the function changes.
    """
    return replace_bindings(func, k, {var: expr})


def replace_bindings(func, k: int, exprs: dict):
    """:func:`replace_binding` for several bindings of block ``k`` at once (``{var: expr}``)."""
    bb = relax.BlockBuilder()
    block = func.body.blocks[k]
    bindings = []
    for b in block.bindings:
        expr = next((e for v, e in exprs.items() if v.same_as(b.var)), None)
        if expr is None:
            bindings.append(b)
            continue
        new: list = []
        value = _flatten(expr, bb, new, f"{b.var.name}_rw")
        if not _same_type(b.var.ty, value.ty):
            return None
        bindings.extend(new)
        bindings.append(relax.VarBinding(b.var, value))
    blocks = list(func.body.blocks)
    blocks[k] = relax.DataflowBlock(bindings, block.span)
    body = bb.normalize(relax.SeqExpr(blocks, func.body.body, func.body.span))
    return canonicalize(relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span))


def _apply_one(state: _BlockState, k: int, rule: Rule, user_var, concat_var, order):
    """Rewrite the binding of ``user_var`` with ``rule``; returns (func or None, new concat vars)."""
    value = state.bindings[user_var].value
    matches = rule.pattern.extract_matched_expr(value, state.var2val)
    if matches is None:
        return None, []
    new = rule.fn(value, matches, state.context(order, state.bindings[concat_var].value))
    func = None if new is None else replace_binding(state.func, k, user_var, new)
    if func is None:
        return None, []
    old = state.bindings
    new_concats = [b.var for b in func.body.blocks[k].bindings
                   if is_call(b.value, "relax.concat") and (b.var not in old or b.var.same_as(user_var))]
    return func, new_concats


def _sink(func, k: int, root, rules, depth: int | None, order) -> tuple:
    """Apply the plan of concat ``root``: rewrite all its users, then the concats commuting rules created.

    Returns ``(func, steps)`` or ``(None, reason)``. A concat whose users cannot all
    be rewritten is left as it was (for the root: no plan).
    """
    steps: list[RewriteSite] = []
    queue = deque([(root, 1)])
    after = None
    while queue:
        cvar, level = queue.popleft()
        state = _BlockState(func, k, after)
        after = state.after
        reason = state.why_not_site(cvar)
        if reason is not None:
            if cvar is root:
                return None, reason
            continue
        snapshot, local, created = func, [], []
        inputs = tuple(_expr_name(f) for f in concat_info(state.bindings[cvar].value, state.var2val).fields)
        while True:
            users = list(state.users.get(cvar, ()))
            hit = None
            for u in users:
                rule = state.match(u, cvar, rules, order)
                if rule is not None:
                    hit = (u, rule)
                    break
            if hit is None:
                break
            u, rule = hit
            new_func, new_concats = _apply_one(state, k, rule, u, cvar, order)
            if new_func is None:
                break
            func = new_func
            local.append(RewriteSite("", k, rule.name, u.name, cvar.name, inputs, level))
            if rule.kind == "commute":
                created.extend(new_concats)
            state = _BlockState(func, k, after)
        remaining = [u.name for u in state.users.get(cvar, ())] if cvar in state.bindings else []
        if remaining:
            func = snapshot
            if cvar is root:
                return None, f"users without a matching rule: {', '.join(remaining)}"
            continue
        steps.extend(local)
        if depth is None or level < depth:
            queue.extend((c, level + 1) for c in created)
    return func, steps


def _is_pure_call(value) -> bool:
    if not is_call(value):
        return False
    pure = value.op.get_attr("FPurity")
    return pure is None or bool(pure)


def duplicate_groups(func, k: int) -> list[list]:
    """Bindings of block ``k`` that compute the same pure call on the same operands, in program order.

    Frontends emit one activation per consumer (``relu(x)`` twice), and plans that
    distribute a concat over several users duplicate the per-branch ops; each
    returned group lists the vars, first definition first.
    """
    buckets: dict = {}
    for b in func.body.blocks[k].bindings:
        if not isinstance(b, relax.VarBinding) or not _is_pure_call(b.value):
            continue
        groups = buckets.setdefault(tvm_ffi.structural_hash(b.value), [])
        for g in groups:
            if tvm_ffi.structural_equal(g[0].value, b.value):
                g.append(b)
                break
        else:
            groups.append([b])
    return [[b.var for b in g] for gs in buckets.values() for g in gs if len(g) > 1]


def merge_duplicates(func, k: int, group) -> "relax.Function":
    """``func`` with every var of ``group`` but the first replaced by the first (the computation is shared).

    Identity: ``y1 = f(x); y2 = f(x)`` computes ``y2 == y1``, so ``y2``'s uses can read ``y1``.
    This trades recomputation for a longer lifetime of ``y1``; the if-better
    policy keeps it only where the peak goes down.
    """
    keep, drop = group[0], set(group[1:])
    block = func.body.blocks[k]
    bindings = [relax.VarBinding(b.var, keep) if b.var in drop else b for b in block.bindings]
    blocks = list(func.body.blocks)
    blocks[k] = relax.DataflowBlock(bindings, block.span)
    body = relax.BlockBuilder().normalize(relax.SeqExpr(blocks, func.body.body, func.body.span))
    return canonicalize(relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span))


@dataclass
class Site:
    kind: str          # "concat" or "merge"
    vars: tuple        # (concat var,) or the duplicate group
    position: int

    @property
    def name(self) -> str:
        return self.vars[0].name if self.kind == "concat" else self.vars[1].name


def find_sites(func, k: int, merge: bool, merges_first: bool = True) -> list[Site]:
    """Duplicate groups and concat bindings of block ``k``, each kind in program order, merges first or last."""
    pos = binding_positions(func, k)
    out = [Site("concat", (b.var,), pos[b.var]) for b in func.body.blocks[k].bindings
           if is_call(b.value, "relax.concat")]
    if merge:
        out += [Site("merge", tuple(g), pos[g[1]]) for g in duplicate_groups(func, k)]
    return sorted(out, key=lambda st: ((st.kind == "merge") != merges_first, st.position))


def site_present(func, k: int, site: Site) -> bool:
    bindings = {b.var: b.value for b in func.body.blocks[k].bindings}
    if any(v not in bindings for v in site.vars):
        return False
    if site.kind == "merge":
        first = bindings[site.vars[0]]
        return all(tvm_ffi.structural_equal(first, bindings[v]) for v in site.vars[1:])
    return True


def site_plans(func, k: int, site: Site, rules, order, all_depths: bool):
    """The candidate rewrites of ``site``: ``[(func, steps)]`` (shallow to deep), or ``(None, reason)``."""
    if site.kind == "merge":
        steps = [RewriteSite("", k, MERGE, v.name, "", (site.vars[0].name,)) for v in site.vars[1:]]
        return [(merge_duplicates(func, k, site.vars), steps)], None
    full, steps = _sink(func, k, site.vars[0], rules, None, order)
    if full is None:
        return None, steps
    deepest = max(s.level for s in steps)
    out = []
    if all_depths:
        for d in range(1, deepest):
            f_d, s_d = _sink(func, k, site.vars[0], rules, d, order)
            if f_d is not None:
                out.append((f_d, s_d))
    out.append((full, steps))
    return out, None


def binding_positions(func, k: int) -> dict:
    return {b.var: i for i, b in enumerate(func.body.blocks[k].bindings)}


def canonicalize(func):
    """``func`` with bindings canonicalized (``CanonicalizeBindings``) and unused bindings removed."""
    attrs = func.attrs
    name = str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs else "main"
    mod = relax.transform.CanonicalizeBindings()(tvm.IRModule({name: func}))
    return relax.analysis.remove_all_unused(mod[name])
