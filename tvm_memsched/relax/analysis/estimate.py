"""A quick estimate of what our pipeline will plan for a Relax module, before any lowering.

Choices made on the imported operators (where to patch-tile, whether to run the
convolutions channels-last) need a score that compiling every alternative would
make too slow. :func:`estimated_peak` schedules ``main``'s dataflow block with
our scheduler, counting the overlaps in-place execution will (at best) find:

* element-wise operators write over a same-sized input (same index);
* a window operator (``conv2d``, pooling) trails its input by the lag of
  :func:`~tvm_memsched.core.windows.nhwc_window_shift`: channels-last, any
  convolution (output pixels are finished one by one); channels-first, only
  depthwise convolutions and pooling, plane by plane (any other convolution
  reads every input plane for each output plane);
* transposes and everything else: no overlap.

The final plan is exact (traced from the kernels' TIR); this only ranks choices.

Example
-------
>>> from tvm_memsched.relax.testing import conv_stack_module
>>> estimated_peak(conv_stack_module("NHWC", size=16)) <= estimated_peak(conv_stack_module("NHWC", size=32))
True
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..ir import expr_shape as _shape

__all__ = ["estimated_peak", "inplace_estimate"]

_WINDOW = {"relax.nn.conv2d", "relax.nn.max_pool2d", "relax.nn.avg_pool2d"}
_ELEMENTWISE = {"relax.nn.relu", "relax.clip", "relax.sigmoid", "relax.tanh", "relax.nn.silu", "relax.nn.gelu",
                "relax.nn.gelu_tanh", "relax.nn.leakyrelu", "relax.negative", "relax.abs", "relax.astype",
                "relax.exp", "relax.sqrt", "relax.rsqrt", "relax.square", "relax.erf", "relax.add",
                "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum", "relax.minimum",
                "relax.power", "relax.nn.prelu", "relax.quantize", "relax.dequantize"}


def _itemsize(expr) -> int:
    return max(1, tvm.runtime.DataType(str(expr.ty.dtype)).bits // 8)


def _window_shift(value) -> int | None:
    """The lag (bytes) of a window operator's output behind its input, or None when it cannot overlap."""
    from ...core.windows import nhwc_window_shift

    x = value.args[0]
    xs, ys = _shape(x), _shape(value)
    if xs is None or ys is None or len(xs) != 4 or len(ys) != 4:
        return None
    a = value.attrs
    conv = value.op.name == "relax.nn.conv2d"
    layout = str(a.data_layout if conv else a.layout)
    if layout not in ("NCHW", "NHWC"):
        return None
    c_in = xs[3] if layout == "NHWC" else xs[1]
    if conv:
        w, kl = _shape(value.args[1]), str(a.kernel_layout)
        kernel = (w[kl.index("H")], w[kl.index("W")])
        depthwise = int(a.groups) > 1
        if depthwise and int(a.groups) != c_in:
            return None
    else:
        kernel, depthwise = tuple(int(k) for k in a.pool_size), False
    pad = [int(p) for p in a.padding]
    kw = dict(kernel=kernel, stride=tuple(int(v) for v in a.strides), pad_before=(pad[0], pad[1]),
              itemsize=(_itemsize(x), _itemsize(value)), dilation=tuple(int(v) for v in a.dilation),
              depthwise=depthwise, pool=not conv)
    if layout == "NHWC":
        return nhwc_window_shift(xs, ys, **kw)
    if conv and not depthwise:
        return None                                   # channels-first: every output plane reads every input
    # one plane at a time: the lag of a single-channel plane (the first plane is the tightest)
    return nhwc_window_shift((1, xs[2], xs[3], 1), (1, ys[2], ys[3], 1), **kw)


def inplace_estimate(value, op, sizes: dict) -> list:
    """``[(output, input, shift)]`` for graph op ``op`` of binding value ``value`` (see the module docs)."""
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)) or len(op.outputs) != 1 \
            or not op.inputs:
        return []
    name, out = value.op.name, op.outputs[0]
    if name in _WINDOW and isinstance(value.args[0], relax.Var):
        src = next((t for t in op.inputs if t.endswith(f":{value.args[0].name}")), None)
        shift = _window_shift(value) if src is not None else None
        return [(out, src, shift)] if shift is not None and shift < sizes[out] else []
    if name in _ELEMENTWISE:
        same = [t for t in op.inputs if sizes.get(t) == sizes[out]]
        return [(out, same[0], 0)] if same else []
    return []


def estimated_peak(mod, time_limit: float = 2.0, method: str = "auto") -> int:
    """Our scheduler's (``method``) peak for ``mod``'s ``main`` dataflow block with the overlaps of
    :func:`inplace_estimate` (program order if it cannot be scheduled)."""
    from ...core.graph import Graph
    from ...core.simulate import peak_bytes
    from ...schedulers import schedule
    from ..graph import block_to_graph

    func = mod["main"]
    k = next(i for i, b in enumerate(func.body.blocks) if isinstance(b, relax.DataflowBlock))
    bg = block_to_graph(func, k, name="main")
    g = bg.graph
    sizes = dict(zip((t.name for t in g.tensors), g.size))
    ops = []
    for op in g.ops:
        decl = inplace_estimate(bg.block.bindings[bg.binding_of_op[op.name]].value, op, sizes)
        ops.append(op.replace(inplace=decl) if decl else op)
    try:
        g = Graph(g.tensors, ops, g.inputs, g.outputs, g.name)
    except Exception:  # noqa: BLE001 - a declaration the graph refuses: estimate without overlaps
        pass
    try:
        return schedule(g, method, time_limit=time_limit).peak_bytes
    except Exception:  # noqa: BLE001 - a scheduler failure must not hide the estimate: program order
        return peak_bytes(g, [op.name for op in g.ops])
