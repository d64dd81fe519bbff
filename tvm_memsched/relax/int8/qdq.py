"""The view of a quantize/dequantize (QDQ) Relax function the int8 and 16x8 matchers read.

:class:`FunctionView` indexes a function's bindings by variable and counts
their users; it reads ``dequantize`` calls back into integer tensors and
:class:`QParams`, and constant weights through the ``reshape`` /
``permute_dims`` TVM's importer puts around them. :class:`Match` is what a
matcher (:mod:`.patterns`) returns for one TFLite operator.

Example
-------
>>> QParams(np.array([0.5], np.float32), np.array([3]), 0).zp
3
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..ir import op_name, static_shape

__all__ = ["QParams", "Match", "FunctionView", "INT_TYPES", "const_value", "prim_value", "apply_layout",
           "axis_after_reshape"]

INT_TYPES = ("int8", "int16")   # uint8 (legacy, unsupported by TFLite Micro's kernels) stays float: reported


@dataclass(frozen=True, eq=False)
class QParams:
    """Scale(s) (float32) and zero point(s) of a quantized tensor; ``axis`` for per-channel scales."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0

    @property
    def s(self) -> float:
        return float(self.scale.reshape(-1)[0])

    @property
    def zp(self) -> int:
        return int(self.zero_point.reshape(-1)[0])

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    def same_as(self, other: "QParams") -> bool:
        return (self.scale.size == other.scale.size and np.array_equal(self.scale, other.scale)
                and np.array_equal(self.zero_point.reshape(-1), other.zero_point.reshape(-1)))


@dataclass
class Match:
    """One TFLite operator found in QDQ form, to be replaced by an integer kernel.

    ``var`` is the binding whose value the kernel replaces (same type);
    ``inputs`` are the integer (or, for ``QUANTIZE``, float) tensors it reads;
    ``qin``/``qout`` their quantization; ``consts`` constant operands (numpy);
    ``attrs`` operator attributes; ``act`` the int clamp of the output.
    """

    op: str
    var: relax.Var
    inputs: list
    qin: list
    qout: QParams | None
    consts: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    act: tuple = (-128, 127)


def const_value(expr):
    """numpy value of a constant expression (Constant, or multiply/reshape of constants), else None."""
    if isinstance(expr, tvm.ir.Constant):
        return expr.value.numpy()
    if isinstance(expr, relax.Call) and op_name(expr) == "relax.multiply":
        a, b = const_value(expr.args[0]), const_value(expr.args[1])
        if a is not None and b is not None:
            return (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(np.float32)
    return None


def prim_value(e):
    """Python number of a PrimValue / float attr."""
    if isinstance(e, (int, float)):
        return e
    v = getattr(e, "value", None)
    return v


class FunctionView:
    """Bindings of a Relax function by variable, and how often each variable is used."""

    def __init__(self, func: relax.Function):
        self.func = func
        self.value: dict = {}
        self.users: Counter = Counter()
        self.order: list = []
        for block in func.body.blocks:
            for b in block.bindings:
                if isinstance(b, relax.VarBinding):
                    self.value[b.var] = b.value
                    self.order.append(b.var)
                    self._count(b.value)
        self._count(func.body.body)

    def _count(self, expr):
        def visit(e):
            if isinstance(e, relax.Var):
                self.users[e] += 1

        relax.analysis.post_order_visit(expr, visit)

    def call(self, expr, *names):
        """The Call bound to ``expr`` if it is one of ``names`` (operator names without ``relax.``)."""
        v = self.value.get(expr) if isinstance(expr, relax.Var) else expr
        if isinstance(v, relax.Call) and op_name(v) in {f"relax.{n}" for n in names}:
            return v
        return None

    def dtype(self, expr) -> str:
        return str(expr.ty.dtype) if isinstance(expr.ty, relax.TensorType) else ""

    def shape(self, expr):
        return static_shape(expr.ty)

    def qparams(self, scale, zp, axis) -> QParams | None:
        s, z = const_value(scale), const_value(zp)
        if s is None or z is None:
            return None
        return QParams(np.asarray(s, np.float32).reshape(-1), np.asarray(z, np.int64).reshape(-1), int(axis))

    def dequantized(self, expr):
        """``(int8 tensor, QParams)`` if ``expr`` is ``dequantize(x)`` of an int8 activation ``x`` (one scale and
        zero point, as TFLite quantizes activations), else None."""
        c = self.call(expr, "dequantize")
        if c is None:
            return None
        q = self.qparams(c.args[1], c.args[2], c.attrs.axis)
        x = c.args[0]
        if q is None or not q.per_tensor or self.dtype(x) not in INT_TYPES:
            return None
        return x, q

    def const_weight(self, expr):
        """``(int8/int32 numpy array, QParams)`` for a dequantized constant, seen through ``reshape`` /
        ``permute_dims`` before or after the dequantize; the array is in the shape ``expr`` has."""
        post = []
        e = expr
        while True:
            c = self.call(e, "reshape", "permute_dims")
            if c is None:
                break
            post.append(c)
            e = c.args[0]
        d = self.call(e, "dequantize")
        if d is None:
            return None
        q = self.qparams(d.args[1], d.args[2], d.attrs.axis)
        src = d.args[0]
        pre = []
        while isinstance(src, relax.Var) and self.call(src, "reshape", "permute_dims") is not None:
            c = self.call(src, "reshape", "permute_dims")
            pre.append(c)
            src = c.args[0]
        data = const_value(src)
        if q is None or data is None or data.dtype.name not in INT_TYPES + ("int32", "int64"):
            return None
        arr = np.asarray(data)
        for c in reversed(pre):
            arr = apply_layout(arr, c)
        axis = q.axis
        for c in reversed(post):
            if op_name(c) == "relax.permute_dims":
                axes = [int(a) for a in c.attrs.axes]
                axis = axes.index(axis)
            arr = apply_layout(arr, c)
            if op_name(c) == "relax.reshape" and not q.per_tensor:
                axis = axis_after_reshape(q.scale.size, arr.shape)
        return arr, QParams(q.scale, q.zero_point, axis)


    def bias(self, expr):
        """``(integer numpy array, QParams or None)`` of a constant bias: a dequantized constant
        (:meth:`const_weight`), or the int64 bias of a 16x8 operator, which the frontend imports as
        ``float(bias) * scale`` (Relax's ``dequantize`` takes no int64)."""
        w = self.const_weight(expr)
        if w is not None:
            return w
        mul = self.call(expr, "multiply")
        cast = self.call(mul.args[0], "astype") if mul is not None else None
        data = const_value(cast.args[0]) if cast is not None else None
        if data is None or data.dtype != np.int64 or const_value(mul.args[1]) is None:
            return None
        return np.asarray(data), None


def apply_layout(arr, call):
    """``arr`` reshaped or transposed as the ``reshape`` / ``permute_dims`` call ``call`` does."""
    if op_name(call) == "relax.permute_dims":
        axes = call.attrs.axes
        return np.transpose(arr, [int(a) for a in axes]) if axes is not None else arr.T
    shape = static_shape(call.ty)
    return arr.reshape(shape)


def axis_after_reshape(channels: int, shape) -> int:
    """The axis of a reshaped per-channel weight that carries the ``channels`` scales (last match)."""
    for k in reversed(range(len(shape))):
        if shape[k] == channels:
            return k
    return len(shape) - 1
