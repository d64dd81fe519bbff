"""Exact search over executed-op sets (the SERENITY signature), on integer bitsets.

A :class:`Problem` is "schedule the ops in ``ops`` given that the ops in
``start`` have already run". The live set, and so the transient footprint, is a
function of the executed set, so two partial schedules reaching the same set are
interchangeable and only the one with the lower peak matters (SERENITY's
memoization). Sets are Python ``int`` bitsets; ops are grouped into macro steps
(fused chains, see :mod:`.fusion`) that run back to back.

Two exact engines share the problem:

* :func:`best_first` expands states in order of their peak so far (a
  bottleneck-path Dijkstra). It never expands a state whose peak exceeds the
  optimum, which is what SERENITY's adaptive soft budget approximates; the
  hard budget comes from the best heuristic order, greedy dives from popped
  states improve it while searching, and on timeout the smallest peak still
  in the queue is a proven lower bound.
* :func:`level_dp` is SERENITY's Algorithm 1 (level-by-level DP) with budget
  pruning at a soft budget ``tau`` and a per-attempt step limit, used by the
  paper's Algorithm 2 meta-search (``method="dp", strategy="serenity"``).

Example
-------
>>> from tvm_memsched.core import Graph, Op
>>> g = Graph([("x", 4), ("a", 8), ("b", 8), ("y", 4)],
...           [Op("A", ["x"], ["a"]), Op("B", ["x"], ["b"]), Op("C", ["a", "b"], ["y"])],
...           inputs=["x"], outputs=["y"])
>>> res = best_first(Problem(g))
>>> res.peak, res.proven
(20, True)
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..core.graph import Graph, bitset
from .base import Deadline
from .fusion import chain_segments

__all__ = ["Problem", "SearchResult", "best_first", "level_dp", "beam_search", "transient_of"]


def transient_of(graph: Graph, done: int) -> int:
    """Resident bytes after exactly the ops in bitset ``done`` have run."""
    tot = 0
    for t in range(graph.num_tensors):
        p = graph.producer[t]
        if p >= 0 and not (done >> p) & 1:
            continue
        if graph.pinned[t] or graph.consumer_mask[t] & ~done:
            tot += graph.size[t]
    return tot


def _hot_data(graph: Graph):
    """Per-op tuples the search loops read: inputs ``(t, size, consumer mask, pinned)``, bytes of outputs
    nobody reads, in-place pairs ``(consumer mask of the input, bytes saved when it dies there)``.
    Cached on the graph, so the parts of a divided search do not rebuild them (linear, not quadratic)."""
    data = getattr(graph, "_search_hot_data", None)
    if data is None:
        n = graph.num_ops
        ins = [tuple((t, graph.size[t], graph.consumer_mask[t], graph.pinned[t])
                     for t in graph.op_inputs[v]) for v in range(n)]
        dead = [sum(graph.size[t] for t in graph.op_outputs[v]
                    if not graph.consumers[t] and not graph.pinned[t]) for v in range(n)]
        inpl = [tuple((graph.consumer_mask[i], saving) for _o, i, _s, saving in graph.inplace[v])
                for v in range(n)]
        data = graph._search_hot_data = (ins, dead, inpl)
    return data


class Problem:
    """Schedule the ops of bitset ``ops`` (default: all not in ``start``) after ``start`` has run.

    ``fuse`` groups optimality-preserving chain segments into macro steps.
    ``macros`` may be given explicitly (tuples of op ids covering ``ops``; each
    must be a sequence whose ops after the first depend only on the ops before
    them in the macro).
    """

    #: a macro's footprint and live change are its footprint and change from zero live bytes plus the live
    #: bytes (a subclass whose macros depend on the live bytes otherwise sets this False)
    additive = True

    def __init__(self, graph: Graph, ops: int | None = None, start: int = 0, *, fuse: bool = True,
                 macros: list[tuple[int, ...]] | None = None, t0: int | None = None):
        n = graph.num_ops
        full = (1 << n) - 1
        self.graph = graph
        self.start = start
        self.ops = (full & ~start) if ops is None else ops
        if self.ops & start:
            raise ValueError("ops and start overlap")
        if macros is None:
            macros = chain_segments(graph, self.ops) if fuse else [
                (v,) for v in graph.topo if (self.ops >> v) & 1]
        self.macros = [tuple(m) for m in macros]
        self.target = start | self.ops
        self.t0 = transient_of(graph, start) if t0 is None else t0
        k = len(self.macros)
        self.macro_mask = [bitset(m) for m in self.macros]
        owner = {}
        for i, m in enumerate(self.macros):
            for v in m:
                owner[v] = i
        # a macro is ready when every predecessor of its ops outside the macro has run
        self.need = []
        for i, m in enumerate(self.macros):
            need = 0
            for v in m:
                need |= graph.pred_mask[v]
            self.need.append(need & ~self.macro_mask[i])
        succ_sets = [set() for _ in range(k)]
        for i, m in enumerate(self.macros):
            for v in m:
                for s in graph.succs[v]:
                    j = owner.get(s)
                    if j is not None and j != i:
                        succ_sets[i].add(j)
        self.macro_succs = [tuple(sorted(s)) for s in succ_sets]
        self._check_acyclic()
        self.ready0 = 0
        for i in range(k):
            if self.need[i] & ~start == 0:
                self.ready0 |= 1 << i
        # per-op data hoisted for the hot loop (built once per graph: parts share it)
        self._outb = graph.output_bytes
        self._ws = graph.workspace
        self._ins, self._dead_out, self._inpl = _hot_data(graph)

    def _check_acyclic(self) -> None:
        """Macros must form a DAG, or no schedule runs them all back to back."""
        indeg = [0] * len(self.macros)
        for i in range(len(self.macros)):
            for j in self.macro_succs[i]:
                indeg[j] += 1
        stack = [i for i, d in enumerate(indeg) if d == 0]
        seen = 0
        while stack:
            i = stack.pop()
            seen += 1
            for j in self.macro_succs[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    stack.append(j)
        if seen != len(self.macros):
            raise ValueError("the macro steps depend on each other in a cycle (internal error)")

    @property
    def num_macros(self) -> int:
        return len(self.macros)

    def run_macro(self, done: int, live: int, i: int, floor: int | None = 0) -> tuple[int, int, int]:
        """Run macro ``i`` from executed set ``done`` with ``live`` resident bytes.

        Returns ``(new_done, new_live, highest stable footprint during the macro)``, the footprint at
        least ``floor`` (None: the highest footprint itself, possibly below zero when ``live`` is).
        """
        high = floor if floor is not None else -(1 << 62)
        outb, ws, ins, dead, inpl = self._outb, self._ws, self._ins, self._dead_out, self._inpl
        for v in self.macros[i]:
            out = outb[v]
            done |= 1 << v
            stable = live + out + ws[v]
            for cmask, saving in inpl[v]:
                if not cmask & ~done:
                    stable -= saving
            if stable > high:
                high = stable
            freed = dead[v]
            for _t, size, cmask, pinned in ins[v]:
                if not pinned and not (cmask & ~done):
                    freed += size
            live += out - freed
        return done, live, high

    def evaluate(self, order: list[int]) -> int:
        """Peak over this problem's ops when they run in ``order`` (op ids) after ``start``."""
        done, live, high = self.start, self.t0, 0
        outb, ws, ins, dead, inpl = self._outb, self._ws, self._ins, self._dead_out, self._inpl
        for v in order:
            out = outb[v]
            done |= 1 << v
            stable = live + out + ws[v]
            for cmask, saving in inpl[v]:
                if not cmask & ~done:
                    stable -= saving
            high = max(high, stable)
            freed = dead[v]
            for _t, size, cmask, pinned in ins[v]:
                if not pinned and not (cmask & ~done):
                    freed += size
            live += out - freed
        return high

    def newly_ready(self, done: int, ready: int, i: int) -> int:
        ready &= ~(1 << i)
        need = self.need
        for j in self.macro_succs[i]:
            if not need[j] & ~done:
                ready |= 1 << j
        return ready

    def greedy_completion(self, done: int, live: int, ready: int, peak: int,
                          limit: int | None = None, deadline: Deadline | None = None) -> tuple[list[int], int]:
        """Complete a partial schedule greedily: next macro = lowest stable footprint,
        ties broken by the lowest resulting live bytes, then the lowest index. Returns (macros, peak).

        ``limit``: take the first ready macro (by index) whose footprint is at most ``limit`` and that
        does not grow the live bytes. When ``deadline`` expires (checked every 256 steps) the rest is
        completed in ready order without comparing footprints: still a valid schedule.

        Without ``limit`` a macro's footprint and live change relative to the live bytes depend only on
        which readers of its inputs have run, so they are kept in a heap and recomputed only for the
        ready macros whose inputs the last step read (a scan of every ready macro per step is quadratic:
        minutes on a 20,000-operator graph with thousands of ready operators).
        """
        if limit is not None or not self.additive:
            return self._greedy_scan(done, live, ready, peak, limit, deadline)
        import heapq

        watchers = self._watchers()
        version = [0] * len(self.macros)
        heap: list = []

        def entry(i):
            """(footprint, live change) of macro ``i`` from ``done``, relative to the live bytes."""
            version[i] += 1
            _d, rel_live, rel_high = self.run_macro(done, 0, i, floor=None)
            return rel_high, rel_live, i, version[i]

        r = ready
        while r:
            low = r & -r
            heap.append(entry(low.bit_length() - 1))
            r ^= low
        heapq.heapify(heap)
        seq: list[int] = []
        while ready:
            if deadline is not None and len(seq) % 256 == 255 and deadline.expired():
                return self._ready_order_completion(done, live, ready, peak, seq)
            while True:
                rel_high, _rl, i, ver = heap[0]
                if ver == version[i] and (ready >> i) & 1:
                    break
                heapq.heappop(heap)
            if live + rel_high < 0:     # footprints below zero all count as 0: the scan's tie-break decides
                return self._greedy_scan(done, live, ready, peak, None, deadline, seq)
            heapq.heappop(heap)
            done, live, high = self.run_macro(done, live, i)
            peak = max(peak, high)
            seq.append(i)
            before = ready
            ready = self.newly_ready(done, ready, i)
            stale = set()
            for v in self.macros[i]:
                stale.update(watchers.get(v, ()))
            r = ready & ~before
            while r:
                low = r & -r
                stale.add(low.bit_length() - 1)
                r ^= low
            for j in stale:
                if (ready >> j) & 1:
                    heapq.heappush(heap, entry(j))
        return seq, peak

    def _watchers(self) -> dict:
        """op -> the macros whose footprint depends on whether it has run (it reads one of their inputs)."""
        w = getattr(self, "_watch", None)
        if w is None:
            w = {}
            ins, inpl = self._ins, self._inpl
            for i, m in enumerate(self.macros):
                mask = 0
                for v in m:
                    for _t, _size, cmask, _pinned in ins[v]:
                        mask |= cmask
                    for cmask, _saving in inpl[v]:
                        mask |= cmask
                mask &= ~self.macro_mask[i]
                while mask:
                    low = mask & -mask
                    w.setdefault(low.bit_length() - 1, []).append(i)
                    mask ^= low
            self._watch = w
        return w

    def _greedy_scan(self, done: int, live: int, ready: int, peak: int, limit: int | None,
                     deadline: Deadline | None, seq: list[int] | None = None) -> tuple[list[int], int]:
        """:meth:`greedy_completion` by scanning every ready macro at every step."""
        seq = [] if seq is None else seq
        while ready:
            if deadline is not None and len(seq) % 256 == 255 and deadline.expired():
                return self._ready_order_completion(done, live, ready, peak, seq)
            best = None
            r = ready
            while r:
                low = r & -r
                i = low.bit_length() - 1
                r ^= low
                d2, l2, high = self.run_macro(done, live, i)
                key = (high, l2, i)
                if best is None or key < best[0]:
                    best = (key, i, d2, l2, high)
                    if limit is not None and high <= limit and l2 <= live:
                        break
            _, i, done, live, high = best
            if high > peak:
                peak = high
            seq.append(i)
            ready = self.newly_ready(done, ready, i)
        return seq, peak

    def _ready_order_completion(self, done, live, ready, peak, seq):
        while ready:
            low = ready & -ready
            i = low.bit_length() - 1
            done, live, high = self.run_macro(done, live, i)
            peak = max(peak, high)
            seq.append(i)
            ready = self.newly_ready(done, ready, i)
        return seq, peak

    def expand_order(self, macro_seq: list[int]) -> list[int]:
        return [v for i in macro_seq for v in self.macros[i]]


@dataclass
class SearchResult:
    """Outcome of an exact search on a :class:`Problem`.

    ``order`` is the best op order found for the problem's ops (None if none was
    found within the budget), ``peak`` its peak (the max stable footprint over the
    problem's ops only), ``lower`` a proven lower bound on the problem's optimum,
    ``proven`` whether ``peak == lower`` was established, ``status`` one of
    ``"optimal"``, ``"timeout"``, ``"state-limit"``, ``"no-solution"``, ``"good-enough"``.
    """

    order: list[int] | None
    peak: int
    lower: int
    proven: bool
    status: str
    states: int = 0
    expanded: int = 0
    stats: dict = field(default_factory=dict)


def _path(info: dict, start: int, done: int) -> list[int]:
    """Macro sequence leading from ``start`` to ``done`` through the parent pointers."""
    path = []
    while done != start:
        e = info[done]
        path.append(e[4])
        done = e[3]
    path.reverse()
    return path


def best_first(problem: Problem, *, upper: int | None = None, upper_order: list[int] | None = None,
               lower: int = 0, good_enough: int | None = None, deadline: Deadline | None = None,
               state_limit: int = 2_000_000, dive_every: int = 2000, progress=None) -> SearchResult:
    """Minimum-peak order of ``problem`` by best-first search on the peak so far.

    ``upper``/``upper_order``: a known order and its peak (the hard budget; states
    whose peak reaches it are pruned). ``lower``: a known lower bound (the search
    stops as soon as it finds an order at that peak). ``good_enough``: stop as
    soon as an order with peak <= this is known (used when another part of the
    graph dominates the peak). A greedy dive always provides a first order.
    """
    deadline = deadline or Deadline(None)
    p = problem
    start, target = p.start, p.target
    if start == target:
        return SearchResult([], 0, 0, True, "optimal")
    seq, dive_peak = p.greedy_completion(start, p.t0, p.ready0, 0, deadline=deadline)
    if upper is None or upper_order is None or dive_peak < upper:
        upper, best = dive_peak, p.expand_order(seq)
    else:
        best = list(upper_order)
    stop_at = max(lower, good_enough if good_enough is not None else lower)
    # states: done -> (peak, live, ready, parent_done, macro)
    info: dict[int, tuple] = {start: (0, p.t0, p.ready0, -1, -1)}
    heap = [(0, 0, start)]
    expanded = dives = 0
    improvements = []  # (expanded, peak) whenever a dive improves the incumbent
    status = None
    run_macro, newly_ready, macros = p.run_macro, p.newly_ready, p.macros
    while status is None:
        if upper <= stop_at:
            status = "optimal" if upper <= lower else "good-enough"
            break
        if not heap:
            status = "optimal"  # every state below the best known peak was explored
            break
        peak, negdepth, done = heapq.heappop(heap)
        entry = info[done]
        if entry[0] < peak:
            continue  # stale heap entry
        if peak >= upper:
            status = "optimal"  # every remaining state already reaches the best known peak
            break
        if done == target:
            upper, best = peak, p.expand_order(_path(info, start, done))
            status = "optimal"  # states pop in order of peak: nothing completes lower
            break
        expanded += 1
        if expanded % 512 == 0:
            if deadline.expired():
                status = "timeout"
            elif len(info) > state_limit:
                status = "state-limit"
            if status is not None:
                heapq.heappush(heap, (peak, negdepth, done))
                break
            if progress is not None and expanded % 16384 == 0:
                progress(f"search: {expanded} expanded, {len(info)} states, peak >= {peak}, best {upper}")
        live, ready = entry[1], entry[2]
        if expanded % dive_every == 0:
            dives += 1
            seq, dpk = p.greedy_completion(done, live, ready, peak, deadline=deadline)
            if dpk < upper:
                upper, best = dpk, p.expand_order(_path(info, start, done) + seq)
                improvements.append((expanded, dpk))
                continue
        depth = -negdepth
        r = ready
        while r:
            low = r & -r
            i = low.bit_length() - 1
            r ^= low
            d2, l2, high = run_macro(done, live, i)
            p2 = high if high > peak else peak
            if p2 >= upper:
                continue
            old = info.get(d2)
            if old is not None and old[0] <= p2:
                continue
            info[d2] = (p2, l2, newly_ready(d2, ready, i), done, i)
            heapq.heappush(heap, (p2, -(depth + len(macros[i])), d2))
    if status == "optimal":
        lower_out = upper
    elif status == "good-enough":
        lower_out = lower
    else:  # optimum >= smallest peak left in the queue (all lower states were expanded)
        lower_out = min(upper, max(lower, min(heap)[0] if heap else upper))
    return SearchResult(best, upper, lower_out, lower_out >= upper, status, len(info), expanded,
                        {"dives": dives, "improvements": improvements})


def level_dp(problem: Problem, tau: float, *, step_limit: int | None = None,
             deadline: Deadline | None = None) -> tuple[str, list[int] | None, int, int]:
    """SERENITY Algorithm 1 with budget pruning at ``tau``.

    Returns ``(flag, order, peak, states)`` with flag ``"solution"`` (order is
    optimal among orders with peak <= tau, hence optimal if it exists),
    ``"no solution"`` (every order exceeds tau) or ``"timeout"`` (more than
    ``step_limit`` state expansions, or the deadline passed).
    """
    deadline = deadline or Deadline(None)
    p = problem
    start, target = p.start, p.target
    level: dict[int, tuple] = {start: (0, p.t0, p.ready0, ())}
    steps = 0
    total = 1
    while level:
        if target in level:
            peak, _, _, seq = level[target]
            return "solution", p.expand_order(list(seq)), peak, total
        nxt: dict[int, tuple] = {}
        for done, (peak, live, ready, seq) in level.items():
            steps += 1
            if (step_limit is not None and steps > step_limit) or (steps % 1024 == 0 and deadline.expired()):
                return "timeout", None, 0, total
            r = ready
            while r:
                low = r & -r
                i = low.bit_length() - 1
                r ^= low
                d2, l2, high = p.run_macro(done, live, i)
                p2 = high if high > peak else peak
                if p2 > tau:
                    continue
                old = nxt.get(d2)
                if old is None or p2 < old[0]:
                    nxt[d2] = (p2, l2, p.newly_ready(d2, ready, i), seq + (i,))
        total += len(nxt)
        level = nxt
    return "no solution", None, 0, total


def beam_search(problem: Problem, width: int, *, deadline: Deadline | None = None) -> tuple[list[int] | None, int]:
    """Level-by-level search keeping the ``width`` best partial schedules per level.

    States are deduplicated by executed set (SERENITY's signature) and ranked by
    (peak so far, live bytes). With unlimited width this is the exact level DP;
    with a small width it is a fast heuristic that usually finds near-optimal
    orders on large graphs. Returns ``(order, peak)`` or ``(None, 0)`` on deadline.
    """
    deadline = deadline or Deadline(None)
    p = problem
    start, target = p.start, p.target
    if start == target:
        return [], 0
    level = {start: (0, p.t0, p.ready0)}
    parent: dict[int, tuple[int, int]] = {}
    run_macro, newly_ready = p.run_macro, p.newly_ready
    steps = 0
    while target not in level:
        nxt: dict[int, tuple] = {}
        for done, (peak, live, ready) in level.items():
            r = ready
            while r:
                low = r & -r
                i = low.bit_length() - 1
                r ^= low
                d2, l2, high = run_macro(done, live, i)
                p2 = high if high > peak else peak
                old = nxt.get(d2)
                if old is None or (p2, l2) < (old[0], old[1]):
                    nxt[d2] = (p2, l2, newly_ready(d2, ready, i))
                    parent[d2] = (done, i)
            steps += 1
            if steps % 256 == 0 and deadline.expired():
                return None, 0
        if not nxt:
            return None, 0
        if len(nxt) > width:
            keep = sorted(nxt.items(), key=lambda kv: (kv[1][0], kv[1][1]))[:width]
            nxt = dict(keep)
        level = nxt
    macros = []
    d = target
    while d != start:
        prev, i = parent[d]
        macros.append(i)
        d = prev
    macros.reverse()
    return p.expand_order(macros), level[target][0]
