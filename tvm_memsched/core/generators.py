"""Synthetic graphs: random DAGs, NAS-like cell networks, and the built-in example.

These feed the tests, the scheduler benchmarks and the learned scheduler's
training set. All generators are deterministic functions of their ``seed``.

Example
-------
>>> g = random_dag(12, seed=3)
>>> g.num_ops
12
>>> example_graph().name
'example-nas-cells'
"""

from __future__ import annotations

import random

from .graph import Graph, Op

__all__ = ["random_dag", "layered_dag", "coral_dag", "cell_network", "example_graph"]


def random_dag(n_ops: int, seed: int = 0, *, max_inputs: int = 3, multi_output_prob: float = 0.15,
               workspace_prob: float = 0.2, extra_output_prob: float = 0.1, n_inputs: int | None = None,
               sizes: tuple[int, int] = (1, 64), locality: int | None = None) -> Graph:
    """A random DAG of ``n_ops`` ops with the features the memory model must handle.

    Ops read 0..``max_inputs`` earlier tensors (so tensors get several consumers),
    some write two outputs, some need workspace, some graph inputs are left
    unread, and a few intermediate tensors are also graph outputs. ``locality``
    (if given) restricts inputs to tensors written by the last ``locality`` ops,
    which gives long, narrow graphs.
    """
    rng = random.Random(seed)
    lo, hi = sizes
    n_in = n_inputs if n_inputs is not None else rng.randint(1, 2)
    tensors: list[tuple[str, int]] = []
    inputs = []
    for i in range(n_in):
        tensors.append((f"in{i}", rng.randint(lo, hi)))
        inputs.append(f"in{i}")
    avail: list[tuple[str, int]] = [(name, -1) for name in inputs]  # (tensor, producing op)
    ops: list[Op] = []
    for v in range(n_ops):
        pool = avail if locality is None else [a for a in avail if a[1] >= v - locality or a[1] < 0]
        k = rng.randint(1 if v > 0 or pool else 0, max(1, min(max_inputs, len(pool)))) if pool else 0
        ins = [t for t, _ in rng.sample(pool, k)] if k else []
        n_out = 2 if rng.random() < multi_output_prob else 1
        outs = []
        for j in range(n_out):
            name = f"t{v}" if j == 0 else f"t{v}_{j}"
            tensors.append((name, rng.randint(lo, hi)))
            outs.append(name)
            avail.append((name, v))
        ws = rng.randint(lo, hi) if rng.random() < workspace_prob else 0
        ops.append(Op(f"op{v}", ins, outs, ws))
    read = {t for op in ops for t in op.inputs}
    produced = [t for op in ops for t in op.outputs]
    outputs = [t for t in produced if t not in read]
    for t in produced:
        if t in read and rng.random() < extra_output_prob:
            outputs.append(t)
    return Graph(tensors, ops, inputs, outputs, name=f"random-{n_ops}-s{seed}")


def _layered_graph(tensors: list, ops: list, name: str) -> Graph:
    """The graph of a layered generator: input ``"input"``, every op output nobody reads is a graph output."""
    read = {t for op in ops for t in op.inputs}
    outputs = [op.outputs[0] for op in ops if op.outputs[0] not in read]
    return Graph(tensors, ops, ["input"], outputs, name=name)


def layered_dag(n_ops: int, seed: int = 0, *, max_inputs: int = 6, width: tuple[int, int] = (2, 6),
                size_choices: tuple[int, ...] = (1, 2, 4, 8, 16, 32), base_bytes: int = 4096,
                multi_consumer_prob: float = 0.5) -> Graph:
    """A layered, DNN-like random DAG (the RESPECT training distribution).

    Ops are placed in layers of ``width`` ops; each reads 1..``max_inputs``
    tensors from the previous few layers (biased to the previous one), tensor
    sizes are ``base_bytes`` times a power of two (like feature maps at several
    resolutions), and many tensors feed several consumers.
    """
    rng = random.Random(seed)
    tensors = [("input", base_bytes * rng.choice(size_choices))]
    ops: list[Op] = []
    layers: list[list[str]] = [["input"]]
    v = 0
    while v < n_ops:
        w = min(rng.randint(*width), n_ops - v)
        layer = []
        for _ in range(w):
            cands = [t for depth, lay in enumerate(reversed(layers[-3:])) for t in lay
                     for _ in range(3 - depth)]
            k = rng.randint(1, min(max_inputs, len(set(cands))))
            ins: list[str] = []
            while len(ins) < k:
                t = rng.choice(cands)
                if t not in ins:
                    ins.append(t)
            if rng.random() < multi_consumer_prob and len(layers) > 1:
                t = rng.choice(layers[-1])
                if t not in ins:
                    ins.append(t)
            name = f"t{v}"
            tensors.append((name, base_bytes * rng.choice(size_choices)))
            ops.append(Op(f"op{v}", ins, [name]))
            layer.append(name)
            v += 1
        layers.append(layer)
    return _layered_graph(tensors, ops, f"layered-{n_ops}-s{seed}")


def coral_dag(n_ops: int, seed: int = 0, *, max_inputs: int = 4, width: tuple[int, int] = (1, 4)) -> Graph:
    """A layered int8 CNN-like DAG with Edge TPU cost attributes (the learned Coral segmenter's data).

    Like :func:`layered_dag`, but every tensor has an NHWC shape (one byte per
    element): the resolution halves and the channel count doubles a few times
    along the depth, as in real backbones, and every op carries ``attrs`` for
    :mod:`tvm_memsched.tflite.coral`'s cost model: convolutions (3x3 or 1x1,
    reading the concatenation of their inputs) and depthwise convolutions have
    ``macs`` and ``param_bytes``; additions, concatenations and pooling have
    ``elements``. Graph-level knobs (base resolution, base channels, number of
    downsamplings) are drawn per seed, so the totals of compute, parameters and
    activations, and hence whether compute, the 8 MiB parameter cache or the
    activation transfers dominate a pipeline stage, vary across graphs.

    >>> g = coral_dag(30, seed=1)
    >>> g.num_ops, all("macs" in op.attrs or "elements" in op.attrs for op in g.ops)
    (30, True)
    """
    rng = random.Random(seed)
    h0 = rng.choice((14, 28, 56, 112))
    c0 = rng.choice((16, 32, 64))
    downs = rng.randint(1, 4)
    n_layers = max(1, round(n_ops / ((width[0] + width[1]) / 2)))

    def shape_at(layer: int) -> tuple[int, int]:
        step = min(downs, layer * (downs + 1) // max(n_layers, 1))
        return max(1, h0 >> step), c0 << step

    hw, c = shape_at(0)
    shapes = {"input": (hw, rng.choice((3, c)))}
    tensors = [("input", hw * hw * shapes["input"][1])]
    ops: list[Op] = []
    layers: list[list[str]] = [["input"]]
    v = 0
    while v < n_ops:
        w = min(rng.randint(*width), n_ops - v)
        hw, c = shape_at(len(layers))
        layer = []
        for _ in range(w):
            cands = [t for depth, lay in enumerate(reversed(layers[-3:])) for t in lay for _ in range(3 - depth)]
            k = min(rng.choice((1, 1, 1, 2, 2, 3, max_inputs)), len(set(cands)))
            ins: list[str] = []
            while len(ins) < k:
                t = rng.choice(cands)
                if t not in ins:
                    ins.append(t)
            cin = sum(shapes[t][1] for t in ins)
            kind = rng.choices(("conv3", "conv1", "dw", "add", "concat", "pool"), (30, 30, 10, 12, 10, 8))[0]
            if kind == "concat" and len(ins) < 2:
                kind = "conv1"
            cout = {"conv3": max(1, round(c * rng.choice((0.5, 1, 1, 2)))), "conv1": max(1, round(c * rng.choice(
                (0.5, 1, 1, 2)))), "dw": cin, "add": max(shapes[t][1] for t in ins), "concat": cin,
                "pool": cin}[kind]
            elements = hw * hw * cout
            attrs: dict = {"kind": kind, "shape": [1, hw, hw, cout]}
            if kind in ("conv3", "conv1"):
                kk = 9 if kind == "conv3" else 1
                attrs.update(macs=elements * cin * kk, param_bytes=cout * cin * kk + 4 * cout)
            elif kind == "dw":
                attrs.update(macs=elements * 9, param_bytes=9 * cout + 4 * cout)
            else:
                attrs["elements"] = elements
            name = f"t{v}"
            shapes[name] = (hw, cout)
            tensors.append((name, elements))
            ops.append(Op(f"op{v}", ins, [name], attrs=attrs))
            layer.append(name)
            v += 1
        layers.append(layer)
    return _layered_graph(tensors, ops, f"coral-{n_ops}-s{seed}")


# --------------------------------------------------------------------- cells
_CELL_OPS = ("sep3", "sep5", "avg", "max", "skip", "dil3")


def cell_network(n_cells: int = 3, seed: int = 0, *, blocks: int = 5, channels: int = 16,
                 hw: int = 16, bytes_per_elem: int = 4, reduce_every: int = 3,
                 name: str | None = None) -> Graph:
    """A NAS-like network of stacked cells (NASNet/DARTS style), randomly wired.

    Every cell reads the outputs of the two previous cells, pre-processes each
    with a 1x1 convolution, builds ``blocks`` nodes that each add two operations
    (separable convolutions as relu-depthwise-pointwise stacks, poolings, skips)
    applied to earlier states, and concatenates the nodes nobody else read.
    Every ``reduce_every``-th cell halves the resolution and doubles the channels.
    """
    rng = random.Random(seed)
    tensors: list[tuple[str, int]] = []
    ops: list[Op] = []

    def tensor(tname: str, c: int, s: int) -> str:
        tensors.append((tname, c * s * s * bytes_per_elem))
        return tname

    def op(oname: str, ins: list[str], c: int, s: int, kind: str, ws: int = 0) -> str:
        out = tensor(oname, c, s)
        ops.append(Op(oname, ins, [out], ws, {"kind": kind}))
        return out

    x = tensor("image", 3, hw)
    stem = op("stem", [x], channels, hw, "conv3x3")
    prev_prev, prev = stem, stem
    c, s = channels, hw
    for k in range(n_cells):
        reduction = reduce_every > 0 and k > 0 and k % reduce_every == 0
        in_s = s
        if reduction:
            c, s = c * 2, s // 2
        p = f"c{k}"
        pre0 = op(f"{p}_pre0", [prev_prev], c, in_s, "conv1x1")
        pre1 = op(f"{p}_pre1", [prev], c, in_s, "conv1x1")
        states = [pre0, pre1]
        state_s = [in_s, in_s]
        used: set[int] = set()
        for b in range(blocks):
            branch_outs = []
            for j in range(2):
                src = rng.randrange(len(states))
                used.add(src)
                kind = rng.choice(_CELL_OPS)
                o_s = s  # every node of a cell is at the cell's output resolution
                base = f"{p}_b{b}_{j}"
                if kind in ("sep3", "sep5", "dil3"):
                    t = states[src]
                    t_s = state_s[src]
                    for r in range(2 if kind != "dil3" else 1):
                        t = op(f"{base}_relu{r}", [t], c, t_s, "relu")
                        t = op(f"{base}_dw{r}", [t], c, o_s, "dwconv", ws=c * (o_s + 2) ** 2 * bytes_per_elem
                               if rng.random() < 0.3 else 0)
                        t = op(f"{base}_pw{r}", [t], c, o_s, "conv1x1")
                        t_s = o_s
                    branch_outs.append(t)
                elif kind in ("avg", "max"):
                    branch_outs.append(op(f"{base}_{kind}", [states[src]], c, o_s, f"{kind}_pool"))
                else:  # skip: identity unless it must downsample
                    if state_s[src] != o_s:
                        branch_outs.append(op(f"{base}_fr", [states[src]], c, o_s, "factorized_reduce"))
                    else:
                        branch_outs.append(states[src])
            node = op(f"{p}_n{b}", branch_outs, c, s, "add")
            states.append(node)
            state_s.append(s)
        loose = [states[i] for i in range(2, len(states)) if i not in used]
        out = op(f"{p}_concat", loose, c * len(loose), s, "concat")
        prev_prev, prev = prev, op(f"{p}_out", [out], c, s, "conv1x1")
    head = op("head", [prev], 10, 1, "pool_fc")
    return Graph(tensors, ops, [x], [head], name=name or f"cells-{n_cells}x{blocks}-s{seed}")


def example_graph() -> Graph:
    """The built-in example: two randomly wired NAS-like cells on a 32x32 input (~60 ops)."""
    return cell_network(2, seed=7, blocks=5, channels=16, hw=32, reduce_every=0, name="example-nas-cells")
