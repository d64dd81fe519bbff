"""Freeze inputs of a ``.tflite`` file to constants (``--input-value``, :mod:`tvm_memsched.core.input_values`).

The input tensor of subgraph 0 gets a buffer holding the value, leaves the
subgraph's inputs and its signature's inputs, and keeps its name, type, shape and
quantization: LiteRT, TFLite Micro and our importer then see a constant, and the
file's shape arithmetic and conditions on it fold like any other constant's.
A file whose constants lie after the flatbuffer is written back the same way.

Example
-------
>>> import numpy as np
>>> from .builder import ModelBuilder, tfl, load
>>> mb = ModelBuilder()
>>> x, k, y = mb.tensor("x", [1, 4]), mb.tensor("k", [1, 4]), mb.tensor("y", [1, 4])
>>> _ = mb.op(tfl.BuiltinOperator.MUL, [x, k], [y])
>>> buf = freeze_inputs(mb.finish(inputs=[x, k], outputs=[y]), {"k": (2.0,)})
>>> m = load(buf)
>>> [m.subgraphs[0].tensors[i].name for i in m.subgraphs[0].inputs]
[b'x']
>>> np.frombuffer(bytes(m.buffers[m.subgraphs[0].tensors[1].buffer].data), np.float32).tolist()
[2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

import numpy as np

from ..core.errors import UnsupportedError
from ..core.input_values import frozen_array
from .builder import AlignedBufferT, offset_buffer_count, serialize, type_name
from .reader import load_model

__all__ = ["freeze_inputs"]

#: TensorType names -> numpy dtypes an input value can be written in
_DTYPES = {"FLOAT32": "float32", "FLOAT16": "float16", "FLOAT64": "float64", "INT8": "int8", "UINT8": "uint8",
           "INT16": "int16", "UINT16": "uint16", "INT32": "int32", "UINT32": "uint32", "INT64": "int64",
           "BOOL": "bool"}


def _name(t) -> str:
    return t.name.decode("utf-8", "replace") if isinstance(t.name, bytes) else str(t.name)


def freeze_inputs(buf: bytes, values: dict, what: str = "model") -> bytes:
    """``buf`` with each input of subgraph 0 named in ``values`` (name -> numbers, as ``--input-value`` gives
    them) made a constant of that value, in the input's type and (static) shape. Raises
    :class:`UnsupportedError` for an unknown input name, an input with open dimensions, a type no number can
    be written in (strings, resources) or values the type cannot hold."""
    if not values:
        return buf
    model = load_model(buf, what)
    sg = model.subgraphs[0]
    inputs = {_name(sg.tensors[int(i)]): int(i) for i in (sg.inputs if sg.inputs is not None else [])}
    unknown = sorted(set(values) - set(inputs))
    if unknown:
        raise UnsupportedError(f"{what}: --input-value names unknown input(s) {', '.join(unknown)}; the inputs "
                               f"are {', '.join(inputs) or 'none'}")
    for name, vals in values.items():
        t = sg.tensors[inputs[name]]
        shape = [] if t.shape is None else [int(d) for d in t.shape]
        sig = shape if t.shapeSignature is None or not len(t.shapeSignature) else [int(d) for d in t.shapeSignature]
        if any(d < 0 for d in sig[1:]):
            raise UnsupportedError(f"{what}: input '{name}' leaves dimensions open; give them with --input-shape "
                                   "as well as its value")
        dtype = _DTYPES.get(type_name(t.type))
        if dtype is None:
            raise UnsupportedError(f"{what}: input '{name}' is {type_name(t.type)}; --input-value writes numbers")
        arr = frozen_array(name, vals, dtype, shape, what)
        model.buffers.append(AlignedBufferT(np.frombuffer(arr.tobytes(), np.uint8).copy(), 0, 0))
        t.buffer = len(model.buffers) - 1
        t.shapeSignature = None
        t.isVariable = False
    keep = [i for n, i in inputs.items() if n not in values]
    sg.inputs = keep
    for sd in model.signatureDefs or []:
        if int(sd.subgraphIndex or 0) == 0 and sd.inputs:
            sd.inputs = [tm for tm in sd.inputs if int(tm.tensorIndex) in keep]
    return serialize(model, offset_buffers=offset_buffer_count(buf) > 0)
