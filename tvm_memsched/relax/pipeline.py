"""TVM's default Relax pipeline with tvm_memsched's passes in it.

:func:`pipeline` returns the pass list of ``relax.get_default_pipeline(target)``
(library dispatch, legalization and fusion, dataflow lowering, finalization)
with

* ``ShrinkConstants`` first, on the imported operators (constants at their stored
  shape, not broadcast), then ``AbsorbTransposes`` and ``FoldAffineChains`` (what
  exporters write differently written one way: a convolution or pooling wrapped in
  transposes to and from channels-last computed channels-last, a batch norm in any
  spelling as plain arithmetic without a square root per element), then
  ``ConvolutionLayout`` (convolutions channels-last, so that in-place execution can overlap their inputs and
  outputs; with in-place execution on) and, after fusion, ``ChannelsFirstReduction``
  (their sums in TVM's NCHW order, bit-identical outputs, output channels
  innermost),
* ``InlineProducers`` right after ``FuseTIR`` (an element-wise producer used once,
  such as a pre-activation batch norm and ``relu``, computed inside its consumer's
  kernel; a large convolution -> convolution chain computed in bands of rows),
  then ``ShrinkWorkspace`` (kernels without full-size temporaries: padding inlined
  or computed in bands, epilogues per output element; ``tradeoff``),
* ``MemoryAwareReorder`` after ``FuseTIR`` and ``RewriteDataflowReshape`` (FuseOps
  re-orders bindings, and reshapes are views by then), then ``BalanceKernels``
  (``tradeoff="balanced"``: each kernel's faster variant where the peak allows), and
* ``ArenaPlanMemory`` in place of ``StaticPlanBlockMemory``.

:func:`build` compiles with it, with the same call pattern as ``tvm.compile``.

Example
-------
>>> import tvm
>>> p = pipeline({"kind": "llvm"}, method="rpo")
>>> [n for n in p.pass_names() if n in ("FuseTIR", "InlineProducers", "ShrinkWorkspace", "MemoryAwareReorder",
...                                    "ArenaPlanMemory")]
['FuseTIR', 'InlineProducers', 'ShrinkWorkspace', 'MemoryAwareReorder', 'ArenaPlanMemory']
"""

from __future__ import annotations

import tvm

from . import legalize  # noqa: F401 - registers the legalizations TVM lacks (NHWC conv2d_transpose)
from .int8.lower import IntegerLowering
from .passes.layout import LAYOUTS, ChannelsFirstReduction, ConvolutionLayout
from .passes.absorb_transposes import AbsorbTransposes
from .passes.affine_chains import FoldAffineChains
from .passes.inline_producers import InlineProducers
from .passes.tiling import PatchTiling
from .passes.balance_kernels import BalanceKernels
from .passes.shrink_workspace import MODES as TRADEOFFS
from .target import as_target, stages
from .passes.transform import ArenaPlanMemory, IdentityRewrite, MemoryAwareReorder, ShrinkConstants, ShrinkWorkspace

__all__ = ["pipeline", "build", "stages", "as_target", "MemschedPipeline", "resolve_layout", "TRADEOFFS"]


def resolve_layout(layout: str | None, inplace: bool) -> str | None:
    """The convolution layout a ``layout`` option asks for: ``"auto"`` is NHWC with in-place execution
    (channels-last convolutions overlap their input; ``"NHWC?"``: only where no transposes land inside
    the network), else the model's own (None)."""
    if layout in (None, "keep"):
        return None
    if layout == "auto":
        return "NHWC?" if inplace else None
    if layout not in LAYOUTS:
        raise ValueError(f"unknown convolution layout {layout!r}; use auto, keep or one of {', '.join(LAYOUTS)}")
    return layout


@tvm.transform.module_pass(opt_level=0, name="MemschedPipeline")
class MemschedPipeline:
    """The default pipeline with our kernel scheduling, reorder and arena planner (see :func:`pipeline`).

    ``.rewrite`` (None unless asked for), ``.constants``, ``.shrink``, ``.reorder``
    and ``.arena`` are the pass instances (their ``.report`` tells what they did; None when
    turned off), ``.passes`` the whole list.
    """

    def __init__(self, target, method="auto", time_limit=None, alignment=64, reorder=True, plan=True,
                 workspace="lowered", exact_arena=True, extra_passes=(), progress=None, rewrite=False, int8=True,
                 shrink_workspace=True, shrink_constants=True, inplace=True, layout="auto", tile=False,
                 inline_producers=True, tradeoff="memory", allowance=0.10, affine_chains=True,
                 absorb_transposes=True, **options):
        if tradeoff not in TRADEOFFS:
            raise ValueError(f"unknown tradeoff {tradeoff!r}; use one of {', '.join(TRADEOFFS)}")
        self.target = as_target(target)
        st = stages(self.target)
        self.int8 = IntegerLowering() if int8 else None
        self.rewrite = None
        if rewrite:
            kw = dict(rewrite) if isinstance(rewrite, dict) else {}
            self.rewrite = IdentityRewrite(target=self.target, **kw)
        self.reorder = MemoryAwareReorder(method=method, time_limit=time_limit, workspace=workspace,
                                          target=self.target, progress=progress, inplace=inplace,
                                          **options) if reorder else None
        self.arena = ArenaPlanMemory(alignment=alignment, exact=exact_arena, inplace=inplace,
                                     target=self.target) if plan else None
        self.shrink = ShrinkWorkspace(target=self.target, mode=tradeoff) if shrink_workspace else None
        self.balance = BalanceKernels(allowance, self.target, inplace) \
            if shrink_workspace and tradeoff == "balanced" else None
        self.inline = InlineProducers(**(inline_producers if isinstance(inline_producers, dict) else {})) \
            if inline_producers else None
        self.constants = ShrinkConstants() if shrink_constants else None
        self.affine = FoldAffineChains(**(affine_chains if isinstance(affine_chains, dict) else {})) \
            if affine_chains else None
        self.transposes = AbsorbTransposes() if absorb_transposes else None
        conv_layout = resolve_layout(layout, inplace)
        self.layout = ConvolutionLayout(conv_layout) if conv_layout else None
        # NCHW summation order for the convolutions ConvolutionLayout or AbsorbTransposes made channels-last
        self.reduction = ChannelsFirstReduction() if conv_layout or absorb_transposes else None
        self.tiling = None
        if tile:
            self.tiling = PatchTiling(**(dict(tile) if isinstance(tile, dict) else {}))
        first = (self.tiling, self.int8, self.rewrite, self.constants, self.transposes, self.affine, self.layout)
        passes = [q for q in first if q is not None] + st["dispatch"] \
            + st["legalize"] + [q for q in (self.inline, self.reduction, self.shrink) if q is not None] \
            + list(extra_passes)
        for p in st["dataflow_lower"]:
            passes.append(p)
            if p.info.name == "RewriteDataflowReshape":
                passes += [q for q in (self.reorder, self.balance) if q is not None]
        ours = [q for q in (self.reorder, self.balance) if q is not None]
        if ours and ours[0] not in passes:
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
             extra_passes=(), progress=None, rewrite=False, int8: bool = True, shrink_workspace: bool = True,
             shrink_constants: bool = True, inplace: bool = True, layout: str | None = "auto", tile=False,
             inline_producers: bool = True, tradeoff: str = "memory", allowance: float = 0.10,
             affine_chains=True, absorb_transposes: bool = True, **options) -> MemschedPipeline:
    """TVM's default Relax pipeline for ``target`` with our kernel scheduling, reorder and arena planner.

    ``int8=True`` (default) first lowers quantized (dequantize/quantize) operator
    groups to TFLite's exact integer kernels
    (:class:`~tvm_memsched.relax.int8.lower.IntegerLowering`; a no-op on float
    models). ``shrink_workspace=False`` keeps TVM's kernels as FuseTIR writes them (no
    :class:`~tvm_memsched.transform.ShrinkWorkspace`), ``shrink_constants=False``
    the constants as imported (no :class:`~tvm_memsched.transform.ShrinkConstants`);
    ``extra_passes`` run after FuseTIR (and after ``ShrinkWorkspace``); ``reorder=False`` or ``plan=False``
    keep TVM's order or TVM's planner; ``rewrite=True`` (or a dict of
    :class:`~tvm_memsched.transform.IdentityRewrite` options) runs the identity
    rewriting first, on the imported operators. ``inplace=False`` never lets a kernel output
    share memory with a dying input (default: wherever the kernel's TIR proves it safe, in
    the reorder and in the arena plan). ``layout``: data layout of the 2-D convolutions
    (:class:`~tvm_memsched.transform.ConvolutionLayout`): ``"auto"`` (default) NHWC when
    ``inplace``, ``"keep"`` the model's own, or ``"NHWC"`` / ``"NCHW"``. ``tile=True`` (or a dict
    of its options) first patch-tiles the model's first stage
    (:class:`~tvm_memsched.relax.passes.tiling.PatchTiling`). ``inline_producers=False`` keeps every
    element-wise producer a kernel of its own (default: those used once are computed inside their
    consumer, and large convolution -> convolution chains in bands of rows,
    :class:`~tvm_memsched.relax.passes.inline_producers.InlineProducers`; a dict gives its options).
    ``tradeoff``: kernel speed against kernel workspace (:class:`~tvm_memsched.transform.ShrinkWorkspace`'s ``mode``):
    ``"memory"`` (default) the least workspace everywhere (a convolution's padding read through a bounds
    test per multiply-accumulate), ``"speed"`` padding computed in bands of rows (a little workspace),
    ``"balanced"`` the faster kernel wherever the peak of live tensors plus workspace stays within
    ``allowance`` (10%) of the memory variant's (:class:`~tvm_memsched.relax.passes.balance_kernels.BalanceKernels`,
    after the reorder). ``affine_chains=False`` keeps per-channel affine chains (batch norms) as imported
    (default: each in one bit-identical spelling without per-element square roots,
    :class:`~tvm_memsched.relax.passes.affine_chains.FoldAffineChains`; a dict gives its options, e.g.
    ``{"mode": "scale_shift", "into_conv": True}``); ``absorb_transposes=False`` keeps convolutions and
    pooling wrapped in transposes to and from channels-last as imported (default: computed channels-last,
    :class:`~tvm_memsched.relax.passes.absorb_transposes.AbsorbTransposes`). Every tradeoff takes every
    in-place overlap the kernels' loop order proves (on LLVM the aliased kernels are compiled apart without
    ``noalias``,
    :func:`~tvm_memsched.relax.passes.aliasing.allow_aliasing`).
    Other options go to the scheduler.
    """
    return MemschedPipeline(target, method, time_limit, alignment, reorder, plan, workspace, exact_arena,
                            extra_passes, progress, rewrite, int8, shrink_workspace, shrink_constants, inplace,
                            layout=layout, tile=tile, inline_producers=inline_producers, tradeoff=tradeoff,
                            allowance=allowance, affine_chains=affine_chains,
                            absorb_transposes=absorb_transposes, **options)


def build(mod, target=None, **options):
    """Compile ``mod`` with :func:`pipeline` (same call pattern as ``tvm.compile``)."""
    target = as_target(target)
    return tvm.compile(mod, target, relax_pipeline=pipeline(target, **options))
