"""Lower bounds on the peak memory of any valid schedule.

Two families of bounds, both valid for every topological order:

*Must-live bound.* While op ``v`` runs, a tensor ``t`` that ``v`` does not write is
certainly resident when ``t`` already exists (it is a graph input, or its
producer is an ancestor of ``v``) and is still needed (it is pinned, or some
consumer is ``v`` or a descendant of ``v``). So the stable footprint of ``v`` in
*every* schedule is at least ``must_live(v) + outputs(v) + workspace(v)``. This
subsumes the classic ``inputs + outputs + workspace`` bound of each op.

*End bound.* When the last op runs, every graph output and every unread graph
input is resident, so the peak is at least their total size (plus, for the
cheapest possible last op, its workspace and unpinned outputs).

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

__all__ = ["lower_bound", "lower_bound_details", "LowerBound", "must_live_bounds"]


@dataclass(frozen=True)
class LowerBound:
    bytes: int
    op_bound: int          # max over ops of inputs + outputs + workspace
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


def must_live_bounds(graph: Graph) -> np.ndarray:
    """Per op, the stable footprint it has in every schedule (int64 array of length n)."""
    n = graph.num_ops
    bound = np.array([graph.output_bytes[v] + graph.workspace[v] for v in range(n)], dtype=np.int64)
    if n == 0:
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
                   for v in range(n))
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
