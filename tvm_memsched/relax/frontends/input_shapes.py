"""Static input shapes for imported models: check them, or bind the symbolic ones the user gives.

Every tool here plans memory ahead of time, so an imported ``main`` must have
static shapes throughout. :func:`bind_input_shapes` replaces the symbolic
dimensions of ``main``'s inputs with given values (a ``.pt2`` exported with
``torch.export.Dim``, an ONNX graph with a named batch dimension);
:func:`check_static` refuses, with one line naming the input or the binding and
what to give, a module that still has symbolic or data-dependent shapes.

Example
-------
>>> import tvm
>>> from tvm import relax
>>> n = tvm.tirx.Var("n", "int64")
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType([n, 4], "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         y = bb.emit_output(relax.op.nn.relu(x))
...     _ = bb.emit_func_output(y)
>>> mod = bind_input_shapes(bb.get(), {"x": (2, 4)}, "model")
>>> check_static(mod, "model"); [int(d) for d in mod["main"].params[0].ty.shape.values]
[2, 4]
"""

from __future__ import annotations

import tvm
from tvm import relax

from ...core.errors import UnsupportedError
from ...core.limits import check_tensor_bytes
from ..ir import static_nbytes, static_shape

__all__ = ["bind_input_shapes", "check_static", "shape_text", "ANY_DIM"]

#: suffix of the names given to dimensions a file leaves unnamed (ONNX -1 or 0); shown as ``?``
ANY_DIM = "__any"


def shape_text(shape) -> str:
    """``1x3x224x224`` for a shape (symbolic dimensions by name; unnamed ones, written -1 or 0 in the file,
    as ``?``)."""
    return "x".join(str(int(d)) if isinstance(d, (int, tvm.tirx.IntImm)) else
                    "?" if str(d).endswith(ANY_DIM) else str(d) for d in shape) if len(shape) else "scalar"


def _dims(ty) -> list | None:
    shape = getattr(ty, "shape", None)
    return None if getattr(shape, "values", None) is None else list(shape.values)


def _static(ty) -> bool:
    if isinstance(ty, relax.TupleType):
        return all(_static(f) for f in ty.fields)
    if isinstance(ty, relax.TensorType):
        dims = _dims(ty)
        return dims is not None and all(isinstance(d, tvm.tirx.IntImm) for d in dims)
    return True


def bind_input_shapes(mod, shapes: dict | None, what: str):
    """``mod`` with the symbolic dimensions of ``main``'s inputs set from ``shapes`` (input name -> shape).

    Raises :class:`UnsupportedError` for unknown input names, a rank or a static
    dimension that differs from the model's, or one symbol given two values.
    """
    if not shapes:
        return mod
    func = mod["main"]
    params = {p.name: p for p in func.params}
    unknown = sorted(set(shapes) - set(params))
    if unknown:
        raise UnsupportedError(f"{what}: --input-shape names unknown input(s) {', '.join(unknown)}; the inputs are "
                               f"{', '.join(params) or 'none'}")
    binding: dict = {}
    for name, shape in shapes.items():
        dims = _dims(params[name].ty)
        if dims is None or len(dims) != len(shape):
            raise UnsupportedError(f"{what}: input '{name}' has rank {len(dims) if dims else '?'}, "
                                   f"--input-shape gives {shape_text(shape)}")
        for d, v in zip(dims, shape):
            if isinstance(d, tvm.tirx.IntImm):
                if int(d) != int(v):
                    raise UnsupportedError(f"{what}: input '{name}' has shape {shape_text(dims)}; --input-shape "
                                           f"gives {shape_text(shape)}")
            elif isinstance(d, tvm.tirx.Var):
                if binding.get(d, int(v)) != int(v):
                    raise UnsupportedError(f"{what}: dimension '{d}' of input '{name}' is given two values "
                                           f"({binding[d]} and {v})")
                binding[d] = int(v)
    if not binding:
        return mod
    return relax.transform.BindSymbolicVars(binding, "main")(mod)


def _check_bytes(ty, name: str, what: str) -> None:
    if isinstance(ty, relax.TupleType):
        for f in ty.fields:
            _check_bytes(f, name, what)
    elif isinstance(ty, relax.TensorType) and ty.dtype:
        nbytes = static_nbytes(ty)
        if nbytes is not None:
            check_tensor_bytes(nbytes, name, what, static_shape(ty))


def check_static(mod, what: str) -> None:
    """Raise :class:`UnsupportedError` unless ``main``'s inputs and every binding have static shapes, each
    tensor within :data:`~tvm_memsched.core.limits.MAX_TENSOR_BYTES`."""
    func = mod["main"]
    for p in func.params:
        if _static(p.ty):
            _check_bytes(p.ty, p.name, what)
        else:
            dims = _dims(p.ty) or []
            hint = shape_text([d if isinstance(d, tvm.tirx.IntImm) else 1 for d in dims]) if dims else "..."
            raise UnsupportedError(f"{what}: input '{p.name}' has a symbolic shape ({shape_text(dims)}); give a "
                                   f"static one with --input-shape {p.name}={hint}")
    body = func.body
    for block in getattr(body, "blocks", []):
        for b in block.bindings:
            if not _static(b.var.ty):
                raise UnsupportedError(f"{what}: '{b.var.name}' has a dynamic shape ({b.var.ty}) that depends on "
                                       "the data; only static shapes can be planned")
            _check_bytes(b.var.ty, b.var.name, what)
