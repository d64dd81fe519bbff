"""Baseline operator orders: program order, Kahn's algorithm, reverse post-order.

All functions return a list of op ids forming a topological order.

Example
-------
>>> from tvm_memsched.core.graph import Graph, Op
>>> g = Graph([("x", 1), ("a", 1), ("b", 1), ("c", 1), ("y", 1)],
...           [Op("A", ["x"], ["a"]), Op("B", ["a"], ["b"]), Op("C", ["x"], ["c"]),
...            Op("D", ["b", "c"], ["y"])], inputs=["x"], outputs=["y"])
>>> g.op_names(program_order(g)), g.op_names(kahn_order(g)), g.op_names(rpo_order(g))
(['A', 'B', 'C', 'D'], ['A', 'C', 'B', 'D'], ['C', 'A', 'B', 'D'])
"""

from __future__ import annotations

from collections import deque

from .graph import Graph

__all__ = ["program_order", "kahn_order", "rpo_order", "BASELINE_ORDERS"]


def program_order(graph: Graph) -> list[int]:
    """The ops in the order the graph lists them.

    When that list is not topological (a producer listed after a consumer), this
    is the topological order closest to it: repeatedly run the first-listed ready op.
    """
    return list(graph.topo)


def kahn_order(graph: Graph) -> list[int]:
    """Kahn's algorithm with a FIFO queue (ops become ready in first-in, first-out order)."""
    indeg = [len(p) for p in graph.preds]
    queue = deque(v for v in range(graph.num_ops) if indeg[v] == 0)
    order: list[int] = []
    while queue:
        v = queue.popleft()
        order.append(v)
        for s in graph.succs[v]:
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.append(s)
    return order


def rpo_order(graph: Graph) -> list[int]:
    """Reverse post-order of a depth-first search from the source ops.

    This is the order TFLite-style converters produce and that the HMCOS paper
    calls RPO. Sources and successors are visited in program order.
    """
    n = graph.num_ops
    visited = [False] * n
    post: list[int] = []
    for root in range(n):
        if visited[root] or graph.preds[root]:
            continue
        visited[root] = True
        stack = [(root, iter(graph.succs[root]))]
        while stack:
            v, it = stack[-1]
            for s in it:
                if not visited[s]:
                    visited[s] = True
                    stack.append((s, iter(graph.succs[s])))
                    break
            else:
                stack.pop()
                post.append(v)
    post.reverse()
    return post


BASELINE_ORDERS = {"program": program_order, "kahn": kahn_order, "rpo": rpo_order}
