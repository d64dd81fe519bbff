"""Lower bounds on the peak memory of any valid schedule.

Two families of bounds, both valid for every topological order:

*Must-live bound.* While op ``v`` runs, a tensor ``t`` that ``v`` does not write is
certainly resident when ``t`` already exists (it is a graph input, or its
producer is an ancestor of ``v``) and is still needed (it is pinned, or some
consumer is ``v`` or a descendant of ``v``). So the stable footprint of ``v`` in
*every* schedule is at least ``must_live(v) + outputs(v) + workspace(v)``. This
subsumes the classic ``inputs + outputs + workspace`` bound of each op. With
in-place declarations every per-op bound subtracts the op's largest possible
in-place saving (its in-place inputs may all die there).

*End bound.* When the last op runs, every graph output and every unread graph
input is resident, so the peak is at least their total size (plus, for the
cheapest possible last op, its workspace and unpinned outputs).

*Cut bound* (:func:`cut_lower_bound`, opt-in because it costs a max-flow per
op). Just before op ``v`` runs, the executed ops form a set ``S`` closed under
predecessors that holds ``v``'s ancestors and none of its descendants; the
resident bytes are the tensors made in ``S`` (or graph inputs) still needed
outside ``S``. The fewest such bytes over all valid ``S`` is a minimum cut in a
flow network, and adding ``v``'s outputs and workspace bounds ``v``'s stable
footprint in every schedule. It sees "either these tensors or the ones they are
computed from must be resident", which the must-live bound cannot.

Example
-------
>>> from tvm_memsched.core.graph import Graph, Op
>>> g = Graph([("x", 4), ("a", 8), ("b", 8), ("y", 4)],
...           [Op("A", ["x"], ["a"]), Op("B", ["x"], ["b"]), Op("C", ["a", "b"], ["y"])],
...           inputs=["x"], outputs=["y"])
>>> lower_bound(g)   # while B runs, x (read by B) and a (read by C) must be resident
20
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .graph import Graph

__all__ = ["lower_bound", "lower_bound_details", "LowerBound", "must_live_bounds", "cut_lower_bound",
           "MUST_LIVE_MAX_OPS"]


@dataclass(frozen=True)
class LowerBound:
    bytes: int
    op_bound: int          # max over ops of inputs + outputs + workspace - largest in-place saving
    must_live_bound: int   # max over ops of the must-live bound (>= op_bound)
    end_bound: int         # resident at the end of any schedule
    op: str | None         # op attaining the must-live bound

    def to_dict(self) -> dict:
        return dict(bytes=self.bytes, op_bound=self.op_bound, must_live_bound=self.must_live_bound,
                    end_bound=self.end_bound, op=self.op)


def _reach_matrix(graph: Graph) -> np.ndarray:
    """Boolean matrix ``anc[v, u]``: ``u`` is a strict ancestor of ``v``."""
    n = graph.num_ops
    anc = np.zeros((n, n), dtype=bool)
    for v in graph.topo:
        row = anc[v]
        for p in graph.preds[v]:
            row |= anc[p]
            row[p] = True
    return anc


#: above this many ops the must-live bound (an n x n reachability matrix) gives way to the per-op bound
MUST_LIVE_MAX_OPS = 4000


def must_live_bounds(graph: Graph) -> np.ndarray:
    """Per op, the stable footprint it has in every schedule (int64 array of length n).

    Computed once per graph object (a copy is returned). Graphs with more than
    :data:`MUST_LIVE_MAX_OPS` ops get each op's own inputs + outputs + workspace
    (minus its largest in-place saving) instead: still valid, computed in linear
    time and memory.
    """
    cached = getattr(graph, "_must_live", None)
    if cached is None:
        cached = graph._must_live = _must_live(graph)
    return cached.copy()


def _must_live(graph: Graph) -> np.ndarray:
    n = graph.num_ops
    bound = np.array([graph.output_bytes[v] + graph.workspace[v] - graph.max_saving[v] for v in range(n)],
                     dtype=np.int64)
    if n == 0:
        return bound
    if n > MUST_LIVE_MAX_OPS:
        bound += np.array([sum(graph.size[t] for t in graph.op_inputs[v]) for v in range(n)], dtype=np.int64)
        return bound
    anc = _reach_matrix(graph)
    anc_or_self = anc | np.eye(n, dtype=bool)
    desc = anc.T
    everything = np.ones(n, dtype=bool)
    for t in range(graph.num_tensors):
        size = graph.size[t]
        if size == 0:
            continue
        p = graph.producer[t]
        # ops that run after t exists (strictly after its producer)
        exists = everything if p < 0 else desc[p]
        if graph.pinned[t]:
            needed = everything
        else:
            cons = graph.consumers[t]
            if not cons:
                continue
            # v with some consumer c in {v} U desc(v)  <=>  v in anc_or_self(c) for some c
            needed = anc_or_self[list(cons)].any(axis=0) if len(cons) > 1 else anc_or_self[cons[0]]
        bound += size * (exists & needed)
    return bound


def lower_bound_details(graph: Graph) -> LowerBound:
    """All bounds, the best of them in ``.bytes``."""
    n = graph.num_ops
    size = graph.size
    pinned_total = sum(size[t] for t in range(graph.num_tensors) if graph.pinned[t])
    if n == 0:
        total_inputs = sum(size[t] for t in graph.input_ids)
        return LowerBound(total_inputs, 0, 0, total_inputs, None)
    op_bound = max(sum(size[t] for t in graph.op_inputs[v]) + graph.output_bytes[v] + graph.workspace[v]
                   - graph.max_saving[v] for v in range(n))
    ml = must_live_bounds(graph)
    k = int(np.argmax(ml))
    # some sink op runs last: pinned tensors + its workspace + its non-pinned outputs
    sinks = [v for v in range(n) if not graph.succs[v]]
    end = pinned_total + min(graph.workspace[v] + sum(size[t] for t in graph.op_outputs[v]
                                                      if not graph.pinned[t]) for v in sinks)
    best = max(op_bound, int(ml[k]), end)
    return LowerBound(best, op_bound, int(ml[k]), end, graph.ops[k].name)


def lower_bound(graph: Graph) -> int:
    """The best lower bound (bytes) on the peak of any schedule of ``graph``."""
    return lower_bound_details(graph).bytes


def cut_lower_bound(graph: Graph, candidates=None, *, max_candidates: int = 16,
                    time_limit: float | None = None, should_stop=None) -> int:
    """The cut bound (see the module docstring), maximised over candidate ops.

    ``candidates``: op ids to bound (default: the ``max_candidates`` ops with the
    highest must-live bounds). Stops early after ``time_limit`` seconds or when
    ``should_stop()`` (checked once per candidate) returns True; the result is
    always a valid lower bound (and never below :func:`lower_bound`).

    >>> from tvm_memsched.core import Graph, Op
    >>> g = Graph([("x", 4), ("a", 8), ("b", 8), ("y", 4)],
    ...           [Op("A", ["x"], ["a"]), Op("B", ["x"], ["b"]), Op("C", ["a", "b"], ["y"])],
    ...           inputs=["x"], outputs=["y"])
    >>> cut_lower_bound(g)
    20
    """
    import time

    from .maxflow import max_flow

    base_lb = lower_bound(graph)
    n = graph.num_ops
    if n == 0:
        return base_lb
    start = time.perf_counter()
    ml = must_live_bounds(graph)
    if candidates is None:
        candidates = [int(v) for v in np.argsort(-ml, kind="stable")[:max_candidates]]
    # nodes: ops 0..n-1, source n, sink n+1, one node per tensor with several consumers
    src_node, sink_node = n, n + 1
    unbounded = int(sum(graph.size)) + 1              # above any finite cut
    edges: list[tuple[int, int, int]] = []
    nodes = n + 2
    constant = 0
    for t in range(graph.num_tensors):
        size = graph.size[t]
        if not size:
            continue
        p = graph.producer[t]
        src = src_node if p < 0 else p
        if graph.pinned[t]:
            if p < 0:
                constant += size
            else:
                edges.append((p, sink_node, size))   # resident to the end once made
            continue
        cons = graph.consumers[t]
        if len(cons) == 1:
            edges.append((src, cons[0], size))
        elif cons:
            edges.append((src, nodes, size))
            edges.extend((nodes, c, unbounded) for c in cons)
            nodes += 1
    for w in range(n):  # closed under predecessors: w executed => its producers executed
        edges.extend((w, u, unbounded) for u in graph.preds[w])
    best = base_lb
    for v in candidates:
        if time_limit is not None and time.perf_counter() - start > time_limit:
            break
        if should_stop is not None and should_stop():
            break
        forced = [(src_node, u, unbounded) for u in graph.preds[v]] + [(v, sink_node, unbounded)]
        value = max_flow(nodes, edges + forced, src_node, sink_node)
        if value >= unbounded:        # cannot happen for a valid graph: v's ancestors and v run before v
            continue
        best = max(best, value + constant + graph.output_bytes[v] + graph.workspace[v] - graph.max_saving[v])
    return best
