"""TFLite flatbuffers: building, reading and rewriting ``.tflite`` files.

Importing this package is cheap; the flatbuffer schema (from the ``ai_edge_litert``
or ``tflite_micro`` wheel) is loaded on first use of :mod:`.builder`::

    from tvm_memsched.tflite import builder
    model = builder.load(open("model.tflite", "rb").read())
"""

import importlib

__all__ = ["builder"]


def __getattr__(name):
    if name == "builder":
        return importlib.import_module(".builder", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
