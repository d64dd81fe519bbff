"""Exact segmentation of a graph into K pipeline stages: the DP over the given order, then CP-SAT.

Example
-------
>>> from tvm_memsched.core import coral_dag
>>> g = coral_dag(20, seed=1)
>>> fixed = segment(g, 3)                                  # the best cut of the program order
>>> free = segment(g, 3, free_order=True, time_limit=5)    # any order: CP-SAT, started from the better one
>>> fixed.method, free.method, free.bottleneck_ms <= fixed.bottleneck_ms
('dp', 'cp-sat', True)
"""

from __future__ import annotations

import time
from typing import Sequence

from ...core.errors import MemschedError
from ...core.graph import Graph
from ...core.orders import program_order
from .cost import DEFAULT_COST_MODEL, PS_PER_MS, EdgeTpuCostModel, Segmentation, StageCosts, stage_figures
from .learned import segment_learned
from .solve import cpsat_segment, dp_segment

__all__ = ["segment"]


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
    (:mod:`.learned`) when that beats the DP's, so the result is never
    worse than either. Stages keep ``order``'s
    relative order of their ops.
    """
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
    costs = StageCosts(graph, cm)
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
    figs, cut = stage_figures(costs, stage_of, k)
    worst = max(f.time_ps for f in figs)
    if worst != best:
        raise AssertionError(f"segmentation: solver bottleneck {best} ps != evaluated {worst} ps (internal error)")
    stages = [[graph.ops[v].name for v in st] for st in stages_ids]
    return Segmentation(stages=stages, order=[o for st in stages for o in st], figures=figs,
                        bottleneck_ms=best / PS_PER_MS, lower_bound_ms=lower / PS_PER_MS, optimal=bool(optimal),
                        method=method, free_order=bool(free_order), cut_bytes=cut, cost_model=cm,
                        seconds=time.perf_counter() - start, stats=stats)
