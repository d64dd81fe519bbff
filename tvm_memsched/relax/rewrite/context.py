"""What an identity rule sees: static concats, the function's weights and ready positions, slicing.

:func:`concat_info` describes a statically shaped ``concat``; a
:class:`RuleContext` tells a rule which vars are bound to what, which
parameters are weights and when each value is ready; :func:`slice_along`
slices a weight at compile time when it is constant. The small expression
helpers (:func:`is_call`, :func:`expr_shape`, ...) are shared by the rules and
the engine.

Example
-------
>>> from tvm import relax
>>> from tvm_memsched.relax.testing import branchy_module
>>> func = branchy_module(branches=3)["main"]
>>> ctx = RuleContext.for_function(func)
>>> cat = next(b.value for b in func.body.blocks[0].bindings if is_call(b.value, "relax.concat"))
>>> info = concat_info(cat, ctx.var2val)
>>> info.axis, len(info.fields), info.offsets == tuple(sum(info.sizes[:i]) for i in range(3))
(1, 3, True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from ..ir import static_shape

__all__ = ["CONCAT", "CONCAT_B", "ConcatInfo", "concat_info", "RuleContext", "weight_params", "slice_along",
           "is_call", "is_const", "expr_shape", "plain_layout", "same_call", "concat_arg"]

#: the concat sub-pattern every rule matches through (``m[CONCAT]`` is the concat call)
CONCAT = is_op("relax.concat")(wildcard())


#: the second concat of :func:`concat_pair_binary`
CONCAT_B = is_op("relax.concat")(wildcard())


def is_call(expr, name: str | None = None) -> bool:
    return isinstance(expr, tvm.ir.Call) and isinstance(expr.op, tvm.ir.Op) and (name is None or expr.op.name == name)


def is_const(expr) -> bool:
    return isinstance(expr, tvm.ir.Constant) and isinstance(getattr(expr, "ty", None), relax.TensorType)


def expr_shape(expr) -> list[int] | None:
    ty = getattr(expr, "ty", None)
    return static_shape(ty) if isinstance(ty, relax.TensorType) else None


def plain_layout(layout) -> str | None:
    """The layout string if it is a plain permutation of distinct upper-case letters (no packed ``NCHW4c``)."""
    s = str(layout) if layout is not None else ""
    return s if s and s.isalpha() and s.isupper() and len(set(s)) == len(s) else None


@dataclass(frozen=True)
class ConcatInfo:
    """A statically shaped ``concat``: its call, fields, axis (non-negative) and the fields' sizes on it."""

    call: object
    fields: tuple
    axis: int
    sizes: tuple
    shape: tuple
    dtype: str

    @property
    def offsets(self) -> tuple:
        """Start of every field along the axis."""
        out, acc = [], 0
        for s in self.sizes:
            out.append(acc)
            acc += s
        return tuple(out)

    @property
    def total(self) -> int:
        return int(sum(self.sizes))

    @property
    def ndim(self) -> int:
        return len(self.shape)


def concat_info(expr, var2val=None) -> ConcatInfo | None:
    """The :class:`ConcatInfo` of a concat call (or of a var bound to one), None if not a static concat.

    Static means: at least two fields, all tensors of known static shape and the
    same dtype and rank, equal outside the axis, each at least one element long
    on it.
    """
    if isinstance(expr, relax.Var) and var2val is not None:
        expr = var2val.get(expr, expr)
    if not is_call(expr, "relax.concat") or expr.attrs is None or expr.attrs.axis is None:
        return None
    tup = expr.args[0]
    if isinstance(tup, relax.Var) and var2val is not None:
        tup = var2val.get(tup, tup)
    if not isinstance(tup, relax.Tuple) or len(tup.fields) < 2:
        return None
    shapes, dtypes = [], set()
    for f in tup.fields:
        shape = expr_shape(f)
        if shape is None:
            return None
        shapes.append(shape)
        dtypes.add(str(f.ty.dtype))
    ndim = len(shapes[0])
    axis = int(expr.attrs.axis)
    axis = axis + ndim if axis < 0 else axis
    if len(dtypes) != 1 or any(len(s) != ndim for s in shapes) or not 0 <= axis < ndim:
        return None
    rest = {tuple(d for k, d in enumerate(s) if k != axis) for s in shapes}
    sizes = tuple(int(s[axis]) for s in shapes)
    if len(rest) != 1 or min(sizes) <= 0:
        return None
    shape = list(shapes[0])
    shape[axis] = sum(sizes)
    return ConcatInfo(expr, tuple(tup.fields), axis, sizes, tuple(shape), dtypes.pop())


#: ops that only reshape/transpose/cast a constant, folded when a rule slices their result
_FOLDABLE = frozenset({"relax.reshape", "relax.permute_dims", "relax.astype", "relax.expand_dims",
                       "relax.squeeze", "relax.flatten"})


def weight_params(func) -> frozenset:
    """Parameters of ``func`` that hold weights: those after ``attrs["num_input"]`` if set, else all."""
    params = list(func.params)
    attrs = func.attrs
    if attrs is not None and "num_input" in attrs:
        params = params[int(attrs["num_input"]):]
    return frozenset(params)


@dataclass
class RuleContext:
    """What a rule may know about the function it rewrites.

    ``var2val`` resolves vars to their bound values (``relax.analysis.get_var2val``);
    ``params`` are the function's weight parameters (:func:`weight_params`);
    ``order`` gives the position at which a var's value is ready (program order or
    a scheduled order), used to sum partial results in the order the branches
    complete; ``target`` is the concat the caller is rewriting (rules that could
    act on several concats act only on it).
    """

    var2val: dict = field(default_factory=dict)
    params: frozenset = frozenset()
    order: dict = field(default_factory=dict)
    target: object = None
    _ready: dict = field(default_factory=dict, repr=False)

    @classmethod
    def for_function(cls, func, order: dict | None = None, target=None) -> "RuleContext":
        """A context for ``func``; ``order`` defaults to the program order of its bindings."""
        if order is None:
            order = {}
            for blk in func.body.blocks:
                for b in blk.bindings:
                    order[b.var] = len(order)
        return cls(dict(relax.analysis.get_var2val(func)), weight_params(func), order, target)

    def resolve(self, expr):
        """The value bound to ``expr`` if it is a var of this function, else ``expr``."""
        if isinstance(expr, relax.Var):
            return self.var2val.get(expr, expr)
        return expr

    def const_array(self, expr) -> np.ndarray | None:
        """The value of ``expr`` if it is a constant, or a reshape/transpose/cast of one; else None."""
        expr = self.resolve(expr)
        if is_const(expr):
            return expr.value.numpy()
        if not is_call(expr) or expr.op.name not in _FOLDABLE or not expr.args:
            return None
        arr = self.const_array(expr.args[0])
        shape = expr_shape(expr)
        if arr is None or shape is None:
            return None
        if expr.op.name == "relax.permute_dims":
            axes = expr.attrs.axes
            arr = np.transpose(arr, None if axes is None else [int(a) for a in axes])
        elif expr.op.name == "relax.astype":
            arr = arr.astype(str(expr.ty.dtype))
        return np.ascontiguousarray(arr.reshape(shape))

    def is_weight(self, expr) -> bool:
        """True for constants, weight parameters, and reshapes/transposes/casts of those."""
        if is_const(expr):
            return True
        if not isinstance(expr, relax.Var):
            return False
        if expr in self.params:
            return True
        value = self.var2val.get(expr)
        return is_call(value) and value.op.name in _FOLDABLE and bool(value.args) and self.is_weight(value.args[0])

    def ready(self, expr) -> int:
        """Position at which ``expr`` is available (-1 for constants and parameters)."""
        if not isinstance(expr, relax.Var):
            return -1
        if expr in self.order:
            return self.order[expr]
        if expr in self._ready:
            return self._ready[expr]
        self._ready[expr] = -1
        value = self.var2val.get(expr)
        pos = -1
        if value is not None:
            pos = max([self.ready(v) for v in relax.analysis.free_vars(value)] or [-1])
        self._ready[expr] = pos
        return pos


def slice_along(expr, axis: int, begin: int, end: int, ctx: RuleContext):
    """``expr[..., begin:end, ...]`` along ``axis``: a new constant when ``expr`` is constant, else a strided_slice."""
    shape = expr_shape(expr)
    if shape is not None and begin == 0 and end == shape[axis]:
        return expr
    arr = ctx.const_array(expr)
    if arr is not None:
        index = [slice(None)] * arr.ndim
        index[axis] = slice(begin, end)
        return relax.const(np.ascontiguousarray(arr[tuple(index)]))
    return relax.op.strided_slice(expr, axes=[axis], begin=[begin], end=[end])


def same_call(call, op_args):
    """``call`` with new arguments and the same attributes (types are inferred on normalization)."""
    return relax.Call(call.op, list(op_args), call.attrs)


def concat_arg(call, matches, ctx: RuleContext, pattern=CONCAT) -> tuple[int, ConcatInfo] | None:
    """Index of the argument of ``call`` that is the matched concat, and its info."""
    cat = matches.get(pattern)
    if cat is None:
        return None
    info = concat_info(cat, ctx.var2val)
    if info is None:
        return None
    hits = [i for i, a in enumerate(call.args) if a.same_as(cat) or ctx.resolve(a).same_as(cat)]
    if len(hits) != 1:
        return None
    return hits[0], info
