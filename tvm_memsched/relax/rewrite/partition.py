"""SERENITY's partitioning rules: a convolution or a dense layer consumes the concat's pieces one by one.

* :func:`conv_channel_partition` (channel-wise, groups 1) and
  :func:`matmul_partition` replace the consumer of a concat by a sum of
  partial products, one per piece, so the concat disappears;
* :func:`grouped_conv_partition` (kernel-wise, any grouped convolution whose
  groups do not straddle two pieces) convolves every piece on its own and
  concatenates the results.

Example
-------
>>> from tvm_memsched.relax.rewrite import identity_rewrite
>>> from tvm_memsched.relax.testing import branchy_module
>>> _, report = identity_rewrite(branchy_module(branches=3), rules=["conv_channel_partition"], policy="always")
>>> [s.rule for s in report.sites]
['conv_channel_partition']
"""

from __future__ import annotations

from functools import reduce

from tvm import relax

from .context import ConcatInfo, RuleContext, concat_arg, expr_shape, plain_layout, same_call, slice_along
from .registry import concat_and_operand, register

__all__ = ["conv_channel_partition", "grouped_conv_partition", "matmul_partition"]

_CONV_OPS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d")


def _conv_layouts(attrs, ndim: int):
    data = plain_layout(attrs.data_layout)
    kernel = plain_layout(attrs.kernel_layout)
    out = plain_layout(attrs.out_layout) if attrs.out_layout else data
    if data is None or kernel is None or out is None or not (len(data) == len(kernel) == len(out) == ndim):
        return None
    if "C" not in data or "C" not in out or "I" not in kernel or "O" not in kernel:
        return None
    return data, kernel, out


def _sum_in_ready_order(terms, keys):
    """``((t1 + t2) + t3) + ...`` with the terms sorted by ``keys`` (stable)."""
    order = sorted(range(len(terms)), key=lambda i: keys[i])
    return reduce(relax.op.add, [terms[i] for i in order])


def _sum_of_partials(call, cat: ConcatInfo, weight, wshape, axis: int, ctx: RuleContext):
    """``sum_i call(xi, weight[axis in C_i])`` over the concat's fields, in ready order (None if sizes differ)."""
    if wshape[axis] != cat.total:
        return None
    terms = [same_call(call, [x, slice_along(weight, axis, off, off + size, ctx)])
             for x, off, size in zip(cat.fields, cat.offsets, cat.sizes)]
    return _sum_in_ready_order(terms, [ctx.ready(x) for x in cat.fields])


def _conv_site(call, matches, ctx: RuleContext):
    """``(concat info, weight, weight shape, (data, kernel, out) layouts)`` of a
    convolution whose data argument is a concat along the data layout's ``C``, else None."""
    found = concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    weight = call.args[1]
    layouts = _conv_layouts(call.attrs, cat.ndim)
    wshape = expr_shape(weight)
    if layouts is None or wshape is None or cat.axis != layouts[0].index("C"):
        return None
    return cat, weight, wshape, layouts


@register("conv_channel_partition", "absorb", _CONV_OPS, concat_and_operand)
def conv_channel_partition(call, matches, ctx: RuleContext):
    """Channel-wise partitioning (SERENITY section 3.3, Eq. 3-6).

    Identity: ``conv(concat_C(x1..xn), W) = sum_i conv(xi, W_i)`` where ``W_i`` is the
    slice of ``W`` on its input-channel axis (``I`` of the kernel layout) that
    ``xi`` occupies. Strides, padding, dilation, layouts and ``out_dtype`` are
    kept; every partial convolution sees the same padding (zeros contribute
    nothing), so the sum is exact up to float reassociation.

    Preconditions: ``groups == 1``; the concat axis is the data layout's ``C``; the
    weight's static ``I`` extent equals the concat's channel count. The partial
    results are summed in the order the branches become ready; a bias add or an
    activation that follows the convolution stays after the sum.
    """
    site = _conv_site(call, matches, ctx) if int(call.attrs.groups) == 1 else None
    if site is None:
        return None
    cat, weight, wshape, (_, kernel, _) = site
    return _sum_of_partials(call, cat, weight, wshape, kernel.index("I"), ctx)


@register("grouped_conv_partition", "commute", _CONV_OPS, concat_and_operand)
def grouped_conv_partition(call, matches, ctx: RuleContext):
    """Kernel-wise partitioning (SERENITY section 3.3, Eq. 7-8), generalized to grouped convolutions.

    Identity: with ``g`` groups over ``C`` input channels (``C/g`` per group) and
    ``O`` output channels (``O/g`` per group), a field ``xi`` at channels
    ``[o, o + c)`` covers whole groups ``o/(C/g) .. (o+c)/(C/g)``, so
    ``conv_g(concat_C(xi), W) = concat_C'(conv_{c/(C/g)}(xi, W_i))`` with ``W_i`` the
    kernels of those groups (a slice on the kernel's ``O`` axis) and ``C'`` the
    output layout's channel axis. A depthwise convolution (``C/g == 1``, any channel
    multiplier, ``OIHW`` or TFLite's ``HWOI``) always qualifies.

    Preconditions: ``groups > 1``; the concat axis is the data layout's ``C``; every
    field starts and ends on a group boundary.
    """
    groups = int(call.attrs.groups)
    site = _conv_site(call, matches, ctx) if groups > 1 else None
    if site is None:
        return None
    cat, weight, wshape, (_, kernel, out) = site
    o_axis = kernel.index("O")
    if cat.total % groups or wshape[o_axis] % groups:
        return None
    cg, og = cat.total // groups, wshape[o_axis] // groups
    if any(off % cg or size % cg for off, size in zip(cat.offsets, cat.sizes)):
        return None
    conv = getattr(relax.op.nn, call.op.name.split(".")[-1])
    a = call.attrs
    parts = []
    for x, off, size in zip(cat.fields, cat.offsets, cat.sizes):
        w = slice_along(weight, o_axis, off // cg * og, (off + size) // cg * og, ctx)
        parts.append(conv(x, w, strides=a.strides, padding=a.padding, dilation=a.dilation, groups=size // cg,
                          data_layout=str(a.data_layout), kernel_layout=str(a.kernel_layout),
                          out_layout=str(a.out_layout) if a.out_layout else None, out_dtype=a.out_dtype))
    return relax.op.concat(parts, axis=out.index("C"))


@register("matmul_partition", "absorb", ("relax.matmul",), concat_and_operand)
def matmul_partition(call, matches, ctx: RuleContext):
    """Channel-wise partitioning of a matrix product (a dense layer after a concat).

    Identity: ``concat_{-1}(x1..xn) @ W = sum_i xi @ W_i`` with ``W_i`` the rows of
    ``W`` (its reduction axis, ``-2``, or ``0`` for a vector) that ``xi`` occupies.

    Preconditions: the concat is the left operand, joins on its last axis and has
    rank >= 2; ``W`` has a static shape whose reduction extent equals the concat's.
    """
    found = concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    weight = call.args[1]
    wshape = expr_shape(weight)
    if cat.ndim < 2 or cat.axis != cat.ndim - 1 or wshape is None or not wshape:
        return None
    return _sum_of_partials(call, cat, weight, wshape, 0 if len(wshape) == 1 else len(wshape) - 2, ctx)
