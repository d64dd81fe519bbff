"""One PyTorch network written as different exporters write it: the inputs of the exporter-style benchmarks.

The same trained network reaches users in different spellings. PyTorch's
TorchScript exporter folds a batch norm that follows a convolution into its
weights and keeps the others as ``BatchNormalization``; ``torch.export`` keeps
every batch norm; Caffe2-era ONNX files normalise and then scale (``Mul``) and
shift (``Add``) apart; others hold only the folded ``Mul`` + ``Add``, spell the
batch norm out as ``Sub`` / ``Div`` / ``Mul`` / ``Add``, or (Keras through an
exporter without a transpose optimiser) keep the tensors channels-last and wrap
every convolution and pooling in ``Transpose`` nodes. :func:`export_style`
writes a :mod:`~tvm_memsched.zoo.torch_nets` network in each spelling of
:data:`STYLES`:

* ``onnx`` - :func:`~tvm_memsched.zoo.torch_nets.export_onnx` as is (what
  torchvision's and timm's ONNX files hold);
* ``pt2`` - :func:`~tvm_memsched.zoo.torch_nets.export_pt2`;
* ``caffe2`` - every batch norm (also those after a convolution) as
  ``BatchNormalization`` with scale 1 and bias 0, then ``Mul`` by gamma and
  ``Add`` of beta, both ``[1, C, 1, 1]`` constants;
* ``affine`` - every batch norm as ``Mul`` by ``gamma / sqrt(var + eps)`` and
  ``Add`` of ``beta - mean * gamma / sqrt(var + eps)`` (folded statistics);
* ``decomposed`` - every batch norm spelled out as ``Sub`` mean, ``Div`` by
  ``Sqrt(Add(var, eps))`` (computed in the graph, on constants), ``Mul`` gamma,
  ``Add`` beta (Paddle- and hand-written-style);
* ``keras`` - channels-last: an NHWC input, ``Transpose`` to NCHW before every
  ``Conv`` / pooling and back after it, batch norms as ``Mul`` + ``Add`` of
  ``[C]`` constants (TensorFlow's inference batch norm), ``Concat`` on axis 3,
  ``GlobalAveragePool`` as ``ReduceMean`` over axes 1 and 2 and the classifier as
  ``MatMul`` + ``Add``.

The ONNX styles are written by graph surgery on the TorchScript export made
without constant folding (every ``BatchNormalization`` kept, with the module's
statistics), so every file computes the network's function up to float
rounding; :func:`style_input` is the example input in the file's layout.

Example
-------
>>> import io, onnx
>>> from tvm_memsched.zoo import torch_nets
>>> net = torch_nets.densenet(0.25, 10, blocks=(1,), growth=8)
>>> f = io.BytesIO()
>>> export_style(net, "affine", f, image_size=16)
>>> sorted({n.op_type for n in onnx.load_from_string(f.getvalue()).graph.node} & {"BatchNormalization", "Mul"})
['Mul']
"""

from __future__ import annotations

import io
import warnings

import numpy as np

from ..core.files import atomic_write
from . import torch_nets

__all__ = ["STYLES", "export_style", "style_input", "style_bytes"]

#: the spellings :func:`export_style` writes (see the module docstring)
STYLES = ("onnx", "pt2", "caffe2", "affine", "decomposed", "keras")

_NCHW_TO_NHWC = [0, 2, 3, 1]
_NHWC_TO_NCHW = [0, 3, 1, 2]


def style_input(style: str, image_size: int = 224, seed: int = 0) -> np.ndarray:
    """:func:`~tvm_memsched.zoo.torch_nets.example_input` in the layout of ``style``'s file (NHWC for keras).

    >>> style_input("keras", 8).shape, style_input("onnx", 8).shape
    ((1, 8, 8, 3), (1, 3, 8, 8))
    """
    x = torch_nets.example_input(image_size, seed=seed).numpy()
    return np.ascontiguousarray(x.transpose(_NCHW_TO_NHWC)) if style == "keras" else x


def style_bytes(net, style: str, image_size: int = 224) -> bytes:
    """The file :func:`export_style` writes, as bytes."""
    if style not in STYLES:
        raise ValueError(f"unknown exporter style {style!r}; use one of {', '.join(STYLES)}")
    buf = io.BytesIO()
    if style == "pt2":
        torch_nets.export_pt2(net, buf, image_size)
        return buf.getvalue()
    if style == "onnx":
        torch_nets.export_onnx(net, buf, image_size)
        return buf.getvalue()
    import onnx

    model = onnx.load_from_string(_unfolded_export(net, image_size))
    _REWRITES[style](model)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def export_style(net, style: str, f, image_size: int = 224) -> None:
    """Write ``net`` (a :mod:`~tvm_memsched.zoo.torch_nets` network) to ``f`` (a path or a binary file) as
    exporter ``style`` writes it (:data:`STYLES`, see the module docstring); input ``input``, output
    ``output``."""
    data = style_bytes(net, style, image_size)
    if hasattr(f, "write"):
        f.write(data)
    else:
        atomic_write(f, data)


def _unfolded_export(net, image_size: int) -> bytes:
    """The TorchScript ONNX export without constant folding: every batch norm a ``BatchNormalization``."""
    import torch

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch_nets.example_input(image_size),), buf, input_names=["input"],
                          output_names=["output"], opset_version=17, dynamo=False, do_constant_folding=False)
    return buf.getvalue()


class _Surgery:
    """Replace nodes of an ONNX graph in order; new constants get unique names."""

    def __init__(self, model):
        from onnx import numpy_helper

        self.model, self.graph = model, model.graph
        self.values = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        self.nodes: list = []
        self.count = 0

    def const(self, arr, hint: str) -> str:
        from onnx import numpy_helper

        self.count += 1
        name = f"{hint}_{self.count}"
        self.graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def tmp(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_t{self.count}"

    def node(self, op: str, inputs, outputs, **attrs) -> None:
        from onnx import helper

        self.nodes.append(helper.make_node(op, list(inputs), list(outputs), **attrs))

    def batch_norm(self, node):
        """``(x, gamma, beta, mean, var, eps)`` of a ``BatchNormalization`` node."""
        x, s, b, m, v = node.input[:5]
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        return (x,) + tuple(self.values[n].astype(np.float32) for n in (s, b, m, v)) + (np.float32(eps),)

    def finish(self) -> None:
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)
        used = {i for n in self.graph.node for i in n.input}
        keep = [t for t in self.graph.initializer if t.name in used]
        del self.graph.initializer[:]
        self.graph.initializer.extend(keep)
        del self.graph.value_info[:]


def _folded(gamma, beta, mean, var, eps):
    """``(scale, shift)`` of a batch norm in inference: ``x * scale + shift``."""
    scale = (gamma / np.sqrt(var + eps)).astype(np.float32)
    return scale, (beta - mean * scale).astype(np.float32)


def _per_channel(a) -> np.ndarray:
    return np.asarray(a, np.float32).reshape(1, -1, 1, 1)


def _caffe2(model) -> None:
    s = _Surgery(model)
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            s.nodes.append(node)
            continue
        x, gamma, beta, mean, var, eps = s.batch_norm(node)
        c = gamma.size
        normed, scaled = s.tmp("bn"), s.tmp("scaled")
        s.node("BatchNormalization", [x, s.const(np.ones(c, np.float32), "one"),
                                      s.const(np.zeros(c, np.float32), "zero"), s.const(mean, "mean"),
                                      s.const(var, "var")], [normed], epsilon=float(eps))
        s.node("Mul", [normed, s.const(_per_channel(gamma), "gamma")], [scaled])
        s.node("Add", [scaled, s.const(_per_channel(beta), "beta")], [node.output[0]])
    s.finish()


def _affine(model) -> None:
    s = _Surgery(model)
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            s.nodes.append(node)
            continue
        x, gamma, beta, mean, var, eps = s.batch_norm(node)
        scale, shift = _folded(gamma, beta, mean, var, eps)
        scaled = s.tmp("scaled")
        s.node("Mul", [x, s.const(_per_channel(scale), "scale")], [scaled])
        s.node("Add", [scaled, s.const(_per_channel(shift), "shift")], [node.output[0]])
    s.finish()


def _decomposed(model) -> None:
    s = _Surgery(model)
    for node in model.graph.node:
        if node.op_type != "BatchNormalization":
            s.nodes.append(node)
            continue
        x, gamma, beta, mean, var, eps = s.batch_norm(node)
        centred, var_eps, std, normed, scaled = (s.tmp(h) for h in ("centred", "var_eps", "std", "normed", "sc"))
        s.node("Sub", [x, s.const(_per_channel(mean), "mean")], [centred])
        s.node("Add", [s.const(_per_channel(var), "var"), s.const(np.float32(eps), "eps")], [var_eps])
        s.node("Sqrt", [var_eps], [std])
        s.node("Div", [centred, std], [normed])
        s.node("Mul", [normed, s.const(_per_channel(gamma), "gamma")], [scaled])
        s.node("Add", [scaled, s.const(_per_channel(beta), "beta")], [node.output[0]])
    s.finish()


def _keras(model) -> None:
    """Channels-last throughout (see the module docstring)."""
    from onnx import helper

    s = _Surgery(model)
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in model.graph.input}
    for node in model.graph.node:
        op = node.op_type
        four_d = ranks.get(node.input[0] if node.input else "", 0) == 4
        if op in ("Conv", "MaxPool", "AveragePool") and four_d:
            to_nchw, out_nchw = s.tmp("nchw"), s.tmp("conv")
            s.node("Transpose", [node.input[0]], [to_nchw], perm=_NHWC_TO_NCHW)
            new = helper.make_node(op, [to_nchw] + list(node.input[1:]), [out_nchw], name=node.name)
            new.attribute.extend(node.attribute)
            s.nodes.append(new)
            s.node("Transpose", [out_nchw], [node.output[0]], perm=_NCHW_TO_NHWC)
        elif op == "BatchNormalization":
            x, gamma, beta, mean, var, eps = s.batch_norm(node)
            scale, shift = _folded(gamma, beta, mean, var, eps)
            scaled = s.tmp("scaled")
            s.node("Mul", [x, s.const(scale, "scale")], [scaled])
            s.node("Add", [scaled, s.const(shift, "shift")], [node.output[0]])
        elif op == "Concat" and four_d:
            s.node("Concat", node.input, node.output, axis=3)
        elif op == "GlobalAveragePool":
            s.node("ReduceMean", node.input, node.output, axes=[1, 2], keepdims=1)
        elif op == "Gemm":
            x, w, b = node.input
            product = s.tmp("matmul")
            s.node("MatMul", [x, s.const(s.values[w].T, "kernel")], [product])
            s.node("Add", [product, b], node.output)
        elif op in ("Relu", "Add", "Mul", "Flatten", "Concat"):
            s.nodes.append(node)
        else:
            raise ValueError(f"the keras style does not rewrite {op} nodes")
        rank = 2 if op in ("Gemm", "Flatten") else ranks.get(node.input[0] if node.input else "", 0)
        ranks.update({o: rank for o in node.output})
    s.finish()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    n, c, h, w = (d.dim_value for d in dims)
    for d, v in zip(dims, (n, h, w, c)):
        d.dim_value = v


_REWRITES = {"caffe2": _caffe2, "affine": _affine, "decomposed": _decomposed, "keras": _keras}
