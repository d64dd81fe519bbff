"""Maximum flow on small integer networks (Dinic's algorithm on flat edge arrays).

The cut bound (:func:`~tvm_memsched.core.bounds.cut_lower_bound`) solves one
maximum flow per candidate op on a network with a node per op; this module does
it on plain integer lists (edge ``e``'s reverse is ``e ^ 1``), without building
graph objects, so a bound over a few hundred ops costs milliseconds.

Example
-------
>>> max_flow(4, [(0, 1, 3), (0, 2, 2), (1, 3, 2), (2, 3, 3), (1, 2, 1)], 0, 3)
5
"""

from __future__ import annotations

__all__ = ["max_flow"]


def max_flow(num_nodes: int, edges, source: int, sink: int) -> int:
    """The value of a maximum ``source``-``sink`` flow; ``edges``: ``(u, v, capacity)`` with integer
    capacities >= 0 (parallel edges add up). An "unbounded" edge is one whose capacity exceeds the sum of
    all finite ones: the caller picks that number.

    >>> max_flow(3, [(0, 1, 5), (1, 2, 4), (1, 2, 2)], 0, 2)
    5
    >>> max_flow(2, [], 0, 1)
    0
    """
    if source == sink:
        raise ValueError("source and sink must differ")
    adj: list[list[int]] = [[] for _ in range(num_nodes)]
    to: list[int] = []
    cap: list[int] = []
    for u, v, c in edges:
        if c < 0:
            raise ValueError(f"negative capacity {c} on edge ({u}, {v})")
        adj[u].append(len(to))
        to.append(v)
        cap.append(c)
        adj[v].append(len(to))
        to.append(u)
        cap.append(0)
    flow = 0
    while True:
        level = [-1] * num_nodes                      # breadth-first levels over edges with room left
        level[source] = 0
        queue = [source]
        for u in queue:
            for e in adj[u]:
                if cap[e] and level[to[e]] < 0:
                    level[to[e]] = level[u] + 1
                    queue.append(to[e])
        if level[sink] < 0:
            return flow
        nxt = [0] * num_nodes                         # next edge to try per node (dead ends are skipped)
        while True:                                   # augmenting paths of the level graph, depth first
            path: list[int] = []
            u = source
            while u != sink:
                edges_u = adj[u]
                while nxt[u] < len(edges_u):
                    e = edges_u[nxt[u]]
                    if cap[e] and level[to[e]] == level[u] + 1:
                        break
                    nxt[u] += 1
                else:
                    if u == source:
                        break
                    level[u] = -1                     # no way on from here in this phase
                    e = path.pop()
                    u = to[e ^ 1]
                    nxt[u] += 1
                    continue
                path.append(e)
                u = to[e]
            if u != sink:
                break
            push = min(cap[e] for e in path)
            for e in path:
                cap[e] -= push
                cap[e ^ 1] += push
            flow += push
