"""Memory-greedy list scheduling: always run the ready op with the lowest stable footprint.

Ties go to the op leaving the fewest bytes resident. Linear-time per step in the
number of ready ops; a good cheap start for the exact searches.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> schedule_greedy(example_graph()).peak_bytes <= 598272
True
"""

from __future__ import annotations

import time

from ..core.graph import Graph
from .base import ScheduleResult, make_result
from .registry import register
from .search import Problem

__all__ = ["greedy_order", "schedule_greedy"]


def greedy_order(graph: Graph) -> list[int]:
    prob = Problem(graph, fuse=False)
    seq, _ = prob.greedy_completion(prob.start, prob.t0, prob.ready0, 0)
    return prob.expand_order(seq)


@register("greedy", "memory-greedy list scheduling (lowest stable footprint first)")
def schedule_greedy(graph: Graph, *, time_limit=None, progress=None) -> ScheduleResult:
    start = time.perf_counter()
    return make_result(graph, greedy_order(graph), "greedy", start)
