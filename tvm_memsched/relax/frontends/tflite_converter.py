"""TVM's TFLite operator converter, extended for int8 models as TFLite runs them.

:class:`OperatorConverter` subclasses TVM 0.27's converter
(``tvm.relax.frontend.tflite.tflite_frontend.OperatorConverter``) and is what
:func:`tvm_memsched.relax.frontends.frontend.from_tflite_bytes` imports with:

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
  rounding half away from zero; TVM uses Python's round-half-to-even);
* **resource variables in subgraph 0** (streaming models) and variable
  tensors, carried from one invocation to the next (:mod:`.tflite_variables`);
  int8 resource values pass as int8, like the other data-movement operators;
* **dynamic-range quantized ("hybrid") CONV_2D, DEPTHWISE_CONV_2D and
  FULLY_CONNECTED** (float input, int8 weights), which TVM refuses: the input
  quantized on the fly as LiteRT does it (:mod:`.tflite_hybrid`);
* **BATCH_MATMUL** in every kind (float32, int8, int16, dynamic-range, constant operands), which TVM
  refuses when quantized and fails on with a constant operand (:mod:`.tflite_batch_matmul`);
* **constant buffers stored after the flatbuffer** (``Buffer.offset`` /
  ``Buffer.size``, written by recent converters): read from the file bytes;
* **16x8 models** (int16 activations): the int64 bias of CONV_2D,
  DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV (Relax's ``dequantize``
  takes no int64) as ``float(bias) * scale``, which the integer lowering reads
  back; a TRANSPOSE_CONV's int16 bias widened to int64 as TFLite Micro does.

Example
-------
>>> "STRIDED_SLICE" in OperatorConverter._SUPPORTED_QUANTIZED_OPS
True
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax
from tvm.relax.frontend.tflite.tflite_frontend import ExprTable
from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter as _TVMConverter

from ..int8.params import act_range
from .tflite_hybrid import HYBRID_OPS, hybrid_conv2d, hybrid_dense, hybrid_transpose_conv
from .tflite_int8_values import VALUE_OPS, Int8ValueOps
from .tflite_movement import MovementOps
from .tflite_variables import VariableStateOps
from .tflite_variables import tensor_name as _name

__all__ = ["OperatorConverter", "MOVE_OPS", "RESOURCE_OPS", "RECURRENT_OPS", "VALUE_OPS"]

#: operators that only move int8 values: TFLite requires equal quantization on their inputs and outputs
MOVE_OPS = frozenset({"PAD", "PADV2", "STRIDED_SLICE", "SLICE", "SPLIT", "SPLIT_V", "SQUEEZE", "EXPAND_DIMS",
                      "TRANSPOSE", "GATHER", "PACK", "UNPACK", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH",
                      "RESIZE_NEAREST_NEIGHBOR", "TILE", "BROADCAST_TO", "BATCH_TO_SPACE_ND",
                      "SPACE_TO_BATCH_ND", "GATHER_ND"})

#: recurrent operators imported in every kind (float, int8, hybrid) by modules of their own
RECURRENT_OPS = frozenset({"UNIDIRECTIONAL_SEQUENCE_LSTM", "SVDF"})

#: resource-variable operators: int8 values pass through them unchanged
RESOURCE_OPS = frozenset({"READ_VARIABLE", "ASSIGN_VARIABLE", "VAR_HANDLE", "CALL_ONCE"})

_ACTIVATIONS = {0: "none", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}
#: TFLite ``TensorType`` codes
_TFL_INT32, _TFL_INT64, _TFL_INT16 = 2, 4, 7
#: float bounds of TFLite's fused activations
_FLOAT_RANGES = {0: (None, None), 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


class OperatorConverter(Int8ValueOps, MovementOps, VariableStateOps, _TVMConverter):
    """TVM's TFLite converter with int8 data movement, compact PRELU and exact activation ranges."""

    _SUPPORTED_QUANTIZED_OPS = frozenset(_TVMConverter._SUPPORTED_QUANTIZED_OPS | MOVE_OPS | RESOURCE_OPS
                                         | {"PRELU", "BATCH_MATMUL"} | RECURRENT_OPS | set(VALUE_OPS)
                                         | {"L2_NORMALIZATION", "ELU", "CUMSUM"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in MOVE_OPS:
            if name in self.convert_map:
                self.convert_map[name] = self._same_quantization(name, self.convert_map[name])
        self.convert_map["PRELU"] = self.convert_prelu
        for name, data in VALUE_OPS.items():
            if name in self.convert_map:
                self.convert_map[name] = self._on_int8_values(name, data, self.convert_map[name])
        self.convert_map["RELU6"] = self.convert_relu6
        self.convert_map["L2_NORMALIZATION"] = self.convert_l2_normalization
        self.convert_map["ELU"] = self.convert_elu
        self.convert_map["CUMSUM"] = self.convert_cumsum
        for name in HYBRID_OPS:
            self.convert_map[name] = self._or_hybrid(name, self.convert_map[name])
        for name in ("CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"):
            self.convert_map[name] = self._checked_16x8(name, self.convert_map[name])
        self.convert_map["READ_VARIABLE"] = self.convert_read_state
        self.convert_map["ASSIGN_VARIABLE"] = self.convert_assign_state
        self.convert_map["UNIDIRECTIONAL_SEQUENCE_LSTM"] = self.convert_sequence_lstm
        self.convert_map["SVDF"] = self.convert_svdf
        for name in ("SLICE", "STRIDED_SLICE"):
            if name in self.convert_map:
                self.convert_map[name] = self._constant_bounds(name, self.convert_map[name])
        self.convert_map["BATCH_MATMUL"] = self.convert_batch_matmul
        for name, convert in list(self.convert_map.items()):
            self.convert_map[name] = self._folded_or(self._declared_shape(name, convert))
        self.conversion_state.setdefault("tvm_memsched_states", {})
        self.folded = {}
        model = self.model
        if self.subgraph is not None and model.SubgraphsLength() and \
                self.subgraph._tab.Pos == model.Subgraphs(0)._tab.Pos:
            from .tflite_fold import shape_values

            self.folded = shape_values(bytes(model._tab.Bytes), model)

    # ------------------------------------------------------------ shape arithmetic folded at import
    def _folded_or(self, convert):
        """``convert``, or the folded values of an operator whose outputs are all shape-only
        (:mod:`.tflite_fold`)."""
        def folded(op):
            outs = [int(t) for t in op.OutputsAsNumpy()] if op.OutputsLength() else []
            if outs and all(t in self.folded for t in outs):
                consts = [relax.const(self.folded[t]) for t in outs]
                return consts[0] if len(consts) == 1 else relax.Tuple(consts)
            return convert(op=op)

        return folded

    def get_expr(self, input_tensor_idx):
        """TVM's, with a constant operand where TVM's converter expects an activation (a SLICE of a constant
        tensor list an unrolled loop starts from: :mod:`.tflite_unroll`) made a constant."""
        if not self.has_expr(input_tensor_idx) and input_tensor_idx not in self.folded:
            tensor = self.subgraph.Tensors(input_tensor_idx)
            buffer = self.model.Buffers(tensor.Buffer())
            if buffer is not None and buffer.DataLength():
                from tvm.relax.frontend.tflite.tflite_frontend import TensorWrapper

                return self.get_tensor_expr(TensorWrapper(input_tensor_idx, tensor, buffer))
        return super().get_expr(input_tensor_idx)

    def get_tensor_expr(self, tensor, is_sparse=False):
        """TVM's, with folded shape arithmetic as constants."""
        if tensor.tensor_idx in self.folded and not self.has_expr(tensor.tensor_idx):
            return relax.const(self.folded[tensor.tensor_idx])
        return super().get_tensor_expr(tensor, is_sparse)

    def get_tensors(self, tensors_idx_list):
        """TVM's tensor wrappers, with buffers stored after the flatbuffer read from the file bytes."""
        if isinstance(tensors_idx_list, (int, np.integer)):
            tensors_idx_list = []         # flatbuffers reads an absent vector (no inputs: VAR_HANDLE) as 0
        out = super().get_tensors(tensors_idx_list)
        for tw in out:
            b = tw.buffer
            if b and not b.DataLength() and b.Offset() > 1:
                tw.buffer = _OffsetBuffer(self.model._tab.Bytes, int(b.Offset()), int(b.Size()))
            elif b and not b.DataLength() and tw.tensor.ShapeLength() and 0 in list(tw.tensor.ShapeAsNumpy()):
                tw.buffer = _OffsetBuffer(b"", 0, 0)          # a constant of no elements (RESHAPE to a scalar)
        return out

    # ------------------------------------------------------------ resource variables
    def check_unsupported_ops(self):
        """TVM's check, with ``ASSIGN_VARIABLE`` judged by its value: its first input, the resource handle, is
        never quantized, which TVM's check would take for dynamic-range quantization."""
        tvm_inputs = self.get_input_tensors

        def inputs(op):
            tensors = tvm_inputs(op)
            if self.is_hybrid(op, tensors) or self._hybrid_batch_matmul(op, tensors):
                return tensors[:1]        # imported here: not TVM's refusal of dynamic-range quantization
            if self.get_op_code_str(op) in RECURRENT_OPS:    # every kind checked by its own importer
                return tensors[:1]
            return tensors[1:] if self.get_op_code_str(op) == "ASSIGN_VARIABLE" else tensors

        self.get_input_tensors = inputs
        try:
            super().check_unsupported_ops()
        finally:
            del self.get_input_tensors

    # ------------------------------------------------------------ dynamic-range quantization
    def is_hybrid(self, op, tensors=None) -> bool:
        """True for a CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED with a float input and int8 weights
        (``tensors``: its input tensors, when known)."""
        if self.get_op_code_str(op) not in HYBRID_OPS:
            return False
        tensors = self.get_input_tensors(op) if tensors is None else tensors
        if self.get_op_code_str(op) == "TRANSPOSE_CONV":          # (output shape, weights, input[, bias])
            tensors = tensors[2:3] + tensors[1:2] if len(tensors) >= 3 else []
        if len(tensors) < 2:
            return False
        x, w = tensors[:2]
        return self.get_tensor_type_str(x.tensor.Type()) == "float32" and x.qnn_params is None and \
            self.get_tensor_type_str(w.tensor.Type()) in ("int8", "uint8") and w.qnn_params is not None

    def _hybrid_batch_matmul(self, op, tensors) -> bool:
        """True for a BATCH_MATMUL of a float input and an int8 operand (imported by :mod:`.tflite_batch_matmul`,
        which refuses what LiteRT would not run)."""
        return self.get_op_code_str(op) == "BATCH_MATMUL" and len(tensors) == 2 and \
            self.get_tensor_type_str(tensors[0].tensor.Type()) == "float32" and tensors[0].qnn_params is None \
            and self.get_tensor_type_str(tensors[1].tensor.Type()) == "int8"

    def _or_hybrid(self, name: str, convert):
        def dispatch(op):
            return self.convert_hybrid(op, name) if self.is_hybrid(op) else convert(op=op)

        return dispatch

    def convert_hybrid(self, op, name: str):
        """A dynamic-range quantized operator as LiteRT computes it (:mod:`.tflite_hybrid`)."""
        from tflite.Conv2DOptions import Conv2DOptions
        from tflite.DepthwiseConv2DOptions import DepthwiseConv2DOptions
        from tflite.FullyConnectedOptions import FullyConnectedOptions
        from tflite.Padding import Padding

        tensors = self.get_input_tensors(op)
        shape_t = None
        if name == "TRANSPOSE_CONV":                                # (output shape, weights, input[, bias])
            shape_t, tensors = tensors[0], [tensors[2], tensors[1]] + tensors[3:]
        x_t, w_t = tensors[:2]
        b_t = tensors[2] if len(tensors) > 2 and tensors[2].tensor_idx >= 0 else None
        (out_t,) = self.get_output_tensors(op)
        if self.get_tensor_type_str(w_t.tensor.Type()) != "int8":
            raise tvm.error.OpNotImplemented(f"hybrid {name} with uint8 weights ('{_name(w_t)}'): only int8 "
                                             "weights (TFLite's dynamic-range quantization) are supported")
        if self.has_expr(w_t.tensor_idx) or (b_t is not None and self.has_expr(b_t.tensor_idx)):
            raise tvm.error.OpNotImplemented(f"hybrid {name}: its weights and bias must be constants")
        quant = w_t.tensor.Quantization()
        scale = np.asarray(quant.ScaleAsNumpy() if quant.ScaleLength() else [], np.float32).reshape(-1)
        zp = quant.ZeroPointAsNumpy() if quant.ZeroPointLength() else np.zeros(1)
        if np.any(zp != 0):
            raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(w_t)}' have a nonzero zero point")
        w = self.get_tensor_value(w_t).astype(np.int8)
        bias = None if b_t is None else self.get_tensor_value(b_t).astype(np.float32).reshape(-1)
        x = self.get_tensor_expr(x_t)
        x_shape = [int(d) for d in self.get_tensor_shape(x_t)]
        if not x_shape or min(x_shape) < 1:
            raise tvm.error.OpNotImplemented(f"hybrid {name}: input '{_name(x_t)}' has shape {x_shape}; "
                                             "only static, non-empty shapes are supported")
        opt = op.BuiltinOptions()
        if name == "FULLY_CONNECTED":
            o = FullyConnectedOptions()
            o.Init(opt.Bytes, opt.Pos)
            lo, hi = self._float_range(o.FusedActivationFunction(), name)
            if w.ndim != 2 or not w.shape[1] or int(np.prod(x_shape)) % w.shape[1]:
                raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(w_t)}' of shape {list(w.shape)} "
                                                 f"do not fit input {x_shape}")
            _check_hybrid_weights(name, w_t, w, scale, quant, bias, w.shape[0], 0)
            rows = [int(np.prod(x_shape)) // w.shape[1], w.shape[1]]
            # no reshape where the shape stays (a reshape of the function's result would stay a copy kernel)
            y = hybrid_dense(self.bb, x if list(x_shape) == rows else relax.op.reshape(x, rows), rows, w, scale,
                             bias, lo, hi, asymmetric=bool(o.AsymmetricQuantizeInputs()))
            out_shape = [int(d) for d in self.get_tensor_shape(out_t)]
            return y if out_shape == [rows[0], w.shape[0]] else relax.op.reshape(y, out_shape)
        if name == "TRANSPOSE_CONV":
            return self._hybrid_transpose_conv(op, x, x_shape, w, w_t, scale, quant, bias, shape_t, out_t)
        depthwise = name == "DEPTHWISE_CONV_2D"
        o = DepthwiseConv2DOptions() if depthwise else Conv2DOptions()
        o.Init(opt.Bytes, opt.Pos)
        strides, dilation = (o.StrideH(), o.StrideW()), (o.DilationHFactor(), o.DilationWFactor())
        c = x_shape[3] if len(x_shape) == 4 else 0
        fits = w.ndim == 4 and c > 0 and ((w.shape[0] == 1 and w.shape[3] % c == 0) if depthwise
                                            else w.shape[3] == c)
        if not fits or min(strides + dilation) < 1:
            raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(w_t)}' of shape {list(w.shape)}, "
                                             f"strides {list(strides)} and dilation {list(dilation)} do not fit "
                                             f"input {x_shape}")
        channels = w.shape[3] if depthwise else w.shape[0]
        if depthwise and c > 1 and scale.size != channels:
            raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(w_t)}' need one scale per channel "
                                             f"({channels}), have {scale.size}; LiteRT refuses a per-tensor scale")
        _check_hybrid_weights(name, w_t, w, scale, quant, bias, channels, 3 if depthwise else 0)
        lo, hi = self._float_range(o.FusedActivationFunction(), name)
        return hybrid_conv2d(self.bb, x, x_shape, w, scale, bias, depthwise=depthwise, strides=strides,
                             dilation=dilation, same=o.Padding() == Padding.SAME, act_lo=lo, act_hi=hi)

    def _hybrid_transpose_conv(self, op, x, x_shape, w, w_t, scale, quant, bias, shape_t, out_t):
        from tflite.Padding import Padding
        from tflite.TransposeConvOptions import TransposeConvOptions

        name = "TRANSPOSE_CONV"
        o = TransposeConvOptions()
        opt = op.BuiltinOptions()
        o.Init(opt.Bytes, opt.Pos)
        strides = (o.StrideH(), o.StrideW())
        out_shape = [int(d) for d in self.get_tensor_shape(out_t)]
        if self.has_expr(shape_t.tensor_idx) or [int(v) for v in np.asarray(
                self.get_tensor_value(shape_t)).reshape(-1)] != out_shape:
            raise tvm.error.OpNotImplemented(f"hybrid {name}: its output shape must be a constant equal to the "
                                             f"output tensor's {out_shape}")
        if w.ndim != 4 or len(x_shape) != 4 or w.shape[3] != x_shape[3] or len(out_shape) != 4 \
                or out_shape[3] != w.shape[0] or out_shape[0] != x_shape[0] or min(strides) < 1:
            raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(w_t)}' of shape {list(w.shape)} and "
                                             f"strides {list(strides)} do not fit input {x_shape} and output "
                                             f"{out_shape}")
        _check_hybrid_weights(name, w_t, w, scale, quant, bias, w.shape[0], 0)
        lo, hi = self._float_range(o.FusedActivationFunction(), name)
        return hybrid_transpose_conv(self.bb, x, x_shape, w, scale, bias, out_shape, strides=strides,
                                     same=o.Padding() == Padding.SAME, act_lo=lo, act_hi=hi)

    @staticmethod
    def _float_range(fn: int, name: str):
        if int(fn) not in _FLOAT_RANGES:
            raise tvm.error.OpNotImplemented(f"hybrid {name} with fused activation {int(fn)}")
        return _FLOAT_RANGES[int(fn)]

    def convert_sequence_lstm(self, op):
        """UNIDIRECTIONAL_SEQUENCE_LSTM, unrolled (:mod:`.tflite_lstm`)."""
        from .tflite_lstm import sequence_lstm

        return sequence_lstm(self, op)

    def convert_svdf(self, op):
        """SVDF, its activation state carried (:mod:`.tflite_svdf`)."""
        from .tflite_svdf import svdf

        return svdf(self, op)

    def convert_batch_matmul(self, op):
        """BATCH_MATMUL in every kind: float32, int8, int16, dynamic-range, constant operands
        (:mod:`.tflite_batch_matmul`)."""
        from .tflite_batch_matmul import batch_matmul

        return batch_matmul(self, op)

    def _same_quantization(self, name: str, convert):
        def checked(op):
            tensors = [t for t in self.get_input_tensors(op)[:1] + self.get_output_tensors(op) if t.qnn_params]
            for t in tensors[1:]:
                if not self.has_same_qnn_params(tensors[0], t):
                    raise ValueError(f"quantized {name} with different input and output quantization "
                                     f"(tensor '{_name(t)}' vs '{_name(tensors[0])}'); TFLite requires them equal")
            return convert(op=op)

        return checked

    def _constant_bounds(self, name: str, convert):
        """``convert`` refusing, by name, bounds computed at run time (a WHILE body slicing at its loop counter,
        as TensorFlow writes a Keras stateful LSTM): TVM's converter reads them as constants."""
        def checked(op):
            for tw in self.get_input_tensors(op)[1:]:
                if tw.tensor_idx >= 0 and self.has_expr(tw.tensor_idx) and tw.tensor_idx not in self.folded:
                    raise tvm.error.OpNotImplemented(f"{name} with computed bounds ('{_name(tw)}', e.g. a loop "
                                                     "counter in a WHILE body): only constant bounds are supported")
            return convert(op=op)

        return checked

    def _declared_shape(self, name: str, convert):
        """``convert`` with its single output given the shape the file declares for it.

        TVM's converters sometimes keep the input's rank where TFLite does not (FULLY_CONNECTED without
        ``keep_num_dims`` on a 4-D input gives ``(1, 1, 1, N)`` for the file's ``(1, N)``): an output with the
        declared number of elements is reshaped to the declared shape, any other mismatch is refused by name.
        """
        def conformed(op):
            ret = convert(op=op)
            outs = self.get_output_tensors(op)
            if ret is None or len(outs) != 1 or isinstance(ret, relax.Tuple):
                return ret
            t = outs[0].tensor          # a TFLite tensor without dimensions is a scalar (TVM would read its data)
            declared = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
            if self.get_tensor_type_str(t.Type()) == "complex64":
                declared.append(2)      # TVM holds complex64 as float32 (real, imaginary) pairs
            signature = outs[0].tensor.ShapeSignatureAsNumpy() if outs[0].tensor.ShapeSignatureLength() else None
            if any(d < 0 for d in declared) or (signature is not None and any(int(d) < 0 for d in signature)):
                return ret
            ret = self.bb.normalize(ret)
            ty = ret.ty
            if not isinstance(ty, relax.TensorType) or ty.shape is None:
                return ret
            got = [int(d) if isinstance(d, (int, tvm.tirx.IntImm)) else None for d in ty.shape]
            if None in got or got == declared:
                return ret
            if int(np.prod(got)) != int(np.prod(declared)):
                raise ValueError(f"{name} output '{_name(outs[0])}': the file declares shape {declared}, the "
                                 f"operator computes {got}")
            return relax.op.reshape(ret, declared)

        return conformed

    def convert_qnn_fused_activation_function(self, expr, fused_activation_fn, scale, zero_point, dtype):
        """Clamp of a fused activation on a quantized output, with TFLite's bounds."""
        kind = _ACTIVATIONS.get(int(fused_activation_fn))
        if kind is None:
            return super().convert_qnn_fused_activation_function(expr, fused_activation_fn, scale, zero_point,
                                                                 dtype)
        if kind == "none":
            return expr
        qmin, qmax = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}.get(dtype, (None, None))
        if qmin is None:
            return super().convert_qnn_fused_activation_function(expr, fused_activation_fn, scale, zero_point,
                                                                 dtype)
        lo, hi = act_range(kind, scale, int(zero_point), qmin, qmax)
        return relax.op.clip(expr, min=float(lo), max=float(hi))

    def dequantize(self, expr, tensor):
        """TVM's dequantize, and for an int64 tensor (the bias of a 16x8 CONV_2D, DEPTHWISE_CONV_2D,
        FULLY_CONNECTED or TRANSPOSE_CONV, which Relax's ``dequantize`` refuses) ``float(bias) * scale``:
        :mod:`..int8.patterns` reads the int64 values back from that form."""
        if tensor.tensor.Type() != _TFL_INT64:
            return super().dequantize(expr, tensor)
        zp = tensor.qnn_params["zero_point"]
        if isinstance(zp, tvm.ir.Constant) and np.any(zp.value.numpy() != 0):
            raise tvm.error.OpNotImplemented(f"int64 tensor '{_name(tensor)}' with a nonzero zero point")
        return relax.op.multiply(relax.op.astype(expr, "float32"), tensor.qnn_params["scale"])

    def _checked_16x8(self, name: str, convert):
        """``convert`` refusing what :meth:`_refuse_int32_accumulator` refuses; a 16x8 TRANSPOSE_CONV's int16
        bias (which TVM refuses) read as the int64 TFLite Micro widens it to."""
        def checked(op):
            self._refuse_int32_accumulator(op, name)
            tensors = self.get_input_tensors(op)
            if name != "TRANSPOSE_CONV" or len(tensors) < 4 or tensors[3].tensor_idx < 0 or \
                    tensors[3].tensor.Type() != _TFL_INT16 or tensors[2].tensor.Type() != _TFL_INT16:
                return convert(op=op)
            tensors[3] = _as_int64(tensors[3], self.get_tensor_value(tensors[3]))
            original = self.get_input_tensors
            self.get_input_tensors = lambda o: tensors if o is op else original(o)
            try:
                return convert(op=op)
            finally:
                del self.get_input_tensors

        return checked

    def _refuse_int32_accumulator(self, op, name: str):
        """A 16x8 operator without bias that asks for TFLite's int32 accumulator (``quantized_bias_type``
        int32): refused by name (the lowering tells the accumulator by the bias type; int64 when absent)."""
        from tflite.Conv2DOptions import Conv2DOptions
        from tflite.FullyConnectedOptions import FullyConnectedOptions
        from tflite.TransposeConvOptions import TransposeConvOptions

        tensors = self.get_input_tensors(op)
        x = tensors[2] if name == "TRANSPOSE_CONV" else tensors[0]
        bias_at = 3 if name == "TRANSPOSE_CONV" else 2
        has_bias = len(tensors) > bias_at and tensors[bias_at].tensor_idx >= 0
        if has_bias or x.tensor.Type() != _TFL_INT16:
            return
        cls = {"CONV_2D": Conv2DOptions, "FULLY_CONNECTED": FullyConnectedOptions,
               "TRANSPOSE_CONV": TransposeConvOptions}.get(name)
        if cls is None or op.BuiltinOptions() is None:
            return
        opts = cls()
        opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        if hasattr(opts, "QuantizedBiasType") and opts.QuantizedBiasType() == _TFL_INT32:
            raise tvm.error.OpNotImplemented(f"16x8 {name} without bias and with quantized_bias_type int32 "
                                             f"(output '{_name(self.get_output_tensors(op)[0])}'): only the "
                                             "int64 accumulator of bias-less 16x8 operators is supported")

    def convert_gather_nd(self, op):
        """GATHER_ND, also on quantized data (TVM refuses it; gathering moves values, TFLite requires the
        input's and output's quantization equal: checked by :data:`MOVE_OPS`), with TFLite's index order
        (Relax's ``gather_nd`` reads the last axis of ``indices`` as TFLite does; TVM's converter permutes
        it first)."""
        from tflite.TensorType import TensorType

        data_t, indices_t = self.get_input_tensors(op)
        data, indices = self.get_tensor_expr(data_t), self.get_tensor_expr(indices_t)
        if indices_t.tensor.Type() == TensorType.INT32:
            indices = relax.op.astype(indices, "int64")
        return relax.op.gather_nd(data, indices)

    def convert_fully_connected(self, op):
        """FULLY_CONNECTED with TFLite's input flattening: without ``keep_num_dims`` the input is read as
        ``[-1, k]`` whatever its rank (TVM multiplies the input as it is, which fails when its last axis is
        not ``k`` and keeps its rank otherwise)."""
        from tflite.FullyConnectedOptions import FullyConnectedOptions

        inp, weight = self.get_input_tensors(op)[:2]
        shape = [int(d) for d in self.get_tensor_shape(inp)]
        k = int(self.get_tensor_shape(weight)[-1])
        opts = FullyConnectedOptions()
        opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        if len(shape) == 2 or opts.KeepNumDims() or k <= 0 or int(np.prod(shape)) % k:
            return super().convert_fully_connected(op)
        flat = relax.op.reshape(self.get_tensor_expr(inp), [int(np.prod(shape)) // k, k])
        tensor_expr = self.get_tensor_expr
        self.get_tensor_expr = lambda t: flat if t.tensor_idx == inp.tensor_idx else tensor_expr(t)
        try:
            return super().convert_fully_connected(op)
        finally:
            del self.get_tensor_expr

    def convert_dequantize(self, op):
        """DEQUANTIZE; of a float16 tensor whether it is a constant (float16 weights) or computed (a DENSIFY of
        sparse float16 weights, a float16 input): TVM's converter reads every float16 input as a constant."""
        from tflite.TensorType import TensorType

        (x_t,) = self.get_input_tensors(op)
        if self.conversion_state.get("in_call_once_init"):   # an initial value: a constant, as TVM requires
            if x_t.buffer is None or not x_t.buffer.DataLength():
                raise tvm.error.OpNotImplemented(f"DEQUANTIZE of computed tensor '{_name(x_t)}' in a CALL_ONCE "
                                                 "initialisation subgraph: only constants are supported")
            return relax.const(self._dequantize_value(x_t), "float32")
        if x_t.tensor.Type() == TensorType.FLOAT16:
            return relax.op.astype(self.get_tensor_expr(x_t), "float32")
        return super().convert_dequantize(op)

    def convert_rfft2d(self, op):
        """RFFT2D as LiteRT computes it (:mod:`.tflite_fft`: float64, compact FFT loops, ``fft_length``
        padding or cutting the input); TVM's writes every butterfly out and computes in float32."""
        from .tflite_fft import columns_primfunc, is_power_of_two, rows_primfunc

        data_t, length_t = self.get_input_tensors(op)
        (out_t,) = self.get_output_tensors(op)
        if self.get_tensor_type_str(data_t.tensor.Type()) != "float32" or not self._is_tflite_complex64_type(
                out_t.tensor.Type()):
            raise tvm.error.OpNotImplemented("RFFT2D takes float32 and gives complex64")
        try:
            length = np.asarray(self.get_tensor_value(length_t))
        except (ValueError, TypeError, AttributeError):
            raise tvm.error.OpNotImplemented("RFFT2D with an fft_length computed at run time") from None
        shape = [int(d) for d in self.get_tensor_shape(data_t)]
        if length.shape != (2,) or not np.issubdtype(length.dtype, np.integer) or len(shape) < 2:
            raise tvm.error.OpNotImplemented("RFFT2D needs an input of rank 2 or more and fft_length of 2 integers")
        height, width = int(length[0]), int(length[1])
        if not (is_power_of_two(height) and is_power_of_two(width)) or height * width > 1 << 24:
            raise tvm.error.OpNotImplemented(f"RFFT2D fft_length ({height}, {width}): LiteRT takes powers of two "
                                             "(and we at most 2**24 points)")
        ow = width // 2 + 1
        out_shape = tuple(self._get_relax_tensor_shape(out_t))
        if out_shape != tuple(shape[:-2]) + (height, ow, 2):
            raise tvm.error.OpNotImplemented(f"RFFT2D output shape {list(out_shape[:-1])} is not the input's "
                                             f"with the last two dimensions ({height}, {ow})")
        batch = int(np.prod(shape[:-2], dtype=np.int64))
        h_in, w_in = shape[-2:]
        mb = self.conversion_state["module_builder"]
        name = f"tflite_rfft2d_{out_t.tensor_idx}"
        data = relax.op.reshape(self.get_tensor_expr(data_t), [batch, h_in, w_in])
        pair = [batch, height, ow, 2]
        if height == 1:
            rows = mb.add_func(rows_primfunc(batch, h_in, w_in, height, width, "float32"), name)
            y = relax.call_tir(rows, [data], relax.TensorType(pair, "float32"))
        else:
            rows = mb.add_func(rows_primfunc(batch, h_in, w_in, height, width, "float64"), name + "_rows")
            cols = mb.add_func(columns_primfunc(batch, height, ow), name + "_columns")
            y = relax.call_tir(rows, [data], relax.TensorType(pair, "float64"))
            y = relax.call_tir(cols, [self.bb.normalize(y)], relax.TensorType(pair, "float32"))
        return self.bb.normalize(relax.op.reshape(self.bb.normalize(y), list(out_shape)))

    def convert_quantize(self, op):
        """QUANTIZE; of a float tensor that a DEQUANTIZE op computed (an unrolled loop's state: DEQUANTIZE before
        the loop, QUANTIZE in its body) as TFLite computes it, through the float value, kept apart from the
        ``quantize(dequantize(x))`` TVM writes for a QUANTIZE of an integer tensor (a requantization, which rounds
        otherwise) by a float32 ``astype`` the int8 lowering does not look through."""
        (x_t,) = self.get_input_tensors(op)
        producer = self._producer(x_t.tensor_idx)
        if (self.get_tensor_type_str(x_t.tensor.Type()) != "float32" or producer is None
                or self.get_op_code_str(producer) != "DEQUANTIZE"):
            return super().convert_quantize(op)
        (src,) = self.get_tensors(producer.InputsAsNumpy()[:1])
        if src.qnn_params is None or (src.buffer is not None and src.buffer.DataLength()):
            return super().convert_quantize(op)
        (out_t,) = self.get_output_tensors(op)
        return self.quantize(relax.op.astype(self.get_tensor_expr(x_t), "float32"), out_t)

    def _convert_call_once_init_subgraph(self, init_subgraph):
        """TVM's, also with DEQUANTIZE of constants (a float16 model's initial values: ``VAR_HANDLE ->
        DEQUANTIZE(float16 constant) -> ASSIGN_VARIABLE``), each imported as its float32 constant."""
        supported = {"VAR_HANDLE", "ASSIGN_VARIABLE", "HASHTABLE", "HASHTABLE_IMPORT", "DEQUANTIZE"}
        for i in range(init_subgraph.OperatorsLength()):
            name = self.get_op_code_str(init_subgraph.Operators(i))
            if name not in supported:
                raise tvm.error.OpNotImplemented(f"CALL_ONCE init subgraph operator {name} is not supported")
        old = self.conversion_state["in_call_once_init"]
        self.conversion_state["in_call_once_init"] = True
        try:
            sub = type(self)(self.model, init_subgraph, ExprTable(), self.bb, self.conversion_state)
            sub.check_unsupported_ops()
            sub.convert_op_to_relax()
        finally:
            self.conversion_state["in_call_once_init"] = old

    # ------------------------------------------------------------ constants behind DEQUANTIZE
    def get_tensor_value(self, tensor_wrapper, is_sparse=False):
        """TVM's, and for a tensor that is the output of a DEQUANTIZE of a constant (float16 weights, an
        int8 constant), the dequantized value: converters that need a constant operand (PADV2's value,
        an LSTM's weights) get it from a float16 model too."""
        tw = tensor_wrapper
        if tw.tensor_idx in getattr(self, "folded", {}):
            return self.folded[tw.tensor_idx]
        if tw.tensor is not None and tw.tensor.ShapeLength() and 0 in tw.tensor.ShapeAsNumpy():
            return np.zeros([int(d) for d in tw.tensor.ShapeAsNumpy()], self.get_tensor_type_as_numpy(tw))
        if tw.buffer is not None and not tw.buffer.DataLength() and not is_sparse:
            folded = self._dequantized_constant(tw.tensor_idx)
            if folded is not None:
                return folded
        return super().get_tensor_value(tw, is_sparse)

    def _producer(self, tensor_idx: int):
        """The operator of this subgraph that computes tensor ``tensor_idx`` (None: an input or a constant)."""
        cache = self.conversion_state.setdefault("tvm_memsched_producers", {})   # per subgraph
        producers = cache.get(self.subgraph._tab.Pos)
        if producers is None:
            producers = {}
            for i in range(self.subgraph.OperatorsLength()):
                o = self.subgraph.Operators(i)
                for t in o.OutputsAsNumpy():
                    producers[int(t)] = o
            cache[self.subgraph._tab.Pos] = producers
        return producers.get(int(tensor_idx))

    def _dequantized_constant(self, tensor_idx: int):
        o = self._producer(tensor_idx)
        if o is None or self.get_op_code_str(o) != "DEQUANTIZE":
            return None
        (src,) = self.get_tensors(o.InputsAsNumpy()[:1])
        if src.buffer is None or not src.buffer.DataLength():
            return None
        return self._dequantize_value(src)

    def _dequantize_value(self, src):
        """The float32 value of the constant tensor ``src`` (float16, or quantized per tensor or channel)."""
        value = super().get_tensor_value(src)
        if src.qnn_params is None:
            return np.asarray(value, np.float32)                   # float16 -> float32
        q = src.tensor.Quantization()
        scale, zp = q.ScaleAsNumpy().astype(np.float32), q.ZeroPointAsNumpy().astype(np.int64)
        axis = int(q.QuantizedDimension())
        shape = [1] * value.ndim
        if scale.size > 1:
            shape[axis] = scale.size
        return ((value.astype(np.int64) - zp.reshape(shape)) * scale.reshape(shape)).astype(np.float32)

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


#: most products one int32 sum of a hybrid operator takes: |q - zero point| <= 255, |w| <= 128
_HYBRID_MAX_TERMS = (2 ** 31 - 1) // (255 * 128)


def _check_hybrid_weights(name: str, w_t, w, scale, quant, bias, channels: int, axis: int) -> None:
    """Refuse, by name, weight scales and a bias a hybrid operator could not use as LiteRT does: a scale per
    tensor or one per output channel along ``axis``, a bias of one value per output channel; and weights
    ``w`` whose sums could overflow the int32 accumulators (LiteRT's would wrap)."""
    if w.size // channels > _HYBRID_MAX_TERMS:
        raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(w_t)}' sum {w.size // channels} "
                                         f"products per output, more than the {_HYBRID_MAX_TERMS} an int32 "
                                         "sum holds without overflow")
    if scale.size not in (1, channels) or (scale.size > 1 and int(quant.QuantizedDimension()) != axis):
        raise tvm.error.OpNotImplemented(f"hybrid {name}: weights '{_name(w_t)}' have {scale.size} scales along "
                                         f"axis {int(quant.QuantizedDimension())}; expected 1 or {channels} along "
                                         f"axis {axis}")
    if bias is not None and bias.size != channels:
        raise tvm.error.OpNotImplemented(f"hybrid {name}: bias of {bias.size} values for {channels} output "
                                         "channels")


def _as_int64(tw, values):
    """TVM's tensor wrapper ``tw`` of an integer constant, as an int64 tensor holding ``values``."""
    from tvm.relax.frontend.tflite.tflite_frontend import TensorWrapper

    data = np.ascontiguousarray(values, "<i8").tobytes()
    return TensorWrapper(tw.tensor_idx, _TypedAs(tw.tensor, _TFL_INT64), _OffsetBuffer(data, 0, len(data)),
                         tw.qnn_params)


class _TypedAs:
    """A flatbuffer ``Tensor`` whose ``Type()`` reads ``code`` (everything else as the tensor has it)."""

    def __init__(self, tensor, code: int):
        self._tensor, self._code = tensor, code

    def Type(self):  # noqa: N802 - the flatbuffers accessor name
        return self._code

    def __getattr__(self, name):
        return getattr(self._tensor, name)


class _OffsetBuffer:
    """A TFLite ``Buffer`` whose data lies at ``offset`` in the file (the accessors TVM's importer uses)."""

    def __init__(self, file_bytes, offset: int, size: int):
        if offset + size > len(file_bytes):
            raise ValueError(f"buffer at bytes {offset}..{offset + size} lies past the end of the "
                             f"{len(file_bytes)}-byte file (truncated?)")
        self._data = np.frombuffer(file_bytes, np.uint8, count=size, offset=offset)

    def DataAsNumpy(self):  # noqa: N802 - the flatbuffers accessor names
        return self._data

    def DataLength(self):  # noqa: N802
        return len(self._data)

    def DataIsNone(self):  # noqa: N802
        return False


