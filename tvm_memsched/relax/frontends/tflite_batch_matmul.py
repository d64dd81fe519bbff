"""TFLite ``BATCH_MATMUL`` in Relax, in every kind TFLite Micro and LiteRT run it.

TVM 0.27's converter refuses a quantized ``BATCH_MATMUL``, fails on a constant operand (it looks constants
up as activations: the ``'BroadcastTo'`` error of a batch of weights the converter folded) and gives the
output the left operand's batch dimensions when the right one has more. :func:`batch_matmul` imports:

* **float32** (float16 weights are float32 after their ``DEQUANTIZE``): ``matmul`` of the operands, the one
  with ``adj_x`` / ``adj_y`` transposed in its last two axes (``permute_dims``), batch dimensions broadcast
  by numpy's rules, as TFLite's ``ResizeOutputTensor`` does;
* **int8 and int16** (both operands and the output quantized, one scale each; int16 with zero points 0, as
  TFLite Micro requires): the same ``matmul`` between ``dequantize`` and ``quantize``, which the integer
  lowering (:mod:`tvm_memsched.relax.int8`) replaces by TFLite Micro's integer kernel (int32 or int64 sums,
  ``MultiplyByQuantizedMultiplier``);
* **dynamic-range quantization** ("hybrid": float32 left operand, int8 constant right operand):
  :func:`~.tflite_hybrid.hybrid_batch_matmul`, LiteRT's reference kernel (TFLite Micro refuses it);
* **constant operands**, including the ``BROADCAST_TO`` of a constant along batch dimensions feeding the
  operator: the constant itself is the operand (the operator broadcasts batch dimensions anyway), so the
  broadcast copy is never made, in flash or in RAM.

Anything else (an int8 product with an int32 output, LiteRT only; mixed types; per-channel scales;
non-broadcastable batch dimensions) is refused by name, with the operator's index and output tensor.

Example
-------
>>> out_shape([2, 1, 4, 6], [3, 6, 5], False, False)
[2, 3, 4, 5]
>>> out_shape([4, 6], [2, 5, 6], False, True)
[2, 4, 5]
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

__all__ = ["batch_matmul", "out_shape"]

_NAME = "BATCH_MATMUL"


def out_shape(a_shape, b_shape, adj_x: bool, adj_y: bool) -> list[int] | None:
    """The output shape TFLite gives ``a @ b`` (``adj_x`` / ``adj_y``: the operand transposed in its last two
    axes), or None when the batch dimensions do not broadcast or the summed dimensions differ."""
    rank = max(len(a_shape), len(b_shape))
    ea = [1] * (rank - len(a_shape)) + list(a_shape)
    eb = [1] * (rank - len(b_shape)) + list(b_shape)
    batch = []
    for da, db in zip(ea[:-2], eb[:-2]):
        if da != db and 1 not in (da, db):
            return None
        batch.append(db if da == 1 else da)
    k_a = ea[-2] if adj_x else ea[-1]
    k_b = eb[-1] if adj_y else eb[-2]
    if k_a != k_b:
        return None
    return batch + [ea[-1] if adj_x else ea[-2], eb[-2] if adj_y else eb[-1]]


def _name(tw) -> str:
    n = tw.tensor.Name()
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)


def _where(conv, op, out_t) -> str:
    """``BATCH_MATMUL (operator 3, output 'y')`` for messages."""
    index = next((i for i in range(conv.subgraph.OperatorsLength())
                  if list(conv.subgraph.Operators(i).OutputsAsNumpy()) == [out_t.tensor_idx]), "?")
    return f"{_NAME} (operator {index}, output '{_name(out_t)}')"


def _is_constant(conv, tw) -> bool:
    return not conv.has_expr(tw.tensor_idx) and tw.buffer is not None and bool(tw.buffer.DataLength())


def _broadcast_source(conv, tw):
    """The constant input of the ``BROADCAST_TO`` writing tensor ``tw``, if one does, else None."""
    sg = conv.subgraph
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        if list(op.OutputsAsNumpy()) == [tw.tensor_idx] and conv.get_op_code_str(op) == "BROADCAST_TO":
            src = conv.get_input_tensors(op)[0]
            return src if _is_constant(conv, src) else None
    return None


def _shape(conv, tw) -> list[int]:
    return [int(d) for d in conv.get_tensor_shape(tw)]


def _operands(conv, a_t, b_t, adj_x, adj_y, declared):
    """``(a, b)`` tensor wrappers, each constant made by a ``BROADCAST_TO`` of batch dimensions replaced by the
    constant itself where the output keeps its shape (the operator broadcasts batch dimensions)."""
    out = []
    for k, t in enumerate((a_t, b_t)):
        src = _broadcast_source(conv, t)
        if src is not None:
            s, full = _shape(conv, src), _shape(conv, t)
            shapes = [_shape(conv, a_t), _shape(conv, b_t)]
            shapes[k] = s
            same_matrix = len(s) >= 2 and s[-2:] == full[-2:]
            if same_matrix and out_shape(shapes[0], shapes[1], adj_x, adj_y) == declared:
                t = src
        out.append(t)
    return out


def _transposed(x, rank: int, adj: bool):
    return relax.op.permute_dims(x, list(range(rank - 2)) + [rank - 1, rank - 2]) if adj else x


def _qparams(conv, tw, where: str):
    """``(scale, zero point)`` of a quantized tensor with one scale, else a refusal by name."""
    q = tw.tensor.Quantization()
    scales = q.ScaleAsNumpy() if q is not None and q.ScaleLength() else np.zeros(0)
    zps = q.ZeroPointAsNumpy() if q is not None and q.ZeroPointLength() else np.zeros(1, np.int64)
    if np.size(scales) != 1:
        raise tvm.error.OpNotImplemented(f"{where}: tensor '{_name(tw)}' has {np.size(scales)} scales; TFLite "
                                         "Micro's kernel takes one scale per operand")
    return float(np.asarray(scales).reshape(-1)[0]), int(np.asarray(zps).reshape(-1)[0])


def batch_matmul(conv, op):
    """Import one ``BATCH_MATMUL`` (``conv``: the operator converter of :mod:`.tflite_converter`)."""
    from tflite.BatchMatMulOptions import BatchMatMulOptions

    tensors = conv.get_input_tensors(op)
    (out_t,) = conv.get_output_tensors(op)
    where = _where(conv, op, out_t)
    if len(tensors) != 2:
        raise tvm.error.OpNotImplemented(f"{where} with {len(tensors)} inputs; TFLite's takes 2")
    opts = BatchMatMulOptions()
    o = op.BuiltinOptions()
    if o is not None:
        opts.Init(o.Bytes, o.Pos)
    adj_x, adj_y = (bool(opts.AdjX()), bool(opts.AdjY())) if o is not None else (False, False)
    declared = _shape(conv, out_t)
    a_t, b_t = _operands(conv, *tensors, adj_x, adj_y, declared)
    a_shape, b_shape = _shape(conv, a_t), _shape(conv, b_t)
    for t, s in ((a_t, a_shape), (b_t, b_shape)):
        if not 2 <= len(s) <= 5 or min(s) < 1:
            raise tvm.error.OpNotImplemented(f"{where}: operand '{_name(t)}' has shape {s}; TFLite takes static "
                                             "shapes of rank 2 to 5")
    shape = out_shape(a_shape, b_shape, adj_x, adj_y)
    if shape is None or shape != declared:
        raise tvm.error.OpNotImplemented(f"{where}: operands {a_shape} and {b_shape} (adj_x={adj_x}, "
                                         f"adj_y={adj_y}) do not give the declared output {declared}")
    types = [conv.get_tensor_type_str(t.tensor.Type()) for t in (a_t, b_t, out_t)]
    quantized = [t.qnn_params is not None for t in (a_t, b_t, out_t)]
    if types == ["float32"] * 3 and not any(quantized):
        a, b = conv.get_tensor_expr(a_t), conv.get_tensor_expr(b_t)
        return relax.op.matmul(_transposed(a, len(a_shape), adj_x), _transposed(b, len(b_shape), adj_y))
    if types == ["float32", "int8", "float32"] and quantized == [False, True, False]:
        return _hybrid(conv, op, a_t, b_t, a_shape, b_shape, adj_x, adj_y, declared, where)
    if types[0] in ("int8", "int16") and types.count(types[0]) == 3 and all(quantized):
        qs = [_qparams(conv, t, where) for t in (a_t, b_t, out_t)]
        if types[0] == "int16" and any(z for _, z in qs):
            raise tvm.error.OpNotImplemented(f"{where}: int16 operands with zero points {[z for _, z in qs]}; "
                                             "TFLite requires 0")
        a = conv.dequantize(conv.get_tensor_expr(a_t), a_t)
        b = conv.dequantize(conv.get_tensor_expr(b_t), b_t)
        y = relax.op.matmul(_transposed(a, len(a_shape), adj_x), _transposed(b, len(b_shape), adj_y))
        return conv.quantize(y, out_t)
    kinds = ", ".join(f"{ty}{' quantized' if q else ''}" for ty, q in zip(types, quantized))
    raise tvm.error.OpNotImplemented(f"{where} of {kinds} (left, right, output): supported are float32, int8 "
                                     "and int16 (all quantized, as TFLite Micro runs them) and dynamic-range "
                                     "quantization (float32 with int8 constant weights, LiteRT)")


def _hybrid(conv, op, a_t, b_t, a_shape, b_shape, adj_x, adj_y, declared, where):
    """Dynamic-range quantized ``BATCH_MATMUL``: LiteRT's reference kernel (:mod:`.tflite_hybrid`)."""
    from tflite.BatchMatMulOptions import BatchMatMulOptions

    from .tflite_hybrid import hybrid_batch_matmul

    if not _is_constant(conv, b_t):
        raise tvm.error.OpNotImplemented(f"{where}: dynamic-range quantization with int8 operand '{_name(b_t)}' "
                                         "computed at run time; LiteRT sums its rows once, so it must be a "
                                         "constant")
    quant = b_t.tensor.Quantization()
    scale = np.asarray(quant.ScaleAsNumpy(), np.float32).reshape(-1)
    zp = np.asarray(quant.ZeroPointAsNumpy()).reshape(-1) if quant.ZeroPointLength() else np.zeros(1)
    if np.any(zp != 0):
        raise tvm.error.OpNotImplemented(f"{where}: int8 weights '{_name(b_t)}' with a nonzero zero point")
    n = b_shape[-2] if adj_y else b_shape[-1]
    if scale.size > 1:
        axis = int(quant.QuantizedDimension()) % len(b_shape)
        if scale.size != n or axis != len(b_shape) - (2 if adj_y else 1):
            raise tvm.error.OpNotImplemented(f"{where}: weights '{_name(b_t)}' have {scale.size} scales along "
                                             f"axis {axis}; LiteRT takes one, or one per output column")
    opts = BatchMatMulOptions()
    opts.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
    w = conv.get_tensor_value(b_t).astype(np.int8).reshape(b_shape)
    x = conv.get_tensor_expr(a_t)
    try:
        return hybrid_batch_matmul(conv.bb, x, a_shape, w, scale, declared, adj_x=adj_x, adj_y=adj_y,
                                   asymmetric=bool(opts.AsymmetricQuantizeInputs()))
    except ValueError as e:
        raise tvm.error.OpNotImplemented(f"{where}: {e}") from None
