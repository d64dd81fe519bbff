"""Unroll the ``WHILE`` loops of a ``.tflite`` file whose trip count does not depend on the data.

TensorFlow's converter writes a loop it cannot fuse as a ``WHILE`` operator calling a condition and a body
subgraph: ``tf.while_loop`` over a counter, a Keras ``LSTM(stateful=True)`` or an ``RNN`` cell over the time
steps (the counter slices the step out of the input and writes the output into a tensor list). TVM imports
a ``WHILE`` as a recursive Relax function, which a memory plan cannot look into and the C export cannot run.

Here a loop is unrolled when its condition depends only on *static* loop variables: those whose first value
is a constant and whose next value the body computes from static values and constants alone (a counter,
the time index, the trip bound). Those values are evaluated for every iteration with numpy (integer and
boolean operators only: :data:`STATIC_OPS`) until the condition is false, which gives the trip count; then
the body's operators are copied once per iteration into subgraph 0, each copy reading the previous copy's
outputs, with every static tensor written as a constant of its value in that iteration (the operators that
computed only static values are dropped). The slices at the counter then have constant bounds, and the
shapes LiteRT resolves for them are written in by :func:`.tflite_fold.static_shapes`. The loop's outputs
keep their tensors (names, signature entries), produced by the last copy.

A loop whose condition also reads the data (``tf.while_loop(max(v) < 4, ..., maximum_iterations=6)``: the
converter writes ``counter < 6 AND max(v) < 4``) is unrolled *predicated* when the static values alone make
the condition false after some number of iterations (a false operand of a ``LOGICAL_AND`` decides it): each
copy computes the condition on the state it receives, runs the body, and a ``SELECT_V2`` on the condition
keeps the new state or the old one. Once the condition is false the state no longer changes, so it stays
false, and the last copy's state is what the loop returns, for every trip count up to the bound. The body
runs on every copy (the price of a static schedule); the loop state must keep its shape and its counters'
last values must be unused.

A loop is left as it is (and :func:`unroll_while` says why) when its condition depends on the data and nothing
static bounds it, when a static value needs an operator outside :data:`STATIC_OPS`, when it runs more than
:data:`MAX_TRIPS` times or the copies would exceed :data:`MAX_OPERATORS`, when its body holds a variable
tensor, when a loop variable changes its type or quantization between the loop and its body (the loop hands
bytes on), or when a loop output that is a model output would be an input passed through unchanged. Loops nested in a body are unrolled when
the body's copy reaches subgraph 0. Files whose constants lie after the flatbuffer are returned unchanged.

Example
-------
>>> sorted(STATIC_OPS)[:4]
['ADD', 'CAST', 'CONCATENATION', 'EQUAL']
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

__all__ = ["unroll_while", "Unrolled", "STATIC_OPS", "MAX_TRIPS", "MAX_OPERATORS", "MAX_LOOPS", "MAX_STATIC_ELEMENTS"]

#: operators whose static (integer, boolean) values are evaluated with numpy
STATIC_OPS = frozenset({"ADD", "SUB", "MUL", "FLOOR_DIV", "FLOOR_MOD", "MINIMUM", "MAXIMUM", "NEG", "LESS",
                        "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "LOGICAL_AND",
                        "LOGICAL_OR", "LOGICAL_NOT", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CAST",
                        "CONCATENATION", "PACK", "SELECT", "SELECT_V2"})
#: most iterations a loop is unrolled for
MAX_TRIPS = 4096
#: most operators subgraph 0 may hold after unrolling
MAX_OPERATORS = 50_000
#: most loops unrolled in one file (copies of a body can hold loops of their own)
MAX_LOOPS = 1000
#: most elements of a static loop value (counters, bounds, slice positions are small; larger ones are data)
MAX_STATIC_ELEMENTS = 4096

_DTYPES = {"INT32": np.int32, "INT64": np.int64, "INT16": np.int16, "INT8": np.int8, "UINT8": np.uint8,
           "BOOL": np.bool_, "UINT32": np.uint32, "UINT16": np.uint16}


@dataclass(frozen=True)
class Unrolled:
    """One ``WHILE`` of subgraph 0: its first output's name, and how many times it ran (None: left as a loop,
    ``reason`` says why). A ``predicated`` loop ran on the data: ``trips`` is the most times it can run, each
    copy keeping its state when the condition is false."""

    name: str
    trips: int | None
    reason: str = ""
    predicated: bool = False


class _Refused(Exception):
    pass


def _schema():
    try:
        from ai_edge_litert import schema_py_generated as tfl
    except ImportError:  # pragma: no cover - depends on the installed wheels
        from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl
    return tfl


def _names(enum) -> dict:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


class _Model:
    """A ``ModelT`` and the lookups the unroller needs."""

    def __init__(self, buf: bytes):
        self.tfl = tfl = _schema()
        self.m = tfl.ModelT.InitFromObj(tfl.Model.GetRootAs(buf, 0))
        self.ops = _names(tfl.BuiltinOperator)
        self.types = _names(tfl.TensorType)

    def opname(self, op) -> str:
        oc = self.m.operatorCodes[op.opcodeIndex]
        return self.ops.get(max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode)), "UNKNOWN")

    def const(self, sg, t: int):
        """The value of constant tensor ``t`` of ``sg`` if it is a small integer or boolean one, else None."""
        tensor = sg.tensors[t]
        b = self.m.buffers[tensor.buffer] if 0 < tensor.buffer < len(self.m.buffers) else None
        dtype = _DTYPES.get(self.types.get(int(tensor.type)))
        if b is None or b.data is None or not len(b.data) or dtype is None:
            return None
        shape = [] if tensor.shape is None else [int(d) for d in tensor.shape]
        raw = np.frombuffer(bytes(bytearray(b.data)), dtype=dtype)
        return raw.reshape(shape) if raw.size == int(np.prod(shape)) else None

    def has_data(self, sg, t: int) -> bool:
        tensor = sg.tensors[t]
        b = self.m.buffers[tensor.buffer] if 0 < tensor.buffer < len(self.m.buffers) else None
        return b is not None and b.data is not None and len(b.data) > 0

    def add_const(self, sg, like, value, name: str) -> int:
        """A new constant tensor of ``sg`` (type of ``like``, a ``TensorT``) holding ``value``."""
        tfl = self.tfl
        value = np.asarray(value, dtype=_DTYPES[self.types[int(like.type)]])
        b = tfl.BufferT()
        b.data = np.frombuffer(value.tobytes(), dtype=np.uint8)
        self.m.buffers.append(b)
        t = tfl.TensorT()
        t.name, t.type, t.shape = name.encode(), like.type, list(value.shape)
        t.buffer = len(self.m.buffers) - 1
        sg.tensors.append(t)
        return len(sg.tensors) - 1


def _ints(v) -> list[int]:
    return [] if v is None else [int(x) for x in v]


def _evaluate(model: _Model, sg, op, vals: list):
    """numpy value(s) of a :data:`STATIC_OPS` operator on static input values ``vals``."""
    name, opt = model.opname(op), op.builtinOptions
    a = vals[0] if vals else None
    binary = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "MINIMUM": np.minimum,
              "MAXIMUM": np.maximum, "LESS": np.less, "LESS_EQUAL": np.less_equal, "GREATER": np.greater,
              "GREATER_EQUAL": np.greater_equal, "EQUAL": np.equal, "NOT_EQUAL": np.not_equal,
              "LOGICAL_AND": np.logical_and, "LOGICAL_OR": np.logical_or, "FLOOR_DIV": np.floor_divide,
              "FLOOR_MOD": np.mod}
    out_t = sg.tensors[op.outputs[0]]
    dtype = _DTYPES.get(model.types.get(int(out_t.type)))
    if dtype is None:
        raise _Refused(f"{name} computes a {model.types.get(int(out_t.type))} loop value")
    if name in binary:
        if name in ("FLOOR_DIV", "FLOOR_MOD") and np.any(vals[1] == 0):
            raise _Refused(f"{name} by zero")
        if getattr(opt, "fusedActivationFunction", 0):
            raise _Refused(f"{name} with a fused activation on a loop value")
        r = binary[name](a, vals[1])
    elif name == "NEG":
        r = np.negative(a)
    elif name == "LOGICAL_NOT":
        r = np.logical_not(a)
    elif name in ("SELECT", "SELECT_V2"):
        r = np.where(a, vals[1], vals[2])
    elif name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CAST"):
        r = a
    elif name in ("CONCATENATION", "PACK"):
        axis = int(getattr(opt, "axis", 0) or 0)
        if getattr(opt, "fusedActivationFunction", 0):
            raise _Refused("CONCATENATION with a fused activation on a loop value")
        r = np.concatenate([np.atleast_1d(v) for v in vals], axis) if name == "CONCATENATION" else \
            np.stack(vals, axis)
    else:  # pragma: no cover - callers check STATIC_OPS
        raise _Refused(name)
    shape = _ints(out_t.shape)
    r = np.asarray(r).astype(dtype)
    if r.size > MAX_STATIC_ELEMENTS:
        raise _Refused(f"a loop value of {r.size} elements grows past {MAX_STATIC_ELEMENTS}")
    if name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS"):
        if int(np.prod(shape)) != r.size:
            raise _Refused(f"{name} of a loop value to an unknown shape")
        r = r.reshape(shape)
    return r


def _static_body(model: _Model, sg, static_inputs: set[int]) -> tuple[set[int], list[int]]:
    """The tensors of ``sg`` computable from the static inputs and constants with :data:`STATIC_OPS`, and the
    indices of the operators computing them."""
    static = set(static_inputs)
    ops = []
    for i, op in enumerate(sg.operators or []):
        ins = [int(t) for t in _ints(op.inputs) if t >= 0]
        outs = _ints(op.outputs)
        if model.opname(op) not in STATIC_OPS or not outs:
            continue
        if all(t in static or model.const(sg, t) is not None for t in ins):
            if all(_DTYPES.get(model.types.get(int(sg.tensors[t].type))) is not None for t in outs):
                static.update(outs)
                ops.append(i)
    return static, ops


def _run_static(model: _Model, sg, ops: list[int], values: dict) -> dict:
    """``values`` (tensor -> numpy) extended by the static operators ``ops`` of ``sg``."""
    values = dict(values)
    for i in ops:
        op = sg.operators[i]
        ins = [int(t) for t in _ints(op.inputs) if t >= 0]
        vals = [values[t] if t in values else model.const(sg, t) for t in ins]
        values[int(op.outputs[0])] = _evaluate(model, sg, op, vals)
    return values


def _truth(model: _Model, sg, t: int, values: dict, producers: dict, depth: int = 0):
    """True or False when boolean tensor ``t`` of ``sg`` is decided by the static ``values`` alone (a
    ``LOGICAL_AND`` with one false operand is false whatever the data), None when it depends on the data."""
    v = values.get(t)
    if v is None:
        v = model.const(sg, t)
    if v is not None:
        v = np.asarray(v)
        return bool(v.all()) if v.all() or not v.any() else None
    op = producers.get(t)
    if op is None or depth > 64:
        return None
    name = model.opname(op)
    ins = [int(i) for i in _ints(op.inputs) if i >= 0]
    if name in ("LOGICAL_AND", "LOGICAL_OR"):
        r = [_truth(model, sg, i, values, producers, depth + 1) for i in ins]
        stop = name == "LOGICAL_OR"          # the operand value that decides the result
        return stop if stop in r else (not stop if r and all(x is (not stop) for x in r) else None)
    if name == "LOGICAL_NOT" and ins:
        r = _truth(model, sg, ins[0], values, producers, depth + 1)
        return None if r is None else not r
    if name in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS") and ins:
        return _truth(model, sg, ins[0], values, producers, depth + 1)
    return None


def _same_quantization(a, b) -> bool:
    """Whether tensors ``a`` and ``b`` (``TensorT``) read the same bytes as the same values."""
    if int(a.type) != int(b.type):
        return False
    qa, qb = a.quantization, b.quantization

    def params(q):
        if q is None or q.scale is None or not len(q.scale):
            return None
        return ([float(x) for x in q.scale], [int(x) for x in (q.zeroPoint if q.zeroPoint is not None else [])])
    return params(qa) == params(qb)


def _opcode(model: _Model, builtin: int) -> int:
    """Index of the operator code of ``builtin`` in the model (added when missing)."""
    for i, oc in enumerate(model.m.operatorCodes):
        if max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode)) == builtin:
            return i
    oc = model.tfl.OperatorCodeT()
    oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = builtin, min(builtin, 127), 1
    model.m.operatorCodes.append(oc)
    return len(model.m.operatorCodes) - 1


def _tensor_name(t) -> str:
    n = t.name
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n or "")


def _unroll_one(model: _Model, p: int, max_ops: int) -> tuple[int, bool]:
    """Unroll the ``WHILE`` at operator ``p`` of subgraph 0; returns its trip count (its bound when the data
    decides) and whether the copies are predicated (raises :class:`_Refused`)."""
    m, sg = model.m, model.m.subgraphs[0]
    op = sg.operators[p]
    ci, bi = int(op.builtinOptions.condSubgraphIndex), int(op.builtinOptions.bodySubgraphIndex)
    if not (0 < ci < len(m.subgraphs) and 0 < bi < len(m.subgraphs)):
        raise _Refused(f"its condition or body subgraph ({ci}, {bi}) does not exist")
    cond, body = m.subgraphs[ci], m.subgraphs[bi]
    ins, outs = _ints(op.inputs), _ints(op.outputs)
    b_in, b_out, c_in = _ints(body.inputs), _ints(body.outputs), _ints(cond.inputs)
    if not (len(ins) == len(outs) == len(b_in) == len(b_out) == len(c_in)) or len(_ints(cond.outputs)) != 1:
        raise _Refused("its subgraphs' inputs and outputs do not match the loop's")
    if any(t.isVariable for t in body.tensors or []):
        raise _Refused("its body holds a variable tensor")
    if any(t < 0 for t in ins):
        raise _Refused("an optional loop input")
    first = {j: model.const(sg, t) for j, t in enumerate(ins)}
    static = {j for j, v in first.items() if v is not None}
    while True:                        # the loop variables the body keeps static, to a fixed point
        body_static, body_ops = _static_body(model, body, {b_in[j] for j in static})
        keep = {j for j in static if b_out[j] in body_static or model.const(body, b_out[j]) is not None}
        if keep == static:
            break
        static = keep
    cond_static, cond_ops = _static_body(model, cond, {c_in[j] for j in static})
    c_out = int(cond.outputs[0])
    predicated = c_out not in cond_static          # the data decides: run to the static bound, selecting
    cond_producers = {int(t): o for o in cond.operators or [] for t in _ints(o.outputs)}
    if predicated:
        cone, todo = set(), [c_out]          # the tensors the condition is computed from
        while todo:
            t = todo.pop()
            if t not in cone:
                cone.add(t)
                todo.extend(int(i) for i in _ints(getattr(cond_producers.get(t), "inputs", None)) if i >= 0)
        if not cone & {c_in[j] for j in static}:
            raise _Refused("its condition depends on the data and nothing static bounds its trips")
    state = {j: first[j] for j in static}
    trips = 0
    while True:
        cvals = _run_static(model, cond, cond_ops, {c_in[j]: state[j] for j in static})
        if predicated:
            truth = _truth(model, cond, c_out, cvals, cond_producers)
        else:
            if np.asarray(cvals[c_out]).size != 1:
                raise _Refused("its condition is not a scalar")
            truth = bool(np.asarray(cvals[c_out]).reshape(()))
        if truth is False:
            break
        trips += 1
        if trips > MAX_TRIPS:
            raise _Refused(f"its condition depends on the data and does not stop it within {MAX_TRIPS} trips"
                           if predicated else f"it runs more than {MAX_TRIPS} times")
        vals = _run_static(model, body, body_ops, {b_in[j]: state[j] for j in static})
        after = {j: vals[b_out[j]] if b_out[j] in vals else model.const(body, b_out[j]) for j in static}
        if predicated and all(np.array_equal(after[j], state[j]) for j in static):
            raise _Refused("its condition depends on the data and nothing static bounds its trips")
        state = after
    kept_ops = [i for i in range(len(body.operators or [])) if i not in set(body_ops)]
    kept_cond = [i for i in range(len(cond.operators or [])) if i not in set(cond_ops)] if predicated else []
    dynamic = [j for j in range(len(ins)) if j not in static]
    per_trip = len(kept_ops) + len(kept_cond) + (len(dynamic) if predicated else 0)
    if len(sg.operators) - 1 + trips * per_trip > max_ops:
        raise _Refused(f"{trips} copies of its {per_trip} operators would exceed {max_ops} operators")
    for j in dynamic:          # the loop hands its state on as bytes: the tensors must read them alike
        views = [sg.tensors[ins[j]], body.tensors[b_in[j]], body.tensors[b_out[j]], cond.tensors[c_in[j]],
                 sg.tensors[outs[j]]]
        if not all(_same_quantization(views[0], v) for v in views[1:]):
            raise _Refused(f"loop variable {j} changes its type or quantization between the loop and its body")
        if predicated and _ints(views[1].shape) != _ints(views[2].shape):
            raise _Refused(f"its condition depends on the data and loop variable {j} changes shape")
    graph_outputs = set(_ints(sg.outputs))
    producers = {int(t) for i in kept_ops for t in _ints(body.operators[i].outputs)}
    if predicated:
        read_after = graph_outputs | {int(t) for o in sg.operators[p + 1:] for t in _ints(o.inputs)}
        if any(outs[j] in read_after for j in static):
            raise _Refused("its condition depends on the data and its counter's last value is used")

    # the loop's outputs: the last copy writes the loop's own output tensors where it produces them (predicated:
    # the last copy's selects do)
    final_name = {}                    # body output tensor -> the loop output tensor it becomes
    for j, t in enumerate(b_out):
        if j not in static and t in producers and t not in final_name and not predicated:
            final_name[t] = outs[j]
    for j, w in enumerate(outs):
        if w in graph_outputs and (j in static or trips == 0 or b_out[j] not in producers
                                   or (not predicated and final_name.get(b_out[j]) != w)):
            raise _Refused("a model output would be a loop input passed through unchanged")

    cur = {j: ins[j] for j in range(len(ins))}          # loop variable -> its tensor in subgraph 0 now
    new_ops, selects = [], []
    weights: dict = {}                 # the body's (and condition's) constants: one tensor for every copy
    base = _tensor_name(sg.tensors[outs[0]]) if outs else "while"
    state_k = {j: first[j] for j in static}             # the static loop values entering iteration k

    def copier(src, k, vals, tmap, final):
        """Map tensor ``t`` of ``src`` to its tensor in subgraph 0 for copy ``k``."""
        def mapped(t):
            if t < 0:
                return t
            if t not in tmap:
                if t in vals:
                    tmap[t] = model.add_const(sg, src.tensors[t], vals[t],
                                              f"{base}/iteration{k}/{_tensor_name(src.tensors[t])}")
                elif t in final:
                    tmap[t] = final[t]
                elif model.has_data(src, t):
                    if (id(src), t) not in weights:
                        tensor = copy.deepcopy(src.tensors[t])
                        tensor.name = f"{base}/{_tensor_name(tensor)}".encode()
                        sg.tensors.append(tensor)
                        weights[(id(src), t)] = len(sg.tensors) - 1
                    tmap[t] = weights[(id(src), t)]
                else:
                    tensor = copy.deepcopy(src.tensors[t])
                    tensor.name = f"{base}/iteration{k}/{_tensor_name(tensor)}".encode()
                    sg.tensors.append(tensor)
                    tmap[t] = len(sg.tensors) - 1
            return tmap[t]

        def copy_ops(indices):
            for i in indices:
                o = copy.deepcopy(src.operators[i])
                o.inputs = [mapped(int(t)) for t in _ints(o.inputs)]
                o.outputs = [mapped(int(t)) for t in _ints(o.outputs)]
                if o.intermediates is not None:
                    o.intermediates = [mapped(int(t)) for t in _ints(o.intermediates)]
                new_ops.append(o)
        return mapped, copy_ops

    for k in range(trips):
        last = k == trips - 1
        if predicated:                 # the condition on this copy's state
            cvals = _run_static(model, cond, cond_ops, {c_in[j]: state_k[j] for j in static})
            c_map, c_copy = copier(cond, k, cvals, {c_in[j]: cur[j] for j in dynamic}, {})
            c_copy(kept_cond)
            running = c_map(c_out)
        vals = _run_static(model, body, body_ops, {b_in[j]: state_k[j] for j in static})
        mapped, copy_ops = copier(body, k, vals, {b_in[j]: cur[j] for j in dynamic},
                                  final_name if last else {})
        copy_ops(kept_ops)
        state_k = {j: vals[b_out[j]] if b_out[j] in vals else model.const(body, b_out[j]) for j in static}
        if not predicated:
            cur = {j: (cur[j] if j in static else mapped(b_out[j])) for j in range(len(ins))}
            continue
        for j in dynamic:              # the state moves on only while the condition holds
            new = mapped(b_out[j])
            if new == cur[j]:
                continue
            if last:
                out = outs[j]
            else:
                tensor = copy.deepcopy(body.tensors[b_in[j]])
                tensor.name = f"{base}/iteration{k}/state{j}".encode()
                sg.tensors.append(tensor)
                out = len(sg.tensors) - 1
            o = model.tfl.OperatorT()
            o.inputs, o.outputs = [running, new, cur[j]], [out]
            o.builtinOptionsType = model.tfl.BuiltinOptions.SelectV2Options
            o.builtinOptions = model.tfl.SelectV2OptionsT()
            new_ops.append(o)
            selects.append(o)
            cur[j] = out

    # consumers of the loop's outputs read the values the copies left
    subst, values = {}, []
    for j, w in enumerate(outs):
        if j in static:
            dtype = _DTYPES.get(model.types.get(int(sg.tensors[w].type)))
            if dtype is None:
                raise _Refused("a loop output of a static value is not an integer tensor")
            values.append((sg.tensors[w], np.asarray(state[j] if trips else first[j], dtype=dtype)))
        elif cur[j] != w:
            subst[w] = cur[j]
    # nothing below refuses: subgraph 0 changes only now
    if selects:
        code = _opcode(model, model.tfl.BuiltinOperator.SELECT_V2)
        for o in selects:
            o.opcodeIndex = code
    for t, v in values:             # a static loop output becomes a constant of its last value
        b = model.tfl.BufferT()
        b.data = np.frombuffer(v.tobytes(), np.uint8)
        m.buffers.append(b)
        t.buffer, t.shape, t.shapeSignature = len(m.buffers) - 1, list(v.shape), None
    rest = sg.operators[p + 1:]
    for o in rest:
        o.inputs = [subst.get(int(t), int(t)) for t in _ints(o.inputs)]
    sg.operators = sg.operators[:p] + new_ops + rest
    return trips, predicated


def unroll_while(buf: bytes, max_ops: int = MAX_OPERATORS) -> tuple[bytes, list[Unrolled]]:
    """``buf`` with every ``WHILE`` of subgraph 0 whose trip count is static unrolled, and what was done with
    each loop. ``buf`` comes back unchanged (the same object) when it holds no ``WHILE`` or nothing unrolled.

    >>> unroll_while(b"")
    (b'', [])
    """
    if len(buf) < 8 or buf[4:8] != b"TFL3" or not _mentions_while(buf):
        return buf, []
    model = _Model(buf)
    m = model.m
    if not m.subgraphs or any(b.offset and b.offset > 1 for b in m.buffers or []):
        return buf, []
    sg = m.subgraphs[0]
    done: list[Unrolled] = []
    refused: set[int] = set()            # id() of WHILE operators left as loops
    while True:
        loops = [p for p, op in enumerate(sg.operators or []) if model.opname(op) == "WHILE" and id(op) not in refused]
        if not loops:
            break
        p = loops[0]
        op = sg.operators[p]
        outs = _ints(op.outputs)
        name = _tensor_name(sg.tensors[outs[0]]) if outs and 0 <= outs[0] < len(sg.tensors) else f"operator {p}"
        # a refused loop leaves subgraph 0's operators as they were (they are replaced last); the tensors and
        # buffers it added go
        tensors, buffers = len(sg.tensors), len(m.buffers)
        try:
            if sum(u.trips is not None for u in done) >= MAX_LOOPS:
                raise _Refused(f"the file has more than {MAX_LOOPS} loops to unroll")
            trips, predicated = _unroll_one(model, p, max_ops)
        except (_Refused, IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
            del sg.tensors[tensors:]
            del m.buffers[buffers:]
            refused.add(id(op))
            why = str(e) if isinstance(e, _Refused) else f"its operators or subgraphs are malformed ({e})"
            done.append(Unrolled(name, None, why))
            continue
        done.append(Unrolled(name, trips, predicated=predicated))
    if not any(u.trips is not None for u in done):
        return buf, done
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output()), done


def _mentions_while(buf: bytes) -> bool:
    """Cheap test: does the file use the WHILE builtin at all (its operator codes)?"""
    import tflite
    from tflite.BuiltinOperator import BuiltinOperator

    model = tflite.Model.GetRootAsModel(buf, 0)
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        if max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode())) == BuiltinOperator.WHILE:
            return True
    return False
