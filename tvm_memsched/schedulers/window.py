"""Exact re-optimization of a window of an order around its peak.

Given a valid order, the ops in positions ``[a, b)`` can be permuted in any
dependency-respecting way without touching the rest: the prefix runs first as
before and the live set after the window is the same for every permutation,
so the suffix's footprints do not change. Solving the window exactly (with the
DP of :mod:`.search`) and sliding it over the peak improves large orders where a
whole-graph proof is out of reach. The same idea underlies Zhong et al.'s
memory-aware partitioning: solve the parts around the peak exactly, keep cheap
orders elsewhere.

Example
-------
>>> from tvm_memsched.core import cell_network
>>> from tvm_memsched.core.orders import rpo_order
>>> from tvm_memsched.core.simulate import peak_of_ids
>>> g = cell_network(3, seed=0)
>>> order = rpo_order(g)
>>> better = improve_windows(g, order, time_limit=5)
>>> peak_of_ids(g, better) <= peak_of_ids(g, order)
True
"""

from __future__ import annotations

from ..core.graph import Graph, bitset
from ..core.simulate import footprints
from .base import Deadline
from .search import Problem, best_first

__all__ = ["improve_windows"]


def improve_windows(graph: Graph, order: list[int], *, time_limit: float | None = None,
                    deadline: Deadline | None = None, width: int = 24, max_width: int = 96,
                    lower: int = 0, state_limit: int = 200_000, progress=None) -> list[int]:
    """Lower the peak of ``order`` by exactly re-ordering windows around its peak steps.

    Stops at the deadline, when the peak reaches ``lower``, or when no window up
    to ``max_width`` ops around any peak step improves. Returns the best order.
    """
    deadline = deadline or Deadline(time_limit)
    order = list(order)
    n = len(order)
    if n < 2:
        return order
    w = min(width, n)
    tried: set[tuple[int, int, int]] = set()
    while not deadline.expired():
        stable, _ = footprints(graph, order)
        peak = max(stable)
        if peak <= lower:
            break
        improved = False
        peak_steps = [i for i, s in enumerate(stable) if s == peak]
        for k in peak_steps:
            for shift in (w // 2, w // 4, 3 * w // 4):
                a = max(0, min(k - shift, n - w))
                b = min(n, a + w)
                key = (a, b, peak)
                if key in tried:
                    continue
                tried.add(key)
                if deadline.expired():
                    break
                prefix, mask = bitset(order[:a]), bitset(order[a:b])
                outside = max([s for i, s in enumerate(stable) if i < a or i >= b], default=0)
                prob = Problem(graph, ops=mask, start=prefix)
                res = best_first(prob, upper=peak, upper_order=order[a:b], lower=lower,
                                 good_enough=outside, deadline=deadline, state_limit=state_limit)
                if res.peak < peak and res.order is not None:
                    order[a:b] = res.order
                    improved = True
                    if progress:
                        progress(f"window [{a}, {b}): peak {peak} -> {max(res.peak, outside)}")
                    break
            if improved:
                break
        if not improved:
            if w >= min(max_width, n):
                break
            w = min(n, w * 2, max_width)
    return order
