"""The Edge TPU pipeline cost model and the figures of a segmentation.

:class:`EdgeTpuCostModel` holds the constants, :class:`StageCosts` the integer
per-op costs of a graph under them, :func:`stage_tensors` / :func:`stage_io`
the one definition of what a stage takes and gives, :func:`stage_figures` and
:func:`evaluate` the stage times every solver is checked against, and
:class:`Segmentation` a solver's result. See :mod:`tvm_memsched.tflite.coral`
for the model.

Example
-------
>>> from tvm_memsched.core import coral_dag
>>> g = coral_dag(12, seed=0)
>>> ops = [op.name for op in g.ops]
>>> one, = evaluate(g, [ops])
>>> two = evaluate(g, [ops[:6], ops[6:]])
>>> one.ops, [f.ops for f in two], one.time_ps == one.time_ms * PS_PER_MS
(12, [6, 6], True)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

from ...core.errors import MemschedError
from ...core.graph import Graph

__all__ = ["PS_PER_S", "PS_PER_MS", "EdgeTpuCostModel", "DEFAULT_COST_MODEL", "StageFigures", "Segmentation",
           "StageCosts", "stage_tensors", "stage_members", "stage_io", "stage_param_bytes", "stage_figures",
           "evaluate"]

PS_PER_S = 10 ** 12
PS_PER_MS = 10 ** 9


@dataclass(frozen=True)
class EdgeTpuCostModel:
    """Constants of the Edge TPU pipeline cost model (see the module docstring)."""

    #: int8 peak of one Edge TPU in tera-operations per second (1 MAC = 2 operations).
    peak_tops: float = 4.0
    #: fraction of the peak that real layers achieve.
    utilization: float = 0.15
    #: on-chip SRAM available for caching parameters.
    sram_bytes: int = 8 * 2 ** 20
    #: host -> TPU bandwidth for parameters that do not fit the SRAM (USB 3.0, effective).
    host_bandwidth: float = 320e6
    #: bandwidth for activations crossing a cut (device -> host -> device, USB 3.0, effective).
    link_bandwidth: float = 320e6

    def __post_init__(self):
        for k in ("peak_tops", "utilization", "host_bandwidth", "link_bandwidth"):
            if not getattr(self, k) > 0:
                raise MemschedError(f"cost model: {k} must be positive, got {getattr(self, k)}")
        if self.utilization > 1:
            raise MemschedError(f"cost model: utilization must be at most 1, got {self.utilization}")
        if self.sram_bytes < 0:
            raise MemschedError(f"cost model: sram_bytes must be >= 0, got {self.sram_bytes}")

    @property
    def macs_per_second(self) -> float:
        """Effective MAC rate: ``peak_tops * 1e12 / 2 * utilization``."""
        return self.peak_tops * 1e12 / 2 * self.utilization

    def compute_ps(self, work: int) -> int:
        """Picoseconds for ``work`` MAC-equivalents (rounded to an integer)."""
        return int(round(work * PS_PER_S / self.macs_per_second))

    @property
    def stream_ps_per_byte(self) -> int:
        return int(round(PS_PER_S / self.host_bandwidth))

    @property
    def link_ps_per_byte(self) -> int:
        return int(round(PS_PER_S / self.link_bandwidth))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(macs_per_second=self.macs_per_second, stream_ps_per_byte=self.stream_ps_per_byte,
                 link_ps_per_byte=self.link_ps_per_byte)
        return d


DEFAULT_COST_MODEL = EdgeTpuCostModel()


@dataclass
class StageFigures:
    """Cost-model figures of one stage (times in ms)."""

    ops: int
    macs: int
    work: int
    param_bytes: int
    in_bytes: int
    out_bytes: int
    compute_ms: float
    stream_ms: float
    transfer_ms: float
    time_ms: float
    time_ps: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Segmentation:
    """K contiguous stages of an execution order and their predicted times.

    ``stages`` lists op names per stage in execution order; ``order`` is their
    concatenation (a valid schedule of the graph). ``bottleneck_ms`` is the
    slowest stage; ``lower_bound_ms`` what the solver proved no segmentation
    (of the fixed order, or of any order with ``free_order``) can beat;
    ``optimal`` when they meet.
    """

    stages: list
    order: list
    figures: list
    bottleneck_ms: float
    lower_bound_ms: float
    optimal: bool
    method: str
    free_order: bool
    cut_bytes: list
    cost_model: EdgeTpuCostModel
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return len(self.stages)

    @property
    def stage_ms(self) -> list:
        return [f.time_ms for f in self.figures]

    def labels(self) -> dict:
        """op name -> stage index."""
        return {op: k for k, st in enumerate(self.stages) for op in st}

    def to_dict(self) -> dict:
        return {"stages": [list(s) for s in self.stages], "bottleneck_ms": self.bottleneck_ms,
                "lower_bound_ms": self.lower_bound_ms, "optimal": self.optimal, "method": self.method,
                "free_order": self.free_order, "cut_bytes": list(self.cut_bytes),
                "figures": [f.to_dict() for f in self.figures], "cost_model": self.cost_model.to_dict(),
                "seconds": round(self.seconds, 4), "stats": self.stats}


class StageCosts:
    """Per-op integer costs and parameter buffers of ``graph`` under the cost model ``cm``.

    ``cps[v]`` is op ``v``'s compute time in picoseconds (from ``work[v]``
    MAC-equivalents; ``macs[v]`` counts only real MACs), ``params[v]`` the
    ``(buffer key, bytes)`` pairs it reads; ``stream`` and ``link`` are the
    picoseconds per byte streamed or crossing a cut, ``sram`` the parameter
    bytes cached on chip. The solvers, :func:`stage_figures` and the learned
    segmenter all price stages with these numbers.

    >>> from tvm_memsched.core import coral_dag
    >>> costs = StageCosts(coral_dag(10, seed=1), DEFAULT_COST_MODEL)
    >>> len(costs.cps) == 10 and costs.stage_time(1000, 0, 0) == 1000
    True
    """

    def __init__(self, graph: Graph, cm: EdgeTpuCostModel):
        self.graph, self.cm = graph, cm
        self.work, self.macs, self.cps, self.params = [], [], [], []
        for op in graph.ops:
            a = op.attrs or {}
            macs = int(a.get("macs", 0) or 0)
            if macs > 0:
                work = macs
            elif "elements" in a:
                work = int(a["elements"])
            elif a.get("shape"):
                work = math.prod(int(s) for s in a["shape"])
            else:
                work = sum(graph.size[t] for t in graph.op_outputs[graph.op_index[op.name]])
            self.macs.append(macs)
            self.work.append(work)
            self.cps.append(cm.compute_ps(work))
            if "params" in a:
                self.params.append(tuple((("buffer", b), int(n)) for b, n in a["params"]))
            elif int(a.get("param_bytes", 0) or 0) > 0:
                self.params.append(((("op", op.name), int(a["param_bytes"])),))
            else:
                self.params.append(())
        self.stream = cm.stream_ps_per_byte
        self.link = cm.link_ps_per_byte
        self.sram = int(cm.sram_bytes)

    def stage_time(self, compute_ps: int, param_bytes: int, io_bytes: int) -> int:
        """Picoseconds of a stage with this compute, these parameter bytes and these bytes in and out."""
        return compute_ps + self.stream * max(0, param_bytes - self.sram) + self.link * io_bytes


def stage_tensors(graph: Graph, stage_of: Sequence[int], ops: Sequence[int], s: int) -> tuple[set, set]:
    """Tensor ids entering and leaving stage ``s`` (its ops ``ops``) for a monotone stage assignment.

    The one definition of the pipeline contract (see the module docstring):
    a stage takes what its ops read from earlier stages (stage 0 also every
    model input) and gives what later stages read; model outputs produced
    earlier pass through. Costs ``O(its ops * degree + model outputs)``, so
    local searches can re-evaluate the stages a move touches.
    """
    g = graph
    ins: set = set(g.input_ids) if s == 0 else set()
    outs: set = set()
    for v in ops:
        for t in g.op_inputs[v]:
            p = g.producer[t]
            if p < 0 or stage_of[p] != s:
                ins.add(t)
        for t in g.op_outputs[v]:
            if g.is_output[t] or any(stage_of[c] > s for c in g.consumers[t]):
                outs.add(t)
    for t in g.output_ids:
        p = g.producer[t]
        if (-1 if p < 0 else stage_of[p]) < s:
            ins.add(t)
            outs.add(t)
    return ins, outs


def stage_members(stage_of: Sequence[int], k: int) -> list:
    """Op ids of every stage, ascending."""
    members = [[] for _ in range(k)]
    for v, s in enumerate(stage_of):
        members[s].append(v)
    return members


def stage_io(graph: Graph, stage_of: Sequence[int], k: int) -> tuple[list, list]:
    """Tensor ids entering and leaving every stage for a stage assignment (see :func:`stage_tensors`).

    ``stage_of[v]`` is the stage of op id ``v``; it must not decrease along
    edges. Returns ``(ins, outs)``, two lists of ``k`` sorted lists of tensor ids.
    """
    for t in range(graph.num_tensors):
        p = graph.producer[t]
        if p >= 0 and any(stage_of[c] < stage_of[p] for c in graph.consumers[t]):
            raise MemschedError(f"tensor '{graph.tensors[t].name}' is read in a stage before its producer's")
    io = [stage_tensors(graph, stage_of, ops, s) for s, ops in enumerate(stage_members(stage_of, k))]
    return [sorted(i) for i, _ in io], [sorted(o) for _, o in io]


def stage_param_bytes(costs: StageCosts, ops: Sequence[int]) -> int:
    """Parameter bytes a stage holds: every buffer its ops read, counted once."""
    bufs = {}
    for v in ops:
        for key, n in costs.params[v]:
            bufs[key] = n
    return sum(bufs.values())


def stage_figures(costs: StageCosts, stage_of: Sequence[int], k: int) -> tuple[list, list]:
    """``(figures, cut_bytes)`` of a monotone stage assignment: :class:`StageFigures` per stage, and the
    bytes live across each of the ``k - 1`` cuts (produced at or before the stage, needed after it).

    ``stage_of[v]`` is the stage of op id ``v``; :func:`evaluate` is the same from op names.
    """
    g = costs.graph
    ins, outs = stage_io(g, stage_of, k)
    figs = []
    for s, ops in enumerate(stage_members(stage_of, k)):
        pb = stage_param_bytes(costs, ops)
        cps = sum(costs.cps[v] for v in ops)
        ib = sum(g.size[t] for t in ins[s])
        ob = sum(g.size[t] for t in outs[s])
        stream = costs.stream * max(0, pb - costs.sram)
        link = costs.link * (ib + ob)
        total = cps + stream + link
        figs.append(StageFigures(len(ops), sum(costs.macs[v] for v in ops), sum(costs.work[v] for v in ops), pb,
                                 ib, ob, cps / PS_PER_MS, stream / PS_PER_MS, link / PS_PER_MS, total / PS_PER_MS,
                                 total))
    # bytes live across each cut: produced at or before stage s, needed after it
    cut = []
    for s in range(k - 1):
        n = 0
        for t in range(g.num_tensors):
            p = g.producer[t]
            ps = -1 if p < 0 else stage_of[p]
            if ps <= s and (g.is_output[t] or any(stage_of[c] > s for c in g.consumers[t])):
                n += g.size[t]
        cut.append(n)
    return figs, cut


def evaluate(graph: Graph, stages: Sequence[Sequence], cost_model: EdgeTpuCostModel = DEFAULT_COST_MODEL) -> list:
    """Reference evaluation: :class:`StageFigures` of every stage of a segmentation (op names or ids per stage)."""
    stage_of = [-1] * graph.num_ops
    for s, ops in enumerate(stages):
        for v in ops:
            vid = graph.op_index[v] if isinstance(v, str) else int(v)
            if stage_of[vid] != -1:
                raise MemschedError(f"op '{graph.ops[vid].name}' is in two stages")
            stage_of[vid] = s
    if -1 in stage_of:
        raise MemschedError(f"op '{graph.ops[stage_of.index(-1)].name}' is in no stage")
    return stage_figures(StageCosts(graph, cost_model), stage_of, len(stages))[0]
