"""``method="auto"``: an anytime portfolio for users who just want the best order.

Phases, each only while time remains and the peak is not yet proven optimal:

1. cheap orders (program, Kahn, RPO, memory-greedy); the best is the incumbent,
   so the result is never worse than the program order;
2. beam search over executed-op sets (:func:`.search.beam_search`), a strong
   incumbent on large graphs in a fraction of a second;
3. the min-cut lower bound at the incumbent's peak ops
   (:func:`tvm_memsched.core.bounds.cut_lower_bound`), which often proves it;
4. the exact DP with divide and conquer (:mod:`.dp`), which may prove optimality;
5. exact optima of relaxed windows around the peak (:mod:`.lower`), more bounds;
6. the ILP (:mod:`.ilp`) on graphs whose fused ILP is small, where CP-SAT
   wins on multi-branch topologies;
7. further registered phases (:data:`EXTRA_PHASES`: the learned scheduler's
   beam decode) and HMCOS on mid-sized graphs; on large graphs the learned
   scheduler's greedy decode is also one of the phase-1 starting orders;
8. exact re-optimization of windows around the peak (:mod:`.window`) with the
   time left.

The result carries the best proven lower bound and ``optimal=True`` only when
the peak meets it. ``progress`` receives one line per phase. With
``deterministic=True`` the budget is counted in work rather than seconds
(see :class:`~.base.Deadline`): the result no longer depends on machine load.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> r = schedule_auto(example_graph(), time_limit=10)
>>> r.optimal, r.peak_bytes == r.lower_bound_bytes
(True, True)
"""

from __future__ import annotations

import time
from typing import Callable

from ..core.errors import MemschedError
from ..core.graph import Graph
from ..core.orders import kahn_order, program_order, rpo_order
from ..core.simulate import peak_of_ids, simulate
from .base import Deadline, ScheduleResult, cut_bound_if_needed, graph_lower_bound, make_result, peak_candidates
from .dp import schedule_parts
from .greedy import greedy_order
from .hmcos import schedule_hmcos
from .learned import auto_phase as _learned_phase
from .learned import learned_order
from .lower import windows_lower_bound
from .registry import register
from .search import Problem, beam_search
from .window import improve_windows

__all__ = ["schedule_auto", "EXTRA_PHASES", "DEFAULT_TIME_LIMIT"]

DEFAULT_TIME_LIMIT = 5.0

# name -> fn(graph, deadline, incumbent_order, proven_lower, progress) -> (order | None, proven_lower)
EXTRA_PHASES: dict[str, Callable] = {"learned": _learned_phase}

#: graphs at least this large also get the learned scheduler's greedy decode as a fast start
LEARNED_FAST_START_OPS = 200


class _Portfolio:
    """Incumbent, proven bound and the phase log of one ``auto`` run."""

    def __init__(self, graph: Graph, deadline: Deadline, progress):
        self.graph, self.deadline, self.progress = graph, deadline, progress
        self.order, self.peak, self.winner = None, None, None
        self.lower = graph_lower_bound(graph)
        self.phases: list[dict] = []

    @property
    def done(self) -> bool:
        return (self.peak is not None and self.peak <= self.lower) or self.deadline.expired()

    def share(self, fraction: float) -> Deadline:
        return self.deadline.share(fraction)

    def offer(self, name: str, order, t0: float, lower: int | None = None) -> None:
        entry = {"phase": name, "seconds": round(time.perf_counter() - t0, 4)}
        if order is not None:
            peak = peak_of_ids(self.graph, order)
            entry["peak"] = peak
            if self.peak is None or peak < self.peak:
                self.order, self.peak, self.winner = list(order), peak, name
        if lower is not None:
            self.lower = max(self.lower, lower)
            entry["lower_bound"] = self.lower
        self.phases.append(entry)
        if self.progress:
            self.progress(f"auto: {name}: best {self.peak}, lower bound {self.lower}")


@register("auto", "portfolio: cheap orders, beam, cut bound, exact DP, window bounds, ILP, windows", exact=True)
def schedule_auto(graph: Graph, *, time_limit: float | None = DEFAULT_TIME_LIMIT, progress=None,
                  state_limit: int = 2_000_000, ilp_max_atoms: int = 200, deterministic: bool = False) -> ScheduleResult:
    """``deterministic``: spend ``time_limit`` as deterministic work instead of wall-clock seconds, so the
    same graph always gets the same order (the Relax passes use this by default)."""
    start = time.perf_counter()
    budget = Deadline.deterministic(time_limit) if deterministic else Deadline(time_limit)
    pf = _Portfolio(graph, budget, progress)
    for name, fn in (("program", program_order), ("kahn", kahn_order), ("rpo", rpo_order),
                     ("greedy", greedy_order)):
        t0 = time.perf_counter()
        pf.offer(name, fn(graph), t0)
    if not pf.done and graph.num_ops >= LEARNED_FAST_START_OPS:
        t0 = time.perf_counter()
        try:
            pf.offer("learned-greedy", learned_order(graph, deadline=pf.share(0.05)), t0)
        except MemschedError:
            pass  # no trained weights: skip the fast start
    if not pf.done and graph.num_ops:
        t0 = time.perf_counter()
        share = pf.share(0.15)
        prob = Problem(graph)
        for width in (16, 64):
            order, _ = beam_search(prob, width, deadline=share)
            if order is None or share.expired():
                break
            pf.offer(f"beam{width}", order, t0)
    if not pf.done:
        t0 = time.perf_counter()
        low = cut_bound_if_needed(graph, pf.peak, pf.lower, pf.deadline, share=0.1,
                                  candidates=peak_candidates(graph, pf.order, k=8))
        pf.offer("cut-bound", None, t0, low)
    if not pf.done:
        t0 = time.perf_counter()
        order, low, _ = schedule_parts(graph, pf.share(0.6), start_order=pf.order, state_limit=state_limit,
                                       lower=pf.lower, beam_widths=(128,), progress=progress)
        pf.offer("dp", order, t0, low)
    if not pf.done:
        t0 = time.perf_counter()
        share = pf.share(0.3)
        step = simulate(graph, pf.order).peak_step
        low = pf.lower
        for width in (40, 90):
            low = max(low, windows_lower_bound(graph, pf.order, width=width, deadline=share, focus=step))
            if low >= pf.peak or share.expired():
                break
        pf.offer("window-bound", None, t0, low)
    if not pf.done:
        _ilp_phase(pf, ilp_max_atoms)
    for name, phase in EXTRA_PHASES.items():
        if pf.done:
            break
        t0 = time.perf_counter()
        order, low = phase(graph, pf.deadline, pf.order, pf.lower, progress)
        pf.offer(name, order, t0, low)
    if not pf.done and graph.num_ops <= 400:
        t0 = time.perf_counter()
        hm = schedule_hmcos(graph, deadline=pf.share(0.3))
        pf.offer("hmcos", list(hm.order_ids), t0)
    if not pf.done:
        t0 = time.perf_counter()
        pf.offer("window", improve_windows(graph, pf.order, deadline=pf.deadline, lower=pf.lower,
                                           progress=progress), t0)
    stats = {"phases": pf.phases, "winner": pf.winner, "proven_lower_bound": pf.lower}
    return make_result(graph, pf.order, "auto", start, proven=pf.peak <= pf.lower, stats=stats, lower=pf.lower)


def _ilp_phase(pf: _Portfolio, max_atoms: int) -> None:
    """Run the ILP (if OR-Tools is installed and the fused model is small) from the incumbent."""
    try:
        import ortools  # noqa: F401
    except ImportError:
        return
    from ..core.errors import UnsupportedError
    from .ilp import ilp_atoms, solve_ilp

    t0 = time.perf_counter()
    atoms = ilp_atoms(pf.graph)
    if len(atoms) > max_atoms:
        return
    secs, det = pf.deadline.solver_seconds(0.5)
    try:
        res = solve_ilp(pf.graph, atoms, hint=pf.order, upper=pf.peak, time_limit=secs, deterministic=det)
    except UnsupportedError:
        return
    if det and secs:
        pf.deadline.charge(secs)
    low = res.peak if res.optimal else (res.bound if res.order is not None else None)
    pf.offer("ilp", res.order, t0, low)
