"""Build a TVM Relax IRModule from a zoo :class:`~tvm_memsched.zoo.netdef.Net` (NCHW, float32).

``main`` holds one dataflow block that computes the layers in program order:

==================  ===========================================================
layer               Relax
==================  ===========================================================
conv2d              ``nn.conv2d`` (OIHW, explicit 4-sided padding) + ``add`` bias
depthwise_conv2d    ``nn.conv2d`` with ``groups = C``
fused activation    ``nn.relu`` / ``nn.relu6``
relu / relu6        ``nn.relu`` / ``nn.relu6``
add                 ``add``
concat              ``concat(axis=1)``
avg_pool2d          ``nn.avg_pool2d(count_include_pad=False)`` (the TFLite SAME average)
max_pool2d          ``nn.max_pool2d``
global_avg_pool     ``mean(axis=[2, 3])``
dense               ``matmul`` with the transposed weight + ``add`` bias
strided_slice       ``strided_slice``
upsample_nearest    ``image.resize2d`` nearest, asymmetric, floor
==================  ===========================================================

Weights are constants by default. With ``params_as_inputs=True`` they become
parameters of ``main`` after the input, in the order of :func:`relax_params`
(conv weights OIHW, biases ``(1, C, 1, 1)``, dense weights transposed to
``(in, units)``, dense biases ``(1, units)``).

Example
-------
>>> from tvm_memsched.zoo.netdef import NetBuilder
>>> b = NetBuilder("toy")
>>> x = b.input((1, 3, 8, 8))
>>> net = b.build(b.conv2d(x, 4, 3, act="relu"))
>>> [p.name for p in net_to_relax(net)["main"].params]
['input']
>>> mod = net_to_relax(net, params_as_inputs=True)
>>> [p.name for p in mod["main"].params]
['input', 'conv_weight', 'conv_bias']
"""

from __future__ import annotations

import re
from typing import Mapping

import numpy as np

from .netdef import Net

__all__ = ["net_to_relax", "relax_params", "relax_name"]


def relax_name(name: str) -> str:
    """A valid identifier for a layer or parameter name (``cell0/pre0/conv`` -> ``cell0_pre0_conv``)."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if s and not s[0].isdigit() else f"v_{s}"


def relax_params(net: Net, weights: Mapping[str, np.ndarray] | None = None, *, seed: int = 0
                 ) -> list[tuple[str, np.ndarray]]:
    """``(parameter name, array)`` for every weight, in Relax layout and in parameter order."""
    if weights is None:
        weights = net.weights(seed)
    out = []
    for l in net.layers:
        w = weights.get(f"{l.name}.weight")
        b = weights.get(f"{l.name}.bias")
        if l.op in ("conv2d", "depthwise_conv2d"):
            out.append((relax_name(f"{l.name}.weight"), np.asarray(w, np.float32)))
            if b is not None:
                out.append((relax_name(f"{l.name}.bias"), np.asarray(b, np.float32).reshape(1, -1, 1, 1)))
        elif l.op == "dense":
            out.append((relax_name(f"{l.name}.weight"), np.ascontiguousarray(np.asarray(w, np.float32).T)))
            if b is not None:
                out.append((relax_name(f"{l.name}.bias"), np.asarray(b, np.float32).reshape(1, -1)))
    seen = set()
    for k, _ in out:
        if k in seen:
            raise ValueError(f"two parameters map to the Relax name {k!r}; rename the layers")
        seen.add(k)
    return out


def net_to_relax(net: Net, weights: Mapping[str, np.ndarray] | None = None, *, params_as_inputs: bool = False,
                 seed: int = 0):
    """The Relax IRModule of ``net`` (see the module docstring)."""
    from tvm import relax

    op = relax.op
    params = relax_params(net, weights, seed=seed)
    x = relax.Var(relax_name(net.input), relax.TensorType(list(net.input_shape), "float32"))
    if params_as_inputs:
        pvars = {k: relax.Var(k, relax.TensorType(list(a.shape), "float32")) for k, a in params}
        fparams = [x] + list(pvars.values())
    else:
        pvars = {k: relax.const(a) for k, a in params}
        fparams = [x]

    def param(layer, what):
        return pvars.get(relax_name(f"{layer.name}.{what}"))

    bb = relax.BlockBuilder()
    with bb.function("main", fparams):
        with bb.dataflow():
            env = {net.input: x}
            for l in net.layers:
                if l.op == "input":
                    continue
                exprs = _layer_exprs(op, l, [env[i] for i in l.inputs], param)
                name = relax_name(l.name)
                last = len(exprs) - 1
                for i, make in enumerate(exprs):
                    e = make(env.get(l.name))
                    if l.name == net.output and i == last:
                        env[l.name] = bb.emit_output(e, name)
                    else:
                        env[l.name] = bb.emit(e, name if i == last else f"{name}_{i}")
        bb.emit_func_output(env[net.output])
    return bb.finalize()


def _layer_exprs(op, l, ins, param):
    """Builders of the successive expressions of one layer; each takes the previous result."""
    a = l.attrs
    steps = []
    if l.op in ("conv2d", "depthwise_conv2d"):
        w, b = param(l, "weight"), param(l, "bias")
        groups = a["groups"]
        steps.append(lambda _: op.nn.conv2d(ins[0], w, strides=a["stride"], padding=a["pads"],
                                            dilation=a["dilation"], groups=groups))
        if b is not None:
            steps.append(lambda y: op.add(y, b))
        steps += _act(op, a["act"])
    elif l.op == "relu":
        steps.append(lambda _: op.nn.relu(ins[0]))
    elif l.op == "relu6":
        steps.append(lambda _: op.nn.relu6(ins[0]))
    elif l.op == "add":
        steps.append(lambda _: op.add(ins[0], ins[1]))
        steps += _act(op, a["act"])
    elif l.op == "concat":
        steps.append(lambda _: op.concat(list(ins), axis=1))
    elif l.op == "avg_pool2d":
        steps.append(lambda _: op.nn.avg_pool2d(ins[0], pool_size=a["kernel"], strides=a["stride"],
                                                padding=a["pads"], count_include_pad=False))
    elif l.op == "max_pool2d":
        steps.append(lambda _: op.nn.max_pool2d(ins[0], pool_size=a["kernel"], strides=a["stride"],
                                                padding=a["pads"]))
    elif l.op == "global_avg_pool":
        steps.append(lambda _: op.mean(ins[0], axis=[2, 3], keepdims=False))
    elif l.op == "dense":
        w, b = param(l, "weight"), param(l, "bias")
        steps.append(lambda _: op.matmul(ins[0], w))
        if b is not None:
            steps.append(lambda y: op.add(y, b))
        steps += _act(op, a["act"])
    elif l.op == "strided_slice":
        steps.append(lambda _: op.strided_slice(ins[0], axes=[0, 1, 2, 3], begin=list(a["begin"]),
                                                end=list(a["end"]), strides=list(a["strides"])))
    elif l.op == "upsample_nearest":
        steps.append(lambda _: op.image.resize2d(ins[0], size=(l.shape[2], l.shape[3]), layout="NCHW",
                                                 method="nearest_neighbor",
                                                 coordinate_transformation_mode="asymmetric",
                                                 rounding_method="floor"))
    else:
        raise ValueError(f"layer '{l.name}': no Relax mapping for op '{l.op}'")
    return steps


def _act(op, act):
    if act == "relu":
        return [lambda y: op.nn.relu(y)]
    if act == "relu6":
        return [lambda y: op.nn.relu6(y)]
    return []
