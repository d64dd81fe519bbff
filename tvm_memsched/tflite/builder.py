"""Write and read ``.tflite`` flatbuffers with the object API shipped in the LiteRT / TFLM wheels.

No TensorFlow and no hand-written schema: the generated ``schema_py_generated``
module comes from ``ai_edge_litert`` (or, failing that, ``tflite_micro``; both
ship the same file). Conventions that both runtimes rely on (see the project's
TFLite notes):

* buffer 0 is an empty sentinel shared by every non-constant tensor;
* constant data is 16-byte aligned in the file (the generated ``BufferT.Pack``
  ignores the schema's ``force_align: 16``; :class:`AlignedBufferT` honours it);
* opcodes set both ``builtinCode`` and ``deprecatedBuiltinCode = min(code, 127)``;
* ``ModelT.version = 3`` and the ``TFL3`` file identifier.

:class:`ModelBuilder` is generic (tensors, buffers, opcodes, operators, metadata),
so it also serves tools that rewrite existing models: :func:`load` gives a
mutable ``ModelT``, and :func:`serialize` re-packs any ``ModelT`` with aligned
buffers, e.g. after reordering ``model.subgraphs[0].operators``.

Example
-------
>>> import numpy as np
>>> mb = ModelBuilder()
>>> x = mb.tensor("x", [1, 4])
>>> c = mb.tensor("c", [1, 4], data=np.ones((1, 4), np.float32))
>>> y = mb.tensor("y", [1, 4])
>>> _ = mb.op(tfl.BuiltinOperator.ADD, [x, c], [y])
>>> buf = mb.finish(inputs=[x], outputs=[y])
>>> buf[4:8], [opcode_name(m.operatorCodes[o.opcodeIndex]) for m in [load(buf)]
...                                                          for o in m.subgraphs[0].operators]
(b'TFL3', ['ADD'])
"""

from __future__ import annotations

from functools import lru_cache

import flatbuffers
import numpy as np

try:
    from ai_edge_litert import schema_py_generated as tfl
except ImportError:  # pragma: no cover - depends on the installed wheels
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

__all__ = ["schema", "tfl", "ModelBuilder", "AlignedBufferT", "serialize", "load", "builtin_code",
           "opcode_name", "operator_names", "set_offline_plan", "TENSOR_TYPES"]

#: numpy dtype -> ``TensorType`` value.
TENSOR_TYPES = {np.dtype(np.float32): tfl.TensorType.FLOAT32, np.dtype(np.int32): tfl.TensorType.INT32,
                np.dtype(np.int8): tfl.TensorType.INT8, np.dtype(np.uint8): tfl.TensorType.UINT8,
                np.dtype(np.int16): tfl.TensorType.INT16, np.dtype(np.int64): tfl.TensorType.INT64}


def schema():
    """The generated TFLite schema module in use (``ai_edge_litert``'s, else ``tflite_micro``'s)."""
    return tfl


class AlignedBufferT(tfl.BufferT):
    """``BufferT`` whose data vector is 16-byte aligned in the file (the schema's ``force_align: 16``).

    ``data`` may be any numpy array; it is stored as raw bytes.
    """

    def __init__(self, data=None, offset=0, size=0):
        super().__init__()
        if data is not None:
            data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
        self.data, self.offset, self.size = data, offset, size

    def Pack(self, builder):  # noqa: N802 - flatbuffers API name
        data = None
        if self.data is not None:
            raw = np.ascontiguousarray(self.data).view(np.uint8).ravel().tobytes()
            builder.StartVector(1, len(raw), 16)
            builder.head = builder.head - len(raw)
            builder.Bytes[builder.head:builder.head + len(raw)] = raw
            data = builder.EndVector()
        tfl.BufferStart(builder)
        if data is not None:
            tfl.BufferAddData(builder, data)
        tfl.BufferAddOffset(builder, self.offset)
        tfl.BufferAddSize(builder, self.size)
        return tfl.BufferEnd(builder)


class ModelBuilder:
    """Accumulate tensors, constant buffers, opcodes and operators of a one-subgraph model."""

    def __init__(self, description: str = "tvm_memsched"):
        self.tfl = tfl
        self.description = description
        self.buffers = [tfl.BufferT()]   # buffer 0: empty sentinel for all non-constant tensors
        self.tensors: list = []
        self.operators: list = []
        self.opcodes: list = []
        self.metadata: list = []
        self._opcode_index: dict[tuple, int] = {}
        self._tensor_index: dict[str, int] = {}

    def add_buffer(self, data) -> int:
        """Append a constant buffer holding ``data``; returns its index."""
        self.buffers.append(AlignedBufferT(data))
        return len(self.buffers) - 1

    def tensor(self, name: str, shape, dtype=np.float32, data=None, scale=None, zero_point=None,
               quantized_dimension: int = 0) -> int:
        """Add a tensor (a constant if ``data`` is given, quantized if ``scale`` is given); returns its index."""
        if name in self._tensor_index:
            raise ValueError(f"tensor name {name!r} used twice")
        t = tfl.TensorT()
        t.name, t.shape = name, [int(s) for s in shape]
        t.type = TENSOR_TYPES[np.dtype(dtype)]
        if data is not None:
            data = np.asarray(data, dtype=dtype)
            if list(data.shape) != t.shape:
                raise ValueError(f"tensor {name!r}: data shape {data.shape} != {t.shape}")
            t.buffer = self.add_buffer(data)
        else:
            t.buffer = 0
        if scale is not None:
            q = tfl.QuantizationParametersT()
            q.scale = [float(s) for s in np.atleast_1d(scale)]
            zp = np.atleast_1d(zero_point if zero_point is not None else 0)
            if zp.size == 1 and len(q.scale) > 1:
                zp = np.repeat(zp, len(q.scale))
            q.zeroPoint = [int(z) for z in zp]
            q.quantizedDimension = int(quantized_dimension)
            t.quantization = q
        self.tensors.append(t)
        self._tensor_index[name] = len(self.tensors) - 1
        return len(self.tensors) - 1

    def tensor_index(self, name: str) -> int:
        return self._tensor_index[name]

    def opcode(self, code: int, version: int = 1) -> int:
        """Index of the operator code ``(code, version)``, added on first use."""
        key = (int(code), int(version))
        if key not in self._opcode_index:
            oc = tfl.OperatorCodeT()
            oc.builtinCode = key[0]
            oc.deprecatedBuiltinCode = min(key[0], 127)   # 127 = PLACEHOLDER_FOR_GREATER_OP_CODES
            oc.version = key[1]
            self.opcodes.append(oc)
            self._opcode_index[key] = len(self.opcodes) - 1
        return self._opcode_index[key]

    def op(self, code: int, inputs, outputs, options_type: int = 0, options=None, version: int = 1) -> int:
        """Append an operator (after all previous ones); returns its index."""
        o = tfl.OperatorT()
        o.opcodeIndex = self.opcode(code, version)
        o.inputs, o.outputs = [int(i) for i in inputs], [int(i) for i in outputs]
        o.builtinOptionsType, o.builtinOptions = options_type, options
        self.operators.append(o)
        return len(self.operators) - 1

    def add_metadata(self, name: str, data) -> None:
        m = tfl.MetadataT()
        m.name, m.buffer = name, self.add_buffer(data)
        self.metadata.append(m)

    def model(self, inputs, outputs, subgraph_name: str = "main"):
        """The ``ModelT`` object tree."""
        tfl = self.tfl
        sg = tfl.SubGraphT()
        sg.tensors, sg.operators = self.tensors, self.operators
        sg.inputs, sg.outputs = [int(i) for i in inputs], [int(i) for i in outputs]
        sg.name = subgraph_name
        m = tfl.ModelT()
        m.version = 3                      # the default 0 is rejected by LiteRT
        m.description = self.description
        m.operatorCodes, m.subgraphs, m.buffers = self.opcodes, [sg], self.buffers
        m.metadata = self.metadata or None
        return m

    def finish(self, inputs, outputs) -> bytes:
        """Serialize the model (see :func:`serialize`)."""
        return serialize(self.model(inputs, outputs))


def serialize(model) -> bytes:
    """Pack a ``ModelT`` into ``.tflite`` bytes (``TFL3`` identifier, every buffer 16-byte aligned)."""
    for i, b in enumerate(model.buffers or []):
        if not isinstance(b, AlignedBufferT):
            data = b.data if b.data is not None and len(b.data) else None
            model.buffers[i] = AlignedBufferT(data, b.offset, b.size)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def load(buf: bytes):
    """``.tflite`` bytes -> mutable ``ModelT``. Strings come back as ``bytes``, vectors as read-only numpy arrays
    (assign new lists to edit them), buffer data as views into ``buf`` (keep it alive)."""
    return tfl.ModelT.InitFromObj(tfl.Model.GetRootAs(buf, 0))


def builtin_code(opcode) -> int:
    """The builtin operator of an ``OperatorCodeT`` (runtimes use the max of the two code fields)."""
    return max(int(opcode.builtinCode), int(opcode.deprecatedBuiltinCode))


@lru_cache(maxsize=None)
def _op_names() -> dict[int, str]:
    return {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}


def opcode_name(opcode) -> str:
    """``"CONV_2D"`` etc. for an ``OperatorCodeT``."""
    return _op_names().get(builtin_code(opcode), f"BUILTIN_{builtin_code(opcode)}")


def operator_names(model) -> list[str]:
    """Builtin names of the operators of subgraph 0, in file order."""
    return [opcode_name(model.operatorCodes[o.opcodeIndex]) for o in model.subgraphs[0].operators]


def set_offline_plan(model, offsets, name: str = "OfflineMemoryAllocation"):
    """Attach (or replace) TFLM's offline memory plan to ``model`` (a ``ModelT``) and return it.

    ``offsets`` has one byte offset per tensor of subgraph 0 (-1 = let TFLM plan
    it; constants are ignored by TFLM). Keep offsets 16-byte aligned: TFLM uses
    them verbatim.
    """
    n_tensors = sum(len(sg.tensors) for sg in model.subgraphs)
    if len(offsets) != n_tensors:
        raise ValueError(f"need one offset per tensor ({n_tensors}), got {len(offsets)}")
    arr = np.array([1, 0, len(offsets), *offsets], dtype=np.int32)
    model.buffers.append(AlignedBufferT(arr))
    md = tfl.MetadataT()
    md.name, md.buffer = name, len(model.buffers) - 1
    keep = [m for m in (model.metadata or [])
            if (m.name.decode() if isinstance(m.name, bytes) else m.name) != name]
    model.metadata = keep + [md]
    return model
