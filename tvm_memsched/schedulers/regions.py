"""Optimality-preserving fusion of isolated regions into macro steps (Zhong et al., Theorem IV.2).

A set U of atoms (macro steps already known to run back to back in some
optimal schedule) is an *isolated region* when

  (a) every tensor U reads from outside is produced by one atom p outside U
      (or they are all graph inputs) and is read only by atoms of U, not pinned;
  (b) a single atom x of U (the exit) writes tensors read outside U or pinned,
      and every other atom of U is an ancestor of x (x runs last in U).

Then U's memory is context-free: after executing an ideal I of U (a set closed
under predecessors within U) it holds c(I) = bytes of outside tensors still to
be read in U + bytes of tensors made in I still to be read in U. With
t0 = c(empty) and tn = c(U) = x's kept outputs, if every interior ideal has
c(I) >= max(t0, tn), U can run as one block in an optimal schedule, in an
internally optimal order. Proof: in an optimal schedule, the other ops Y that
run between U's first and last op do not depend on U (only x's outputs leave
U) and U does not depend on them (its inputs come from p, which runs before
U starts). Move the Y ops, in their order, to just before U up to the point
where their own cumulative footprint is smallest, and the rest to just after
x. Each moved Y op now sees t0 or tn instead of some interior c(I) >= both;
each op of U sees the smallest Y footprint instead of some larger one; nothing
else changes. Finally, with U contiguous, an internally optimal order of U
lowers U's peak without changing t0 or tn.

:func:`fuse_regions` applies this to the macro steps of
:func:`~tvm_memsched.schedulers.fusion.chain_segments` (the ILP scheduler's
atoms), ordering each region internally with the exact search of
:mod:`~tvm_memsched.schedulers.search`.

Example
-------
>>> from tvm_memsched.core import Graph, Op
>>> from tvm_memsched.schedulers.fusion import chain_segments
>>> g = Graph([("x", 8), ("a", 8), ("b", 4), ("c", 4), ("d", 8)],
...           [Op("A", ["x"], ["a"]), Op("B", ["a"], ["b"]), Op("C", ["a"], ["c"]), Op("D", ["b", "c"], ["d"])],
...           inputs=["x"], outputs=["d"])
>>> [g.op_names(a) for a in fuse_regions(g, chain_segments(g))]
[['A', 'B', 'C', 'D']]
"""

from __future__ import annotations

from ..core.graph import Graph, bitset
from .search import Problem, best_first

__all__ = ["fuse_regions"]


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
    """Fuse isolated regions of ``atoms`` (see the module docstring) until none is left.

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
