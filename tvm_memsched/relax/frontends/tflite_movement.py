"""TFLite data-movement operators written in plain Relax operators, complex64 values included.

TVM's converter writes SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND through operators
that need their own lowering, passes EXPAND_DIMS an argument Relax's operator
does not take, and reads RESHAPE's, SQUEEZE's and CAST's shapes and types as if
no value were complex. :class:`MovementOps` is a mixin of
:class:`~.tflite_converter.OperatorConverter` with these converters; a
complex64 value is held as float32 (real, imaginary) pairs on a last axis of 2.

Example
-------
>>> [m for m in sorted(vars(MovementOps)) if m.startswith("convert_")][:3]
['convert_batch_to_space_nd', 'convert_cast', 'convert_expand_dims']
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

__all__ = ["MovementOps"]


class MovementOps:
    """Converter methods for data movement in plain Relax operators (mixed into
    :class:`~.tflite_converter.OperatorConverter`, before TVM's converter)."""

    def convert_batch_to_space_nd(self, op):
        """BATCH_TO_SPACE_ND as reshape, transpose, reshape and crop (TVM calls a TOPI packed function,
        which neither the VM nor a microcontroller build can run)."""
        x_t, block_t, crops_t = self.get_input_tensors(op)
        block = [int(b) for b in self.get_tensor_value(block_t).reshape(-1)]
        crops = self.get_tensor_value(crops_t).reshape(-1, 2)
        shape = [int(d) for d in self.get_tensor_shape(x_t)]
        m = len(block)
        batch, spatial, rest = shape[0], shape[1:1 + m], shape[1 + m:]
        prod = int(np.prod(block))
        if m < 1 or batch % prod or crops.shape[0] != m:
            raise tvm.error.OpNotImplemented(f"BATCH_TO_SPACE_ND of shape {shape} with block {block}")
        R = relax.op
        x = R.reshape(self.get_tensor_expr(x_t), block + [batch // prod] + spatial + rest)
        # [b0..bm-1, B, s0..sm-1, rest] -> [B, s0, b0, s1, b1, ..., rest]
        axes = [m] + [a for i in range(m) for a in (m + 1 + i, i)] + list(range(2 * m + 1, 2 * m + 1 + len(rest)))
        x = R.reshape(R.permute_dims(x, axes), [batch // prod] + [s * b for s, b in zip(spatial, block)] + rest)
        begin = [int(c) for c in crops[:, 0]]
        end = [s * b - int(c) for s, b, c in zip(spatial, block, crops[:, 1])]
        if any(begin) or any(e != s * b for e, s, b in zip(end, spatial, block)):
            x = R.strided_slice(x, list(range(1, m + 1)), begin, end)
        return x

    def convert_space_to_batch_nd(self, op):
        """SPACE_TO_BATCH_ND as pad (with the zero point of a quantized input, as TFLite pads), reshape,
        transpose and reshape."""
        x_t, block_t, pad_t = self.get_input_tensors(op)
        block = [int(b) for b in self.get_tensor_value(block_t).reshape(-1)]
        pads = self.get_tensor_value(pad_t).reshape(-1, 2)
        shape = [int(d) for d in self.get_tensor_shape(x_t)]
        m = len(block)
        batch, spatial, rest = shape[0], shape[1:1 + m], shape[1 + m:]
        padded = [s + int(p[0]) + int(p[1]) for s, p in zip(spatial, pads)]
        if m < 1 or pads.shape[0] != m or any(p % b for p, b in zip(padded, block)):
            raise tvm.error.OpNotImplemented(f"SPACE_TO_BATCH_ND of shape {shape} with block {block}, paddings "
                                             f"{pads.tolist()}")
        R = relax.op
        x = self.get_tensor_expr(x_t)
        if pads.any():
            zp = float(x_t.qnn_params["zero_point"].value.numpy()) if x_t.qnn_params else 0.0
            width = [0, 0] + [int(v) for p in pads for v in p] + [0, 0] * len(rest)
            x = R.nn.pad(x, width, pad_value=zp)
        split = [batch] + [v for p, b in zip(padded, block) for v in (p // b, b)] + rest
        x = R.reshape(x, split)
        # [B, s0/b0, b0, s1/b1, b1, ..., rest] -> [b0, b1, ..., B, s0/b0, s1/b1, ..., rest]
        axes = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + \
            list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
        return R.reshape(R.permute_dims(x, axes), [batch * int(np.prod(block))] +
                         [p // b for p, b in zip(padded, block)] + rest)

    def convert_reshape(self, op):
        """RESHAPE to its shape operand's value - a constant, or shape arithmetic folded at import
        (:mod:`.tflite_fold`) - else to the shape the file declares for its output; complex64 values keep
        their (real, imaginary) axis."""
        from tflite.ReshapeOptions import ReshapeOptions

        ins, (out_t,) = self.get_input_tensors(op), self.get_output_tensors(op)
        x_t = ins[0]
        shape = None
        if len(ins) > 1 and ins[1].tensor_idx >= 0 and (ins[1].tensor_idx in self.folded or
                                                        not self.has_expr(ins[1].tensor_idx)):
            shape = [int(d) for d in np.asarray(self.get_tensor_value(ins[1])).reshape(-1)]
        elif len(ins) < 2 and op.BuiltinOptions() is not None:
            o = ReshapeOptions()
            o.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
            shape = [int(d) for d in o.NewShapeAsNumpy()] if o.NewShapeLength() else None
        t = out_t.tensor
        if shape is None:
            if t.ShapeSignatureLength() and any(int(d) < 0 for d in t.ShapeSignatureAsNumpy()[1:]):
                return super().convert_reshape(op)
            shape = [int(d) for d in t.ShapeAsNumpy()] if t.ShapeLength() else []
        if x_t.qnn_params and out_t.qnn_params and not self.has_same_qnn_params(x_t, out_t):
            raise ValueError(f"quantized RESHAPE with different input and output quantization (tensor "
                             f"'{_name(out_t)}'); TFLite requires them equal")
        if self.get_tensor_type_str(x_t.tensor.Type()) == "complex64":
            shape = shape + [2]
        return relax.op.reshape(self.get_tensor_expr(x_t), shape)

    def convert_expand_dims(self, op):
        """EXPAND_DIMS (TVM's converter passes ``relax.op.expand_dims`` an argument it does not take)."""
        x_t, axis_t = self.get_input_tensors(op)
        x = self.get_tensor_expr(x_t)
        rank = len(self.bb.normalize(x).ty.shape.values)
        axis = int(np.asarray(self.get_tensor_value(axis_t)).reshape(-1)[0])
        if not -rank - 1 <= axis <= rank:
            raise ValueError(f"EXPAND_DIMS axis {axis} out of range for rank {rank}")
        return relax.op.expand_dims(x, axis if axis >= 0 else axis + rank + 1)

    def convert_squeeze(self, op):
        """SQUEEZE with its axes counted in TFLite's rank (a complex64 value has one more axis in Relax, its
        (real, imaginary) pair, which negative axes would otherwise point at)."""
        from tflite.SqueezeOptions import SqueezeOptions

        (x_t,) = self.get_input_tensors(op)
        shape = [int(d) for d in self.get_tensor_shape(x_t)]
        o = SqueezeOptions()
        o.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        dims = [int(a) for a in o.SqueezeDimsAsNumpy()] if o.SqueezeDimsLength() else []
        axes = sorted({a % len(shape) for a in dims}) if dims else [i for i, d in enumerate(shape) if d == 1]
        return relax.op.squeeze(self.get_tensor_expr(x_t), axes) if axes else self.get_tensor_expr(x_t)

    def convert_cast(self, op):
        """CAST, also of complex64 values (held as float32 (real, imaginary) pairs): to a real type the real
        part, as TensorFlow and LiteRT take it; a real value to complex64 gets a zero imaginary part."""
        (x_t,), (y_t,) = self.get_input_tensors(op), self.get_output_tensors(op)
        src, dst = self.get_tensor_type_str(x_t.tensor.Type()), self.get_tensor_type_str(y_t.tensor.Type())
        if "complex64" not in (src, dst):
            return super().convert_cast(op)
        x = self.get_tensor_expr(x_t)
        if src == dst:
            return x
        if src == "complex64":
            real = relax.op.strided_slice(x, axes=[-1], begin=[0], end=[1])
            return relax.op.astype(relax.op.squeeze(real, [-1]), dst)
        re = relax.op.expand_dims(relax.op.astype(x, "float32"), -1)
        return relax.op.concat([re, relax.op.zeros_like(re)], axis=-1)


def _name(t) -> str:
    n = t.tensor.Name()
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)
