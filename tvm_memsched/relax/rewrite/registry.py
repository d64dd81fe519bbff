"""The rule registry: :class:`Rule`, :data:`RULES` and the :func:`register` decorator.

A rule module defines its rewrite functions and registers each where it is
defined::

    @register("unary_commute", "commute", UNARY_OPS, concat_first)
    def unary_commute(call, matches, ctx): ...

Rules are tried in registration order (the order of :data:`RULES`). The
pattern builders (:func:`concat_first`, ...) give the dataflow pattern of a
rule from the operator names it consumes; operators this TVM build does not
have are dropped first.

Example
-------
>>> import tvm_memsched.relax.rewrite  # registers the built-in rules
>>> rule = get_rules("conv_channel_partition")[0]
>>> rule.kind, "relax.nn.conv2d" in rule.ops
('absorb', True)
>>> available_rules()[-1] == MERGE
True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import Callable

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from ...core.errors import UnsupportedError
from ..graph import used_after_blocks
from .context import CONCAT, CONCAT_B, RuleContext

__all__ = ["Rule", "RULES", "MERGE", "register", "register_rule", "available_rules", "get_rules",
           "concat_first", "concat_either", "concat_and_operand", "concat_pair"]

#: the name of the duplicate-merging identity in ``rules`` lists and reports
MERGE = "merge_duplicates"


@dataclass(frozen=True)
class Rule:
    """One identity rule: a dataflow pattern, a rewrite function and what it does.

    ``fn(call, matches, ctx)`` returns the replacement expression or None when a
    precondition fails. ``kind`` is ``"absorb"`` (the concat disappears) or
    ``"commute"`` (the concat moves below the consumer). ``rewriter_for(func)``
    gives a rewriter in the ``rewrite_call`` convention, and ``apply(func)``
    rewrites every match whose concat has no other user.
    """

    name: str
    kind: str
    ops: tuple
    pattern: object
    fn: Callable
    concat_patterns: tuple = (CONCAT,)
    find_concats: Callable | None = None   # (call, matches, ctx) -> concat calls, when not in the matches

    @property
    def identity(self) -> str:
        """The first paragraph of the rule function's docstring and its identity line."""
        doc = (self.fn.__doc__ or "").strip().split("\n\n")
        ident = next((p for p in doc if p.strip().startswith("Identity")), "")
        return " ".join(doc[0].split()) + (" " + " ".join(ident.split()) if ident else "")

    def concats(self, call, matches, ctx: RuleContext) -> list:
        """The concat calls a rewrite of ``call`` consumes."""
        if self.find_concats is not None:
            return list(self.find_concats(call, matches, ctx))
        return [matches[p] for p in self.concat_patterns if p in matches]

    def rewriter_for(self, func, *, single_use: bool = True, order: dict | None = None) -> Callable:
        """A ``rewrite_call`` rewriter bound to ``func`` (its var2val, parameters and program order).

        With ``single_use``, a match is rewritten only when each concat it consumes
        is bound to a var of ``func`` used by that one binding only.
        """
        ctx = RuleContext.for_function(func, order)
        users: dict = {}
        for blk in func.body.blocks:
            if isinstance(blk, relax.DataflowBlock):
                for var, us in relax.analysis.udchain(blk).items():
                    users[var] = len(us)
        after = set().union(*used_after_blocks(func)) if func.body.blocks else set()
        var_of = {b.value: b.var for blk in func.body.blocks for b in blk.bindings}

        def rewriter(orig, matches):
            if single_use:
                for cat in self.concats(orig, matches, ctx):
                    var = var_of.get(cat)
                    if var is None or users.get(var, 0) != 1 or var in after \
                            or not isinstance(var, relax.DataflowVar):
                        return orig
            new = self.fn(orig, matches, ctx)
            return orig if new is None else new

        return rewriter

    def apply(self, func, *, single_use: bool = True):
        """``func`` with every match of this rule rewritten (one ``rewrite_call``)."""
        return rewrite_call(self.pattern, self.rewriter_for(func, single_use=single_use), func)


RULES: dict[str, Rule] = {}


def register_rule(rule: Rule) -> Rule:
    """Add ``rule`` to :data:`RULES` (replacing a rule of the same name)."""
    if rule.kind not in ("absorb", "commute"):
        raise ValueError(f"rule kind must be 'absorb' or 'commute', got {rule.kind!r}")
    RULES[rule.name] = rule
    return rule


def register(name: str, kind: str, ops, pattern: Callable, *, concat_patterns: tuple = (CONCAT,),
             find_concats: Callable | None = None) -> Callable:
    """Decorator: register the decorated rewrite function as the :class:`Rule` ``name``.

    Parameters
    ----------
    name : str
        The rule's name in :data:`RULES` and in reports.
    kind : {"absorb", "commute"}
        Whether the concat disappears or moves below the consumer.
    ops : sequence of str
        The consumer operators the rule rewrites (those this TVM build lacks are dropped).
    pattern : callable
        ``pattern(ops)`` builds the rule's dataflow pattern (:func:`concat_first`, ...).
    concat_patterns, find_concats
        As in :class:`Rule`.

    Returns the function unchanged.
    """

    def wrap(fn: Callable) -> Callable:
        kept = _existing(ops)
        register_rule(Rule(name, kind, kept, pattern(kept), fn, tuple(concat_patterns), find_concats))
        return fn

    return wrap


def available_rules() -> list[str]:
    """Names of the registered rules, and ``"merge_duplicates"``."""
    return list(RULES) + [MERGE]


def get_rules(rules=None) -> list[Rule]:
    """Rules by name (or :class:`Rule` objects); None means all registered rules."""
    if rules is None:
        return list(RULES.values())
    if isinstance(rules, (str, Rule)):
        rules = [rules]
    out = []
    for r in rules:
        if isinstance(r, Rule):
            out.append(r)
        elif r in RULES:
            out.append(RULES[r])
        else:
            raise UnsupportedError(f"unknown rewrite rule '{r}'; known: {', '.join(available_rules())}")
    return out


def concat_first(ops) -> object:
    """Calls of ``ops`` whose first argument is a concat (any further arguments)."""
    return reduce(lambda a, b: a | b, [is_op(op)(CONCAT, varg_default_wildcard=True) for op in ops])


def concat_either(ops) -> object:
    """Calls of the binary ``ops`` with a concat as either argument."""
    return reduce(lambda a, b: a | b, [is_op(op)(CONCAT, wildcard()) | is_op(op)(wildcard(), CONCAT) for op in ops])


def concat_and_operand(ops) -> object:
    """Calls of the binary ``ops`` whose first argument is a concat (a convolution's data, a product's left side)."""
    return reduce(lambda a, b: a | b, [is_op(op)(CONCAT, wildcard()) for op in ops])


def concat_pair(ops) -> object:
    """Calls of the binary ``ops`` with two concats (:data:`~.context.CONCAT` and :data:`~.context.CONCAT_B`)."""
    return reduce(lambda a, b: a | b, [is_op(op)(CONCAT, CONCAT_B) for op in ops])


def _existing(ops) -> tuple:
    out = []
    for op in ops:
        try:
            tvm.ir.Op.get(op)
        except Exception:  # an op this TVM build does not have
            continue
        out.append(op)
    return tuple(out)
