"""Resource variables of stateful ``.tflite`` models: what they are, and the order their accesses must keep.

Streaming models keep state across invocations in *resource variables*:
``CALL_ONCE`` runs an initialisation subgraph once (``VAR_HANDLE`` +
``ASSIGN_VARIABLE`` of the initial values), and every invocation of subgraph
0 ``READ_VARIABLE``\\ s and ``ASSIGN_VARIABLE``\\ s them through handles made by
``VAR_HANDLE`` (a variable is its ``(container, shared_name)``; several handles
may name the same one). :func:`analyze_state` finds them in a ``ModelT``:

* the state is persistent memory outside the activation arena (TFLite Micro
  allocates it from the arena's persistent tail, LiteRT separately);
  :attr:`ModelState.bytes` is its size;
* the accesses of one variable must keep their file order except that reads
  commute with reads, and ``CALL_ONCE`` must run before any of them (it keeps
  its place before every operator that follows it in the file: what its
  subgraph initialises, variables or tables, is used only after it).
  :attr:`ModelState.edges` lists these as ``(before, after)`` operator index
  pairs, which :mod:`.reader` turns into zero-byte token tensors of the core
  graph, so every scheduler keeps them without knowing about state;
* an initialisation subgraph is accepted when it takes and returns nothing and
  calls no further subgraph; it is never rewritten.

Example
-------
>>> from tvm_memsched.tflite.builder import load
>>> from tvm_memsched.zoo.streaming import streaming_kws_tflite
>>> st = analyze_state(load(streaming_kws_tflite()))
>>> len(st.variables), st.bytes, st.init_subgraphs
(4, 104, [1])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import UnsupportedError

__all__ = ["Variable", "ModelState", "analyze_state", "RESOURCE_OPS", "resource_key"]

#: operators that touch resource variables (besides ``CALL_ONCE``, which runs their initialisation)
RESOURCE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"})


@dataclass
class Variable:
    """One resource variable: its key, the shape/type of its value and the subgraph-0 operators using it."""

    key: tuple
    shape: list | None = None
    type: int | None = None
    nbytes: int = 0
    reads: list = field(default_factory=list)
    assigns: list = field(default_factory=list)

    @property
    def name(self) -> str:
        container, shared = self.key
        return f"{container}/{shared}" if container else shared


@dataclass
class ModelState:
    """The resource variables of a model (see the module docstring)."""

    variables: dict = field(default_factory=dict)
    call_once: list = field(default_factory=list)     # [(operator index in subgraph 0, init subgraph)]
    edges: list = field(default_factory=list)         # [(operator before, operator after)] in subgraph 0

    @property
    def init_subgraphs(self) -> list:
        return sorted({s for _, s in self.call_once})

    @property
    def bytes(self) -> int:
        """Bytes of all variables' values (persistent, outside the activation arena)."""
        return sum(v.nbytes for v in self.variables.values())

    @property
    def stateful(self) -> bool:
        return bool(self.variables or self.call_once)

    def to_dict(self) -> dict:
        return {"variables": [{"name": v.name, "shape": v.shape, "bytes": v.nbytes, "reads": len(v.reads),
                               "assigns": len(v.assigns)} for v in self.variables.values()],
                "state_bytes": self.bytes, "init_subgraphs": self.init_subgraphs}


def _text(v) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else (v or "")


def resource_key(op) -> tuple:
    """``(container, shared_name)`` of a ``VAR_HANDLE`` operator (``OperatorT``)."""
    o = op.builtinOptions
    return (_text(getattr(o, "container", None)), _text(getattr(o, "sharedName", None)))


def _value_info(var: Variable, tensor) -> None:
    from .builder import tensor_nbytes

    nbytes = tensor_nbytes(tensor)
    if var.shape is None and nbytes is not None:
        var.shape = [] if tensor.shape is None else [int(s) for s in tensor.shape]
        var.type, var.nbytes = int(tensor.type), nbytes


def _scan(model, si: int, kinds, state: ModelState, label: str, record: bool) -> None:
    """Record the variables subgraph ``si`` touches (and, for subgraph 0, its accesses)."""
    sg = model.subgraphs[si]
    tensors = sg.tensors or []
    handles: dict[int, tuple] = {}
    for oi, op in enumerate(sg.operators or []):
        kind = kinds(op)
        if kind == "VAR_HANDLE":
            key = resource_key(op)
            if not key[1]:
                raise UnsupportedError(f"{label}: VAR_HANDLE at index {oi} of subgraph {si} has no shared_name")
            for o in op.outputs:
                handles[int(o)] = key
            state.variables.setdefault(key, Variable(key))
        elif kind in ("READ_VARIABLE", "ASSIGN_VARIABLE"):
            h = int(op.inputs[0]) if op.inputs is not None and len(op.inputs) else -1
            if h not in handles:
                raise UnsupportedError(f"{label}: {kind} at index {oi} of subgraph {si} uses a resource that no "
                                       "VAR_HANDLE of the same subgraph makes; not supported")
            var = state.variables[handles[h]]
            if kind == "READ_VARIABLE":
                _value_info(var, tensors[int(op.outputs[0])])
                if record:
                    var.reads.append(oi)
            else:
                _value_info(var, tensors[int(op.inputs[1])])
                if record:
                    var.assigns.append(oi)


def _order_edges(state: ModelState, n_ops: int) -> list:
    """(before, after) pairs: accesses of one variable in file order, reads commuting; every operator after a
    CALL_ONCE in the file stays after it."""
    edges = {(c, i) for c, _ in state.call_once for i in range(c + 1, n_ops)}
    for var in state.variables.values():
        accesses = sorted([(i, "r") for i in var.reads] + [(i, "w") for i in var.assigns])
        last_write, since = None, []
        for i, kind in accesses:
            if kind == "w":
                edges.update((j, i) for j in since)
                if last_write is not None:
                    edges.add((last_write, i))
                last_write, since = i, []
            else:
                if last_write is not None:
                    edges.add((last_write, i))
                since.append(i)
    return sorted(edges)


def analyze_state(model, label: str = "model") -> ModelState:
    """The :class:`ModelState` of a ``ModelT`` (``label`` names the model in errors).

    Raises :class:`UnsupportedError` for initialisation subgraphs with inputs or
    outputs or further control flow, and for accesses through handles made
    elsewhere.
    """
    from .builder import opcode_name

    codes = model.operatorCodes or []

    def kinds(op):
        return opcode_name(codes[int(op.opcodeIndex)])

    state = ModelState()
    for oi, op in enumerate(model.subgraphs[0].operators or []):
        if kinds(op) == "CALL_ONCE":
            init = int(getattr(op.builtinOptions, "initSubgraphIndex", -1))
            if not 0 < init < len(model.subgraphs):
                raise UnsupportedError(f"{label}: CALL_ONCE at index {oi} calls subgraph {init}, which does not "
                                       "exist")
            state.call_once.append((oi, init))
    for _, init in state.call_once:
        sg = model.subgraphs[init]
        if len(sg.inputs if sg.inputs is not None else []) or len(sg.outputs if sg.outputs is not None else []):
            raise UnsupportedError(f"{label}: the CALL_ONCE initialisation subgraph {init} has inputs or outputs; "
                                   "only initialisation subgraphs without them are supported")
        for oi, op in enumerate(sg.operators or []):
            k = kinds(op)
            if k in ("CALL_ONCE", "IF", "WHILE", "CALL") or k.startswith("STABLEHLO_"):
                raise UnsupportedError(f"{label}: the CALL_ONCE initialisation subgraph {init} runs {k} (index "
                                       f"{oi}); nested control flow is not supported")
        _scan(model, init, kinds, state, label, record=False)
    _scan(model, 0, kinds, state, label, record=True)
    state.edges = _order_edges(state, len(model.subgraphs[0].operators or []))
    return state
