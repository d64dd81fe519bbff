"""An ONNX model's tensor data, checked before anything reads or allocates it (used by :mod:`.onnx_frontend`).

A model file is untrusted. :func:`resolve_tensors` visits every tensor the file
stores (initializers, ``Constant`` node attributes, sparse initializers, and those
of subgraphs) and

* reads **external data** relative to the model file's folder (``base_dir``), never
  the current directory: the location must be a relative path inside that folder
  (no ``..``, no absolute path, no symbolic link that leaves it), and offset,
  length and the file's size must hold exactly the bytes the tensor's dims and
  type need; the bytes are put into the tensor (``raw_data``), so nothing later
  reads the file system again;
* checks that **data matches dims** for tensors stored in the file;
* refuses a tensor above ``max_bytes``.

:func:`check_activation_sizes` refuses, before TVM's importer evaluates anything,
a model whose inferred tensor shapes exceed the limit (``ConstantOfShape`` of a
huge constant shape in a 150-byte file).

Example
-------
>>> import os, tempfile, numpy as np, onnx
>>> from onnx import helper, numpy_helper
>>> d = tempfile.mkdtemp()
>>> w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
>>> g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", 1, [4])], [helper.make_tensor_value_info("y", 1, [4])], [w])
>>> m = helper.make_model(g)
>>> onnx.save_model(m, os.path.join(d, "m.onnx"), save_as_external_data=True, location="w.bin",
...                 size_threshold=0)
>>> m = onnx.load_model(os.path.join(d, "m.onnx"), load_external_data=False)
>>> resolve_tensors(m, d, "m.onnx"); numpy_helper.to_array(m.graph.initializer[0]).tolist()
[0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

import os

import numpy as np

from ...core.errors import InputFileError
from ...core.limits import MAX_TENSOR_BYTES, check_tensor_bytes

__all__ = ["resolve_tensors", "check_activation_sizes"]

_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def _tensors(graph):
    """Every TensorProto stored in ``graph`` and its subgraphs, iteratively."""
    from onnx import AttributeProto

    stack = [graph]
    while stack:
        g = stack.pop()
        yield from g.initializer
        for s in g.sparse_initializer:
            yield s.values
            yield s.indices
        for node in g.node:
            for a in node.attribute:
                if a.type == AttributeProto.TENSOR:
                    yield a.t
                elif a.type == AttributeProto.TENSORS:
                    yield from a.tensors
                elif a.type == AttributeProto.SPARSE_TENSOR:
                    yield a.sparse_tensor.values
                    yield a.sparse_tensor.indices
                elif a.type == AttributeProto.GRAPH:
                    stack.append(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    stack.extend(a.graphs)


def _nbytes(t, what: str, max_bytes: int) -> tuple[int, int]:
    """(elements, bytes) the tensor's dims and type need; refuses negative dims and the limit."""
    from onnx import TensorProto, helper

    if any(d < 0 for d in t.dims):
        raise InputFileError(f"{what}: tensor '{t.name}' has negative dims {list(t.dims)[:8]}")
    n = 1
    for d in t.dims:
        n *= int(d)
    if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return n, 0
    try:
        bits = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize * 8
    except (KeyError, TypeError, ValueError):
        raise InputFileError(f"{what}: tensor '{t.name}' has unknown data type {t.data_type}") from None
    if t.data_type in (TensorProto.INT4, TensorProto.UINT4) or getattr(TensorProto, "FLOAT4E2M1", -1) == \
            t.data_type:
        bits = 4
    size = (n * bits + 7) // 8
    check_tensor_bytes(size, t.name, what, list(t.dims), max_bytes)
    return n, size


def _external(t, base_dir: str | None, what: str, size: int) -> bytes:
    """The bytes of an externally stored tensor, read under the rules in the module docstring."""
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    if base_dir is None:
        raise InputFileError(f"{what}: tensor '{t.name}' keeps its data in the file {location!r}; external data "
                             "is read only beside a model file (give the .onnx file's path)")
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or \
            ".." in location.replace("\\", "/").split("/") or "\0" in location:
        raise InputFileError(f"{what}: tensor '{t.name}' names external data {location!r} outside the model's "
                             "folder")
    root = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(root, location))
    if os.path.commonpath([root, path]) != root or path == root:
        raise InputFileError(f"{what}: tensor '{t.name}' names external data {location!r}, which leads outside "
                             "the model's folder (a symbolic link?)")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise InputFileError(f"{what}: tensor '{t.name}': external data offset/length are not integers") from None
    if offset < 0 or (length is not None and length != size):
        raise InputFileError(f"{what}: tensor '{t.name}' of shape {'x'.join(map(str, t.dims))} needs {size:,} "
                             f"bytes; its external data gives offset {offset:,}, length {length}")
    try:
        with open(path, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            if offset + size > end:
                raise InputFileError(f"{what}: tensor '{t.name}' needs bytes {offset:,}..{offset + size:,} of "
                                     f"{location!r}, which has {end:,}")
            f.seek(offset)
            data = f.read(size)
    except OSError as e:
        raise InputFileError(f"{what}: tensor '{t.name}': cannot read external data {location!r}: "
                             f"{e.strerror or e}") from None
    return data


def resolve_tensors(model, base_dir: str | None, what: str = "model", max_bytes: int = MAX_TENSOR_BYTES) -> None:
    """Check every stored tensor of ``model`` and inline its external data, in place (module docstring).

    Parameters
    ----------
    model : onnx.ModelProto
        Parsed without external data.
    base_dir : str or None
        The model file's folder; ``None`` (bytes without a file) refuses external data.
    what : str
        How errors name the model.
    max_bytes : int
        The largest tensor accepted.
    """
    from onnx import TensorProto

    for t in _tensors(model.graph):
        n, size = _nbytes(t, what, max_bytes)
        if t.data_location == TensorProto.EXTERNAL:
            t.raw_data = _external(t, base_dir, what, size)
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            continue
        if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
            continue
        if t.HasField("raw_data"):
            if len(t.raw_data) != size:
                raise InputFileError(f"{what}: tensor '{t.name}' of shape {'x'.join(map(str, t.dims))} needs "
                                     f"{size:,} bytes of data, the file holds {len(t.raw_data):,}")
            continue
        stored = max(len(getattr(t, f)) for f in _TYPED_FIELDS)
        if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
            stored //= 2
        if stored != n and not (n == 0 and stored == 0):
            raise InputFileError(f"{what}: tensor '{t.name}' of shape {'x'.join(map(str, t.dims))} has {n:,} "
                                 f"elements, the file holds {stored:,} values")


def check_activation_sizes(model, what: str = "model", max_bytes: int = MAX_TENSOR_BYTES) -> None:
    """Refuse ``model`` if shape inference gives any tensor more than ``max_bytes`` bytes (module docstring)."""
    import onnx
    from onnx import helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is best effort; TVM's importer checks what it cannot see
        return
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input):
        t = vi.type.tensor_type
        if not t.HasField("shape") or not all(d.HasField("dim_value") for d in t.shape.dim):
            continue
        dims = [int(d.dim_value) for d in t.shape.dim]
        n = 1
        for d in dims:
            n *= max(d, 0)
        try:
            item = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            item = 1
        check_tensor_bytes(n * item, vi.name, what, dims, max_bytes)
