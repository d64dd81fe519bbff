"""The one place that turns a model file into a Relax IRModule.

``.tflite`` files are imported with ``tvm.relax.frontend.tflite`` (which needs the
``tflite`` schema package), with one-line errors for unreadable or corrupt
files. Command-line model specs (``zoo:NAME``, paths) are resolved in the
application layer, which calls this module for files.
"""

from __future__ import annotations

from ..core.errors import InputFileError, UnsupportedError

__all__ = ["from_tflite_file", "from_tflite_bytes"]


def from_tflite_file(path: str):
    """Import the ``.tflite`` file ``path`` into Relax (see :func:`from_tflite_bytes`)."""
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror or e}") from None
    return from_tflite_bytes(buf, path)


def from_tflite_bytes(buf: bytes, what: str = "model"):
    """Import a .tflite flatbuffer into Relax, with clear errors for corrupt files."""
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise InputFileError(f"{what} is not a TFLite flatbuffer (no TFL3 identifier)")
    try:
        import tflite
    except ImportError:
        raise UnsupportedError("importing .tflite into TVM needs the 'tflite' package "
                               "(pip install 'tvm_memsched[tvm]')") from None
    from tvm.relax.frontend.tflite import from_tflite

    from .tflite_converter import OperatorConverter

    try:
        buf = _per_tensor_dimension_zero(buf, tflite)
        model = tflite.Model.GetRootAsModel(buf, 0)
        if model.SubgraphsLength() < 1:
            raise InputFileError(f"{what} has no subgraph")
        return from_tflite(model, op_converter=OperatorConverter)
    except InputFileError:
        raise
    except Exception as e:  # the flatbuffer reader and the frontend raise assorted errors on bad input
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise InputFileError(f"{what} could not be imported: {msg}") from None


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
