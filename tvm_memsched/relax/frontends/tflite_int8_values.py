"""TFLite operators TFLite Micro computes on the stored int8 values, imported as such.

TVM's converter refuses most of these operators when they are quantized, or
imports them in dequantize/quantize form where TFLite computes on the stored
values. :class:`Int8ValueOps` is a mixin of
:class:`~.tflite_converter.OperatorConverter` that imports:

* the operators of :data:`VALUE_OPS` (MAXIMUM, MINIMUM, REDUCE_MAX, REDUCE_MIN,
  ARG_MAX, ARG_MIN, REVERSE_V2, MIRROR_PAD, FILL, SELECT, SELECT_V2) on the
  integer values, once the quantization TFLite requires equal is found equal;
* MIRROR_PAD in SYMMETRIC mode (TVM refuses it) as TOPI's mirror pad;
* int8 RELU6 as TFLite Micro's clamp of the stored values;
* int8 L2_NORMALIZATION, ELU and CUMSUM in the dequantize/quantize form the
  integer lowering (:mod:`..int8.lower`) recognises and replaces by TFLite
  Micro's integer kernels.

Example
-------
>>> VALUE_OPS["SELECT_V2"]
(1, 2)
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ..int8.params import act_range

__all__ = ["Int8ValueOps", "VALUE_OPS"]

#: int8 operators TFLite Micro computes on the stored int8 values, the quantization aside (TFLite requires
#: it equal on these inputs, by index, and the outputs): imported on the int8 values
VALUE_OPS = {"MAXIMUM": (0, 1), "MINIMUM": (0, 1), "REDUCE_MAX": (0,), "REDUCE_MIN": (0,), "ARG_MAX": (0,),
             "ARG_MIN": (0,), "REVERSE_V2": (0,), "MIRROR_PAD": (0,), "FILL": (1,), "SELECT": (1, 2),
             "SELECT_V2": (1, 2)}
#: of those, the ones TVM imports in dequantize/quantize form: kept so where the quantization differs
#: (a float island the integer lowering reports)
_REQUANTIZING = frozenset({"MAXIMUM", "MINIMUM", "REDUCE_MAX", "REDUCE_MIN"})


class Int8ValueOps:
    """Converter methods for the int8 operators computed on the stored values (mixed into
    :class:`~.tflite_converter.OperatorConverter`, before TVM's converter)."""

    def _on_int8_values(self, name: str, data: tuple, convert):
        """``convert`` of an operator of :data:`VALUE_OPS`; when it is quantized, on the int8 values (TVM's
        converter called with the quantization of its tensors hidden), once their quantization is found
        equal. Where it differs: TVM's dequantize/quantize form for MAXIMUM, MINIMUM, REDUCE_MAX and
        REDUCE_MIN (left float by the integer lowering, which reports it), else refused by name."""
        def dispatch(op):
            ins, outs = self.get_input_tensors(op), self.get_output_tensors(op)
            quantized = [t for t in [ins[i] for i in data if i < len(ins)] + outs if t.qnn_params]
            if not quantized:
                return convert(op=op)
            differ = [t for t in quantized[1:] if not _same_qnn(quantized[0], t)]
            if differ:
                if name in _REQUANTIZING:
                    return convert(op=op)
                raise ValueError(f"quantized {name} with different quantization of tensors '{_name(differ[0])}' "
                                 f"and '{_name(quantized[0])}'; TFLite requires them equal")
            tensors_in, tensors_out = self.get_input_tensors, self.get_output_tensors

            def hidden(get):
                def tensors(o):
                    found = get(o)
                    for t in found:
                        t.qnn_params = None
                    return found
                return tensors

            self.get_input_tensors, self.get_output_tensors = hidden(tensors_in), hidden(tensors_out)
            try:
                out = convert(op=op)
            finally:
                del self.get_input_tensors, self.get_output_tensors
            declared = self.get_tensor_type_str(outs[0].tensor.Type()) if len(outs) == 1 else None
            ty = self.bb.normalize(out).ty if isinstance(out, relax.Expr) else None
            if declared and isinstance(ty, relax.TensorType) and str(ty.dtype) != declared:
                out = relax.op.astype(out, declared)     # ARG_MAX / ARG_MIN: the file's int32, not TVM's int64
            return out

        return dispatch

    def convert_mirror_pad(self, op):
        """MIRROR_PAD; SYMMETRIC mode (the edge repeated), which TVM's converter refuses, as TOPI's mirror pad."""
        from tflite.MirrorPadOptions import MirrorPadOptions
        from tvm import topi

        opts = MirrorPadOptions()
        opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        if opts.Mode() == 0:                      # REFLECT
            return super().convert_mirror_pad(op)
        x_t, pad_t = self.get_input_tensors(op)
        pads = np.asarray(self.get_tensor_value(pad_t)).reshape(-1, 2)
        shape = [int(d) for d in self.get_tensor_shape(x_t)]
        if pads.shape[0] != len(shape) or np.any(pads < 0) or np.any(pads > np.array(shape)[:, None]):
            raise tvm.error.OpNotImplemented(f"MIRROR_PAD of shape {shape} with paddings {pads.tolist()}: each at most "
                                             "the axis' length (SYMMETRIC)")
        return self.bb.call_te(topi.nn.mirror_pad, self.get_tensor_expr(x_t), [int(p) for p in pads[:, 0]],
                               [int(p) for p in pads[:, 1]], "SYMMETRIC", primfunc_name_hint="mirror_pad")

    def convert_relu6(self, op):
        """RELU6; int8 as TFLite Micro computes it: the stored values clamped to those of 0 and 6 in the
        *input's* quantization (``Relu6Quantized``; the output's quantization is not read)."""
        (x_t,) = self.get_input_tensors(op)
        if x_t.qnn_params is None or self.get_tensor_type_str(x_t.tensor.Type()) != "int8":
            return super().convert_relu6(op)
        scale = float(x_t.qnn_params["scale"].value.numpy())
        zp = int(x_t.qnn_params["zero_point"].value.numpy())
        six = min(127, max(-128, act_range("relu6", scale, zp)[1]))
        return relax.op.clip(self.get_tensor_expr(x_t), min=zp, max=six)

    def convert_l2_normalization(self, op):
        """L2_NORMALIZATION; int8 in dequantize/quantize form (``x / max(sqrt(sum(x * x)), 1e-6)`` over the
        last axis, TFLite's float kernel), which the integer lowering replaces by TFLite's integer kernel.
        Its output must have scale 1/128 and zero point 0 (the integer kernel's, which LiteRT requires)."""
        from tflite.L2NormOptions import L2NormOptions

        (x_t,), (y_t,) = self.get_input_tensors(op), self.get_output_tensors(op)
        if x_t.qnn_params is None:
            return super().convert_l2_normalization(op)
        opts = L2NormOptions()
        opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        if opts.FusedActivationFunction() != 0:
            raise tvm.error.OpNotImplemented("quantized L2_NORMALIZATION with a fused activation (TFLite has none)")
        scale = np.float32(y_t.qnn_params["scale"].value.numpy()) if y_t.qnn_params else None
        zp = int(y_t.qnn_params["zero_point"].value.numpy()) if y_t.qnn_params else None
        if scale != np.float32(1 / 128) or zp != 0:
            raise tvm.error.OpNotImplemented(f"quantized L2_NORMALIZATION output '{_name(y_t)}' with scale {scale} "
                                             f"and zero point {zp}; TFLite's int8 kernel writes scale 1/128, zero "
                                             "point 0")
        x = self.dequantize(self.get_tensor_expr(x_t), x_t)
        norm = relax.op.sqrt(relax.op.sum(relax.op.multiply(x, x), axis=[-1], keepdims=True))
        out = relax.op.divide(x, relax.op.maximum(norm, relax.const(1e-6, "float32")))
        return self.quantize(out, y_t)

    def convert_elu(self, op):
        """ELU; int8 in dequantize/quantize form (``x < 0 ? exp(x) - 1 : x``, TFLite's transform), which the
        integer lowering replaces by TFLite Micro's table."""
        (x_t,), (y_t,) = self.get_input_tensors(op), self.get_output_tensors(op)
        if x_t.qnn_params is None:
            return super().convert_elu(op)
        x = self.dequantize(self.get_tensor_expr(x_t), x_t)
        zero, one = relax.const(0.0, "float32"), relax.const(1.0, "float32")
        out = relax.op.where(relax.op.less(x, zero), relax.op.subtract(relax.op.exp(x), one), x)
        return self.quantize(out, y_t)

    def convert_cumsum(self, op):
        """CUMSUM; int8 in dequantize/quantize form (``reverse`` as flips around the sum), which the integer
        lowering replaces by TFLite Micro's integer kernel. The sum is written without a ``dtype`` (TVM's
        float converter always gives one): a float CUMSUM a file computes between its own DEQUANTIZE and
        QUANTIZE looks the same otherwise, and must stay float, as TFLite Micro runs it."""
        from tflite.CumsumOptions import CumsumOptions

        (x_t, axis_t), (y_t,) = self.get_input_tensors(op), self.get_output_tensors(op)
        if x_t.qnn_params is None:
            return super().convert_cumsum(op)
        if self.has_expr(axis_t.tensor_idx):
            raise tvm.error.OpNotImplemented("quantized CUMSUM with an axis computed at run time")
        rank = len(self.get_tensor_shape(x_t))
        axis = int(np.asarray(self.get_tensor_value(axis_t)).reshape(-1)[0]) % rank
        opts = CumsumOptions()
        opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        x = self.dequantize(self.get_tensor_expr(x_t), x_t)
        if opts.Reverse():
            x = relax.op.flip(x, axis)
        out = relax.op.cumsum(x, axis, None, bool(opts.Exclusive()))    # no dtype: the lowering's mark
        if opts.Reverse():
            out = relax.op.flip(out, axis)
        return self.quantize(out, y_t)


def _name(t) -> str:
    n = t.tensor.Name()
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)


def _same_qnn(a, b) -> bool:
    """True if the tensor wrappers ``a`` and ``b`` have exactly the same scale and zero point."""
    qa, qb = a.qnn_params, b.qnn_params
    return (np.array_equal(np.asarray(qa["scale"].value.numpy(), np.float32),
                           np.asarray(qb["scale"].value.numpy(), np.float32))
            and np.array_equal(np.asarray(qa["zero_point"].value.numpy()).reshape(-1),
                               np.asarray(qb["zero_point"].value.numpy()).reshape(-1)))
