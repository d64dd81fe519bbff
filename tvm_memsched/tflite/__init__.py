"""TFLite flatbuffers: building, reading and rewriting ``.tflite`` files; TFLM offline plans; Coral pipelines.

Modules (one job each; all import lazily, so importing this package is cheap):

* :mod:`.builder` - generic flatbuffer builder, ``load``/``serialize`` (byte-identical round trips);
* :mod:`.reader` - ``.tflite`` -> core :class:`~tvm_memsched.core.Graph` (+ index mappings, clear errors);
* :mod:`.reorder` - write the operators in a given order;
* :mod:`.offline_plan` - our arena plan as TFLite Micro ``OfflineMemoryAllocation`` metadata;
* :mod:`.verify` - LiteRT bit-identical comparison (file order), TFLM arena measurement;
* :mod:`.optimize` - the end-to-end ``tvm-memsched tflite`` pipeline;
* :mod:`.coral` - Edge TPU pipelines: cost model, exact and learned (RESPECT-style) segmentation, segment writer;

Example
-------
>>> from tvm_memsched import tflite, zoo
>>> r = tflite.optimize_tflite(zoo.tflite("swiftnet_like", "int8"), offline_plan=True, time_limit=2)
>>> r.predicted["out_plan"] < r.predicted["in"]
True
"""

import importlib

__all__ = ["builder", "reader", "reorder", "offline_plan", "verify", "optimize", "coral",
           "read_tflite", "optimize_tflite", "segment", "segment_learned"]

_MODULES = {"builder", "reader", "reorder", "offline_plan", "verify", "optimize", "coral"}
_FUNCTIONS = {"read_tflite": "reader", "optimize_tflite": "optimize", "segment": "coral",
              "segment_learned": "coral"}


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(f".{_FUNCTIONS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
