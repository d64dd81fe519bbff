"""Least-memory kernels only where the faster ones would raise the peak: the ``BalanceKernels`` pass.

``ShrinkWorkspace(mode="balanced")`` schedules every kernel for speed: a stage that
a reduction reads several times (a convolution's padding) is computed in bands of
rows under it, which costs a band of workspace, instead of being read through a
bounds test in the reduction's inner loop (the least-memory form, ``mode="memory"``).
Each such kernel carries its unscheduled form
(:data:`~tvm_memsched.relax.passes.shrink_workspace.UNSHRUNK`). Whether the band fits is a
question of the memory live while the kernel runs, so it is decided here, once the
order is known (run after ``MemoryAwareReorder``):

1. ``P`` is the largest number of bytes of live tensors at any step, over every
   dataflow block, in program order, with the in-place overlaps the planner takes
   with least-memory kernels (every banded kernel's overlaps counted): a lower bound
   of the least-memory build's peak of live tensors plus the running kernel's
   workspace (the VM's workspace pool is memory too);
2. a kernel keeps its bands when, at every step that calls it, the live tensors
   (without that kernel running in place: a fast kernel stays out of in-place
   execution, :data:`~tvm_memsched.relax.analysis.inplace.KEEP_NOALIAS`, which on
   LLVM would cost it ``noalias``) plus its workspace stay within
   ``(1 + allowance) * P``; otherwise (or when it is called outside a dataflow
   block) it is scheduled for least memory
   (:func:`~tvm_memsched.relax.passes.shrink_workspace.shrink_func` with ``reuse="inline"``)
   and may run in place;
3. a kernel that fits is timed both ways on this machine
   (:func:`~tvm_memsched.relax.analysis.kernel_timing.kernel_seconds`, when the target's
   code runs here, and when it has at least ``min_work`` multiply-accumulates) and
   keeps its bands only when they are at least ``min_gain`` (3%) faster: bands are
   not faster everywhere (most of HRNet-W18-small's convolutions run 2-15% faster
   reading through the bounds test).

Each decision touches only the steps of one kernel, so they are independent, and the
peak of live tensors plus workspace stays within ``(1 + allowance)`` of the
least-memory build's. The attribute is removed from every kernel. ``report`` lists
each kernel that had a choice: its workspace both ways and what was kept.

Example
-------
>>> import tvm
>>> seq = tvm.transform.Sequential([BalanceKernels(allowance=0.1)])
>>> isinstance(seq, tvm.transform.Pass)
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import tvm
from tvm import relax, tirx

from ...core.errors import MemschedError
from ...core.simulate import footprints
from ..analysis.inplace import KEEP_NOALIAS, InplaceAnalyzer
from ..analysis.kernel_timing import kernel_seconds, kernel_work
from ..analysis.workspace import WorkspaceMeter, compacted_workspace_bytes
from ..graph import block_to_graph, used_after_blocks
from ..ir import call_tir_op, strip_attrs
from .shrink_workspace import SCHEDULED, UNSHRUNK, shrink_func
from .vectorize_kernels import vectorize_func, vectorizes

__all__ = ["BalanceKernels", "KernelChoice", "balance_kernels", "MIN_WORK"]

#: kernels with fewer multiply-accumulates than this keep their bands untimed: they run in well under 10 ms,
#: so what a wrong choice costs is below the machine's timing noise and timing them would cost more compile
#: time than it could win run time (the zoo's models: every kernel below it)
MIN_WORK = 1 << 23


@dataclass
class KernelChoice:
    """One kernel computed in bands: its workspace, the largest live bytes at its steps, what was kept."""

    kernel: str
    workspace_bytes: int          # the banded (fast) kernel's
    peak_bytes: int               # the largest live tensors plus that workspace at its steps
    fast: bool                    # True: the bands stay; False: scheduled for least memory
    reason: str = ""              # why not
    memory_workspace_bytes: int | None = None   # the least-memory kernel's, when it was scheduled
    seconds: float | None = None                 # the banded kernel's time per run here, when measured
    memory_seconds: float | None = None          # the least-memory kernel's, when measured

    def to_dict(self) -> dict:
        return asdict(self)


def _steps(mod, meter, analyzer):
    """Per kernel name: the live tensor bytes at each step that calls it; the largest over all blocks; the
    kernels called outside any dataflow block (or in a block that cannot be modelled)."""
    live: dict[str, list[int]] = {}
    peak = 0
    outside: set[str] = set()
    for _gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        after = used_after_blocks(func)
        for k, block in enumerate(func.body.blocks):
            calls = [b.value.args[0].name_hint for b in block.bindings if call_tir_op(b.value)]
            if not isinstance(block, relax.DataflowBlock):
                outside.update(calls)
                continue
            try:
                bg = block_to_graph(func, k, workspace=meter, used_after=after[k], inplace=analyzer)
            except MemschedError:
                outside.update(calls)
                continue
            g = bg.graph
            stable, _ = footprints(g, list(range(g.num_ops)))
            tensors = [s - g.workspace[v] for v, s in enumerate(stable)]
            peak = max([peak] + tensors)
            for v, op in enumerate(g.ops):
                b = block.bindings[bg.binding_of_op[op.name]]
                if call_tir_op(b.value):
                    live.setdefault(b.value.args[0].name_hint, []).append(tensors[v])
    return live, peak, outside


def balance_kernels(mod, target=None, allowance: float = 0.10, inplace: bool = True, measure: bool = True,
                    min_gain: float = 0.03, min_work: int = MIN_WORK, vectorize: bool = True):
    """Schedule for least memory the banded kernels whose workspace would raise the peak (module docstring).

    Parameters
    ----------
    mod : IRModule
        After ``ShrinkWorkspace(mode="balanced")`` and the reorder (bindings in their final order).
    target : Target, optional
        Target whose TIR pipeline measures workspace (default: the current target; without one the
        compacted TIR is measured).
    allowance : float
        How far above the live-tensor peak the live tensors plus a kernel's workspace may go: 0.10 allows
        10%; ``float("inf")`` keeps every band.
    inplace : bool
        Count the in-place overlaps the planner takes (as ``ArenaPlanMemory(inplace=True)``).
    measure : bool
        Time both forms of each kernel that fits (when ``target``'s code runs on this machine,
        :func:`~tvm_memsched.relax.analysis.kernel_timing.can_time`) and keep the bands only where they
        are faster.
    min_gain : float
        How much faster (a fraction of the least-memory kernel's time) the bands must be to be kept.
    min_work : int
        Only kernels with at least this many points in their largest block (multiply-accumulates) are
        timed; smaller ones keep their bands untimed.
    vectorize : bool
        Vectorise the least-memory kernels it schedules (as the pipeline's ``VectorizeKernels`` does, for LLVM
        targets).

    Returns ``(module, [KernelChoice], peak, budget)``.
    """
    if allowance < 0:
        raise ValueError(f"allowance must be >= 0, got {allowance}")
    if target is None:
        target = tvm.target.Target.current(allow_none=True)
    banded = {gv.name_hint: (gv, f) for gv, f in mod.functions_items()
              if isinstance(f, tirx.PrimFunc) and f.attrs is not None and UNSHRUNK in f.attrs}
    if not banded:
        return mod, [], 0, 0
    meter = WorkspaceMeter(mod, target, "lowered" if target is not None else "tir")
    least = {}                     # name -> (least-memory kernel, its workspace), built on demand

    def least_memory(name):
        if name not in least:
            gv, func = banded[name]
            kernel, steps = shrink_func(func.attrs[UNSHRUNK], reuse="inline")
            if vectorize and vectorizes(target):
                kernel, vsteps = vectorize_func(kernel)
                steps = steps + vsteps
            tuned = bool(func.attrs.get(SCHEDULED, False))   # a tuned kernel's least-memory form is its own
            attrs = {k: v for k, v in dict(func.attrs).items() if k not in (UNSHRUNK, SCHEDULED)}
            least[name] = (strip_attrs(kernel).with_attrs(attrs), compacted_workspace_bytes(kernel)) \
                if steps or tuned else None
        return least[name]

    # P with least-memory kernels: a tuned kernel (TuneKernels) may allow fewer in-place overlaps than its
    # least-memory form, so its overlaps are those of that form
    base = mod
    tuned = [n for n, (_gv, f) in banded.items() if f.attrs.get(SCHEDULED, False)]
    if tuned:
        base = mod.clone()
        for n in tuned:
            base[banded[n][0]] = least_memory(n)[0]
    _live, peak, _outside = _steps(base, meter if base is mod else WorkspaceMeter(base, target, meter.mode),
                                   InplaceAnalyzer(base) if inplace else None)
    decided = mod.clone()          # every banded kernel kept fast: out of in-place execution
    for gv, func in banded.values():
        decided[gv] = func.with_attr(KEEP_NOALIAS, True)
    live, _peak, outside = _steps(decided, meter, InplaceAnalyzer(decided) if inplace else None)
    budget = peak * (1 + allowance)
    reasons, worst = {}, {}
    for name, (gv, func) in banded.items():
        ws = meter(gv)
        worst[name] = max((b + ws for b in live.get(name, ())), default=0)
        if name in outside:
            reasons[name] = "called outside a dataflow block"
        elif worst[name] > budget:
            reasons[name] = f"{worst[name]:,} B at its step, over {int(budget):,} B"
    timed = {}
    if measure:                    # the kernels that may keep their bands: are the bands faster here?
        pairs = [(n, least_memory(n)) for n in sorted(banded)   # a tuned kernel is timed whatever its size
                 if n not in reasons and (n in tuned or (kernel_work(banded[n][1]) or 0) >= min_work)]
        pairs = [(n, lm[0]) for n, lm in pairs if lm is not None]
        secs = kernel_seconds([f for n, lm in pairs for f in (banded[n][1].without_attr(UNSHRUNK), lm)], target)
        for k, (n, _lm) in enumerate(pairs):
            t_band, t_mem = secs[2 * k], secs[2 * k + 1]
            if t_band is None or t_mem is None:
                continue
            timed[n] = (t_band, t_mem)
            if t_band > (1 - min_gain) * t_mem:
                reasons[n] = (f"not faster here: {t_band * 1e3:.3f} ms in bands, "
                              f"{t_mem * 1e3:.3f} ms for least memory")
    new = mod.clone()
    report = []
    for name, (gv, func) in sorted(banded.items()):
        reason = reasons.get(name, "")
        kept = func.without_attr(UNSHRUNK).with_attr(KEEP_NOALIAS, True)
        mem_ws = None
        if reason:
            lm = least_memory(name)
            kept = lm[0] if lm is not None else func.without_attr(UNSHRUNK)
            mem_ws = lm[1] if lm is not None else None
        new[gv] = kept
        t_band, t_mem = timed.get(name, (None, None))
        report.append(KernelChoice(name, meter(gv), worst[name], not reason, reason, mem_ws, t_band, t_mem))
    return new, report, peak, budget


@tvm.transform.module_pass(opt_level=0, name="BalanceKernels")
class BalanceKernels:
    """Keep each banded kernel fast unless its workspace would raise the peak (see the module docstring).

    Parameters
    ----------
    allowance : float
        How far (a fraction) live tensors plus a kernel's workspace may go above the live-tensor peak
        (default 0.10).
    target : Target, optional
        Target whose TIR pipeline measures workspace (default: the current target).
    inplace : bool
        Count in-place overlaps as the arena planner takes them (default True).
    measure : bool
        Time both forms of each kernel that fits and keep the bands only where they are faster
        (default True; only for targets whose code runs on this machine).
    min_gain : float
        How much faster the bands must be, as a fraction of the least-memory kernel's time (default 0.03).
    min_work : int
        Smallest kernel (multiply-accumulates in its largest block) that is timed (default :data:`MIN_WORK`).
    vectorize : bool
        Vectorise the least-memory kernels it schedules (default True; LLVM targets).

    After the pass has run, ``report`` lists a :class:`KernelChoice` per banded kernel, ``peak`` the
    live-tensor peak and ``budget`` the limit applied.
    """

    def __init__(self, allowance: float = 0.10, target=None, inplace: bool = True, measure: bool = True,
                 min_gain: float = 0.03, min_work: int = MIN_WORK, vectorize: bool = True):
        if allowance < 0:
            raise ValueError(f"allowance must be >= 0, got {allowance}")
        self.allowance, self.target, self.inplace, self.vectorize = allowance, target, inplace, vectorize
        self.measure, self.min_gain, self.min_work = measure, min_gain, min_work
        self.report: list[KernelChoice] = []
        self.peak = self.budget = 0

    def transform_module(self, mod, ctx):
        new, self.report, self.peak, self.budget = balance_kernels(mod, self.target, self.allowance,
                                                                   self.inplace, self.measure, self.min_gain,
                                                                   self.min_work, self.vectorize)
        return new

    @property
    def fast(self) -> list[str]:
        """The kernels that keep their bands."""
        return [c.kernel for c in self.report if c.fast]
