"""Which outputs of a ``.tflite`` may be written over a dying input under TFLite Micro's kernels.

TFLite Micro never aliases two tensors itself, but its offline plan places each
tensor where we say, so an output may share memory with an input that dies at
its operator, *if the kernel never reads an input element after writing over
it*. Two levels, both read off TFLM's reference kernels
(``tensorflow/lite/micro/kernels`` and ``lite/kernels/internal/reference``):

* ``"elementwise"`` (safe on every TFLM kernel library, CMSIS-NN included):
  ops whose loop writes ``output[i]`` right after reading ``input[i]`` in
  increasing ``i``: ADD / SUB / MUL / SQUARED_DIFFERENCE without broadcasting
  (every input has the output's shape), the activations (RELU, RELU6,
  RELU_N1_TO_1, LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU, ABS, NEG), QUANTIZE and
  DEQUANTIZE, and the views RESHAPE / SQUEEZE / EXPAND_DIMS (a copy of the same
  bytes). An output element larger than the input element (DEQUANTIZE int8 ->
  float) needs a shift: the output starts ``n * (out_item - in_item)`` bytes
  below the input.
* ``"windowed"`` (TFLM's *reference* kernels only: CMSIS-NN and other optimised
  libraries use their own loop orders and scratch buffers): CONV_2D,
  DEPTHWISE_CONV_2D, AVERAGE_POOL_2D and MAX_POOL_2D in NHWC. The reference
  loops visit output pixels in memory order and read a window of input rows
  around each; the shift is the smallest distance such that every output
  write lands only on input bytes no later output reads, computed exactly
  from the loop nest (padding, strides, dilation, depth multiplier) by
  :func:`window_shift`.

A wrong overlap can never pass silently: ``tvm-memsched tflite --report`` runs
TFLite Micro on the original and on the planned file and requires
bit-identical outputs.

Example
-------
>>> window_shift((1, 8, 8, 4), (1, 8, 8, 4), kernel=(3, 3), stride=(1, 1), padding="SAME",
...              itemsize=(1, 1), depthwise=True)   # one input row and one pixel (9 x 4 bytes)
36
"""

from __future__ import annotations

import math

import numpy as np

from ..core.graph import Graph
from ..core.windows import nhwc_window_shift
from .reader import TFLiteGraph

__all__ = ["ELEMENTWISE", "WINDOWED", "MODES", "window_shift", "inplace_declarations", "with_inplace"]

#: ops whose TFLM kernels write output[i] right after reading input[i], in increasing i
ELEMENTWISE = frozenset({"ADD", "SUB", "MUL", "SQUARED_DIFFERENCE", "RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC",
                         "TANH", "HARD_SWISH", "LEAKY_RELU", "ABS", "NEG", "QUANTIZE", "DEQUANTIZE", "RESHAPE",
                         "SQUEEZE", "EXPAND_DIMS"})
#: NHWC window ops whose TFLM reference kernels visit output pixels in memory order
WINDOWED = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D"})
#: the ``inplace`` modes :func:`inplace_declarations` accepts
MODES = ("off", "elementwise", "windowed")


def _padding(size: int, out: int, stride: int, eff: int, same: bool) -> int:
    """TFLite's ``ComputePaddingHeightWidth`` for one dimension: the padding before the first element."""
    if not same:
        return 0
    return max((out - 1) * stride + eff - size, 0) // 2


def window_shift(in_shape, out_shape, *, kernel, stride, padding, itemsize, dilation=(1, 1),
                 depthwise=False, pool=False) -> int:
    """Bytes the output of an NHWC window op must start below its input to be computed in place.

    TFLite's SAME / VALID ``padding`` turned into the padding before the first
    row and column, then :func:`~tvm_memsched.core.windows.nhwc_window_shift`
    (TFLM's reference loop nest).
    """
    _, h, w, _ = (int(d) for d in in_shape)
    _, ho, wo, _ = (int(d) for d in out_shape)
    same = str(padding).upper() == "SAME"
    ph = _padding(h, ho, stride[0], (kernel[0] - 1) * dilation[0] + 1, same)
    pw = _padding(w, wo, stride[1], (kernel[1] - 1) * dilation[1] + 1, same)
    return nhwc_window_shift(in_shape, out_shape, kernel=kernel, stride=stride, pad_before=(ph, pw),
                             itemsize=itemsize, dilation=dilation, depthwise=depthwise, pool=pool)


def _shape(t) -> list[int]:
    return [] if t.shape is None else [int(s) for s in t.shape]


def _itemsize(t) -> int:
    from .builder import ITEMSIZE, type_name

    return ITEMSIZE[type_name(t.type)]


def _elementwise_shift(kind: str, op, tensors, const) -> tuple[int, int] | None:
    """(input index, shift) for an element-wise op, or None when it does not qualify."""
    outs = [int(o) for o in op.outputs if int(o) >= 0]
    ins = [int(i) for i in op.inputs if int(i) >= 0]
    if len(outs) != 1 or not ins:
        return None
    out = tensors[outs[0]]
    n = math.prod(_shape(out))
    if kind in ("ADD", "SUB", "MUL", "SQUARED_DIFFERENCE"):
        if len(ins) != 2 or any(_shape(tensors[i]) != _shape(out) for i in ins):
            return None          # broadcasting: input and output indices differ
        cands = [i for i in ins if not const[i] and _itemsize(tensors[i]) == _itemsize(out)]
    else:
        first = ins[0]
        if const[first] or math.prod(_shape(tensors[first])) != n:
            return None
        cands = [first]
    if not cands:
        return None
    i = cands[0]
    return i, max(0, n * (_itemsize(out) - _itemsize(tensors[i])))


def _window_shift_of(kind: str, op, tensors) -> tuple[int, int] | None:
    opts = op.builtinOptions
    ins = [int(i) for i in op.inputs if int(i) >= 0]
    outs = [int(o) for o in op.outputs if int(o) >= 0]
    if opts is None or not ins or len(outs) != 1:
        return None
    x, y = tensors[ins[0]], tensors[outs[0]]
    xs, ys = _shape(x), _shape(y)
    if len(xs) != 4 or len(ys) != 4:
        return None
    padding = "SAME" if int(getattr(opts, "padding", 1)) == 0 else "VALID"
    stride = (int(opts.strideH), int(opts.strideW))
    if kind in ("AVERAGE_POOL_2D", "MAX_POOL_2D"):
        kernel, dilation = (int(opts.filterHeight), int(opts.filterWidth)), (1, 1)
    else:
        f = _shape(tensors[ins[1]])
        if len(f) != 4:
            return None
        kernel = (f[1], f[2])
        dilation = (int(opts.dilationHFactor), int(opts.dilationWFactor))
    shift = window_shift(xs, ys, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                         itemsize=(_itemsize(x), _itemsize(y)), depthwise=kind == "DEPTHWISE_CONV_2D",
                         pool=kind.endswith("POOL_2D"))
    return ins[0], shift


def inplace_declarations(tg: TFLiteGraph, mode: str = "elementwise") -> dict[str, tuple[str, str, int]]:
    """``{op name: (output, input, shift)}`` for the operators of subgraph 0 that qualify under ``mode``.

    The shift is rounded up to TFLM's 16-byte alignment by the planner.
    """
    if mode not in MODES:
        raise ValueError(f"unknown in-place mode {mode!r}; use one of {', '.join(MODES)}")
    if mode == "off":
        return {}
    from .reader import is_constant

    model = tg.model
    sg = model.subgraphs[0]
    tensors = list(sg.tensors or [])
    const = [is_constant(model, t) for t in tensors]
    out = {}
    g = tg.graph
    for name in tg.op_names:
        oi = tg.op_ids[name]
        op = sg.operators[oi]
        kind = g.op(name).attrs.get("kind")
        if kind in ELEMENTWISE:
            found = _elementwise_shift(kind, op, tensors, const)
        elif kind in WINDOWED and mode == "windowed":
            found = _window_shift_of(kind, op, tensors)
        else:
            found = None
        if found is None:
            continue
        i, shift = found
        o = int(op.outputs[0])
        iname, oname = tg.tensor_names[i], tg.tensor_names[o]
        if iname is None or oname is None:
            continue
        out[name] = (oname, iname, shift)
    return out


def with_inplace(tg: TFLiteGraph, mode: str = "elementwise") -> Graph:
    """``tg.graph`` with the in-place declarations of :func:`inplace_declarations`."""
    decl = inplace_declarations(tg, mode)
    if not decl:
        return tg.graph
    g = tg.graph
    ops = [op.replace(inplace=[decl[op.name]]) if op.name in decl else op for op in g.ops]
    return Graph(g.tensors, ops, g.inputs, g.outputs, g.name)
