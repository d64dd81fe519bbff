"""Coral Edge TPU pipelining: split a model into K segments, one per Edge TPU, for maximum throughput.

A model pipelined over K Edge TPUs runs segment k on TPU k; in steady state a
new inference finishes every ``max_k T_k``, so the objective is to **minimise
the slowest stage**. Every op goes to one stage, stages are contiguous in an
execution order, and a tensor always flows forward (``stage(producer) <=
stage(consumer)``).

Cost model (:class:`EdgeTpuCostModel`; all constants explicit)
-------------------------------------------------------------
Stage time ``T_k = compute_k + stream_k + transfer_k`` with

* ``compute_k = work_k / (peak_MAC/s * utilisation)``: ``work`` is the MACs of
  convolutions and matrix products, and one MAC-equivalent per output element
  of every other op (pooling, additions, concatenations...). An Edge TPU peaks
  at 4 TOPS int8 (= 2e12 MAC/s); real networks reach a fraction of it, set by
  ``utilization`` (default 0.15: Coral's published latencies of MobileNet- and
  Inception-class models correspond to roughly 5-25 % of the peak);
* ``stream_k = max(0, params_k - SRAM) / host_bandwidth``: the Edge TPU caches
  parameters in its 8 MiB on-chip SRAM; what does not fit is streamed from the
  host on every inference. ``params_k`` counts each constant buffer the
  stage's ops read once;
* ``transfer_k = (in_bytes_k + out_bytes_k) / link_bandwidth``: activations
  crossing cuts travel through the host (TPU -> host -> next TPU), as Coral's
  ``PipelinedModelRunner`` moves them, over USB 3.0 (default 320 MB/s both
  for parameters and activations).

Every quantity is computed in integer picoseconds (per-op compute time and
per-byte costs rounded once), so the dynamic program, CP-SAT and the
reference evaluator :func:`evaluate` agree exactly.

Which tensors a segment takes and gives (the contract of
``PipelinedModelRunner``, which matches tensors by name and keeps a tensor
queued until its last consumer segment has run):

* inputs of segment k: the tensors its ops read that earlier segments (or the
  model input) produce; segment 0 takes every model input;
* outputs of segment k: the tensors it produces that later segments read, and
  model outputs; a model output produced before the last segment is passed
  through every later segment (input and output of the same tensor), so that
  the last segment's outputs are exactly the model's outputs.

Solvers
-------
* fixed order: dynamic programming over the cut positions of the order,
  ``O(K n^2)`` after an ``O(n^2)`` table of all contiguous stage costs; exact;
* free order (any topological order): CP-SAT (OR-Tools) over monotone stage
  assignments (``b[v,k] = [stage(v) <= k]``), warm-started with the better
  of the fixed-order DP and the learned segmenter (:mod:`.learned`) and
  never worse than either, returning the best solution and the proven lower
  bound within the time limit.

:func:`segment` is a pure function of a core :class:`~tvm_memsched.core.Graph`
(ops need ``attrs`` ``macs``; optionally ``elements`` or ``shape``,
``param_bytes`` and ``params``), usable without files, e.g. to label training
data. :func:`write_segments` writes the segment ``.tflite`` files and a
manifest; :func:`run_segments` chains them in LiteRT.

Modules
-------
* :mod:`.cost` - the cost model, per-op costs (:class:`StageCosts`), stage inputs/outputs and figures;
* :mod:`.solve` - the exact solvers (dynamic program over cuts, CP-SAT);
* :mod:`.segment` - :func:`segment`: the solvers put together;
* :mod:`.learned` - the learned (RESPECT-style) segmenter, numpy inference;
* :mod:`.export` - segment files, manifest, LiteRT check, :func:`coral_export`.

Example
-------
>>> from tvm_memsched import zoo
>>> g = zoo.graph("swiftnet_like", "int8")
>>> s = segment(g, 3)
>>> len(s.stages), s.method, s.optimal, s.bottleneck_ms == max(s.stage_ms)
(3, 'dp', True, True)
>>> sum(len(st) for st in s.stages) == g.num_ops
True
"""


from .cost import (DEFAULT_COST_MODEL, PS_PER_MS, PS_PER_S, EdgeTpuCostModel, Segmentation, StageCosts, StageFigures,
                   evaluate, stage_figures, stage_io, stage_members, stage_param_bytes, stage_tensors)
from .export import coral_export, edgetpu_compiler_commands, run_segments, write_segments
from .learned import segment_learned
from .segment import segment
from .solve import cpsat_segment, dp_segment, window_dp

__all__ = ["EdgeTpuCostModel", "StageFigures", "Segmentation", "segment", "evaluate", "stage_io",
           "stage_tensors", "stage_members", "stage_param_bytes", "StageCosts", "stage_figures",
           "dp_segment", "window_dp", "cpsat_segment", "write_segments", "run_segments", "edgetpu_compiler_commands",
           "coral_export", "DEFAULT_COST_MODEL", "PS_PER_S", "PS_PER_MS", "segment_learned"]
