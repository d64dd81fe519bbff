"""ILP scheduling with optimality-preserving fusion and memory-aware partitioning (Zhong et al.).

``method="ilp"`` solves the scheduling problem as an integer program with
OR-Tools CP-SAT (section IV of Zhong et al., ICCAD 2023):

**Formulation.** Steps ``j = 1..n`` and atoms (ops, or fused blocks of ops)
``i``; ``O[i,j] = 1`` when atom ``i`` runs at step ``j``; ``T[t,j] = 1`` when tensor
``t`` is resident during step ``j``:

1. one atom per step;  2. every atom runs once;
3. an atom runs only when its inputs are resident: ``O[i,j] <= T[t,j]``;
4. a tensor becomes resident only when produced: ``T[t,j] <= T[t,j-1] + O[p(t),j]``;
5. nothing but the inputs is resident before the first step;
6. ``sum_t S_t T[t,j] + sum_i ES_i O[i,j] + C <= mem`` for every step, minimise ``mem``.

To follow the simulator's semantics exactly, an atom's outputs are resident
during its own step (``T[t,j] >= O[p(t),j]``), graph outputs stay to the end,
unread inputs are the constant ``C``, and ``ES_i`` is the atom's extra footprint
beyond the tensors the ILP sees: the workspace of a single op, or, for a fused
block, its internal peak minus its outside inputs and kept outputs (this may be
negative, which is why (6) sums ``ES`` over the atoms rather than taking one atom
at a time). At an optimum the objective equals the simulated peak of the order.

**Topology-aware pruning** (constraints 7-10): an atom with ``a`` ancestors and
``d`` descendants can only run in steps ``a+1 .. n-d``; a tensor can only be
resident from its producer's first possible step to its last reader's last
possible step. Pruned variables are never created; both counts are reported.

**Fusion**: monotonic chains (:mod:`.fusion`; Theorem IV.1, as HMCOS
Conditions 1-2 and their mirror image) and isolated regions whose interior
always holds at least as much as both ends (:mod:`.regions`; Theorem IV.2), repeated to a fixed
point, shrink the ILP without losing the optimum.

**Partitioning.** When the model would exceed ``max_variables``, the graph is
cut where the incumbent order's transient footprint is lowest (few bytes cross
the cut) into parts of at most ``part_size`` atoms; the parts holding the
incumbent's peak are solved exactly in their context, the others keep the
cheap order, and the result reports the remaining gap to the lower bound.

A time limit returns CP-SAT's best incumbent with its proven bound and gap;
``optimal`` is set only when proven.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> r = schedule_ilp(example_graph(), time_limit=30)
>>> r.optimal, r.stats["variables_after_pruning"] < r.stats["variables_before_pruning"]
(True, True)
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from ..core.errors import MemschedError, UnsupportedError
from ..core.graph import Graph, bitset
from ..core.simulate import footprints, peak_of_ids
from .base import Deadline, ScheduleResult, cut_bound_if_needed, graph_lower_bound, make_result, peak_candidates
from .dp import heuristic_order
from .fusion import chain_segments
from .regions import fuse_regions
from .registry import register
from .search import Problem, beam_search

__all__ = ["IlpResult", "solve_ilp", "ilp_atoms", "schedule_ilp", "DEFAULT_MAX_VARIABLES"]

DEFAULT_MAX_VARIABLES = 400_000


def ilp_atoms(graph: Graph, ops: int | None = None, *, fuse: bool = True, max_region: int = 12) -> list[tuple]:
    """Atoms for the ILP: fused chains and regions whose outside inputs are read only inside.

    Chain segments whose first op also reads tensors other ops read are split
    after that op (its footprint then depends on the context); the rest of the
    segment still runs back to back in some optimal schedule.
    """
    if ops is None:
        ops = (1 << graph.num_ops) - 1
    if not fuse:
        return [(v,) for v in graph.topo if (ops >> v) & 1]
    atoms = []
    for seg in chain_segments(graph, ops):
        first = seg[0]
        shared = any(graph.consumers[t] != (first,) or graph.pinned[t] for t in graph.op_inputs[first])
        if len(seg) > 1 and shared:
            atoms.append((first,))
            atoms.append(tuple(seg[1:]))
        else:
            atoms.append(tuple(seg))
    return fuse_regions(graph, atoms, max_size=max_region)


@dataclass
class IlpResult:
    order: list[int] | None     # op ids of the part, or None if no solution was found
    peak: int                   # simulated peak over the part's ops
    bound: int                  # CP-SAT's proven lower bound on the part's peak
    optimal: bool
    status: str
    variables_before: int
    variables_after: int
    seconds: float


class _Atom:
    __slots__ = ("ops", "mask", "reads", "kept", "dead", "es")


def _atom_data(graph: Graph, ops: tuple[int, ...], done_before: int, later: int) -> _Atom:
    """Footprint data of an atom; ``later`` = ops that run after the part (for 'kept')."""
    a = _Atom()
    a.ops = ops
    a.mask = bitset(ops)
    made = [t for v in ops for t in graph.op_outputs[v]]
    made_set = set(made)
    a.reads = sorted({t for v in ops for t in graph.op_inputs[v] if t not in made_set})
    a.kept = [t for t in made if graph.pinned[t] or graph.consumer_mask[t] & ~a.mask]
    if len(ops) == 1:
        v = ops[0]
        a.dead = [t for t in graph.op_outputs[v] if t not in set(a.kept)]
        a.es = graph.workspace[v]
        return a
    a.dead = []
    # multi-op atoms read only tensors no other op reads: their profile is context-free
    live = sum(graph.size[t] for t in a.reads)
    done = 0
    high = 0
    for v in ops:
        out = graph.output_bytes[v]
        high = max(high, live + out + graph.workspace[v] - graph.inplace_saving(v, done))
        done |= 1 << v
        freed = 0
        for t in graph.op_inputs[v]:
            if not graph.pinned[t] and not (graph.consumer_mask[t] & ~done):
                freed += graph.size[t]
        for t in graph.op_outputs[v]:
            if not graph.consumers[t] and not graph.pinned[t]:
                freed += graph.size[t]
        live += out - freed
    a.es = high - sum(graph.size[t] for t in a.reads) - sum(graph.size[t] for t in a.kept)
    return a


def solve_ilp(graph: Graph, atoms: list[tuple[int, ...]], *, start: int = 0, hint: list[int] | None = None,
              time_limit: float | None = None, max_variables: int = DEFAULT_MAX_VARIABLES,
              workers: int | None = None, upper: int | None = None, deterministic: bool = False) -> IlpResult:
    """Solve the ILP for ``atoms`` (covering a part of the graph) after the ops in ``start`` ran.

    ``hint``: an op order of the part used as CP-SAT's starting solution.
    ``upper``: a known achievable peak (tightens ``mem``'s domain).
    ``deterministic``: ``time_limit`` is CP-SAT's deterministic time, one worker
    and a fixed seed (the same model always gives the same result).
    """
    try:
        from ..core.cpsat import cp_model as _cp_model

        cp_model = _cp_model()
    except ImportError:
        raise UnsupportedError("method 'ilp' needs OR-Tools (pip install 'tvm_memsched[ilp]')") from None
    t_begin = time.perf_counter()
    n = len(atoms)
    if n == 0:
        raise MemschedError("the ILP has no ops to schedule")
    part = 0
    for ops in atoms:
        for v in ops:
            part |= 1 << v
    done_all = start | part
    data = [_atom_data(graph, ops, start, ~done_all) for ops in atoms]
    owner = {}
    for i, a in enumerate(data):
        for v in a.ops:
            owner[v] = i
    # atom precedence (within the part) and topology windows
    preds = [set() for _ in range(n)]
    for i, a in enumerate(data):
        for v in a.ops:
            for u in graph.preds[v]:
                j = owner.get(u)
                if j is not None and j != i:
                    preds[i].add(j)
    order_topo = _topo(preds, n)
    anc = [0] * n
    for i in order_topo:
        m = 0
        for j in preds[i]:
            m |= anc[j] | (1 << j)
        anc[i] = m
    succs = [set() for _ in range(n)]
    for i in range(n):
        for j in preds[i]:
            succs[j].add(i)
    desc = [0] * n
    for i in reversed(order_topo):
        m = 0
        for j in succs[i]:
            m |= desc[j] | (1 << j)
        desc[i] = m
    earliest = [bin(anc[i]).count("1") + 1 for i in range(n)]
    latest = [n - bin(desc[i]).count("1") for i in range(n)]
    # tensors the ILP tracks, with their residency windows
    size = graph.size
    tracked: dict[int, tuple[int, int, int, bool]] = {}   # t -> (producer atom or -1, first, last, pinned)
    constant = 0
    readers: dict[int, list[int]] = {}
    for i, a in enumerate(data):
        for t in a.reads:
            readers.setdefault(t, []).append(i)
    for t in range(graph.num_tensors):
        p = graph.producer[t]
        later_use = graph.pinned[t] or bool(graph.consumer_mask[t] & ~done_all)
        if p >= 0 and (part >> p) & 1:
            i = owner[p]
            if t not in data[i].kept and t not in data[i].dead:
                continue  # internal to a fused atom
            rs = readers.get(t, [])
            # resident from the producer's step to the last reader's: a tensor nobody reads is still
            # resident at its producer's step, wherever in the producer's window that falls
            last = n if later_use else max([latest[r] for r in rs] + [latest[i]])
            tracked[t] = (i, earliest[i], last, later_use)
        elif p < 0 or (start >> p) & 1:
            exists = True
            live = graph.pinned[t] or bool(graph.consumer_mask[t] & ~start)
            if not (exists and live):
                continue
            rs = readers.get(t, [])
            if later_use or not rs:
                constant += size[t]  # resident throughout the part
            else:
                tracked[t] = (-1, 1, max(latest[r] for r in rs), False)
    before = n * n + n * len(tracked)
    after = sum(latest[i] - earliest[i] + 1 for i in range(n)) + sum(b - a + 1 for _, a, b, _ in tracked.values())
    if after > max_variables:
        raise UnsupportedError(f"the ILP would have {after} variables (limit {max_variables})")
    m = cp_model.CpModel()
    O = [{j: m.NewBoolVar(f"O{i}_{j}") for j in range(earliest[i], latest[i] + 1)} for i in range(n)]
    for i in range(n):
        m.AddExactlyOne(O[i].values())                                   # (2)
    for j in range(1, n + 1):
        m.AddExactlyOne(O[i][j] for i in range(n) if j in O[i])          # (1)
    pos = [sum(j * var for j, var in O[i].items()) for i in range(n)]
    for i in range(n):
        for j in preds[i]:
            m.Add(pos[j] + 1 <= pos[i])                                  # redundant precedence, helps propagation
    T: dict[int, dict[int, object]] = {}
    for t, (p, first, last, pinned) in tracked.items():
        T[t] = {j: m.NewBoolVar(f"T{t}_{j}") for j in range(first, last + 1)}
        for j in range(first, last + 1):
            prev = T[t].get(j - 1)
            if p >= 0:
                prod = O[p].get(j)
                if prev is None:
                    m.Add(T[t][j] <= (prod if prod is not None else 0))       # (4), (5)
                else:
                    m.Add(T[t][j] <= prev + (prod if prod is not None else 0))  # (4)
                if prod is not None:
                    m.Add(T[t][j] >= prod)                                # outputs resident while produced
            elif prev is not None:
                m.Add(T[t][j] <= prev)                                    # inputs only get freed
        if pinned:
            m.Add(T[t][last] == 1)
        for r in readers.get(t, []):
            for j, var in O[r].items():
                m.Add(var <= T[t][j])                                     # (3)
    ub = upper if upper is not None else None
    lo = max(0, constant)
    total = constant + sum(size[t] for t in tracked) + sum(max(0, a.es) for a in data)
    mem = m.NewIntVar(lo, total if ub is None else min(total, ub), "mem")
    step_terms = {}
    for j in range(1, n + 1):
        terms = [size[t] * T[t][j] for t in tracked if j in T[t] and size[t]]
        terms += [data[i].es * O[i][j] for i in range(n) if j in O[i] and data[i].es]
        step_terms[j] = terms
    for i in range(n):  # in-place: a single-op atom saves when its in-place input dies at its step
        if len(data[i].ops) != 1:
            continue
        for _o, inp, _shift, saving in graph.inplace[data[i].ops[0]]:
            if inp not in T:
                continue  # resident throughout the part: it cannot die here
            for j, var in O[i].items():
                nxt = T[inp].get(j + 1)
                if nxt is None:
                    saved = var
                else:
                    saved = m.NewBoolVar(f"Z{i}_{inp}_{j}")
                    m.Add(saved <= var)
                    m.Add(saved + nxt <= 1)
                step_terms[j].append(-saving * saved)
    for j in range(1, n + 1):
        m.Add(sum(step_terms[j]) + constant <= mem)                      # (6)
    m.Minimize(mem)
    if hint is not None:
        _add_hint(m, graph, hint, owner, O, T, tracked, data, start)
    solver = cp_model.CpSolver()
    if deterministic:
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        if time_limit is not None:
            solver.parameters.max_deterministic_time = max(0.1, float(time_limit))
    else:
        solver.parameters.num_workers = workers or min(8, os.cpu_count() or 2)
        if time_limit is not None:
            solver.parameters.max_time_in_seconds = max(0.1, float(time_limit))
    status = solver.Solve(m)
    secs = time.perf_counter() - t_begin
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        name = {cp_model.INFEASIBLE: "infeasible", cp_model.UNKNOWN: "no-solution-in-time",
                cp_model.MODEL_INVALID: "model-invalid"}.get(status, str(status))
        return IlpResult(None, 0, _int_bound(solver) if status == cp_model.UNKNOWN else 0, False,
                         name, before, after, secs)
    step_atom = {}
    for i in range(n):
        for j, var in O[i].items():
            if solver.Value(var):
                step_atom[j] = i
    order = [v for j in range(1, n + 1) for v in data[step_atom[j]].ops]
    prob = Problem(graph, ops=part, start=start, fuse=False)  # the part's exact peak in context
    peak = prob.evaluate(order)
    optimal = status == cp_model.OPTIMAL
    bound = int(round(solver.ObjectiveValue())) if optimal else _int_bound(solver)
    return IlpResult(order, peak, min(bound, peak), optimal, "optimal" if optimal else "feasible", before, after,
                     secs)


def _int_bound(solver) -> int:
    """CP-SAT's proven bound on an integer objective (a float such as 49.9999 means 50)."""
    return int(math.ceil(solver.BestObjectiveBound() - 1e-6))


def _topo(preds, n):
    indeg = [len(p) for p in preds]
    succs = [[] for _ in range(n)]
    for i in range(n):
        for j in preds[i]:
            succs[j].append(i)
    out = [i for i in range(n) if indeg[i] == 0]
    k = 0
    while k < len(out):
        for s in succs[out[k]]:
            indeg[s] -= 1
            if indeg[s] == 0:
                out.append(s)
        k += 1
    return out


def _add_hint(m, graph, hint, owner, O, T, tracked, data, start):
    """Give CP-SAT the hinted order (atoms in the order of their first op) as a starting solution."""
    seen = []
    for v in hint:
        i = owner.get(v)
        if i is not None and i not in seen:
            seen.append(i)
    step = {i: k + 1 for k, i in enumerate(seen)}
    for i, var_by_j in enumerate(O):
        for j, var in var_by_j.items():
            m.AddHint(var, 1 if step.get(i) == j else 0)
    for t, (p, first, last, pinned) in tracked.items():
        rs = [step[i] for i, a in enumerate(data) if t in a.reads and i in step]
        begin = step.get(p, 0) if p >= 0 else 0
        end = last if pinned else max(rs + [begin])
        for j, var in T[t].items():
            m.AddHint(var, 1 if begin <= j <= end and (p < 0 or j >= begin) else 0)


def _cuts(graph: Graph, order: list[int], part_size: int) -> list[int]:
    """Cut positions in ``order`` at low transient footprints, parts of at most ``part_size`` ops."""
    _, transient = footprints(graph, order)
    n = len(order)
    cuts = []
    pos = 0
    while n - pos > part_size:
        lo, hi = pos + max(1, part_size // 2), pos + part_size
        best = min(range(lo, hi + 1), key=lambda k: (transient[k], -k))
        cuts.append(best)
        pos = best
    return cuts


#: above this many atoms the whole-graph ILP is not attempted (partitioned directly)
WHOLE_MAX_ATOMS = 1500


@register("ilp", "Zhong et al. ILP (CP-SAT) with optimality-preserving fusion and memory-aware partitioning",
          exact=True)
def schedule_ilp(graph: Graph, *, time_limit: float | None = 30.0, progress=None, fuse: bool = True,
                 max_variables: int = DEFAULT_MAX_VARIABLES, part_size: int = 80, workers: int | None = None,
                 partition: bool | None = None, deterministic: bool = False) -> ScheduleResult:
    """Schedule with the ILP; partition when the model would exceed ``max_variables``.

    Uses all cores unless ``deterministic`` (then one CP-SAT worker on a
    deterministic time budget: the same graph always gives the same order).
    """
    start_t = time.perf_counter()
    if graph.num_ops == 0:
        raise MemschedError("the graph has no ops to schedule")
    deadline = Deadline.deterministic(time_limit) if deterministic else Deadline(time_limit)
    h_order, h_peak, h_name = heuristic_order(graph)
    b_order, b_peak = beam_search(Problem(graph), 32, deadline=deadline.sub(2.0))
    if b_order is not None and b_peak < h_peak:  # a better starting solution for CP-SAT
        h_order, h_peak, h_name = b_order, b_peak, "beam32"
    lb = graph_lower_bound(graph)
    atoms = ilp_atoms(graph, fuse=fuse)
    stats = {"ops": graph.num_ops, "atoms": len(atoms), "heuristic": h_name, "heuristic_peak": h_peak}
    if progress:
        progress(f"ilp: {graph.num_ops} ops fused into {len(atoms)} atoms")
    whole = None
    if partition is None and len(atoms) > WHOLE_MAX_ATOMS:
        partition = True   # far beyond any model CP-SAT solves whole; building it would eat the budget
        stats["partitioned_because"] = f"{len(atoms)} atoms (whole-graph model tried up to {WHOLE_MAX_ATOMS})"
    if partition is not True:
        try:
            secs, det = deadline.solver_seconds(0.85)
            whole = solve_ilp(graph, atoms, hint=h_order, time_limit=secs, max_variables=max_variables,
                              workers=workers, upper=h_peak, deterministic=det)
        except UnsupportedError as e:
            if partition is False:
                raise
            stats["partitioned_because"] = str(e)
    if whole is not None:
        stats.update(variables_before_pruning=whole.variables_before, variables_after_pruning=whole.variables_after,
                     status=whole.status, solver_bound=whole.bound, solver_seconds=round(whole.seconds, 3))
        order = whole.order if whole.order is not None and whole.peak <= h_peak else h_order
        peak = peak_of_ids(graph, order)
        bound = max(lb, whole.bound if whole.order is not None or whole.status == "no-solution-in-time" else 0)
        if not whole.optimal:
            bound = cut_bound_if_needed(graph, peak, bound, deadline, share=1.0,
                                        candidates=peak_candidates(graph, order))
        stats["gap"] = round(peak / bound - 1, 6) if bound else 0.0
        return make_result(graph, order, "ilp", start_t, proven=whole.optimal or peak <= bound, stats=stats,
                           lower=bound)
    # memory-aware partitioning around the peak of the incumbent
    order = list(h_order)
    cuts = _cuts(graph, order, part_size)
    bounds = [0] + cuts + [len(order)]
    stable, _ = footprints(graph, order)
    part_peaks = [max(stable[a:b]) for a, b in zip(bounds, bounds[1:])]
    solved = 0
    var_before = var_after = 0
    for k in sorted(range(len(part_peaks)), key=lambda k: -part_peaks[k]):
        if deadline.expired() or part_peaks[k] < max(part_peaks) and solved:
            break
        a, b = bounds[k], bounds[k + 1]
        prefix, mask = bitset(order[:a]), bitset(order[a:b])
        p_atoms = ilp_atoms(graph, mask, fuse=fuse)
        try:
            secs, det = deadline.solver_seconds(0.85)
            res = solve_ilp(graph, p_atoms, start=prefix, hint=order[a:b], time_limit=secs,
                            max_variables=max_variables, workers=workers, upper=part_peaks[k], deterministic=det)
        except UnsupportedError:
            continue
        solved += 1
        var_before += res.variables_before
        var_after += res.variables_after
        if res.order is not None and res.peak < part_peaks[k]:
            order[a:b] = res.order
            part_peaks[k] = res.peak
        if progress:
            progress(f"ilp: part {k} ({b - a} ops) peak {res.peak} ({res.status})")
    peak = peak_of_ids(graph, order)
    lb = cut_bound_if_needed(graph, peak, lb, deadline, share=1.0, candidates=peak_candidates(graph, order))
    stats.update(parts=len(part_peaks), parts_solved=solved, variables_before_pruning=var_before,
                 variables_after_pruning=var_after, gap=round(peak / lb - 1, 6) if lb else 0.0)
    return make_result(graph, order, "ilp", start_t, stats=stats, lower=lb)
