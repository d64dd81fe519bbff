"""Exact segmentation solvers: the dynamic program over the cuts of one order, and CP-SAT over all orders.

* :func:`dp_segment`: the optimal cut positions of a fixed execution order,
  ``O(K n^2)`` after an ``O(n^2)`` table of all contiguous stage costs;
  :func:`window_dp` the same with every cut within a window of given cuts;
* :func:`cpsat_segment`: CP-SAT (OR-Tools) over monotone stage assignments
  (``b[v,k] = [stage(v) <= k]``), i.e. over all topological orders, with a hint
  and an upper bound, returning the proven lower bound.

All work in the integer picoseconds of :class:`~.cost.StageCosts`, so their
results equal :func:`~.cost.stage_figures`'s exactly.

Example
-------
>>> from tvm_memsched.core import coral_dag
>>> from tvm_memsched.tflite.coral.cost import DEFAULT_COST_MODEL, StageCosts
>>> g = coral_dag(30, seed=4)
>>> costs, order = StageCosts(g, DEFAULT_COST_MODEL), list(g.topo)
>>> cuts, ps = dp_segment(costs, order, 3)
>>> len(cuts), window_dp(costs, order, cuts, 2)[1] == ps
(2, True)
"""

from __future__ import annotations

import math
from typing import Sequence

from .cost import StageCosts, stage_figures

__all__ = ["dp_segment", "window_dp", "cpsat_segment"]


class _OrderCosts:
    """Integer stage times of contiguous runs ``order[a:b]`` of one execution order (rows on demand)."""

    def __init__(self, costs: StageCosts, order: Sequence[int]):
        g = costs.graph
        self.costs, self.order, self.n = costs, list(order), len(order)
        pos = [0] * g.num_ops
        for i, v in enumerate(order):
            pos[v] = i
        self.prod = [(-1 if g.producer[t] < 0 else pos[g.producer[t]]) for t in range(g.num_tensors)]
        self.last = [max((pos[c] for c in g.consumers[t]), default=-1) for t in range(g.num_tensors)]
        self.ends_at = [[] for _ in range(self.n)]
        for t in range(g.num_tensors):
            if self.last[t] >= 0 and not g.is_output[t]:
                self.ends_at[self.last[t]].append(t)
        self.outputs = [t for t in range(g.num_tensors) if g.is_output[t]]
        self.inputs = [t for t in range(g.num_tensors) if g.is_input[t]]

    def row(self, a: int, stop: int | None = None) -> list:
        """``row[b - a - 1]``: time of the stage running ``order[a:b]``, for ``b`` in ``a+1..stop``."""
        costs, g = self.costs, self.costs.graph
        order, prod, last, ends_at, size = self.order, self.prod, self.last, self.ends_at, g.size
        stop = self.n if stop is None else min(stop, self.n)
        through = [t for t in self.outputs if prod[t] < a]       # pass-through model outputs
        in_set = set(through) | (set(self.inputs) if a == 0 else set())
        in_b = sum(size[t] for t in in_set)
        out_b = sum(size[t] for t in through)
        seen: dict = {}
        pbytes = 0
        cps = 0
        row = []
        for q in range(a, stop):
            v = order[q]
            cps += costs.cps[v]
            for key, nb in costs.params[v]:
                if key not in seen:
                    seen[key] = nb
                    pbytes += nb
            for t in g.op_inputs[v]:
                if prod[t] < a and t not in in_set:
                    in_set.add(t)
                    in_b += size[t]
            for t in g.op_outputs[v]:
                if g.is_output[t] or last[t] > q:
                    out_b += size[t]
            for t in ends_at[q]:
                if a <= prod[t] < q:
                    out_b -= size[t]
            row.append(costs.stage_time(cps, pbytes, in_b + out_b))
        return row


def _cost_table(costs: StageCosts, order: Sequence[int]) -> list:
    """``table[a][b - a - 1]``: integer time of the stage running ``order[a:b]``."""
    oc = _OrderCosts(costs, order)
    return [oc.row(a) for a in range(oc.n)]


def window_dp(costs: StageCosts, order: Sequence[int], cuts: Sequence[int], window: int) -> tuple[list, int]:
    """Best cut positions of ``order`` with every cut within ``window`` positions of ``cuts``: ``(cuts, ps)``.

    The same exact stage times as :func:`dp_segment`, restricted to the
    windows (``O(K * window * n)`` work instead of ``O(n^2)``); never worse
    than ``cuts`` themselves. ``cuts`` are the start positions of stages 1..K-1.
    """
    n = len(order)
    oc = _OrderCosts(costs, order)
    cand = [[0]] + [list(range(max(1, c - window), min(n - 1, c + window) + 1)) for c in cuts] + [[n]]
    stops: dict = {}
    for j in range(len(cand) - 1):
        hi = cand[j + 1][-1]
        for a in cand[j]:
            stops[a] = max(stops.get(a, 0), hi)
    rows = {a: oc.row(a, stop) for a, stop in stops.items()}
    f = {0: (0, -1)}                      # cut position -> (best bottleneck so far, previous cut)
    back = []
    for j in range(1, len(cand)):
        nf = {}
        for b in cand[j]:
            best, arg = None, -1
            for a, (fa, _) in f.items():
                if a < b and b - a - 1 < len(rows[a]):
                    c = max(fa, rows[a][b - a - 1])
                    if best is None or c < best:
                        best, arg = c, a
            if best is not None:
                nf[b] = (best, arg)
        back.append(nf)
        f = nf
    best, prev = f[n]
    out = []
    for j in range(len(back) - 2, -1, -1):
        out.append(prev)
        prev = back[j][prev][1]
    return sorted(out), int(best)


def dp_segment(costs: StageCosts, order: Sequence[int], k: int) -> tuple[list, int]:
    """Optimal cut positions of ``order`` into ``k`` non-empty stages: ``(cuts, bottleneck_ps)``.

    ``cuts`` are the start positions of stages 1..k-1.
    """
    n = len(order)
    table = _cost_table(costs, order)
    inf = float("inf")
    # f[j][b]: best bottleneck of the first b ops in j+1 stages; arg[j][b]: start of the last stage
    f = [[inf] * (n + 1) for _ in range(k)]
    arg = [[-1] * (n + 1) for _ in range(k)]
    for b in range(1, n + 1):
        f[0][b] = table[0][b - 1]
    for j in range(1, k):
        fj, fprev, argj = f[j], f[j - 1], arg[j]
        for b in range(j + 1, n + 1):
            best, best_a = inf, -1
            for a in range(j, b):
                c = fprev[a]
                if c >= best:
                    continue
                s = table[a][b - a - 1]
                c = s if s > c else c
                if c < best:     # strict: the earliest cut wins ties (deterministic)
                    best, best_a = c, a
            fj[b], argj[b] = best, best_a
    cuts = []
    b = n
    for j in range(k - 1, 0, -1):
        a = arg[j][b]
        cuts.append(a)
        b = a
    return sorted(cuts), int(f[k - 1][n])


def cpsat_segment(costs: StageCosts, k: int, *, hint: Sequence[int] | None = None, upper: int | None = None,
                  time_limit: float = 10.0, workers: int = 1,
                  deterministic_time: float | None = None) -> tuple[list | None, int | None, int, bool]:
    """Stage assignment minimising the bottleneck over all topological orders.

    Returns ``(stage_of or None, bottleneck_ps or None, lower_bound_ps, optimal)``.
    ``hint`` (a stage per op) warm-starts the search; ``upper`` bounds the
    objective (solutions must be at most as slow). ``time_limit`` is in
    wall-clock seconds. With one worker (the default, and the fastest on the
    zoo's graphs) or with several interleaved workers the search is
    deterministic as long as it finishes within the time limit; with
    ``deterministic_time`` (CP-SAT's reproducible work measure) instead of a
    wall-clock limit it is deterministic on any machine and under any load.
    """
    from ...core.cpsat import cp_model as _cp_model

    cp_model = _cp_model()

    g = costs.graph
    n = g.num_ops
    m = cp_model.CpModel()
    one = m.NewConstant(1)
    zero = m.NewConstant(0)
    # b[v][s] = [stage(v) <= s]; b[v][-1] = 0 (index 0 below), b[v][k-1] = 1
    b = []
    for v in range(n):
        row = [zero] + [m.NewBoolVar(f"b{v}_{s}") for s in range(k - 1)] + [one]
        for s in range(1, k):
            m.AddImplication(row[s], row[s + 1])
        b.append(row)

    def le(v, s):              # [stage(v) <= s] for s in -1..k-1
        return b[v][s + 1]

    def at(v, s):              # [stage(v) == s] as a linear expression
        return le(v, s) - le(v, s - 1)

    for v in range(n):
        for p in g.preds[v]:
            for s in range(k - 1):
                m.AddImplication(le(v, s), le(p, s))
    for s in range(k):
        m.Add(sum(at(v, s) for v in range(n)) >= 1)

    size = g.size
    io = [[] for _ in range(k)]          # (coefficient, expression) terms of in+out bytes per stage
    const_io = [0] * k
    for t in range(g.num_tensors):
        p = g.producer[t]
        cons = g.consumers[t]
        if g.is_output[t]:
            for s in range(k):
                if p < 0:
                    const_io[s] += 2 * size[t]
                else:
                    io[s].append((size[t], le(p, s - 1)))      # passed in from an earlier stage
                    io[s].append((size[t], le(p, s)))          # given out (produced here or passed through)
            continue
        if p < 0:                         # model input
            const_io[0] += size[t]
            for s in range(1, k):
                if cons:
                    x = m.NewBoolVar(f"in{t}_{s}")
                    for c in cons:
                        m.Add(x >= at(c, s))
                    io[s].append((size[t], x))
            continue
        if not cons:
            continue
        for s in range(k):
            if s > 0:                      # read here, produced earlier
                x = m.NewBoolVar(f"in{t}_{s}")
                for c in cons:
                    m.Add(x >= at(c, s) + le(p, s - 1) - 1)
                io[s].append((size[t], x))
            if s < k - 1:                  # produced here, read later
                y = m.NewBoolVar(f"out{t}_{s}")
                for c in cons:
                    m.Add(y >= at(p, s) - le(c, s))
                io[s].append((size[t], y))

    users: dict = {}
    for v in range(n):
        for key, nb in costs.params[v]:
            users.setdefault(key, [nb, []])[1].append(v)
    times = []
    ub_total = sum(costs.cps) + costs.stream * sum(nb for nb, _ in users.values()) + \
        costs.link * 2 * sum(size) * 2 + 1
    for s in range(k):
        pterms = []
        for key, (nb, vs) in users.items():
            if len(vs) == 1:
                pterms.append(nb * at(vs[0], s))
            else:
                w = m.NewBoolVar(f"w{key}_{s}")
                for v in vs:
                    m.Add(w >= at(v, s))
                pterms.append(nb * w)
        over = m.NewIntVar(0, max(0, sum(nb for nb, _ in users.values())), f"over{s}")
        if pterms:
            m.Add(over >= sum(pterms) - costs.sram)
        t_s = sum(costs.cps[v] * at(v, s) for v in range(n)) + costs.stream * over + \
            costs.link * (sum(c * e for c, e in io[s]) + const_io[s])
        times.append(t_s)
    z = m.NewIntVar(0, ub_total if upper is None else int(upper), "bottleneck")
    for t_s in times:
        m.Add(t_s <= z)
    m.Minimize(z)
    if hint is not None:
        for v in range(n):
            for s in range(k - 1):
                m.AddHint(le(v, s), 1 if hint[v] <= s else 0)
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers = max(1, int(workers))
    prm.interleave_search = prm.num_workers > 1
    if deterministic_time is not None:
        prm.max_deterministic_time = float(deterministic_time)
    else:
        prm.max_time_in_seconds = float(time_limit)
    prm.random_seed = 0
    status = solver.Solve(m)
    if status == cp_model.INFEASIBLE:      # nothing at most ``upper``: the caller's solution is optimal
        return None, None, int(upper) if upper is not None else 0, upper is not None
    bound = max(0, int(math.ceil(solver.BestObjectiveBound() - 1e-6)))
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, bound, False
    stage_of = [sum(1 for s in range(k - 1) if not solver.Value(le(v, s))) for v in range(n)]
    # The model's indicators (inputs, outputs, shared buffers, SRAM overflow) are only bounded from below, so
    # a solution found before optimality may carry a ``z`` above the true slowest stage: report the true one.
    figs, _ = stage_figures(costs, stage_of, k)
    true = max(f.time_ps for f in figs)
    if true > solver.Value(z):
        raise AssertionError(f"CP-SAT model underestimates a stage ({true} ps > {solver.Value(z)} ps)")
    return stage_of, true, bound, status == cp_model.OPTIMAL
