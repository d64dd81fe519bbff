"""TVM's default Relax pipeline with tvm_memsched's passes in it.

:func:`pipeline` returns the pass list of ``relax.get_default_pipeline(target)``
(library dispatch, legalization and fusion, dataflow lowering, finalization)
with

* ``MemoryAwareReorder`` after ``FuseTIR`` and ``RewriteDataflowReshape`` (FuseOps
  re-orders bindings, and reshapes are views by then), and
* ``ArenaPlanMemory`` in place of ``StaticPlanBlockMemory``.

:func:`build` compiles with it, with the same call pattern as ``tvm.compile``.

Example
-------
>>> import tvm
>>> p = pipeline({"kind": "llvm"}, method="rpo")
>>> [n for n in p.pass_names() if n in ("FuseTIR", "MemoryAwareReorder", "ArenaPlanMemory")]
['FuseTIR', 'MemoryAwareReorder', 'ArenaPlanMemory']
"""

from __future__ import annotations

import tvm

from .int8.lower import IntegerLowering
from .target import as_target, stages
from .transform import ArenaPlanMemory, IdentityRewrite, MemoryAwareReorder

__all__ = ["pipeline", "build", "stages", "as_target", "MemschedPipeline"]


@tvm.transform.module_pass(opt_level=0, name="MemschedPipeline")
class MemschedPipeline:
    """The default pipeline with our reorder and arena planner (see :func:`pipeline`).

    ``.rewrite`` (None unless asked for), ``.reorder`` and ``.arena`` are the pass
    instances (their ``.report`` tells what they did), ``.passes`` the whole list.
    """

    def __init__(self, target, method="auto", time_limit=None, alignment=64, reorder=True, plan=True,
                 workspace="lowered", exact_arena=True, extra_passes=(), progress=None, rewrite=False, int8=True,
                 **options):
        self.target = as_target(target)
        st = stages(self.target)
        self.int8 = IntegerLowering() if int8 else None
        self.rewrite = None
        if rewrite:
            kw = dict(rewrite) if isinstance(rewrite, dict) else {}
            self.rewrite = IdentityRewrite(target=self.target, **kw)
        self.reorder = MemoryAwareReorder(method=method, time_limit=time_limit, workspace=workspace,
                                          target=self.target, progress=progress, **options) if reorder else None
        self.arena = ArenaPlanMemory(alignment=alignment, exact=exact_arena) if plan else None
        passes = ([self.int8] if self.int8 is not None else []) \
            + ([self.rewrite] if self.rewrite is not None else []) + st["dispatch"] + st["legalize"] \
            + list(extra_passes)
        for p in st["dataflow_lower"]:
            passes.append(p)
            if p.info.name == "RewriteDataflowReshape" and self.reorder is not None:
                passes.append(self.reorder)
        if self.reorder is not None and self.reorder not in passes:
            raise RuntimeError("RewriteDataflowReshape not found in the default pipeline")
        for p in st["finalize"]:
            if p.info.name == "StaticPlanBlockMemory" and self.arena is not None:
                passes.append(self.arena)
            else:
                passes.append(p)
        self.passes = passes

    def pass_names(self) -> list[str]:
        return [p.info.name for p in self.passes]

    def transform_module(self, mod, ctx):
        with self.target:
            return tvm.transform.Sequential(self.passes)(mod)


def pipeline(target=None, method: str = "auto", *, time_limit: float | None = None, alignment: int = 64,
             reorder: bool = True, plan: bool = True, workspace: str | None = "lowered", exact_arena: bool = True,
             extra_passes=(), progress=None, rewrite=False, int8: bool = True, **options) -> MemschedPipeline:
    """TVM's default Relax pipeline for ``target`` with our reorder and arena planner.

    ``extra_passes`` run after FuseTIR (e.g. ``InlinePadding()``); ``reorder=False``
    or ``plan=False`` keep TVM's order or TVM's planner; ``rewrite=True`` (or a
    dict of :class:`~tvm_memsched.transform.IdentityRewrite` options) runs the
    identity rewriting first, on the imported operators. ``int8=True`` (default)
    first lowers quantized (dequantize/quantize) operator groups to TFLite's exact
    integer kernels (:class:`~tvm_memsched.relax.int8.lower.IntegerLowering`; a
    no-op on float models). Other options go to the scheduler.
    """
    return MemschedPipeline(target, method, time_limit, alignment, reorder, plan, workspace, exact_arena,
                            extra_passes, progress, rewrite, int8, **options)


def build(mod, target=None, **options):
    """Compile ``mod`` with :func:`pipeline` (same call pattern as ``tvm.compile``)."""
    target = as_target(target)
    return tvm.compile(mod, target, relax_pipeline=pipeline(target, **options))
