"""Model specs of the command line, resolved in one place: ``zoo:NAME[:DTYPE]``, ``.tflite`` and graph JSON files.

Each command names its model with a spec and gets what the library functions
take:

* :func:`load_graph_spec` - a core :class:`~tvm_memsched.core.Graph` (``info``,
  ``schedule``, ``simulate``): graph JSON, ``.tflite`` or zoo;
* :func:`load_relax_spec` - a Relax IRModule and a name (``compare``,
  ``micro``): ``.tflite`` (:mod:`tvm_memsched.relax.frontend`) or zoo;
* :func:`load_tflite_spec` - a :class:`~tvm_memsched.tflite.reader.TFLiteGraph`
  (``tflite``, ``coral``): ``.tflite`` or zoo, written on the fly.

``zoo:NAME`` is a network of :mod:`tvm_memsched.zoo` (float32);
``zoo:NAME:int8`` its full-integer variant where the target takes one (graphs
and ``.tflite``). Bad specs raise a one-line
:class:`~tvm_memsched.core.errors.MemschedError`.

Example
-------
>>> parse_zoo_spec("zoo:resnet:int8"), parse_zoo_spec("model.tflite")
(('resnet', 'int8'), None)
>>> load_graph_spec("zoo:swiftnet_like").name
'swiftnet_like'
"""

from __future__ import annotations

import os

from .. import zoo
from ..core.errors import InputFileError, UnsupportedError

__all__ = ["ZOO_PREFIX", "parse_zoo_spec", "load_graph_spec", "load_relax_spec", "load_tflite_spec",
           "tflite_bytes_of"]

#: the prefix of zoo model specs
ZOO_PREFIX = "zoo:"

_DTYPES = ("float32", "int8")


def parse_zoo_spec(spec: str) -> tuple[str, str] | None:
    """``(name, dtype)`` of a ``zoo:NAME[:DTYPE]`` spec (dtype float32 unless given), None for a file.

    Raises for a malformed spec or an unknown model name.
    """
    if not spec.startswith(ZOO_PREFIX):
        return None
    parts = spec[len(ZOO_PREFIX):].split(":")
    name, dtype = parts[0], (parts[1] if len(parts) > 1 else "float32")
    if len(parts) > 2 or dtype not in _DTYPES:
        raise InputFileError(f"bad zoo model spec '{spec}': use zoo:NAME or zoo:NAME:int8")
    zoo.info(name)   # raises a clear error for unknown names
    return name, dtype


def _extension(spec: str) -> str:
    return os.path.splitext(spec)[1].lower()


def load_graph_spec(spec: str):
    """The core Graph of a graph JSON file, a ``.tflite`` file or ``zoo:NAME[:int8]``."""
    z = parse_zoo_spec(spec)
    if z is not None:
        return zoo.graph(*z)
    if _extension(spec) == ".tflite":
        return load_tflite_spec(spec).graph
    from ..core.io import load_graph

    return load_graph(spec)


def load_relax_spec(spec: str):
    """``(IRModule, name)`` of a ``.tflite`` file, ``zoo:NAME`` or ``zoo:NAME:int8`` (its int8 .tflite imported)."""
    z = parse_zoo_spec(spec)
    if z is not None:
        name, dtype = z
        if dtype != "float32":
            from ..relax.frontend import from_tflite_bytes

            return from_tflite_bytes(zoo.tflite(name, dtype), spec), f"{name}_{dtype}"
        return zoo.load(name), name
    ext = _extension(spec)
    if ext == ".json":
        raise UnsupportedError(f"{spec} is a graph JSON: it has no operators TVM can compile. "
                               "Give a .tflite file or zoo:NAME, or schedule the graph with "
                               "'tvm-memsched schedule'")
    if ext != ".tflite":
        raise UnsupportedError(f"unsupported model file '{spec}': expected a .tflite file or zoo:NAME")
    from ..relax.frontend import from_tflite_file

    return from_tflite_file(spec), os.path.splitext(os.path.basename(spec))[0]


def tflite_bytes_of(spec: str) -> bytes | None:
    """The ``.tflite`` bytes behind a model spec (a ``.tflite`` file or ``zoo:NAME:int8``), else None.

    ``zoo:NAME`` (float32) is built as a Relax module directly, so it has none.
    """
    z = parse_zoo_spec(spec)
    if z is not None:
        return zoo.tflite(*z) if z[1] != "float32" else None
    if _extension(spec) != ".tflite":
        return None
    try:
        with open(spec, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputFileError(f"cannot read {spec}: {e.strerror or e}") from None


def load_tflite_spec(spec: str):
    """The :class:`~tvm_memsched.tflite.reader.TFLiteGraph` of a ``.tflite`` file or ``zoo:NAME[:int8]``."""
    from ..tflite.reader import read_tflite

    z = parse_zoo_spec(spec)
    if z is not None:
        name, dtype = z
        return read_tflite(zoo.tflite(name, dtype), name=name + ("_int8" if dtype == "int8" else ""), label=spec)
    return read_tflite(spec)
