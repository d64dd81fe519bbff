"""Offset-based arena planning: place buffers with known lifetimes in one block of memory.

Each buffer has a size and an inclusive lifetime ``[start, end]`` in schedule
steps; two buffers whose lifetimes overlap must not overlap in memory. The
arena size is the highest ``offset + size``. No plan can be smaller than the
largest total size of buffers live at one step (the *live peak*), which is the
lower bound reported with every plan.

Finding the smallest arena is NP-hard (dynamic storage allocation), so
:func:`plan_arena` runs a portfolio:

* greedy placement in several orders (by size as TFLite's greedy planner, by
  lifetime length, by size x length, by start), each with first-fit (lowest
  free offset) and best-fit (tightest gap) placement;
* iterated greedy: the buffers that touch the top of the arena are moved to the
  front of the placement order and the greedy is re-run while it improves;
* optionally (``exact=True`` and OR-Tools installed) CP-SAT with a
  no-overlap-2D constraint, warm-started from the best greedy plan; it proves
  optimality or returns the best plan within its budget. It runs single-threaded
  with a fixed seed and a *deterministic* time budget, so the same buffers always
  get the same offsets (reproducible builds).

A plan that meets the live peak is optimal and the search stops early.

Example
-------
>>> bufs = [Buffer("a", 100, 0, 1), Buffer("b", 50, 1, 2), Buffer("c", 100, 2, 3)]
>>> plan = plan_arena(bufs, alignment=1)
>>> plan.size, plan.lower_bound, plan.optimal
(150, 150, True)
>>> plan.offsets["a"] == plan.offsets["c"] or plan.offsets["c"] >= 150 - 100
True
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable

from .errors import MemschedError

__all__ = ["Buffer", "ArenaPlan", "plan_arena", "live_peak", "check_plan", "buffers_from_schedule"]


@dataclass(frozen=True)
class Buffer:
    """A buffer to place: ``size`` bytes, live during steps ``start..end`` (inclusive)."""

    name: str
    size: int
    start: int
    end: int


@dataclass
class ArenaPlan:
    """Offsets of every buffer, the arena size, and what is known about its quality."""

    offsets: dict
    size: int
    lower_bound: int
    method: str
    optimal: bool
    alignment: int = 1
    stats: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"arena_bytes": self.size, "lower_bound_bytes": self.lower_bound, "method": self.method,
                "optimal": self.optimal, "alignment": self.alignment, "offsets": dict(self.offsets)}


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def live_peak(buffers: Iterable[Buffer], alignment: int = 1) -> int:
    """Largest total (aligned) size of buffers live at one step: a lower bound on any arena."""
    events: dict[int, int] = {}
    for b in buffers:
        s = _align(b.size, alignment)
        events[b.start] = events.get(b.start, 0) + s
        events[b.end + 1] = events.get(b.end + 1, 0) - s
    peak = cur = 0
    for t in sorted(events):
        cur += events[t]
        peak = max(peak, cur)
    return peak


def check_plan(buffers: Iterable[Buffer], offsets: dict, alignment: int = 1) -> int:
    """Validate a plan (no two live-overlapping buffers overlap in memory, offsets aligned).

    Returns the arena size (each buffer counted at its size rounded up to
    ``alignment``); raises ``ValueError`` naming the first conflict.
    """
    bs = sorted(buffers, key=lambda b: b.start)
    size = 0
    for i, a in enumerate(bs):
        oa = offsets[a.name]
        if oa % alignment:
            raise ValueError(f"buffer {a.name} at offset {oa} is not {alignment}-byte aligned")
        size = max(size, oa + _align(a.size, alignment))
        for b in bs[i + 1:]:
            if b.start > a.end:
                break
            ob = offsets[b.name]
            if a.size and b.size and oa < ob + b.size and ob < oa + a.size:
                raise ValueError(f"buffers {a.name} [{oa}, {oa + a.size}) and {b.name} [{ob}, {ob + b.size}) "
                                 f"are live together at step {max(a.start, b.start)} and overlap")
    return size


def _greedy(items: list[tuple], order: list[int], best_fit: bool) -> tuple[dict[int, int], int]:
    """Place items (size, start, end) in ``order``; returns (offset per item index, arena size)."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, end_offset, start, end)
    offsets: dict[int, int] = {}
    top = 0
    for i in order:
        size, s, e = items[i]
        if size == 0:
            offsets[i] = 0
            continue
        busy = sorted((o, oe) for o, oe, ps, pe in placed if ps <= e and s <= pe)
        best_off, best_gap = None, None
        cur = 0
        for o, oe in busy:
            if o > cur:
                gap = o - cur
                if gap >= size:
                    if not best_fit:
                        best_off = cur
                        break
                    if best_gap is None or gap < best_gap:
                        best_off, best_gap = cur, gap
            if oe > cur:
                cur = oe
        if best_off is None:
            best_off = cur
        offsets[i] = best_off
        placed.append((best_off, best_off + size, s, e))
        top = max(top, best_off + size)
    return offsets, top


_ORDERS = {
    "size": lambda it: (-it[0], it[1], -(it[2] - it[1])),
    "length": lambda it: (-(it[2] - it[1]), -it[0], it[1]),
    "area": lambda it: (-it[0] * (it[2] - it[1] + 1), it[1]),
    "start": lambda it: (it[1], -it[0]),
}


def plan_arena(buffers: Iterable[Buffer], alignment: int = 64, *, exact: bool = False,
               time_limit: float | None = 2.0, iterations: int = 50) -> ArenaPlan:
    """Offsets for ``buffers`` in one arena (see the module docstring).

    Every offset is a multiple of ``alignment`` and every buffer occupies its size
    rounded up to it. ``exact=True`` adds a CP-SAT search (needs OR-Tools) within
    ``time_limit`` seconds.
    """
    if alignment < 1:
        raise MemschedError(f"alignment must be a positive number of bytes, got {alignment}")
    bufs = list(buffers)
    names = [b.name for b in bufs]
    if len(set(names)) != len(names):
        raise MemschedError("buffer names must be unique")
    for b in bufs:
        if b.size < 0 or b.end < b.start:
            raise MemschedError(f"buffer {b.name}: bad size {b.size} or lifetime [{b.start}, {b.end}]")
    start_t = time.perf_counter()
    items = [(_align(b.size, alignment), b.start, b.end) for b in bufs]
    lb = live_peak(bufs, alignment)
    best = None
    tried = 0
    for oname, key in _ORDERS.items():
        order = sorted(range(len(items)), key=lambda i: key(items[i]))
        for best_fit in (False, True):
            offs, top = _greedy(items, order, best_fit)
            tried += 1
            if best is None or top < best[1]:
                best = (offs, top, f"greedy-{oname}-{'best' if best_fit else 'first'}-fit", order, best_fit)
            if top <= lb:
                break
        if best[1] <= lb:
            break
    # iterated greedy: pull the buffers that reach the top to the front of the order
    offs, top, method, order, best_fit = best
    it = 0
    while top > lb and it < iterations and (time_limit is None or time.perf_counter() - start_t < time_limit):
        it += 1
        culprits = [i for i in order if items[i][0] and offs[i] + items[i][0] == top]
        rest = [i for i in order if i not in set(culprits)]
        new_order = culprits + rest
        if new_order == order:
            break
        o2, t2 = _greedy(items, new_order, best_fit)
        order = new_order
        if t2 < top:
            offs, top, method = o2, t2, f"{best[2]}+iterated"
        else:
            break
    proven = top <= lb
    stats = {"greedy_runs": tried, "iterations": it}
    if exact and not proven:
        res = _cpsat(items, top, lb, time_limit, offs)
        if res is not None:
            o3, t3, opt = res
            stats["cpsat"] = {"arena": t3, "optimal": opt}
            if t3 < top:
                offs, top, method = o3, t3, "cp-sat"
            if opt:  # CP-SAT proved the optimum: it is the best possible bound
                proven, lb = True, t3
    stats["seconds"] = round(time.perf_counter() - start_t, 4)
    return ArenaPlan({names[i]: offs[i] for i in range(len(bufs))}, top, lb, method, proven or top <= lb,
                     alignment, stats)


def _cpsat(items, upper, lower, time_limit, hint):
    """Exact placement with OR-Tools CP-SAT (None if OR-Tools is not installed)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        return None
    m = cp_model.CpModel()
    xs, ys = [], []
    offs = []
    for i, (size, s, e) in enumerate(items):
        if size == 0:
            offs.append(None)
            continue
        o = m.NewIntVar(0, upper - size, f"o{i}")
        m.AddHint(o, hint[i])
        offs.append(o)
        xs.append(m.NewFixedSizeIntervalVar(s, e - s + 1, f"t{i}"))
        ys.append(m.NewFixedSizeIntervalVar(o, size, f"m{i}"))
    top = m.NewIntVar(lower, upper, "top")
    for i, (size, _, _) in enumerate(items):
        if size:
            m.Add(offs[i] + size <= top)
    m.AddNoOverlap2D(xs, ys)
    m.Minimize(top)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1          # with a fixed seed and a deterministic budget:
    solver.parameters.random_seed = 0          # the same input always gives the same plan
    solver.parameters.max_deterministic_time = float(time_limit or 10.0)
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    res = {i: (solver.Value(offs[i]) if offs[i] is not None else 0) for i in range(len(items))}
    return res, solver.Value(top), status == cp_model.OPTIMAL


def buffers_from_schedule(graph, order, *, include_workspace: bool = True,
                          include_inputs: bool = False, include_outputs: bool = True) -> list[Buffer]:
    """Buffers of a scheduled graph: each tensor over its lifetime, and (optionally)
    each op's workspace live only while the op runs (named ``ws:<op>``)."""
    from .simulate import lifetimes

    ids = graph.resolve_order(order)
    spans = lifetimes(graph, ids)
    out = []
    for t, (s, e) in enumerate(spans):
        if graph.is_input[t] and not include_inputs:
            continue
        if graph.is_output[t] and not include_outputs:
            continue
        out.append(Buffer(graph.tensors[t].name, graph.size[t], s, max(s, e)))
    if include_workspace:
        for i, v in enumerate(ids):
            if graph.workspace[v]:
                out.append(Buffer(f"ws:{graph.ops[v].name}", graph.workspace[v], i, i))
    return out
