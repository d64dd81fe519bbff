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

from ..core.graph import Graph, bitset

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


def chains(graph: Graph, ops: int | None = None) -> list[list[int]]:
    """Maximal structural chains (lists of op ids) among the ops in bitset ``ops`` (default all).

    Every op appears in exactly one chain (possibly of length 1), in topological order.
    """
    allowed = (1 << graph.num_ops) - 1 if ops is None else ops
    nxt: dict[int, int] = {}
    has_prev: set[int] = set()
    for u in range(graph.num_ops):
        if (allowed >> u) & 1 and len(graph.succs[u]) == 1:
            v = graph.succs[u][0]
            if _link(graph, u, v, allowed):
                nxt[u] = v
                has_prev.add(v)
    out = []
    for u in graph.topo:
        if not (allowed >> u) & 1 or u in has_prev:
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
    for i in range(1, n):
        p[i] = a[i - 1] + out[i] + ws[seg[i]]
    excl, all_excl = _exclusive_inputs(graph, seg[0])
    first = excl + out[0] + ws[seg[0]]
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
    ws, outb = graph.workspace, graph.output_bytes
    segments: list[tuple[int, ...]] = []
    for chain in chains(graph, ops):
        s, n = 0, len(chain)
        while s < n:
            v1 = chain[s]
            excl, all_excl = _exclusive_inputs(graph, v1)
            first = excl + outb[v1] + ws[v1]
            best = s + 1
            min_inner = None      # min a(i) over the segment's inner ops
            max_p_tail = 0        # max p(i), i >= 2 (for pull forward)
            max_p_all = first     # max p(i), i >= 1, excluding the last (for push back)
            pull_ok, push_ok = True, all_excl and push_back
            for e in range(s + 1, n):  # try segment chain[s..e]
                prev, cur = chain[e - 1], chain[e]
                a_prev = outb[prev]
                min_inner = a_prev if min_inner is None else min(min_inner, a_prev)
                p_cur = a_prev + outb[cur] + ws[cur]
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


# --------------------------------------------------------------- regions
#
# Theorem IV.2 of Zhong et al., in the form used here. A set U of atoms (macro
# steps already known to run back to back in some optimal schedule) is an
# *isolated region* when
#
#   (a) every tensor U reads from outside is produced by one atom p outside U
#       (or they are all graph inputs) and is read only by atoms of U, not pinned;
#   (b) a single atom x of U (the exit) writes tensors read outside U or pinned,
#       and every other atom of U is an ancestor of x (x runs last in U).
#
# Then U's memory is context-free: after executing an ideal I of U (a set closed
# under predecessors within U) it holds c(I) = bytes of outside tensors still to
# be read in U + bytes of tensors made in I still to be read in U. With
# t0 = c(empty) and tn = c(U) = x's kept outputs, if every interior ideal has
# c(I) >= max(t0, tn), U can run as one block in an optimal schedule, in an
# internally optimal order. Proof: in an optimal schedule, the other ops Y that
# run between U's first and last op do not depend on U (only x's outputs leave
# U) and U does not depend on them (its inputs come from p, which runs before
# U starts). Move the Y ops, in their order, to just before U up to the point
# where their own cumulative footprint is smallest, and the rest to just after
# x. Each moved Y op now sees t0 or tn instead of some interior c(I) >= both;
# each op of U sees the smallest Y footprint instead of some larger one; nothing
# else changes. Finally, with U contiguous, an internally optimal order of U
# lowers U's peak without changing t0 or tn.


def _atom_tables(graph: Graph, atoms: list[tuple[int, ...]]):
    owner = {}
    for a, ops in enumerate(atoms):
        for v in ops:
            owner[v] = a
    made = [set() for _ in atoms]
    reads = [set() for _ in atoms]
    for a, ops in enumerate(atoms):
        for v in ops:
            made[a].update(graph.op_outputs[v])
        for v in ops:
            reads[a].update(t for t in graph.op_inputs[v] if t not in made[a])
    readers = [set() for _ in range(graph.num_tensors)]
    for a in range(len(atoms)):
        for t in reads[a]:
            readers[t].add(a)
    return owner, made, reads, readers


def _region_ideals(members: list[int], preds_in: dict, limit: int):
    """All ideals of the region as frozensets (None if more than ``limit``)."""
    seen = {frozenset()}
    stack = [frozenset()]
    while stack:
        cur = stack.pop()
        for a in members:
            if a not in cur and preds_in[a] <= cur:
                nxt = cur | {a}
                if nxt not in seen:
                    seen.add(nxt)
                    if len(seen) > limit:
                        return None
                    stack.append(nxt)
    return seen


def fuse_regions(graph: Graph, atoms: list[tuple[int, ...]], *, max_size: int = 12, max_ideals: int = 4096,
                 rounds: int = 50) -> list[tuple[int, ...]]:
    """Fuse isolated regions of ``atoms`` (see the comment above) until none is left.

    ``atoms`` are tuples of op ids, each run back to back; the result covers the
    same ops with fewer, larger atoms, each in an internally optimal order.
    Ops outside ``atoms`` count as outside every region.
    """
    atoms = [tuple(a) for a in atoms]
    anc = graph.ancestors_masks()
    desc = graph.descendants_masks()
    for _ in range(rounds):
        owner, made, reads, readers = _atom_tables(graph, atoms)
        kept = [{t for t in made[a] if _used_outside(graph, owner, t, {a})} for a in range(len(atoms))]
        used: set[int] = set()
        new_atoms: list[tuple[int, ...]] = []
        for tensor in range(graph.num_tensors):
            p = graph.producer[tensor]
            src = owner.get(p, -2) if p >= 0 else -1  # -1: graph input, -2: produced by an op outside
            if src == -2 or not readers[tensor] or graph.pinned[tensor]:
                continue
            region = _grow_region(graph, owner, atoms, tensor, src, readers, reads, kept, max_size, desc)
            if region is None or region & used or len(region) < 2:
                continue
            order = _region_order(graph, owner, atoms, region, reads, kept, readers, max_ideals, anc)
            if order is None:
                continue
            used |= region
            new_atoms.append(tuple(v for a in order for v in atoms[a]))
        if not used:
            break
        atoms = new_atoms + [atoms[a] for a in range(len(atoms)) if a not in used]
    return atoms


def _used_outside(graph: Graph, owner: dict, t: int, region: set) -> bool:
    """Is tensor ``t`` pinned or read by an op outside the atoms of ``region``?"""
    return graph.pinned[t] or any(owner.get(c, -1) not in region for c in graph.consumers[t])


def _source(graph: Graph, owner: dict, t: int) -> int:
    p = graph.producer[t]
    return owner.get(p, -2) if p >= 0 else -1


def _grow_region(graph, owner, atoms, tensor, src, readers, reads, kept, max_size, desc):
    """Grow a candidate region from the readers of ``tensor`` until it has a single exit, or None.

    Atoms that feed the region and descend from ``src`` (they lie between the
    fork and the region) are pulled in; any other outside producer rules the
    region out.
    """
    src_desc = -1 if src < 0 else 0
    if src >= 0:
        for v in atoms[src]:
            src_desc |= desc[v]
    region = set(readers[tensor])
    for _ in range(4 * max_size + 4):
        if len(region) > max_size:
            return None
        grow = set()
        for a in region:
            for t in reads[a]:
                s = _source(graph, owner, t)
                if s in region:
                    continue
                if s == src:
                    if graph.pinned[t] or any(c not in owner for c in graph.consumers[t]):
                        return None  # outside inputs must be read only inside the region
                    grow |= readers[t] - region
                elif s >= 0 and (src_desc >> atoms[s][0]) & 1:
                    grow.add(s)      # between the fork and the region
                else:
                    return None      # a second outside producer
        if not grow:
            exits = [a for a in region if any(_used_outside(graph, owner, t, region) for t in kept[a])]
            if len(exits) == 1 and len(region) > 1:
                return region
            for a in exits:  # several ways out (or a lone atom): grow into their readers
                for t in kept[a]:
                    if any(c not in owner for c in graph.consumers[t]) or graph.pinned[t]:
                        return None  # a second way out of the region that growing cannot absorb
                    grow |= readers[t] - region
        if not grow:
            return None
        region |= grow
    return None


def _region_order(graph, owner, atoms, region, reads, kept, readers, max_ideals, anc):
    """The internally optimal atom order of ``region`` if the interior condition holds, else None."""
    from .search import Problem, best_first  # local: search imports this module

    size = graph.size
    members = sorted(region)
    preds_in = {a: frozenset(_source(graph, owner, t) for t in reads[a]) & region for a in members}
    ext = {t for a in members for t in reads[a] if _source(graph, owner, t) not in region}
    exits = [a for a in members if any(_used_outside(graph, owner, t, region) for t in kept[a])]
    if len(exits) != 1:
        return None
    x = exits[0]
    x_anc = 0
    for v in atoms[x]:
        x_anc |= anc[v]
    if any(not (x_anc >> v) & 1 for a in members if a != x for v in atoms[a]):
        return None  # x must run last: outside readers of x's outputs may not overlap U
    ideals = _region_ideals(members, preds_in, max_ideals)
    if ideals is None:
        return None
    full = frozenset(members)

    def contribution(ideal) -> int:
        tot = sum(size[t] for t in ext if readers[t] - ideal)
        for a in ideal:
            tot += sum(size[t] for t in kept[a] if readers[t] - ideal)
        return tot

    t0 = sum(size[t] for t in ext)
    tn = sum(size[t] for t in kept[x] if _used_outside(graph, owner, t, region))
    need = max(t0, tn)
    if any(ideal and ideal != full and contribution(ideal) < need for ideal in ideals):
        return None
    ops_mask = bitset(v for a in members for v in atoms[a])
    start = 0
    for a in members:
        for v in atoms[a]:
            start |= anc[v]
    res = best_first(Problem(graph, ops=ops_mask, start=start & ~ops_mask, macros=[atoms[a] for a in members]))
    pos = {v: i for i, v in enumerate(res.order)}
    return sorted(members, key=lambda a: pos[atoms[a][0]])
