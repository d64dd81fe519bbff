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
  or computed in bands, epilogues per output element; ``tradeoff``) and
  ``VectorizeKernels`` (LLVM: each kernel vectorised over its innermost output
  dimension in TIR, matrix products summed in register tiles, bit-identical; vector
  code also where a kernel runs in place without ``noalias``; ``vectorize=False``: left to LLVM),
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
from .passes.tune_kernels import TuneKernels, default_tuning_database
from .passes.balance_kernels import BalanceKernels
from .passes.vectorize_kernels import VectorizeKernels
from .passes.shrink_workspace import MODES as TRADEOFFS
from .options import PipelineOptions, resolve_options
from .target import as_target, stages
from .passes.transform import ArenaPlanMemory, IdentityRewrite, MemoryAwareReorder, ShrinkConstants, ShrinkWorkspace

__all__ = ["pipeline", "build", "stages", "as_target", "MemschedPipeline", "PipelineOptions", "resolve_layout",
           "TRADEOFFS", "VM_ALIGNMENT"]

#: arena alignment (bytes) when the options leave it to the target (``alignment=None``): TVM's VM
VM_ALIGNMENT = 64


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

    ``.options`` is the :class:`~tvm_memsched.relax.options.PipelineOptions` it was made with; ``.rewrite``
    (None unless asked for), ``.constants``, ``.shrink``, ``.reorder`` and ``.arena`` are the pass instances
    (their ``.report`` tells what they did; None when turned off), ``.passes`` the whole list.
    """

    def __init__(self, target, options: PipelineOptions | None = None, **overrides):
        self.options = o = resolve_options(options, overrides)
        self.target = as_target(target)
        st = stages(self.target)
        self.int8 = IntegerLowering() if o.int8 else None
        self.rewrite = None
        if o.rewrite:
            kw = dict(o.rewrite) if isinstance(o.rewrite, dict) else {"policy": o.rewrite}
            self.rewrite = IdentityRewrite(target=self.target, **kw)
        self.reorder = MemoryAwareReorder(method=o.method, time_limit=o.time_limit, workspace=o.workspace,
                                          target=self.target, progress=o.progress, inplace=o.inplace,
                                          workspace_shared=o.workspace_shared,
                                          **o.scheduler_options) if o.reorder else None
        self.arena = ArenaPlanMemory(alignment=VM_ALIGNMENT if o.alignment is None else o.alignment,
                                     exact=o.exact_arena, inplace=o.inplace, target=self.target) if o.plan else None
        self.shrink = ShrinkWorkspace(target=self.target, mode=o.tradeoff) if o.shrink_workspace else None
        self.vectorize = VectorizeKernels(self.target) if o.vectorize else None
        # balanced: each banded or tuned kernel where the peak allows; memory with tuning: each tuned kernel
        # where it leaves the least-memory peak as it is
        self.balance = BalanceKernels(o.allowance if o.tradeoff == "balanced" else 0.0, self.target, o.inplace,
                                      vectorize=o.vectorize) \
            if o.shrink_workspace and (o.tradeoff == "balanced" or (o.tune and o.tradeoff == "memory")) else None
        self.inline = InlineProducers(**{"tunable": bool(o.tune), **_pass_options(o.inline_producers)}) \
            if o.inline_producers else None
        self.constants = ShrinkConstants() if o.shrink_constants else None
        self.affine = FoldAffineChains(**_pass_options(o.affine_chains)) if o.affine_chains else None
        self.transposes = AbsorbTransposes() if o.absorb_transposes else None
        conv_layout = resolve_layout(o.layout, o.inplace)
        self.layout = ConvolutionLayout(conv_layout) if conv_layout else None
        # NCHW summation order for the convolutions ConvolutionLayout or AbsorbTransposes made channels-last
        self.reduction = ChannelsFirstReduction() if conv_layout or o.absorb_transposes else None
        self.tiling = PatchTiling(**_pass_options(o.tile)) if o.tile else None
        self.tune = TuneKernels(o.tune_database or default_tuning_database(), o.tune, self.target,
                                o.tradeoff if o.shrink_workspace else "speed", o.tune_rules, o.progress) \
            if o.tune else None
        first = (self.tiling, self.int8, self.rewrite, self.constants, self.transposes, self.affine, self.layout)
        passes = [q for q in first if q is not None] + st["dispatch"] \
            + st["legalize"] + [q for q in (self.inline, self.reduction, self.tune, self.shrink, self.vectorize) if q is not None] \
            + list(o.extra_passes)
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


def pipeline(target=None, options: PipelineOptions | None = None, **overrides) -> MemschedPipeline:
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
    :func:`~tvm_memsched.relax.passes.aliasing.allow_aliasing`). ``alignment``: of every tensor in the arena
    (None: :data:`VM_ALIGNMENT`). A scheduler's own keywords go in ``scheduler_options={...}``.

    The options are a :class:`~tvm_memsched.relax.options.PipelineOptions` (``options``; every name above is
    one of its fields, with the same default), changed by keyword ``overrides``; an unknown keyword is an
    :class:`~tvm_memsched.relax.options.UnknownOptionError` naming the valid ones. Both spellings give the
    same pipeline:

    >>> from tvm_memsched.relax.options import PipelineOptions
    >>> opts = PipelineOptions(method="rpo", tradeoff="balanced")
    >>> pipeline("llvm", opts).pass_names() == pipeline("llvm", method="rpo", tradeoff="balanced").pass_names()
    True
    >>> pipeline("llvm", opts, tradeoff="speed").options.tradeoff     # keywords change a copy
    'speed'
    """
    return MemschedPipeline(target, options, **overrides)


def build(mod, target=None, options: PipelineOptions | None = None, **overrides):
    """Compile ``mod`` with :func:`pipeline` (same call pattern as ``tvm.compile``; ``options`` and keywords
    as :func:`pipeline`'s)."""
    target = as_target(target)
    return tvm.compile(mod, target, relax_pipeline=pipeline(target, options, **overrides))


def _pass_options(value) -> dict:
    """A pass's own options: a dict option's items, none for True."""
    return dict(value) if isinstance(value, dict) else {}
