"""Memory-aware reordering of the bindings of Relax DataflowBlocks.

:func:`reorder_module` converts every DataflowBlock of every Relax function to a
graph (:mod:`.graph`), schedules it with a registered scheduler, and rebuilds
the block with its bindings in the scheduled order, when that lowers the peak.
Blocks that cannot be modelled (dynamic shapes, impure calls) are left as they
are, with the reason in the report. ``MemoryAwareReorder`` in
:mod:`tvm_memsched.transform` is the pass wrapper.

Run it right after import (operator level) or after ``FuseTIR`` (kernel level,
where each binding is a ``call_tir`` and kernel workspace is known). FuseOps
re-orders bindings, so a reordering that must reach the memory planner runs
after FuseTIR, which is where :func:`tvm_memsched.pipeline` puts it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import tvm
from tvm import relax

from ...core.errors import MemschedError
from ...core.simulate import peak_bytes
from ...schedulers import schedule
from ..analysis.workspace import WorkspaceMeter
from ..graph import block_to_graph, reorder_block, used_after_blocks

__all__ = ["MemoryAwareReorder", "BlockReport", "reorder_module", "reorder_function"]

log = logging.getLogger("tvm_memsched")

# budgeted schedulers: in a compiler pass they count their budget as work, not wall-clock time
_DETERMINISTIC_BY_DEFAULT = ("auto", "dp", "beam", "hmcos", "ilp")


@dataclass
class BlockReport:
    """What happened to one DataflowBlock."""

    function: str
    block: int
    ops: int
    status: str                 # "reordered", "unchanged" (already best), or "skipped: <reason>"
    method: str = ""
    peak_before: int = 0        # live-tensor peak with kernel workspace of the incoming order
    peak_after: int = 0
    lower_bound: int = 0         # of the objective ranked first (tensor peak unless workspace_shared)
    optimal: bool = False
    seconds: float = 0.0
    order: tuple = ()           # binding var names in the new order
    tensor_peak_before: int = 0  # the same without kernel workspace (what the tensor arena holds)
    tensor_peak_after: int = 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("order")
        return d


def _best_order(g, method, time_limit, progress, options, workspace_shared: bool = False):
    """The best order of ``g`` by (peak with workspace, peak without it) or the reverse.

    The peak with workspace is what memory holds at once when kernel workspace
    and tensors share one arena (``workspace_shared``, the microcontroller
    export); the peak without it is what the tensor arena holds when workspace is
    served from a separate pool (the Relax VM: arena + largest workspace). The two
    disagree when a few kernels' workspace dominates: many orders tie on the first
    and differ widely on the second. So a block with workspace is scheduled both
    ways, and the incoming order and the two schedules are ranked by the two
    peaks, the one that matters first. Returns ``(order, result of the schedule for
    the primary objective, (with, without) peaks of the incoming order, of the order)``.
    """
    g_plain = g.without_workspace() if any(op.workspace_bytes for op in g.ops) else g
    if g_plain is g:
        graphs = [g]
    else:
        graphs = [g, g_plain] if workspace_shared else [g_plain, g]
    results = [schedule(x, method, time_limit=time_limit, progress=progress, **options) for x in graphs]
    candidates = [[op.name for op in g.ops]] + [list(r.order) for r in results]
    # (with, without workspace) of every candidate; ranked by the primary objective's peak first, then the
    # other; ties keep the earlier candidate, so the incoming order (first) stays unless strictly beaten
    peaks = [(peak_bytes(g, o), peak_bytes(g_plain, o)) for o in candidates]
    rank = [pk if workspace_shared else pk[::-1] for pk in peaks]
    i = min(range(len(candidates)), key=rank.__getitem__)
    return candidates[i], results[0], peaks[0], peaks[i]


def reorder_function(func, name: str, *, method: str = "auto", time_limit: float | None = None,
                     workspace=None, reports: list | None = None, progress=None, workspace_shared: bool = False,
                     inplace=None, **options):
    """``func`` with every DataflowBlock reordered (see :func:`reorder_module`)."""
    reports = reports if reports is not None else []
    blocks = list(func.body.blocks)
    after = used_after_blocks(func)
    changed = False
    for k, block in enumerate(blocks):
        if not isinstance(block, relax.DataflowBlock) or len(block.bindings) < 2:
            continue
        try:
            bg = block_to_graph(func, k, workspace=workspace, used_after=after[k], name=f"{name}.block{k}",
                                inplace=inplace)
        except MemschedError as e:
            log.warning("MemoryAwareReorder: %s block %d left as is: %s", name, k, e)
            reports.append(BlockReport(name, k, len(block.bindings), f"skipped: {e}"))
            continue
        g = bg.graph
        t0 = time.perf_counter()
        order, res, before, after_ = _best_order(g, method, time_limit, progress, options, workspace_shared)
        rep = BlockReport(name, k, g.num_ops, "unchanged", method, before[0], before[0], res.lower_bound_bytes,
                          res.optimal, time.perf_counter() - t0, tensor_peak_before=before[1],
                          tensor_peak_after=before[1])
        if after_ != before:  # strictly better by the ranking (the incoming order is a candidate)
            bindings = bg.bindings_in(order)
            blocks[k] = reorder_block(block, bindings)
            changed = True
            rep.status, (rep.peak_after, rep.tensor_peak_after) = "reordered", after_
            rep.order = tuple(b.var.name for b in bindings)
        reports.append(rep)
    if not changed:
        return func
    body = relax.BlockBuilder().normalize(relax.SeqExpr(blocks, func.body.body, func.body.span))
    return relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)


def reorder_module(mod, *, method: str = "auto", time_limit: float | None = None,
                   workspace: str | None = "lowered", target=None, progress=None, workspace_shared: bool = False,
                   inplace: bool = False, **options):
    """Reorder every DataflowBlock of every Relax function of ``mod``.

    ``workspace``: how ``call_tir`` kernels' internal allocations are measured
    (``"lowered"`` with the TIR pipeline of ``target`` or the current target,
    ``"tir"``, or None). ``time_limit`` applies to each block and is counted as
    deterministic work (pass ``deterministic=False`` for wall-clock seconds), so
    a model always compiles to the same order. ``workspace_shared``: kernel
    workspace lives in the same arena as the tensors (the microcontroller
    export), so the peak with workspace is minimised first; otherwise (the Relax
    VM, whose workspace comes from a separate pool) the tensor peak is minimised
    first and the peak with workspace breaks ties. ``inplace``: kernels whose TIR lets an
    output overwrite a dying input (:mod:`tvm_memsched.relax.analysis.inplace`) declare it, so the
    schedule decides which inputs die where (as the arena planner will use it).
    Returns ``(new module, [BlockReport])``.
    """
    from ..analysis.inplace import InplaceAnalyzer

    analyzer = InplaceAnalyzer(mod) if inplace else None
    if method in _DETERMINISTIC_BY_DEFAULT and "deterministic" not in options:
        options["deterministic"] = True  # a compiler pass must give the same order under any load
    if target is None:
        target = tvm.target.Target.current(allow_none=True)
    elif isinstance(target, (dict, str)):
        target = tvm.target.Target(target)
    meter = WorkspaceMeter(mod, target, workspace)
    reports: list[BlockReport] = []
    new_mod = mod
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        new_func = reorder_function(func, gv.name_hint, method=method, time_limit=time_limit, workspace=meter,
                                    reports=reports, progress=progress, workspace_shared=workspace_shared,
                                    inplace=analyzer, **options)
        if new_func is not func:
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new_func
    return new_mod, reports


@tvm.transform.module_pass(opt_level=0, name="MemoryAwareReorder")
class MemoryAwareReorder:
    """Reorder the bindings of every DataflowBlock with a scheduler from the registry.

    Parameters
    ----------
    method : str
        Scheduler name (``"auto"``, ``"dp"``, ``"hmcos"``, ``"ilp"``, ``"rpo"``, ...).
    time_limit : float, optional
        Seconds per block for exact searches (``auto`` defaults to a few seconds).
    workspace : {"lowered", "tir", None}
        How kernel-internal allocations of ``call_tir`` bindings are measured.
    target : Target, optional
        Target for the ``"lowered"`` workspace measurement (default: the current target).
    workspace_shared : bool
        Kernel workspace shares the arena with the tensors (the microcontroller
        export): minimise the peak with workspace first. Default False (the Relax
        VM serves workspace from a separate pool): minimise the tensor peak first,
        the peak with workspace breaks ties.
    **options
        Passed to the scheduler.
    """

    def __init__(self, method: str = "auto", time_limit: float | None = None, workspace: str | None = "lowered",
                 target=None, progress=None, workspace_shared: bool = False, **options):
        self.method, self.time_limit, self.workspace = method, time_limit, workspace
        self.target, self.progress, self.options = target, progress, options
        self.workspace_shared = workspace_shared
        self.report = []

    def transform_module(self, mod, ctx):
        new_mod, self.report = reorder_module(mod, method=self.method, time_limit=self.time_limit,
                                              workspace=self.workspace, target=self.target,
                                              progress=self.progress, workspace_shared=self.workspace_shared,
                                              **self.options)
        return new_mod
