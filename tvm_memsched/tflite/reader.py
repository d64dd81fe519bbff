"""Read a ``.tflite`` flatbuffer into the core :class:`~tvm_memsched.core.Graph`.

The flatbuffer is parsed with the object API of the generated schema shipped in
the LiteRT / TFLite Micro wheels (:mod:`.builder`); no TensorFlow is needed.
Only subgraph 0 (the model's main graph) is scheduled:

* one :class:`~tvm_memsched.core.Op` per operator, in file order (the graph's
  program order is the file's order);
* one :class:`~tvm_memsched.core.Tensor` per *activation*: every tensor of
  subgraph 0 that some operator reads or writes, or that is a subgraph
  input/output, and whose buffer holds no data. Constants (weights, biases,
  shape and axis operands) are not activations and are left out. The size is
  ``prod(shape) * itemsize`` (int4 packs two values per byte);
* an operator's ``intermediates`` (LSTM scratch tensors) become its
  ``workspace_bytes``;
* op ``attrs``: ``kind`` (builtin name, e.g. ``"CONV_2D"``), ``index`` (the
  operator's position in the file), ``shape`` (shape of the first output as
  stored, NHWC), ``macs`` (multiply-accumulates of convolutions, depthwise and
  transposed convolutions, fully-connected layers and batch matmuls, else 0),
  ``elements`` (output elements), ``param_bytes`` (bytes of the constant
  buffers it reads) and ``params`` (those buffers as ``(buffer index, bytes)``
  pairs, so callers can count a buffer shared by several ops once);
* stateful models (:mod:`.state`): ``CALL_ONCE`` and the resource-variable
  operators are ops like any other, a ``VAR_HANDLE``'s handle is a zero-byte
  tensor (the runtimes keep handles and variables outside the arena), and the
  order the reads and assignments of one variable must keep is expressed by
  zero-byte token tensors ``order#<index>`` written by the earlier operator and
  read by the later one; :attr:`TFLiteGraph.state` describes the variables;
* constants stored after the flatbuffer (``Buffer.offset`` / ``Buffer.size``)
  are read from the file (:func:`load_model` gives their buffers the data);
  :attr:`TFLiteGraph.offset_buffers` says the file used that layout.

Graph names: a tensor keeps its TFLite name when that name is non-empty and
unique in subgraph 0; otherwise it becomes ``"<name>#<index>"`` (or
``"tensor#<index>"``). An op is named after its first output tensor (as the
zoo's graphs are, so schedules of ``zoo.graph(name)`` and of the zoo's
``.tflite`` files use the same names), or ``"op#<index>"``.
:class:`TFLiteGraph` keeps both mappings.

Errors are :mod:`tvm_memsched.core.errors` exceptions: :class:`InputFileError`
for files that are not TFLite flatbuffers, are truncated or corrupt, or whose
dataflow is inconsistent; :class:`UnsupportedError` for features the scheduler
cannot model: dynamic shapes (a ``-1`` in
``shape_signature`` beyond the batch dimension; a dynamic batch, which the
TFLite converter writes for every Keras model, is planned at the stored shape,
as TFLite Micro allocates it), sparse activations and string tensors. Extra
subgraphs that no operator of subgraph 0 calls are allowed and left untouched.
A control-flow operator (``IF``, ``WHILE``, ``CALL``) is an op of subgraph 0
whose workspace is the activations of the subgraphs it runs (an upper bound:
they live only while it runs); variable tensors (``is_variable``: an LSTM's
states, kept across invocations) are persistent, not planned; a tensor of no
elements is planned with 0 bytes (one that no operator writes is a constant).

Example
-------
>>> from tvm_memsched import zoo
>>> tg = read_tflite(zoo.tflite("swiftnet_like", "int8"))
>>> g = tg.graph
>>> g.num_ops == len(tg.model.subgraphs[0].operators), g.inputs
(True, ('input',))
>>> g.op(g.ops[0].name).attrs["kind"], g.tensor_bytes("input")
('CONV_2D', 27648)
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import GraphError, InputFileError, UnsupportedError
from ..core.graph import Graph, Op
from .builder import ITEMSIZE, offset_buffer_count, tensor_nbytes, type_name
from .state import ModelState, analyze_state

__all__ = ["TFLiteGraph", "read_tflite", "load_model", "read_bytes", "tensor_nbytes", "is_constant", "type_name",
           "ITEMSIZE", "CONTROL_FLOW_OPS"]

#: Builtin operators that run other subgraphs (also detected from ``*SubgraphIndex`` options).
CONTROL_FLOW_OPS = frozenset({"IF", "WHILE", "CALL", "CALL_ONCE", "STABLEHLO_WHILE", "STABLEHLO_CASE",
                              "STABLEHLO_COMPOSITE", "STABLEHLO_REDUCE", "STABLEHLO_SCATTER", "STABLEHLO_SORT",
                              "STABLEHLO_REDUCE_WINDOW"})

_MAX_FILE_BYTES = 2 ** 31 - 1  # flatbuffers use 32-bit offsets


@dataclass
class TFLiteGraph:
    """A parsed ``.tflite`` model and its core graph (subgraph 0).

    Attributes
    ----------
    model : ModelT
        The mutable object tree (see :func:`.builder.load`); rewriters copy it
        with :func:`load_model` on :attr:`buf` rather than editing it.
    buf : bytes
        The original file bytes (the model's buffer data are views into them).
    graph : Graph
        Activations and operators of subgraph 0, ops in file order.
    tensor_names : list
        Per tensor index of subgraph 0: its name in :attr:`graph` or ``None``
        (constants and tensors no operator uses).
    tensor_ids : dict
        Graph tensor name -> tensor index in subgraph 0.
    op_names : list
        Per operator index: its op name in :attr:`graph`.
    op_ids : dict
        Graph op name -> operator index.
    unique_names : list
        Per tensor index of subgraph 0 (constants included): a name unique in
        the subgraph (the TFLite name when it already is).
    """

    model: object
    buf: bytes
    graph: Graph
    tensor_names: list
    tensor_ids: dict
    op_names: list
    op_ids: dict
    unique_names: list
    notes: list = field(default_factory=list)
    state: ModelState = field(default_factory=ModelState)
    offset_buffers: bool = False

    @property
    def stateful(self) -> bool:
        """True if the model keeps state across invocations (resource variables, ``CALL_ONCE``)."""
        return self.state.stateful

    @property
    def num_subgraphs(self) -> int:
        return len(self.model.subgraphs)

    @property
    def num_tensors_all_subgraphs(self) -> int:
        """Total tensor count of all subgraphs (the ``n`` of TFLM's offline plan)."""
        return sum(len(sg.tensors or []) for sg in self.model.subgraphs)

    def operator_order(self, order) -> list[int]:
        """Operator indices of a schedule given as graph op names or op ids (validated)."""
        ids = self.graph.resolve_order(order)
        return [self.graph.ops[v].attrs["index"] for v in ids]

    @property
    def dtype(self) -> str:
        """``"int8"``/``"uint8"``/``"float32"``... of the first graph input (for reports)."""
        sg = self.model.subgraphs[0]
        if not len(sg.inputs):
            return "none"
        return type_name(sg.tensors[int(sg.inputs[0])].type).lower()


# ------------------------------------------------------------------ loading
def read_bytes(source) -> tuple[bytes, str]:
    """``(bytes, label)`` of a path or of bytes-like input; InputFileError if the file cannot be read."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "model"
    path = os.fspath(source)
    try:
        with open(path, "rb") as f:
            return f.read(), path
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror or e}") from None


def load_model(buf: bytes, what: str = "model"):
    """``.tflite`` bytes -> ``ModelT`` with structural checks.

    Raises :class:`InputFileError` for data that is not a TFLite flatbuffer
    (too short, no ``TFL3`` identifier, root offset out of range) and for
    truncated or corrupt files (any out-of-range offset or impossible value
    met while unpacking, or inconsistent indices, or a buffer stored after the
    flatbuffer that reaches past the end of the file). Buffers stored after the
    flatbuffer get their data (views into ``buf``) and offset/size 0.
    """
    from . import builder

    if not isinstance(buf, (bytes, bytearray)):
        raise InputFileError(f"{what}: expected bytes, got {type(buf).__name__}")
    n = len(buf)
    if n < 16:
        raise InputFileError(f"{what}: not a TFLite flatbuffer ({n} bytes is too short)")
    if n > _MAX_FILE_BYTES:
        raise UnsupportedError(f"{what}: files over 2 GiB are not supported")
    if bytes(buf[4:8]) != b"TFL3":
        raise InputFileError(f"{what}: not a TFLite flatbuffer (file identifier {bytes(buf[4:8])!r}, "
                             "expected b'TFL3')")
    root = int.from_bytes(buf[0:4], "little")
    if not 8 <= root < n - 4:
        raise InputFileError(f"{what}: corrupt TFLite flatbuffer (root table offset {root} outside the "
                             f"{n}-byte file; truncated?)")
    try:
        model = builder.load(bytes(buf))
    except Exception as e:  # the generated code raises struct/numpy/index errors on bad offsets
        raise InputFileError(f"{what}: corrupt or truncated TFLite flatbuffer "
                             f"({type(e).__name__}: {str(e)[:120]})") from None
    _check_structure(model, what)
    _inline_offset_buffers(model, buf, what)
    return model


def _inline_offset_buffers(model, buf, what: str) -> None:
    """Give every buffer stored after the flatbuffer (``offset > 1``) its data, as a view into ``buf``."""
    n = len(buf)
    for i, b in enumerate(model.buffers or []):
        off, size = int(b.offset or 0), int(b.size or 0)
        if (b.data is not None and len(b.data)) or off <= 1:
            continue
        if off + size > n:
            raise InputFileError(f"{what}: buffer {i} lies at bytes {off}..{off + size} but the file has {n} "
                                 "bytes (truncated?)")
        b.data = np.frombuffer(buf, np.uint8, count=size, offset=off)
        b.offset = b.size = 0


def _check_structure(model, what: str) -> None:
    """Index and value checks that catch corruption the unpacker let through."""
    def bad(msg):
        raise InputFileError(f"{what}: corrupt TFLite flatbuffer ({msg})")

    if model.version != 3:
        bad(f"schema version {model.version}, expected 3")
    if not model.subgraphs:
        bad("no subgraphs")
    n_buf = len(model.buffers or [])
    n_codes = len(model.operatorCodes or [])
    for si, sg in enumerate(model.subgraphs):
        tensors = sg.tensors or []
        nt = len(tensors)
        for ti, t in enumerate(tensors):
            if not 0 <= int(t.buffer) < max(n_buf, 1):
                bad(f"subgraph {si} tensor {ti} refers to buffer {t.buffer} of {n_buf}")
            if int(t.type) < 0 or type_name(t.type).startswith("TYPE_"):
                bad(f"subgraph {si} tensor {ti} has unknown type {t.type}")
            shape = [] if t.shape is None else [int(s) for s in t.shape]
            if any(s < 0 for s in shape):
                bad(f"subgraph {si} tensor {ti} has negative dimension in shape {shape}")
        for io, lst in (("input", sg.inputs), ("output", sg.outputs)):
            for i in ([] if lst is None else lst):
                if not 0 <= int(i) < nt:
                    bad(f"subgraph {si} {io} refers to tensor {i} of {nt}")
        for oi, o in enumerate(sg.operators or []):
            if not 0 <= int(o.opcodeIndex) < n_codes:
                bad(f"subgraph {si} operator {oi} has opcode index {o.opcodeIndex} of {n_codes}")
            for kind, lst in (("input", o.inputs), ("output", o.outputs), ("intermediate", o.intermediates)):
                for i in ([] if lst is None else lst):
                    if not -1 <= int(i) < nt or (kind != "input" and int(i) < 0):
                        bad(f"subgraph {si} operator {oi} {kind} refers to tensor {i} of {nt}")
    for m in model.metadata or []:
        if not 0 <= int(m.buffer) < n_buf:
            bad(f"metadata refers to buffer {m.buffer} of {n_buf}")


# ---------------------------------------------------------------- helpers
def is_constant(model, tensor) -> bool:
    """True if ``tensor`` (a ``TensorT``) holds data in the file (a weight, bias or operand)."""
    b = int(tensor.buffer)
    if b <= 0:
        return False
    buf = model.buffers[b]
    return (buf.data is not None and len(buf.data) > 0) or int(buf.size or 0) > 0


def _called_subgraph_bytes(model, op) -> int:
    """Bytes of the activations of the subgraphs a control-flow operator (IF, WHILE, CALL) runs, counted as
    its workspace: an upper bound of what they hold while it runs (they are live only inside it)."""
    total = 0
    for r in sorted(set(_option_subgraphs(op))):
        sg = model.subgraphs[r]
        for t in sg.tensors or []:
            if not is_constant(model, t) and not t.isVariable:
                total += tensor_nbytes(t) or 0
    return total


def _buffer_nbytes(model, b: int) -> int:
    buf = model.buffers[b]
    if buf.data is not None and len(buf.data):
        return len(buf.data)
    return int(buf.size or 0)


def _option_subgraphs(op) -> list[int]:
    """Subgraph indices referenced by an operator's options (control flow, StableHLO regions)."""
    refs = []
    for opts in (op.builtinOptions, getattr(op, "builtinOptions2", None)):
        if opts is None:
            continue
        for k, v in vars(opts).items():
            if "ubgraph" in k or "Subgraph" in k:
                if v is None:
                    continue
                refs.extend(int(x) for x in np.atleast_1d(v))
    return refs


def _macs(kind: str, op, tensors) -> int:
    """Multiply-accumulates of the MAC-heavy operators (0 for the others)."""
    def shape(i):
        return [int(s) for s in tensors[int(op.inputs[i])].shape] if len(op.inputs) > i and op.inputs[i] >= 0 \
            else None

    outs = [int(o) for o in op.outputs]
    if not outs:
        return 0
    out_shape = [] if tensors[outs[0]].shape is None else [int(s) for s in tensors[outs[0]].shape]
    out_elems = math.prod(out_shape)
    if kind == "CONV_2D":
        f = shape(1)                      # [O, kh, kw, I]
        return out_elems * math.prod(f[1:]) if f else 0
    if kind == "DEPTHWISE_CONV_2D":
        f = shape(1)                      # [1, kh, kw, C*M]
        return out_elems * f[1] * f[2] if f and len(f) == 4 else 0
    if kind == "CONV_3D":
        f = shape(1)                      # [kd, kh, kw, I, O]
        return out_elems * math.prod(f[:-1]) if f else 0
    if kind == "FULLY_CONNECTED":
        w = shape(1)                      # [units, in]
        return out_elems * w[-1] if w else 0
    if kind == "TRANSPOSE_CONV":
        f, x = shape(1), shape(2)         # inputs: output_shape, weights [O, kh, kw, I], input
        return math.prod(x) * math.prod(f[:-1]) if f and x else 0
    if kind == "BATCH_MATMUL":
        a = shape(0)
        opts = op.builtinOptions
        adj_x = bool(getattr(opts, "adjX", False)) if opts is not None else False
        return out_elems * (a[-2] if adj_x else a[-1]) if a and len(a) >= 2 else 0
    return 0


# ------------------------------------------------------------------ reader
def read_tflite(source, *, name: str | None = None, label: str | None = None) -> TFLiteGraph:
    """Parse a ``.tflite`` file (path or bytes) and build the core graph of subgraph 0.

    ``name`` names the graph (default: the file name); ``label`` is how error
    messages refer to the input (default: the path, or "model" for bytes).
    See the module docstring for what becomes an op or a tensor and for the
    errors raised.
    """
    from . import builder

    buf, default_label = read_bytes(source)
    label = label or default_label
    model = load_model(buf, label)
    state = analyze_state(model, label)
    sg = model.subgraphs[0]
    tensors = list(sg.tensors or [])
    operators = list(sg.operators or [])
    codes = model.operatorCodes or []
    if name is None:
        name = os.path.splitext(os.path.basename(default_label))[0] if default_label != "model" else \
            (sg.name.decode(errors="replace") if isinstance(sg.name, bytes) else (sg.name or "model"))

    def tname(i):
        n = tensors[i].name
        return n.decode(errors="replace") if isinstance(n, bytes) else (n or "")

    raw = [tname(i) for i in range(len(tensors))]
    counts: dict[str, int] = {}
    for n in raw:
        counts[n] = counts.get(n, 0) + 1
    taken = {n for n in raw if n and counts[n] == 1}
    unique = []
    for i, n in enumerate(raw):
        if n and counts[n] == 1:
            unique.append(n)
            continue
        cand = f"{n or 'tensor'}#{i}"
        while cand in taken:
            cand += "_"
        taken.add(cand)
        unique.append(cand)

    produced = {int(o) for op in operators for o in (op.outputs if op.outputs is not None else [])}
    produced |= {int(i) for i in sg.inputs}
    # a tensor of no elements that no operator writes is a constant too (an empty shape operand: its buffer
    # holds no bytes)
    const = [is_constant(model, t) or (i not in produced and t.shape is not None and 0 in list(t.shape))
             for i, t in enumerate(tensors)]

    used = [False] * len(tensors)
    for i in list(sg.inputs) + list(sg.outputs):
        used[int(i)] = True
    kinds = []
    for oi, op in enumerate(operators):
        kind = builder.opcode_name(codes[int(op.opcodeIndex)])
        if kind == "CUSTOM":
            cc = codes[int(op.opcodeIndex)].customCode
            kind = f"CUSTOM:{cc.decode(errors='replace') if isinstance(cc, bytes) else cc}"
        refs = _option_subgraphs(op)
        if (kind in CONTROL_FLOW_OPS or refs) and kind != "CALL_ONCE":   # CALL_ONCE: checked by analyze_state
            bad = [r for r in refs if not 0 < r < len(model.subgraphs)]
            if bad or not refs:
                raise UnsupportedError(f"{label}: control-flow operator {kind} at index {oi} calls subgraph(s) "
                                       f"{sorted(set(refs))}, which the file does not have")
        kinds.append(kind)
        for i in list(op.inputs) + list(op.outputs):      # intermediates become workspace, not tensors
            if int(i) >= 0:
                used[int(i)] = True

    for i, t in enumerate(tensors):      # constants the operators read must hold exactly their shape's bytes
        if used[i] and const[i] and t.sparsity is None and t.shape is not None:
            want = tensor_nbytes(t)
            have = _buffer_nbytes(model, int(t.buffer))
            if want is not None and have and want != have and type_name(t.type) not in ("INT4", "STRING"):
                raise InputFileError(f"{label}: constant tensor '{unique[i]}' has shape "
                                     f"{[int(d) for d in t.shape]} ({want:,} bytes) but its buffer holds "
                                     f"{have:,} bytes")

    # activations: used, non-constant tensors of subgraph 0
    # variable tensors (an LSTM's states, kept across invocations) are persistent, not planned activations
    act = [used[i] and not const[i] and not tensors[i].isVariable for i in range(len(tensors))]
    dyn_batch: list[int] = []
    for i, t in enumerate(tensors):
        if not act[i]:
            continue
        tn = unique[i]
        typ = type_name(t.type)
        if typ == "RESOURCE":       # a VAR_HANDLE's handle: the runtimes keep it outside the arena
            continue
        if ITEMSIZE.get(typ) is None:
            raise UnsupportedError(f"{label}: tensor '{tn}' has type {typ}; only numeric tensors are supported")
        sig = [] if t.shapeSignature is None else [int(s) for s in t.shapeSignature]
        if any(s < 0 for s in sig[1:]):
            raise UnsupportedError(f"{label}: tensor '{tn}' has a dynamic shape (shape_signature {sig}); "
                                   "give the model static shapes")
        if sig and sig[0] < 0:
            dyn_batch.append(i)
        if t.sparsity is not None:
            raise UnsupportedError(f"{label}: sparse activation tensor '{tn}' is not supported")

    tensor_names = [unique[i] if act[i] else None for i in range(len(tensors))]
    g_tensors = [(unique[i], tensor_nbytes(tensors[i]) or 0) for i in range(len(tensors)) if act[i]]
    tokens = _order_tokens(state, taken)
    g_tensors += [(t, 0) for t in tokens.values()]

    ops = []
    op_names: list[str] = []
    seen_ops: set[str] = set()
    for oi, op in enumerate(operators):
        outs = [int(o) for o in op.outputs if int(o) >= 0]
        ins = [int(i) for i in op.inputs if int(i) >= 0]
        base = unique[outs[0]] if outs else f"op#{oi}"
        oname = base if base not in seen_ops else f"{base}#op{oi}"
        seen_ops.add(oname)
        op_names.append(oname)
        inter = [int(i) for i in (op.intermediates if op.intermediates is not None else []) if int(i) >= 0]
        workspace = sum(tensor_nbytes(tensors[i]) or 0 for i in inter if not const[i])
        workspace += _called_subgraph_bytes(model, op)
        params: dict[int, int] = {}
        for i in ins:
            if const[i]:
                b = int(tensors[i].buffer)
                params[b] = _buffer_nbytes(model, b)
        out_shape = [] if not outs or tensors[outs[0]].shape is None else [int(s) for s in tensors[outs[0]].shape]
        attrs = {"kind": kinds[oi], "index": oi, "shape": out_shape,
                 "macs": _macs(kinds[oi], op, tensors),
                 "elements": sum(math.prod([int(s) for s in tensors[o].shape]) if tensors[o].shape is not None
                                 else 1 for o in outs),
                 "param_bytes": sum(params.values()),
                 "params": tuple(sorted(params.items()))}
        for o in outs:
            if const[o]:
                raise InputFileError(f"{label}: operator {oi} ({kinds[oi]}) writes constant tensor '{unique[o]}'")
        after = [tokens[a] for a, b in state.edges if b == oi]
        ops.append(Op(oname, [unique[i] for i in ins if act[i]] + after,
                      [unique[o] for o in outs] + ([tokens[oi]] if oi in tokens else []), workspace, attrs))

    g_inputs = [unique[int(i)] for i in sg.inputs if act[int(i)]]
    g_outputs = [unique[int(i)] for i in sg.outputs if act[int(i)]]
    produced = {o for op in ops for o in op.outputs}
    for i, t in enumerate(tensors):
        if act[i] and unique[i] not in produced and unique[i] not in g_inputs:
            raise UnsupportedError(f"{label}: tensor '{unique[i]}' is used but neither written by an operator nor "
                                   "a model input (a state or variable tensor?); not supported")
    try:
        graph = Graph(g_tensors, ops, inputs=g_inputs, outputs=g_outputs, name=name)
    except GraphError as e:
        raise InputFileError(f"{label}: inconsistent dataflow in subgraph 0: {e}") from None
    notes = []
    if dyn_batch:
        i = dyn_batch[0]
        batch = int(tensors[i].shape[0]) if tensors[i].shape is not None and len(tensors[i].shape) else 1
        notes.append(f"{len(dyn_batch)} tensor(s) have a dynamic batch dimension (shape_signature -1), e.g. "
                     f"'{unique[i]}': planned at the stored shape (batch {batch}), as TFLite Micro allocates them")
    uncalled = len(model.subgraphs) - 1 - len(state.init_subgraphs)
    if uncalled:
        notes.append(f"{uncalled} further subgraph(s) are not called by subgraph 0 and are left unchanged")
    if state.stateful:
        notes.append(f"{len(state.variables)} resource variable(s), {state.bytes} bytes of state kept across "
                     "invocations (persistent, outside the activation arena); the CALL_ONCE initialisation "
                     f"subgraph(s) {', '.join(map(str, state.init_subgraphs)) or '-'} are left unchanged")
    return TFLiteGraph(model=model, buf=buf, graph=graph, tensor_names=tensor_names,
                       tensor_ids={n: i for i, n in enumerate(tensor_names) if n is not None},
                       op_names=op_names, op_ids={n: i for i, n in enumerate(op_names)},
                       unique_names=unique, notes=notes, state=state,
                       offset_buffers=offset_buffer_count(buf) > 0)


def _order_tokens(state: ModelState, taken: set) -> dict:
    """A zero-byte token tensor name for every operator that must run before another (see :mod:`.state`)."""
    tokens = {}
    for a in sorted({a for a, _ in state.edges}):
        name = f"order#{a}"
        while name in taken:
            name += "_"
        taken.add(name)
        tokens[a] = name
    return tokens
