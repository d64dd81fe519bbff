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

*In-place aliases.* A buffer may name another one it may take over
(``Buffer.alias = (parent, rel)``): placed at ``offset(parent) + rel`` or lower
(``rel <= 0``, rounded down to the alignment), it may overlap the parent during
the one step they share, the step where the parent dies and the child is born.
Taking an alias is optional: the greedy placements try the aliased position
first, and CP-SAT decides per pair. The live peak counts each pair at its shared
step as the hull of the two; :func:`check_plan` accepts exactly these overlaps.

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

import numpy as np

from .errors import MemschedError

__all__ = ["Buffer", "ArenaPlan", "plan_arena", "live_peak", "check_plan", "buffers_from_schedule"]


@dataclass(frozen=True)
class Buffer:
    """A buffer to place: ``size`` bytes, live during steps ``start..end`` (inclusive).

    ``alias = (parent, rel)``: this buffer is written over buffer ``parent``, at
    ``offset(parent) + rel`` (``rel <= 0``); it must be born at the step the parent dies.
    """

    name: str
    size: int
    start: int
    end: int
    alias: tuple | None = None


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


def _pairs(bufs: list[Buffer], alignment: int) -> list[tuple[int, int, int]]:
    """Declared in-place pairs ``(parent index, child index, rel)``, ``rel`` rounded down to the alignment.

    Raises MemschedError on an alias to an unknown buffer, a positive ``rel``, a
    buffer taken over twice, a child not born at the step its parent dies, or a
    buffer that lives one step and both takes over and is taken over.
    """
    index = {b.name: i for i, b in enumerate(bufs)}
    out, taken = [], set()
    for c, b in enumerate(bufs):
        if b.alias is None:
            continue
        pname, rel = b.alias
        p = index.get(pname)
        if p is None:
            raise MemschedError(f"buffer {b.name} aliases unknown buffer {pname}")
        if rel > 0:
            raise MemschedError(f"buffer {b.name}: in-place offset {rel} above its parent {pname}")
        if p in taken:
            raise MemschedError(f"buffer {pname} is taken over by two buffers")
        if bufs[p].end != b.start or p == c:
            raise MemschedError(f"buffer {b.name} takes over {pname}, which does not die at step {b.start}")
        if bufs[p].alias is not None and bufs[p].start == bufs[p].end:
            # no operator both writes and reads one buffer: a chain through it would put three buffers at a step
            raise MemschedError(f"buffer {pname} lives only at step {b.start}, where it takes over "
                                f"{bufs[p].alias[0]} and is taken over by {b.name}")
        taken.add(p)
        if bufs[p].size and b.size:
            out.append((p, c, (rel // alignment) * alignment))
    return out


def _hull(items, p: int, c: int, rel: int) -> int:
    """Bytes a parent and its child cover together when the child sits ``rel`` bytes off the parent."""
    return max(items[p][0] - rel, items[c][0])


def live_peak(buffers: Iterable[Buffer], alignment: int = 1) -> int:
    """Largest total (aligned) size of buffers live at one step: a lower bound on any arena.

    An in-place pair counts the hull of the two at the step they share.
    """
    bufs = list(buffers)
    items = [(_align(b.size, alignment), b.start, b.end) for b in bufs]
    events: dict[int, int] = {}
    for size, start, end in items:
        events[start] = events.get(start, 0) + size
        events[end + 1] = events.get(end + 1, 0) - size
    for p, c, rel in _pairs(bufs, alignment):
        j = items[c][1]
        saved = items[p][0] + items[c][0] - _hull(items, p, c, rel)
        events[j] = events.get(j, 0) - saved
        events[j + 1] = events.get(j + 1, 0) + saved
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
    declared = {}
    for b in bs:
        if b.alias is not None:
            declared[(b.name, b.alias[0])] = b.alias[1]
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
                if _declared_overlap(a, oa, b, ob, declared):
                    continue
                raise ValueError(f"buffers {a.name} [{oa}, {oa + a.size}) and {b.name} [{ob}, {ob + b.size}) "
                                 f"are live together at step {max(a.start, b.start)} and overlap")
    return size


def _declared_overlap(a: Buffer, oa: int, b: Buffer, ob: int, declared: dict) -> bool:
    """True when ``a`` and ``b`` overlap only as a declared in-place alias allows."""
    for child, oc, par, op in ((a, oa, b, ob), (b, ob, a, oa)):
        rel = declared.get((child.name, par.name))
        if rel is not None and child.start == par.end and oc - op <= rel:
            return True
    return False


class _Placed:
    """The buffers a greedy has placed: which of them share a step with a lifetime.

    Every placement asks this for every buffer. A scan in Python made each greedy run quadratic (a random
    10,000-operator DAG spent minutes per run); above :data:`_FEW` buffers the scan runs in numpy instead,
    below it numpy's cost per call is the larger one. Both give the same answers.
    """

    __slots__ = ("rows", "cols", "n")

    def __init__(self, capacity: int):
        self.n = 0
        self.rows: list | None = [] if capacity <= _FEW else None     # (start, end, offset, end offset, index)
        self.cols = None if capacity <= _FEW else np.empty((5, capacity), np.int64)

    def add(self, i: int, s: int, e: int, off: int, off_end: int) -> None:
        if self.rows is not None:
            self.rows.append((s, e, off, off_end, i))
        else:
            self.cols[:, self.n] = (s, e, off, off_end, i)
        self.n += 1

    def live(self, s: int, e: int) -> tuple:
        """``(offsets, end offsets, indices)`` of the placed buffers whose lifetimes meet ``[s, e]``."""
        if self.rows is not None:
            rows = [r for r in self.rows if r[0] <= e and s <= r[1]]
            return tuple(zip(*rows))[2:] if rows else ((), (), ())
        start, end, off, off_end, index = self.cols[:, :self.n]
        k = ((start <= e) & (end >= s)).nonzero()[0]
        return off[k], off_end[k], index[k]


#: up to this many buffers a greedy scans its placed buffers in Python, above it in numpy
_FEW = 400


def _fit(lo, hi, size: int, start: int = 0, best_fit: bool = False) -> int:
    """Lowest offset ``x >= start`` (or, ``best_fit``, the one in the tightest gap) where ``[x, x + size)``
    misses every interval ``[lo[k], hi[k])``; above all of them when no gap is wide enough.

    ``lo`` and ``hi`` are sequences or numpy arrays."""
    if not isinstance(lo, np.ndarray):
        best, best_gap, cur = None, None, start
        for o, oe in sorted(zip(lo, hi)):
            gap = o - cur
            if gap >= size:
                if not best_fit:
                    return cur
                if best_gap is None or gap < best_gap:
                    best, best_gap = cur, gap
            cur = max(cur, oe)
        return cur if best is None else best
    if not len(lo):
        return start
    order = np.argsort(lo, kind="stable")
    cur = np.maximum.accumulate(np.concatenate(([start], hi[order])))   # cur[k]: the top of intervals < k
    gaps = lo[order] - cur[:-1]
    fits = gaps >= size
    if not fits.any():
        return int(cur[-1])
    k = int(np.argmin(np.where(fits, gaps, np.iinfo(np.int64).max))) if best_fit else int(np.argmax(fits))
    return int(cur[k])


def _meeting(lo, hi, index, a: int, b: int) -> list[int]:
    """Indices of the intervals ``[lo[k], hi[k])`` that meet ``[a, b)`` (sequences or numpy arrays)."""
    if not isinstance(lo, np.ndarray):
        return [q for o, oe, q in zip(lo, hi, index) if o < b and oe > a]
    return index[(lo < b) & (hi > a)].tolist()


def _greedy_alias(items: list[tuple], pairs: list[tuple], order: list[int],
                  reserve: bool = False) -> tuple[dict[int, int], int]:
    """First-fit placement that puts a buffer over its in-place partner whenever that position is free.

    ``reserve``: a parent placed before its child leaves room below it for the child's shift.
    """
    room = {p: (c, -rel) for p, c, rel in pairs} if reserve else {}
    partner: dict[int, list[tuple[int, int]]] = {}     # i -> [(other, offset of i minus offset of other)]
    for p, c, rel in pairs:
        partner.setdefault(c, []).append((p, rel))
        partner.setdefault(p, []).append((c, -rel))
    placed = _Placed(len(items))
    offsets: dict[int, int] = {}
    top = 0
    for i in order:
        size, s, e = items[i]
        if size == 0:
            offsets[i] = 0
            continue
        lo, hi, index = placed.live(s, e)
        mine = dict(partner.get(i, ()))
        best = None
        for j, d in sorted(mine.items()):
            if j not in offsets or offsets[j] + d < 0:
                continue
            x = offsets[j] + d
            if all(q in mine and x == offsets[q] + mine[q] for q in _meeting(lo, hi, index, x, x + size)):
                best = x if best is None else min(best, x)
        if best is None:
            best = _fit(lo, hi, size, room[i][1] if i in room and room[i][0] not in offsets else 0)
        offsets[i] = best
        placed.add(i, s, e, best, best + size)
        top = max(top, best + size)
    return offsets, top


def _chains(items: list[tuple], pairs: list[tuple], spread: float = float("inf")) -> list[list[tuple[int, int]]]:
    """In-place chains as rigid groups: ``[[(index, offset within the group), ...], ...]``.

    A buffer takes over at most one parent and is taken over at most once, so the pairs form paths;
    each path is laid out with every child at its parent's offset plus ``rel`` (the in-place
    position), shifted so that the lowest member starts at 0. A path is cut where taking the next
    alias would spread the group over more than ``spread`` times its largest member (a long chain
    drifts down by every shift). Buffers without a pair are groups of one.
    """
    child = {p: (c, rel) for p, c, rel in pairs}
    has_parent = {c for _p, c, _r in pairs}
    groups = []

    def close(group):
        low = min(o for _j, o in group)
        groups.append([(j, o - low) for j, o in group])

    for i in range(len(items)):
        if i in has_parent:
            continue
        group, off, j = [(i, 0)], 0, i
        low, high, big = 0, items[i][0], items[i][0]          # the group's extent and largest member
        while j in child:
            j, rel = child[j]
            off += rel
            size = items[j][0]
            if max(high, off + size) - min(low, off) > spread * max(big, size):
                close(group)
                group, off = [(j, 0)], 0
                low, high, big = 0, size, size
            else:
                group.append((j, off))
                low, high, big = min(low, off), max(high, off + size), max(big, size)
        close(group)
    return groups


def _greedy_groups(items: list[tuple], groups: list[list[tuple[int, int]]], order: list[int]
                   ) -> tuple[dict[int, int], int]:
    """First-fit placement of rigid groups (:func:`_chains`) in ``order``: the lowest offset where no member
    overlaps a placed buffer live at the same time (members of one group may overlap each other at the
    step they share: that is the in-place overlap)."""
    placed = _Placed(len(items))
    offsets: dict[int, int] = {}
    top = 0
    for g in order:
        members = [(j, o) for j, o in groups[g] if items[j][0]]
        for j, _o in groups[g]:
            offsets[j] = 0
        if not members:
            continue
        # the group's offset x is barred where a member at x + o meets a placed buffer: po - o - size < x < poe - o
        lo, hi = [], []
        for j, o in members:
            plo, phi, _ = placed.live(items[j][1], items[j][2])
            if placed.rows is not None:
                lo += [v - (o + items[j][0] - 1) for v in plo]
                hi += [v - o for v in phi]
            else:
                lo.append(plo - (o + items[j][0] - 1))
                hi.append(phi - o)
        x = _fit(lo, hi, 1) if placed.rows is not None else _fit(np.concatenate(lo), np.concatenate(hi), 1)
        for j, o in members:
            offsets[j] = x + o
            placed.add(j, items[j][1], items[j][2], x + o, x + o + items[j][0])
            top = max(top, x + o + items[j][0])
    return offsets, top


def _top_first(items: list[tuple], order: list[int], offs: dict, top: int) -> list[int]:
    """``order`` with the buffers that reach ``top`` in placement ``offs`` moved to the front (iterated greedy)."""
    hot = [i for i in order if items[i][0] and offs[i] + items[i][0] == top]
    first = set(hot)
    return hot + [i for i in order if i not in first]


def _greedy(items: list[tuple], order: list[int], best_fit: bool) -> tuple[dict[int, int], int]:
    """Place items (size, start, end) in ``order``; returns (offset per item index, arena size)."""
    placed = _Placed(len(items))
    offsets: dict[int, int] = {}
    top = 0
    for i in order:
        size, s, e = items[i]
        if size == 0:
            offsets[i] = 0
            continue
        lo, hi, _ = placed.live(s, e)
        off = _fit(lo, hi, size, best_fit=best_fit)
        offsets[i] = off
        placed.add(i, s, e, off, off + size)
        top = max(top, off + size)
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
    ``time_limit`` seconds, for at most :data:`EXACT_MAX_BUFFERS` buffers.
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
    pairs = _pairs(bufs, alignment)
    if pairs:
        return _plan_alias(bufs, items, pairs, lb, alignment, exact, time_limit, start_t)
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
        new_order = _top_first(items, order, offs, top)
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
    if exact and not proven and len(items) <= EXACT_MAX_BUFFERS:
        res = _cpsat(items, top, lb, time_limit, offs, unit=alignment)
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


#: rounds of the iterated alias-first greedy (swiftnet_like: 516,096 -> 445,568 B, which as CP-SAT's hint
#: cuts its proof of the 378,176 B optimum from 0.35 s to 0.04 s)
_ITERATIONS = 20
#: and at most this long in all (each run is quadratic in the buffers)
_ITERATION_SECONDS = 0.25

#: CP-SAT is not tried above this many buffers: its model grows with the pairs of boxes (a random 10,000-operator
#: DAG: ArenaPlanMemory took the compiler from 0.86 to 2.1 GB resident; at 20,000 the compile ran out of 24 GB)
EXACT_MAX_BUFFERS = 3000

#: CP-SAT's wall-clock limit, in multiples of its (deterministic) time limit
_WALL_FACTOR = 2.0

#: how far an in-place chain may spread (times its largest buffer) before the group placement cuts it
_SPREADS = (1.0, 1.1, 1.5, float("inf"))


def _plan_alias(bufs, items, pairs, lb, alignment, exact, time_limit, start_t) -> ArenaPlan:
    """:func:`plan_arena` for buffers with in-place aliases: alias-first greedy, optional CP-SAT."""
    best = None
    for oname, key in _ORDERS.items():
        order = sorted(range(len(items)), key=lambda i: key(items[i]))
        for reserve in (False, True):
            offs, top = _greedy_alias(items, pairs, order, reserve)
            if best is None or top < best[1]:
                best = (offs, top, f"greedy-{oname}-alias-first-fit{'-reserve' if reserve else ''}")
            if top <= lb:
                break
        if best[1] <= lb:
            break
    runs = len(_ORDERS)
    if best[1] > lb:              # iterated: the buffers that reach the top of the last placement go first
        order = sorted(range(len(items)), key=lambda i: _ORDERS["length"](items[i]))
        t_iter = time.perf_counter()
        for _ in range(_ITERATIONS):
            if time.perf_counter() - t_iter > _ITERATION_SECONDS:     # each run is quadratic in the buffers
                break
            for reserve in (False, True):
                offs, top = _greedy_alias(items, pairs, order, reserve)
                runs += 1
                if top < best[1]:
                    best = (offs, top, f"greedy-iterated-alias-first-fit{'-reserve' if reserve else ''}")
            if best[1] <= lb:
                break
            order = _top_first(items, order, offs, top)
    for spread in _SPREADS:                               # in-place chains placed as rigid groups
        if best[1] <= lb:
            break
        groups = _chains(items, pairs, spread)
        shapes = [(max(o + items[j][0] for j, o in g), min(items[j][1] for j, _o in g),
                   max(items[j][2] for j, _o in g)) for g in groups]
        for oname, key in _ORDERS.items():
            order = sorted(range(len(groups)), key=lambda g: key(shapes[g]))
            offs, top = _greedy_groups(items, groups, order)
            runs += 1
            if top < best[1]:
                best = (offs, top, f"greedy-{oname}-chains-{spread:g}")
            if top <= lb:
                break
    offs, top, method = best
    proven = top <= lb
    stats = {"greedy_runs": runs, "aliases": len(pairs),
             "aliases_taken": sum(1 for p, c, rel in pairs if offs[c] - offs[p] == rel)}
    if exact and not proven and len(items) <= EXACT_MAX_BUFFERS:
        res = _cpsat(items, top, lb, time_limit, offs, pairs=pairs, unit=alignment)
        if res is not None:
            o3, t3, opt = res
            stats["cpsat"] = {"arena": t3, "optimal": opt}
            if t3 < top:
                offs, top, method = o3, t3, "cp-sat"
            if opt:
                proven, lb = True, t3
    stats["seconds"] = round(time.perf_counter() - start_t, 4)
    return ArenaPlan({bufs[i].name: offs[i] for i in range(len(bufs))}, top, lb, method, proven or top <= lb,
                     alignment, stats)


def _cpsat(items, upper, lower, time_limit, hint, pairs=(), unit: int = 1):
    """Exact placement with OR-Tools CP-SAT (None if OR-Tools is not installed).

    In-place ``pairs`` ``(parent, child, rel)``: a literal per pair says whether
    the child sits at ``offset(parent) + rel``; the step they share is then one
    hull box instead of two separate boxes. Sizes, offsets and ``rel`` are
    multiples of ``unit`` (the alignment); the model counts in units, so every
    offset it returns is aligned.
    """
    if unit > 1:
        res = _cpsat([(size // unit, s, e) for size, s, e in items], upper // unit, -(-lower // unit), time_limit,
                     {i: h // unit for i, h in hint.items()}, [(p, c, rel // unit) for p, c, rel in pairs])
        if res is None:
            return None
        offs, top, opt = res
        return {k: v * unit for k, v in offs.items()}, top * unit, opt
    try:
        from .cpsat import cp_model as _cp_model

        cp_model = _cp_model()
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
    born = {c: k for k, (_p, c, _r) in enumerate(pairs)}
    dies = {p: k for k, (p, _c, _r) in enumerate(pairs)}
    lits = []
    for k, (p, c, rel) in enumerate(pairs):
        a = m.NewBoolVar(f"a{k}")
        m.Add(offs[c] == offs[p] + rel).OnlyEnforceIf(a)
        m.AddHint(a, hint[c] - hint[p] == rel)
        lits.append(a)
        j = items[c][1]
        xs.append(m.NewFixedSizeIntervalVar(j, 1, f"hx{k}"))
        ys.append(m.NewOptionalFixedSizeIntervalVar(offs[c], _hull(items, p, c, rel), a, f"hy{k}"))
    for i, (size, s, e) in enumerate(items):
        if size == 0:
            continue
        lo = s + (1 if i in born else 0)
        hi = e - (1 if i in dies else 0)
        if lo <= hi:
            xs.append(m.NewFixedSizeIntervalVar(lo, hi - lo + 1, f"t{i}"))
            ys.append(m.NewFixedSizeIntervalVar(offs[i], size, f"m{i}"))
        for k, step in ((born.get(i), s), (dies.get(i), e)):
            if k is not None:   # the shared step without the alias: its own box
                xs.append(m.NewFixedSizeIntervalVar(step, 1, f"j{i}_{k}"))
                ys.append(m.NewOptionalFixedSizeIntervalVar(offs[i], size, lits[k].Not(), f"jy{i}_{k}"))
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
    # and a wall-clock cap: on large instances a deterministic second is many real ones (timm DenseNet-121,
    # 247 buffers, 188 aliases: 2.0 deterministic = 17-57 s; it has its best plan after 3 s and spends the
    # rest on the proof). Only an instance that reaches the cap can differ between runs.
    solver.parameters.max_time_in_seconds = float(_WALL_FACTOR * (time_limit or 10.0))
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    res = {i: (solver.Value(offs[i]) if offs[i] is not None else 0) for i in range(len(items))}
    return res, solver.Value(top), status == cp_model.OPTIMAL


def buffers_from_schedule(graph, order, *, include_workspace: bool = True,
                          include_inputs: bool = False, include_outputs: bool = True,
                          inplace: bool = True) -> list[Buffer]:
    """Buffers of a scheduled graph: each tensor over its lifetime, and (optionally)
    each op's workspace live only while the op runs (named ``ws:<op>``).

    With ``inplace`` (default), an output written over an input that dies at its op
    (see :class:`~tvm_memsched.core.graph.Graph`) carries the alias, so the plan
    places it over that input.

    >>> from tvm_memsched.core.graph import Graph, Op
    >>> g = Graph([("x", 8), ("a", 8), ("y", 8)], [Op("A", ["x"], ["a"]),
    ...           Op("R", ["a"], ["y"], inplace=[("y", "a", 0)])], ["x"], ["y"])
    >>> [b.alias for b in buffers_from_schedule(g, ["A", "R"])]
    [None, ('a', 0)]
    """
    from .simulate import inplace_taken, lifetimes

    ids = graph.resolve_order(order)
    spans = lifetimes(graph, ids)
    taken = inplace_taken(graph, ids) if inplace else {}
    kept = {t for t in range(graph.num_tensors)
            if not (graph.is_input[t] and not include_inputs) and not (graph.is_output[t] and not include_outputs)}
    out = []
    for t, (s, e) in enumerate(spans):
        if t not in kept:
            continue
        alias = None
        if t in taken and taken[t][0] in kept:
            i, shift = taken[t]
            alias = (graph.tensors[i].name, -shift)
        out.append(Buffer(graph.tensors[t].name, graph.size[t], s, max(s, e), alias))
    if include_workspace:
        for i, v in enumerate(ids):
            if graph.workspace[v]:
                out.append(Buffer(f"ws:{graph.ops[v].name}", graph.workspace[v], i, i))
    return out
