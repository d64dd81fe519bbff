"""Identity graph rewriting: exact rewrites of Relax dataflow blocks that lower the peak memory.

No operator order can beat the topology: a concat of ``n`` branches keeps every
branch alive until the concat runs, and then the concat's copy of all of them
stays alive until its consumer runs. SERENITY (Ahn et al., MLSys 2020, section
3.3) removes such patterns with *identity rewrites*, mathematically identical
graphs with smaller peaks. This module implements them, and more, with TVM's
dataflow pattern language (:mod:`tvm.relax.dpl`): every rule is a dataflow
pattern plus a rewrite function, usable on its own with ``rewrite_call`` or a
``PatternMatchingRewriter`` (:meth:`Rule.rewriter_for`, :meth:`Rule.apply`).

Rules
-----
Every rule consumes a concat ``c = concat_a(x1, ..., xn)`` (along axis ``a``;
``C_i`` is the range of ``xi`` along ``a``). *Absorbing* rules remove it;
*commuting* rules move it below its consumer, where another rule may pick it up.

=========================  =======  =====================================================================
rule                       kind     identity
=========================  =======  =====================================================================
conv_channel_partition     absorb   ``conv(concat_C(xi), W) = sum_i conv(xi, W[I in C_i])`` (groups 1)
grouped_conv_partition     commute  ``conv_g(concat_C(xi), W) = concat_C(conv_gi(xi, W[O in groups of xi]))``
matmul_partition           absorb   ``concat_-1(xi) @ W = sum_i xi @ W[K in C_i]``
concat_flatten             absorb   ``concat_a(.., concat_a(xi), ..) = concat_a(.., x1, .., xn, ..)``
unary_commute              commute  ``f(concat_a(xi)) = concat_a(f(xi))`` for element-wise ``f``
broadcast_binary_commute   commute  ``concat_a(xi) (op) w = concat_a(xi (op) w[C_i])``, ``w`` per-channel
concat_pair_binary         commute  ``concat_a(xi) (op) concat_a(yi) = concat_a(xi (op) yi)``
pool_commute               commute  ``pool(concat_C(xi)) = concat_C(pool(xi))`` (max/avg/adaptive)
reduce_commute             commute  ``red_R(concat_a(xi)) = concat_a'(red_R(xi))`` for ``a`` not in ``R``
batch_norm_commute         commute  ``bn(concat_C(xi), g, b, m, v) = concat_C(bn(xi, g[C_i], ..))``
strided_slice_commute      commute  ``slice_S(concat_a(xi)) = concat_a(slice_S(xi))`` if ``a`` not sliced
reshape_commute            commute  ``reshape(concat_a(xi)) = concat_b(reshape(xi))`` if ``a`` stays one block
merge_duplicates           merge    ``y1 = f(x); y2 = f(x)``  ->  ``y2 := y1`` (one computation, shared)
=========================  =======  =====================================================================

``merge_duplicates`` is not a concat rule: frontends emit one activation per
consumer (``relu(x)`` twice for two consumers), and distributing a concat over
several users duplicates its per-branch ops; sharing one computation can lower
the peak or raise it (it lengthens a lifetime), so it is evaluated like the
others (:func:`duplicate_groups`, :func:`merge_duplicates`).

The first two are SERENITY's channel-wise and kernel-wise partitioning (the
latter generalized from depthwise to any grouped convolution whose groups do not
straddle two branches). Layouts come from the ops' attributes (``NCHW``/``OIHW``
from PyTorch, ``NHWC``/``HWIO`` and depthwise ``HWOI`` from TFLite, 1-D and 3-D
convolutions too). Weights sliced by a rule are sliced at compile time when they
are constants (or reshapes/transposes of constants) and with
``relax.op.strided_slice`` otherwise (weights passed as parameters). A bias add
or an activation *after* a partitioned convolution stays after the sum, so the
bias is added once; an activation is never moved into the partial sums (that
would not be exact). Sums are accumulated left to right in the order the branches
become ready, so only one partial result is pending at a time.

Sites, plans and policies
-------------------------
A *site* is a concat binding of a DataflowBlock (or a group of duplicate
bindings, whose plan is to merge them). A concat's *plan* rewrites every user of
the concat with a matching rule (a concat with several users is thereby
distributed over all of them; it is skipped unless every user has a rule, and
when it is a block output), then the plan continues with the concats that
commuting rules created, up to a depth. Concats with dynamic shapes, and rules
whose axis, layout or group conditions fail, are skipped.

* ``policy="always"`` applies the full plan of every site.
* ``policy="if-better"`` applies a plan only where the scheduled peak goes down:
  each candidate (the site's plan cut at depth 1, 2, ...) is built, the rewritten
  block is turned into a graph (:func:`~tvm_memsched.relax.graph.block_to_graph`)
  and scheduled with ``method``, and the best candidate is kept when it beats the
  current block. Blocks are compared by their peak and then by their *footprint
  profile* (the footprints of the allocating ops of the scheduled order, sorted
  in decreasing order, compared lexicographically). The profile matters for
  networks of identical cells: every cell reaches the same peak, so rewriting
  one cell cannot lower the block's peak on its own, but it lowers how often the
  peak is reached; once all cells are rewritten the peak drops. Sites are
  visited in program order (duplicate groups first), greedily, each against the
  current (already rewritten) block, in up to ``max_passes`` passes. A block
  whose peak does not go down in the end is left unchanged.

Where a block is scored (:class:`Evaluator`): ``level="operator"`` schedules the
operator-level block itself; ``level="kernel"`` schedules it after TVM's
legalization and fusion, the block the reorder pass and the arena planner work
on. They disagree: TVM fuses a concat into a following element-wise op, so at
kernel level moving that op into the branches saves nothing, while the
operator-level graph counts the concat's copy; and the greedy search is path
dependent (the order of the sites matters too), so either score can find
rewrites the other misses. ``level="best"`` (default) runs a small portfolio of
greedy searches (:data:`SEARCHES`: operator-level scoring; kernel-level scoring
with duplicate merging first and last) and keeps the result with the lowest
(kernel-level peak, operator-level peak, number of rewrites), provided it does
not raise the kernel-level peak and lowers one of the two; otherwise the
function stays as it was.

The engine finds sites with the rules' patterns (``pattern.match`` through the
function's var-to-value map) and rewrites exactly the matched binding
(:func:`replace_binding`). It does not go through ``rewrite_call`` there, because
``rewrite_call`` also merges structurally identical bindings anywhere in the
function, which changes lifetimes away from the site (for better or worse) and
would make the site-by-site evaluation meaningless. Before rewriting, a function
is canonicalized (``CanonicalizeBindings`` and removal of unused bindings, which
``rewrite_call`` does too); functions where nothing is rewritten are returned
unchanged.

Run this at operator level (right after import, before legalization), where
``concat`` and ``conv2d`` are visible. :class:`~tvm_memsched.transform.IdentityRewrite`
is the pass wrapper; :func:`tvm_memsched.compare` and :func:`tvm_memsched.pipeline`
run their extra passes after ``FuseTIR``, so apply the rewrite to the module
before calling them.

Example
-------
>>> from tvm_memsched.relax.testing import branchy_module
>>> new, report = identity_rewrite(branchy_module(branches=4), policy="always")
>>> [s.rule for s in report.sites]
['conv_channel_partition']
>>> ops = [b.value.op.name for b in new["main"].body.blocks[0].bindings]
>>> "relax.concat" in ops, ops.count("relax.add")
(False, 3)
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Callable, Iterable

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from ..core.errors import MemschedError, UnsupportedError
from ..core.simulate import footprints
from ..schedulers import schedule
from .graph import block_to_graph, used_after_blocks
from .ir import static_shape

__all__ = [
    "ConcatInfo", "concat_info", "RuleContext", "Rule", "RULES", "register_rule", "available_rules", "get_rules",
    "RewriteSite", "Candidate", "BlockRewriteReport", "RewriteReport", "identity_rewrite", "rewrite_function",
    "POLICIES",
    # the rules
    "conv_channel_partition", "grouped_conv_partition", "matmul_partition", "concat_flatten", "unary_commute",
    "broadcast_binary_commute", "concat_pair_binary", "pool_commute", "reduce_commute", "batch_norm_commute",
    "strided_slice_commute", "reshape_commute", "replace_binding", "replace_bindings", "canonicalize", "slice_along",
    "weight_params",
    "duplicate_groups", "merge_duplicates", "MERGE", "Evaluator", "LEVELS", "SEARCHES",
]

log = logging.getLogger("tvm_memsched")

POLICIES = ("if-better", "always")
#: the name of the duplicate-merging identity in ``rules`` lists and reports
MERGE = "merge_duplicates"

# --------------------------------------------------------------------------------------------------------------
# concats, slicing, context
# --------------------------------------------------------------------------------------------------------------

#: the concat sub-pattern every rule matches through (``m[CONCAT]`` is the concat call)
CONCAT = is_op("relax.concat")(wildcard())
#: the second concat of :func:`concat_pair_binary`
CONCAT_B = is_op("relax.concat")(wildcard())


def _is_call(expr, name: str | None = None) -> bool:
    return isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and (name is None or expr.op.name == name)


def _is_const(expr) -> bool:
    return isinstance(expr, tvm.ir.Constant) and isinstance(getattr(expr, "ty", None), relax.TensorType)


def _shape(expr) -> list[int] | None:
    ty = getattr(expr, "ty", None)
    return static_shape(ty) if isinstance(ty, relax.TensorType) else None


def _plain_layout(layout) -> str | None:
    """The layout string if it is a plain permutation of distinct upper-case letters (no packed ``NCHW4c``)."""
    s = str(layout) if layout is not None else ""
    return s if s and s.isalpha() and s.isupper() and len(set(s)) == len(s) else None


@dataclass(frozen=True)
class ConcatInfo:
    """A statically shaped ``concat``: its call, fields, axis (non-negative) and the fields' sizes on it."""

    call: object
    fields: tuple
    axis: int
    sizes: tuple
    shape: tuple
    dtype: str

    @property
    def offsets(self) -> tuple:
        """Start of every field along the axis."""
        out, acc = [], 0
        for s in self.sizes:
            out.append(acc)
            acc += s
        return tuple(out)

    @property
    def total(self) -> int:
        return int(sum(self.sizes))

    @property
    def ndim(self) -> int:
        return len(self.shape)


def concat_info(expr, var2val=None) -> ConcatInfo | None:
    """The :class:`ConcatInfo` of a concat call (or of a var bound to one), None if not a static concat.

    Static means: at least two fields, all tensors of known static shape and the
    same dtype and rank, equal outside the axis, each at least one element long
    on it.
    """
    if isinstance(expr, relax.Var) and var2val is not None:
        expr = var2val.get(expr, expr)
    if not _is_call(expr, "relax.concat") or expr.attrs is None or expr.attrs.axis is None:
        return None
    tup = expr.args[0]
    if isinstance(tup, relax.Var) and var2val is not None:
        tup = var2val.get(tup, tup)
    if not isinstance(tup, relax.Tuple) or len(tup.fields) < 2:
        return None
    shapes, dtypes = [], set()
    for f in tup.fields:
        shape = _shape(f)
        if shape is None:
            return None
        shapes.append(shape)
        dtypes.add(str(f.ty.dtype))
    ndim = len(shapes[0])
    axis = int(expr.attrs.axis)
    axis = axis + ndim if axis < 0 else axis
    if len(dtypes) != 1 or any(len(s) != ndim for s in shapes) or not 0 <= axis < ndim:
        return None
    rest = {tuple(d for k, d in enumerate(s) if k != axis) for s in shapes}
    sizes = tuple(int(s[axis]) for s in shapes)
    if len(rest) != 1 or min(sizes) <= 0:
        return None
    shape = list(shapes[0])
    shape[axis] = sum(sizes)
    return ConcatInfo(expr, tuple(tup.fields), axis, sizes, tuple(shape), dtypes.pop())


#: ops that only reshape/transpose/cast a constant, folded when a rule slices their result
_FOLDABLE = frozenset({"relax.reshape", "relax.permute_dims", "relax.astype", "relax.expand_dims",
                       "relax.squeeze", "relax.flatten"})


def weight_params(func) -> frozenset:
    """Parameters of ``func`` that hold weights: those after ``attrs["num_input"]`` if set, else all."""
    params = list(func.params)
    attrs = func.attrs
    if attrs is not None and "num_input" in attrs:
        params = params[int(attrs["num_input"]):]
    return frozenset(params)


@dataclass
class RuleContext:
    """What a rule may know about the function it rewrites.

    ``var2val`` resolves vars to their bound values (``relax.analysis.get_var2val``);
    ``params`` are the function's weight parameters (:func:`weight_params`);
    ``order`` gives the position at which a var's value is ready (program order or
    a scheduled order), used to sum partial results in the order the branches
    complete; ``target`` is the concat the caller is rewriting (rules that could
    act on several concats act only on it).
    """

    var2val: dict = field(default_factory=dict)
    params: frozenset = frozenset()
    order: dict = field(default_factory=dict)
    target: object = None
    _ready: dict = field(default_factory=dict, repr=False)

    @classmethod
    def for_function(cls, func, order: dict | None = None, target=None) -> "RuleContext":
        """A context for ``func``; ``order`` defaults to the program order of its bindings."""
        if order is None:
            order = {}
            for blk in func.body.blocks:
                for b in blk.bindings:
                    order[b.var] = len(order)
        return cls(dict(relax.analysis.get_var2val(func)), weight_params(func), order, target)

    def resolve(self, expr):
        """The value bound to ``expr`` if it is a var of this function, else ``expr``."""
        if isinstance(expr, relax.Var):
            return self.var2val.get(expr, expr)
        return expr

    def const_array(self, expr) -> np.ndarray | None:
        """The value of ``expr`` if it is a constant, or a reshape/transpose/cast of one; else None."""
        expr = self.resolve(expr)
        if _is_const(expr):
            return expr.value.numpy()
        if not _is_call(expr) or expr.op.name not in _FOLDABLE or not expr.args:
            return None
        arr = self.const_array(expr.args[0])
        shape = _shape(expr)
        if arr is None or shape is None:
            return None
        if expr.op.name == "relax.permute_dims":
            axes = expr.attrs.axes
            arr = np.transpose(arr, None if axes is None else [int(a) for a in axes])
        elif expr.op.name == "relax.astype":
            arr = arr.astype(str(expr.ty.dtype))
        return np.ascontiguousarray(arr.reshape(shape))

    def is_weight(self, expr) -> bool:
        """True for constants, weight parameters, and reshapes/transposes/casts of those."""
        if _is_const(expr):
            return True
        if not isinstance(expr, relax.Var):
            return False
        if expr in self.params:
            return True
        value = self.var2val.get(expr)
        return _is_call(value) and value.op.name in _FOLDABLE and bool(value.args) and self.is_weight(value.args[0])

    def ready(self, expr) -> int:
        """Position at which ``expr`` is available (-1 for constants and parameters)."""
        if not isinstance(expr, relax.Var):
            return -1
        if expr in self.order:
            return self.order[expr]
        if expr in self._ready:
            return self._ready[expr]
        self._ready[expr] = -1
        value = self.var2val.get(expr)
        pos = -1
        if value is not None:
            pos = max([self.ready(v) for v in relax.analysis.free_vars(value)] or [-1])
        self._ready[expr] = pos
        return pos


def slice_along(expr, axis: int, begin: int, end: int, ctx: RuleContext):
    """``expr[..., begin:end, ...]`` along ``axis``: a new constant when ``expr`` is constant, else a strided_slice."""
    shape = _shape(expr)
    if shape is not None and begin == 0 and end == shape[axis]:
        return expr
    arr = ctx.const_array(expr)
    if arr is not None:
        index = [slice(None)] * arr.ndim
        index[axis] = slice(begin, end)
        return relax.const(np.ascontiguousarray(arr[tuple(index)]))
    return relax.op.strided_slice(expr, axes=[axis], begin=[begin], end=[end])


def _same_call(call, op_args):
    """``call`` with new arguments and the same attributes (types are inferred on normalization)."""
    return relax.Call(call.op, list(op_args), call.attrs)


def _sum_in_ready_order(terms, keys):
    """``((t1 + t2) + t3) + ...`` with the terms sorted by ``keys`` (stable)."""
    order = sorted(range(len(terms)), key=lambda i: keys[i])
    return reduce(relax.op.add, [terms[i] for i in order])


def _concat_arg(call, matches, ctx: RuleContext, pattern=CONCAT) -> tuple[int, ConcatInfo] | None:
    """Index of the argument of ``call`` that is the matched concat, and its info."""
    cat = matches.get(pattern)
    if cat is None:
        return None
    info = concat_info(cat, ctx.var2val)
    if info is None:
        return None
    hits = [i for i, a in enumerate(call.args) if a.same_as(cat) or ctx.resolve(a).same_as(cat)]
    if len(hits) != 1:
        return None
    return hits[0], info


# --------------------------------------------------------------------------------------------------------------
# the rules
# --------------------------------------------------------------------------------------------------------------

_CONV_OPS = ("relax.nn.conv1d", "relax.nn.conv2d", "relax.nn.conv3d")


def _conv_layouts(attrs, ndim: int):
    data = _plain_layout(attrs.data_layout)
    kernel = _plain_layout(attrs.kernel_layout)
    out = _plain_layout(attrs.out_layout) if attrs.out_layout else data
    if data is None or kernel is None or out is None or not (len(data) == len(kernel) == len(out) == ndim):
        return None
    if "C" not in data or "C" not in out or "I" not in kernel or "O" not in kernel:
        return None
    return data, kernel, out


def _sum_of_partials(call, cat: ConcatInfo, weight, wshape, axis: int, ctx: RuleContext):
    """``sum_i call(xi, weight[axis in C_i])`` over the concat's fields, in ready order (None if sizes differ)."""
    if wshape[axis] != cat.total:
        return None
    terms = [_same_call(call, [x, slice_along(weight, axis, off, off + size, ctx)])
             for x, off, size in zip(cat.fields, cat.offsets, cat.sizes)]
    return _sum_in_ready_order(terms, [ctx.ready(x) for x in cat.fields])


def _conv_site(call, matches, ctx: RuleContext):
    """``(concat info, weight, weight shape, (data, kernel, out) layouts)`` of a
    convolution whose data argument is a concat along the data layout's ``C``, else None."""
    found = _concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    weight = call.args[1]
    layouts = _conv_layouts(call.attrs, cat.ndim)
    wshape = _shape(weight)
    if layouts is None or wshape is None or cat.axis != layouts[0].index("C"):
        return None
    return cat, weight, wshape, layouts


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


def matmul_partition(call, matches, ctx: RuleContext):
    """Channel-wise partitioning of a matrix product (a dense layer after a concat).

    Identity: ``concat_{-1}(x1..xn) @ W = sum_i xi @ W_i`` with ``W_i`` the rows of
    ``W`` (its reduction axis, ``-2``, or ``0`` for a vector) that ``xi`` occupies.

    Preconditions: the concat is the left operand, joins on its last axis and has
    rank >= 2; ``W`` has a static shape whose reduction extent equals the concat's.
    """
    found = _concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    weight = call.args[1]
    wshape = _shape(weight)
    if cat.ndim < 2 or cat.axis != cat.ndim - 1 or wshape is None or not wshape:
        return None
    return _sum_of_partials(call, cat, weight, wshape, 0 if len(wshape) == 1 else len(wshape) - 2, ctx)


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


def _inner_concats(call, matches, ctx: RuleContext) -> list:
    """The static concats among the fields of concat ``call`` (what :func:`concat_flatten` consumes)."""
    outer = concat_info(call, ctx.var2val)
    fields = outer.fields if outer is not None else ()
    return [ctx.resolve(f) for f in fields if concat_info(f, ctx.var2val) is not None]


#: element-wise unary ops: ``f(concat(xi)) = concat(f(xi))``
UNARY_OPS = ("relax.nn.relu", "relax.clip", "relax.nn.leakyrelu", "relax.nn.gelu", "relax.nn.gelu_tanh",
             "relax.nn.silu", "relax.nn.selu", "relax.nn.softplus", "relax.sigmoid", "relax.tanh", "relax.exp",
             "relax.log", "relax.sqrt", "relax.rsqrt", "relax.square", "relax.erf", "relax.negative", "relax.abs",
             "relax.sign", "relax.floor", "relax.ceil", "relax.round", "relax.astype")


def unary_commute(call, matches, ctx: RuleContext):
    """Element-wise unary ops commute with concatenation.

    Identity: ``f(concat_a(x1..xn)) = concat_a(f(x1)..f(xn))`` for any element-wise
    ``f`` (ReLU, clip/ReLU6, leaky ReLU, GELU, SiLU, sigmoid, tanh, exp, casts, ...;
    :data:`UNARY_OPS`), with ``f``'s attributes and scalar arguments unchanged.

    Preconditions: none beyond a static concat (any axis).
    """
    found = _concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    return relax.op.concat([_same_call(call, [x] + list(call.args[1:])) for x in cat.fields], axis=cat.axis)


#: element-wise binary ops with broadcasting
BINARY_OPS = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
              "relax.power")


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
    found = _concat_arg(call, matches, ctx)
    if found is None:
        return None
    pos, cat = found
    other = call.args[1 - pos]
    oshape = _shape(other)
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
        parts.append(_same_call(call, [x, w] if pos == 0 else [w, x]))
    return relax.op.concat(parts, axis=cat.axis)


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
    return relax.op.concat([_same_call(call, [x, y]) for x, y in zip(a.fields, b.fields)], axis=a.axis)


POOL_OPS = ("relax.nn.max_pool1d", "relax.nn.max_pool2d", "relax.nn.max_pool3d", "relax.nn.avg_pool1d",
            "relax.nn.avg_pool2d", "relax.nn.avg_pool3d", "relax.nn.adaptive_avg_pool1d",
            "relax.nn.adaptive_avg_pool2d", "relax.nn.adaptive_avg_pool3d")


def pool_commute(call, matches, ctx: RuleContext):
    """Pooling commutes with concatenation on the channel (or batch) axis.

    Identity: ``pool(concat_C(xi)) = concat_C'(pool(xi))``: max, average and adaptive
    average pooling work on every channel independently (padding and
    ``count_include_pad`` apply per channel). ``C'`` is the same dimension in the
    output layout.

    Preconditions: the concat axis is the layout's ``C`` or ``N`` (never a pooled
    spatial axis).
    """
    found = _concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    layout = _plain_layout(call.attrs.layout)
    out = _plain_layout(call.attrs.out_layout) if call.attrs.out_layout else layout
    if layout is None or out is None or len(layout) != cat.ndim or sorted(layout) != sorted(out):
        return None
    dim = layout[cat.axis]
    if dim not in ("C", "N"):
        return None
    return relax.op.concat([_same_call(call, [x]) for x in cat.fields], axis=out.index(dim))


REDUCE_OPS = ("relax.mean", "relax.sum", "relax.max", "relax.min", "relax.prod")


def reduce_commute(call, matches, ctx: RuleContext):
    """Reductions over other axes commute with concatenation (e.g. global average pooling).

    Identity: ``red_R(concat_a(xi)) = concat_a'(red_R(xi))`` for ``red`` in mean, sum,
    max, min, prod over axes ``R`` not containing ``a``; ``a' = a`` with
    ``keepdims`` and ``a`` minus the reduced axes before it otherwise.

    Preconditions: the reduction axes are given and exclude the concat axis.
    """
    found = _concat_arg(call, matches, ctx)
    if found is None or found[0] != 0 or call.attrs.axis is None:
        return None
    _, cat = found
    axes = {int(a) + cat.ndim if int(a) < 0 else int(a) for a in call.attrs.axis}
    if cat.axis in axes:
        return None
    new_axis = cat.axis if call.attrs.keepdims else cat.axis - sum(1 for a in axes if a < cat.axis)
    return relax.op.concat([_same_call(call, [x]) for x in cat.fields], axis=new_axis)


def batch_norm_commute(call, matches, ctx: RuleContext):
    """Inference batch norm commutes with concatenation on its channel axis.

    Identity: ``bn(concat_C(xi), g, b, m, v) = concat_C(bn(xi, g_i, b_i, m_i, v_i))`` with
    the per-channel parameters sliced to each field's channels; the replacement
    returns ``(y, m, v)`` as the original does outside training.

    Preconditions: ``training`` is false; the concat axis is the op's ``axis``; the
    four parameters are static vectors of the concat's channel count.
    """
    found = _concat_arg(call, matches, ctx)
    if found is None or found[0] != 0:
        return None
    _, cat = found
    a = call.attrs
    if getattr(a, "training", False) or (int(a.axis) + cat.ndim) % cat.ndim != cat.axis:
        return None
    params = list(call.args[1:5])
    if any(_shape(p) != [cat.total] for p in params):
        return None
    parts = []
    for x, off, size in zip(cat.fields, cat.offsets, cat.sizes):
        sliced = [slice_along(p, 0, off, off + size, ctx) for p in params]
        parts.append(relax.TupleGetItem(_same_call(call, [x] + sliced), 0))
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


def strided_slice_commute(call, matches, ctx: RuleContext):
    """Slicing other axes commutes with concatenation.

    Identity: ``slice_S(concat_a(xi)) = concat_a(slice_S(xi))`` when the slice leaves
    axis ``a`` whole (not in ``S``, or taken completely with stride 1), e.g. the
    one-pixel shift of the factorized reduction in DARTS/NASNet cells.

    Preconditions: static integer axes/begin/end/strides.
    """
    found = _concat_arg(call, matches, ctx)
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
    found = _concat_arg(call, matches, ctx)
    target = _shape(call)
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


# --------------------------------------------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------------------------------------------

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


def _first_arg_pattern(ops) -> object:
    return reduce(lambda a, b: a | b, [is_op(op)(CONCAT, varg_default_wildcard=True) for op in ops])


def _either_arg_pattern(ops) -> object:
    return reduce(lambda a, b: a | b, [is_op(op)(CONCAT, wildcard()) | is_op(op)(wildcard(), CONCAT) for op in ops])


def _existing(ops) -> tuple:
    out = []
    for op in ops:
        try:
            tvm.ir.Op.get(op)
        except Exception:  # an op this TVM build does not have
            continue
        out.append(op)
    return tuple(out)


def _register_builtin_rules() -> None:
    single = [
        ("conv_channel_partition", "absorb", _CONV_OPS, conv_channel_partition),
        ("grouped_conv_partition", "commute", _CONV_OPS, grouped_conv_partition),
        ("matmul_partition", "absorb", ("relax.matmul",), matmul_partition),
    ]
    for name, kind, ops, fn in single:
        ops = _existing(ops)
        register_rule(Rule(name, kind, ops, reduce(lambda a, b: a | b, [is_op(op)(CONCAT, wildcard()) for op in ops]),
                           fn))
    register_rule(Rule("concat_flatten", "absorb", ("relax.concat",), is_op("relax.concat")(wildcard()),
                       concat_flatten, (), _inner_concats))
    unary = _existing(UNARY_OPS)
    register_rule(Rule("unary_commute", "commute", unary, _first_arg_pattern(unary), unary_commute))
    binary = _existing(BINARY_OPS)
    register_rule(Rule("concat_pair_binary", "commute", binary,
                       reduce(lambda a, b: a | b, [is_op(op)(CONCAT, CONCAT_B) for op in binary]),
                       concat_pair_binary, (CONCAT, CONCAT_B)))
    register_rule(Rule("broadcast_binary_commute", "commute", binary, _either_arg_pattern(binary),
                       broadcast_binary_commute))
    pools = _existing(POOL_OPS)
    register_rule(Rule("pool_commute", "commute", pools, _first_arg_pattern(pools), pool_commute))
    reds = _existing(REDUCE_OPS)
    register_rule(Rule("reduce_commute", "commute", reds, _first_arg_pattern(reds), reduce_commute))
    register_rule(Rule("batch_norm_commute", "commute", ("relax.nn.batch_norm",),
                       _first_arg_pattern(("relax.nn.batch_norm",)), batch_norm_commute))
    register_rule(Rule("strided_slice_commute", "commute", ("relax.strided_slice",),
                       _first_arg_pattern(("relax.strided_slice",)), strided_slice_commute))
    register_rule(Rule("reshape_commute", "commute", ("relax.reshape",), _first_arg_pattern(("relax.reshape",)),
                       reshape_commute))


_register_builtin_rules()


# --------------------------------------------------------------------------------------------------------------
# reports
# --------------------------------------------------------------------------------------------------------------

@dataclass
class RewriteSite:
    """One rule application: ``var`` (the rewritten consumer) consumed ``concat`` of ``inputs``.

    For ``merge_duplicates``, ``var`` is the dropped duplicate, ``concat`` is
    empty and ``inputs`` holds the var it now reads instead.
    """

    function: str
    block: int
    rule: str
    var: str
    concat: str
    inputs: tuple
    level: int = 1          # 1: a user of the site's concat, 2: of a concat created at level 1, ...
    plan: int = 0           # index of the plan (site) it belongs to within its block


@dataclass
class Candidate:
    """The evaluation of one site's plan under ``policy="if-better"`` (the best of its depths).

    ``concat`` names the site (the concat, or the first dropped duplicate);
    ``peak_before``/``peak_after`` are the block's scheduled peaks without and
    with the plan; ``accepted`` says whether it was kept.
    """

    function: str
    block: int
    concat: str
    inputs: tuple
    depth: int
    steps: int
    peak_before: int
    peak_after: int
    accepted: bool
    seconds: float = 0.0


@dataclass
class BlockRewriteReport:
    """What happened to one DataflowBlock."""

    function: str
    block: int
    level: str = "kernel"          # where the peaks below were measured
    status: str = "unchanged"      # "rewritten", "unchanged", or "skipped: <reason>"
    peak_before: int | None = None  # scheduled peak (``method``) of the block before / after
    peak_after: int | None = None
    sites: list = field(default_factory=list)
    candidates: list = field(default_factory=list)
    skipped: list = field(default_factory=list)   # (concat var, reason)
    evaluations: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["skipped"] = [list(s) for s in self.skipped]
        return d


@dataclass
class RewriteReport:
    """All blocks of a module: which sites were rewritten, and the peaks before and after."""

    policy: str
    method: str
    rules: list
    level: str = "best"
    blocks: list = field(default_factory=list)
    scores: dict = field(default_factory=dict)   # level="best": function -> search -> peaks of its result
    chosen: dict = field(default_factory=dict)   # level="best": function -> the search whose result was kept

    @property
    def sites(self) -> list:
        return [s for b in self.blocks for s in b.sites]

    @property
    def peak_before(self) -> int:
        """Largest scheduled peak before rewriting (kernel level with ``level="best"``; unschedulable blocks: 0)."""
        if self.scores:
            return max(sc["original"]["kernel_peak"] for sc in self.scores.values())
        return max([b.peak_before or 0 for b in self.blocks] or [0])

    @property
    def peak_after(self) -> int:
        """Largest scheduled peak after rewriting (kernel level with ``level="best"``)."""
        if self.scores:
            return max(sc[self.chosen.get(name, "original")]["kernel_peak"] for name, sc in self.scores.items())
        return max([b.peak_after or 0 for b in self.blocks] or [0])

    def to_dict(self) -> dict:
        return {"policy": self.policy, "method": self.method, "rules": list(self.rules), "level": self.level,
                "scores": self.scores, "chosen": self.chosen,
                "peak_before": self.peak_before, "peak_after": self.peak_after,
                "sites": len(self.sites), "blocks": [b.to_dict() for b in self.blocks]}

    def summary(self) -> str:
        lines = [f"identity rewrite (policy {self.policy}, scheduler {self.method}, level {self.level}): "
                 f"{len(self.sites)} rewrites, "
                 f"peak {self.peak_before} -> {self.peak_after} bytes"]
        for b in self.blocks:
            lines.append(f"  {b.function} block {b.block}: {b.status}, peak {b.peak_before} -> {b.peak_after} "
                         f"({b.level} level"
                         f", {len(b.sites)} rewrites, {b.evaluations} evaluations, {b.seconds:.2f}s)")
            for s in b.sites:
                if s.rule == MERGE:
                    lines.append(f"    {s.rule}: {s.var} := {s.inputs[0]}")
                else:
                    lines.append(f"    {s.rule}: {s.var} <- {s.concat}({', '.join(s.inputs)})")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------------
# the engine
# --------------------------------------------------------------------------------------------------------------

def _expr_name(expr) -> str:
    if isinstance(expr, relax.Var):
        return expr.name
    if _is_const(expr):
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
        if b is None or not _is_call(b.value, "relax.concat"):
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
        if not isinstance(b, relax.VarBinding) or not _is_call(b.value):
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
                   if _is_call(b.value, "relax.concat") and (b.var not in old or b.var.same_as(user_var))]
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
    if not _is_call(value):
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
class _Site:
    kind: str          # "concat" or "merge"
    vars: tuple        # (concat var,) or the duplicate group
    position: int

    @property
    def name(self) -> str:
        return self.vars[0].name if self.kind == "concat" else self.vars[1].name


def _sites(func, k: int, merge: bool, merges_first: bool = True) -> list[_Site]:
    """Duplicate groups and concat bindings of block ``k``, each kind in program order, merges first or last."""
    pos = _program_order(func, k)
    out = [_Site("concat", (b.var,), pos[b.var]) for b in func.body.blocks[k].bindings
           if _is_call(b.value, "relax.concat")]
    if merge:
        out += [_Site("merge", tuple(g), pos[g[1]]) for g in duplicate_groups(func, k)]
    return sorted(out, key=lambda st: ((st.kind == "merge") != merges_first, st.position))


def _still_there(func, k: int, site: _Site) -> bool:
    bindings = {b.var: b.value for b in func.body.blocks[k].bindings}
    if any(v not in bindings for v in site.vars):
        return False
    if site.kind == "merge":
        first = bindings[site.vars[0]]
        return all(tvm_ffi.structural_equal(first, bindings[v]) for v in site.vars[1:])
    return True


def _plans(func, k: int, site: _Site, rules, order, all_depths: bool):
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


def _program_order(func, k: int) -> dict:
    return {b.var: i for i, b in enumerate(func.body.blocks[k].bindings)}


@dataclass
class _Eval:
    peak: int
    profile: tuple
    order: dict

    @property
    def key(self):
        return (self.peak, self.profile)


#: where blocks are evaluated: after TVM's legalization and fusion, right here, or both (the better result wins)
LEVELS = ("best", "kernel", "operator")


class Evaluator:
    """Schedules block ``k`` of a candidate function and scores it (peak, then footprint profile).

    ``level="operator"`` schedules the operator-level block itself.
    ``level="kernel"`` first runs TVM's dispatch and legalization stages of
    ``target`` (``LegalizeOps``, ``FoldConstant``, ``FuseOps``, ``FuseTIR``) on the
    module with the candidate in place and schedules the fused block, which is
    what :class:`~tvm_memsched.transform.MemoryAwareReorder` and the arena
    planner see: a concat feeding an element-wise op is fused away by TVM, a
    convolution's partial sums are not. The positions used to order partial sums
    always come from the operator-level schedule.
    """

    def __init__(self, module, name: str, method: str, time_limit: float | None, options: dict,
                 level: str = "kernel", target=None):
        if level not in ("kernel", "operator"):
            raise UnsupportedError(f"unknown evaluation level '{level}'; use one of {', '.join(LEVELS)}")
        self.module, self.name, self.level = module, name, level
        self.method, self.time_limit, self.options = method, time_limit, dict(options)
        self.count = 0
        if level == "kernel":
            from .pipeline import as_target, stages

            self.target = as_target(target)
            st = stages(self.target)
            self.lower = tvm.transform.Sequential(st["dispatch"] + st["legalize"])

    def _schedule(self, func, k: int):
        bg = block_to_graph(func, k)
        g = bg.graph
        res = schedule(g, self.method, time_limit=self.time_limit, **self.options)
        ids = list(res.order_ids) if res.order_ids else g.resolve_order(res.order)
        return bg, g, res, ids

    def __call__(self, func, k: int) -> _Eval:
        self.count += 1
        bg, g, res, ids = self._schedule(func, k)
        order = {bg.block.bindings[bg.binding_of_op[g.ops[v].name]].var: pos for pos, v in enumerate(ids)}
        if self.level == "kernel":
            mod = self.module.clone()
            mod[self.name] = func
            with self.target:
                fused = self.lower(mod)
            kfunc = fused[self.name]
            kk = _matching_block(func, kfunc, k)
            _, g, res, ids = self._schedule(kfunc, kk)
        stable, _ = footprints(g, ids)
        profile = tuple(sorted((s for s, v in zip(stable, ids) if g.output_bytes[v] + g.workspace[v] > 0),
                               reverse=True))
        return _Eval(res.peak_bytes, profile, order)


def _matching_block(func, lowered, k: int) -> int:
    """Index in ``lowered`` of the DataflowBlock that was block ``k`` of ``func`` (the same rank among them)."""
    rank = sum(1 for b in func.body.blocks[:k] if isinstance(b, relax.DataflowBlock))
    dataflow = [i for i, b in enumerate(lowered.body.blocks) if isinstance(b, relax.DataflowBlock)]
    if rank >= len(dataflow):
        raise UnsupportedError("the dataflow block disappeared during legalization")
    return dataflow[rank]


def _record(rep: BlockRewriteReport, steps, plan: int) -> None:
    for s in steps:
        s.function, s.plan = rep.function, plan
    rep.sites.extend(steps)


def _if_better(func, k: int, rep: BlockRewriteReport, rules, merge, evaluate: Evaluator, max_passes: int,
               merges_first: bool = True):
    t0 = time.perf_counter()
    try:
        cur_eval = evaluate(func, k)
    except MemschedError as e:
        rep.status = f"skipped: {e}"
        return func
    rep.evaluations += 1
    rep.peak_before = rep.peak_after = cur_eval.peak
    cur, plans = func, 0
    for npass in range(max_passes):
        accepted = False
        for site in _sites(cur, k, merge, merges_first):
            if not _still_there(cur, k, site):
                continue
            tc = time.perf_counter()
            variants, reason = _plans(cur, k, site, rules, cur_eval.order, all_depths=True)
            if variants is None:
                if npass == 0:
                    rep.skipped.append((site.name, reason))
                continue
            best = None
            for f_v, s_v in variants:
                try:
                    ev = evaluate(f_v, k)
                except MemschedError as e:
                    log.warning("IdentityRewrite: cannot evaluate a rewrite of %s: %s", site.name, e)
                    continue
                rep.evaluations += 1
                if best is None or ev.key < best[0].key:
                    best = (ev, f_v, s_v)
            if best is None:
                continue
            ev, f_v, s_v = best
            ok = ev.key < cur_eval.key
            depth = max(s.level for s in s_v)
            rep.candidates.append(Candidate(rep.function, k, site.name, s_v[0].inputs if site.kind == "concat"
                                            else tuple(v.name for v in site.vars), depth, len(s_v),
                                            cur_eval.peak, ev.peak, ok, round(time.perf_counter() - tc, 4)))
            if ok:
                _record(rep, s_v, plans)
                plans += 1
                cur, cur_eval, accepted = f_v, ev, True
        if not accepted:
            break
    if rep.sites and cur_eval.peak >= rep.peak_before:
        # the profile improved but the peak did not: keep the block as it was
        rep.status = f"unchanged: {plans} plans lowered the footprint profile but not the peak (reverted)"
        rep.sites = []
        for c in rep.candidates:
            c.accepted = False
        cur, cur_eval = func, None
    rep.peak_after = rep.peak_before if cur_eval is None else cur_eval.peak
    rep.seconds = round(time.perf_counter() - t0, 4)
    return cur


def _always(func, k: int, rep: BlockRewriteReport, rules, merge, evaluate: Evaluator | None):
    t0 = time.perf_counter()
    cur, plans = func, 0
    seen_skips = set()
    for _ in range(1 + len(func.body.blocks[k].bindings)):
        changed = False
        for site in _sites(cur, k, merge):
            if not _still_there(cur, k, site):
                continue
            variants, reason = _plans(cur, k, site, rules, _program_order(cur, k), all_depths=False)
            if variants is None:
                if site.name not in seen_skips:
                    seen_skips.add(site.name)
                    rep.skipped.append((site.name, reason))
                continue
            cur, steps = variants[-1]
            _record(rep, steps, plans)
            plans, changed = plans + 1, True
        if not changed:
            break
    if evaluate is not None:
        for which, f in (("peak_before", func), ("peak_after", cur)):
            try:
                setattr(rep, which, evaluate(f, k).peak)
                rep.evaluations += 1
            except MemschedError as e:
                rep.status = f"skipped: {e}"
    rep.seconds = round(time.perf_counter() - t0, 4)
    return cur


def canonicalize(func):
    """``func`` with bindings canonicalized (``CanonicalizeBindings``) and unused bindings removed."""
    attrs = func.attrs
    name = str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs else "main"
    mod = relax.transform.CanonicalizeBindings()(tvm.IRModule({name: func}))
    return relax.analysis.remove_all_unused(mod[name])


def rewrite_function(func, name: str = "main", *, rules=None, policy: str = "if-better", method: str | None = "beam",
                     time_limit: float | None = None, max_passes: int = 2, level: str = "kernel", target=None,
                     module=None, merges_first: bool = True, reports: list | None = None, **options):
    """``func`` with the identity rewrites of :func:`identity_rewrite` applied to each DataflowBlock.

    ``level`` is ``"kernel"`` or ``"operator"`` (one greedy search); ``module`` is
    the module ``func`` belongs to under ``name`` (needed to legalize it at
    kernel level; default: a module of ``func`` alone); ``merges_first`` visits
    duplicate groups before concat sites (else after).
    """
    if policy not in POLICIES:
        raise UnsupportedError(f"unknown rewrite policy '{policy}'; use one of {', '.join(POLICIES)}")
    rule_list, merge = _select(rules)
    reports = reports if reports is not None else []
    if policy == "if-better" and method is None:
        raise UnsupportedError("policy 'if-better' needs a scheduling method")
    evaluate = None
    if method is not None:
        module = tvm.IRModule({name: func}) if module is None else module
        evaluate = Evaluator(module, name, method, time_limit, options, level, target)
    cur = canonicalize(func)
    changed = False
    for k, block in enumerate(cur.body.blocks):
        if not isinstance(block, relax.DataflowBlock):
            continue
        rep = BlockRewriteReport(name, k, level)
        if policy == "always":
            cur = _always(cur, k, rep, rule_list, merge, evaluate)
        else:
            cur = _if_better(cur, k, rep, rule_list, merge, evaluate, max_passes, merges_first)
        if rep.sites:
            rep.status, changed = "rewritten", True
        reports.append(rep)
    return cur if changed else func


def _select(rules) -> tuple[list, bool]:
    """(pattern rules, whether to merge duplicates) for a ``rules`` argument."""
    if rules is None:
        return get_rules(None), True
    if isinstance(rules, (str, Rule)):
        rules = [rules]
    rules = list(rules)
    merge = MERGE in rules
    return get_rules([r for r in rules if r != MERGE]), merge


def identity_rewrite(mod, rules: Iterable | None = None, policy: str = "if-better", method: str | None = "beam",
                     time_limit: float | None = None, max_passes: int = 2, level: str = "best", target=None,
                     **options):
    """Apply the identity rewrites to every Relax function of ``mod``; returns ``(module, RewriteReport)``.

    ``rules``: rule names or :class:`Rule` objects, plus ``"merge_duplicates"``
    (default: all of :data:`RULES` and duplicate merging). ``policy``:
    ``"if-better"`` keeps a site's rewrite only when the scheduled peak of the
    block goes down (see the module docstring), ``"always"`` applies every one.

    Evaluation (:class:`Evaluator`): ``level="kernel"`` scores a block after TVM's
    legalization and fusion for ``target`` (default llvm), ``"operator"`` scores
    the operator-level block directly (cheaper, but blind to fusion: it counts the
    copy of a concat that feeds an element-wise op, which TVM fuses away, so some
    of its rewrites only pay off at operator level). Greedy search is
    path-dependent and the two scores lead it to different results, so
    ``"best"`` (default) runs the searches of :data:`SEARCHES` and keeps the
    result with the lowest (kernel-level peak, operator-level peak, number of
    rewrites), provided it does not raise the kernel-level peak and lowers one
    of the two peaks; otherwise the function stays as it was. ``method``, ``time_limit`` (seconds per
    evaluation) and ``options`` configure the scheduler (with ``"always"``, only
    used to report peaks; ``method=None`` skips that). The default, the beam
    search of the ``dp`` scheduler without a time limit, is deterministic and
    fast; ``"auto"`` or ``"dp"`` with a time limit search harder but make the
    decisions depend on the machine's speed. ``max_passes`` bounds the greedy
    passes over the sites.
    """
    if policy not in POLICIES:
        raise UnsupportedError(f"unknown rewrite policy '{policy}'; use one of {', '.join(POLICIES)}")
    if level not in LEVELS:
        raise UnsupportedError(f"unknown evaluation level '{level}'; use one of {', '.join(LEVELS)}")
    rule_list, merge = _select(rules)
    names = [r.name for r in rule_list] + ([MERGE] if merge else [])
    report = RewriteReport(policy, str(method), names, level)
    new_mod = mod
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        kw = dict(rules=rule_list + ([MERGE] if merge else []), policy=policy, method=method,
                  time_limit=time_limit, max_passes=max_passes, target=target, module=new_mod)
        if level == "best" and policy == "if-better":
            new_func = _best_of_levels(func, gv.name_hint, report, kw, options)
        else:
            new_func = rewrite_function(func, gv.name_hint, level="kernel" if level == "best" else level,
                                        reports=report.blocks, **kw, **options)
        if new_func is not func:
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new_func
    return new_mod, report


#: the greedy searches of ``level="best"``: (scoring level, duplicate groups visited first)
SEARCHES = (("operator", True), ("kernel", True), ("kernel", False))


def _search_name(level: str, merges_first: bool, merge: bool) -> str:
    return level if not merge else f"{level}, {'merges first' if merges_first else 'merges last'}"


def _best_of_levels(func, name: str, report: "RewriteReport", kw: dict, options: dict):
    """Rewrite ``func`` with the searches of :data:`SEARCHES`; keep the best function (see ``level="best"``)."""
    merge = MERGE in kw["rules"]
    results = {}
    for lv, first in SEARCHES:
        label = _search_name(lv, first, merge)
        if label in results:  # without duplicate merging the site order does not matter
            continue
        reps: list = []
        results[label] = (rewrite_function(func, name, level=lv, merges_first=first, reports=reps, **kw, **options),
                          reps)
    kernel = Evaluator(kw["module"], name, kw["method"], kw["time_limit"], options, "kernel", kw["target"])
    operator = Evaluator(kw["module"], name, kw["method"], kw["time_limit"], options, "operator")

    def score(f):
        """(kernel-level peak, operator-level peak) over the dataflow blocks of ``f``, None if not schedulable."""
        peaks = [0, 0]
        for k, block in enumerate(f.body.blocks):
            if isinstance(block, relax.DataflowBlock):
                try:
                    peaks = [max(peaks[0], kernel(f, k).peak), max(peaks[1], operator(f, k).peak)]
                except MemschedError:
                    return None
        return peaks

    base = score(func)
    best, best_key = None, None
    if base is not None:
        report.scores[name] = {"original": {"kernel_peak": base[0], "operator_peak": base[1], "rewrites": 0}}
        for label, (f, reps) in results.items():
            sc = score(f) if f is not func else base
            if sc is None:
                continue
            n = sum(len(r.sites) for r in reps)
            report.scores[name][label] = {"kernel_peak": sc[0], "operator_peak": sc[1], "rewrites": n}
            key = (sc[0], sc[1], n)
            if f is not func and sc[0] <= base[0] and (sc[0], sc[1]) < (base[0], base[1]) \
                    and (best_key is None or key < best_key):
                best, best_key = label, key
    report.chosen[name] = best or "original"
    if best is None:  # no search lowers the peak: report the first search, keep the function
        reps = next(iter(results.values()))[1]
        for rep in reps:
            if rep.sites:
                rep.status = "unchanged: the rewrites did not lower the kernel-level peak (reverted)"
            rep.sites, rep.peak_after = [], rep.peak_before
            for c in rep.candidates:
                c.accepted = False
        report.blocks.extend(reps)
        return func
    report.blocks.extend(results[best][1])
    return results[best][0]
