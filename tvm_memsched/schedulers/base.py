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

from ..core.bounds import lower_bound, must_live_bounds
from ..core.graph import Graph
from ..core.simulate import footprints, peak_of_ids

__all__ = ["ScheduleResult", "Deadline", "make_result", "graph_lower_bound", "cut_bound_if_needed",
           "peak_candidates"]

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
    """A budget of wall-clock seconds or of deterministic work units; ``Deadline(None)`` never expires.

    Searches call :meth:`expired` at a fixed rate of their own progress (every
    few hundred states, once per window or candidate). With a *work* budget
    (:meth:`deterministic`) each call costs one unit, so the search stops at the
    same point on any machine under any load: the same input always gives the
    same result, which a compiler pass needs. Child budgets (:meth:`sub`,
    :meth:`share`) charge their parents, so nested phases share one budget.

    >>> d = Deadline(None, work=3)
    >>> [d.expired() for _ in range(4)]
    [False, False, False, True]
    """

    #: conversion used by :meth:`deterministic` (roughly what one second buys on one core)
    WORK_PER_SECOND = 200
    #: a work budget also stops after this many times its seconds of wall clock: a unit of work grows with
    #: the graph (a random 2,000-operator DAG with every unread tensor an output spent 76 s of wall clock in
    #: 5 s worth of work); only a search that hits this backstop can differ between runs
    BACKSTOP_FACTOR = 3.0

    def __init__(self, seconds: float | None = None, *, work: float | None = None,
                 parent: "Deadline | None" = None, backstop: float | None = None):
        self.start = time.perf_counter()
        self.seconds = seconds
        self.end = None if seconds is None else self.start + max(0.0, seconds)
        self.work = None if work is None else max(0, int(work))
        self.backstop = None if backstop is None else self.start + max(0.0, backstop)
        self.used = 0
        self.parent = parent

    @classmethod
    def deterministic(cls, seconds: float | None) -> "Deadline":
        """A work budget worth about ``seconds`` of search (None: unlimited), with a wall-clock backstop
        (:data:`BACKSTOP_FACTOR`)."""
        if seconds is None:
            return cls(None)
        return cls(None, work=seconds * cls.WORK_PER_SECOND, backstop=seconds * cls.BACKSTOP_FACTOR)

    def _chain(self):
        d = self
        while d is not None:
            yield d
            d = d.parent

    @property
    def is_deterministic(self) -> bool:
        """True when the budget is counted in work only (no wall clock anywhere in the chain)."""
        chain = list(self._chain())
        return any(d.work is not None for d in chain) and all(d.end is None for d in chain)

    def expired(self) -> bool:
        hit = False
        now = None
        for d in self._chain():
            d.used += 1
            if d.work is not None and d.used > d.work:
                hit = True
            if d.end is not None or d.backstop is not None:
                now = time.perf_counter() if now is None else now
                hit = hit or (d.end is not None and now >= d.end) or (d.backstop is not None and now >= d.backstop)
        return hit

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` of work done outside (an external solver's deterministic time)."""
        units = int(seconds * self.WORK_PER_SECOND)
        for d in self._chain():
            d.used += units

    def remaining(self) -> float | None:
        """Seconds left on the tightest wall clock in the chain (None: no wall clock)."""
        ends = [d.end for d in self._chain() if d.end is not None]
        if not ends:
            return None
        return max(0.0, min(ends) - time.perf_counter())

    def remaining_work(self) -> float | None:
        """Work units left on the tightest work budget in the chain (None: unlimited)."""
        left = [d.work - d.used for d in self._chain() if d.work is not None]
        return max(0, min(left)) if left else None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def sub(self, seconds: float | None) -> "Deadline":
        """A child that ends after ``seconds`` (counted as work when this budget is deterministic)."""
        if seconds is None:
            return Deadline(None, parent=self)
        if self.is_deterministic:
            return Deadline(None, work=seconds * self.WORK_PER_SECOND, parent=self)
        return Deadline(seconds, parent=self)

    def share(self, fraction: float) -> "Deadline":
        """A child with ``fraction`` of what is left (time and work alike)."""
        rem, work = self.remaining(), self.remaining_work()
        return Deadline(None if rem is None else rem * fraction,
                        work=None if work is None else work * fraction, parent=self)

    def solver_seconds(self, fraction: float = 1.0) -> tuple[float | None, bool]:
        """``(seconds, deterministic)`` to give an external solver (CP-SAT) for ``fraction`` of what is left."""
        if self.is_deterministic:
            return self.remaining_work() * fraction / self.WORK_PER_SECOND, True
        rem = self.remaining()
        return (None if rem is None else rem * fraction), False


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
    """Raise ``lower`` with the cut bound when ``peak`` is not yet proven and budget remains."""
    from ..core.bounds import MUST_LIVE_MAX_OPS, cut_lower_bound

    if peak <= lower or deadline.expired() or graph.num_ops > MUST_LIVE_MAX_OPS:
        return lower    # on larger graphs one max-flow alone can outlast any time limit
    budget = deadline.share(share)
    return max(lower, cut_lower_bound(graph, candidates, should_stop=budget.expired))


def peak_candidates(graph: Graph, order: list[int], k: int = 16) -> list[int]:
    """Ops worth a cut bound (:func:`cut_bound_if_needed`): ``order``'s peak steps first, then the highest
    must-live bounds; at most ``k`` op ids.

    >>> from tvm_memsched.core import example_graph
    >>> g = example_graph()
    >>> cands = peak_candidates(g, list(g.topo), k=4)
    >>> len(cands) == 4 and len(set(cands)) == 4
    True
    """
    stable, _ = footprints(graph, order)
    top = max(stable) if stable else 0
    cands = [order[i] for i, s in enumerate(stable) if s == top][:k // 2]
    ml = must_live_bounds(graph)
    for v in sorted(range(graph.num_ops), key=lambda v: -ml[v]):
        if len(cands) >= k:
            break
        if v not in cands:
            cands.append(v)
    return cands
