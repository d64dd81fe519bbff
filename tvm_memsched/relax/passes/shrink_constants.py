"""Constants at their stored shape: the ``ShrinkConstants`` pass (run at operator level, before legalization).

Some importers broadcast a small constant to the full tensor shape before an
element-wise operator, and ``FoldConstant`` then stores the broadcast array:
TVM's TFLite frontend imports ``PRELU`` as
``prelu(reshape(x, [-1]), reshape(broadcast_to(alpha, x.shape), [-1]), axis=0)``,
so a slope of ``[C]`` floats becomes ``H*W*C`` floats in flash. This pass finds

* ``prelu`` on a flattened tensor whose slope is (a reshape / broadcast of) a
  constant that repeats along the tensor's axes: it becomes ``prelu(x, slope,
  axis)`` on the unflattened tensor with the ``[C]`` slope (or, when the slope
  varies along several axes, ``where(x > 0, x, x * slope)`` with the slope at its
  smallest broadcastable shape), reshaped as before;
* element-wise binary operators (``add``, ``multiply``, ``maximum``, ``where``
  ...) with such a constant operand: the operand becomes the smallest array
  that broadcasts to the same values.

A constant is "repeating" along an axis when every slice along it has the same
bits. The legalized kernels compute the same expressions from the same values,
so results are bit-identical; only the constants' sizes change. Identical
constants are stored once by the microcontroller export
(:mod:`tvm_memsched.micro.codegen`).

Example
-------
>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType([1, 4, 4, 3], "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         a = bb.emit(relax.op.broadcast_to(relax.const(np.float32([1, 2, 3])), [1, 4, 4, 3]))
...         y = bb.emit(relax.op.nn.prelu(relax.op.reshape(x, [48]), relax.op.reshape(a, [48]), axis=0))
...         y = bb.emit_output(relax.op.reshape(y, [1, 4, 4, 3]))
...     gv = bb.emit_func_output(y)
>>> new, report = shrink_constants(bb.finalize())
>>> [(s.op, s.before_bytes, s.after_bytes) for s in report]
[('relax.nn.prelu', 192, 12)]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import tvm
from tvm import relax

from ..ir import static_shape
from ..rewrite import replace_bindings

__all__ = ["ShrinkConstants", "ConstantSite", "shrink_constants", "smallest_broadcast", "constant_value"]

#: element-wise operators with numpy-style broadcasting whose constant operands can shrink
ELEMENTWISE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.floor_divide",
               "relax.power", "relax.maximum", "relax.minimum", "relax.where", "relax.equal", "relax.not_equal",
               "relax.less", "relax.less_equal", "relax.greater", "relax.greater_equal", "relax.floor_mod")


@dataclass
class ConstantSite:
    """One rewritten binding: its variable, operator and the constant bytes before and after."""

    var: str
    op: str
    before_bytes: int
    after_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def _bits(a: np.ndarray) -> np.ndarray:
    """``a`` viewed as unsigned integers of the same width (NaN payloads and -0.0 compare exactly)."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a


def smallest_broadcast(a: np.ndarray) -> np.ndarray:
    """The smallest array of ``a``'s rank (size-1 axes) that broadcasts to exactly ``a``'s bits.

    >>> smallest_broadcast(np.tile(np.float32([1, 2]), (3, 1))).shape
    (1, 2)
    """
    small = np.ascontiguousarray(a)
    for axis in range(small.ndim):
        if small.shape[axis] > 1:
            first = np.take(small, [0], axis=axis)
            if np.array_equal(_bits(np.broadcast_to(first, small.shape)), _bits(small)):
                small = np.ascontiguousarray(first)
    return small


def constant_value(expr, var2val, depth: int = 8):
    """The numpy value of ``expr`` if it is a constant, or a reshape / broadcast / exact cast of one; else None."""
    if isinstance(expr, tvm.ir.Constant) and hasattr(expr.value, "numpy"):
        return expr.value.numpy()
    if not isinstance(expr, relax.Var) or depth == 0 or expr not in var2val:
        return None
    value = var2val[expr]
    shape = static_shape(expr.ty)
    if shape is None:
        return None
    if isinstance(value, relax.Var):
        return constant_value(value, var2val, depth - 1)
    if isinstance(value, tvm.ir.Call) and isinstance(value.op, tvm.ir.Op) \
            and value.op.name in ("relax.reshape", "relax.broadcast_to", "relax.astype"):
        src = constant_value(value.args[0], var2val, depth - 1)
        if src is None:
            return None
        if value.op.name == "relax.astype":  # exact conversions only (float16 weights -> float32, ...)
            dtype = np.dtype(str(expr.ty.dtype))
            return src.astype(dtype) if np.can_cast(src.dtype, dtype, casting="safe") else None
        if value.op.name == "relax.reshape":
            return src.reshape(shape) if src.size == int(np.prod(shape)) else None
        try:
            return np.broadcast_to(src, shape)
        except ValueError:
            return None
    return None


def _const(a: np.ndarray):
    return relax.const(np.ascontiguousarray(a), str(a.dtype))


def _prelu(call, var2val):
    """``prelu(reshape(x, [N]), slope, axis=0)`` with a repeating slope -> ``(prelu on x with a small slope,
    x's shape, slope bytes before, after)``."""
    data, slope = call.args
    if int(call.attrs.axis) != 0 or not isinstance(data, relax.Var) or data not in var2val:
        return None
    flat = var2val[data]
    if not (isinstance(flat, tvm.ir.Call) and isinstance(flat.op, tvm.ir.Op) and flat.op.name == "relax.reshape"):
        return None
    x = flat.args[0]
    shape = static_shape(x.ty) if isinstance(x, relax.Var) else None
    alpha = constant_value(slope, var2val)
    if shape is None or alpha is None or alpha.size != int(np.prod(shape)) or len(static_shape(data.ty)) != 1:
        return None
    small = smallest_broadcast(alpha.reshape(shape))
    if small.size == alpha.size:
        return None
    varying = [axis for axis, n in enumerate(small.shape) if n > 1]
    if len(varying) <= 1:
        axis = varying[0] if varying else len(shape) - 1
        out = relax.op.nn.prelu(x, _const(small.reshape(-1)), axis=axis)
    else:  # prelu takes a 1-D slope: its legalized expression, Select(x > 0, x, x * slope), as operators
        zero = relax.const(np.zeros((), small.dtype), str(small.dtype))
        out = relax.op.where(relax.op.greater(x, zero), x, relax.op.multiply(x, _const(small)))
    return out, shape, alpha.nbytes, small.nbytes


def _elementwise(call, var2val):
    """An element-wise call with its repeating constant operands at their smallest broadcast shape."""
    args, before, after = list(call.args), 0, 0
    for k, a in enumerate(args):
        value = constant_value(a, var2val)
        if value is None or value.ndim == 0:
            continue
        small = smallest_broadcast(value)
        if small.size < value.size:
            args[k] = _const(small)
            before, after = before + value.nbytes, after + small.nbytes
    if not before:
        return None
    return relax.Call(call.op, args, call.attrs), before, after


def _unflattening_user(var, bindings, shape):
    """The only binding that reads ``var``, if it is ``reshape(var, shape)``; else None."""
    users = [b for b in bindings
             if any(isinstance(a, relax.Var) and a.same_as(var) for a in getattr(b.value, "args", ()))]
    if len(users) != 1:
        return None
    v = users[0].value
    if not (isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == "relax.reshape"):
        return None
    return users[0] if static_shape(users[0].var.ty) == shape else None


def _sites(func, k: int) -> dict:
    """``{var: (new expr, site)}`` for block ``k`` of ``func``.

    A rewritten ``prelu`` on a flattened tensor is reshaped back to ``[N]``; when the
    only reader of its result is the frontend's reshape back to the tensor's shape,
    that reader takes the unflattened result instead (no reshape pair is left over,
    and the flattened binding becomes unused).
    """
    var2val = relax.analysis.get_var2val(func)
    bindings = list(func.body.blocks[k].bindings)
    out = {}
    for b in bindings:
        v = b.value
        if not (isinstance(b, relax.VarBinding) and isinstance(v, tvm.ir.Call) and isinstance(v.op, tvm.ir.Op)):
            continue
        name = v.op.name
        if name == "relax.nn.prelu":
            found = _prelu(v, var2val)
            if found is not None:
                expr, shape, before, after = found
                site = ConstantSite(b.var.name, name, before, after)
                back = _unflattening_user(b.var, bindings, shape)
                if back is not None:
                    out[back.var] = (expr, site)
                else:
                    out[b.var] = (relax.op.reshape(expr, static_shape(b.var.ty)), site)
        elif name in ELEMENTWISE:
            found = _elementwise(v, var2val)
            if found is not None:
                out[b.var] = (found[0], ConstantSite(b.var.name, name, found[1], found[2]))
    return out


def shrink_constants(mod):
    """Apply the rewrites of the module docstring to every Relax function; returns ``(module, [ConstantSite])``."""
    report = []
    new_mod = mod
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        new_func = func
        for k, block in enumerate(func.body.blocks):
            if not isinstance(block, relax.DataflowBlock):
                continue
            sites = _sites(new_func, k)
            if not sites:
                continue
            replaced = replace_bindings(new_func, k, {var: expr for var, (expr, _) in sites.items()})
            if replaced is None:  # a type would change: keep the block
                continue
            new_func = replaced
            report += [site for _, site in sites.values()]
        if new_func is not func:
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new_func
    return new_mod, report


@tvm.transform.module_pass(opt_level=0, name="ShrinkConstants")
class ShrinkConstants:
    """Keep broadcast constants at their small shape (run at operator level, before legalization).

    See :mod:`tvm_memsched.relax.passes.shrink_constants`: a PReLU slope imported as a
    broadcast ``[H*W*C]`` array goes back to ``[C]``, and repeating constant
    operands of element-wise operators shrink to the smallest array that
    broadcasts to the same values. Results are bit-identical. After the pass has
    run, ``report`` lists the rewritten bindings (:class:`ConstantSite`).

    Example
    -------
    >>> import tvm
    >>> isinstance(tvm.transform.Sequential([ShrinkConstants()]), tvm.transform.Pass)
    True
    """

    def __init__(self):
        self.report: list[ConstantSite] = []

    def transform_module(self, mod, ctx):
        new_mod, self.report = shrink_constants(mod)
        return new_mod

    @property
    def saved_bytes(self) -> int:
        return sum(s.before_bytes - s.after_bytes for s in self.report)
