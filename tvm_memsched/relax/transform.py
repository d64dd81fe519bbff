"""The tvm_memsched Relax passes (thin wrappers around plain functions).

* :class:`MemoryAwareReorder` reorders DataflowBlock bindings to lower the peak
  (:func:`tvm_memsched.relax.reorder.reorder_module`);
* :class:`ArenaPlanMemory` replaces ``relax.transform.StaticPlanBlockMemory``
  with one offset-planned arena per function and scope
  (:func:`tvm_memsched.relax.arena.plan_module`);
* :class:`IdentityRewrite` applies exact graph rewrites (SERENITY's channel- and
  kernel-wise partitioning and more) where they lower the scheduled peak
  (:func:`tvm_memsched.relax.rewrite.identity_rewrite`); run it at operator level;
* :class:`ShrinkWorkspace` schedules the kernels so that they keep no full-size
  temporaries (defined in :mod:`tvm_memsched.relax.shrink_workspace`);
  :class:`InlinePadding` is its inlining step alone;
* :class:`InlineProducers` computes cheap element-wise producers used once inside
  their consumer's kernel (:mod:`tvm_memsched.relax.inline_producers`); run it after FuseTIR;
* :class:`ShrinkConstants` keeps broadcast constants at their small stored
  shape (:mod:`tvm_memsched.relax.shrink_constants`); run it at operator level.

Options are constructor arguments (pass-config keys cannot be registered from
Python). After a pass has run, ``pass_instance.report`` holds what it did.

Example
-------
>>> import tvm
>>> from tvm_memsched.transform import MemoryAwareReorder
>>> seq = tvm.transform.Sequential([MemoryAwareReorder(method="dp", time_limit=5)])
>>> isinstance(seq, tvm.transform.Pass)
True
"""

from __future__ import annotations

import tvm

from .arena import plan_module
from .int8.lower import IntegerLowering
from .inline_producers import InlineProducers
from .layout import ChannelsFirstReduction, ConvolutionLayout
from .tiling import PatchTiling
from .reorder import reorder_module
from .rewrite import identity_rewrite
from .shrink_constants import ShrinkConstants
from .shrink_workspace import ShrinkWorkspace
from .workspace import WorkspaceMeter

__all__ = ["MemoryAwareReorder", "ArenaPlanMemory", "ShrinkWorkspace", "InlinePadding", "ShrinkConstants",
           "IdentityRewrite", "IntegerLowering", "ConvolutionLayout",
           "ChannelsFirstReduction", "PatchTiling", "InlineProducers"]


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


@tvm.transform.module_pass(opt_level=0, name="ArenaPlanMemory")
class ArenaPlanMemory:
    """Plan every intermediate tensor at a byte offset in one arena per function and scope.

    Parameters
    ----------
    alignment : int
        Offset alignment in bytes (64 keeps ``ensure_zero_offset`` zero-copy on CPU).
    exact : bool
        Also run CP-SAT on the placement when the greedy portfolio does not reach
        the live-peak lower bound (within ``time_limit``; skipped without OR-Tools).
    time_limit : float
        Seconds for the placement search per function and scope.
    workspace : {None, "lowered", "tir"}
        Also plan every kernel call's workspace into the arena (for runtimes that
        serve ``TVMBackendAllocWorkspace`` from it, like the microcontroller export);
        ``report[i].workspace`` then holds the offsets. The VM ignores them.
    target : Target, optional
        Target for measuring workspace (default: the current target).
    inplace : bool
        Let a kernel output share memory with a kernel input that dies at the call
        when the kernel's TIR proves it safe (:mod:`tvm_memsched.relax.inplace`).
    shifted : {None, "all", "affine", "exact"}
        Which overlaps (:class:`~tvm_memsched.relax.inplace.InplaceAnalyzer`); default ``"all"``. The
        kernels that alias lose ``tirx.noalias`` (on targets whose code generator does not honour it per
        kernel, LLVM, they are compiled apart: :func:`~tvm_memsched.relax.inplace.allow_aliasing`).
    """

    def __init__(self, alignment: int = 64, exact: bool = True, time_limit: float | None = 2.0,
                 workspace: str | None = None, target=None, inplace: bool = True, shifted=None):
        self.alignment, self.exact, self.time_limit = alignment, exact, time_limit
        self.workspace, self.target, self.inplace, self.shifted = workspace, target, inplace, shifted
        self.report = []

    def transform_module(self, mod, ctx):
        meter = None
        if self.workspace is not None:
            target = self.target if self.target is not None else tvm.target.Target.current(allow_none=True)
            meter = WorkspaceMeter(mod, target, self.workspace)
        new_mod, self.report = plan_module(mod, alignment=self.alignment, exact=self.exact,
                                           time_limit=self.time_limit, workspace=meter, inplace=self.inplace,
                                           shifted=self.policy(), target=self.target)
        return new_mod

    def policy(self) -> str:
        """The in-place policy this pass plans with (``shifted``, else ``"all"``)."""
        return self.shifted or "all"


def InlinePadding(target=None):  # noqa: N802 - a pass constructor, named like one
    """``ShrinkWorkspace(epilogues=False)``: inline padding and other element-wise stages only.

    The former ``InlinePadding`` pass (superseded by :class:`ShrinkWorkspace`,
    which also moves epilogues under their reductions and is on by default in
    :func:`~tvm_memsched.relax.pipeline.pipeline`). ``saved`` maps each changed
    kernel to the bytes saved.
    """
    return ShrinkWorkspace(epilogues=False, target=target)


@tvm.transform.module_pass(opt_level=0, name="IdentityRewrite")
class IdentityRewrite:
    """Rewrite concat patterns into mathematically identical ones with smaller peaks.

    Run at operator level (right after import, before legalization), e.g. in a
    ``tvm.transform.Sequential`` before :class:`MemoryAwareReorder`. The rules and
    the policies are described in :mod:`tvm_memsched.relax.rewrite`; after the
    pass has run, ``report`` is a :class:`~tvm_memsched.relax.rewrite.RewriteReport`
    (the rewritten sites and the scheduled peak of every block before and after).

    Parameters
    ----------
    rules : list of str, optional
        Rule names and ``"merge_duplicates"`` (default: all).
    policy : {"if-better", "always"}
        Keep a rewrite only where the scheduled peak goes down, or apply every one.
    method : str
        Scheduler used to evaluate blocks (default ``"beam"``: deterministic and
        fast; ``"auto"``, ``"dp"``, ... with a ``time_limit`` search harder).
    time_limit : float, optional
        Seconds per evaluation.
    max_passes : int
        Greedy passes over the sites (``"if-better"``).
    level : {"best", "kernel", "operator"}
        Score blocks after TVM's legalization and fusion, as they are, or run
        both searches and keep the better result (default).
    target : Target, optional
        Target for the legalization (default: the current target, else llvm).
    **options
        Passed to the scheduler (e.g. ``state_limit`` for ``"dp"``).
    """

    def __init__(self, rules=None, policy: str = "if-better", method: str = "beam",
                 time_limit: float | None = None, max_passes: int = 2, level: str = "best", target=None,
                 **options):
        self.rules, self.policy, self.method = rules, policy, method
        self.time_limit, self.max_passes, self.options = time_limit, max_passes, options
        self.level, self.target = level, target
        self.report = None

    def transform_module(self, mod, ctx):
        target = self.target if self.target is not None else tvm.target.Target.current(allow_none=True)
        new_mod, self.report = identity_rewrite(mod, rules=self.rules, policy=self.policy, method=self.method,
                                                time_limit=self.time_limit, max_passes=self.max_passes,
                                                level=self.level, target=target, **self.options)
        return new_mod
