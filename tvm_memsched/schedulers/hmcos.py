"""HMCOS: hierarchical memory-constrained operator scheduling (Wang et al., DAC 2022).

The graph is organised in two levels before scheduling:

* **Sequences**: op chains meeting the paper's Conditions 1 and 2 (the first op
  has the highest stable footprint; transient footprints never increase), found
  by :func:`.fusion.chain_segments` with the pull-forward condition only.
* **Groups** stand in for NAS cells, which are not given to us: a *cell output*
  is a sequence starting with a concatenation (or, in graphs without op kinds,
  any sequence joining several others), and its group is the region it
  post-dominates and that does not dominate it (the cell's body). As in the
  paper, a second group "intrudes" on the next cells: among the sequences the
  cell output dominates, the connected subset with the smallest output size.

Iterative scheduling (Algorithm 1): schedule the top level with the DP, where a
group runs as a unit with an internal schedule for its *value context* (which
external inputs it uses terminally; memoized); find the tensors live at the
peak; disassemble the groups that define them; repeat with the last peak as
the budget until no group is disassembled. Scheduling-strategy selection keeps
a group's reverse post-order where it does not lift the peak.

HMCOS is a heuristic: groups forbid interleaving where the peak is not, so the
result is optimal only when it meets the lower bound. It is never worse than
reverse post-order.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> r = schedule_hmcos(example_graph())
>>> r.peak_bytes <= r.stats["rpo_peak"]
True
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import networkx as nx

from ..core.graph import Graph
from ..core.orders import rpo_order
from ..core.simulate import peak_of_ids, simulate
from .base import Deadline, ScheduleResult, make_result
from .fusion import chain_segments
from .registry import register
from .search import Problem, best_first

__all__ = ["Hierarchy", "build_hierarchy", "schedule_hmcos"]


@dataclass
class Hierarchy:
    """Sequences (op-id tuples) and groups (lists of sequence ids)."""

    seqs: list[tuple[int, ...]]
    seq_of_op: list[int]
    groups: dict[int, list[int]] = field(default_factory=dict)
    group_of_seq: list[int | None] = field(default_factory=list)

    def top_level(self) -> list[tuple[str, int]]:
        """Top-level vertices: groups and ungrouped sequences."""
        items = [("group", g) for g in self.groups]
        items += [("seq", s) for s in range(len(self.seqs)) if self.group_of_seq[s] is None]
        return items

    def disassemble(self, gid: int) -> None:
        for s in self.groups.pop(gid):
            self.group_of_seq[s] = None


class _DomTree:
    """Dominator tree with O(1) ancestor queries (networkx computes the immediate dominators)."""

    def __init__(self, g: nx.DiGraph, root):
        idom = nx.immediate_dominators(g, root)
        children: dict = {}
        for v, d in idom.items():
            if v != d:
                children.setdefault(d, []).append(v)
        self.pre, self.post = {}, {}
        clock = 0
        stack = [(root, False)]
        while stack:
            v, done = stack.pop()
            if done:
                self.post[v] = clock
                clock += 1
                continue
            self.pre[v] = clock
            clock += 1
            stack.append((v, True))
            stack.extend((c, False) for c in children.get(v, ()))

    def dominates(self, a, b) -> bool:
        """``a`` dominates ``b`` (every vertex dominates itself)."""
        if a not in self.pre or b not in self.pre:
            return False
        return self.pre[a] <= self.pre[b] and self.post[b] <= self.post[a]


def _seq_graph(graph: Graph, seqs, seq_of_op) -> nx.DiGraph:
    sg = nx.DiGraph()
    sg.add_nodes_from(range(len(seqs)))
    for s, ops in enumerate(seqs):
        for v in ops:
            for w in graph.succs[v]:
                t = seq_of_op[w]
                if t != s:
                    sg.add_edge(s, t)
    return sg


def _is_concat(graph: Graph, v: int) -> bool:
    kind = str(graph.ops[v].attrs.get("kind", "")).lower()
    return "concat" in kind


def build_hierarchy(graph: Graph, *, max_group: int = 64, intrusion: bool = True,
                    intrusion_limit: int = 20000, deadline: Deadline | None = None) -> Hierarchy:
    """Sequences and groups of ``graph`` (see the module docstring).

    ``deadline``: checked once per candidate group; when it expires, the groups
    found so far are kept and the rest of the graph stays as sequences.
    """
    seqs = chain_segments(graph, push_back=False)
    seq_of_op = [0] * graph.num_ops
    for s, ops in enumerate(seqs):
        for v in ops:
            seq_of_op[v] = s
    h = Hierarchy(seqs, seq_of_op, {}, [None] * len(seqs))
    if len(seqs) < 3:
        return h
    sg = _seq_graph(graph, seqs, seq_of_op)
    src, snk = "source", "sink"
    fwd = sg.copy()
    fwd.add_edges_from((src, s) for s in sg if sg.in_degree(s) == 0)
    bwd = sg.reverse(copy=True)
    bwd.add_edges_from((snk, s) for s in sg if sg.out_degree(s) == 0)
    dom, pdom = _DomTree(fwd, src), _DomTree(bwd, snk)
    topo = list(nx.topological_sort(sg))
    size = graph.size

    def out_bytes(s):
        return sum(size[t] for t in graph.op_outputs[seqs[s][-1]])

    concat_mode = any(_is_concat(graph, ops[0]) for ops in seqs)
    if concat_mode:
        cell_outs = [s for s in topo if _is_concat(graph, seqs[s][0])]
    else:  # no op kinds: every join is a candidate, outermost first
        cell_outs = [s for s in reversed(topo) if sg.in_degree(s) >= 2]
    next_gid = 0

    def quotient_acyclic(extra: set[int]) -> bool:
        """Would the top-level graph stay a DAG with ``extra`` as one more group?"""
        item = {}
        for s in sg:
            gid = h.group_of_seq[s]
            item[s] = ("g", gid) if gid is not None else ("s", s)
        for s in extra:
            item[s] = ("g", "new")
        q = nx.DiGraph()
        q.add_nodes_from(set(item.values()))
        q.add_edges_from((item[a], item[b]) for a, b in sg.edges if item[a] != item[b])
        return nx.is_directed_acyclic_graph(q)

    def make_group(members: set[int]) -> None:
        nonlocal next_gid
        if len(members) < 2 or not quotient_acyclic(members):
            return  # groups run as units: they must not depend on each other in a cycle
        h.groups[next_gid] = sorted(members)
        for s in members:
            h.group_of_seq[s] = next_gid
        next_gid += 1

    for out in cell_outs:
        if deadline is not None and deadline.expired():
            break
        if h.group_of_seq[out] is not None:
            continue
        # the cell body: reachable backwards, post-dominated by `out`, not dominating it
        region = {out}
        stack = [out]
        while stack:
            s = stack.pop()
            for p in sg.predecessors(s):
                if p in region or h.group_of_seq[p] is not None:
                    continue
                if pdom.dominates(out, p) and not dom.dominates(p, out):
                    region.add(p)
                    stack.append(p)
        if len(region) > max_group:
            continue
        make_group(region)
        if not (intrusion and concat_mode):
            continue
        # intrusion: the smallest-output connected subset of what `out` dominates
        dominated = set()
        stack = [out]
        while stack:
            s = stack.pop()
            for c in sg.successors(s):
                if c not in dominated and h.group_of_seq[c] is None and dom.dominates(out, c):
                    dominated.add(c)
                    stack.append(c)
        if len(dominated) < 2:
            continue
        best = _min_output_subset(sg, out, dominated, out_bytes, intrusion_limit)
        if best is not None and len(best) >= 2 and sum(out_bytes(s) for s in best) <= out_bytes(out) * 4:
            make_group(best)
    return h


def _min_output_subset(sg: nx.DiGraph, root: int, cand: set[int], out_bytes, limit: int):
    """Downward-closed subsets of ``cand`` grown from ``root``'s successors; the one whose
    outputs used outside it are smallest (ties: the larger set). Exhaustive up to ``limit``."""
    preds_in = {c: [p for p in sg.predecessors(c) if p in cand] for c in cand}
    seen: set[frozenset] = set()
    best = None
    best_key = None
    budget = [limit]

    def frontier_bytes(chosen: frozenset) -> int:
        return sum(out_bytes(s) for s in chosen if any(c not in chosen for c in sg.successors(s)))

    def rec(chosen: frozenset):
        nonlocal best, best_key
        if chosen in seen or budget[0] <= 0:
            return
        seen.add(chosen)
        budget[0] -= 1
        if chosen:
            key = (frontier_bytes(chosen), -len(chosen))
            if best_key is None or key < best_key:
                best, best_key = set(chosen), key
        for c in cand:
            if c not in chosen and all(p in chosen for p in preds_in[c]):
                rec(chosen | {c})

    rec(frozenset())
    return best


class _HierProblem(Problem):
    """The top level of a hierarchy as a search problem; groups resolve their order per context."""

    additive = False        # a group's order, so its footprint, depends on the live bytes

    def __init__(self, graph: Graph, hier: Hierarchy, budget_ref: list, rpo_pos: list[int],
                 deadline: Deadline, stats: dict):
        self.items = hier.top_level()
        macros = []
        for kind, idx in self.items:
            if kind == "seq":
                macros.append(hier.seqs[idx])
            else:
                ops = [v for s in hier.groups[idx] for v in hier.seqs[s]]
                macros.append(tuple(sorted(ops, key=lambda v: rpo_pos[v])))
        super().__init__(graph, macros=macros)
        self.hier = hier
        self.budget_ref = budget_ref
        self.deadline = deadline
        self.stats = stats
        self.memo: dict = stats.setdefault("_memo", {})
        self.group_index = {i: idx for i, (kind, idx) in enumerate(self.items) if kind == "group"}
        self.ext_inputs = {}
        for i, gid in self.group_index.items():
            mask = self.macro_mask[i]
            ext = sorted({t for v in self.macros[i] for t in graph.op_inputs[v]
                          if graph.producer[t] < 0 or not (mask >> graph.producer[t]) & 1})
            self.ext_inputs[i] = ext

    def _group_order(self, i: int, done: int, live: int) -> tuple[int, ...]:
        g = self.graph
        mask = self.macro_mask[i]
        ctx = 0
        for k, t in enumerate(self.ext_inputs[i]):
            if not g.pinned[t] and not (g.consumer_mask[t] & ~(done | mask)):
                ctx |= 1 << k
        gid = self.group_index[i]
        key = (tuple(self.hier.groups[gid]), ctx)
        entry = self.memo.get(key)
        if entry is None:
            self.stats["memo_misses"] = self.stats.get("memo_misses", 0) + 1
            rpo = self.macros[i]  # reverse post-order restricted to the group
            sub = Problem(g, ops=mask, start=done,
                          macros=[self.hier.seqs[s] for s in self.hier.groups[gid]])
            rpo_rel = sub.evaluate(list(rpo)) - live
            entry = {"rpo": (rpo, rpo_rel), "sub": sub, "dp": None}
            self.memo[key] = entry
        else:
            self.stats["memo_hits"] = self.stats.get("memo_hits", 0) + 1
        rpo, rpo_rel = entry["rpo"]
        if live + rpo_rel <= self.budget_ref[0]:
            return rpo  # strategy selection: the simple order does not lift the peak
        if entry["dp"] is None:
            sub = entry["sub"]
            res = best_first(sub, upper=rpo_rel + live, upper_order=list(rpo), deadline=self.deadline)
            self.stats["group_dp"] = self.stats.get("group_dp", 0) + 1
            entry["dp"] = tuple(res.order)
        return entry["dp"]

    def run_macro(self, done: int, live: int, i: int):
        if i in self.group_index:
            saved = self.macros[i]
            self.macros[i] = self._group_order(i, done, live)
            try:
                return super().run_macro(done, live, i)
            finally:
                self.macros[i] = saved
        return super().run_macro(done, live, i)

    def expand_order(self, macro_seq: list[int]) -> list[int]:
        done, live = self.start, self.t0
        out: list[int] = []
        for i in macro_seq:
            out.extend(self._group_order(i, done, live) if i in self.group_index else self.macros[i])
            done, live, _ = self.run_macro(done, live, i)
        return out


@register("hmcos", "HMCOS hierarchical iterative scheduling (sequences, groups, disassembly at the peak)")
def schedule_hmcos(graph: Graph, *, time_limit: float | None = None, progress=None, max_group: int = 64,
                   intrusion: bool = True, state_limit: int = 1_000_000, deterministic: bool = False,
                   deadline: Deadline | None = None) -> ScheduleResult:
    """``deterministic``: count ``time_limit`` as deterministic work; ``deadline``: a budget to share."""
    start = time.perf_counter()
    if deadline is None:
        deadline = Deadline.deterministic(time_limit) if deterministic else Deadline(time_limit)
    rpo = rpo_order(graph)
    rpo_pos = [0] * graph.num_ops
    for i, v in enumerate(rpo):
        rpo_pos[v] = i
    best_order, best_peak = rpo, peak_of_ids(graph, rpo)
    rpo_peak = best_peak
    hier = build_hierarchy(graph, max_group=max_group, intrusion=intrusion, deadline=deadline.share(0.5))
    stats: dict = {"rpo_peak": rpo_peak, "sequences": len(hier.seqs), "groups": len(hier.groups),
                   "iterations": []}
    budget = [best_peak]
    timed_out = False
    while True:
        prob = _HierProblem(graph, hier, budget, rpo_pos, deadline, stats)
        res = best_first(prob, upper=best_peak + 1, upper_order=best_order, deadline=deadline,
                         state_limit=state_limit, progress=progress)
        order = res.order
        peak = peak_of_ids(graph, order)
        stats["iterations"].append({"top_level": prob.num_macros, "peak": peak, "states": res.states,
                                    "status": res.status, "groups": len(hier.groups)})
        if progress:
            progress(f"hmcos iteration {len(stats['iterations'])}: peak {peak}, {len(hier.groups)} groups")
        if peak < best_peak or (peak == best_peak and order != best_order):
            best_order, best_peak = order, min(best_peak, peak)
        if res.status in ("timeout", "state-limit"):
            timed_out = True
            break
        # the tensors live at the peak, and the groups that define them
        sim = simulate(graph, order)
        to_split = set()
        for name in sim.live_at_peak:
            p = graph.producer[graph.tensor_index[name]]
            if p >= 0:
                gid = hier.group_of_seq[hier.seq_of_op[p]]
                if gid is not None:
                    to_split.add(gid)
        if not to_split:
            break
        for gid in to_split:
            hier.disassemble(gid)
        budget[0] = best_peak
    stats.pop("_memo", None)
    stats["timed_out"] = timed_out
    stats["groups_left"] = len(hier.groups)
    return make_result(graph, best_order, "hmcos", start, stats=stats)

