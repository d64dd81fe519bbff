"""Search-based lower bounds: exact optima of relaxed sub-problems.

For a set of ops ``U``, build a smaller problem whose optimal peak can only be
lower than the whole graph's optimum:

* tensors produced in ``U`` keep their producer and their readers inside ``U``
  (readers outside ``U`` are dropped, so they may be freed earlier; graph
  outputs stay pinned);
* a tensor from outside ``U`` whose producer is an ancestor of every op of ``U``
  (or a graph input) exists before ``U`` starts: it becomes an input of the
  sub-problem, pinned if some reader outside ``U`` is a descendant of every op
  of ``U`` (it is then live throughout ``U``);
* any other tensor from outside read by an op of ``U`` is only known to be live
  while that op runs: it is added to the op's workspace;
* an in-place pair whose input became workspace lowers that workspace by the
  pair's saving (the input may die there); other pairs are kept;
* tensors neither produced nor read in ``U`` but produced by a common ancestor
  and read by a common descendant of ``U`` (or pinned) are live throughout ``U``:
  a constant.

Take any schedule of the whole graph and keep the ops of ``U`` in their order:
at every op of ``U`` the sub-problem counts a subset of what is really resident,
so the sub-problem's optimum is a lower bound. Solving it exactly for windows of
a good order (where the peak is) gives bounds much tighter than the cheap ones
of :mod:`tvm_memsched.core.bounds`.

Example
-------
>>> from tvm_memsched.core import example_graph
>>> from tvm_memsched.schedulers import schedule
>>> g = example_graph()
>>> lb = window_lower_bound(g, list(range(g.num_ops)))   # the whole graph: exact
>>> lb == schedule(g, "dp").peak_bytes
True
"""

from __future__ import annotations

from ..core.graph import Graph, Op, bitset
from .base import Deadline
from .search import Problem, best_first

__all__ = ["relaxed_subproblem", "window_lower_bound", "windows_lower_bound"]


def relaxed_subproblem(graph: Graph, ops: list[int], anc: list[int] | None = None,
                       desc: list[int] | None = None) -> Graph:
    """The relaxed problem of ops ``ops`` (see the module docstring) as a Graph."""
    anc = anc if anc is not None else graph.ancestors_masks()
    desc = desc if desc is not None else graph.descendants_masks()
    mask = bitset(ops)
    common_anc = -1
    common_desc = -1
    for v in ops:
        common_anc &= anc[v]
        common_desc &= desc[v]
    size = graph.size
    tensors: dict[int, int] = {}
    inputs, outputs = [], []
    extra_ws = {v: 0 for v in ops}
    constant = 0
    for t in range(graph.num_tensors):
        p = graph.producer[t]
        readers_in = [c for c in graph.consumers[t] if (mask >> c) & 1]
        inside = p >= 0 and (mask >> p) & 1
        before_all = p < 0 or (common_anc >> p) & 1
        after_all = graph.pinned[t] or any((common_desc >> c) & 1 for c in graph.consumers[t])
        if inside:
            tensors[t] = size[t]
            if graph.pinned[t]:
                outputs.append(t)
        elif readers_in:
            if before_all:
                tensors[t] = size[t]
                inputs.append(t)
                if after_all:
                    outputs.append(t)
            else:
                for c in readers_in:
                    extra_ws[c] += size[t]
        elif before_all and after_all and size[t]:
            constant += size[t]
    new_ops = []
    name = graph.tensors
    for v in ops:
        ins = [t for t in graph.op_inputs[v] if t in tensors]
        inplace = []
        for o, i, shift, saving in graph.inplace[v]:
            if i in tensors:
                inplace.append((name[o].name, name[i].name, shift))
            else:  # modelled as workspace of v: it may still die at v and be taken over
                extra_ws[v] -= saving
        new_ops.append(Op(graph.ops[v].name, [name[t].name for t in ins],
                          [name[t].name for t in graph.op_outputs[v]],
                          graph.workspace[v] + extra_ws[v], inplace=inplace))
    tlist = [(graph.tensors[t].name, s) for t, s in tensors.items()]
    in_names = [graph.tensors[t].name for t in inputs]
    if constant:
        tlist.append(("__constant__", constant))
        in_names.append("__constant__")  # an unread input: resident throughout
    return Graph(tlist, new_ops, in_names, [graph.tensors[t].name for t in outputs],
                 name=f"{graph.name}[relaxed]")


def window_lower_bound(graph: Graph, ops: list[int], *, deadline: Deadline | None = None,
                       state_limit: int = 300_000, anc=None, desc=None) -> int:
    """A proven lower bound from the relaxed problem of ``ops`` (0 if it cannot be solved in time)."""
    sub = relaxed_subproblem(graph, ops, anc, desc)
    res = best_first(Problem(sub), deadline=deadline, state_limit=state_limit)
    return res.lower


def windows_lower_bound(graph: Graph, order: list[int], *, width: int = 40, stride: int | None = None,
                        deadline: Deadline | None = None, state_limit: int = 300_000,
                        focus: int | None = None) -> int:
    """Max of :func:`window_lower_bound` over windows of ``order`` (a topological order).

    Windows of ``width`` consecutive ops slide by ``stride`` (default half the
    width). With ``focus`` (a step of ``order``), windows nearest to it are tried
    first, so a deadline spends time where the peak is.
    """
    deadline = deadline or Deadline(None)
    n = len(order)
    if n == 0:
        return 0
    width = min(width, n)
    stride = stride or max(1, width // 2)
    starts = list(range(0, max(1, n - width + 1), stride))
    if starts[-1] != n - width:
        starts.append(n - width)
    if focus is not None:
        starts.sort(key=lambda a: abs(a + width // 2 - focus))
    anc, desc = graph.ancestors_masks(), graph.descendants_masks()
    best = 0
    for a in starts:
        if deadline.expired():
            break
        best = max(best, window_lower_bound(graph, order[a:a + width], deadline=deadline,
                                            state_limit=state_limit, anc=anc, desc=desc))
    return best
