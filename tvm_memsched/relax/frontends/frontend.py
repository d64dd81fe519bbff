"""The one place that turns a model file into a Relax IRModule.

:func:`from_file` dispatches on the file's extension (:data:`MODEL_EXTENSIONS`):

* ``.tflite``: ``tvm.relax.frontend.tflite`` (needs the ``tflite`` schema
  package) with :mod:`.tflite_converter`'s operator converter; stateful
  streaming models (resource variables) are imported by :mod:`.tflite_state`
  with their state as extra parameters and results; constants stored after the
  flatbuffer (``Buffer.offset``) are read from the file;
* ``.onnx``: :mod:`.onnx_frontend` (``tvm.relax.frontend.onnx``);
* ``.pt2`` (``torch.export.save``): :mod:`.torch_frontend`
  (``tvm.relax.frontend.torch``).

``input_shapes`` (input name -> shape) sets the inputs' symbolic dimensions
(ONNX, ``.pt2``; a ``.tflite`` whose inputs' shape signatures hold ``-1``). Errors are one line:
:class:`InputFileError` for unreadable, corrupt or truncated files,
:class:`UnsupportedError` for unknown extensions, unsupported operators (named)
and shapes that stay symbolic. Command-line model specs (``zoo:NAME``, paths)
are resolved in the application layer, which calls this module for files.

Example
-------
>>> from_file("model.h5")
Traceback (most recent call last):
...
tvm_memsched.core.errors.UnsupportedError: unsupported model file 'model.h5': expected .tflite, .onnx or .pt2
"""

from __future__ import annotations

import collections
import contextlib
import os

from ...core.errors import InputFileError, UnsupportedError, last_line

__all__ = ["from_file", "from_tflite_file", "from_tflite_bytes", "tensors_by_index", "MODEL_EXTENSIONS", "LOOPS_ATTR"]

#: model file extensions :func:`from_file` imports
MODEL_EXTENSIONS = (".tflite", ".onnx", ".pt2")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror or e}") from None


def from_file(path: str, input_shapes: dict | None = None):
    """Import the model file ``path`` (``.tflite``, ``.onnx`` or ``.pt2``) into Relax (see the module docstring)."""
    ext = os.path.splitext(path)[1].lower()
    if ext in MODEL_EXTENSIONS:
        from .. import legalize  # noqa: F401 - what is imported can be built by plain tvm.compile too
    if ext not in MODEL_EXTENSIONS:
        raise UnsupportedError(f"unsupported model file '{path}': expected {', '.join(MODEL_EXTENSIONS[:-1])} "
                               f"or {MODEL_EXTENSIONS[-1]}")
    if ext == ".tflite":
        return from_tflite_bytes(_read(path), path, input_shapes)
    buf = _read(path)
    if ext == ".onnx":
        from .onnx_frontend import from_onnx_bytes

        return from_onnx_bytes(buf, input_shapes, path, os.path.dirname(os.path.abspath(path)))
    from .torch_frontend import from_pt2_bytes

    return from_pt2_bytes(buf, input_shapes, path)


def from_tflite_file(path: str):
    """Import the ``.tflite`` file ``path`` into Relax (see :func:`from_tflite_bytes`)."""
    return from_tflite_bytes(_read(path), path)


def from_tflite_bytes(buf: bytes, what: str = "model", input_shapes: dict | None = None):
    """Import a .tflite flatbuffer into Relax, with clear errors for corrupt files. ``input_shapes``: the
    shapes of inputs the file leaves open (``-1`` in their shape signature; :func:`.tflite_fold.bind_inputs`)."""
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise InputFileError(f"{what} is not a TFLite flatbuffer (no TFL3 identifier)")
    try:
        import tflite
    except ImportError:
        raise UnsupportedError("importing .tflite into TVM needs the 'tflite' package "
                               "(pip install 'tvm_memsched[tvm]')") from None
    from tvm.relax.frontend.tflite import from_tflite

    from .native_log import quiet_import
    from .tflite_converter import OperatorConverter
    from .tflite_state import import_stateful, is_stateful_tflite

    def run():
        from .tflite_fold import bind_inputs, static_shapes
        from .tflite_unroll import unroll_while

        model = tflite.Model.GetRootAsModel(_per_tensor_dimension_zero(buf, tflite), 0)
        if model.SubgraphsLength():
            model = tflite.Model.GetRootAsModel(bind_inputs(bytes(model._tab.Bytes), input_shapes, what), 0)
            unrolled, loops[:] = unroll_while(bytes(model._tab.Bytes))
            model = tflite.Model.GetRootAsModel(unrolled, 0)

            model = tflite.Model.GetRootAsModel(static_shapes(bytes(model._tab.Bytes), model), 0)
        if model.SubgraphsLength() < 1:
            raise InputFileError(f"{what} has no subgraph")
        _check_offset_buffers(model, len(buf), what)
        with tensors_by_index(model):
            if is_stateful_tflite(model, OperatorConverter(model, model.Subgraphs(0), None, None)):
                return import_stateful(model, OperatorConverter)
            return from_tflite(model, op_converter=OperatorConverter)

    loops = []
    # the flatbuffer reader and the frontend raise assorted errors on bad input
    mod = quiet_import(run, lambda e: InputFileError(f"{what} could not be imported: {last_line(e, 400)}"))
    from .input_shapes import check_static

    check_static(mod, what)        # and every tensor within the size limit
    kept = [f"WHILE '{u.name}' stays a loop: {u.reason}" for u in loops if u.trips is None]
    return mod.with_attr(LOOPS_ATTR, "; ".join(kept)) if kept else mod


#: IRModule attribute naming the ``WHILE`` loops of a .tflite file left as loops, and why
#: (:func:`.tflite_unroll.unroll_while`)
LOOPS_ATTR = "tvm_memsched_loops"


@contextlib.contextmanager
def tensors_by_index(model):
    """Within the block, TVM's TFLite importer tells tensors apart by index, not by name.

    TFLite identifies a tensor by its index; names need not be unique, but TVM's
    importer keys its expressions by name, so two tensors named alike would be
    conflated (a different function, silently). Where a subgraph repeats a name,
    every tensor holding it is named ``<name>#<index>`` for the import (unique
    names are kept as they are). TVM's importer is patched for the block's duration.
    """
    from tvm.relax.frontend.tflite import tflite_frontend

    repeated = set()
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        count = collections.Counter(sg.Tensors(t).Name() for t in range(sg.TensorsLength()))
        repeated |= {name for name, n in count.items() if n > 1}
    if not repeated:
        yield
        return
    original = tflite_frontend.get_tensor_name

    def get_tensor_name(subgraph, tensor_idx):
        name = original(subgraph, tensor_idx)
        if subgraph.Tensors(tensor_idx).Name() in repeated:
            return f"{name}#{tensor_idx}"
        return name

    tflite_frontend.get_tensor_name = get_tensor_name
    try:
        yield
    finally:
        tflite_frontend.get_tensor_name = original


def _check_offset_buffers(model, n: int, what: str) -> None:
    """InputFileError if a buffer stored after the flatbuffer (``offset > 1``) reaches past the file's end."""
    for i in range(model.BuffersLength()):
        b = model.Buffers(i)
        if b.DataLength() == 0 and b.Offset() > 1 and b.Offset() + b.Size() > n:
            raise InputFileError(f"{what}: buffer {i} lies at bytes {b.Offset()}..{b.Offset() + b.Size()} but the "
                                 f"file has {n} bytes (truncated?)")


def _per_tensor_dimension_zero(buf: bytes, tflite) -> bytes:
    """``buf`` with ``quantized_dimension`` set to 0 wherever a tensor has one scale.

    TFLite ignores the field for per-tensor quantization (converters often write
    3 for depthwise weights); TVM's importer refuses any value but 0. The field
    is patched in a copy of the flatbuffer, in place.
    """
    model = tflite.Model.GetRootAsModel(buf, 0)
    patch = []
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        for t in range(sg.TensorsLength()):
            q = sg.Tensors(t).Quantization()
            if q is None or q.ScaleLength() != 1 or q.QuantizedDimension() == 0:
                continue
            o = q._tab.Offset(16)          # QuantizationParameters.quantized_dimension
            if o:
                patch.append(q._tab.Pos + o)
    if not patch:
        return buf
    out = bytearray(buf)
    for pos in patch:
        out[pos:pos + 4] = (0).to_bytes(4, "little")
    return bytes(out)
