"""Recognise the TFLite operators only the 16x8 lowering has integer kernels for, in QDQ form.

:func:`~.patterns.match_binding` finds the operators both activation types
share (convolutions, ADD, SOFTMAX, LOGISTIC, ...); this module adds, for an
int16 output, the element-wise and reduction operators whose int16 kernels
:mod:`.lower16` emits: ABS, EXP, LOG, RSQRT, SQUARED_DIFFERENCE, MAXIMUM,
MINIMUM, SUM, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD and RESIZE_BILINEAR, each as
TVM's importer writes it (``dequantize`` of the int16 inputs, the float
operator, ``quantize``). int8 models are not affected: their groups of these
operators stay float islands as before.

Example
-------
>>> sorted(UNARY.values())
['ABS', 'EXP', 'LOG', 'RSQRT']
"""

from __future__ import annotations

from tvm import relax

from ..ir import op_name

__all__ = ["match_int16", "UNARY", "REDUCTIONS"]

#: one-input operators: Relax operator -> TFLite operator
UNARY = {"relax.abs": "ABS", "relax.exp": "EXP", "relax.log": "LOG", "relax.rsqrt": "RSQRT"}
#: reductions: Relax operator -> TFLite operator
REDUCTIONS = {"relax.sum": "SUM", "relax.max": "REDUCE_MAX", "relax.min": "REDUCE_MIN", "relax.prod": "REDUCE_PROD"}
_RESIZE_MODES = {"asymmetric": (False, False), "align_corners": (True, False), "half_pixel": (False, True)}


def match_int16(view, body):
    """``(TFLite operator, int16 inputs, their QParams, attributes)`` of the operator whose float result
    ``body`` is (``view``: the function's :class:`~.patterns.FunctionView`), or None."""
    c = body if not isinstance(body, relax.Var) else view.value.get(body)
    if not isinstance(c, relax.Call):
        return None
    name = op_name(c)
    if name in UNARY:
        d = view.dequantized(c.args[0])
        return None if d is None else (UNARY[name], [d[0]], [d[1]], {})
    if name in ("relax.maximum", "relax.minimum"):
        da, db = view.dequantized(c.args[0]), view.dequantized(c.args[1])
        if da is None or db is None:
            return None
        op = "MAXIMUM" if name == "relax.maximum" else "MINIMUM"
        return op, [da[0], db[0]], [da[1], db[1]], {}
    if name == "relax.multiply" and c.args[0].same_as(c.args[1]):
        sub = view.call(c.args[0], "subtract")
        if sub is None:
            return None
        da, db = view.dequantized(sub.args[0]), view.dequantized(sub.args[1])
        if da is None or db is None:
            return None
        return "SQUARED_DIFFERENCE", [da[0], db[0]], [da[1], db[1]], {}
    if name in REDUCTIONS:
        d = view.dequantized(c.args[0])
        shape = view.shape(d[0]) if d is not None else None
        if shape is None:
            return None
        axes = [int(a) % len(shape) for a in c.attrs.axis] if c.attrs.axis is not None else list(range(len(shape)))
        return REDUCTIONS[name], [d[0]], [d[1]], {"axes": sorted(set(axes)), "keepdims": bool(c.attrs.keepdims)}
    if name == "relax.image.resize2d":
        a = c.attrs
        d = view.dequantized(c.args[0])
        mode = _RESIZE_MODES.get(str(a.coordinate_transformation_mode))
        if d is None or mode is None or str(a.method) != "linear" or str(a.layout) != "NHWC":
            return None
        return "RESIZE_BILINEAR", [d[0]], [d[1]], {"align_corners": mode[0], "half_pixel_centers": mode[1]}
    return None
