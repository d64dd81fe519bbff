"""Learned Coral segmentation: RESPECT's per-op stage prediction, decoded into a valid pipeline.

RESPECT (Yin et al., DAC 2023) trains a network on small synthetic graphs to
predict, for every op, the Edge TPU stage an exact solver would put it on, and
repairs dependency violations afterwards. This module is the inference side
of our version; the weights ship in ``tflite/data/coral_segmenter.npz`` and
everything here is numpy. Training is ``scripts/train_coral_segmenter.py``
(PyTorch, optional), on :func:`~tvm_memsched.core.coral_dag` graphs labelled by
the exact segmentation of :func:`.segment.segment` (CP-SAT over all orders).

Model
-----
For every op ``v`` and every boundary ``j`` between stage ``j`` and ``j + 1``
of a K-stage pipeline, an MLP gives the logit of ``[stage(v) > j]`` (an ordinal
formulation, so one model serves every K). Its inputs are scale-free:

* op features (:data:`OP_FEATURES`): the share of the graph's compute and
  parameters in the op and its ancestors / descendants (what must run no later
  / no earlier than it), its own compute and parameters, the link time of its
  outputs and of every tensor leaving the set {op and its ancestors} (what a
  cut right after that set would transfer), topological level and height,
  degrees;
* graph features (:data:`GRAPH_FEATURES`): how the single-TPU time splits into
  compute, parameter streaming and activation transfers, parameters per SRAM;
* boundary features (:data:`BOUNDARY_FEATURES`): the boundary's position
  ``(j + 1) / K``, the op's cumulative shares minus it, the parameters a
  balanced stage would hold per SRAM, the op's output and downset-cut transfers
  per balanced stage time.

Decoding (valid by construction)
--------------------------------
1. The expected stage ``z_v = sum_j sigmoid(logit[v, j])`` orders the ops:
   Kahn's algorithm always takes the ready op of smallest ``z`` (so the order
   is topological; RESPECT's post-inference repair is not needed).
2. The K stages are the contiguous cut of that order with the highest model
   likelihood (Viterbi over positions x stages, every stage non-empty).
3. Polishing: the exact dynamic program of :func:`.solve.window_dp` moves every
   cut within ``window`` positions (exact stage times, ``O(K * window * n)``;
   by default every position on graphs up to ~150 ops); the best decoded order
   is then cut exactly over all positions (``final_dp``, ``O(n^2)``).
4. ``samples`` extra decodes perturb the logits with logistic noise; every
   candidate is evaluated exactly with the cost model and the fastest wins.
   Given an ``order`` (``tvm-memsched coral --segmenter learned`` passes the
   memory schedule), its exact optimal cut is one more candidate, so the
   result is never slower than cutting that order.
5. Refinement: :func:`local_search` moves single ops out of the slowest stage
   while that lowers the stage times (exact evaluation of the stages touched).

The result is a :class:`.cost.Segmentation` with ``method="learned"``; its
``lower_bound_ms`` is the trivial bound (compute / K, the slowest op, the model
inputs' and outputs' transfers), so ``optimal`` is only claimed when that bound
is met.

Example
-------
>>> from tvm_memsched.core import coral_dag
>>> g = coral_dag(40, seed=2)
>>> s = segment_learned(g, 3)
>>> s.method, s.k, sorted(sum(s.stages, [])) == sorted(op.name for op in g.ops)
('learned', 3, True)
>>> s.bottleneck_ms >= s.lower_bound_ms
True
"""

from __future__ import annotations

import heapq
import math
import os
import time
from typing import Sequence

import numpy as np

from ...core.errors import MemschedError
from ...core.graph import Graph
from ...schedulers.weights import load_weights, write_weights_npz
from .cost import (DEFAULT_COST_MODEL, PS_PER_MS, EdgeTpuCostModel, Segmentation, StageCosts, stage_figures,
                   stage_members, stage_param_bytes, stage_tensors)
from .solve import dp_segment, window_dp

__all__ = ["OP_FEATURES", "GRAPH_FEATURES", "BOUNDARY_FEATURES", "FEATURE_VERSION", "SegmenterModel",
           "load_segmenter", "default_segmenter_path", "save_segmenter", "segmenter_features", "decode",
           "segment_learned", "local_search", "stage_times", "default_window", "trivial_lower_bound_ps"]

#: bumped whenever a feature's definition changes (weights record the version they were trained on)
FEATURE_VERSION = 1
#: the ``format`` of the segmenter's weights files
WEIGHTS_FORMAT = "tvm_memsched.coral_segmenter/1"

OP_FEATURES = (
    "anc_compute",      # compute of the op and its ancestors / total compute
    "desc_compute",     # compute of the op and its descendants / total compute
    "anc_params",       # parameter bytes of the op and its ancestors / total parameter bytes
    "desc_params",      # parameter bytes of the op and its descendants / total
    "anc_params_sram",  # log1p(parameter bytes of the op and its ancestors / SRAM)
    "compute",          # log1p(n * own compute / total compute)
    "params",           # own parameter bytes / SRAM
    "out_link",         # log1p(link time of its outputs / (single-TPU time / n))
    "level",            # ASAP level / depth
    "height",           # longest path to a sink / depth
    "in_degree",        # log1p(#predecessors) / 2
    "out_degree",       # log1p(#successors) / 2
    "is_output",        # writes a model output
    "downset_cut",      # log1p(link time of the tensors leaving {op and its ancestors} / (single-TPU time / n))
)

GRAPH_FEATURES = (
    "compute_share",    # compute / single-TPU time
    "stream_share",     # parameter streaming / single-TPU time
    "io_share",         # model input + output transfer / single-TPU time
    "acts_link",        # log1p(link time of every activation / single-TPU time)
    "params_sram",      # log1p(total parameter bytes / SRAM)
    "log_n",            # log(n) / 7
)

BOUNDARY_FEATURES = (
    "b",                # (j + 1) / K
    "inv_k",            # 1 / K
    "anc_minus_b",      # anc_compute - b
    "before_minus_b",   # (1 - desc_compute) - b: compute that may run before the op, minus b
    "ancp_minus_b",     # anc_params - b
    "stage_params",     # log1p(total params / K / SRAM)
    "out_link_stage",   # link time of the op's outputs / (single-TPU time / K)
    "downset_cut_stage",  # link time of the tensors leaving {op and its ancestors} / (single-TPU time / K)
)

NO, NG, NB = len(OP_FEATURES), len(GRAPH_FEATURES), len(BOUNDARY_FEATURES)
N_IN = NO + NG + NB


# --------------------------------------------------------------------------- features
class _Features:
    """Per-op and per-graph features of ``graph`` under a cost model (independent of K)."""

    def __init__(self, graph: Graph, costs: StageCosts):
        g = graph
        n = g.num_ops
        self.n = n
        topo = list(g.topo)
        cps = np.array(costs.cps, dtype=np.float64)
        pb = np.array([sum(nb for _, nb in costs.params[v]) for v in range(n)], dtype=np.float64)
        # ancestor / descendant sets as boolean matrices (op ids), built along the topological order
        anc = np.zeros((n, n), dtype=bool)
        for v in topo:
            for p in g.preds[v]:
                anc[v] |= anc[p]
                anc[v, p] = True
        desc = anc.T
        eye = np.eye(n, dtype=bool)
        c_tot = float(cps.sum()) or 1.0
        p_tot = float(pb.sum())
        sram = float(max(costs.sram, 1))
        io_model = sum(g.size[t] for t in g.input_ids) + sum(g.size[t] for t in g.output_ids)
        stream1 = costs.stream * max(0.0, p_tot - costs.sram)
        t1 = float(cps.sum() + stream1 + costs.link * io_model) or 1.0
        out_link = np.array([costs.link * g.output_bytes[v] for v in range(n)], dtype=np.float64)
        level = [0] * n
        for v in topo:
            if g.preds[v]:
                level[v] = 1 + max(level[p] for p in g.preds[v])
        height = [0] * n
        for v in reversed(topo):
            if g.succs[v]:
                height[v] = 1 + max(height[s] for s in g.succs[v])
        depth = float(max(1, max(level, default=0)))
        x = np.zeros((n, NO))
        x[:, 0] = ((anc | eye) @ cps) / c_tot
        x[:, 1] = ((desc | eye) @ cps) / c_tot
        x[:, 2] = ((anc | eye) @ pb) / p_tot if p_tot > 0 else 0.0
        x[:, 3] = ((desc | eye) @ pb) / p_tot if p_tot > 0 else 0.0
        x[:, 4] = np.log1p(((anc | eye) @ pb) / sram)
        x[:, 5] = np.log1p(n * cps / c_tot)
        x[:, 6] = pb / sram
        x[:, 7] = np.log1p(out_link / (t1 / max(n, 1)))
        x[:, 8] = np.array(level) / depth
        x[:, 9] = np.array(height) / depth
        x[:, 10] = np.log1p([len(g.preds[v]) for v in range(n)]) / 2
        x[:, 11] = np.log1p([len(g.succs[v]) for v in range(n)]) / 2
        x[:, 12] = [1.0 if any(g.is_output[t] for t in g.op_outputs[v]) else 0.0 for v in range(n)]
        # bytes crossing the cut right after the downset {v and its ancestors}: tensors produced inside it
        # and read outside it (or model outputs)
        down = anc | eye
        cut = np.zeros(n)
        for t in range(g.num_tensors):
            p = g.producer[t]
            if p < 0:
                continue
            inside = down[:, p].copy()
            if not g.is_output[t]:
                cons = list(g.consumers[t])
                if not cons:
                    continue
                inside &= ~down[:, cons].all(axis=1)
            cut += g.size[t] * inside
        self.cut_link = costs.link * cut
        x[:, 13] = np.log1p(self.cut_link / (t1 / max(n, 1)))
        self.x = x
        self.glob = np.array([
            float(cps.sum()) / t1, stream1 / t1, costs.link * io_model / t1,
            math.log1p(costs.link * float(sum(g.size)) / t1), math.log1p(p_tot / sram), math.log(max(n, 1)) / 7])
        self.p_tot, self.sram, self.t1, self.out_link = p_tot, sram, t1, out_link

    def inputs(self, k: int) -> np.ndarray:
        """The model's input rows, ``(n * (k - 1)) x N_IN``, op-major (row ``v * (k - 1) + j``)."""
        n, x = self.n, self.x
        nb = k - 1
        rows = np.zeros((n, nb, N_IN))
        rows[:, :, :NO] = x[:, None, :]
        rows[:, :, NO:NO + NG] = self.glob
        b = (np.arange(nb) + 1.0) / k
        o = NO + NG
        rows[:, :, o] = b
        rows[:, :, o + 1] = 1.0 / k
        rows[:, :, o + 2] = x[:, 0:1] - b
        rows[:, :, o + 3] = (1.0 - x[:, 1:2]) - b
        rows[:, :, o + 4] = x[:, 2:3] - b
        rows[:, :, o + 5] = math.log1p(self.p_tot / k / self.sram)
        rows[:, :, o + 6] = (self.out_link / (self.t1 / k))[:, None]
        rows[:, :, o + 7] = (self.cut_link / (self.t1 / k))[:, None]
        return rows.reshape(n * nb, N_IN)


def segmenter_features(graph: Graph, k: int, cost_model: EdgeTpuCostModel | None = None) -> np.ndarray:
    """The model's input matrix for ``graph`` split into ``k`` stages: shape ``(num_ops * (k - 1), N_IN)``."""
    return _Features(graph, StageCosts(graph, cost_model or DEFAULT_COST_MODEL)).inputs(k)


# --------------------------------------------------------------------------- model
class SegmenterModel:
    """An MLP ``N_IN -> hidden... -> 1`` (ReLU) giving the logit of ``[stage(v) > j]`` per row."""

    def __init__(self, params: dict, config: dict):
        self.config = dict(config)
        self.meta: dict = {}
        self.layers = int(config["layers"])
        self.p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
        self.mean = self.p.get("in_mean", np.zeros(N_IN))
        self.std = self.p.get("in_std", np.ones(N_IN))

    def logits(self, rows: np.ndarray) -> np.ndarray:
        h = (rows - self.mean) / self.std
        for i in range(self.layers):
            h = np.maximum(h @ self.p[f"W{i}"] + self.p[f"b{i}"], 0.0)
        return h @ self.p["Wout"] + self.p["bout"]


def param_shapes(config: dict) -> dict:
    """Names and shapes of the segmenter's parameters."""
    hidden = int(config["hidden"])
    shapes = {"in_mean": (N_IN,), "in_std": (N_IN,)}
    d = N_IN
    for i in range(int(config["layers"])):
        shapes[f"W{i}"] = (d, hidden)
        shapes[f"b{i}"] = (hidden,)
        d = hidden
    shapes["Wout"] = (d,)
    shapes["bout"] = ()
    return shapes


def default_segmenter_path() -> str:
    """The shipped weights, ``tvm_memsched/tflite/data/coral_segmenter.npz``."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "coral_segmenter.npz")


_CACHE: dict = {}


def save_segmenter(path: str, params: dict, config: dict, extra_meta: dict | None = None) -> dict:
    """Write weights (float32) and metadata (config, feature lists and version, parameter hash)."""
    return write_weights_npz(path, params, {"format": WEIGHTS_FORMAT, "feature_version": FEATURE_VERSION,
                                            "config": config, "op_features": list(OP_FEATURES),
                                            "graph_features": list(GRAPH_FEATURES),
                                            "boundary_features": list(BOUNDARY_FEATURES)}, extra_meta)


def load_segmenter(path: str | None = None) -> SegmenterModel:
    """Load (and cache) segmenter weights; checks the format, feature version, shapes and parameter hash."""
    return load_weights(path or default_segmenter_path(), SegmenterModel, _CACHE, format=WEIGHTS_FORMAT,
                        feature_version=FEATURE_VERSION, what="Coral segmenter",
                        train="train them with scripts/train_coral_segmenter.py", param_shapes=param_shapes)


# --------------------------------------------------------------------------- decoding
def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def priority_order(graph: Graph, key: np.ndarray) -> list:
    """Kahn's algorithm taking the ready op of smallest ``key[v]`` (ties: topological position)."""
    g = graph
    pos = {v: i for i, v in enumerate(g.topo)}
    indeg = [len(g.preds[v]) for v in range(g.num_ops)]
    heap = [(float(key[v]), pos[v], v) for v in range(g.num_ops) if indeg[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, _, v = heapq.heappop(heap)
        order.append(v)
        for s in g.succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, (float(key[s]), pos[s], s))
    return order


def viterbi_cuts(logits: np.ndarray, order: Sequence[int], k: int) -> list:
    """Start positions of stages 1..k-1 of the most likely contiguous, non-empty k-stage cut of ``order``.

    ``logits[v, j]`` is the logit of ``[stage(v) > j]``; the score of op ``v`` at
    stage ``s`` is ``sum_{j<s} log sig(l_vj) + sum_{j>=s} log sig(-l_vj)``.
    """
    n = len(order)
    if k == 1:
        return []
    lo = logits[np.asarray(order)]                       # n x (k-1)
    up, down = _log_sigmoid(lo), _log_sigmoid(-lo)
    # score[i, s] = sum_{j<s} up[i, j] + sum_{j>=s} down[i, j]
    cu = np.concatenate([np.zeros((n, 1)), np.cumsum(up, axis=1)], axis=1)
    cd = np.concatenate([np.cumsum(down[:, ::-1], axis=1)[:, ::-1], np.zeros((n, 1))], axis=1)
    score = cu + cd
    neg = -np.inf
    f = np.full(k, neg)
    f[0] = score[0, 0]
    adv = np.zeros((n, k), dtype=bool)            # adv[i, s]: op i starts stage s
    for i in range(1, n):
        stay = f
        move = np.concatenate([[neg], f[:-1]])
        take = move > stay
        # stage s at position i needs s <= i and enough positions left for the stages after it
        f = np.where(take, move, stay) + score[i]
        s_max = min(k - 1, i)
        s_min = max(0, k - (n - i))
        f[s_max + 1:] = neg
        f[:s_min] = neg
        adv[i] = take
    cuts = []
    s = k - 1
    for i in range(n - 1, 0, -1):
        if s == 0:
            break
        if adv[i, s]:
            cuts.append(i)
            s -= 1
    return sorted(cuts)


def decode(graph: Graph, logits: np.ndarray, k: int, costs: StageCosts, window: int) -> tuple:
    """One decode of ``logits`` (n x (k-1)): ``(order, polished cuts, raw ps, polished ps)``."""
    z = (1.0 / (1.0 + np.exp(-logits))).sum(axis=1) if k > 1 else np.zeros(graph.num_ops)
    order = priority_order(graph, z)
    cuts = viterbi_cuts(logits, order, k)
    raw_ps = _bottleneck(costs, order, cuts)
    if window > 0 and k > 1:
        pcuts, ps = window_dp(costs, order, cuts, window)
    else:
        pcuts, ps = cuts, raw_ps
    return order, pcuts, raw_ps, ps


def _stage_of(n: int, order: Sequence[int], cuts: Sequence[int]) -> list:
    bounds = list(cuts) + [len(order)]
    stage_of = [0] * n
    s = 0
    for q, v in enumerate(order):
        while q >= bounds[s]:
            s += 1
        stage_of[v] = s
    return stage_of


def _bottleneck(costs: StageCosts, order: Sequence[int], cuts: Sequence[int]) -> int:
    figs, _ = stage_figures(costs, _stage_of(costs.graph.num_ops, order, cuts), len(cuts) + 1)
    return max(f.time_ps for f in figs)


def stage_times(costs: StageCosts, stage_of: Sequence[int], members: Sequence, stages: Sequence[int]) -> dict:
    """Integer times of some ``stages`` (``members[s]``: the ops of stage ``s``), as :func:`.cost.evaluate`
    computes them, at the cost of those stages only (:func:`.cost.stage_tensors`)."""
    size = costs.graph.size
    out: dict = {}
    for s in stages:
        ins, outs = stage_tensors(costs.graph, stage_of, members[s], s)
        out[s] = costs.stage_time(sum(costs.cps[v] for v in members[s]), stage_param_bytes(costs, members[s]),
                                  sum(size[t] for t in ins) + sum(size[t] for t in outs))
    return out


def local_search(costs: StageCosts, stage_of: Sequence[int], k: int, max_moves: int) -> tuple[list, int, int]:
    """Improve a stage assignment by moving single ops out of the slowest stage.

    A move takes an op of the slowest stage ``b`` with no successor in ``b`` to
    stage ``b + 1``, or one with no predecessor in ``b`` to ``b - 1`` (so stages
    stay monotone along edges and non-empty); the move that most reduces the
    stage times sorted slowest first (lexicographically) is applied, until none
    does or ``max_moves`` were made. Returns ``(stage_of, bottleneck_ps, moves)``.
    """
    g = costs.graph
    so = list(stage_of)
    members = stage_members(so, k)
    times = stage_times(costs, so, members, range(k))
    moves = 0
    while moves < max_moves:
        key = sorted(times.values(), reverse=True)
        b = max(range(k), key=lambda s: (times[s], -s))
        if len(members[b]) < 2:
            break
        best = None
        for v in members[b]:
            for t in (b + 1, b - 1):
                if not 0 <= t < k:
                    continue
                if t > b and any(so[w] == b for w in g.succs[v]):
                    continue
                if t < b and any(so[w] == b for w in g.preds[v]):
                    continue
                so[v] = t
                members[b].remove(v)
                members[t].append(v)
                nt = dict(times)
                nt.update(stage_times(costs, so, members, (b, t)))
                members[t].pop()
                members[b].append(v)
                so[v] = b
                nk = sorted(nt.values(), reverse=True)
                if nk < key and (best is None or nk < best[0]):
                    best = (nk, v, t, nt)
        if best is None:
            break
        _, v, t, times = best
        members[b].remove(v)
        members[t].append(v)
        so[v] = t
        moves += 1
    return so, max(times.values()), moves


def trivial_lower_bound_ps(costs: StageCosts, k: int) -> int:
    """No K-stage pipeline is faster: compute / K, the slowest op, the model inputs' / outputs' transfers."""
    g = costs.graph
    ins = sum(g.size[t] for t in g.input_ids)
    outs = sum(g.size[t] for t in g.output_ids)
    return int(max(-(-sum(costs.cps) // k), max(costs.cps, default=0), costs.link * ins, costs.link * outs))


def default_window(n: int) -> int:
    """The polishing window for ``n`` ops: every position up to ~150 ops, then ``20,000 / n`` (at least 8),
    which bounds the polishing DP to about 40,000 stage-row steps per decode."""
    return max(8, 20_000 // max(n, 1))


def segment_learned(graph: Graph, k: int, *, cost_model: EdgeTpuCostModel | None = None,
                    window: int | None = None, samples: int = 8, temperature: float = 1.0, seed: int = 0,
                    order: Sequence | None = None, final_dp: bool = True, refine_moves: int = 200,
                    weights: str | None = None,
                    model: SegmenterModel | None = None) -> Segmentation:
    """Split ``graph`` into ``k`` pipeline stages with the learned segmenter (see the module docstring).

    ``window``: positions every cut may move in the exact polishing DP (0: the
    model's cut as decoded; default :func:`default_window`, which polishes over
    every cut position of the decoded order on graphs up to ~150 ops);
    ``samples``: extra decodes with logistic noise of
    scale ``temperature`` on the logits (seeded by ``seed``); the fastest
    candidate under the cost model wins. ``order`` (op names or ids, e.g. the
    memory schedule): its exact optimal cut (:func:`.solve.dp_segment`,
    ``O(n^2)``) joins the candidates, so the result is never slower than
    cutting that order; ``None`` (the default) uses the model's decodes only.
    ``final_dp``: cut the best decoded order exactly over all positions
    (:func:`.solve.dp_segment`, ``O(n^2)``: about 0.7 s at 1,000 ops), which
    matters on large graphs where ``window`` is small.
    ``refine_moves``: at most this many improving single-op moves of
    :func:`local_search` on the best candidate (0: none).
    ``weights``: a .npz from ``scripts/train_coral_segmenter.py`` (default: the
    shipped one).
    """
    start = time.perf_counter()
    n = graph.num_ops
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise MemschedError(f"the number of stages must be a positive integer, got {k!r}")
    if k > n:
        raise MemschedError(f"cannot split {n} ops into {k} non-empty stages")
    if window is None:
        window = default_window(n)
    if window < 0 or samples < 0 or refine_moves < 0 or not temperature > 0:
        raise MemschedError(f"learned segmentation: window, samples and refine_moves must be >= 0 and "
                            f"temperature > 0, got window={window}, samples={samples}, "
                            f"refine_moves={refine_moves}, temperature={temperature}")
    cm = cost_model or DEFAULT_COST_MODEL
    costs = StageCosts(graph, cm)
    model = model or load_segmenter(weights)
    if k > 1:
        feats = _Features(graph, costs)
        logits = model.logits(feats.inputs(k)).reshape(n, k - 1)
    else:
        logits = np.zeros((n, 0))
    t_model = time.perf_counter() - start
    dec_order, cuts, raw_ps, best = decode(graph, logits, k, costs, window)
    best_order, best_cuts, best_from = dec_order, cuts, "greedy"
    rng = np.random.default_rng(seed)
    for _ in range(samples if k > 1 else 0):
        u = rng.uniform(1e-9, 1 - 1e-9, size=logits.shape)
        o, c, _, ps = decode(graph, logits + temperature * np.log(u / (1 - u)), k, costs, window)
        if ps < best:
            best_order, best_cuts, best, best_from = o, c, ps, "sample"
    if final_dp and k > 1 and window < n:
        # the exact cut of the best decoded order (the decodes' cuts only moved within ``window``)
        fcuts, fps = dp_segment(costs, best_order, k)
        if fps < best:
            best_cuts, best = fcuts, fps
    if order is not None:
        ids = graph.resolve_order(order)
        dcuts, dps = dp_segment(costs, ids, k)
        if dps < best:
            best_order, best_cuts, best, best_from = ids, dcuts, dps, "order-dp"
    stage_of = _stage_of(n, best_order, best_cuts)
    polished = best
    moves = 0
    if refine_moves > 0 and k > 1:
        stage_of, best, moves = local_search(costs, stage_of, k, refine_moves)
    pos = {v: i for i, v in enumerate(best_order)}
    best_order = sorted(range(n), key=lambda v: (stage_of[v], pos[v]))   # stage-monotone: topological
    figs, cut_bytes = stage_figures(costs, stage_of, k)
    worst = max(f.time_ps for f in figs)
    if worst != best:
        raise AssertionError(f"learned segmentation: decoded {best} ps != evaluated {worst} ps (internal error)")
    lb = best if k == 1 else trivial_lower_bound_ps(costs, k)     # one stage: the only segmentation
    stages = [[graph.ops[v].name for v in best_order if stage_of[v] == s] for s in range(k)]
    stats = {"raw_bottleneck_ms": raw_ps / PS_PER_MS, "decodes": 1 + (samples if k > 1 else 0),
             "best_from": best_from, "polished_ms": polished / PS_PER_MS, "refine_moves": moves, "window": window, "model_seconds": round(t_model, 4),
             "weights": model.meta.get("params_sha256", "")[:12]}
    return Segmentation(stages=stages, order=[o for st in stages for o in st], figures=figs,
                        bottleneck_ms=best / PS_PER_MS, lower_bound_ms=lb / PS_PER_MS, optimal=best <= lb,
                        method="learned", free_order=True, cut_bytes=cut_bytes, cost_model=cm,
                        seconds=time.perf_counter() - start, stats=stats)
