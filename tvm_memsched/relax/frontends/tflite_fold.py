"""Shape arithmetic of a ``.tflite`` model, evaluated before import.

TensorFlow's converter keeps run-time shape arithmetic when a model was traced with a dynamic dimension
(``SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE``, ``SHAPE -> SPLIT_V -> FLOOR_DIV -> RANGE -> GATHER`` in
``tf.signal.frame``): the file's shapes are static (the batch is 1), but the operators compute shapes from
shapes, some of them empty (a ``[0]``-shaped piece of a split shape vector). TVM's importer reads those
operands as constants and fails. :func:`shape_values` finds the *shape-only* tensors - outputs of
``SHAPE``, ``RANK`` and ``SIZE``, and of integer operators all of whose inputs are constants or shape-only
- and evaluates them by running the model once in LiteRT (reference kernels, every tensor kept): they do
not depend on the input values, so zeros do. The importer then uses them as constants and skips the
operators that computed them (:mod:`.tflite_converter`).

Nothing is folded when LiteRT is not installed or cannot run the file; the model then imports as before.

Example
-------
>>> sorted(FOLDABLE)[:4]
['ABS', 'ADD', 'ARG_MAX', 'ARG_MIN']
"""

from __future__ import annotations

import numpy as np

__all__ = ["shape_values", "static_shapes", "bind_inputs", "builtin_name", "FOLDABLE", "SHAPE_SOURCES", "MAX_ELEMENTS", "DATA_DEPENDENT"]

#: operators whose output shape depends on the input values: a file holding one keeps its shapes as written
DATA_DEPENDENT = frozenset({"WHERE", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5", "UNIQUE",
                            "DYNAMIC_UPDATE_SLICE", "STABLEHLO_WHILE", "WHILE", "IF"})

#: operators whose output is shape-only whatever their input's values
SHAPE_SOURCES = frozenset({"SHAPE", "RANK", "SIZE"})
#: integer operators folded when every input is a constant or shape-only
FOLDABLE = frozenset({"ADD", "SUB", "MUL", "DIV", "FLOOR_DIV", "FLOOR_MOD", "MAXIMUM", "MINIMUM", "NEG", "ABS",
                      "PACK", "UNPACK", "CONCATENATION", "STRIDED_SLICE", "SLICE", "GATHER", "GATHER_ND",
                      "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CAST", "RANGE", "FILL", "REDUCE_PROD", "SUM",
                      "REDUCE_MAX", "REDUCE_MIN", "SPLIT", "SPLIT_V", "TILE", "BROADCAST_ARGS", "BROADCAST_TO",
                      "EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "LOGICAL_AND",
                      "LOGICAL_OR", "LOGICAL_NOT", "SELECT", "SELECT_V2", "ZEROS_LIKE", "ONES_LIKE", "ARG_MAX",
                      "ARG_MIN", "TRANSPOSE", "REVERSE_V2", "CUMSUM"})
#: largest tensor folded (shapes and indices are small; larger integer tensors are data)
MAX_ELEMENTS = 4096

_INTEGER_TYPES = {"INT32", "INT64", "BOOL", "INT16", "UINT8"}


def builtin_name(model, op) -> str:
    """The builtin operator name of ``op`` (a ``tflite.Operator`` of ``model``), ``CUSTOM`` for custom ones."""
    from tflite.BuiltinOperator import BuiltinOperator

    names = _names(BuiltinOperator)
    oc = model.OperatorCodes(op.OpcodeIndex())
    return names.get(max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode())), "UNKNOWN")


def _names(enum) -> dict:
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


def shape_values(buf: bytes, model) -> dict:
    """``{tensor index: value}`` of subgraph 0's shape-only tensors (those no operator but a folded one reads
    included, so that every folded operator's outputs are known).

    ``model``: the ``tflite.Model`` of ``buf``."""
    from tflite.TensorType import TensorType

    type_names = {v: k for k, v in vars(TensorType).items() if not k.startswith("_")}
    sg = model.Subgraphs(0)
    produced = {int(t) for i in range(sg.OperatorsLength()) for t in
                (sg.Operators(i).OutputsAsNumpy() if sg.Operators(i).OutputsLength() else [])}
    produced |= {int(t) for t in sg.InputsAsNumpy()}
    const = set()
    for t in range(sg.TensorsLength()):
        b = model.Buffers(sg.Tensors(t).Buffer())
        tensor = sg.Tensors(t)
        empty = tensor.ShapeLength() and 0 in tensor.ShapeAsNumpy()     # a constant of no elements
        if (b is not None and (b.DataLength() or b.Offset() > 1)) or (empty and t not in produced):
            const.add(t)
    shape_only: set[int] = set()
    folded_ops = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        name = builtin_name(model, op)
        ins = [int(t) for t in op.InputsAsNumpy() if t >= 0] if op.InputsLength() else []
        outs = [int(t) for t in op.OutputsAsNumpy()] if op.OutputsLength() else []
        if not outs:
            continue
        small = all(type_names.get(sg.Tensors(t).Type()) in _INTEGER_TYPES and
                    int(np.prod(sg.Tensors(t).ShapeAsNumpy())) <= MAX_ELEMENTS
                    if sg.Tensors(t).ShapeLength() else type_names.get(sg.Tensors(t).Type()) in _INTEGER_TYPES
                    for t in outs)
        if not small:
            continue
        if name in SHAPE_SOURCES or (name in FOLDABLE and ins and all(t in const or t in shape_only for t in ins)
                                     and any(t in shape_only for t in ins)):
            shape_only.update(outs)
            folded_ops.append(i)
    if not shape_only:
        return {}
    model_outputs = {int(t) for t in sg.OutputsAsNumpy()}
    if shape_only & model_outputs:
        return {}                     # a model that outputs a shape: keep it as it is
    return _evaluate(buf, sorted(shape_only))


def bind_inputs(buf: bytes, shapes: dict | None, what: str = "model") -> bytes:
    """``buf`` with the open dimensions of subgraph 0's inputs set (``shapes``: input name -> shape, as
    ``--input-shape`` gives them); the rest of the file's shapes follow with :func:`static_shapes`.

    A model traced with a dynamic dimension has ``-1`` in an input's shape signature and a placeholder (1)
    in its shape (LiteRT users call ``resize_tensor_input``). A ``-1`` batch is taken as 1, as the file says;
    any other open dimension must be given (:class:`~tvm_memsched.core.errors.UnsupportedError` naming the
    input and the flag otherwise), and a given shape must keep the rank and the static dimensions.

    >>> bind_inputs(b"", None)
    b''
    """
    from ...core.errors import UnsupportedError

    if not buf:
        return buf
    import tflite

    model = tflite.Model.GetRootAsModel(buf, 0)
    if not model.SubgraphsLength():
        return buf
    sg = model.Subgraphs(0)
    shapes = dict(shapes or {})
    inputs = {}
    for t in sg.InputsAsNumpy():
        tensor = sg.Tensors(int(t))
        n = tensor.Name()
        inputs[n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)] = tensor
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise UnsupportedError(f"{what}: --input-shape names unknown input(s) {', '.join(unknown)}; the inputs are "
                               f"{', '.join(inputs) or 'none'}")
    out = bytearray(buf)
    for name, tensor in inputs.items():
        shape = [int(d) for d in tensor.ShapeAsNumpy()] if tensor.ShapeLength() else []
        sig = [int(d) for d in tensor.ShapeSignatureAsNumpy()] if tensor.ShapeSignatureLength() else list(shape)
        text = "x".join("?" if d < 0 else str(d) for d in sig) or "scalar"
        if name not in shapes:
            if any(d < 0 for d in sig[1:]):
                hint = "x".join(str(d if d >= 0 else 1) for d in sig)
                raise UnsupportedError(f"{what}: input '{name}' has shape {text} (the file leaves dimensions open); "
                                       f"give a static one with --input-shape {name}={hint}")
            continue
        given = [int(d) for d in shapes[name]]
        if len(given) != len(sig) or any(d >= 0 and d != g for d, g in zip(sig, given)):
            raise UnsupportedError(f"{what}: input '{name}' has shape {text}; --input-shape gives "
                                   f"{'x'.join(map(str, given))}")
        for field, length in ((4, tensor.ShapeLength()), (18, tensor.ShapeSignatureLength())):
            o = tensor._tab.Offset(field)
            if not o or length != len(given):
                continue
            start = tensor._tab.Vector(o)
            for k, v in enumerate(given):
                out[start + 4 * k:start + 4 * k + 4] = int(v).to_bytes(4, "little", signed=True)
    return bytes(out)


def static_shapes(buf: bytes, model) -> bytes:
    """``buf`` with every tensor shape of subgraph 0 as LiteRT resolves it for the file's input shapes.

    A model traced with a dynamic dimension has ``-1`` in its shape signatures, and the shapes written
    beside them are placeholders (``1`` for every unknown dimension, even where the real extent follows
    from the input's: 7 frames of a spectrogram). LiteRT resizes its tensors as it runs; the shapes it
    ends with are written into a copy of the file (same ranks: patched in place), and the signatures
    made static. Files without a ``-1``, files with an operator whose output shape depends on values
    (:data:`DATA_DEPENDENT`) or that LiteRT cannot run are returned unchanged."""
    sg = model.Subgraphs(0)
    dynamic = any(sg.Tensors(t).ShapeSignatureLength() and min(sg.Tensors(t).ShapeSignatureAsNumpy()) < 0
                  for t in range(sg.TensorsLength()))
    if not dynamic or any(builtin_name(model, sg.Operators(i)) in DATA_DEPENDENT for i in range(sg.OperatorsLength())):
        return buf
    it = _invoked(buf, sg)
    if it is None:
        return buf
    shapes = {d["index"]: [int(v) for v in d["shape"]] for d in it.get_tensor_details()}
    out = bytearray(buf)
    for t in range(sg.TensorsLength()):
        tensor = sg.Tensors(t)
        got = shapes.get(t)
        for field, length in ((4, tensor.ShapeLength()), (18, tensor.ShapeSignatureLength())):
            o = tensor._tab.Offset(field)               # Tensor.shape (4), Tensor.shape_signature (18)
            if not o or got is None or length != len(got):
                continue
            start = tensor._tab.Vector(o)
            for k, v in enumerate(got):
                out[start + 4 * k:start + 4 * k + 4] = int(v).to_bytes(4, "little", signed=True)
    return bytes(out)


def _evaluate(buf: bytes, wanted) -> dict:
    import tflite

    it = _invoked(buf, tflite.Model.GetRootAsModel(buf, 0).Subgraphs(0))
    return {} if it is None else {t: np.array(it.get_tensor(t)) for t in wanted}


#: bytes of an element by TFLite ``TensorType`` (16, complex128's, for any other)
_ELEMENT_BYTES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 5: 8, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 12: 8, 15: 4, 16: 2, 17: 1}


def _invoked(buf: bytes, sg):
    """LiteRT's interpreter (reference kernels, every tensor kept) after one invocation on zeros; None when
    LiteRT is missing or refuses the file, or when a tensor of subgraph ``sg`` declares more than
    :data:`~tvm_memsched.core.limits.MAX_TENSOR_BYTES` (a hostile file is not allocated here: the reader
    refuses it by name)."""
    from ...core.limits import MAX_TENSOR_BYTES

    for t in range(sg.TensorsLength()):
        tensor = sg.Tensors(t)
        shape = tensor.ShapeAsNumpy() if tensor.ShapeLength() else []
        size = _ELEMENT_BYTES.get(int(tensor.Type()), 16)
        if int(np.prod([max(int(d), 1) for d in shape], dtype=object)) * size > MAX_TENSOR_BYTES:
            return None
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        it = Interpreter(model_content=bytes(buf), experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        it.allocate_tensors()
        for d in it.get_input_details():
            it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
        it.invoke()
        return it
    except (ImportError, ValueError, RuntimeError):
        return None
