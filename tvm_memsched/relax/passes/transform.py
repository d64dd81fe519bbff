"""The tvm_memsched Relax passes, each defined beside the function it wraps; this module lists them (and
:mod:`tvm_memsched.transform` re-exports this list).

* :class:`MemoryAwareReorder` reorders DataflowBlock bindings to lower the peak
  (:mod:`tvm_memsched.relax.passes.reorder`);
* :class:`ArenaPlanMemory` replaces ``relax.transform.StaticPlanBlockMemory``
  with one offset-planned arena per function and scope
  (:mod:`tvm_memsched.relax.passes.arena`);
* :class:`IdentityRewrite` applies exact graph rewrites (SERENITY's channel- and
  kernel-wise partitioning and more) where they lower the scheduled peak
  (:mod:`tvm_memsched.relax.passes.identity_rewrite`); run it at operator level;
* :class:`ShrinkWorkspace` schedules the kernels so that they keep no full-size
  temporaries (:mod:`tvm_memsched.relax.passes.shrink_workspace`);
  :class:`InlinePadding` is its inlining step alone; :class:`VectorizeKernels` (after it) vectorises
  each kernel over its innermost output dimension in TIR (:mod:`tvm_memsched.relax.passes.vectorize_kernels`);
* :class:`InlineProducers` computes cheap element-wise producers used once inside
  their consumer's kernel (:mod:`tvm_memsched.relax.passes.inline_producers`); run it after FuseTIR;
* :class:`ShrinkConstants` keeps broadcast constants at their small stored
  shape (:mod:`tvm_memsched.relax.passes.shrink_constants`); run it at operator level;
* :class:`FoldAffineChains` writes per-channel affine chains (a batch norm in any
  exporter's spelling) one way (:mod:`tvm_memsched.relax.passes.affine_chains`) and
  :class:`AbsorbTransposes` computes convolutions and pooling wrapped in transposes
  channels-last (:mod:`tvm_memsched.relax.passes.absorb_transposes`); run them at operator level.

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

from ..int8.lower import IntegerLowering
from .absorb_transposes import AbsorbTransposes
from .affine_chains import FoldAffineChains
from .arena import ArenaPlanMemory
from .identity_rewrite import IdentityRewrite
from .inline_producers import InlineProducers
from .layout import ChannelsFirstReduction, ConvolutionLayout
from .reorder import MemoryAwareReorder
from .shrink_constants import ShrinkConstants
from .shrink_workspace import InlinePadding, ShrinkWorkspace
from .tiling import PatchTiling
from .vectorize_kernels import VectorizeKernels

__all__ = ["MemoryAwareReorder", "ArenaPlanMemory", "ShrinkWorkspace", "InlinePadding", "ShrinkConstants",
           "IdentityRewrite", "IntegerLowering", "ConvolutionLayout",
           "ChannelsFirstReduction", "PatchTiling", "InlineProducers", "FoldAffineChains", "AbsorbTransposes",
           "VectorizeKernels"]
