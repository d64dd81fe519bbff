"""Convert a zoo :class:`~tvm_memsched.zoo.netdef.Net` to the framework-neutral core :class:`Graph`.

One op per layer (the input layer becomes the graph input tensor), one tensor
per layer output, named like the layer. Tensor sizes are ``prod(shape) *
itemsize`` (4 bytes for float32, 1 for int8). Identity aliases never exist as
layers, so skip connections simply read the same tensor. Op ``attrs`` carry:

* ``kind`` - the layer's op (``conv2d``, ``depthwise_conv2d``, ``add``, ...);
* ``shape`` - the output shape (NCHW, batch 1);
* ``scope`` - the layer's scope path (``"cell3/node2/op0_sep_conv_3x3"``); its
  first component is the cell/stage (``"cell3"``), which HMCOS-style schedulers
  can use as the initial grouping;
* ``macs`` - multiply-accumulates (convolutions and dense layers, else 0);
* ``param_bytes`` - weight bytes in ``dtype`` (int8: 1 per weight, 4 per bias).

Example
-------
>>> from tvm_memsched.zoo.netdef import NetBuilder
>>> b = NetBuilder("toy")
>>> x = b.input((1, 3, 8, 8))
>>> g = net_to_graph(b.build(b.relu(b.conv2d(x, 4, 3))), dtype="int8")
>>> g.inputs, g.outputs, g.tensor_bytes("conv"), g.op("conv").attrs["param_bytes"]
(('input',), ('relu',), 256, 124)
"""

from __future__ import annotations

from ..core.graph import Graph, Op
from .netdef import Net

__all__ = ["net_to_graph", "ITEMSIZE"]

ITEMSIZE = {"float32": 4, "int8": 1}


def net_to_graph(net: Net, dtype: str = "float32") -> Graph:
    """The core :class:`Graph` of ``net`` with activations of ``dtype`` (``"float32"`` or ``"int8"``)."""
    if dtype not in ITEMSIZE:
        raise ValueError(f"dtype must be one of {sorted(ITEMSIZE)}, got {dtype!r}")
    size = ITEMSIZE[dtype]
    tensors = [(l.name, l.numel * size) for l in net.layers]
    ops = []
    for l in net.layers:
        if l.op == "input":
            continue
        attrs = {"kind": l.op, "shape": list(l.shape), "scope": l.scope, "macs": net.macs(l),
                 "param_bytes": net.param_bytes(l, dtype)}
        ops.append(Op(l.name, list(l.inputs), [l.name], 0, attrs))
    return Graph(tensors, ops, inputs=[net.input], outputs=[net.output], name=net.name)
