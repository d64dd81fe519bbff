"""Baseline schedulers: program order, Kahn's algorithm and reverse post-order.

They wrap the orders of :mod:`tvm_memsched.core.orders` in the common scheduler
signature. They are optimal only when their peak happens to meet the lower bound.
"""

from __future__ import annotations

import time

from ..core.graph import Graph
from ..core.orders import kahn_order, program_order, rpo_order
from .base import ScheduleResult, make_result
from .registry import register

__all__ = ["schedule_program", "schedule_kahn", "schedule_rpo"]


@register("program", "the order the source program lists the ops in")
def schedule_program(graph: Graph, *, time_limit=None, progress=None) -> ScheduleResult:
    start = time.perf_counter()
    return make_result(graph, program_order(graph), "program", start)


@register("kahn", "Kahn's algorithm with a FIFO queue")
def schedule_kahn(graph: Graph, *, time_limit=None, progress=None) -> ScheduleResult:
    start = time.perf_counter()
    return make_result(graph, kahn_order(graph), "kahn", start)


@register("rpo", "reverse post-order of a depth-first search (TFLite / HMCOS baseline)")
def schedule_rpo(graph: Graph, *, time_limit=None, progress=None) -> ScheduleResult:
    start = time.perf_counter()
    return make_result(graph, rpo_order(graph), "rpo", start)
