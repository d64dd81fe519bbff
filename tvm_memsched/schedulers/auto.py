"""``method="auto"``: an anytime portfolio for users who just want the best order.

Phases, each only while time remains and the peak is not yet proven optimal:

1. cheap orders (program, Kahn, RPO, memory-greedy); the best is the incumbent,
   so the result is never worse than the program order;
2. the exact DP with divide and conquer (:mod:`.dp`), which may prove optimality;
3. search-based lower bounds on windows around the peak (:mod:`.lower`), which
   may prove the incumbent optimal;
4. HMCOS (:mod:`.hmcos`) for graphs the DP could not finish;
5. further registered methods that declare themselves useful for the graph
   (the ILP, the learned scheduler), see :data:`EXTRA_PHASES`;
6. exact re-optimization of windows around the peak (:mod:`.window`).

The result carries the best proven lower bound (the graph bound, raised by any
exhaustive search or window bound) and ``optimal=True`` only when the peak
meets it.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> r = schedule_auto(example_graph(), time_limit=10)
>>> r.optimal, r.stats["winner"] in ("dp", "program", "kahn", "rpo", "greedy")
(True, True)
"""

from __future__ import annotations

import time
from typing import Callable

from ..core.graph import Graph
from ..core.orders import kahn_order, program_order, rpo_order
from ..core.simulate import peak_of_ids, simulate
from .base import Deadline, ScheduleResult, graph_lower_bound, make_result
from .dp import schedule_parts
from .greedy import greedy_order
from .hmcos import schedule_hmcos
from .lower import windows_lower_bound
from .registry import register
from .window import improve_windows

__all__ = ["schedule_auto", "EXTRA_PHASES", "DEFAULT_TIME_LIMIT"]

DEFAULT_TIME_LIMIT = 5.0

# name -> fn(graph, deadline, incumbent_order, proven_lower, progress) -> (order | None, proven_lower)
EXTRA_PHASES: dict[str, Callable] = {}


@register("auto", "portfolio: cheap orders, exact DP, HMCOS, peak windows (and ILP/learned when available)",
          exact=True)
def schedule_auto(graph: Graph, *, time_limit: float | None = DEFAULT_TIME_LIMIT, progress=None,
                  state_limit: int = 2_000_000) -> ScheduleResult:
    start = time.perf_counter()
    deadline = Deadline(time_limit)
    lb = graph_lower_bound(graph)
    phases = []

    def note(name, order, t0):
        peak = peak_of_ids(graph, order)
        phases.append({"phase": name, "peak": peak, "seconds": round(time.perf_counter() - t0, 4)})
        if progress:
            progress(f"auto: {name} -> peak {peak} (best {min(p['peak'] for p in phases)}, lower bound {proven})")
        return peak

    proven = lb
    best_order, best_peak, winner = None, None, None
    for name, fn in (("program", program_order), ("kahn", kahn_order), ("rpo", rpo_order),
                     ("greedy", greedy_order)):
        t0 = time.perf_counter()
        order = fn(graph)
        peak = note(name, order, t0)
        if best_peak is None or peak < best_peak:
            best_order, best_peak, winner = order, peak, name

    def better(name, order):
        nonlocal best_order, best_peak, winner
        if order is None:
            return
        peak = peak_of_ids(graph, order)
        if peak < best_peak:
            best_order, best_peak, winner = list(order), peak, name

    if best_peak > proven and not deadline.expired():
        t0 = time.perf_counter()
        share = deadline.sub(None if deadline.remaining() is None else deadline.remaining() * 0.5)
        order, low, dp_stats = schedule_parts(graph, share, start_order=best_order, state_limit=state_limit,
                                              progress=progress)
        proven = max(proven, low)
        note("dp", order, t0)
        better("dp", order)
    if best_peak > proven and not deadline.expired():
        t0 = time.perf_counter()
        rem = deadline.remaining()
        share = deadline.sub(None if rem is None else rem * 0.3)
        peak_step = simulate(graph, best_order).peak_step
        for width in (40, 90):
            low = windows_lower_bound(graph, best_order, width=width, deadline=share, focus=peak_step)
            proven = max(proven, low)
            if proven >= best_peak or share.expired():
                break
        phases.append({"phase": "window-bound", "lower_bound": proven,
                       "seconds": round(time.perf_counter() - t0, 4)})
    if best_peak > proven and not deadline.expired() and graph.num_ops <= 400:
        t0 = time.perf_counter()
        rem = deadline.remaining()
        hm = schedule_hmcos(graph, time_limit=None if rem is None else rem * 0.4, progress=progress)
        note("hmcos", list(hm.order_ids), t0)
        better("hmcos", list(hm.order_ids))
    for name, phase in EXTRA_PHASES.items():
        if best_peak <= proven or deadline.expired():
            break
        t0 = time.perf_counter()
        order, low = phase(graph, deadline, best_order, proven, progress)
        proven = max(proven, low)
        if order is not None:
            note(name, order, t0)
            better(name, order)
    if best_peak > proven and not deadline.expired():
        t0 = time.perf_counter()
        order = improve_windows(graph, best_order, deadline=deadline, lower=proven, progress=progress)
        note("window", order, t0)
        better("window", order)
    stats = {"phases": phases, "winner": winner, "proven_lower_bound": proven}
    return make_result(graph, best_order, "auto", start, proven=best_peak <= proven, stats=stats)
