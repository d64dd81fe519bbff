"""Framework-neutral dataflow graph with exact activation-memory semantics.

A :class:`Graph` is a set of operators (:class:`Op`) that read and write named
tensors (:class:`Tensor`). A tensor has a size in bytes; an operator reads input
tensors, writes one or more output tensors and may need ``workspace_bytes`` of
scratch memory while it runs. Graph inputs are tensors no operator produces;
graph outputs are listed explicitly. Weights and constants are not activations
and are not modelled.

Memory semantics (shared by the simulator, every scheduler and every report):

* a graph input is resident from the start until its last consumer has run; an
  input nobody reads stays resident to the end;
* a graph output stays resident from its producer to the end;
* while operator ``v`` runs, the resident bytes are everything live before ``v``
  plus all outputs of ``v`` plus ``workspace(v)`` (the *stable* footprint);
* after ``v``, every tensor whose last consumer is ``v`` and which is not a graph
  output is freed, and so is an output of ``v`` that nobody reads (the
  *transient* footprint);
* the peak is the maximum stable footprint over the schedule;
* *in-place execution*: an op may declare, per output, one input it may write
  that output over (``Op.inplace``: ``(output, input, shift)`` triples). When
  that input dies at the op (the op is its last consumer and it is not pinned),
  the output is placed ``shift`` bytes *below* the input's start and the two
  share memory: the op's stable footprint counts ``max(shift + size(input),
  size(output))`` for the pair instead of ``size(input) + size(output)``, a
  saving of ``min(size(output) - shift, size(input))`` bytes (at least 0).
  ``shift = 0`` is *same-index* overlap (output element i is written only after
  input element i was last read: element-wise ops, views); ``shift > 0`` is a
  *lagged* overlap whose safe distance the declaring frontend computed from the
  op's access pattern (a convolution that still reads input rows behind the
  row it writes). Which inputs die where depends on the order, so in-place
  execution is a scheduling question too.

Besides the named view, a graph keeps a compact integer view used by the hot
loops of the schedulers: operators and tensors are numbered by position, sets of
operators are Python ``int`` bitsets, and per-operator byte counts are plain
lists.

Example
-------
>>> g = Graph(
...     tensors=[("x", 4), ("a", 8), ("b", 8), ("y", 4)],
...     ops=[Op("A", ["x"], ["a"]), Op("B", ["x"], ["b"]), Op("C", ["a", "b"], ["y"])],
...     inputs=["x"], outputs=["y"], name="diamond")
>>> g.num_ops, g.num_tensors
(3, 4)
>>> [g.ops[i].name for i in g.preds[2]]
['A', 'B']
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from .errors import GraphError

__all__ = ["Tensor", "Op", "Graph", "bitset"]


def bitset(ids: Iterable[int]) -> int:
    """The ``int`` bitset with the given bit positions set (op or tensor ids).

    >>> bitset([0, 3]), bin(bitset(range(4)))
    (9, '0b1111')
    """
    mask = 0
    for i in ids:
        mask |= 1 << i
    return mask


#: the largest size in bytes a tensor, a workspace or a shift may have (sums of them must stay exact)
MAX_BYTES = 2 ** 62


def _check_size(value, what: str) -> int:
    """Return ``value`` as an int if it is a non-negative integer up to :data:`MAX_BYTES`, else raise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if not (isinstance(value, float) and value.is_integer()):
            raise GraphError(f"{what} must be a non-negative integer number of bytes, got {value!r}")
        value = int(value)          # 1e308 is an integer too: the limit below still applies
    if value < 0:
        raise GraphError(f"{what} must be a non-negative integer number of bytes, got {value!r}")
    if value > MAX_BYTES:
        raise GraphError(f"{what} is {value if value < 10 ** 30 else 'a ' + str(len(str(value))) + '-digit number'}"
                         f" bytes, above the limit of 2**62")
    return int(value)


def _check_name(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise GraphError(f"{what} must be a non-empty string, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise GraphError(f"{what} {value!r} is not valid Unicode text (a lone surrogate)") from None
    return value


@dataclass(frozen=True)
class Tensor:
    """An activation tensor: a name and a size in bytes."""

    name: str
    bytes: int


@dataclass(frozen=True)
class Op:
    """An operator: reads ``inputs``, writes ``outputs``, needs ``workspace_bytes`` while running.

    ``attrs`` carries free-form information (op kind, shapes, MACs...) that the
    memory model ignores but exporters and reports may use. ``inplace`` holds
    ``(output, input, shift)`` triples: ``output`` may be written over ``input``
    (starting ``shift`` bytes below it) when ``input`` dies at this op (see the
    module docstring).

    >>> Op("relu", ["a"], ["b"], inplace=[("b", "a", 0)]).inplace
    (('b', 'a', 0),)
    """

    name: str
    inputs: tuple = ()
    outputs: tuple = ()
    workspace_bytes: int = 0
    attrs: Mapping = field(default_factory=dict, compare=False, hash=False)
    inplace: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "inplace", tuple(tuple(p) if isinstance(p, (list, tuple)) else p
                                                  for p in self.inplace))

    def replace(self, **changes) -> "Op":
        """A copy with some fields changed (keeps ``attrs`` and ``inplace`` unless given)."""
        fields = dict(name=self.name, inputs=self.inputs, outputs=self.outputs,
                      workspace_bytes=self.workspace_bytes, attrs=self.attrs, inplace=self.inplace)
        fields.update(changes)
        return Op(**fields)


def _as_tensor(item) -> Tensor:
    if isinstance(item, Tensor):
        return item
    if isinstance(item, Mapping):
        if "name" not in item or "bytes" not in item:
            raise GraphError(f"a tensor needs 'name' and 'bytes', got {dict(item)!r}")
        return Tensor(item["name"], item["bytes"])
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return Tensor(item[0], item[1])
    raise GraphError(f"cannot interpret {item!r} as a tensor (name, bytes)")


class Graph:
    """A validated dataflow graph (see the module docstring for the memory semantics).

    Parameters
    ----------
    tensors : iterable of Tensor, ``(name, bytes)`` pairs or ``{"name", "bytes"}`` dicts
        Every tensor the operators read or write, and every graph input.
    ops : iterable of Op
        Operators, in *program order* (the order the source program lists them).
    inputs, outputs : iterable of str
        Graph inputs (tensors with no producer) and graph outputs.
    name : str
        A label for reports.

    Raises
    ------
    GraphError
        On duplicate names, unknown tensors, tensors produced twice, graph inputs
        produced by an op, bad sizes, or a cycle (the message names the ops on it).

    Attributes of the compact view (all indexed by position):

    ``size[t]``, ``producer[t]`` (-1 for graph inputs), ``consumers[t]`` (sorted op
    ids), ``op_inputs[v]`` / ``op_outputs[v]`` (tensor ids, duplicates removed),
    ``workspace[v]``, ``preds[v]`` / ``succs[v]`` (op ids), ``pred_mask[v]`` (bitset),
    ``consumer_mask[t]`` (bitset), ``pinned[t]`` (never freed: graph outputs and
    unread graph inputs), ``input_ids`` / ``output_ids``, ``topo`` (a topological
    order of op ids), ``inplace[v]`` (``(output id, input id, shift, saving)`` for
    each declared pair whose input can die at ``v``), ``max_saving[v]`` (bytes
    saved at ``v`` when all its in-place inputs die there).
    """

    def __init__(self, tensors: Iterable, ops: Iterable[Op], inputs: Iterable[str] = (),
                 outputs: Iterable[str] = (), name: str = "graph"):
        self.name = str(name)
        self.tensors: tuple[Tensor, ...] = tuple(_as_tensor(t) for t in tensors)
        self.ops: tuple[Op, ...] = tuple(ops)
        self.inputs: tuple[str, ...] = tuple(inputs)
        self.outputs: tuple[str, ...] = tuple(outputs)
        self._build()

    # ------------------------------------------------------------------ build
    def _build(self) -> None:
        tindex: dict[str, int] = {}
        sizes: list[int] = []
        for t in self.tensors:
            _check_name(t.name, "tensor name")
            if t.name in tindex:
                raise GraphError(f"tensor '{t.name}' is declared twice")
            tindex[t.name] = len(sizes)
            sizes.append(_check_size(t.bytes, f"size of tensor '{t.name}'"))
        self.tensors = tuple(Tensor(t.name, s) for t, s in zip(self.tensors, sizes))
        self.tensor_index = tindex
        self.size = sizes

        oindex: dict[str, int] = {}
        for op in self.ops:
            if not isinstance(op, Op):
                raise GraphError(f"expected an Op, got {op!r}")
            _check_name(op.name, "op name")
            if op.name in oindex:
                raise GraphError(f"op '{op.name}' is defined twice")
            oindex[op.name] = len(oindex)
        self.op_index = oindex

        def tensor_id(name, role):
            if not isinstance(name, str):
                raise GraphError(f"{role}: tensor names must be strings, got {name!r}")
            tid = tindex.get(name)
            if tid is None:
                raise GraphError(f"{role} names unknown tensor '{name}' (not in the tensor list)")
            return tid

        nt = len(sizes)
        self.is_input = [False] * nt
        for name in self.inputs:
            tid = tensor_id(name, "graph input list")
            if self.is_input[tid]:
                raise GraphError(f"graph input '{name}' is listed twice")
            self.is_input[tid] = True
        self.is_output = [False] * nt
        for name in self.outputs:
            tid = tensor_id(name, "graph output list")
            if self.is_output[tid]:
                raise GraphError(f"graph output '{name}' is listed twice")
            self.is_output[tid] = True

        producer = [-1] * nt
        consumers: list[list[int]] = [[] for _ in range(nt)]
        op_inputs: list[tuple[int, ...]] = []
        op_outputs: list[tuple[int, ...]] = []
        inplace_raw: list[tuple] = []
        workspace: list[int] = []
        for v, op in enumerate(self.ops):
            ins: list[int] = []
            for name in op.inputs:
                tid = tensor_id(name, f"op '{op.name}' input")
                if tid not in ins:
                    ins.append(tid)
                    consumers[tid].append(v)
            outs: list[int] = []
            for name in op.outputs:
                tid = tensor_id(name, f"op '{op.name}' output")
                if tid in outs:
                    raise GraphError(f"op '{op.name}' lists output '{name}' twice")
                if self.is_input[tid]:
                    raise GraphError(f"graph input '{name}' is produced by op '{op.name}'")
                if producer[tid] != -1:
                    raise GraphError(f"tensor '{name}' is produced twice, by ops "
                                     f"'{self.ops[producer[tid]].name}' and '{op.name}'")
                producer[tid] = v
                outs.append(tid)
            op_inputs.append(tuple(ins))
            op_outputs.append(tuple(outs))
            inplace_raw.append(op.inplace)
            workspace.append(_check_size(op.workspace_bytes, f"workspace of op '{op.name}'"))

        for tid in range(nt):
            if producer[tid] == -1 and not self.is_input[tid]:
                name = self.tensors[tid].name
                if consumers[tid]:
                    raise GraphError(f"tensor '{name}' is read by op '{self.ops[consumers[tid][0]].name}' "
                                     "but is neither produced by an op nor declared a graph input")
                if self.is_output[tid]:
                    raise GraphError(f"graph output '{name}' is neither produced by an op "
                                     "nor declared a graph input")
                raise GraphError(f"tensor '{name}' is neither produced by an op nor declared a graph input")

        self.producer = producer
        self.consumers = [tuple(c) for c in consumers]
        self.op_inputs = op_inputs
        self.op_outputs = op_outputs
        self.workspace = workspace
        self.input_ids = tuple(self.tensor_index[n] for n in self.inputs)
        self.output_ids = tuple(self.tensor_index[n] for n in self.outputs)
        self.pinned = [self.is_output[t] or (self.is_input[t] and not consumers[t]) for t in range(nt)]
        self.consumer_mask = [bitset(c) for c in self.consumers]
        self.output_bytes = [sum(sizes[t] for t in outs) for outs in op_outputs]
        self._build_inplace(inplace_raw)

        n = len(self.ops)
        preds: list[list[int]] = [[] for _ in range(n)]
        succs: list[list[int]] = [[] for _ in range(n)]
        for v in range(n):
            for t in op_inputs[v]:
                p = producer[t]
                if p == -1:
                    continue
                if p == v:
                    raise GraphError(f"cycle: op '{self.ops[v].name}' reads its own output "
                                     f"'{self.tensors[t].name}'")
                if p not in preds[v]:
                    preds[v].append(p)
                    succs[p].append(v)
        self.preds = [tuple(sorted(p)) for p in preds]
        self.succs = [tuple(sorted(s)) for s in succs]
        self.pred_mask = [sum(1 << p for p in ps) for ps in self.preds]
        self.topo = self._topological_order()

    def _build_inplace(self, raw: list[tuple]) -> None:
        """Validate the in-place declarations and build ``inplace`` / ``max_saving``."""
        self.inplace: list[tuple[tuple[int, int, int, int], ...]] = []
        self.max_saving: list[int] = []
        for v, pairs in enumerate(raw):
            op = self.ops[v]
            seen_out, seen_in, kept = set(), set(), []
            for pair in pairs:
                if not (isinstance(pair, tuple) and len(pair) == 3):
                    raise GraphError(f"op '{op.name}': in-place declarations are (output, input, shift) "
                                     f"triples, got {pair!r}")
                oname, iname, shift = pair
                o, i = self.tensor_index.get(oname), self.tensor_index.get(iname)
                if o is None or o not in self.op_outputs[v]:
                    raise GraphError(f"op '{op.name}' declares in-place output '{oname}', "
                                     "which is not one of its outputs")
                if i is None or i not in self.op_inputs[v]:
                    raise GraphError(f"op '{op.name}' declares output '{oname}' in place of '{iname}', "
                                     "which is not one of its inputs")
                shift = _check_size(shift, f"in-place shift of '{oname}' over '{iname}' in op '{op.name}'")
                if o in seen_out or i in seen_in:
                    raise GraphError(f"op '{op.name}': each output may take over one input and each "
                                     f"input may be taken over by one output ('{oname}' / '{iname}')")
                seen_out.add(o)
                seen_in.add(i)
                saving = max(0, min(self.size[o] - shift, self.size[i]))
                if not self.pinned[i] and saving > 0:
                    kept.append((o, i, shift, saving))
            self.inplace.append(tuple(kept))
            self.max_saving.append(sum(p[3] for p in kept))
        self.has_inplace = any(self.max_saving)

    def inplace_saving(self, v: int, done: int) -> int:
        """Bytes saved by in-place execution when ``v`` runs after the ops of bitset ``done``.

        An input dies at ``v`` when no consumer other than ``v`` is outside ``done``.
        """
        saved = 0
        after = done | (1 << v)
        for _o, i, _shift, saving in self.inplace[v]:
            if not self.consumer_mask[i] & ~after:
                saved += saving
        return saved

    def _topological_order(self) -> tuple[int, ...]:
        """Kahn's algorithm by smallest index; raises GraphError naming a cycle."""
        import heapq

        n = len(self.ops)
        indeg = [len(p) for p in self.preds]
        heap = [v for v in range(n) if indeg[v] == 0]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            v = heapq.heappop(heap)
            order.append(v)
            for s in self.succs[v]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, s)
        if len(order) != n:
            cycle = self._find_cycle({v for v in range(n) if indeg[v] > 0})
            names = " -> ".join(self.ops[v].name for v in cycle + cycle[:1])
            raise GraphError(f"the graph has a cycle: {names}")
        return tuple(order)

    def _find_cycle(self, remaining: set[int]) -> list[int]:
        """Return the ops of one cycle among ``remaining`` (ops Kahn could not place)."""
        # Every remaining op has a remaining predecessor; walk predecessors until one repeats.
        v = min(remaining)
        seen: dict[int, int] = {}
        path: list[int] = []
        while v not in seen:
            seen[v] = len(path)
            path.append(v)
            v = next(p for p in self.preds[v] if p in remaining)
        cycle = path[seen[v]:]
        cycle.reverse()  # predecessor walk -> execution direction
        return cycle

    # ------------------------------------------------------------ properties
    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def num_tensors(self) -> int:
        return len(self.tensors)

    @property
    def total_bytes(self) -> int:
        """Sum of all activation tensor sizes (the footprint if nothing were ever freed)."""
        return sum(self.size)

    def op_names(self, ids: Iterable[int]) -> list[str]:
        return [self.ops[v].name for v in ids]

    def tensor_names(self, ids: Iterable[int]) -> list[str]:
        return [self.tensors[t].name for t in ids]

    def op(self, name: str) -> Op:
        return self.ops[self.op_index[name]]

    def tensor_bytes(self, name: str) -> int:
        return self.size[self.tensor_index[name]]

    def __repr__(self) -> str:
        return (f"Graph(name={self.name!r}, ops={self.num_ops}, tensors={self.num_tensors}, "
                f"inputs={len(self.inputs)}, outputs={len(self.outputs)})")

    def __eq__(self, other) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (self.name == other.name and self.tensors == other.tensors and self.ops == other.ops
                and self.inputs == other.inputs and self.outputs == other.outputs)

    __hash__ = None  # mutable-looking container; compare by value only

    # ------------------------------------------------------------- structure
    def ancestors_masks(self) -> list[int]:
        """Bitset of the (strict) ancestors of every op."""
        anc = [0] * self.num_ops
        for v in self.topo:
            m = 0
            for p in self.preds[v]:
                m |= anc[p] | (1 << p)
            anc[v] = m
        return anc

    def descendants_masks(self) -> list[int]:
        """Bitset of the (strict) descendants of every op."""
        desc = [0] * self.num_ops
        for v in reversed(self.topo):
            m = 0
            for s in self.succs[v]:
                m |= desc[s] | (1 << s)
            desc[v] = m
        return desc

    def resolve_order(self, order: Sequence) -> list[int]:
        """Map an order given as op names or op ids to op ids and validate it.

        The order must name every op exactly once, and every op must come after
        the producers of its inputs. Raises :class:`OrderError` otherwise.
        """
        from .errors import OrderError

        ids: list[int] = []
        for item in order:
            if isinstance(item, str):
                v = self.op_index.get(item)
                if v is None:
                    raise OrderError(f"order names unknown op '{item}'")
            elif isinstance(item, numbers.Integral) and not isinstance(item, bool):
                v = int(item)
                if not 0 <= v < self.num_ops:
                    raise OrderError(f"order contains op id {v}, outside 0..{self.num_ops - 1}")
            else:
                raise OrderError(f"order entries must be op names or ids, got {item!r}")
            ids.append(v)
        seen = [False] * self.num_ops
        for v in ids:
            if seen[v]:
                raise OrderError(f"op '{self.ops[v].name}' appears twice in the order")
            seen[v] = True
        missing = [self.ops[v].name for v in range(self.num_ops) if not seen[v]]
        if missing:
            more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
            raise OrderError(f"order is missing {len(missing)} op(s): {', '.join(missing[:5])}{more}")
        done = 0
        for v in ids:
            if self.pred_mask[v] & ~done:
                p = next(p for p in self.preds[v] if not (done >> p) & 1)
                t = next(t for t in self.op_inputs[v] if self.producer[t] == p)
                raise OrderError(f"op '{self.ops[v].name}' runs before op '{self.ops[p].name}', "
                                 f"which produces its input '{self.tensors[t].name}'")
            done |= 1 << v
        return ids

    def is_topological(self, order: Sequence) -> bool:
        from .errors import OrderError
        try:
            self.resolve_order(order)
        except OrderError:
            return False
        return True

    def without_workspace(self) -> "Graph":
        """The same graph with every op's ``workspace_bytes`` set to 0.

        >>> g = Graph([("a", 4), ("b", 4)], [Op("f", ["a"], ["b"], workspace_bytes=8)], ["a"], ["b"])
        >>> g.without_workspace().ops[0].workspace_bytes, g.ops[0].workspace_bytes
        (0, 8)
        """
        ops = [op.replace(workspace_bytes=0) for op in self.ops]
        return Graph(self.tensors, ops, self.inputs, self.outputs, self.name)

    def without_inplace(self) -> "Graph":
        """The same graph with no in-place declarations (every output gets its own memory)."""
        if not any(op.inplace for op in self.ops):
            return self
        ops = [op.replace(inplace=()) for op in self.ops]
        return Graph(self.tensors, ops, self.inputs, self.outputs, self.name)

    def subgraph(self, op_ids: Iterable[int], name: str | None = None) -> "Graph":
        """The graph induced by ``op_ids``.

        Tensors read from outside become graph inputs; tensors that are graph
        outputs or read by ops outside become graph outputs. Useful for
        scheduling parts of a graph independently.
        """
        keep = sorted(set(op_ids))
        kept = set(keep)
        tensors: dict[int, None] = {}
        inputs: dict[int, None] = {}
        outputs: dict[int, None] = {}
        for v in keep:
            for t in self.op_inputs[v]:
                tensors[t] = None
                if self.producer[t] not in kept:
                    inputs[t] = None
            for t in self.op_outputs[v]:
                tensors[t] = None
                if self.is_output[t] or any(c not in kept for c in self.consumers[t]):
                    outputs[t] = None
        return Graph(
            tensors=[self.tensors[t] for t in tensors],
            ops=[self.ops[v] for v in keep],
            inputs=[self.tensors[t].name for t in inputs],
            outputs=[self.tensors[t].name for t in outputs],
            name=name or f"{self.name}[sub]",
        )
