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
  of the fixed-order DP and the learned segmenter (:mod:`.coral_learned`) and
  never worse than either, returning the best solution and the proven lower
  bound within the time limit.

:func:`segment` is a pure function of a core :class:`~tvm_memsched.core.Graph`
(ops need ``attrs`` ``macs``; optionally ``elements`` or ``shape``,
``param_bytes`` and ``params``), usable without files, e.g. to label training
data. :func:`write_segments` writes the segment ``.tflite`` files and a
manifest; :func:`run_segments` chains them in LiteRT.

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

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

from ..core.errors import MemschedError
from ..core.graph import Graph

__all__ = ["EdgeTpuCostModel", "StageFigures", "Segmentation", "segment", "evaluate", "stage_io",
           "stage_tensors", "stage_members", "stage_param_bytes",
           "dp_segment", "window_dp", "cpsat_segment", "write_segments", "run_segments", "edgetpu_compiler_commands",
           "coral_export", "DEFAULT_COST_MODEL"]

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


# ------------------------------------------------------------ graph data
class _Costs:
    """Per-op integer costs and per-op parameter buffers of a graph under a cost model."""

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


def stage_param_bytes(costs: "_Costs", ops: Sequence[int]) -> int:
    """Parameter bytes a stage holds: every buffer its ops read, counted once."""
    bufs = {}
    for v in ops:
        for key, n in costs.params[v]:
            bufs[key] = n
    return sum(bufs.values())


def _figures(costs: _Costs, stage_of: Sequence[int], k: int) -> tuple[list, list]:
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
    return _figures(_Costs(graph, cost_model), stage_of, len(stages))[0]


# --------------------------------------------------------------------- DP
class _OrderCosts:
    """Integer stage times of contiguous runs ``order[a:b]`` of one execution order (rows on demand)."""

    def __init__(self, costs: _Costs, order: Sequence[int]):
        g = costs.graph
        self.costs, self.order, self.n = costs, list(order), len(order)
        pos = [0] * g.num_ops
        for i, v in enumerate(order):
            pos[v] = i
        self.prod = [(-1 if g.producer[t] < 0 else pos[g.producer[t]]) for t in range(g.num_tensors)]
        self.last = [max((pos[c] for c in g.consumers[t]), default=-1) for t in range(g.num_tensors)]
        self.ends_at = [[] for _ in range(self.n)]
        for t in range(g.num_tensors):
            if self.last[t] >= 0 and not g.is_output[t]:
                self.ends_at[self.last[t]].append(t)
        self.outputs = [t for t in range(g.num_tensors) if g.is_output[t]]
        self.inputs = [t for t in range(g.num_tensors) if g.is_input[t]]

    def row(self, a: int, stop: int | None = None) -> list:
        """``row[b - a - 1]``: time of the stage running ``order[a:b]``, for ``b`` in ``a+1..stop``."""
        costs, g = self.costs, self.costs.graph
        order, prod, last, ends_at, size = self.order, self.prod, self.last, self.ends_at, g.size
        stop = self.n if stop is None else min(stop, self.n)
        through = [t for t in self.outputs if prod[t] < a]       # pass-through model outputs
        in_set = set(through) | (set(self.inputs) if a == 0 else set())
        in_b = sum(size[t] for t in in_set)
        out_b = sum(size[t] for t in through)
        seen: dict = {}
        pbytes = 0
        cps = 0
        row = []
        for q in range(a, stop):
            v = order[q]
            cps += costs.cps[v]
            for key, nb in costs.params[v]:
                if key not in seen:
                    seen[key] = nb
                    pbytes += nb
            for t in g.op_inputs[v]:
                if prod[t] < a and t not in in_set:
                    in_set.add(t)
                    in_b += size[t]
            for t in g.op_outputs[v]:
                if g.is_output[t] or last[t] > q:
                    out_b += size[t]
            for t in ends_at[q]:
                if a <= prod[t] < q:
                    out_b -= size[t]
            row.append(costs.stage_time(cps, pbytes, in_b + out_b))
        return row


def _cost_table(costs: _Costs, order: Sequence[int]) -> list:
    """``table[a][b - a - 1]``: integer time of the stage running ``order[a:b]``."""
    oc = _OrderCosts(costs, order)
    return [oc.row(a) for a in range(oc.n)]


def window_dp(costs: _Costs, order: Sequence[int], cuts: Sequence[int], window: int) -> tuple[list, int]:
    """Best cut positions of ``order`` with every cut within ``window`` positions of ``cuts``: ``(cuts, ps)``.

    The same exact stage times as :func:`dp_segment`, restricted to the
    windows (``O(K * window * n)`` work instead of ``O(n^2)``); never worse
    than ``cuts`` themselves. ``cuts`` are the start positions of stages 1..K-1.
    """
    n = len(order)
    oc = _OrderCosts(costs, order)
    cand = [[0]] + [list(range(max(1, c - window), min(n - 1, c + window) + 1)) for c in cuts] + [[n]]
    stops: dict = {}
    for j in range(len(cand) - 1):
        hi = cand[j + 1][-1]
        for a in cand[j]:
            stops[a] = max(stops.get(a, 0), hi)
    rows = {a: oc.row(a, stop) for a, stop in stops.items()}
    f = {0: (0, -1)}                      # cut position -> (best bottleneck so far, previous cut)
    back = []
    for j in range(1, len(cand)):
        nf = {}
        for b in cand[j]:
            best, arg = None, -1
            for a, (fa, _) in f.items():
                if a < b and b - a - 1 < len(rows[a]):
                    c = max(fa, rows[a][b - a - 1])
                    if best is None or c < best:
                        best, arg = c, a
            if best is not None:
                nf[b] = (best, arg)
        back.append(nf)
        f = nf
    best, prev = f[n]
    out = []
    for j in range(len(back) - 2, -1, -1):
        out.append(prev)
        prev = back[j][prev][1]
    return sorted(out), int(best)


def dp_segment(costs: _Costs, order: Sequence[int], k: int) -> tuple[list, int]:
    """Optimal cut positions of ``order`` into ``k`` non-empty stages: ``(cuts, bottleneck_ps)``.

    ``cuts`` are the start positions of stages 1..k-1.
    """
    n = len(order)
    table = _cost_table(costs, order)
    inf = float("inf")
    # f[j][b]: best bottleneck of the first b ops in j+1 stages; arg[j][b]: start of the last stage
    f = [[inf] * (n + 1) for _ in range(k)]
    arg = [[-1] * (n + 1) for _ in range(k)]
    for b in range(1, n + 1):
        f[0][b] = table[0][b - 1]
    for j in range(1, k):
        fj, fprev, argj = f[j], f[j - 1], arg[j]
        for b in range(j + 1, n + 1):
            best, best_a = inf, -1
            for a in range(j, b):
                c = fprev[a]
                if c >= best:
                    continue
                s = table[a][b - a - 1]
                c = s if s > c else c
                if c < best:     # strict: the earliest cut wins ties (deterministic)
                    best, best_a = c, a
            fj[b], argj[b] = best, best_a
    cuts = []
    b = n
    for j in range(k - 1, 0, -1):
        a = arg[j][b]
        cuts.append(a)
        b = a
    return sorted(cuts), int(f[k - 1][n])


# ------------------------------------------------------------------ CP-SAT
def cpsat_segment(costs: _Costs, k: int, *, hint: Sequence[int] | None = None, upper: int | None = None,
                  time_limit: float = 10.0, workers: int = 1,
                  deterministic_time: float | None = None) -> tuple[list | None, int | None, int, bool]:
    """Stage assignment minimising the bottleneck over all topological orders.

    Returns ``(stage_of or None, bottleneck_ps or None, lower_bound_ps, optimal)``.
    ``hint`` (a stage per op) warm-starts the search; ``upper`` bounds the
    objective (solutions must be at most as slow). ``time_limit`` is in
    wall-clock seconds. With one worker (the default, and the fastest on the
    zoo's graphs) or with several interleaved workers the search is
    deterministic as long as it finishes within the time limit; with
    ``deterministic_time`` (CP-SAT's reproducible work measure) instead of a
    wall-clock limit it is deterministic on any machine and under any load.
    """
    from ortools.sat.python import cp_model

    g = costs.graph
    n = g.num_ops
    m = cp_model.CpModel()
    one = m.NewConstant(1)
    zero = m.NewConstant(0)
    # b[v][s] = [stage(v) <= s]; b[v][-1] = 0 (index 0 below), b[v][k-1] = 1
    b = []
    for v in range(n):
        row = [zero] + [m.NewBoolVar(f"b{v}_{s}") for s in range(k - 1)] + [one]
        for s in range(1, k):
            m.AddImplication(row[s], row[s + 1])
        b.append(row)

    def le(v, s):              # [stage(v) <= s] for s in -1..k-1
        return b[v][s + 1]

    def at(v, s):              # [stage(v) == s] as a linear expression
        return le(v, s) - le(v, s - 1)

    for v in range(n):
        for p in g.preds[v]:
            for s in range(k - 1):
                m.AddImplication(le(v, s), le(p, s))
    for s in range(k):
        m.Add(sum(at(v, s) for v in range(n)) >= 1)

    size = g.size
    io = [[] for _ in range(k)]          # (coefficient, expression) terms of in+out bytes per stage
    const_io = [0] * k
    for t in range(g.num_tensors):
        p = g.producer[t]
        cons = g.consumers[t]
        if g.is_output[t]:
            for s in range(k):
                if p < 0:
                    const_io[s] += 2 * size[t]
                else:
                    io[s].append((size[t], le(p, s - 1)))      # passed in from an earlier stage
                    io[s].append((size[t], le(p, s)))          # given out (produced here or passed through)
            continue
        if p < 0:                         # model input
            const_io[0] += size[t]
            for s in range(1, k):
                if cons:
                    x = m.NewBoolVar(f"in{t}_{s}")
                    for c in cons:
                        m.Add(x >= at(c, s))
                    io[s].append((size[t], x))
            continue
        if not cons:
            continue
        for s in range(k):
            if s > 0:                      # read here, produced earlier
                x = m.NewBoolVar(f"in{t}_{s}")
                for c in cons:
                    m.Add(x >= at(c, s) + le(p, s - 1) - 1)
                io[s].append((size[t], x))
            if s < k - 1:                  # produced here, read later
                y = m.NewBoolVar(f"out{t}_{s}")
                for c in cons:
                    m.Add(y >= at(p, s) - le(c, s))
                io[s].append((size[t], y))

    users: dict = {}
    for v in range(n):
        for key, nb in costs.params[v]:
            users.setdefault(key, [nb, []])[1].append(v)
    times = []
    ub_total = sum(costs.cps) + costs.stream * sum(nb for nb, _ in users.values()) + \
        costs.link * 2 * sum(size) * 2 + 1
    for s in range(k):
        pterms = []
        for key, (nb, vs) in users.items():
            if len(vs) == 1:
                pterms.append(nb * at(vs[0], s))
            else:
                w = m.NewBoolVar(f"w{key}_{s}")
                for v in vs:
                    m.Add(w >= at(v, s))
                pterms.append(nb * w)
        over = m.NewIntVar(0, max(0, sum(nb for nb, _ in users.values())), f"over{s}")
        if pterms:
            m.Add(over >= sum(pterms) - costs.sram)
        t_s = sum(costs.cps[v] * at(v, s) for v in range(n)) + costs.stream * over + \
            costs.link * (sum(c * e for c, e in io[s]) + const_io[s])
        times.append(t_s)
    z = m.NewIntVar(0, ub_total if upper is None else int(upper), "bottleneck")
    for t_s in times:
        m.Add(t_s <= z)
    m.Minimize(z)
    if hint is not None:
        for v in range(n):
            for s in range(k - 1):
                m.AddHint(le(v, s), 1 if hint[v] <= s else 0)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers = max(1, int(workers))
    prm.interleave_search = prm.num_workers > 1
    if deterministic_time is not None:
        prm.max_deterministic_time = float(deterministic_time)
    else:
        prm.max_time_in_seconds = float(time_limit)
    prm.random_seed = 0
    status = solver.Solve(m)
    if status == cp_model.INFEASIBLE:      # nothing at most ``upper``: the caller's solution is optimal
        return None, None, int(upper) if upper is not None else 0, upper is not None
    bound = max(0, int(math.ceil(solver.BestObjectiveBound() - 1e-6)))
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, bound, False
    stage_of = [sum(1 for s in range(k - 1) if not solver.Value(le(v, s))) for v in range(n)]
    # The model's indicators (inputs, outputs, shared buffers, SRAM overflow) are only bounded from below, so
    # a solution found before optimality may carry a ``z`` above the true slowest stage: report the true one.
    figs, _ = _figures(costs, stage_of, k)
    true = max(f.time_ps for f in figs)
    if true > solver.Value(z):
        raise AssertionError(f"CP-SAT model underestimates a stage ({true} ps > {solver.Value(z)} ps)")
    return stage_of, true, bound, status == cp_model.OPTIMAL


# ---------------------------------------------------------------- segment
def segment(graph: Graph, k: int, order: Sequence | None = None, free_order: bool = False,
            time_limit: float = 10.0, cost_model: EdgeTpuCostModel | None = None,
            workers: int = 1, deterministic_time: float | None = None, learned_start: bool = True) -> Segmentation:
    """Split ``graph`` into ``k`` pipeline stages minimising the slowest stage (see the module docstring).

    ``order`` (op names or ids; default: program order) is the execution order
    whose cut positions the dynamic program optimises exactly. With
    ``free_order=True`` CP-SAT then searches all topological orders within
    ``time_limit`` seconds (wall clock), starting from the DP solution,
    so the result is never worse than the fixed-order optimum; its proven
    bound is reported as ``lower_bound_ms``. ``deterministic_time`` replaces
    the wall-clock limit by CP-SAT's deterministic one (reproducible results
    on any machine, e.g. for training labels). With ``learned_start`` (the
    default) CP-SAT starts from the learned segmenter's solution
    (:mod:`.coral_learned`) when that beats the DP's, so the result is never
    worse than either. Stages keep ``order``'s
    relative order of their ops.
    """
    from ..core.orders import program_order

    start = time.perf_counter()
    cm = cost_model or DEFAULT_COST_MODEL
    n = graph.num_ops
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise MemschedError(f"the number of stages must be a positive integer, got {k!r}")
    if k > n:
        raise MemschedError(f"cannot split {n} ops into {k} non-empty stages")
    if time_limit is not None and not time_limit > 0:
        raise MemschedError(f"time limit must be a positive number of seconds, got {time_limit}")
    ids = graph.resolve_order(order) if order is not None else program_order(graph)
    costs = _Costs(graph, cm)
    cuts, best = dp_segment(costs, ids, k)
    bounds = [0] + cuts + [n]
    stage_of = [0] * n
    for s in range(k):
        for q in range(bounds[s], bounds[s + 1]):
            stage_of[ids[q]] = s
    method, lower, optimal = "dp", best, True
    stats: dict = {"dp_bottleneck_ms": best / PS_PER_MS, "cuts": cuts}
    if free_order and k > 1:
        start_from = "dp"
        if learned_start:
            from .coral_learned import segment_learned   # imports this module: a function-level import

            try:
                ls = segment_learned(graph, k, cost_model=cm)
            except MemschedError as e:                   # weights missing or unreadable: start from the DP
                stats["learned_start"] = str(e)
            else:
                lps = max(f.time_ps for f in ls.figures)
                stats["learned_ms"] = lps / PS_PER_MS
                if lps < best:
                    lab = ls.labels()
                    stage_of = [lab[op.name] for op in graph.ops]
                    best, start_from = lps, "learned"
        stats["start"] = start_from
        t0 = time.perf_counter()
        so, val, lb, opt = cpsat_segment(costs, k, hint=stage_of, upper=best, time_limit=time_limit or 10.0,
                                         workers=workers, deterministic_time=deterministic_time)
        stats["cpsat"] = {"bottleneck_ms": None if val is None else val / PS_PER_MS,
                          "lower_bound_ms": lb / PS_PER_MS, "optimal": opt,
                          "seconds": round(time.perf_counter() - t0, 3)}
        if so is not None and val < best:
            stage_of, best = so, val
        method = "cp-sat"
        lower = min(best, lb)
        optimal = opt or lb >= best
    elif free_order:
        method = "dp"          # one stage: the order does not matter
    pos = {v: i for i, v in enumerate(ids)}
    stages_ids = [sorted((v for v in range(n) if stage_of[v] == s), key=pos.__getitem__) for s in range(k)]
    figs, cut = _figures(costs, stage_of, k)
    worst = max(f.time_ps for f in figs)
    if worst != best:
        raise AssertionError(f"segmentation: solver bottleneck {best} ps != evaluated {worst} ps (internal error)")
    stages = [[graph.ops[v].name for v in st] for st in stages_ids]
    return Segmentation(stages=stages, order=[o for st in stages for o in st], figures=figs,
                        bottleneck_ms=best / PS_PER_MS, lower_bound_ms=lower / PS_PER_MS, optimal=bool(optimal),
                        method=method, free_order=bool(free_order), cut_bytes=cut, cost_model=cm,
                        seconds=time.perf_counter() - start, stats=stats)


# ---------------------------------------------------------------- writing
def edgetpu_compiler_commands(paths: Sequence[str], out_dir: str = "edgetpu") -> list:
    """The ``edgetpu_compiler`` call for each segment file (one call per segment).

    Compiling each segment on its own gives each its own Edge TPU (passing
    several models to one call *co-compiles* them to share one TPU's
    parameter cache, which is not what a pipeline wants). ``-s`` prints the
    operators mapped to the TPU; the compiled file is ``<name>_edgetpu.tflite``.
    """
    import shlex

    return [f"edgetpu_compiler -s -o {shlex.quote(out_dir)} {shlex.quote(p)}" for p in paths]


def _segment_model(tg, op_indices: list, in_ids: list, out_ids: list, k: int, nk: int):
    """A one-subgraph ``ModelT`` holding operators ``op_indices`` of ``tg`` (tensor ids of subgraph 0)."""
    from . import builder
    from .reader import is_constant, load_model

    tfl = builder.tfl
    m = load_model(tg.buf)                       # a fresh copy we may edit
    sg = m.subgraphs[0]
    ops = [sg.operators[i] for i in op_indices]
    used = set(in_ids) | set(out_ids)
    for op in ops:
        for lst in (op.inputs, op.outputs, op.intermediates):
            used.update(int(i) for i in ([] if lst is None else lst) if int(i) >= 0)
    tmap: dict = {}
    buffers = [tfl.BufferT()]
    bmap: dict = {}
    tensors = []
    for old in sorted(used):
        t = sg.tensors[old]
        if is_constant(m, t):
            ob = int(t.buffer)
            if ob not in bmap:
                bmap[ob] = len(buffers)
                buffers.append(m.buffers[ob])
            t.buffer = bmap[ob]
        else:
            t.buffer = 0
        t.name = tg.unique_names[old]
        tmap[old] = len(tensors)
        tensors.append(t)
    codes, cmap = [], {}
    for op in ops:
        oc = int(op.opcodeIndex)
        if oc not in cmap:
            cmap[oc] = len(codes)
            codes.append(m.operatorCodes[oc])
        op.opcodeIndex = cmap[oc]
        op.inputs = [tmap[int(i)] if int(i) >= 0 else -1 for i in op.inputs]
        op.outputs = [tmap[int(i)] for i in op.outputs]
        if op.intermediates is not None and len(op.intermediates):
            op.intermediates = [tmap[int(i)] for i in op.intermediates]
    new = tfl.SubGraphT()
    new.tensors, new.operators = tensors, ops
    new.inputs, new.outputs = [tmap[i] for i in in_ids], [tmap[i] for i in out_ids]
    new.name = f"segment_{k}"
    model = tfl.ModelT()
    model.version = 3
    desc = m.description.decode(errors="replace") if isinstance(m.description, bytes) else (m.description or "")
    model.description = f"{desc} | tvm_memsched Coral segment {k + 1}/{nk}".strip(" |")
    model.operatorCodes, model.subgraphs, model.buffers = codes, [new], buffers
    model.metadata = None
    model.signatureDefs = None
    return model


def _io_order(tg, ids: list, model_order: list) -> list:
    """Tensor ids with the model's own input/output order first, then by tensor index."""
    first = [t for t in model_order if t in ids]
    return first + sorted(t for t in ids if t not in first)


def write_segments(tg, seg: Segmentation, out_dir: str, *, stem: str | None = None,
                   source: str | None = None) -> tuple[dict, list]:
    """Write one ``.tflite`` per stage of ``seg`` (a segmentation of ``tg.graph``) and ``manifest.json``.

    Segment files are ``<stem>_seg<k>.tflite``; their inputs and outputs carry
    the model's tensor names (made unique where the model repeats a name, see
    :mod:`.reader`), so a pipelined runner can match them by name. Returns
    ``(manifest, [(path, bytes), ...])``.
    """
    from ..core.simulate import peak_bytes
    from . import builder
    from .reader import read_tflite

    g = tg.graph
    if seg.order and set(seg.order) != set(g.op_index):
        raise MemschedError("the segmentation does not cover the model's operators")
    stem = stem or g.name
    os.makedirs(out_dir, exist_ok=True)
    stage_of = [0] * g.num_ops
    for s, ops in enumerate(seg.stages):
        for name in ops:
            stage_of[g.op_index[name]] = s
    ins, outs = stage_io(g, stage_of, seg.k)
    sg0 = tg.model.subgraphs[0]
    model_in = [int(i) for i in sg0.inputs]
    model_out = [int(i) for i in sg0.outputs]
    consumers_stage = {t: sorted({stage_of[c] for c in g.consumers[t]}) for t in range(g.num_tensors)}
    files, segments = [], []
    dtypes = set()
    for s, ops in enumerate(seg.stages):
        op_idx = [g.op(name).attrs["index"] for name in ops]
        in_t = _io_order(tg, [tg.tensor_ids[g.tensors[t].name] for t in ins[s]], model_in)
        out_t = _io_order(tg, [tg.tensor_ids[g.tensors[t].name] for t in outs[s]], model_out)
        model = _segment_model(tg, op_idx, in_t, out_t, s, seg.k)
        buf = builder.serialize(model)
        fname = f"{stem}_seg{s}.tflite"
        path = os.path.join(out_dir, fname)
        with open(path, "wb") as f:
            f.write(buf)
        files.append((path, buf))
        sub = read_tflite(buf, name=f"{stem}_seg{s}")
        peak = peak_bytes(sub.graph, list(range(sub.graph.num_ops)))

        def describe(ti, role):
            t = sg0.tensors[ti]
            gname = tg.unique_names[ti]
            gid = g.tensor_index[gname]
            d = {"name": gname, "shape": [int(x) for x in t.shape], "dtype": _tname(t.type).lower(),
                 "bytes": g.size[gid]}
            if t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale):
                d["quantization"] = {"scale": [float(x) for x in t.quantization.scale],
                                     "zero_point": [int(x) for x in t.quantization.zeroPoint]}
            if role == "in":
                p = g.producer[gid]
                d["from"] = "model input" if p < 0 else f"segment {stage_of[p]}"
            else:
                later = [c for c in consumers_stage[gid] if c > s]
                d["to"] = [f"segment {c}" for c in later] + (["model output"] if g.is_output[gid] else [])
            dtypes.add(d["dtype"])
            return d

        fig = seg.figures[s]
        segments.append({"index": s, "file": fname, "ops": len(ops), "first_op": ops[0], "last_op": ops[-1],
                         "operators": list(ops),
                         "inputs": [describe(t, "in") for t in in_t], "outputs": [describe(t, "out") for t in out_t],
                         "param_bytes": fig.param_bytes, "macs": fig.macs, "in_bytes": fig.in_bytes,
                         "out_bytes": fig.out_bytes, "compute_ms": round(fig.compute_ms, 6),
                         "stream_ms": round(fig.stream_ms, 6), "transfer_ms": round(fig.transfer_ms, 6),
                         "time_ms": round(fig.time_ms, 6), "peak_activation_bytes": peak})
    one = evaluate(g, [list(range(g.num_ops))], seg.cost_model)[0]
    weight_types = {_tname(t.type).lower() for t in sg0.tensors if _is_const(tg, t)}
    int_ok = dtypes <= {"int8", "uint8"} and weight_types <= {"int8", "uint8", "int32"}
    paths = [os.path.basename(p) for p, _ in files]
    manifest = {
        "format": "tvm_memsched-coral-pipeline/1",
        "model": g.name,
        "source": source,
        "source_sha256": hashlib.sha256(tg.buf).hexdigest(),
        "stages": seg.k,
        "solver": {"method": seg.method, "free_order": seg.free_order, "optimal": seg.optimal,
                   "bottleneck_ms": round(seg.bottleneck_ms, 6), "lower_bound_ms": round(seg.lower_bound_ms, 6),
                   "seconds": round(seg.seconds, 3)},
        "predicted": {"stage_ms": [round(x, 6) for x in seg.stage_ms],
                      "bottleneck_ms": round(seg.bottleneck_ms, 6),
                      "throughput_per_s": round(1000.0 / seg.bottleneck_ms, 3) if seg.bottleneck_ms else None,
                      "single_tpu_ms": round(one.time_ms, 6),
                      "speedup_vs_single_tpu": round(one.time_ms / seg.bottleneck_ms, 4) if seg.bottleneck_ms
                      else None},
        "cost_model": seg.cost_model.to_dict(),
        "cut_bytes": list(seg.cut_bytes),
        "segments": segments,
        "edgetpu_compatible": int_ok,
        "edgetpu_note": ("full-integer model: compile every segment with the commands below" if int_ok else
                         "not a full-integer model: the Edge TPU compiler accepts only int8/uint8-quantized models; "
                         "these segments run in LiteRT/TFLM but cannot be compiled for the Edge TPU"),
        "edgetpu_compiler": edgetpu_compiler_commands(paths),
        "edgetpu_compiler_note": "run in this directory; each segment is compiled on its own (one Edge TPU each)",
        "runner": ("pycoral.pipeline.pipelined_model_runner.PipelinedModelRunner over one interpreter per "
                   "compiled segment (make_interpreter(path, device=':<k>')), in segment order; tensors are "
                   "matched by name"),
    }
    _write_manifest(out_dir, manifest)
    return manifest, files


def _write_manifest(out_dir: str, manifest: dict) -> None:
    with open(os.path.join(out_dir, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def _tname(code) -> str:
    from .reader import _type_name

    return _type_name(code)


def _is_const(tg, t) -> bool:
    from .reader import is_constant

    return is_constant(tg.model, t)


def run_segments(bufs: Sequence[bytes], inputs: dict) -> dict:
    """Run segment files in sequence in LiteRT, passing tensors by name; returns the last segment's outputs.

    ``inputs`` holds the model inputs by name. A tensor stays available to
    every later segment (as in Coral's pipelined runner).
    """
    import numpy as np

    from .verify import litert_interpreter

    env = dict(inputs)
    out: dict = {}
    for i, buf in enumerate(bufs):
        it = litert_interpreter(buf)
        for d in it.get_input_details():
            if d["name"] not in env:
                raise MemschedError(f"segment {i} needs tensor '{d['name']}', which no earlier segment produces")
            it.set_tensor(d["index"], env[d["name"]])
        it.invoke()
        out = {d["name"]: np.array(it.get_tensor(d["index"])) for d in it.get_output_details()}
        env.update(out)
    return out


def coral_export(tg, k: int, out_dir: str, *, method: str = "auto", schedule_time_limit: float | None = None,
                 free_order: bool = True, time_limit: float = 10.0, cost_model: EdgeTpuCostModel | None = None,
                 verify: bool = True, trials: int = 2, seed: int = 0, source: str | None = None,
                 segmenter: str = "exact", progress=None) -> tuple[dict, Segmentation]:
    """Schedule ``tg`` (a :class:`~.reader.TFLiteGraph`), segment it into ``k`` stages, write the segments
    and the manifest to ``out_dir`` and (``verify``) check the chained segments against the whole model in
    LiteRT on ``trials`` random inputs; the result lands in the manifest's ``validation``.

    ``segmenter="exact"`` cuts the scheduled order optimally (and with
    ``free_order`` lets CP-SAT change the order); ``"learned"`` uses the learned
    segmenter of :mod:`.coral_learned` (its decodes plus the exact cut of the
    scheduled order; no optimality proof)."""
    from ..schedulers import schedule
    from .verify import compare_litert

    if segmenter not in ("exact", "learned"):
        raise MemschedError(f"unknown segmenter {segmenter!r}; use 'exact' or 'learned'")
    g = tg.graph
    base = schedule(g, method, time_limit=schedule_time_limit, progress=progress)
    if segmenter == "learned":
        from .coral_learned import segment_learned

        seg = segment_learned(g, k, cost_model=cost_model, order=base.order)
    else:
        seg = segment(g, k, order=base.order, free_order=free_order, time_limit=time_limit,
                      cost_model=cost_model)
    if progress:
        progress(f"segmentation ({seg.method}): bottleneck {seg.bottleneck_ms:.4f} ms, stages "
                 f"{', '.join(f'{x:.4f}' for x in seg.stage_ms)} ms")
    manifest, files = write_segments(tg, seg, out_dir, source=source)
    manifest["schedule"] = {"method": method, "peak_bytes": base.peak_bytes, "optimal": base.optimal}
    if verify:
        bufs = [b for _, b in files]
        cmp = compare_litert(tg.buf, None, trials=trials, seed=seed, run_b=lambda feeds: run_segments(bufs, feeds))
        manifest["validation"] = {"runtime": "LiteRT (builtin kernels, no delegate)", "identical": cmp.identical,
                                  "trials": cmp.trials, "outputs": cmp.outputs, "mismatches": cmp.mismatches}
        _write_manifest(out_dir, manifest)
    return manifest, seg
