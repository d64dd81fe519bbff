"""Hypothesis strategies and independent reference computations used by the tests.

The reference functions here are deliberately written from the definitions in
the brief, not from the library code, so that tests compare two implementations.
"""

from __future__ import annotations

from hypothesis import strategies as st

from tvm_memsched.core import Graph, Op


@st.composite
def dags(draw, min_ops=0, max_ops=12, max_inputs=3, allow_multi_output=True, allow_workspace=True,
         allow_empty_outputs=True, allow_inplace=False):
    """Random DAGs with multi-consumer tensors, multi-output ops, workspace and odd corners.

    ``allow_inplace``: some ops declare an output written over one of their inputs
    (same-index or with a shift).
    """
    n_in = draw(st.integers(0, 3))
    n_ops = draw(st.integers(min_ops, max_ops))
    size = st.integers(0, 40)
    tensors = []
    inputs = []
    for i in range(n_in):
        tensors.append((f"in{i}", draw(size)))
        inputs.append(f"in{i}")
    available = list(inputs)
    ops = []
    for v in range(n_ops):
        k = draw(st.integers(0, min(max_inputs, len(available))))
        ins = draw(st.lists(st.sampled_from(available), min_size=k, max_size=k)) if k else []
        lo = 0 if allow_empty_outputs else 1
        n_out = draw(st.integers(lo, 2 if allow_multi_output else 1))
        outs = []
        for j in range(n_out):
            name = f"t{v}_{j}"
            tensors.append((name, draw(size)))
            outs.append(name)
        available.extend(outs)
        ws = draw(st.integers(0, 30)) if allow_workspace and draw(st.booleans()) else 0
        inplace = []
        if allow_inplace and ins and outs and draw(st.booleans()):
            shift = draw(st.sampled_from([0, 0, 0, 3, 9]))
            inplace.append((outs[0], draw(st.sampled_from(ins)), shift))
        ops.append(Op(f"op{v}", ins, outs, ws, inplace=inplace))
    produced = [t for op in ops for t in op.outputs]
    candidates = produced + inputs
    outputs = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=4)) if candidates else []
    # ops listed in a shuffled (possibly non-topological) program order
    perm = draw(st.permutations(range(n_ops)))
    ops = [ops[i] for i in perm]
    return Graph(tensors, ops, inputs, outputs, name="hyp")


@st.composite
def graph_and_order(draw, **kw):
    """A graph and a uniformly drawn topological order of it (as op names)."""
    g = draw(dags(**kw))
    done = set()
    order = []
    while len(order) < g.num_ops:
        ready = [v for v in range(g.num_ops) if v not in done and all(p in done for p in g.preds[v])]
        v = draw(st.sampled_from(ready))
        done.add(v)
        order.append(g.ops[v].name)
    return g, order


def reference_footprints(g: Graph, order: list[str]):
    """Stable footprints, transient footprints and peak, straight from the definitions."""
    pos = {name: i for i, name in enumerate(order)}
    n = len(order)
    producer = {}
    readers = {t.name: [] for t in g.tensors}
    for op in g.ops:
        for t in op.outputs:
            producer[t] = op.name
        for t in set(op.inputs):
            readers[t].append(op.name)
    outputs = set(g.outputs)
    inputs = set(g.inputs)

    def created_by(t, i):  # has t been allocated at (or before) step i?
        return t in inputs or pos[producer[t]] <= i

    def needed_at(t, i):  # must t still be resident during step i?
        if t in outputs or (t in inputs and not readers[t]):
            return True
        if t not in inputs and pos[producer[t]] == i:
            return True
        return any(pos[r] >= i for r in readers[t])

    stable = []
    for i, name in enumerate(order):
        live = sum(t.bytes for t in g.tensors if created_by(t.name, i) and needed_at(t.name, i))
        stable.append(live + g.op(name).workspace_bytes - inplace_saving_at(g, name, lambda r: pos[r] > i))
    return _finish(g, order, stable, pos, producer, readers, inputs, outputs)


def inplace_saving_at(g: Graph, name: str, runs_later) -> int:
    """Bytes op ``name`` saves by writing outputs over inputs that die at it, from the definition:
    an input dies when no other reader runs later and it is neither a graph output nor an unread input;
    the pair then needs max(shift + size(input), size(output)) instead of size(input) + size(output)."""
    op = g.op(name)
    size = {t.name: t.bytes for t in g.tensors}
    saved = 0
    for out, inp, shift in op.inplace:
        if inp in g.outputs:
            continue
        others = [o.name for o in g.ops if inp in o.inputs and o.name != name]
        if any(runs_later(r) for r in others):
            continue
        together = size[inp] + size[out]
        shared = max(shift + size[inp], size[out])
        saved += max(0, together - shared)
    return saved


def _finish(g, order, stable, pos, producer, readers, inputs, outputs):
    n = len(order)
    transient = []
    for i in range(n + 1):
        # before step i: created before i, still needed at step i (or pinned at the end)
        tot = 0
        for t in g.tensors:
            made = t.name in inputs or (t.name in producer and pos[producer[t.name]] < i)
            if not made:
                continue
            if i == n:
                keep = t.name in outputs or (t.name in inputs and not readers[t.name])
            else:
                keep = (t.name in outputs or (t.name in inputs and not readers[t.name])
                        or any(pos[r] >= i for r in readers[t.name]))
            tot += t.bytes if keep else 0
        transient.append(tot)
    peak = max(stable) if stable else transient[0]
    return stable, transient, peak


def all_topological_orders(g: Graph):
    """Every topological order (as op ids); only for tiny graphs."""
    n = g.num_ops
    indeg = [len(p) for p in g.preds]
    order = []

    def rec():
        if len(order) == n:
            yield list(order)
            return
        for v in range(n):
            if indeg[v] == 0 and v not in order:
                order.append(v)
                for s in g.succs[v]:
                    indeg[s] -= 1
                yield from rec()
                for s in g.succs[v]:
                    indeg[s] += 1
                order.pop()

    yield from rec()


def brute_force_optimum(g: Graph) -> int:
    """Minimum peak over all topological orders, by a memoized search over executed sets.

    Exhaustive and independent of the library's schedulers: for each set of
    executed ops it recomputes the resident bytes from scratch.
    """
    from functools import lru_cache

    n = g.num_ops
    full = (1 << n) - 1
    sizes = g.size

    def resident_after(done: int) -> int:
        tot = 0
        for t in range(g.num_tensors):
            p = g.producer[t]
            if p >= 0 and not (done >> p) & 1:
                continue
            if g.pinned[t] or any(not (done >> c) & 1 for c in g.consumers[t]):
                tot += sizes[t]
        return tot

    @lru_cache(maxsize=None)
    def best(done: int) -> int:
        if done == full:
            return 0
        base = resident_after(done)
        res = None
        for v in range(n):
            if (done >> v) & 1 or any(not (done >> p) & 1 for p in g.preds[v]):
                continue
            here = base + sum(sizes[t] for t in g.op_outputs[v]) + g.workspace[v] - inplace_saving_at(
                g, g.ops[v].name, lambda r: not (done >> g.op_index[r]) & 1 and g.op_index[r] != v)
            val = max(here, best(done | (1 << v)))
            res = val if res is None else min(res, val)
        return res

    if n == 0:
        return resident_after(0)
    return best(0)


def chainify(g: Graph, seed: int, prob: float = 0.5, max_len: int = 4) -> Graph:
    """Replace some ops by chains of 1..max_len ops with random sizes and workspaces.

    The chain's first op reads the original inputs and its last op writes the
    original outputs, so the result has many fusable and non-fusable chains.
    """
    import random

    rng = random.Random(seed)
    tensors = list((t.name, t.bytes) for t in g.tensors)
    ops = []
    for op in g.ops:
        if not op.outputs or rng.random() > prob:
            ops.append(op)
            continue
        k = rng.randint(2, max_len)
        prev = list(op.inputs)
        for j in range(k - 1):
            name = f"{op.name}_c{j}"
            tensors.append((name, rng.choice([1, 4, 8, 16, 16, 32])))
            ops.append(Op(f"{op.name}_s{j}", prev, [name], rng.choice([0, 0, 0, 3, 12])))
            prev = [name]
        ops.append(Op(op.name, prev, list(op.outputs), op.workspace_bytes))
    return Graph(tensors, ops, g.inputs, g.outputs, name=g.name + "-chains")


def stacked_blocks(n_blocks: int, seed: int, block_ops: int = 5) -> Graph:
    """Random DAG blocks joined in series through single ops (hourglass graphs with cut points)."""
    import random

    rng = random.Random(seed)
    tensors = [("in", rng.randint(1, 32))]
    ops = []
    head = "in"
    for b in range(n_blocks):
        avail = [head]
        for v in range(block_ops):
            k = rng.randint(1, min(3, len(avail)))
            ins = rng.sample(avail, k)
            name = f"b{b}_t{v}"
            tensors.append((name, rng.randint(1, 32)))
            ops.append(Op(f"b{b}_op{v}", ins, [name], rng.choice([0, 0, 5])))
            avail.append(name)
        read = {t for op in ops for t in op.inputs}
        loose = [t for t in avail[1:] if t not in read]
        name = f"b{b}_out"
        tensors.append((name, rng.randint(1, 32)))
        ops.append(Op(f"b{b}_join", loose or [avail[-1]], [name]))
        head = name
    return Graph(tensors, ops, ["in"], [head], name=f"stacked-{n_blocks}-s{seed}")
