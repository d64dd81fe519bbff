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

The engine (:mod:`.engine`) finds sites with the rules' patterns
(``pattern.match`` through the function's var-to-value map) and rewrites
exactly the matched binding (:func:`replace_binding`). It does not go through ``rewrite_call`` there, because
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

Modules
-------
* :mod:`.context` - static concats, :class:`RuleContext`, weight slicing;
* :mod:`.registry` - :class:`Rule`, :data:`RULES` and the ``register`` decorator;
* :mod:`.partition`, :mod:`.flatten`, :mod:`.commute` - the rules, each registered where it is defined;
* :mod:`.engine` - sites, plans, binding replacement, duplicate merging;
* :mod:`.search` - the policies and the evaluation levels (:func:`identity_rewrite`);
* :mod:`.report` - what was rewritten, and the peaks before and after.
"""

from __future__ import annotations

# the rule modules register their rules on import, in this order (the order rules are tried in)
from . import partition, flatten, commute  # noqa: F401,I001
from .commute import (BINARY_OPS, POOL_OPS, REDUCE_OPS, UNARY_OPS, batch_norm_commute, broadcast_binary_commute,
                      concat_pair_binary, pool_commute, reduce_commute, reshape_commute, strided_slice_commute,
                      unary_commute)
from .context import CONCAT, CONCAT_B, ConcatInfo, RuleContext, concat_info, slice_along, weight_params
from .engine import canonicalize, duplicate_groups, merge_duplicates, replace_binding, replace_bindings
from .flatten import concat_flatten
from .partition import conv_channel_partition, grouped_conv_partition, matmul_partition
from .registry import MERGE, RULES, Rule, available_rules, get_rules, register, register_rule
from .report import BlockRewriteReport, Candidate, RewriteReport, RewriteSite
from .search import LEVELS, POLICIES, SEARCHES, Evaluator, identity_rewrite, rewrite_function

__all__ = [
    "ConcatInfo", "concat_info", "RuleContext", "Rule", "RULES", "register_rule", "available_rules", "get_rules",
    "RewriteSite", "Candidate", "BlockRewriteReport", "RewriteReport", "identity_rewrite", "rewrite_function",
    "POLICIES",
    # the rules
    "conv_channel_partition", "grouped_conv_partition", "matmul_partition", "concat_flatten", "unary_commute",
    "broadcast_binary_commute", "concat_pair_binary", "pool_commute", "reduce_commute", "batch_norm_commute",
    "strided_slice_commute", "reshape_commute", "replace_binding", "replace_bindings", "canonicalize", "slice_along", "weight_params",
    "duplicate_groups", "merge_duplicates", "MERGE", "Evaluator", "LEVELS", "SEARCHES",
]
