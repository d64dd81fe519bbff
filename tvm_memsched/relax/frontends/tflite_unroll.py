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

A loop is left as it is (and :func:`unroll_while` says why) when its condition depends on the data, when a
static value needs an operator outside :data:`STATIC_OPS`, when it runs more than :data:`MAX_TRIPS` times or
the copies would exceed :data:`MAX_OPERATORS`, when its body holds a variable tensor, or when a loop output
that is a model output would be an input passed through unchanged. Loops nested in a body are unrolled when
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
    ``reason`` says why)."""

    name: str
    trips: int | None
    reason: str = ""


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


def _tensor_name(t) -> str:
    n = t.name
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n or "")


def _unroll_one(model: _Model, p: int, max_ops: int) -> int:
    """Unroll the ``WHILE`` at operator ``p`` of subgraph 0; returns its trip count (raises :class:`_Refused`)."""
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
    if c_out not in cond_static:
        raise _Refused("its condition depends on the data")
    state = {j: first[j] for j in static}
    trips = 0
    while True:
        cv = _run_static(model, cond, cond_ops, {c_in[j]: state[j] for j in static})[c_out]
        if np.asarray(cv).size != 1:
            raise _Refused("its condition is not a scalar")
        if not bool(np.asarray(cv).reshape(())):
            break
        trips += 1
        if trips > MAX_TRIPS:
            raise _Refused(f"it runs more than {MAX_TRIPS} times")
        vals = _run_static(model, body, body_ops, {b_in[j]: state[j] for j in static})
        state = {j: vals[b_out[j]] if b_out[j] in vals else model.const(body, b_out[j]) for j in static}
    kept_ops = [i for i in range(len(body.operators or [])) if i not in set(body_ops)]
    if len(sg.operators) - 1 + trips * len(kept_ops) > max_ops:
        raise _Refused(f"{trips} copies of its {len(kept_ops)} operators would exceed {max_ops} operators")
    graph_outputs = set(_ints(sg.outputs))
    producers = {int(t) for i in kept_ops for t in _ints(body.operators[i].outputs)}

    # the loop's outputs: the last copy writes the loop's own output tensors where it produces them
    final_name = {}                    # body output tensor -> the loop output tensor it becomes
    for j, t in enumerate(b_out):
        if j not in static and t in producers and t not in final_name:
            final_name[t] = outs[j]
    for j, w in enumerate(outs):
        if w in graph_outputs and (j in static or (trips == 0 or b_out[j] not in producers
                                                   or final_name.get(b_out[j]) != w)):
            raise _Refused("a model output would be a loop input passed through unchanged")

    cur = {j: ins[j] for j in range(len(ins))}          # loop variable -> its tensor in subgraph 0 now
    new_ops = []
    weights = {}                       # the body's constants: one tensor in subgraph 0 for every copy
    base = _tensor_name(sg.tensors[outs[0]]) if outs else "while"
    state_k = {j: first[j] for j in static}             # the static loop values entering iteration k
    for k in range(trips):
        vals = _run_static(model, body, body_ops, {b_in[j]: state_k[j] for j in static})
        tmap = {b_in[j]: cur[j] for j in range(len(ins)) if j not in static}
        last = k == trips - 1

        def mapped(t, k=k, vals=vals, tmap=tmap, last=last):
            if t < 0:
                return t
            if t not in tmap:
                if t in vals:
                    tmap[t] = model.add_const(sg, body.tensors[t], vals[t],
                                              f"{base}/iteration{k}/{_tensor_name(body.tensors[t])}")
                elif last and t in final_name:
                    tmap[t] = final_name[t]
                elif model.has_data(body, t):
                    if t not in weights:
                        tensor = copy.deepcopy(body.tensors[t])
                        tensor.name = f"{base}/{_tensor_name(tensor)}".encode()
                        sg.tensors.append(tensor)
                        weights[t] = len(sg.tensors) - 1
                    tmap[t] = weights[t]
                else:
                    tensor = copy.deepcopy(body.tensors[t])
                    tensor.name = f"{base}/iteration{k}/{_tensor_name(tensor)}".encode()
                    sg.tensors.append(tensor)
                    tmap[t] = len(sg.tensors) - 1
            return tmap[t]

        for i in kept_ops:
            o = copy.deepcopy(body.operators[i])
            o.inputs = [mapped(int(t)) for t in _ints(o.inputs)]
            o.outputs = [mapped(int(t)) for t in _ints(o.outputs)]
            if o.intermediates is not None:
                o.intermediates = [mapped(int(t)) for t in _ints(o.intermediates)]
            new_ops.append(o)
        state_k = {j: vals[b_out[j]] if b_out[j] in vals else model.const(body, b_out[j]) for j in static}
        cur = {j: (cur[j] if j in static else mapped(b_out[j])) for j in range(len(ins))}

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
    for t, v in values:             # a static loop output becomes a constant of its last value
        b = model.tfl.BufferT()
        b.data = np.frombuffer(v.tobytes(), np.uint8)
        m.buffers.append(b)
        t.buffer, t.shape, t.shapeSignature = len(m.buffers) - 1, list(v.shape), None
    rest = sg.operators[p + 1:]
    for o in rest:
        o.inputs = [subst.get(int(t), int(t)) for t in _ints(o.inputs)]
    sg.operators = sg.operators[:p] + new_ops + rest
    return trips


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
            trips = _unroll_one(model, p, max_ops)
        except (_Refused, IndexError, KeyError, TypeError, ValueError, AttributeError) as e:
            del sg.tensors[tensors:]
            del m.buffers[buffers:]
            refused.add(id(op))
            why = str(e) if isinstance(e, _Refused) else f"its operators or subgraphs are malformed ({e})"
            done.append(Unrolled(name, None, why))
            continue
        done.append(Unrolled(name, trips))
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
