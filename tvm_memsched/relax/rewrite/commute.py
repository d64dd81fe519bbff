"""Commuting rules: per-channel and element-wise ops move into the branches of a concat.

Each rule rewrites ``f(concat_a(x1..xn))`` into ``concat_a'(f(x1)..f(xn))``, so
the concat moves below its consumer, where another rule (a partitioning
convolution, another commuting op) may pick it up. The rules are tried in the
order they are defined here (``concat_pair_binary`` before
``broadcast_binary_commute``).

Example
-------
>>> from tvm_memsched.relax.rewrite import RULES
>>> [name for name, r in RULES.items() if r.kind == "commute" and r.fn.__module__ == __name__]
... # doctest: +NORMALIZE_WHITESPACE
['unary_commute', 'concat_pair_binary', 'broadcast_binary_commute', 'pool_commute', 'reduce_commute',
 'batch_norm_commute', 'strided_slice_commute', 'reshape_commute']
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .context import (CONCAT, CONCAT_B, RuleContext, concat_arg, concat_info, expr_shape, plain_layout, same_call,
                      slice_along)
from .registry import concat_either, concat_first, concat_pair, register

__all__ = ["UNARY_OPS", "BINARY_OPS", "POOL_OPS", "REDUCE_OPS", "unary_commute", "concat_pair_binary",
           "broadcast_binary_commute", "pool_commute", "reduce_commute", "batch_norm_commute",
           "strided_slice_commute", "reshape_commute"]

#: element-wise unary ops: ``f(concat(xi)) = concat(f(xi))``
UNARY_OPS = ("relax.nn.relu", "relax.clip", "relax.nn.leakyrelu", "relax.nn.gelu", "relax.nn.gelu_tanh",
             "relax.nn.silu", "relax.nn.selu", "relax.nn.softplus", "relax.sigmoid", "relax.tanh", "relax.exp",
             "relax.log", "relax.sqrt", "relax.rsqrt", "relax.square", "relax.erf", "relax.negative", "relax.abs",
             "relax.sign", "relax.floor", "relax.ceil", "relax.round", "relax.astype")

#: element-wise binary ops with broadcasting
BINARY_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
              "relax.power")

#: pooling ops (per channel)
POOL_OPS = ("relax.nn.max_pool1d", "relax.nn.max_pool2d", "relax.nn.max_pool3d", "relax.nn.avg_pool1d",
            "relax.nn.avg_pool2d", "relax.nn.avg_pool3d", "relax.nn.adaptive_avg_pool1d",
            "relax.nn.adaptive_avg_pool2d", "relax.nn.adaptive_avg_pool3d")

#: reductions over given axes
REDUCE_OPS = ("relax.mean", "relax.sum", "relax.max", "relax.min", "relax.prod")


@register("unary_commute", "commute", UNARY_OPS, concat_first)
def unary_commute(call, matches, ctx: RuleContext):
    """Element-wise unary ops commute with concatenation.

    Identity: ``f(concat_a(x1..xn)) = concat_a(f(x1)..f(xn))`` for any element-wise
    ``f`` (ReLU, clip/ReLU6, leaky ReLU, GELU, SiLU, sigmoid, tanh, exp, casts, ...;
    :data:`UNARY_OPS`), with ``f``'s attributes and scalar arguments unchanged.

    Preconditions: none beyond a static concat (any axis).
    """
    found = concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    return relax.op.concat([same_call(call, [x] + list(call.args[1:])) for x in cat.fields], axis=cat.axis)


@register("concat_pair_binary", "commute", BINARY_OPS, concat_pair, concat_patterns=(CONCAT, CONCAT_B))
def concat_pair_binary(call, matches, ctx: RuleContext):
    """A binary op of two concats with the same split commutes with them.

    Identity: ``concat_a(x1..xn) (op) concat_a(y1..yn) = concat_a(x1 (op) y1, .., xn (op) yn)``
    (e.g. SiLU and hard-swish, imported as ``x * sigmoid(x)``, once the sigmoid has
    been commuted).

    Preconditions: both concats are static, on the same axis, with the same field
    sizes and the same shape (no broadcasting).
    """
    a = concat_info(matches.get(CONCAT), ctx.var2val) if CONCAT in matches else None
    b = concat_info(matches.get(CONCAT_B), ctx.var2val) if CONCAT_B in matches else None
    if a is None or b is None or a.axis != b.axis or a.sizes != b.sizes or a.shape != b.shape:
        return None
    return relax.op.concat([same_call(call, [x, y]) for x, y in zip(a.fields, b.fields)], axis=a.axis)


@register("broadcast_binary_commute", "commute", BINARY_OPS, concat_either)
def broadcast_binary_commute(call, matches, ctx: RuleContext):
    """Per-channel (or broadcast) binary ops commute with concatenation.

    Identity: ``concat_a(xi) (op) w = concat_a(xi (op) w_i)`` (and ``w (op) concat``),
    where ``w_i`` is the slice of ``w`` on the concat axis that ``xi`` occupies, or
    ``w`` itself when ``w`` broadcasts along that axis (size 1, or lower rank). This
    covers folded batch norm (per-channel scale and shift), bias adds and scalar
    arithmetic.

    Preconditions: ``w`` has a static shape that broadcasts to the concat's shape
    without enlarging it; when it must be sliced it is a weight (a constant, a
    parameter, or computed from those only), so slicing costs no activation
    memory.
    """
    found = concat_arg(call, matches, ctx)
    if found is None:
        return None
    pos, cat = found
    other = call.args[1 - pos]
    oshape = expr_shape(other)
    if concat_info(other, ctx.var2val) is not None:
        return None  # two concats: concat_pair_binary
    if oshape is None or len(oshape) > cat.ndim:
        return None
    lead = cat.ndim - len(oshape)
    if any(d not in (1, cat.shape[lead + k]) for k, d in enumerate(oshape)):
        return None
    j = cat.axis - lead
    per_piece = j >= 0 and oshape[j] != 1
    if per_piece and not ctx.is_weight(other):
        return None
    parts = []
    for x, off, size in zip(cat.fields, cat.offsets, cat.sizes):
        w = slice_along(other, j, off, off + size, ctx) if per_piece else other
        parts.append(same_call(call, [x, w] if pos == 0 else [w, x]))
    return relax.op.concat(parts, axis=cat.axis)


@register("pool_commute", "commute", POOL_OPS, concat_first)
def pool_commute(call, matches, ctx: RuleContext):
    """Pooling commutes with concatenation on the channel (or batch) axis.

    Identity: ``pool(concat_C(xi)) = concat_C'(pool(xi))``: max, average and adaptive
    average pooling work on every channel independently (padding and
    ``count_include_pad`` apply per channel). ``C'`` is the same dimension in the
    output layout.

    Preconditions: the concat axis is the layout's ``C`` or ``N`` (never a pooled
    spatial axis).
    """
    found = concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    layout = plain_layout(call.attrs.layout)
    out = plain_layout(call.attrs.out_layout) if call.attrs.out_layout else layout
    if layout is None or out is None or len(layout) != cat.ndim or sorted(layout) != sorted(out):
        return None
    dim = layout[cat.axis]
    if dim not in ("C", "N"):
        return None
    return relax.op.concat([same_call(call, [x]) for x in cat.fields], axis=out.index(dim))


@register("reduce_commute", "commute", REDUCE_OPS, concat_first)
def reduce_commute(call, matches, ctx: RuleContext):
    """Reductions over other axes commute with concatenation (e.g. global average pooling).

    Identity: ``red_R(concat_a(xi)) = concat_a'(red_R(xi))`` for ``red`` in mean, sum,
    max, min, prod over axes ``R`` not containing ``a``; ``a' = a`` with
    ``keepdims`` and ``a`` minus the reduced axes before it otherwise.

    Preconditions: the reduction axes are given and exclude the concat axis.
    """
    found = concat_arg(call, matches, ctx)
    if found is None or found[0] != 0 or call.attrs.axis is None:
        return None
    _, cat = found
    axes = {int(a) + cat.ndim if int(a) < 0 else int(a) for a in call.attrs.axis}
    if cat.axis in axes:
        return None
    new_axis = cat.axis if call.attrs.keepdims else cat.axis - sum(1 for a in axes if a < cat.axis)
    return relax.op.concat([same_call(call, [x]) for x in cat.fields], axis=new_axis)


@register("batch_norm_commute", "commute", ("relax.nn.batch_norm",), concat_first)
def batch_norm_commute(call, matches, ctx: RuleContext):
    """Inference batch norm commutes with concatenation on its channel axis.

    Identity: ``bn(concat_C(xi), g, b, m, v) = concat_C(bn(xi, g_i, b_i, m_i, v_i))`` with
    the per-channel parameters sliced to each field's channels; the replacement
    returns ``(y, m, v)`` as the original does outside training.

    Preconditions: ``training`` is false; the concat axis is the op's ``axis``; the
    four parameters are static vectors of the concat's channel count.
    """
    found = concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    a = call.attrs
    if getattr(a, "training", False) or (int(a.axis) + cat.ndim) % cat.ndim != cat.axis:
        return None
    params = list(call.args[1:5])
    if any(expr_shape(p) != [cat.total] for p in params):
        return None
    parts = []
    for x, off, size in zip(cat.fields, cat.offsets, cat.sizes):
        sliced = [slice_along(p, 0, off, off + size, ctx) for p in params]
        parts.append(relax.TupleGetItem(same_call(call, [x] + sliced), 0))
    return relax.Tuple([relax.op.concat(parts, axis=cat.axis), params[2], params[3]])


def _int_tuple(expr) -> list[int] | None:
    if not isinstance(expr, relax.Tuple):
        return None
    out = []
    for f in expr.fields:
        if isinstance(f, tvm.tirx.IntImm):
            out.append(int(f.value))
        else:
            return None
    return out


@register("strided_slice_commute", "commute", ("relax.strided_slice",), concat_first)
def strided_slice_commute(call, matches, ctx: RuleContext):
    """Slicing other axes commutes with concatenation.

    Identity: ``slice_S(concat_a(xi)) = concat_a(slice_S(xi))`` when the slice leaves
    axis ``a`` whole (not in ``S``, or taken completely with stride 1), e.g. the
    one-pixel shift of the factorized reduction in DARTS/NASNet cells.

    Preconditions: static integer axes/begin/end/strides.
    """
    found = concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    axes, begin, end = (_int_tuple(call.args[k]) for k in (1, 2, 3))
    strides = _int_tuple(call.args[4]) if len(call.args) > 4 else [1] * len(axes or [])
    if axes is None or begin is None or end is None or strides is None:
        return None
    axes = [a + cat.ndim if a < 0 else a for a in axes]
    if cat.axis in axes:
        k = axes.index(cat.axis)
        b = begin[k] + cat.total if begin[k] < 0 else begin[k]
        if b != 0 or strides[k] != 1 or end[k] < cat.total:
            return None
    parts = []
    for x, size in zip(cat.fields, cat.sizes):
        e = [size if a == cat.axis else v for a, v in zip(axes, end)]
        parts.append(relax.op.strided_slice(x, axes=axes, begin=begin, end=e, strides=strides,
                                            assume_inbound=bool(call.attrs.assume_inbound)))
    return relax.op.concat(parts, axis=cat.axis)


@register("reshape_commute", "commute", ("relax.reshape",), concat_first)
def reshape_commute(call, matches, ctx: RuleContext):
    """Reshapes that keep the concat axis in one block commute with concatenation.

    Identity: with ``P`` the product of the dims before the concat axis and ``Q``
    that after it, a reshape to ``T`` with ``prod(T[:b]) == P`` and ``prod(T[b+1:])``
    dividing ``Q`` lays out every field as one contiguous run of axis ``b``, so
    ``reshape_T(concat_a(xi)) = concat_b(reshape_Ti(xi))`` with ``Ti[b] = ci * Q / prod(T[b+1:])``.
    This covers flattening a pooled ``(N, C, 1, 1)`` map before a dense layer and
    dropping or adding unit dims.

    Preconditions: static target shape; such a ``b`` exists.
    """
    found = concat_arg(call, matches, ctx)
    target = expr_shape(call)
    if found is None or found[0] != 0 or target is None:
        return None
    _, cat = found
    pre = int(np.prod(cat.shape[:cat.axis], dtype=np.int64))
    post = int(np.prod(cat.shape[cat.axis + 1:], dtype=np.int64))
    for b in range(len(target)):
        q = int(np.prod(target[b + 1:], dtype=np.int64))
        if int(np.prod(target[:b], dtype=np.int64)) == pre and q and post % q == 0 \
                and target[b] == cat.total * post // q:
            parts = []
            for x, size in zip(cat.fields, cat.sizes):
                shape = list(target)
                shape[b] = size * post // q
                parts.append(relax.op.reshape(x, shape))
            return relax.op.concat(parts, axis=b)
    return None
