"""Flattening of nested concats: the inner concat's copy disappears.

Example
-------
>>> import tvm
>>> from tvm import relax
>>> from tvm_memsched.relax.rewrite import identity_rewrite
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((1, 4), "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         a = bb.emit(relax.op.nn.relu(x))
...         b = bb.emit(relax.op.nn.gelu(x))
...         inner = bb.emit(relax.op.concat([a, b], axis=1))
...         outer = bb.emit(relax.op.concat([inner, x], axis=1))
...         out = bb.emit_output(relax.op.sum(outer))
...     _ = bb.emit_func_output(out)
>>> _, report = identity_rewrite(bb.get(), rules=["concat_flatten"], policy="always")
>>> [s.rule for s in report.sites]
['concat_flatten']
"""

from __future__ import annotations

from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from .context import RuleContext, concat_info
from .registry import register

__all__ = ["concat_flatten"]


def _inner_concats(call, matches, ctx: RuleContext) -> list:
    """The static concats among the fields of concat ``call`` (what :func:`concat_flatten` consumes)."""
    outer = concat_info(call, ctx.var2val)
    fields = outer.fields if outer is not None else ()
    return [ctx.resolve(f) for f in fields if concat_info(f, ctx.var2val) is not None]


@register("concat_flatten", "absorb", ("relax.concat",), lambda ops: is_op("relax.concat")(wildcard()),
          concat_patterns=(), find_concats=_inner_concats)


def concat_flatten(call, matches, ctx: RuleContext):
    """Flattening of nested concats.

    Identity: ``concat_a(.., concat_a(x1..xn), ..) = concat_a(.., x1, .., xn, ..)``: the
    inner concat's copy disappears (in DenseNet-like blocks this is the shared-
    memory implementation of dense connectivity).

    Preconditions: the inner concat is a static concat on the same axis. With a
    ``ctx.target``, only that inner concat is flattened.
    """
    outer = concat_info(call, ctx.var2val)
    if outer is None:
        return None
    fields, changed = [], False
    for f in outer.fields:
        inner = concat_info(f, ctx.var2val)
        value = ctx.resolve(f)
        if inner is not None and inner.axis == outer.axis and (ctx.target is None or value.same_as(ctx.target)):
            fields.extend(inner.fields)
            changed = True
        else:
            fields.append(f)
    if not changed:
        return None
    return relax.op.concat(fields, axis=outer.axis)
