"""Channels-first operators between two transposes, computed channels-last: the ``AbsorbTransposes`` pass.

ONNX has only channels-first (NCHW) convolutions and pooling. A Keras model
exported without a transpose optimiser keeps its tensors channels-last (NHWC)
and wraps every such operator in a pair of ``Transpose`` nodes::

    permute_dims(x, [0, 3, 1, 2]) -> conv2d (NCHW) -> permute_dims(y, [0, 2, 3, 1])

Each transpose is a copy of the tensor: both layouts are alive while it runs,
and :class:`~tvm_memsched.relax.passes.layout.ConvolutionLayout` keeps such a
network channels-first (the copies stay). This pass computes the wrapped
operator channels-last instead: ``conv2d`` with data layout NHWC and its
constant weights re-laid HWIO (what ``ConvolutionLayout`` converts to),
``max_pool2d`` / ``avg_pool2d`` / ``adaptive_avg_pool2d`` with layout NHWC;
both transposes go. The module is marked as converted from NCHW
(:data:`~tvm_memsched.relax.passes.layout.CONVERTED_ATTR`), so that
:class:`~tvm_memsched.relax.passes.layout.ChannelsFirstReduction` sums every
converted convolution in the NCHW order of TVM's default build: outputs stay
bit-identical.

Only a sandwich is rewritten: the operator reads a ``[0, 3, 1, 2]`` transpose,
its result is used once, by a ``[0, 2, 3, 1]`` transpose, and a convolution's
weights are a constant; anything else is left as it is.

Example
-------
>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType([1, 8, 8, 3], "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         t = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
...         p = bb.emit(relax.op.nn.max_pool2d(t, 2, 2))
...         y = bb.emit_output(relax.op.permute_dims(p, [0, 2, 3, 1]))
...     gv = bb.emit_func_output(y)
>>> new, absorbed = absorb_transposes(bb.finalize())
>>> absorbed, [b.value.op.name for b in new["main"].body.blocks[0].bindings]
(['relax.nn.max_pool2d'], ['relax.nn.max_pool2d'])
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import tvm
from tvm import relax

from ..ir import var_occurrences
from ..rewrite import replace_bindings
from .layout import CONVERTED_ATTR
from .shrink_constants import constant_value

__all__ = ["AbsorbTransposes", "absorb_transposes", "WINDOW_OPS"]

#: channels-first operators computed channels-last when wrapped in transposes
WINDOW_OPS = ("relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d", "relax.nn.adaptive_avg_pool2d")
_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _permute_of(value, axes):
    """The tensor ``value`` transposes by ``axes`` (``permute_dims``), else None."""
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.permute_dims" \
            and value.attrs.axes is not None and [int(a) for a in value.attrs.axes] == axes:
        return value.args[0]
    return None


def _channels_last(call, x, var2val):
    """``call`` (a channels-first window operator) computed channels-last on ``x``, or None."""
    a, name = call.attrs, call.op.name
    if name == "relax.nn.conv2d":
        w = constant_value(call.args[1], var2val)
        if str(a.data_layout) != "NCHW" or str(a.out_layout or a.data_layout) != "NCHW" or w is None \
                or sorted(str(a.kernel_layout)) != sorted("OIHW"):
            return None
        hwio = np.ascontiguousarray(np.transpose(w, [str(a.kernel_layout).index(c) for c in "HWIO"]))
        return relax.op.nn.conv2d(x, relax.const(hwio, str(hwio.dtype)), a.strides, a.padding, a.dilation,
                                  int(a.groups), "NHWC", "HWIO", "NHWC", a.out_dtype)
    if str(a.layout) != "NCHW" or str(a.out_layout or a.layout) != "NCHW":
        return None
    if name == "relax.nn.adaptive_avg_pool2d":
        return relax.op.nn.adaptive_avg_pool2d(x, a.output_size, "NHWC", "NHWC")
    pool = relax.op.nn.max_pool2d if name == "relax.nn.max_pool2d" else relax.op.nn.avg_pool2d
    return pool(x, a.pool_size, a.strides, a.padding, a.dilation, bool(a.ceil_mode), bool(a.count_include_pad),
                "NHWC", "NHWC")


def _sandwiches(func, block) -> dict:
    """``{outer transpose var: (channels-last call, op name)}`` for the sandwiches of ``block``."""
    var2val = relax.analysis.get_var2val(func)
    uses = Counter(var_occurrences(func.body))
    out = {}
    for b in block.bindings:
        inner = _permute_of(b.value, _TO_NHWC)
        call = var2val.get(inner) if isinstance(inner, relax.Var) else None
        if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op) and call.op.name in WINDOW_OPS) \
                or uses[inner] != 1 or not isinstance(call.args[0], relax.Var):
            continue
        x = _permute_of(var2val.get(call.args[0]), _TO_NCHW)
        if x is None:
            continue
        try:
            new = _channels_last(call, x, var2val)
        except (AttributeError, TypeError, ValueError):   # attributes of another TVM version: leave it
            new = None
        if new is not None:
            out[b.var] = (new, call.op.name)
    return out


def absorb_transposes(mod):
    """``(module, [op names rewritten])``: every transposed window operator of every Relax function computed
    channels-last (see the module docstring)."""
    absorbed, new_mod = [], mod
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function) or not isinstance(func.body, relax.SeqExpr):
            continue
        new_func = func
        for k in range(len(func.body.blocks)):
            block = new_func.body.blocks[k]
            if not isinstance(block, relax.DataflowBlock):
                continue
            found = _sandwiches(new_func, block)
            if not found:
                continue
            replaced = replace_bindings(new_func, k, {v: e for v, (e, _) in found.items()})
            if replaced is None:          # a type would change: keep the block
                continue
            new_func = replaced
            absorbed += [name for _, name in found.values()]
        if new_func is not func:
            if new_mod is mod:
                new_mod = mod.clone()
            new_mod[gv] = new_func
    if "relax.nn.conv2d" in absorbed:      # ChannelsFirstReduction: sums in TVM's NCHW order
        new_mod = new_mod.with_attr(CONVERTED_ATTR, True)
    return new_mod, absorbed


@tvm.transform.module_pass(opt_level=0, name="AbsorbTransposes")
class AbsorbTransposes:
    """Compute channels-first convolutions and pooling wrapped in transposes from and back to channels-last
    channels-last (see :mod:`tvm_memsched.relax.passes.absorb_transposes`); run at operator level.

    ``.absorbed`` lists the operators rewritten in the last run.

    Example
    -------
    >>> AbsorbTransposes().info.name
    'AbsorbTransposes'
    """

    def __init__(self):
        self.absorbed: list[str] = []

    def transform_module(self, mod, ctx):
        new, self.absorbed = absorb_transposes(mod)
        return new
