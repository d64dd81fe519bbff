"""The scheduler registry: one name per algorithm, one signature for all.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> from tvm_memsched.schedulers import schedule
>>> r = schedule(example_graph(), method="rpo")
>>> r.method, r.peak_bytes >= r.lower_bound_bytes
('rpo', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..core.errors import MemschedError, UnsupportedError
from ..core.graph import Graph
from ..core.simulate import peak_bytes
from .base import ScheduleResult

__all__ = ["register", "get_scheduler", "available_methods", "schedule", "SchedulerInfo"]


@dataclass(frozen=True)
class SchedulerInfo:
    name: str
    fn: Callable[..., ScheduleResult]
    description: str
    exact: bool  # can prove optimality


_REGISTRY: dict[str, SchedulerInfo] = {}


def register(name: str, description: str, exact: bool = False):
    """Decorator adding a scheduler function to the registry under ``name``."""
    def deco(fn):
        _REGISTRY[name] = SchedulerInfo(name, fn, description, exact)
        return fn
    return deco


def available_methods() -> list[str]:
    return list(_REGISTRY)


def get_scheduler(name: str) -> SchedulerInfo:
    info = _REGISTRY.get(name)
    if info is None:
        raise UnsupportedError(f"unknown scheduling method '{name}'; known: {', '.join(_REGISTRY)}")
    return info


def schedule(graph: Graph, method: str = "auto", *, time_limit: float | None = None,
             progress=None, **options) -> ScheduleResult:
    """Schedule ``graph`` with ``method`` and verify the result by re-simulating it.

    ``time_limit`` (seconds) bounds exact searches; when it is hit the best valid
    order found so far is returned with ``optimal=False``. ``None`` means the
    scheduler's own default (``auto``: a few seconds; ``dp``: no limit).
    """
    if time_limit is not None and not time_limit > 0:
        raise MemschedError(f"time limit must be a positive number of seconds, got {time_limit}")
    info = get_scheduler(method)
    if time_limit is not None:
        options["time_limit"] = time_limit
    result = info.fn(graph, progress=progress, **options)
    simulated = peak_bytes(graph, result.order)  # validates the order too
    if simulated != result.peak_bytes:
        raise AssertionError(f"{method} reported peak {result.peak_bytes} but the order simulates "
                             f"to {simulated} (internal error)")
    return result
