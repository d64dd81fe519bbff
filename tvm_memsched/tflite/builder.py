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

import math
from functools import lru_cache

import flatbuffers
import numpy as np

try:
    from ai_edge_litert import schema_py_generated as tfl
except ImportError:  # pragma: no cover - depends on the installed wheels
    from tflite_micro.tensorflow.lite.micro.python import schema_py_generated as tfl

__all__ = ["schema", "tfl", "ModelBuilder", "AlignedBufferT", "serialize", "write_offset_buffers",
           "offset_buffer_count", "load", "builtin_code",
           "opcode_name", "operator_names", "set_offline_plan", "TENSOR_TYPES", "ITEMSIZE", "type_name",
           "tensor_nbytes"]

#: numpy dtype -> ``TensorType`` value.
TENSOR_TYPES = {np.dtype(np.float32): tfl.TensorType.FLOAT32, np.dtype(np.int32): tfl.TensorType.INT32,
                np.dtype(np.int8): tfl.TensorType.INT8, np.dtype(np.uint8): tfl.TensorType.UINT8,
                np.dtype(np.int16): tfl.TensorType.INT16, np.dtype(np.int64): tfl.TensorType.INT64,
                np.dtype(np.float16): tfl.TensorType.FLOAT16}


#: bytes per element of each TensorType name (None: no fixed size, unsupported as an activation).
ITEMSIZE = {"FLOAT32": 4, "FLOAT16": 2, "INT32": 4, "UINT8": 1, "INT64": 8, "STRING": None, "BOOL": 1,
            "INT16": 2, "COMPLEX64": 8, "INT8": 1, "FLOAT64": 8, "COMPLEX128": 16, "UINT64": 8,
            "RESOURCE": None, "VARIANT": None, "UINT32": 4, "UINT16": 2, "INT4": 0.5, "BFLOAT16": 2,
            "INT2": 0.25, "UINT4": 0.5, "FLOAT8_E4M3FN": 1, "FLOAT8_E5M2": 1}


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
    """Accumulate tensors, constant buffers, opcodes and operators of a model.

    Tensors and operators go into the *current* subgraph: subgraph 0 (the
    model's main graph) until :meth:`subgraph` adds another one (an
    initialisation subgraph called by ``CALL_ONCE``, a loop body...) or
    :meth:`use` switches back. Buffers, opcodes and metadata are shared by all
    subgraphs.

    >>> mb = ModelBuilder()
    >>> x = mb.tensor("x", [1, 4])
    >>> init = mb.subgraph("init")           # now adding to subgraph 1
    >>> z = mb.tensor("zeros", [1, 4], data=np.zeros((1, 4), np.float32))
    >>> mb.use(0)
    >>> [len(sg.tensors) for sg in mb.model([x], [x]).subgraphs], init
    ([1, 1], 1)
    """

    def __init__(self, description: str = "tvm_memsched"):
        self.tfl = tfl
        self.description = description
        self.buffers = [tfl.BufferT()]   # buffer 0: empty sentinel for all non-constant tensors
        self.opcodes: list = []
        self.metadata: list = []
        self._opcode_index: dict[tuple, int] = {}
        # per subgraph: [name, tensors, operators, tensor index by name, inputs, outputs]
        self._subgraphs: list = []
        self._current = 0
        self.subgraph("main")
        self.use(0)

    # ------------------------------------------------------------- subgraphs
    def subgraph(self, name: str, inputs=(), outputs=()) -> int:
        """Add a subgraph (with these input/output tensor indices, set later with :meth:`set_io` when
        its tensors exist) and make it current; returns its index."""
        self._subgraphs.append([name, [], [], {}, list(inputs), list(outputs)])
        self.use(len(self._subgraphs) - 1)
        return self._current

    def use(self, index: int) -> None:
        """Make subgraph ``index`` the one :meth:`tensor` and :meth:`op` add to."""
        if not 0 <= int(index) < len(self._subgraphs):
            raise ValueError(f"no subgraph {index} (the model has {len(self._subgraphs)})")
        self._current = int(index)

    def set_io(self, index: int, inputs, outputs) -> None:
        """Set the input and output tensor indices of subgraph ``index`` (subgraph 0's are given to
        :meth:`model` / :meth:`finish`)."""
        self._subgraphs[index][4:6] = [[int(i) for i in inputs], [int(i) for i in outputs]]

    @property
    def current(self) -> int:
        """Index of the subgraph tensors and operators are added to."""
        return self._current

    @property
    def tensors(self) -> list:
        """The ``TensorT`` list of the current subgraph."""
        return self._subgraphs[self._current][1]

    @property
    def operators(self) -> list:
        """The ``OperatorT`` list of the current subgraph."""
        return self._subgraphs[self._current][2]

    # --------------------------------------------------------------- content
    def add_buffer(self, data) -> int:
        """Append a constant buffer holding ``data``; returns its index."""
        self.buffers.append(AlignedBufferT(data))
        return len(self.buffers) - 1

    def tensor(self, name: str, shape, dtype=np.float32, data=None, scale=None, zero_point=None,
               quantized_dimension: int = 0, type_code: int | None = None) -> int:
        """Add a tensor to the current subgraph (a constant if ``data`` is given, quantized if ``scale`` is
        given; ``type_code`` overrides the ``TensorType``, e.g. ``RESOURCE``); returns its index there."""
        index = self._subgraphs[self._current][3]
        if name in index:
            raise ValueError(f"tensor name {name!r} used twice")
        t = tfl.TensorT()
        t.name, t.shape = name, [int(s) for s in shape]
        t.type = TENSOR_TYPES[np.dtype(dtype)] if type_code is None else int(type_code)
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
        index[name] = len(self.tensors) - 1
        return len(self.tensors) - 1

    def tensor_index(self, name: str) -> int:
        return self._subgraphs[self._current][3][name]

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
        """Append an operator to the current subgraph (after all its previous ones); returns its index."""
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

    def model(self, inputs, outputs, subgraph_name: str | None = None):
        """The ``ModelT`` object tree; ``inputs``/``outputs`` are subgraph 0's."""
        tfl = self.tfl
        sgs = []
        for k, (name, tensors, operators, _, sin, sout) in enumerate(self._subgraphs):
            sg = tfl.SubGraphT()
            sg.tensors, sg.operators = tensors, operators
            if k == 0:
                sin, sout = inputs, outputs
                name = subgraph_name or name
            sg.inputs, sg.outputs = [int(i) for i in sin], [int(i) for i in sout]
            sg.name = name
            sgs.append(sg)
        m = tfl.ModelT()
        m.version = 3                      # the default 0 is rejected by LiteRT
        m.description = self.description
        m.operatorCodes, m.subgraphs, m.buffers = self.opcodes, sgs, self.buffers
        m.metadata = self.metadata or None
        return m

    def finish(self, inputs, outputs) -> bytes:
        """Serialize the model (see :func:`serialize`)."""
        return serialize(self.model(inputs, outputs))


def serialize(model, offset_buffers: bool = False) -> bytes:
    """Pack a ``ModelT`` into ``.tflite`` bytes (``TFL3`` identifier, every buffer 16-byte aligned).

    With ``offset_buffers`` the data of every constant tensor is stored after
    the flatbuffer and found through ``Buffer.offset`` / ``Buffer.size`` (bytes
    from the start of the file), the layout recent converters and Google's
    ai-edge-quantizer write (see :func:`write_offset_buffers`).
    """
    for i, b in enumerate(model.buffers or []):
        if not isinstance(b, AlignedBufferT):
            data = b.data if b.data is not None and len(b.data) else None
            model.buffers[i] = AlignedBufferT(data, b.offset, b.size)
    if offset_buffers:
        return write_offset_buffers(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


#: ``Buffer`` table fields (flatbuffers vtable offsets): ``offset`` and ``size`` (``uint64``)
_BUFFER_OFFSET_FIELD, _BUFFER_SIZE_FIELD = 6, 8


def write_offset_buffers(model) -> bytes:
    """``model`` (a ``ModelT`` with :class:`AlignedBufferT` buffers) with its tensors' constant data after the
    flatbuffer, as the TFLite converter writes it with ``use_buffer_offset``.

    The flatbuffer is padded to 16 bytes, each constant follows 16-byte aligned
    (the converter writes them back to back; both are valid) and 16 zero bytes
    end the file. Metadata buffers (TFLite Micro's offline plan, version
    strings) stay inside the flatbuffer, where the runtimes read them.
    """
    external = sorted({int(t.buffer) for sg in model.subgraphs for t in (sg.tensors or [])
                       if int(t.buffer) > 0 and model.buffers[int(t.buffer)].data is not None
                       and len(model.buffers[int(t.buffer)].data)})
    saved = {i: model.buffers[i] for i in external}
    try:
        for i in external:   # placeholders: non-default values, so both fields are present to patch
            model.buffers[i] = AlignedBufferT(None, 1, 1)
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        out = bytearray(builder.Output())
    finally:
        for i, b in saved.items():
            model.buffers[i] = b
    out += bytes(-len(out) % 16)
    fb = tfl.Model.GetRootAs(out, 0)
    for i in external:
        raw = np.ascontiguousarray(saved[i].data).view(np.uint8).ravel().tobytes()
        tab = fb.Buffers(i)._tab
        for fld, value in ((_BUFFER_OFFSET_FIELD, len(out)), (_BUFFER_SIZE_FIELD, len(raw))):
            pos = tab.Pos + tab.Offset(fld)
            out[pos:pos + 8] = int(value).to_bytes(8, "little")
        out += raw + bytes(-len(raw) % 16)
    out += bytes(16)
    return bytes(out)


def offset_buffer_count(buf: bytes) -> int:
    """How many buffers of the ``.tflite`` bytes ``buf`` keep their data outside the flatbuffer (``offset > 1``)."""
    m = tfl.Model.GetRootAs(buf, 0)
    return sum(1 for i in range(m.BuffersLength()) if m.Buffers(i).Offset() > 1)


def load(buf: bytes):
    """``.tflite`` bytes -> mutable ``ModelT``. Strings come back as ``bytes``, vectors as read-only numpy arrays
    (assign new lists to edit them), buffer data as views into ``buf`` (keep it alive)."""
    return tfl.ModelT.InitFromObj(tfl.Model.GetRootAs(buf, 0))


def type_name(code) -> str:
    """The ``TensorType`` name of a type code (``"INT8"``, ``"FLOAT32"``, ...; ``"TYPE_<n>"`` if unknown)."""
    names = {v: k for k, v in vars(tfl.TensorType).items() if not k.startswith("_")}
    return names.get(int(code), f"TYPE_{int(code)}")


def tensor_nbytes(tensor) -> int | None:
    """Bytes of a ``TensorT`` from its shape and type (None for strings, resources, variants)."""
    item = ITEMSIZE.get(type_name(tensor.type))
    if item is None:
        return None
    shape = [] if tensor.shape is None else [int(s) for s in tensor.shape]
    return int(math.ceil(math.prod(shape) * item))


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
