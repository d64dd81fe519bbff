"""Kernels without full-size temporaries: the ``ShrinkWorkspace`` pass (run after FuseTIR).

A fused kernel as legalization and FuseTIR write it computes stage after stage,
each into a whole tensor: a convolution copies its input into ``pad_temp``,
accumulates the whole result in ``conv2d_*_intermediate``, then adds the bias
into another whole tensor, and so on. Every one of those buffers is kernel
workspace. :func:`shrink_func` schedules a PrimFunc so that they disappear:

1. every non-reduction stage that writes an internal buffer (padding, copies,
   reshapes, bias adds, activations, requantization) is inlined into the stages
   that read it (``compute_inline``): padding becomes index arithmetic with a
   bounds test, an activation becomes part of the expression that uses it;
2. the stages that read the result of a reduction (what is left of the
   epilogue: the last add, the store to the output) are moved under the
   reduction's innermost spatial loop (``reverse_compute_at``), so each output
   element is finished right after its accumulation and the accumulator shrinks
   to one element;
3. a stage that cannot be inlined is computed where its consumer needs it
   (``compute_at`` under the consumer's loops) instead.

Nothing else changes: every output element is computed by the same expression
with its reduction in the same order, so results are bit-identical. A primitive
that TVM refuses, or whose result does not execute every instance of the moved
block exactly once (checked with TVM's iterator-map analysis), is skipped and
that block stays as it was; a kernel whose workspace does not shrink is left
untouched, so the pass is a no-op on kernels it cannot improve (and on kernels
that come already scheduled).

TVM's own lowering then places each shrunk buffer where it is used and compacts
it (``PlanAndUpdateBufferAllocationLocation`` / ``CompactBufferAllocation``);
the workspace measured after the TIR pipeline (``workspace="lowered"``) is what
the report gives per kernel.

Example
-------
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def f(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
...     p = T.sblock_alloc_buffer((10,), "float32")
...     s = T.sblock_alloc_buffer((8,), "float32")
...     for i in range(10):
...         with T.sblock("pad"):
...             vi = T.axis.spatial(10, i)
...             p[vi] = T.if_then_else(1 <= vi and vi < 9, a[vi - 1], T.float32(0))
...     for i, k in T.grid(8, 3):
...         with T.sblock("sum"):
...             vi, vk = T.axis.remap("SR", [i, k])
...             with T.init():
...                 s[vi] = T.float32(0)
...             s[vi] = s[vi] + p[vi + vk]
...     for i in range(8):
...         with T.sblock("relu"):
...             vi = T.axis.spatial(8, i)
...             b[vi] = T.max(s[vi], T.float32(0))
>>> g, steps = shrink_func(f)
>>> steps
['inline pad (read several times)', 'relu after sum (per element)']
>>> workspace_bytes(f), workspace_bytes(compact(g))
(72, 4)
>>> h, steps = shrink_func(f, reuse="band")   # no bounds test in the sum: the padding stays a stage
>>> steps, workspace_bytes(compact(h))
(['pad kept whole (read several times)', 'relu after sum (per element)'], 44)
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import tvm
from tvm import s_tir, tirx

from ..analysis.workspace import (compact, compacted_workspace_bytes, internal_allocations, walk_stmts,
                                  workspace_bytes)
from ..analysis.inplace import KEEP_NOALIAS
from ..ir import per_body, strip_attrs
from ..schedule import Schedule

__all__ = ["ShrinkWorkspace", "InlinePadding", "SCHEDULED", "KernelWorkspace", "shrink_func", "shrink_workspace", "compact",
           "runs_each_instance_once", "attach_loop", "executions", "instances", "REUSE", "MODES", "UNSHRUNK"]

#: what :func:`shrink_func` may do with a stage a reduction reads several times per element
REUSE = ("inline", "band")
#: PrimFunc attribute of ``ShrinkWorkspace(mode="balanced")`` on a kernel computed in bands: the kernel as
#: it came (before scheduling), for :class:`~tvm_memsched.relax.passes.balance_kernels.BalanceKernels` to schedule
#: for least memory where the bands would raise the peak too much
UNSHRUNK = "tvm_memsched.unshrunk"
#: a kernel already scheduled (tuned: :class:`~tvm_memsched.relax.passes.tune_kernels.TuneKernels`; TVM's
#: ``MetaScheduleApplyDatabase`` sets the same), which :func:`shrink_workspace` leaves as it is
SCHEDULED = "tirx.is_scheduled"


# ------------------------------------------------------------------ helpers
def _region_buffer(region):
    """The buffer of a block's read/write region (``TensorRegion.source`` in TVM 0.27)."""
    return getattr(region, "buffer", None) or region.source


def _is_reduction(block) -> bool:
    return any(int(iv.iter_type) != 0 for iv in block.iter_vars)


def _internal(func) -> set:
    """Names of the buffers ``func`` allocates in global memory (its workspace)."""
    return {name for name, scope, _ in internal_allocations(func) if scope in ("global", "")}


def _blocks(sch) -> list:
    """Block RVs of every block but the root, in program order (None when names are not unique)."""
    names = []

    def visit(s):
        if isinstance(s, s_tir.SBlock) and s.name_hint != "root":
            names.append(s.name_hint)

    walk_stmts(sch.mod["main"].body, visit)
    if len(set(names)) != len(names):
        return None
    return [sch.get_sblock(n) for n in names]


def _writes_internal(block, internal) -> bool:
    return len(block.writes) == 1 and _region_buffer(block.writes[0]).name in internal


def instances(block) -> int | None:
    """Points of a block's iteration domain (None when an extent is not static)."""
    n = 1
    for iv in block.iter_vars:
        e = _int(iv.dom.extent)
        if e is None:
            return None
        n *= e
    return n


def _reused(sch, blk) -> bool:
    """True when a reduction reads what ``blk`` writes more than once per element (a convolution's padding,
    an activation before a convolution): inlined, its expression (and a padding's bounds test) would run
    in the reduction's innermost loop once per read."""
    block = sch.get(blk)
    out = _region_buffer(block.writes[0])
    mine = instances(block)
    if not mine:
        return False
    for c in sch.get_consumers(blk):
        cblock = sch.get(c)
        if not _is_reduction(cblock):
            continue
        if not any(_region_buffer(r).same_as(out) for r in cblock.reads):
            continue
        theirs = instances(cblock)
        if theirs is None or theirs > mine:
            return True
    return False


def _has_reused_stage(func) -> bool:
    """True when a stage of ``func`` that writes its workspace is read several times by a reduction."""
    try:
        sch = Schedule(func)
        internal = _internal(func)
        return any(not _is_reduction(sch.get(b)) and _writes_internal(sch.get(b), internal) and _reused(sch, b)
                   for b in _blocks(sch) or [])
    except Exception:  # not schedulable: nothing to choose
        return False


def executions(sch, blk) -> int:
    """How many times the loops around ``blk`` run its body (product of their static extents)."""
    n = 1
    for lp in sch.get_loops(blk):
        e = _int(sch.get(lp).extent)
        n *= e if e is not None else 1
    return n


def _realize(sch, blk):
    """The SBlockRealize of block ``blk`` (its iter values and predicate)."""
    block = sch.get(blk)
    loops = sch.get_loops(blk)
    root = sch.get(loops[-1]) if loops else sch.mod["main"].body
    found = []

    def visit(s):
        if isinstance(s, s_tir.SBlockRealize) and s.block.same_as(block):
            found.append(s)

    walk_stmts(root, visit)
    return found[0] if found else None


def _int(x):
    return int(x) if isinstance(x, (int, tirx.IntImm)) else None


def runs_each_instance_once(sch, blk) -> bool:
    """True when the loops around ``blk`` execute every point of its iteration domain exactly once.

    TVM's iterator-map detection (bijective level, under the block's predicate)
    must express every binding as a sum of independent splits of the loop
    variables; then the loops run each combination once, and the block covers
    its domain when every binding's splits tile exactly ``[min, min + extent)``
    (scales 1, e1, e1*e2, ...). Loops and domains must have static extents.
    """
    realize = _realize(sch, blk)
    if realize is None:
        return False
    doms = {}
    for lp in (sch.get(x) for x in sch.get_loops(blk)):
        if _int(lp.min) is None or _int(lp.extent) is None:
            return False
        doms[lp.loop_var] = tvm.ir.Range.from_min_extent(lp.min, lp.extent)
    values = list(realize.iter_values)
    res = tvm.sym.detect_iter_map(values, doms, realize.predicate, tvm.sym.iter_affine_map.IterMapLevel.Bijective)
    if len(res.indices) != len(values):
        return False
    for iv, index in zip(realize.block.iter_vars, res.indices):
        lo, ext = _int(iv.dom.min), _int(iv.dom.extent)
        if lo is None or ext is None or _int(index.base) != lo:
            return False
        splits = sorted(((_int(a.scale), _int(a.extent)) for a in index.args), key=lambda t: (t[0] is None, t))
        span = 1
        for scale, extent in splits:
            if scale != span or extent is None:
                return False
            span *= extent
        if span != ext:
            return False
    return True


def _split_loops(sch, blk):
    """``(spatial, reduction)``: the loops of ``blk`` above its first reduction loop, and the others."""
    realize = _realize(sch, blk)
    loops = list(sch.get_loops(blk))
    if realize is None:
        return [], loops
    reduction_vars = []
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if int(iv.iter_type) != 0:
            reduction_vars += tirx.analysis.undefined_vars(value)
    for k, lp in enumerate(loops):
        var = sch.get(lp).loop_var
        if any(var.same_as(v) for v in reduction_vars):
            return loops[:k], loops[k:]
    return loops, []


def attach_loop(sch, blk):
    """The innermost loop of ``blk`` outside all of its reduction loops (None if there is none)."""
    spatial, _ = _split_loops(sch, blk)
    return spatial[-1] if spatial else None


def _decompose_reductions(sch):
    """Initialise each reduction with a local accumulator before its reduction loops, not inside them.

    After :func:`_attach_epilogues` an accumulator is a one-element buffer; with the
    init inside the loops (as ``LowerInitBlock`` writes it) C compilers see a read
    that might come before the first write.
    """
    internal = _internal(sch.mod["main"])
    for blk in _blocks(sch) or []:
        block = sch.get(blk)
        if block.init is None or not _writes_internal(block, internal):
            continue
        _, reduction = _split_loops(sch, blk)
        if reduction:
            trial = _try(sch, lambda s, b=blk: s.decompose_reduction(b, reduction[0]), [])
            sch = trial if trial is not None else sch
    return sch


def _share_loop(sch, a, b) -> bool:
    """True when blocks ``a`` and ``b`` are under a common loop (one is already computed inside the other)."""
    outer = sch.get_loops(a)
    return bool(outer) and bool(sch.get_loops(b)) and sch.get(outer[0]).same_as(sch.get(sch.get_loops(b)[0]))


def _try(sch, apply, moved):
    """A copy of ``sch`` with ``apply`` done, or None when TVM refuses or ``moved`` blocks lose instances."""
    trial = sch.copy()
    try:
        apply(trial)
    except Exception:  # ScheduleError, or a TVMError from an analysis the primitive runs
        return None
    try:
        ok = all(runs_each_instance_once(trial, b) for b in moved)
    except Exception:  # an analysis that cannot handle this IR: do not trust the schedule
        ok = False
    return trial if ok else None


# ------------------------------------------------------------------ the schedule
def _inline_stages(sch, steps, band: bool = False):
    """Step 1: inline the non-reduction stages that write internal buffers, until none is left (``band``:
    except those a reduction reads several times per element, see :func:`_band_stages`)."""
    internal = _internal(sch.mod["main"])
    refused = set()
    while True:
        for blk in _blocks(sch) or []:
            block = sch.get(blk)
            name = block.name_hint
            if name in refused or _is_reduction(block) or not _writes_internal(block, internal):
                continue
            reused = _reused(sch, blk)
            if (band and reused) or any(_share_loop(sch, blk, c) for c in sch.get_consumers(blk)):
                refused.add(name)          # kept for bands, or already computed inside its consumer
                continue
            trial = _try(sch, lambda s, b=blk: s.compute_inline(b), [])
            if trial is None:
                refused.add(name)
                continue
            sch = trial
            steps.append(f"inline {name}" + (" (read several times)" if reused else ""))
            break  # the block list changed: start again
        else:
            return sch


def _attach_epilogues(sch, steps):
    """Step 2: move the readers of each reduction's internal result under its innermost spatial loop."""
    internal = _internal(sch.mod["main"])
    for blk in _blocks(sch) or []:
        block = sch.get(blk)
        if not _is_reduction(block) or not _writes_internal(block, internal):
            continue
        loop = attach_loop(sch, blk)
        if loop is None:
            continue
        work = list(sch.get_consumers(blk))
        seen = set()
        while work:
            c = work.pop(0)
            cname = sch.get(c).name_hint
            if cname in seen:
                continue
            seen.add(cname)
            if not _share_loop(sch, blk, c):
                trial = _try(sch, lambda s, c=c: s.reverse_compute_at(c, loop, preserve_unit_loops=True), [c])
                if trial is None:
                    continue
                sch = trial
                steps.append(f"{cname} after {block.name_hint} (per element)")
            cblock = sch.get(c)
            if _writes_internal(cblock, internal):
                work.extend(sch.get_consumers(c))
    return sch


#: a stage computed in bands under its reduction may run at most this many times per point of the
#: reduction (a 3x3 depthwise convolution's padding per output row: 1/3; per output pixel: 1, refused;
#: a convolution with 16 output channels per pixel: 1/16)
MAX_SHARE = 0.5


def _band_stages(sch, steps):
    """Step 1b (``reuse="band"``): compute each stage that a reduction reads several times per element
    under the innermost spatial loop of that reduction at which the stage's body runs at most
    :data:`MAX_SHARE` times per point of the reduction: a padded band of rows (or one pixel's window)
    instead of the whole padded tensor, and no bounds test in the reduction's inner loop. A stage no
    loop takes stays whole (TVM's kernel)."""
    internal = _internal(sch.mod["main"])
    for blk in _blocks(sch) or []:
        block = sch.get(blk)
        if _is_reduction(block) or not _writes_internal(block, internal) or not _reused(sch, blk):
            continue
        consumers = sch.get_consumers(blk)
        if len(consumers) != 1 or _share_loop(sch, blk, consumers[0]):
            continue
        points = instances(sch.get(consumers[0]))
        if not points:
            continue
        spatial, _ = _split_loops(sch, consumers[0])
        name = block.name_hint
        for loop in reversed(spatial):
            trial = _try(sch, lambda s, lp=loop: s.compute_at(blk, lp, preserve_unit_loops=True), [])
            if trial is None:
                continue
            share = executions(trial, trial.get_sblock(name)) / points
            if share <= MAX_SHARE:
                sch = trial
                steps.append(f"{name} in bands under {sch.get(consumers[0]).name_hint} "
                             f"({share:.2g} per reduction step; read several times)")
                break
        else:
            if f"{name} kept whole (read several times)" not in steps:
                steps.append(f"{name} kept whole (read several times)")
    return sch


def _compute_at_consumers(sch, steps):
    """Step 3: compute each remaining internal stage under its only consumer's innermost spatial loop."""
    internal = _internal(sch.mod["main"])
    for blk in _blocks(sch) or []:
        block = sch.get(blk)
        if not _writes_internal(block, internal):
            continue
        consumers = sch.get_consumers(blk)
        if len(consumers) != 1:
            continue
        if _share_loop(sch, blk, consumers[0]):
            continue
        loop = attach_loop(sch, consumers[0])
        if loop is None:
            continue
        trial = _try(sch, lambda s: s.compute_at(blk, loop, preserve_unit_loops=True), [blk])
        if trial is not None:
            sch = trial
            steps.append(f"{block.name_hint} inside {sch.get(consumers[0]).name_hint}")
    return sch


def shrink_func(func, epilogues: bool = True, measure=None, reuse: str = "inline"):
    """Schedule ``func`` to drop its full-size temporaries; returns ``(new func, steps)``.

    Parameters
    ----------
    func : PrimFunc
        A kernel as legalization / FuseTIR write it (``s_tir`` blocks).
    epilogues : bool
        Also move epilogues under their reductions (steps 2 and 3 of the module
        docstring); False only inlines (what ``InlinePadding`` did).
    measure : callable, optional
        ``measure(func) -> bytes`` of workspace; the new function is kept only if
        it is smaller (default:
        :func:`~tvm_memsched.relax.analysis.workspace.compacted_workspace_bytes`).
    reuse : {"inline", "band"}
        What to do with a stage that a reduction reads several times per element (a
        convolution's padding): ``"inline"`` (least memory: index arithmetic and a bounds test
        in the reduction's inner loop) or ``"band"`` (as fast as TVM's kernel or faster: computed
        in bands under the reduction, :func:`_band_stages`).

    Returns ``(func, [])`` unchanged when nothing could be done or nothing was saved.
    """
    if reuse not in REUSE:
        raise ValueError(f"reuse must be one of {', '.join(REUSE)}, got {reuse!r}")
    measure = measure or compacted_workspace_bytes
    try:
        sch = Schedule(func)
        sch.get_sblock("root")
    except Exception:  # not a schedulable (s_tir) function, e.g. already lowered
        return func, []
    steps: list[str] = []
    try:
        band = reuse == "band"
        for _ in range(4):
            before = len(steps)
            sch = _inline_stages(sch, steps, band)
            if band:
                sch = _band_stages(sch, steps)
            if epilogues:
                sch = _attach_epilogues(sch, steps)
                sch = _compute_at_consumers(sch, steps)
            if len(steps) == before:
                break
        if epilogues and steps:
            sch = _decompose_reductions(sch)
        new = sch.mod["main"]
    except Exception:  # anything unexpected in the analyses: leave the kernel alone
        return func, []
    if not steps:
        return func, []
    try:
        if measure(new) >= measure(func):
            return func, []
    except Exception:
        return func, []
    if func.attrs is not None:
        new = new.with_attr(dict(func.attrs))
    return new, steps



# ------------------------------------------------------------------ module level
@dataclass
class KernelWorkspace:
    """What :class:`ShrinkWorkspace` did to one kernel: workspace bytes before and after, and how."""

    kernel: str
    before: int
    after: int
    steps: list = field(default_factory=list)

    @property
    def saved(self) -> int:
        return self.before - self.after

    def to_dict(self) -> dict:
        return asdict(self)


#: the trade between kernel workspace and kernel speed (:func:`shrink_workspace`)
MODES = ("memory", "balanced", "speed")


def shrink_workspace(mod, target=None, epilogues: bool = True, mode: str = "memory"):
    """Apply :func:`shrink_func` to every PrimFunc of ``mod``; returns ``(module, [KernelWorkspace])``.

    Workspace is measured on the compacted TIR (:func:`compact`: where TVM's lowering puts
    each buffer and how much of it is used; the same for every target, and a few milliseconds
    per kernel instead of a run of the target's TIR pipeline). ``target`` is accepted for
    compatibility and not needed. ``mode``: ``"memory"`` inlines every stage
    (``reuse="inline"``), ``"speed"`` computes stages a reduction reads several times in
    bands (``reuse="band"``, each such kernel kept out of in-place execution,
    :data:`~tvm_memsched.relax.analysis.inplace.KEEP_NOALIAS`), ``"balanced"`` does as ``"speed"`` and attaches
    each banded
    kernel's unscheduled form (:data:`UNSHRUNK`). The report lists every kernel, largest
    remaining workspace first.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    report = []
    new_mod = mod

    reuse = "inline" if mode == "memory" else "band"
    bodies: dict = {}

    def one(gv, func):
        """``(kernel after, its KernelWorkspace)``."""
        name = gv.name_hint
        before = compacted_workspace_bytes(func)
        if func.attrs is not None and func.attrs.get(SCHEDULED, False):   # tuned (TuneKernels)
            return func, KernelWorkspace(name, before, before, [])
        new, steps = per_body(bodies, func, None, lambda _s: shrink_func(func, epilogues, reuse=reuse)) \
            if before else (func, [])
        if not steps:
            new = func
        elif new.attrs is not None and not new.attrs.same_as(func.attrs):   # a body shared with another kernel
            new = strip_attrs(new).with_attrs(dict(func.attrs)) if func.attrs is not None else strip_attrs(new)
        after = compacted_workspace_bytes(new) if steps else before
        if mode != "memory" and (any("read several times" in step for step in steps)
                                 or (not steps and before and _has_reused_stage(func))):
            if mode == "balanced":
                new = new.with_attr(UNSHRUNK, func)    # BalanceKernels may want the least-memory form instead
            else:
                new = new.with_attr(KEEP_NOALIAS, True)   # the fast kernel, not slowed by running in place
        return new, KernelWorkspace(name, before, after, steps)

    kernels = [(gv, func) for gv, func in mod.functions_items() if isinstance(func, tirx.PrimFunc)]
    cores = min(os.cpu_count() or 1, len(kernels))
    if cores > 1:          # side by side: TVM's schedule primitives and passes run outside the interpreter lock
        with ThreadPoolExecutor(cores) as pool:
            done = list(pool.map(lambda kf: one(*kf), kernels))
    else:
        done = [one(gv, func) for gv, func in kernels]
    for (gv, func), (new, row) in zip(kernels, done):
        if new is not func:
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new
        report.append(row)
    report.sort(key=lambda r: (-r.after, -r.before, r.kernel))
    return new_mod, report


@tvm.transform.module_pass(opt_level=0, name="ShrinkWorkspace")
class ShrinkWorkspace:
    """Schedule every kernel so that it keeps no full-size temporaries (run after FuseTIR).

    Padding is read through index arithmetic, element-wise stages are inlined and
    epilogues run per output element right after its reduction (see
    :mod:`tvm_memsched.relax.passes.shrink_workspace`). Numerics are unchanged; a kernel
    the schedule cannot improve is left as it is.

    Parameters
    ----------
    epilogues : bool
        Move epilogues under their reductions (default). False only inlines
        padding and other element-wise stages (the former ``InlinePadding``).
    target : Target, optional
        Accepted for compatibility: the workspace is measured on the compacted TIR,
        the same for every target.
    mode : {"memory", "balanced", "speed"}
        ``"memory"`` (default): every stage inlined, the least workspace; a convolution's
        padding then costs a bounds test per multiply-accumulate. ``"speed"``: stages a
        reduction reads several times (padding) computed in bands of rows under it, as fast as
        TVM's kernel or faster, a little workspace. ``"balanced"``: as ``"speed"``, each such
        kernel carrying its unscheduled form (:data:`UNSHRUNK`) for
        :class:`~tvm_memsched.relax.passes.balance_kernels.BalanceKernels` (after the reorder) to
        schedule for least memory where the bands would raise the peak too much.

    After the pass has run, ``report`` is a list of :class:`KernelWorkspace`
    (every kernel, largest remaining workspace first).

    Example
    -------
    >>> import tvm
    >>> seq = tvm.transform.Sequential([ShrinkWorkspace()])
    >>> isinstance(seq, tvm.transform.Pass)
    True
    """

    def __init__(self, epilogues: bool = True, target=None, mode: str = "memory"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.epilogues, self.target, self.mode = epilogues, target, mode
        self.report: list[KernelWorkspace] = []

    def transform_module(self, mod, ctx):
        new_mod, self.report = shrink_workspace(mod, self.target, self.epilogues, self.mode)
        return new_mod

    @property
    def saved(self) -> dict:
        """``{kernel: bytes saved}`` of the kernels the pass changed."""
        return {r.kernel: r.saved for r in self.report if r.steps}


def InlinePadding(target=None):  # noqa: N802 - a pass constructor, named like one
    """``ShrinkWorkspace(epilogues=False)``: inline padding and other element-wise stages only.

    The former ``InlinePadding`` pass (superseded by :class:`ShrinkWorkspace`,
    which also moves epilogues under their reductions and is on by default in
    :func:`~tvm_memsched.relax.pipeline.pipeline`). ``saved`` maps each changed
    kernel to the bytes saved.
    """
    return ShrinkWorkspace(epilogues=False, target=target)
