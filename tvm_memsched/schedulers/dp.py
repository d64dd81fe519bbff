"""SERENITY: dynamic programming over executed-op sets, soft budgets, divide and conquer.

``method="dp"`` finds a minimum-peak order and proves it, within a time and a
state limit (when a limit is hit, the best order found so far is returned with
``optimal=False``). Ingredients:

* **Signature DP** (:mod:`.search`): states are executed-op bitsets; per state only
  the lowest-peak partial schedule is kept. Chains are fused into macro steps
  only where that provably keeps the optimum (:mod:`.fusion`).
* **Budgets.** The hard budget is the peak of the best heuristic order (the
  cheap orders, then a beam search over the same states). Three strategies
  choose the soft budget ``tau``:

  - ``"best-first"`` (default): expand states in order of their peak, which is
    the tightest soft budget possible (it only ever expands states below the
    optimum, plus ties), reuses all work, and keeps a proven lower bound;
  - ``"serenity"``: the paper's Algorithm 2, verbatim: a level-by-level DP per
    attempt with a step limit, ``tau`` halved on timeout and moved halfway back
    on "no solution", starting from the hard budget;
  - ``"adaptive"``: Algorithm 2 improved: the first attempt uses the lower bound
    as ``tau`` (a solution there is optimal at once), every "no solution" raises
    the proven lower bound, every timeout lowers ``tau`` towards it, and ``tau``
    stays inside [proven lower bound, best known peak).

* **Divide and conquer**: the graph is cut where every schedule must have run
  exactly a given set of ops (all ops before the cut are ancestors of all ops
  after it, the hourglass of stacked cells). Parts are scheduled independently
  and concatenated; since the live set at a cut is the same for every
  schedule, this keeps the optimum. Parts are solved from the highest
  heuristic peak down, and a part stops as soon as it cannot be the bottleneck.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> r = schedule_dp(example_graph(), time_limit=30)
>>> r.optimal, r.peak_bytes <= 467200
(True, True)
"""

from __future__ import annotations

import time

from ..core.graph import Graph, bitset
from ..core.orders import kahn_order, program_order, rpo_order
from ..core.simulate import footprints, peak_of_ids
from ..core.bounds import must_live_bounds
from ..core.errors import UnsupportedError
from .base import (Deadline, ScheduleResult, cut_bound_if_needed, graph_lower_bound, make_result,
                   peak_candidates)
from .greedy import greedy_order
from .registry import register
from .search import Problem, beam_search, best_first, level_dp

__all__ = ["schedule_dp", "split_points", "schedule_parts", "heuristic_order"]


def split_points(graph: Graph) -> list[int]:
    """Positions ``k`` in ``graph.topo`` where the prefix ``topo[:k]`` is forced.

    A prefix ``A`` is forced (every schedule runs all of ``A`` before any other op)
    exactly when every op outside ``A`` has every op of ``A`` as an ancestor. Only
    cuts with ops on both sides are returned.
    """
    topo = graph.topo
    n = len(topo)
    if n < 2:
        return []
    anc = graph.ancestors_masks()
    # suffix intersection of ancestor sets
    inter = [0] * (n + 1)
    inter[n] = -1  # all ones
    for k in range(n - 1, -1, -1):
        inter[k] = inter[k + 1] & anc[topo[k]]
    cuts = []
    prefix = 0
    for k in range(1, n):
        prefix |= 1 << topo[k - 1]
        if inter[k] & prefix == prefix:
            cuts.append(k)
    return cuts


def heuristic_order(graph: Graph) -> tuple[list[int], int, str]:
    """The lowest-peak order among program, Kahn, RPO and the memory-greedy order."""
    cands = [("program", program_order(graph)), ("kahn", kahn_order(graph)), ("rpo", rpo_order(graph))]
    cands.append(("greedy", greedy_order(graph)))
    best = min(cands, key=lambda c: peak_of_ids(graph, c[1]))
    return best[1], peak_of_ids(graph, best[1]), best[0]


def _serenity_search(problem: Problem, hard: int, hard_order: list[int], lower: int, deadline: Deadline,
                     step_limit: int, adaptive: bool, progress) -> tuple[list[int], int, int, bool, dict]:
    """Algorithm 2 (``adaptive=False``) or its improved form. Returns (order, peak, lower, proven, stats)."""
    attempts = []
    best_order, best_peak = hard_order, hard
    lo = lower  # proven: optimum >= lo
    if not adaptive:
        tau_old = tau_new = float(hard)
        flag = "no solution"
        first = True
        while not deadline.expired():
            if not first:
                if flag == "timeout":
                    tau_old, tau_new = tau_new, tau_new / 2
                elif flag == "no solution":
                    tau_old, tau_new = tau_new, (tau_new + tau_old) / 2
            first = False
            flag, order, peak, states = level_dp(problem, tau_new, step_limit=step_limit, deadline=deadline)
            attempts.append((round(tau_new), flag, states))
            if progress:
                progress(f"serenity: tau={tau_new:.0f} -> {flag} ({states} states)")
            if flag == "solution":
                return order, peak, peak, True, {"attempts": attempts}
            if flag == "no solution":
                lo = max(lo, int(tau_new) + 1)
                if lo >= best_peak:
                    return best_order, best_peak, best_peak, True, {"attempts": attempts}
            if len(attempts) > 64:  # Algorithm 2 can oscillate forever; give up
                break
        return best_order, best_peak, lo, lo >= best_peak, {"attempts": attempts}
    tau = lo
    limit = step_limit
    while not deadline.expired() and lo < best_peak:
        flag, order, peak, states = level_dp(problem, tau, step_limit=limit, deadline=deadline)
        attempts.append((tau, flag, states))
        if progress:
            progress(f"adaptive: tau={tau} in [{lo}, {best_peak}) -> {flag} ({states} states)")
        if flag == "solution":
            return order, peak, peak, True, {"attempts": attempts}
        if flag == "no solution":
            lo = tau + 1
            tau = (lo + best_peak) // 2
        else:  # timeout: tighten towards the proven bound; allow more steps next time
            tau = (lo + tau) // 2
            limit = int(limit * 1.5)
        tau = min(max(tau, lo), best_peak - 1)
    return best_order, best_peak, lo, lo >= best_peak, {"attempts": attempts}


def schedule_parts(graph: Graph, deadline: Deadline, *, divide: bool = True, fuse: bool = True,
                   strategy: str = "best-first", state_limit: int = 2_000_000, step_limit: int = 200_000,
                   start_order: list[int] | None = None, beam_widths=(8, 32, 128), lower: int = 0,
                   progress=None) -> tuple[list[int], int, dict]:
    """Exact search with divide and conquer.

    Each part first gets a beam search (``beam_widths``, up to 30% of the
    remaining time) for a strong hard budget, then the exact search. ``lower``
    is a lower bound already proven for the whole graph (parts stop at it).

    Returns ``(order ids, proven lower bound on the optimum, stats)``; the order is
    optimal when its peak equals the bound.
    """
    if strategy not in ("best-first", "serenity", "adaptive", "beam-only"):
        raise UnsupportedError(f"unknown dp strategy '{strategy}' (best-first, serenity, adaptive)")
    if start_order is None:
        start_order, _, _ = heuristic_order(graph)
    n = graph.num_ops
    cuts = split_points(graph) if divide else []
    bounds = [0] + cuts + [n]
    must_live = must_live_bounds(graph)
    # parts in linear time: orders by bucketing, resident bytes at each cut incrementally, and each part's
    # peak from one simulation of the concatenated orders; search problems only for the parts searched
    part_of = [0] * n
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        for v in graph.topo[a:b]:
            part_of[v] = k
    orders: list[list[int]] = [[] for _ in range(len(bounds) - 1)]
    for v in start_order:
        orders[part_of[v]].append(v)
    stable, transient = footprints(graph, [v for o in orders for v in o])
    peaks, t0s, masks, lbs = [], [], [], []
    pos = 0
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        ids = graph.topo[a:b]
        masks.append(bitset(ids))
        lbs.append(int(max(must_live[v] for v in ids)) if ids else 0)
        t0s.append(transient[pos])
        peaks.append(max(stable[pos:pos + len(ids)], default=0))
        pos += len(ids)
    prefixes = []
    prefix = 0
    for m in masks:
        prefixes.append(prefix)
        prefix |= m

    class _Lazy:
        """A part's search problem, built on first use."""

        def __init__(self, k):
            self.k, self._p = k, None

        def get(self):
            if self._p is None:
                self._p = Problem(graph, ops=masks[self.k], start=prefixes[self.k], fuse=fuse, t0=t0s[self.k])
            return self._p

    parts = [(_Lazy(k), orders[k], lbs[k]) for k in range(len(masks))]
    global_lb = max(graph_lower_bound(graph), lower)
    states = expanded = 0
    statuses: list = []
    for idx in sorted(range(len(parts)), key=lambda i: -peaks[i]):
        lazy, _, part_lb = parts[idx]
        if peaks[idx] <= global_lb:
            statuses.append("not-bottleneck")  # cannot raise the peak: keep the heuristic order
            continue
        if deadline.expired():
            statuses.append("skipped-timeout")
            continue
        pr = lazy.get()
        if beam_widths:  # a strong hard budget first: beam search on this part
            share = deadline.share(0.3)
            for w in beam_widths:
                if peaks[idx] <= max(part_lb, global_lb) or share.expired():
                    break
                b_order, b_peak = beam_search(pr, w, deadline=share)
                if b_order is not None and b_peak < peaks[idx]:
                    orders[idx], peaks[idx] = b_order, b_peak
            if peaks[idx] <= global_lb:
                statuses.append("beam-good-enough")
                continue
        if strategy == "beam-only":
            statuses.append("beam")
            continue
        if strategy == "best-first":
            res = best_first(pr, upper=peaks[idx], upper_order=orders[idx], lower=part_lb,
                             good_enough=global_lb, deadline=deadline, state_limit=state_limit,
                             progress=progress)
            order, peak, low = res.order, res.peak, res.lower
            states += res.states
            expanded += res.expanded
            statuses.append(res.status)
        else:
            order, peak, low, _, st = _serenity_search(pr, peaks[idx], orders[idx], part_lb, deadline,
                                                       step_limit, strategy == "adaptive", progress)
            states += sum(a[2] for a in st["attempts"])
            statuses.append(st["attempts"])
        if peak < peaks[idx]:
            orders[idx], peaks[idx] = order, peak
        global_lb = max(global_lb, low)  # low is a proven bound on this part, hence on the graph
    order = [v for o in orders for v in o]
    stats = {"parts": len(parts), "part_sizes": [bin(m).count("1") for m in masks],
             "macros": sum(lz._p.num_macros for lz, _, _ in parts if lz._p is not None), "states": states,
             "expanded": expanded,
             "strategy": strategy, "part_status": statuses}
    return order, global_lb, stats


@register("dp", "SERENITY dynamic programming (signature DP, soft budgets, divide and conquer)", exact=True)
def schedule_dp(graph: Graph, *, time_limit: float | None = None, progress=None, strategy: str = "best-first",
                divide: bool = True, fuse: bool = True, state_limit: int = 2_000_000,
                step_limit: int = 200_000, beam_widths=(8, 32, 128), deterministic: bool = False) -> ScheduleResult:
    """``deterministic``: count ``time_limit`` as deterministic work (same result under any load)."""
    start = time.perf_counter()
    deadline = Deadline.deterministic(time_limit) if deterministic else Deadline(time_limit)
    h_order, h_peak, h_name = heuristic_order(graph)
    order, proven_lb, stats = schedule_parts(graph, deadline, divide=divide, fuse=fuse, strategy=strategy,
                                             state_limit=state_limit, step_limit=step_limit,
                                             start_order=h_order, beam_widths=beam_widths, progress=progress)
    peak = peak_of_ids(graph, order)
    if peak > h_peak:  # cannot happen (parts only improve), but never return worse
        order, peak = h_order, h_peak
    proven_lb = cut_bound_if_needed(graph, peak, proven_lb, deadline,
                                    candidates=peak_candidates(graph, order))
    stats.update(heuristic=h_name, heuristic_peak=h_peak, proven_lower_bound=proven_lb)
    return make_result(graph, order, "dp", start, proven=peak <= proven_lb, stats=stats, lower=proven_lb)


@register("beam", "beam search over executed-op sets (keeps the best partial schedules per step)")
def schedule_beam(graph: Graph, *, time_limit: float | None = None, progress=None, width: int = 64,
                  fuse: bool = True, deterministic: bool = False) -> ScheduleResult:
    """Beam search with divide and conquer; never worse than the cheap orders."""
    start = time.perf_counter()
    deadline = Deadline.deterministic(time_limit) if deterministic else Deadline(time_limit)
    h_order, h_peak, _ = heuristic_order(graph)
    order, _, stats = schedule_parts(graph, deadline, fuse=fuse, start_order=h_order, beam_widths=(width,),
                                     strategy="beam-only", progress=progress)
    if peak_of_ids(graph, order) > h_peak:
        order = h_order
    return make_result(graph, order, "beam", start, stats={"width": width, "parts": stats["parts"]})
