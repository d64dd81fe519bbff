"""Producers computed inside their only consumer: the ``InlineProducers`` pass (after FuseTIR).

TVM's FuseOps fuses element-wise operators *after* a convolution into it, never
*before*: in a pre-activation network (DenseNet's BN-ReLU-Conv, ResNet-v2) the
``relu`` of a tensor that stays alive for a later concatenation or residual
add is a whole second copy of it, and the live peak holds both. No order and
no in-place overlap removes it (the input is still needed, so the ``relu``
cannot overwrite it). And a convolution's whole output lives until the next
convolution has read it, though that one reads it a few rows at a time.

This pass computes such producers inside their consumer's kernel instead. The
calls are grouped into one primitive function, TVM's ``FuseTIR`` merges the
kernels, and the merged kernel is scheduled so that the intermediate tensor
disappears from the program:

1. **Cheap element-wise producers.** A ``call_tir`` of an element-wise or broadcast
   kernel (TVM's ``op_pattern`` <= 1, or a fused kernel whose every block stores at
   its own iteration point) whose result has exactly one use, the argument of
   another ``call_tir``: the producer's stage is inlined (``compute_inline``), so
   the consumer reads ``max(x, 0)`` where it read the ``relu`` output. Cheap means
   arithmetic, ``max`` / ``min``, casts and selects.
2. **Costly element-wise producers** (a batch norm's square root, a sigmoid's
   ``exp``), which the consumer would repeat for every read: computed under the
   consumer's loops, one pixel's channels at a time, where that computes each
   element exactly once (a 1x1 convolution in NHWC) and takes at most
   :data:`MAX_BAND` of the removed tensor as workspace; otherwise left apart.
3. **Convolution chains in bands** (``bands=True``): a reduction ``P`` summing along
   one axis (a 1x1 convolution, a dense layer: any loop order then keeps its sums),
   at most one element-wise kernel, and a reduction ``C`` reading the result, each
   intermediate used once and together at least ``band_share`` of the function's
   largest tensor. ``C``'s output rows are split into bands; its input stage (the
   element-wise stages and ``C``'s padding) is computed per band, and ``P`` per
   pixel of that stage. Rows two bands share are computed by both, so the band is
   the fewest rows (1, 2, 4, ...) for which ``P`` and every stage before ``C`` run
   at most ``max_recompute`` times their work in one band; the band's workspace may
   be at most :data:`MAX_CHAIN_BAND` of the tensors removed. This is patch-based inference
   (MCUNetV2) for the interior of a network: a DenseNet layer's 1x1 -> 3x3
   bottleneck, a MobileNet's expansion -> depthwise convolution.

Only producers whose result is at least as large as each of their tensor inputs
qualify for steps 1 and 2 (the inputs then live until the consumer, which must
not cost more than the result saved). A merged kernel the schedule cannot
realise is dropped and the calls stay as they were; a pair whose kernels give the
shared tensor different buffer types (TVM's kernels index with int64, our integer
kernels with int32), which FuseTIR cannot merge, is not grouped.

Every element is computed by the same expression on the same values, summed in
the same order, so results are bit-identical to TVM's build.

Example
-------
>>> from tvm_memsched.relax.testing import preactivation_module
>>> import tvm
>>> from tvm_memsched.relax.target import stages
>>> st = stages("llvm")
>>> with tvm.target.Target({"kind": "llvm"}):
...     fused = tvm.transform.Sequential(st["legalize"])(preactivation_module())
>>> new, merged = inline_producers(fused)
>>> merged
[('relu', 'fused_conv2d_add')]
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx

from ..analysis.workspace import compacted_workspace_bytes, internal_allocations, walk_stmts
from ..ir import per_body, static_nbytes, var_occurrences
from ..schedule import Schedule
from .shrink_workspace import attach_loop, executions, instances, runs_each_instance_once, shrink_func

__all__ = ["InlineProducers", "inline_producers"]

log = logging.getLogger(__name__)

_CALL_TIR = tvm.ir.Op.get("relax.call_tir")
#: a costly producer computed in bands may take at most this share of the tensor it removes as workspace
MAX_BAND = 1 / 8
#: a chain computed in bands may take at most this share of the intermediates it removes as workspace
MAX_CHAIN_BAND = 1 / 2
#: one band may run a stage at most this many times its points (the padding rows and columns it covers)
MAX_PADDED = 2
_CHEAP_CALLS = ("if_then_else", "likely", "reinterpret")
_BINARY = tuple(getattr(tirx, n) for n in ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max",
                                           "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or") if hasattr(tirx, n))


def _is_call_tir(value) -> bool:
    return isinstance(value, relax.Call) and value.op.same_as(_CALL_TIR)


def _cheap_expr(e) -> bool:
    """Arithmetic, comparisons, casts, selects and loads only (anything else counts as expensive)."""
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, (tirx.IntImm, tirx.FloatImm, tvm.ir.Var, tvm.ir.StringImm)):
            continue
        if isinstance(e, tvm.ir.TensorLoad):
            stack.extend(e.indices)
        elif isinstance(e, tvm.ir.Call):
            if not str(getattr(e.op, "name", e.op)).endswith(_CHEAP_CALLS):
                return False
            stack.extend(e.args)
        elif isinstance(e, tirx.Select):
            stack.extend([e.condition, e.true_value, e.false_value])
        elif isinstance(e, (tirx.Cast, tirx.Not)):
            stack.append(e.value if isinstance(e, tirx.Cast) else e.a)
        elif isinstance(e, _BINARY):
            stack.extend([e.a, e.b])
        else:
            return False
    return True


def _elementwise(func) -> bool:
    return _memo("elementwise", func, _is_elementwise)


def _is_elementwise(func) -> bool:
    """Element-wise or broadcast: as TVM's op pattern classifies the kernel, or, for a kernel FuseTIR wrote
    (no pattern), one that once its internal stages are inlined has no workspace left and whose every block is
    spatial and stores at its own iteration point. The loads are not inspected: a kernel that reads its input
    elsewhere (a transpose) passes, which costs at most speed, since every merge uses TVM's own schedule
    primitives and the once-per-element and recompute checks below."""
    attrs = func.attrs
    if attrs is not None and "op_pattern" in attrs:
        return int(attrs["op_pattern"]) <= 1
    func = _inlined(func)[0]
    blocks = _blocks_of(func)
    if not blocks or internal_allocations(func):
        return False
    for block in blocks:
        if any(int(iv.iter_type) != 0 for iv in block.iter_vars) or block.init is not None:
            return False
        point = [iv.var for iv in block.iter_vars]
        stores = []
        walk_stmts(block.body, lambda st: stores.append(st) if isinstance(st, tirx.BufferStore) else None)
        if any(len(st.indices) != len(point) or not all(isinstance(i, tvm.ir.Var) and i.same_as(v)
                                                          for i, v in zip(st.indices, point)) for st in stores):
            return False
    return True


def _cheap(func) -> bool:
    """Element-wise or broadcast (TVM's op pattern) and free of calls the consumer would repeat."""
    if not _elementwise(func):
        return False
    stores = []
    walk_stmts(func.body, lambda st: stores.append(st) if isinstance(st, tirx.BufferStore) else None)
    return bool(stores) and all(_cheap_expr(st.value) for st in stores)


def _uses(func) -> dict:
    return Counter(var_occurrences(func.body))


def _producers(mod, block, uses, exclude) -> dict:
    """consumer binding index -> [producer binding indices] for the block's eligible pairs."""
    index = {b.var: k for k, b in enumerate(block.bindings)}
    groups: dict = {}
    for k, b in enumerate(block.bindings):
        if not _is_call_tir(b.value) or any(b.var.same_as(e) for e in exclude):
            continue
        for a in b.value.args[1].fields:
            j = index.get(a) if isinstance(a, relax.Var) else None
            if j is None or uses.get(a) != 1 or j in groups or any(j in v for v in groups.values()):
                continue
            p = block.bindings[j].value
            if not _is_call_tir(p) or not isinstance(mod[p.args[0]], tirx.PrimFunc) \
                    or not _elementwise(mod[p.args[0]]) or isinstance(p.ty, relax.TupleType):
                continue
            out = static_nbytes(p.ty)
            ins = [static_nbytes(x.ty) for x in p.args[1].fields if isinstance(x, relax.Var)]
            if out is None or any(n is None or n > out for n in ins):
                continue
            if not _same_buffers(mod, p, b.value, a):
                continue
            groups.setdefault(k, []).append(j)
    return groups


def _reduction(func) -> bool:
    """True when a block of ``func`` reduces (a convolution, a pooling, a matrix product)."""
    return any(any(int(iv.iter_type) != 0 for iv in b.iter_vars) for b in _blocks_of(func))


def _kernel(mod, value):
    """The PrimFunc a ``call_tir`` binding value calls (None for anything else)."""
    if not _is_call_tir(value) or isinstance(value.ty, relax.TupleType):
        return None
    f = mod[value.args[0]]
    return f if isinstance(f, tirx.PrimFunc) else None


def _chains(mod, block, uses, exclude, share: float) -> dict:
    """consumer binding index -> [producer binding indices]: a reduction ``C`` reading, through at most one
    element-wise kernel ``E``, the output of a reduction ``P``, each intermediate used once and together at
    least ``share`` of the block's largest tensor. Chains are disjoint."""
    index = {b.var: k for k, b in enumerate(block.bindings)}
    sizes = [static_nbytes(b.var.ty) or 0 for b in block.bindings]
    floor = share * max(sizes, default=0)
    found = []
    for k, b in enumerate(block.bindings):
        fc = _kernel(mod, b.value)
        if fc is None or not _reduction(fc) or any(b.var.same_as(e) for e in exclude):
            continue
        for a in b.value.args[1].fields:
            j = index.get(a) if isinstance(a, relax.Var) else None
            if j is None or uses.get(a) != 1:
                continue
            chain = [j]
            fj = _kernel(mod, block.bindings[j].value)
            if fj is not None and not _reduction(fj) and _elementwise(fj):
                ins = [x for x in block.bindings[j].value.args[1].fields if isinstance(x, relax.Var)
                       and x in index and uses.get(x) == 1 and _kernel(mod, block.bindings[index[x]].value)]
                if len(ins) != 1:
                    continue
                chain.insert(0, index[ins[0]])
            fp = _kernel(mod, block.bindings[chain[0]].value)
            if fp is None or not _reduction(fp) or sum(sizes[i] for i in chain) < floor:
                continue
            values = [block.bindings[i].value for i in chain] + [b.value]
            vars_ = [block.bindings[i].var for i in chain]
            if all(_same_buffers(mod, values[n], values[n + 1], vars_[n]) for n in range(len(chain))):
                found.append((sum(sizes[i] for i in chain), k, chain))
    groups, taken = {}, set()
    for _, k, chain in sorted(found, key=lambda t: -t[0]):      # the largest intermediates first
        if taken.isdisjoint([k] + chain):
            groups[k] = chain
            taken.update([k] + chain)
    return groups


def _same_buffers(mod, producer, consumer, var) -> bool:
    """FuseTIR maps one Relax value to one TIR buffer: the producer's output buffer must have the same type
    (shape, index types, dtype) as every consumer parameter ``var`` is passed to, and an argument both calls
    take must have the same buffer type in both (TVM's kernels index with int64, ours with int32)."""
    pf, cf = mod[producer.args[0]], mod[consumer.args[0]]
    bufs: dict = {}
    p_args = list(producer.args[1].fields)
    c_args = list(consumer.args[1].fields)
    if len(pf.params) != len(p_args) + 1 or len(cf.params) < len(c_args):
        return False
    for a, q in list(zip(p_args, pf.params)) + [(var, pf.params[len(p_args)])] + list(zip(c_args, cf.params)):
        if isinstance(a, relax.Var):
            bufs.setdefault(a, []).append(q.ty)
    return all(tvm_ffi.structural_equal(t[0], u) for t in bufs.values() for u in t[1:])


def _group_function(block, consumer: int, producers: list):
    """A primitive Relax function computing the producers then the consumer, and the outer arguments."""
    params, outer = [], []

    def param(a):
        for o, q in zip(outer, params):
            if o.same_as(a):
                return q
        q = relax.Var(f"a{len(params)}", a.ty)
        params.append(q)
        outer.append(a)
        return q

    inner = []

    def arg(a):
        hit = next((v for var, v in inner if var.same_as(a)), None)
        return hit if hit is not None else param(a)

    bindings = []
    for j in sorted(producers):          # program order: a producer may read an earlier one (a chain)
        b = block.bindings[j]
        v = relax.DataflowVar(f"p{j}", b.var.ty)
        bindings.append(relax.VarBinding(v, relax.call_tir(b.value.args[0], relax.Tuple(
            [arg(a) for a in b.value.args[1].fields]), b.var.ty)))
        inner.append((b.var, v))
    c = block.bindings[consumer]
    args = [arg(a) for a in c.value.args[1].fields]
    ret = relax.Var("ret", c.var.ty)
    bindings.append(relax.VarBinding(ret, relax.call_tir(c.value.args[0], relax.Tuple(args), c.var.ty)))
    fn = relax.Function(params, relax.SeqExpr([relax.DataflowBlock(bindings)], ret), c.var.ty, True)
    return fn.with_attr("Primitive", True), outer


#: per-kernel results within one :func:`inline_producers` run (kernels are immutable and hash by identity)
_MEMO: dict = {}
#: band schedules within one run, per kernel body (:func:`~tvm_memsched.relax.ir.per_body`): a network's
#: repeated cells give the same chains, and a round after a refusal tries the others again
_BANDS: dict = {}


def _memo(kind: str, func, compute):
    key = (kind, func)
    if key not in _MEMO:
        _MEMO[key] = compute(func)
    return _MEMO[key]


def _inlined(func) -> tuple:
    """(func with its non-reduction internal stages inlined, its workspace bytes after compaction)."""
    def compute(f):
        g, _ = shrink_func(f, epilogues=False)
        return g, compacted_workspace_bytes(g)
    return _memo("inlined", func, compute)


def _computed_once(func) -> bool:
    """True when every stage of ``func`` that writes its workspace runs each point of its domain once."""
    sch = Schedule(func)
    internal = {name for name, scope, _ in internal_allocations(func) if scope in ("global", "")}
    for b in _blocks_of(func):
        blk = sch.get_sblock(b.name_hint)
        block = sch.get(blk)
        if len(block.writes) == 1 and block.writes[0].source.name in internal \
                and not runs_each_instance_once(sch, blk):
            return False
    return True


def _banded(func) -> tuple:
    """(func with each costly producer stage computed under its consumer's loops once per element, its
    workspace bytes after compaction); ``(func, None)`` when a stage would be computed more than once."""
    g, steps = shrink_func(func, epilogues=False, reuse="band")
    if not steps or any("kept whole" in s for s in steps) or not _computed_once(g):
        return func, None
    return g, compacted_workspace_bytes(g)


def _blocks_of(func) -> list:
    """The blocks of ``func`` but its root, in program order."""
    def compute(f):
        out = []
        walk_stmts(f.body, lambda st: out.append(st) if isinstance(st, s_tir.SBlock) and st.name_hint != "root"
                   else None)
        return out
    return _memo("blocks", func, compute)


def _workspace(func) -> int | None:
    """Compacted workspace bytes of a scheduled kernel; None when TVM's compaction refuses it (index types
    that do not match after a split, say): such a schedule is not used."""
    try:
        return compacted_workspace_bytes(func)
    except Exception:  # noqa: BLE001 - refused by TVM's own passes: not a kernel to build
        return None


def _band_schedule(func, max_recompute: float):
    """``func`` (producer reduction ``P``, element-wise stages, consumer reduction ``C``, as FuseTIR merged
    them) computing ``P`` in bands of ``C``'s output rows, or None when no band keeps the recomputation of
    ``P`` within ``max_recompute`` (see the module docstring)."""
    blocks = _blocks_of(func)
    reds = [k for k, b in enumerate(blocks) if any(int(iv.iter_type) != 0 for iv in b.iter_vars)]
    if len(reds) != 2:
        return None       # P or C reduces more than once (a softmax: its row stages would be inlined whole)
    p_name, c_name = blocks[reds[-2]].name_hint, blocks[reds[-1]].name_hint
    if len({b.name_hint for b in blocks}) != len(blocks):
        return None
    if sum(int(iv.iter_type) != 0 and (_int_extent(iv) or 2) > 1 for iv in blocks[reds[-2]].iter_vars) > 1:
        return None       # P sums along one axis only (a 1x1 convolution): any loop order keeps its sums
    base = Schedule(func)
    producers = [base.get(x).name_hint for x in base.get_producers(base.get_sblock(c_name))]
    if len(producers) != 1:
        return None
    keep = producers[0]
    try:
        for b in blocks[reds[-2] + 1:reds[-1]]:          # P's epilogue and E: one stage, read by C
            if b.name_hint != keep:
                base.compute_inline(base.get_sblock(b.name_hint))
    except Exception:  # noqa: BLE001 - a stage TVM cannot inline: no band
        return None
    early = [base.get(x).name_hint for x in base.get_producers(base.get_sblock(p_name))
             if base.get(x).name_hint in {b.name_hint for b in blocks[:reds[-2]]}]
    early = [name for name in early if not _inline_copy(base, name)]
    c_loops = list(base.get_loops(base.get_sblock(c_name)))
    outer = attach_loop(base, base.get_sblock(c_name))
    last = next((n for n, lp in enumerate(c_loops) if outer is not None and base.get(lp).same_as(base.get(outer))),
                -1)
    spatial = c_loops[:last + 1]
    for n_loop, loop in enumerate(spatial):
        extent = int(base.get(loop).extent)
        if extent < 4:
            continue
        placement = []        # where P goes under C's input stage: chosen by the first trial, kept by the others
        whole = _band_trial(base, c_name, keep, p_name, early, n_loop, extent, placement)   # one band: no overlap
        if whole is None:
            continue
        stages = sorted({p_name, keep, *early})
        work = [executions(whole, whole.get_sblock(n)) for n in stages]
        if any(w > MAX_PADDED * (instances(whole.get(whole.get_sblock(n))) or 0) for n, w in zip(stages, work)):
            continue          # even one band computes a stage several times over (per output channel, say)
        k_work = work[stages.index(keep)]

        def attempt(rows):
            """(the band schedule of ``rows`` or None, executions seen, their work in one band). ``C``'s input
            stage is placed alone first, which is cheap: placing ``P`` under it does not move its loops, so
            when it alone runs over the bound, the whole trial would too and is skipped."""
            if keep != p_name:
                alone = _band_trial(base, c_name, keep, keep, [], n_loop, rows, [])
                if alone is None:
                    return None, [], []
                runs = executions(alone, alone.get_sblock(keep))
                if runs > max_recompute * k_work:
                    return None, [runs], [k_work]
            sch = _band_trial(base, c_name, keep, p_name, early, n_loop, rows, placement)
            if sch is None:
                return None, [], []
            done = [executions(sch, sch.get_sblock(n)) for n in stages]
            return (sch if all(d <= max_recompute * w for d, w in zip(done, work)) else None), done, work

        sch, done, seen = attempt(1)
        if sch is not None:
            return sch.mod["main"]
        for rows in _band_heights(done, seen, extent, max_recompute):
            sch = attempt(rows)[0]
            if sch is not None:
                return sch.mod["main"]
    return None


def _band_heights(one_row: list, work: list, extent: int, max_recompute: float, slack: float = 0.05) -> list:
    """The band heights (powers of two from 2, below ``extent``) worth a trial, fewest rows first, by what
    bands of one row and one band of all ``extent`` rows cost: a stage run ``e`` times in bands of one row
    and ``w`` times in one band computes ``eta = (e / w - 1) * extent / (extent - 1)`` rows' worth of halo per
    band beyond its share (the rows clipped at the image's borders taken as the halo's, as a same-padded
    convolution has them), so about ``(ceil(extent / r) * (r + eta) - eta) / extent`` times its work in bands
    of ``r`` rows. Heights that model puts over ``max_recompute`` (by more than ``slack`` of it) are not
    tried: each trial is a schedule TVM builds and measures.

    >>> _band_heights([22], [8], 8, 1.25)      # a 3x3 same-padded convolution over 8 rows: two bands of 4
    [4]
    >>> _band_heights([276], [96], 48, 1.25)   # 48 rows: bands of 8 (about 1.2 times the work)
    [8, 16, 32]
    >>> _band_heights([1769472], [13824], 128, 1.25)   # a stage run per output channel: no band helps
    []
    """
    heights = []
    rows = 2
    while rows < extent:
        heights.append(rows)
        rows *= 2
    if extent < 2 or not one_row:
        return heights          # no one-row bands to go by: every height

    def cost(r, e, w):
        eta = (e / w - 1) * extent / (extent - 1)
        return (-(-extent // r) * (r + eta) - eta) / extent

    fits = [r for r in heights if all(cost(r, e, w) <= max_recompute * (1 + slack) for e, w in zip(one_row, work)
                                      if w > 0)]
    return [r for r in heights if fits and r >= fits[0]]


def _inline_copy(sch, name: str) -> bool:
    """Inline stage ``name`` of ``sch`` when it only copies (a padding of width zero, as TVM's legalization
    writes ahead of a 1x1 convolution): its reader then loads the same element from the copy's source, with no
    work repeated, and the band trials have one stage less to place. False when it is more than a copy or TVM
    refuses."""
    body = sch.get(sch.get_sblock(name)).body
    if not (isinstance(body, tirx.BufferStore) and isinstance(body.value, tvm.ir.TensorLoad)):
        return False
    try:
        sch.compute_inline(sch.get_sblock(name))
    except Exception:  # noqa: BLE001 - a stage TVM cannot inline: placed with the producer as before
        return False
    return True


def _reads_own_channel(sch, keep: str, p_name: str) -> bool:
    """True when stage ``keep`` reads ``P``'s result only at its own innermost index (one channel of the
    pixel it computes), so ``P`` computed per element of ``keep`` runs what it runs per pixel."""
    kb, pb = sch.get(sch.get_sblock(keep)), sch.get(sch.get_sblock(p_name))
    if not kb.iter_vars or len(pb.writes) != 1:
        return False
    out, own = _region_buffer(pb.writes[0]), kb.iter_vars[-1].var
    regions = [r for r in kb.reads if _region_buffer(r).same_as(out)]
    return bool(regions) and all(r.region[-1].min.same_as(own) and _int_extent_of(r.region[-1].extent) == 1
                                 for r in regions)


def _region_buffer(region):
    return getattr(region, "buffer", None) or region.source


def _int_extent_of(e):
    return int(e) if isinstance(e, (int, tirx.IntImm)) else None


def _int_extent(iv):
    return _int_extent_of(iv.dom.extent)


def _band_trial(base, c_name, keep, p_name, early, n_loop, rows, placement):
    """``base`` with ``C``'s ``n_loop``-th loop split into bands of ``rows``, ``keep`` (C's input stage) computed
    per band, ``P`` per point of ``keep`` (one pixel's channels where that is the same work) and ``P``'s
    earlier producers with it; None when TVM refuses a step. ``placement``: empty, or the loop of ``keep``
    (-2: per pixel, -1: per element) the first trial chose for ``P``, which the band's height does not change;
    the first trial appends its choice."""
    sch = base.copy()
    try:
        loop = sch.get_loops(sch.get_sblock(c_name))[n_loop]
        band, _ = sch.split(loop, [None, rows])
        if keep != p_name:
            sch.compute_at(sch.get_sblock(keep), band, preserve_unit_loops=True)
            k_loops = sch.get_loops(sch.get_sblock(keep))
            if placement:
                at = k_loops[placement[0]]
                sch.compute_at(sch.get_sblock(p_name), at, preserve_unit_loops=True)
            else:
                trials = []
                last = list(zip(range(-len(k_loops[-2:]), 0), k_loops[-2:]))   # per pixel (the channels' loop
                if _reads_own_channel(sch, keep, p_name):                      # vectorises), per element
                    last = last[:1]        # per element computes what per pixel does, a channel at a time
                for n, at in last:
                    trial = sch.copy()
                    trial.compute_at(trial.get_sblock(p_name), at, preserve_unit_loops=True)
                    trials.append((executions(trial, trial.get_sblock(p_name)), trial, at, n))
                _, sch, at, n = trials[0] if trials[0][0] <= trials[-1][0] else trials[-1]
                placement.append(n)
        else:
            sch.compute_at(sch.get_sblock(p_name), band, preserve_unit_loops=True)
            at = None
        if early:
            sch = _place_early(sch, p_name, early, at)
    except Exception:  # noqa: BLE001 - a step TVM refuses: no band here
        return None
    return sch


def _place_early(sch, p_name, early, at):
    """``sch`` with ``P``'s producer stages computed under ``P``'s loops: at ``at`` when given (where ``P``
    itself is computed per pixel), else at the innermost of ``P``'s spatial loops where each runs at most
    :data:`MAX_PADDED` times its points (one pixel's channels, not once per output channel)."""
    if at is not None:
        for name in early:
            sch.compute_at(sch.get_sblock(name), at, preserve_unit_loops=True)
        return sch
    loops = list(sch.get_loops(sch.get_sblock(p_name)))
    inner = attach_loop(sch, sch.get_sblock(p_name))
    last = next(n for n, lp in enumerate(loops) if sch.get(lp).same_as(sch.get(inner)))
    best = None
    for n in range(last, -1, -1):
        trial = sch.copy()
        try:
            for name in early:
                trial.compute_at(trial.get_sblock(name), trial.get_loops(trial.get_sblock(p_name))[n],
                                 preserve_unit_loops=True)
        except Exception:  # noqa: BLE001 - not a loop this stage can go under
            continue
        best = best or trial
        if all(executions(trial, trial.get_sblock(name)) <= MAX_PADDED * (instances(trial.get(
                trial.get_sblock(name))) or 0) for name in early):
            return trial
    if best is None:
        raise ValueError("no loop of the producer takes its producers")
    return best


def _merge_once(mod, function: str, exclude: list, bands=None, tunable: bool = False):
    """One round: ``(module, merged pairs, consumer vars whose merged kernel kept the producer stage)``;
    ``bands = (share, max_recompute)`` merges reduction chains computed in bands instead; ``tunable``: of the
    element-wise producers, only cheap ones (inlined)."""
    func = mod[function]
    uses = _uses(func)
    bb = relax.BlockBuilder(mod)
    new_blocks, pending = [], []
    for block in func.body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            groups = {}
        elif bands is None:
            groups = _producers(mod, block, uses, exclude)
        else:
            groups = _chains(mod, block, uses, exclude, bands[0])
        if tunable:
            groups = {k: v for k, v in groups.items()
                      if all(_cheap(mod[block.bindings[j].value.args[0]]) for j in v)}
        if not groups:
            new_blocks.append(block)
            continue
        drop = {j for v in groups.values() for j in v}
        out = []
        for k, b in enumerate(block.bindings):
            if k in drop:
                continue
            if k in groups:
                fn, outer = _group_function(block, k, groups[k])
                names = [block.bindings[j].value.args[0].name_hint for j in groups[k]]
                consumer = b.value.args[0]
                gv = bb.add_func(fn, "fused_" + "_".join(names + [consumer.name_hint]))
                saved = sum(static_nbytes(block.bindings[j].var.ty) for j in groups[k])
                if bands is not None:
                    mode = "band"
                elif all(_cheap(mod[block.bindings[j].value.args[0]]) for j in groups[k]):
                    mode = "inline"
                else:
                    mode = "once"
                pending.append((b.var, "+".join(names), consumer, mode, saved))
                out.append(relax.VarBinding(b.var, relax.Call(gv, outer)))
            else:
                out.append(b)
        new_blocks.append(relax.DataflowBlock(out))
    if not pending:
        return mod, [], []
    staged = bb.get()
    staged[function] = relax.Function(func.params, relax.SeqExpr(new_blocks, func.body.body), func.ret_ty,
                                      func.is_pure, func.attrs, func.span)
    try:
        grouped = relax.transform.FuseTIR()(staged)
    except Exception as e:  # noqa: BLE001 - a merge TVM refuses: the program stays as it was
        log.warning("InlineProducers: FuseTIR refused the merged kernels; none merged (%s)",
                    str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__)
        return mod, [], []
    kernels = {}
    for blk in grouped[function].body.blocks:
        for b in blk.bindings:
            if _is_call_tir(b.value):
                kernels[b.var] = b.value.args[0]
    def judge(item):
        """``(kernel, its schedule, whether to keep it)`` for one pending merge (None when FuseTIR dropped it)."""
        var, _names, consumer, mode, saved = item
        kernel = next((gv for v, gv in kernels.items() if v.same_as(var)), None)
        if kernel is None:
            return None
        own = _inlined(mod[consumer])[1]
        if mode == "inline":
            g, ws = _inlined(grouped[kernel])
            ok = ws <= own          # else the producer is still a stage of its own
        elif mode == "once":
            g, ws = _banded(grouped[kernel])
            ok = ws is not None and ws - own <= saved * MAX_BAND    # not recomputed, and a small band
        else:
            g = per_body(_BANDS, grouped[kernel], bands[1], lambda f: _band_schedule(f, bands[1]))
            ws = _workspace(g) if g is not None else None
            ok = ws is not None and ws - own <= saved * MAX_CHAIN_BAND
        return kernel, g, ok

    # the merged kernels are judged side by side (TVM's schedule primitives run outside the interpreter lock)
    cores = min(os.cpu_count() or 1, len(pending))
    if cores > 1:
        with ThreadPoolExecutor(cores) as pool:
            judged = list(pool.map(judge, pending))
    else:
        judged = [judge(item) for item in pending]
    merged, refused = [], []
    for (var, names, consumer, _mode, _saved), verdict in zip(pending, judged):
        if verdict is None or not verdict[2]:
            refused.append(var)
            continue
        kernel, g, _ok = verdict
        attrs = grouped[kernel].attrs
        grouped[kernel] = g.with_attrs(attrs) if attrs is not None else g
        merged.append((names, consumer.name_hint))
    return relax.transform.DeadCodeElimination()(grouped), merged, refused


def inline_producers(mod, function: str = "main", rounds: int = 4, *, bands: bool = True,
                     band_share: float = 0.25, max_recompute: float = 1.25,
                     tunable: bool = False) -> tuple["tvm.IRModule", list]:
    """``(module, [(producer kernels, consumer kernel)])`` with eligible element-wise producers merged into
    their only consumer, then (``bands``) reduction chains computed in bands (see the module docstring);
    ``mod`` is after FuseTIR. ``rounds`` bounds how many producers deep an element-wise chain is merged;
    ``band_share``, ``max_recompute`` and ``tunable`` as :class:`InlineProducers` takes them."""
    if function not in [gv.name_hint for gv in mod.get_global_vars()] \
            or not isinstance(mod[function], relax.Function) or not isinstance(mod[function].body, relax.SeqExpr):
        return mod, []
    _MEMO.clear()
    _BANDS.clear()
    try:
        return _inline_producers(mod, function, rounds, bands, band_share, max_recompute, tunable)
    finally:
        _MEMO.clear()
        _BANDS.clear()


def _inline_producers(mod, function, rounds, bands, band_share, max_recompute, tunable=False):
    merged_all, exclude = [], []
    for _ in range(rounds):
        new, merged, refused = _merge_once(mod, function, exclude, tunable=tunable)
        if refused:        # leave those consumers as they were and merge the others again
            log.info("InlineProducers: %d merged kernel(s) kept a producer stage; left unmerged", len(refused))
            exclude += refused
            new, merged, refused = _merge_once(mod, function, exclude, tunable=tunable)
            if refused:
                return mod, merged_all
        if not merged:
            break
        mod = new
        merged_all += merged
    if bands:
        exclude = []
        while True:            # again without the chains TVM or the band refused, until none is refused
            new, merged, refused = _merge_once(mod, function, exclude, (band_share, max_recompute))
            if not refused:
                if merged:
                    mod, merged_all = new, merged_all + merged
                break
            log.info("InlineProducers: %d chain(s) found no band; left unmerged", len(refused))
            exclude += refused
    return mod, merged_all


@tvm.transform.module_pass(opt_level=0, name="InlineProducers")
class InlineProducers:
    """Compute element-wise producers inside their only consumer's kernel, and convolution chains in bands
    of rows (see the module docstring).

    Runs after FuseTIR (before :class:`~tvm_memsched.transform.ShrinkWorkspace`). ``.merged`` holds the
    ``(producer, consumer)`` kernel pairs of the last run.

    Parameters
    ----------
    function : str
        The Relax function whose bindings are merged (default ``"main"``).
    bands : bool
        Also compute a reduction's input chain (convolution, element-wise stages, convolution) in bands of
        the consumer's output rows (default True).
    band_share : float
        Only chains whose intermediate tensors add up to at least this share of the function's largest
        tensor are banded (default 0.25): smaller ones cost recomputation for little memory.
    max_recompute : float
        The producer convolution may run at most this many times its own work in bands (the rows two bands
        share are computed in both; default 1.25): the band is the fewest rows within that bound.
    tunable : bool
        No costly producer computed once per pixel of its consumer: only cheap producers inlined into the
        consumer's reads, and chains in bands (default False; the pipeline sets it when it tunes the kernels,
        :class:`~tvm_memsched.relax.passes.tune_kernels.TuneKernels`). A producer computed once per pixel comes
        out scheduled (``compute_at``), which MetaSchedule refuses to schedule again, so the consumer, often the
        largest kernel, stays untuned (DeiT-tiny tuned with 4 trials: its MLP's GELU merged into the second
        matrix product made ours 3.7x slower than TVM's tuned build, for no memory). Chains in bands stay
        untuned too, but their bands pay: zoo densenet_like tuned, 0.38x TVM's tuned run time with them,
        1.36x without.
    """

    def __init__(self, function: str = "main", bands: bool = True, band_share: float = 0.25,
                 max_recompute: float = 1.25, tunable: bool = False):
        if not 0 <= band_share <= 1:
            raise ValueError(f"band_share must be within [0, 1], got {band_share!r}")
        if max_recompute < 1:
            raise ValueError(f"max_recompute must be at least 1, got {max_recompute!r}")
        self.function = function
        self.bands, self.band_share, self.max_recompute = bands, band_share, max_recompute
        self.tunable = tunable
        self.merged: list = []

    def transform_module(self, mod, ctx):
        new, self.merged = inline_producers(mod, self.function, bands=self.bands, band_share=self.band_share,
                                            max_recompute=self.max_recompute, tunable=self.tunable)
        return new
