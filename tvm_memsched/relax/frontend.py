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

    try:
        model = tflite.Model.GetRootAsModel(buf, 0)
        if model.SubgraphsLength() < 1:
            raise InputFileError(f"{what} has no subgraph")
        return from_tflite(model)
    except InputFileError:
        raise
    except Exception as e:  # the flatbuffer reader and the frontend raise assorted errors on bad input
        msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise InputFileError(f"{what} could not be imported: {msg}") from None
