"""ONNX integer operators of dynamically quantized models, for TVM's Relax ONNX importer.

onnxruntime's ``quantize_dynamic`` (the quantizer people run on a float ONNX file to shrink it) writes each
convolution as ``DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul`` and each LSTM as onnxruntime's
contrib operator ``com.microsoft.DynamicQuantizeLSTM``. TVM 0.27 has ``DynamicQuantizeLinear`` and
``MatMulInteger`` but neither of these; :func:`integer_converters` gives them in the form the importer's
operator table takes:

* ``ConvInteger`` (ONNX opset 10): ``conv(x - x_zero_point, w - w_zero_point)`` accumulated in int32, for
  1-, 2- and 3-D convolutions with every attribute of ``Conv`` (``auto_pad``, ``pads``, ``strides``,
  ``dilations``, ``group``); the weight zero point per tensor or per output channel. The operands are
  widened to int32 with their zero points subtracted (so padding adds zeros, the real value 0, as the
  specification and onnxruntime pad with the zero point) and convolved with TVM's ``Conv`` converter.
  Integer arithmetic: the result is exact, equal to onnxruntime's.

``DynamicQuantizeLSTM`` is converted with the other recurrent operators (:mod:`.onnx_recurrent`).

Example
-------
>>> sorted(integer_converters())
['ConvInteger']
"""

from __future__ import annotations

import numpy as np

__all__ = ["integer_converters", "INTEGER_OPS"]

#: the ONNX operators this module converts
INTEGER_OPS = ("ConvInteger",)


def _widened(x, zero_point, channel_axis: int | None = None):
    """``int32(x) - zero_point`` (a Relax expression; folded to a constant for constant operands). A
    per-channel ``zero_point`` (1-D) is broadcast along ``channel_axis``."""
    import tvm
    from tvm import relax

    ndim = len(x.ty.shape)
    if isinstance(x, tvm.ir.Constant) and (zero_point is None or isinstance(zero_point, tvm.ir.Constant)):
        v = x.value.numpy().astype(np.int32)
        if zero_point is not None:
            zp = zero_point.value.numpy().astype(np.int32)
            if zp.ndim == 1 and zp.size > 1:
                zp = zp.reshape([-1 if a == channel_axis else 1 for a in range(ndim)])
            v = v - zp
        return relax.const(v, "int32")
    out = relax.op.astype(x, "int32")
    if zero_point is None:
        return out
    zp = relax.op.astype(zero_point, "int32")
    if len(zero_point.ty.shape) == 1:
        n = zero_point.ty.shape[0]
        if not (hasattr(n, "value") and int(n.value) == 1):
            if channel_axis is None:
                raise ValueError("a per-channel zero point of the activation is not supported")
            zp = relax.op.reshape(zp, [-1 if a == channel_axis else 1 for a in range(ndim)])
    return relax.op.subtract(out, zp)


def _conv_integer(bb, inputs, attr, params):
    from tvm.relax.frontend.onnx.onnx_frontend import Conv

    x, w = inputs[0], inputs[1]
    x_zp = inputs[2] if len(inputs) > 2 else None
    w_zp = inputs[3] if len(inputs) > 3 else None
    for name, v in (("x", x), ("w", w)):
        if v.ty.dtype not in ("int8", "uint8"):
            raise ValueError(f"ConvInteger: input {name} must be int8 or uint8, got {v.ty.dtype}")
    if "kernel_shape" not in attr:
        attr["kernel_shape"] = w.ty.shape.values[2:]
    xi = bb.normalize(_widened(x, x_zp))
    wi = bb.normalize(_widened(w, w_zp, channel_axis=0))
    return Conv._impl_v11(bb, [xi, wi, None], attr, params)


def integer_converters() -> dict:
    """``{ONNX operator: converter class}`` for TVM's Relax ONNX importer."""
    from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

    def make(name, fn, version):
        def impl(cls, bb, inputs, attr, params):
            return fn(bb, inputs, attr, params)

        return type(name, (OnnxOpConverter,), {f"_impl_v{version}": classmethod(impl)})

    return {"ConvInteger": make("ConvInteger", _conv_integer, 10)}
