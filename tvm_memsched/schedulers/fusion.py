"""Optimality-preserving fusion of linear op chains into macro steps.

A *chain* is a run of ops ``v1 .. vn`` where each ``v(i+1)`` is the only successor
of ``v(i)``, reads only outputs of ``v(i)``, and every output of ``v(i)`` (i < n) is
read only by ``v(i+1)`` and is not a graph output. Fusing a chain segment means
forcing its ops to run back to back. This never raises the optimal peak when one
of two exchange conditions holds (HMCOS's sequence Conditions 1-2 and Zhong et
al.'s Theorem IV.1, restated for multi-output ops and workspace):

Let ``a(i)`` be the bytes the chain keeps resident after ``v(i)``, ``p(i) = a(i-1) +
out(v(i)) + workspace(v(i))`` the chain's share of the stable footprint of ``v(i)``
(``i >= 2``), and ``excl(v1)`` the bytes of the inputs only ``v1`` reads.

* *pull forward* (decreasing chains): ``a(n) <= a(i)`` for ``1 <= i < n`` and
  ``p(i) <= excl(v1) + out(v1) + workspace(v1)`` for ``i >= 2``. Moving ``v2..vn`` to
  run right after ``v1`` gives every op in between a smaller chain share and runs
  the moved ops below the stable footprint ``v1`` already had.
* *push back* (increasing chains): every input of ``v1`` is read only by ``v1``,
  ``excl(v1) <= a(i)`` for ``1 <= i < n`` and ``p(i) <= p(n)`` for ``i < n`` (with
  ``p(1) = excl(v1) + out(v1) + workspace(v1)``). Moving ``v1..v(n-1)`` to run right
  before ``vn`` gives every op in between a smaller chain share and runs the moved
  ops below the stable footprint ``vn`` already had.

In-place declarations: an op inside a chain reads only tensors that die there,
so its in-place saving is fixed and is subtracted from ``p(i)``; ``v1`` may read
tensors other ops read too, so its share subtracts its *largest* possible saving
(a smaller reference keeps both conditions sufficient).

Applying one exchange never breaks the contiguity of another segment, so all
segments can be fused at once.

Example
-------
>>> from tvm_memsched.core import Graph, Op
>>> g = Graph([("x", 8), ("a", 8), ("b", 8), ("c", 8)],
...           [Op("A", ["x"], ["a"]), Op("B", ["a"], ["b"]), Op("C", ["b"], ["c"])],
...           inputs=["x"], outputs=["c"])
>>> [g.op_names(m) for m in chain_segments(g)]
[['A', 'B', 'C']]
"""

from __future__ import annotations

from ..core.graph import Graph

__all__ = ["chains", "chain_segments", "fusable"]


def _link(graph: Graph, u: int, v: int, allowed: int) -> bool:
    """True if ``v`` may follow ``u`` inside a chain."""
    if not ((allowed >> u) & 1 and (allowed >> v) & 1):
        return False
    if graph.succs[u] != (v,) or graph.preds[v] != (u,):
        return False
    outs = graph.op_outputs[u]
    if not outs or any(graph.pinned[t] or graph.consumers[t] != (v,) for t in outs):
        return False
    return all(graph.producer[t] == u for t in graph.op_inputs[v])


def _members_in_topo_order(graph: Graph, mask: int) -> list[int]:
    """The ops of bitset ``mask`` in ``graph.topo`` order, in time linear in their number."""
    pos = getattr(graph, "_topo_pos", None)
    if pos is None:
        pos = [0] * graph.num_ops
        for i, v in enumerate(graph.topo):
            pos[v] = i
        graph._topo_pos = pos
    ids = []
    while mask:
        low = mask & -mask
        ids.append(low.bit_length() - 1)
        mask ^= low
    return sorted(ids, key=pos.__getitem__)


def chains(graph: Graph, ops: int | None = None) -> list[list[int]]:
    """Maximal structural chains (lists of op ids) among the ops in bitset ``ops`` (default all).

    Every op appears in exactly one chain (possibly of length 1), in topological order.
    """
    allowed = (1 << graph.num_ops) - 1 if ops is None else ops
    members = _members_in_topo_order(graph, allowed)
    nxt: dict[int, int] = {}
    has_prev: set[int] = set()
    for u in members:
        if len(graph.succs[u]) == 1:
            v = graph.succs[u][0]
            if _link(graph, u, v, allowed):
                nxt[u] = v
                has_prev.add(v)
    out = []
    for u in members:
        if u in has_prev:
            continue
        chain = [u]
        while chain[-1] in nxt:
            chain.append(nxt[chain[-1]])
        out.append(chain)
    return out


def _kept(graph: Graph, v: int) -> int:
    """Bytes of outputs of ``v`` that stay resident after ``v`` runs."""
    return sum(graph.size[t] for t in graph.op_outputs[v] if graph.consumers[t] or graph.pinned[t])


def _exclusive_inputs(graph: Graph, v: int) -> tuple[int, bool]:
    """(bytes of inputs only ``v`` reads, whether *all* inputs of ``v`` are such)."""
    tot, all_excl = 0, True
    for t in graph.op_inputs[v]:
        if graph.consumers[t] == (v,) and not graph.pinned[t]:
            tot += graph.size[t]
        else:
            all_excl = False
    return tot, all_excl


def fusable(graph: Graph, seg: list[int]) -> bool:
    """Whether the chain segment ``seg`` satisfies one of the exchange conditions."""
    n = len(seg)
    if n <= 1:
        return True
    ws = graph.workspace
    out = [graph.output_bytes[v] for v in seg]
    a = [out[i] for i in range(n - 1)] + [_kept(graph, seg[-1])]  # a(i), 0-based
    p = [0] * n
    save = graph.max_saving
    for i in range(1, n):
        p[i] = a[i - 1] + out[i] + ws[seg[i]] - save[seg[i]]
    excl, all_excl = _exclusive_inputs(graph, seg[0])
    first = excl + out[0] + ws[seg[0]] - save[seg[0]]
    inner_min = min(a[: n - 1])
    if a[-1] <= inner_min and all(p[i] <= first for i in range(1, n)):
        return True
    if all_excl:
        p[0] = first
        if excl <= inner_min and all(p[i] <= p[-1] for i in range(n - 1)):
            return True
    return False


def chain_segments(graph: Graph, ops: int | None = None, *, push_back: bool = True) -> list[tuple[int, ...]]:
    """Split every chain into maximal fusable segments (greedy, left to right).

    Returns macro steps (tuples of op ids) covering every op in ``ops`` exactly once.
    With ``push_back=False`` only the pull-forward condition (HMCOS's sequence
    Conditions 1 and 2) is used. The conditions of :func:`fusable` are tracked
    incrementally, so this is linear in the chain length times the segment length.
    """
    ws, outb, save = graph.workspace, graph.output_bytes, graph.max_saving
    segments: list[tuple[int, ...]] = []
    for chain in chains(graph, ops):
        s, n = 0, len(chain)
        while s < n:
            v1 = chain[s]
            excl, all_excl = _exclusive_inputs(graph, v1)
            first = excl + outb[v1] + ws[v1] - save[v1]
            best = s + 1
            min_inner = None      # min a(i) over the segment's inner ops
            max_p_tail = 0        # max p(i), i >= 2 (for pull forward)
            max_p_all = first     # max p(i), i >= 1, excluding the last (for push back)
            pull_ok, push_ok = True, all_excl and push_back
            for e in range(s + 1, n):  # try segment chain[s..e]
                prev, cur = chain[e - 1], chain[e]
                a_prev = outb[prev]
                min_inner = a_prev if min_inner is None else min(min_inner, a_prev)
                p_cur = a_prev + outb[cur] + ws[cur] - save[cur]
                pull_ok = pull_ok and p_cur <= first and max(max_p_tail, p_cur) <= first
                push_ok = push_ok and excl <= min_inner
                if not pull_ok and not push_ok:
                    break
                a_last = _kept(graph, cur)
                ok_pull = pull_ok and a_last <= min_inner
                ok_push = push_ok and max_p_all <= p_cur
                if ok_pull or ok_push:
                    best = e + 1
                max_p_tail = max(max_p_tail, p_cur)
                max_p_all = max(max_p_all, p_cur)
            segments.append(tuple(chain[s:best]))
            s = best
    return segments
