"""TVM's TFLite operator converter, extended for int8 models as TFLite runs them.

:class:`OperatorConverter` subclasses TVM 0.27's converter
(``tvm.relax.frontend.tflite.tflite_frontend.OperatorConverter``) and is what
:func:`tvm_memsched.relax.frontend.from_tflite_bytes` imports with:

* **data-movement operators on int8 tensors** that TVM refuses when quantized
  (PAD, STRIDED_SLICE, SLICE, SPLIT, SPLIT_V, SQUEEZE, EXPAND_DIMS, TRANSPOSE,
  GATHER, PACK, UNPACK, DEPTH_TO_SPACE, SPACE_TO_DEPTH, RESIZE_NEAREST_NEIGHBOR,
  TILE, BROADCAST_TO): imported on the int8 values, which is what TFLite does,
  after checking that every quantized input and output has the same scale and
  zero point (TFLite requires it; a model that differs is refused by name);
* **PRELU** with its slope at the stored shape (TVM broadcasts it to the whole
  activation) and, when quantized, in the dequantize/quantize form the
  integer lowering recognises;
* **fused activations of quantized outputs** clamped exactly as TFLite's
  ``CalculateActivationRangeQuantized`` computes the bounds (float division,
  rounding half away from zero; TVM uses Python's round-half-to-even).

Example
-------
>>> "STRIDED_SLICE" in OperatorConverter._SUPPORTED_QUANTIZED_OPS
True
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter as _TVMConverter

from .int8.params import act_range

__all__ = ["OperatorConverter", "MOVE_OPS"]

#: operators that only move int8 values: TFLite requires equal quantization on their inputs and outputs
MOVE_OPS = frozenset({"PAD", "PADV2", "STRIDED_SLICE", "SLICE", "SPLIT", "SPLIT_V", "SQUEEZE", "EXPAND_DIMS",
                      "TRANSPOSE", "GATHER", "PACK", "UNPACK", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
                      "RESIZE_NEAREST_NEIGHBOR", "TILE", "BROADCAST_TO", "BATCH_TO_SPACE_ND",
                      "SPACE_TO_BATCH_ND"})

_ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}


class OperatorConverter(_TVMConverter):
    """TVM's TFLite converter with int8 data movement, compact PRELU and exact activation ranges."""

    _SUPPORTED_QUANTIZED_OPS = frozenset(_TVMConverter._SUPPORTED_QUANTIZED_OPS | MOVE_OPS | {"PRELU"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in MOVE_OPS:
            if name in self.convert_map:
                self.convert_map[name] = self._same_quantization(name, self.convert_map[name])
        self.convert_map["PRELU"] = self.convert_prelu

    def _same_quantization(self, name: str, convert):
        def checked(op):
            tensors = [t for t in self.get_input_tensors(op)[:1] + self.get_output_tensors(op) if t.qnn_params]
            for t in tensors[1:]:
                if not self.has_same_qnn_params(tensors[0], t):
                    raise ValueError(f"quantized {name} with different input and output quantization "
                                     f"(tensor '{_name(t)}' vs '{_name(tensors[0])}'); TFLite requires them equal")
            return convert(op)

        return checked

    def convert_qnn_fused_activation_function(self, expr, fused_activation_fn, scale, zero_point, dtype):
        """Clamp of a fused activation on a quantized output, with TFLite's bounds."""
        kind = _ACTIVATIONS.get(int(fused_activation_fn))
        if kind is None:
            return super().convert_qnn_fused_activation_function(expr, fused_activation_fn, scale, zero_point,
                                                                 dtype)
        if kind == "none":
            return expr
        qmin, qmax = (-128, 127) if dtype == "int8" else (0, 255) if dtype == "uint8" else (None, None)
        if qmin is None:
            return super().convert_qnn_fused_activation_function(expr, fused_activation_fn, scale, zero_point,
                                                                 dtype)
        lo, hi = act_range(kind, scale, int(zero_point), qmin, qmax)
        return relax.op.clip(expr, min=float(lo), max=float(hi))

    def convert_prelu(self, op):
        """PRELU with the slope at its stored shape (``nn.prelu`` over the last axis when it is per channel)."""
        input_tensor, alpha_tensor = self.get_input_tensors(op)
        output_tensor = self.get_output_tensors(op)[0]
        shape = [int(d) for d in self.get_tensor_shape(input_tensor)]
        alpha_shape = [int(d) for d in self.get_tensor_shape(alpha_tensor)]
        x = self.get_tensor_expr(input_tensor)
        alpha = self.get_tensor_expr(alpha_tensor)
        quantized = input_tensor.qnn_params is not None
        if quantized:
            x = self.dequantize(x, input_tensor)
        per_channel = int(np.prod(alpha_shape)) == shape[-1] and all(d == 1 for d in alpha_shape[:-1])
        if per_channel:
            alpha = relax.op.reshape(alpha, [shape[-1]])
            if quantized:
                alpha = self.dequantize(alpha, alpha_tensor)
            out = relax.op.nn.prelu(x, alpha, axis=len(shape) - 1)
        else:
            if quantized:
                alpha = self.dequantize(alpha, alpha_tensor)
            zero = relax.const(0.0, "float32")
            out = relax.op.where(relax.op.greater_equal(x, zero), x, relax.op.multiply(x, alpha))
        if quantized:
            out = self.quantize(out, output_tensor)
        return out


def _name(t) -> str:
    n = t.tensor.Name()
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)
