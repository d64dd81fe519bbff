"""Memory simulator: the footprint of a schedule under the exact memory semantics.

Example
-------
>>> from tvm_memsched.core.graph import Graph, Op
>>> g = Graph([("x", 4), ("a", 8), ("b", 8), ("y", 4)],
...           [Op("A", ["x"], ["a"]), Op("B", ["x"], ["b"]), Op("C", ["a", "b"], ["y"])],
...           inputs=["x"], outputs=["y"])
>>> r = simulate(g, ["A", "B", "C"])
>>> r.stable, r.transient, r.peak, r.peak_op
((12, 20, 20), (4, 12, 16, 4), 20, 'B')
>>> sorted(r.live_at_peak)
['a', 'b', 'x']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .graph import Graph

__all__ = ["SimulationResult", "simulate", "peak_bytes", "peak_of_ids", "footprints", "lifetimes",
           "inplace_taken"]


@dataclass(frozen=True)
class SimulationResult:
    """Footprints of one schedule.

    ``stable[i]`` is the resident bytes while ``order[i]`` runs (live tensors, its
    outputs and its workspace). ``transient[i]`` is the resident bytes *before*
    step ``i`` (``transient[0]`` holds the graph inputs; ``transient[n]`` is what
    remains at the end). ``intervals[name] = (first, last)`` are the steps during
    which a tensor is resident (inclusive, in step indices; a graph input starts
    at 0 and a pinned tensor ends at ``n - 1``).
    """

    order: tuple[str, ...]
    stable: tuple[int, ...]
    transient: tuple[int, ...]
    peak: int
    peak_step: int
    live_at_peak: tuple[str, ...]
    workspace_at_peak: int
    intervals: dict

    @property
    def peak_op(self) -> str | None:
        return self.order[self.peak_step] if self.peak_step >= 0 else None

    def to_dict(self) -> dict:
        return {
            "order": list(self.order),
            "peak_bytes": self.peak,
            "peak_step": self.peak_step,
            "peak_op": self.peak_op,
            "live_at_peak": list(self.live_at_peak),
            "workspace_at_peak": self.workspace_at_peak,
            "stable_bytes": list(self.stable),
            "transient_bytes": list(self.transient),
        }


def lifetimes(graph: Graph, ids: Sequence[int]) -> list[tuple[int, int]]:
    """Per tensor id, the inclusive range of steps during which it is resident.

    ``ids`` must be a valid order of op ids (see :meth:`Graph.resolve_order`).
    With no ops, every tensor gets ``(0, -1)`` (resident, but no step runs).
    """
    n = len(ids)
    pos = [0] * graph.num_ops
    for i, v in enumerate(ids):
        pos[v] = i
    out = []
    for t in range(graph.num_tensors):
        p = graph.producer[t]
        start = 0 if p < 0 else pos[p]
        if graph.pinned[t]:
            end = n - 1
        elif graph.consumers[t]:
            end = max(pos[c] for c in graph.consumers[t])
        else:  # an op output nobody reads: resident only while its producer runs
            end = start
        out.append((start, end))
    return out


def inplace_taken(graph: Graph, ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """The in-place overlaps an order realises: ``{output id: (input id, shift)}``.

    An output takes over its declared input when that input dies at the op
    (the op is its last consumer in ``ids`` and the input is not pinned).
    """
    remaining = [len(c) for c in graph.consumers]
    taken = {}
    for v in ids:
        for o, i, shift, _saving in graph.inplace[v]:
            if remaining[i] == 1:
                taken[o] = (i, shift)
        for t in graph.op_inputs[v]:
            remaining[t] -= 1
    return taken


def footprints(graph: Graph, ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """Stable and transient footprints of a validated order of op ids."""
    size, pinned = graph.size, graph.pinned
    remaining = [len(c) for c in graph.consumers]
    live = sum(size[t] for t in graph.input_ids)
    stable: list[int] = []
    transient = [live]
    inplace = graph.inplace
    for v in ids:
        out = graph.output_bytes[v]
        saved = 0
        for _o, i, _shift, saving in inplace[v]:
            if remaining[i] == 1:  # v is the input's last consumer: the output takes it over
                saved += saving
        stable.append(live + out + graph.workspace[v] - saved)
        freed = 0
        for t in graph.op_inputs[v]:
            remaining[t] -= 1
            if remaining[t] == 0 and not pinned[t]:
                freed += size[t]
        for t in graph.op_outputs[v]:
            if not graph.consumers[t] and not pinned[t]:
                freed += size[t]
        live += out - freed
        transient.append(live)
    return stable, transient


def peak_bytes(graph: Graph, order: Sequence) -> int:
    """Peak of an order (op names or ids), validating it. Cheaper than :func:`simulate`."""
    ids = graph.resolve_order(order)
    stable, transient = footprints(graph, ids)
    return max(stable) if stable else transient[0]


def peak_of_ids(graph: Graph, ids: Sequence[int]) -> int:
    """Peak of an order of op ids that is already known to be valid (no checks)."""
    stable, transient = footprints(graph, ids)
    return max(stable) if stable else transient[0]


def simulate(graph: Graph, order: Sequence) -> SimulationResult:
    """Validate ``order`` (op names or ids) and return its footprints.

    Raises :class:`~tvm_memsched.core.errors.OrderError` if ``order`` is not a
    permutation of the ops or runs an op before the producer of one of its inputs.
    """
    ids = graph.resolve_order(order)
    stable, transient = footprints(graph, ids)
    spans = lifetimes(graph, ids)
    names = tuple(graph.ops[v].name for v in ids)
    intervals = {graph.tensors[t].name: spans[t] for t in range(graph.num_tensors)}
    if not ids:
        live = tuple(graph.tensors[t].name for t in graph.input_ids)
        return SimulationResult(names, (), tuple(transient), transient[0], -1, live, 0, intervals)
    peak = max(stable)
    k = stable.index(peak)
    live = tuple(graph.tensors[t].name for t in range(graph.num_tensors)
                 if spans[t][0] <= k <= spans[t][1])
    return SimulationResult(names, tuple(stable), tuple(transient), peak, k, live,
                            graph.workspace[ids[k]], intervals)
