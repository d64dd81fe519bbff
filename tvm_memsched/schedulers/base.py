"""The result type every scheduler returns, and helpers shared by the schedulers.

Every scheduler has the signature::

    scheduler(graph, *, time_limit=None, progress=None, **options) -> ScheduleResult

and returns a valid order (a topological order of all ops), its simulated peak,
the graph's lower bound, and whether the peak is *proven* optimal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..core.bounds import lower_bound
from ..core.graph import Graph
from ..core.simulate import peak_of_ids

__all__ = ["ScheduleResult", "Deadline", "make_result", "graph_lower_bound", "cut_bound_if_needed"]

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class ScheduleResult:
    """An operator order and what is known about it.

    ``order`` holds op names, ``order_ids`` the same ops as ids. ``optimal`` is
    True only when the peak is proven minimal (by an exact search that finished,
    or because it equals the lower bound). ``stats`` holds scheduler-specific
    figures (states explored, iterations, solver gap...).
    """

    order: tuple[str, ...]
    peak_bytes: int
    lower_bound_bytes: int
    optimal: bool
    method: str
    seconds: float
    stats: dict = field(default_factory=dict)
    order_ids: tuple[int, ...] = ()

    @property
    def gap(self) -> float:
        """Relative distance of the peak from the lower bound (0.0 = at the bound)."""
        if self.lower_bound_bytes <= 0:
            return 0.0
        return self.peak_bytes / self.lower_bound_bytes - 1.0

    def to_dict(self) -> dict:
        return {"order": list(self.order), "peak_bytes": self.peak_bytes,
                "lower_bound_bytes": self.lower_bound_bytes, "optimal": self.optimal,
                "method": self.method, "seconds": round(self.seconds, 6), "stats": _jsonable(self.stats)}


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


class Deadline:
    """A wall-clock limit: ``Deadline(None)`` never expires."""

    def __init__(self, seconds: float | None):
        self.start = time.perf_counter()
        self.seconds = seconds
        self.end = None if seconds is None else self.start + max(0.0, seconds)

    def expired(self) -> bool:
        return self.end is not None and time.perf_counter() >= self.end

    def remaining(self) -> float | None:
        if self.end is None:
            return None
        return max(0.0, self.end - time.perf_counter())

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def sub(self, seconds: float | None) -> "Deadline":
        """A deadline that expires after ``seconds`` or with this one, whichever is first."""
        rem = self.remaining()
        if seconds is None:
            return Deadline(rem)
        return Deadline(seconds if rem is None else min(seconds, rem))


def graph_lower_bound(graph: Graph) -> int:
    """The graph's lower bound, computed once per graph object."""
    lb = getattr(graph, "_cached_lower_bound", None)
    if lb is None:
        lb = lower_bound(graph)
        graph._cached_lower_bound = lb
    return lb


def make_result(graph: Graph, ids: Sequence[int], method: str, start: float, *,
                proven: bool = False, stats: dict | None = None, peak: int | None = None,
                lower: int = 0) -> ScheduleResult:
    """Package an order of op ids as a :class:`ScheduleResult`.

    The peak is recomputed from the order (never trusted from the search);
    ``lower`` is a proven lower bound found by the scheduler (the result reports
    the best of it and the graph's cheap bound); ``optimal`` is ``proven`` or
    "the peak equals the lower bound".
    """
    ids = tuple(ids)
    simulated = peak_of_ids(graph, ids)
    if peak is not None and peak != simulated:
        raise AssertionError(f"{method}: search peak {peak} != simulated peak {simulated} (internal error)")
    lb = max(graph_lower_bound(graph), lower)
    if simulated < lb:
        raise AssertionError(f"{method}: peak {simulated} below the lower bound {lb} (internal error)")
    return ScheduleResult(order=tuple(graph.ops[v].name for v in ids), peak_bytes=simulated,
                          lower_bound_bytes=lb, optimal=bool(proven or simulated == lb), method=method,
                          seconds=time.perf_counter() - start, stats=dict(stats or {}), order_ids=ids)


def cut_bound_if_needed(graph: Graph, peak: int, lower: int, deadline: Deadline, share: float = 0.5,
                        candidates=None) -> int:
    """Raise ``lower`` with the cut bound when ``peak`` is not yet proven and time remains."""
    from ..core.bounds import cut_lower_bound

    if peak <= lower or deadline.expired():
        return lower
    rem = deadline.remaining()
    return max(lower, cut_lower_bound(graph, candidates, time_limit=None if rem is None else rem * share))
