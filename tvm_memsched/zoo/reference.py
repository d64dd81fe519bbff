"""A numpy reference executor for zoo nets (NCHW).

It defines what every layer computes; the TFLite and Relax exporters are tested
against it, the weight generator folds batch norm with it, and the int8 exporter
calibrates activation ranges with it.

Example
-------
>>> import numpy as np
>>> from tvm_memsched.zoo.netdef import NetBuilder
>>> b = NetBuilder("toy")
>>> x = b.input((1, 1, 4, 4))
>>> net = b.build(b.avg_pool2d(x, 3, stride=2))     # SAME padding, padded cells not counted
>>> y = forward(net, np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4), {})
>>> y[0, 0]
array([[ 5. ,  6.5],
       [11. , 12.5]])
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

__all__ = ["forward", "run_layer", "apply_act", "conv2d", "depthwise_conv2d", "pool2d"]


def _pad(x: np.ndarray, pads, value=0.0) -> np.ndarray:
    t, l, b, r = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=value)


def _windows(x: np.ndarray, kernel, stride, dilation, out_hw):
    """Yield ``(i, j, view)``: the input pixels seen by kernel tap ``(i, j)`` for every output pixel."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, x[:, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]


def _out_hw(x_padded: np.ndarray, kernel, stride, dilation):
    h, w = x_padded.shape[2:]
    return ((h - (kernel[0] - 1) * dilation[0] - 1) // stride[0] + 1,
            (w - (kernel[1] - 1) * dilation[1] - 1) // stride[1] + 1)


def conv2d(x, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """Dense convolution: ``x`` NCHW, ``w`` OIHW, optional bias ``b`` of shape ``(O,)``."""
    xp = _pad(x, pads)
    o, c, kh, kw = w.shape
    oh, ow = _out_hw(xp, (kh, kw), stride, dilation)
    if kh == kw == 1:
        cols = xp[:, :, : (oh - 1) * stride[0] + 1: stride[0], : (ow - 1) * stride[1] + 1: stride[1]]
        y = np.tensordot(w[:, :, 0, 0], cols, axes=([1], [1]))          # (O, N, oh, ow)
    else:
        cols = np.empty((x.shape[0], c, kh, kw, oh, ow), dtype=np.result_type(x, w))
        for i, j, v in _windows(xp, (kh, kw), stride, dilation, (oh, ow)):
            cols[:, :, i, j] = v
        y = np.tensordot(w, cols, axes=([1, 2, 3], [1, 2, 3]))          # (O, N, oh, ow)
    y = y.transpose(1, 0, 2, 3)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return np.ascontiguousarray(y)


def depthwise_conv2d(x, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """Depthwise convolution: ``w`` has shape ``(C, 1, kh, kw)``."""
    xp = _pad(x, pads)
    kh, kw = w.shape[2:]
    oh, ow = _out_hw(xp, (kh, kw), stride, dilation)
    y = np.zeros((x.shape[0], x.shape[1], oh, ow), dtype=np.result_type(x, w))
    for i, j, v in _windows(xp, (kh, kw), stride, dilation, (oh, ow)):
        y += v * w[:, 0, i, j].reshape(1, -1, 1, 1)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def pool2d(x, kind: str, kernel, stride, pads) -> np.ndarray:
    """Max or average pooling; padded cells never win a max and are not counted in an average."""
    if kind == "max":
        xp = _pad(x, pads, -np.inf)
        oh, ow = _out_hw(xp, kernel, stride, (1, 1))
        y = np.full((x.shape[0], x.shape[1], oh, ow), -np.inf, dtype=x.dtype)
        for _, _, v in _windows(xp, kernel, stride, (1, 1), (oh, ow)):
            np.maximum(y, v, out=y)
        return y
    xp = _pad(x, pads)
    ones = _pad(np.ones((1, 1) + x.shape[2:], dtype=x.dtype), pads)
    oh, ow = _out_hw(xp, kernel, stride, (1, 1))
    y = np.zeros((x.shape[0], x.shape[1], oh, ow), dtype=x.dtype)
    n = np.zeros((1, 1, oh, ow), dtype=x.dtype)
    for (_, _, v), (_, _, c) in zip(_windows(xp, kernel, stride, (1, 1), (oh, ow)),
                                    _windows(ones, kernel, stride, (1, 1), (oh, ow))):
        y += v
        n += c
    return y / n


def apply_act(y: np.ndarray, act) -> np.ndarray:
    """Apply a fused activation (``None``, ``"relu"`` or ``"relu6"``)."""
    if act == "relu":
        return np.maximum(y, 0)
    if act == "relu6":
        return np.clip(y, 0, 6)
    return y


def run_layer(layer, inputs: list, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    """Output of one (non-input) :class:`~.netdef.Layer` given its input arrays and the net's weights."""
    a, op = layer.attrs, layer.op
    w = weights.get(f"{layer.name}.weight")
    b = weights.get(f"{layer.name}.bias")
    x = inputs[0]
    if op == "conv2d":
        return apply_act(conv2d(x, w, b, a["stride"], a["pads"], a["dilation"]), a["act"])
    if op == "depthwise_conv2d":
        return apply_act(depthwise_conv2d(x, w, b, a["stride"], a["pads"], a["dilation"]), a["act"])
    if op == "relu":
        return np.maximum(x, 0)
    if op == "relu6":
        return np.clip(x, 0, 6)
    if op == "add":
        return apply_act(inputs[0] + inputs[1], a["act"])
    if op == "concat":
        return np.concatenate(inputs, axis=1)
    if op == "avg_pool2d":
        return pool2d(x, "avg", a["kernel"], a["stride"], a["pads"])
    if op == "max_pool2d":
        return pool2d(x, "max", a["kernel"], a["stride"], a["pads"])
    if op == "global_avg_pool":
        return x.mean(axis=(2, 3))
    if op == "dense":
        y = x @ w.T
        if b is not None:
            y = y + b
        return apply_act(y, a["act"])
    if op == "strided_slice":
        # axis 0 is the batch (always the whole of it; calibration runs batches of several images)
        idx = (slice(None),) + tuple(slice(b_, e_, s_) for b_, e_, s_ in
                                     zip(a["begin"][1:], a["end"][1:], a["strides"][1:]))
        return np.ascontiguousarray(x[idx])
    if op == "upsample_nearest":
        f = a["factor"]
        return x.repeat(f, axis=2).repeat(f, axis=3)
    raise ValueError(f"no reference for op '{op}'")


def forward(net, x: np.ndarray, weights: Mapping[str, np.ndarray], *, keep_all: bool = False):
    """Run ``net`` (a :class:`~.netdef.Net`) on the NCHW input ``x`` (computing in ``x``'s dtype).

    Returns the output array, or with ``keep_all=True`` a dict of every layer's
    output (the input included). Intermediate results are freed after their last
    reader otherwise.
    """
    x = np.asarray(x)
    if tuple(x.shape) != net.input_shape:
        raise ValueError(f"input shape {x.shape} does not match the net's {net.input_shape}")
    weights = {k: np.asarray(v, dtype=x.dtype) for k, v in weights.items()}
    remaining = {name: len(c) for name, c in net.consumers().items()}
    acts = {net.input: x}
    for layer in net.layers:
        if layer.op == "input":
            continue
        y = run_layer(layer, [acts[i] for i in layer.inputs], weights)
        if tuple(y.shape) != layer.shape:
            raise AssertionError(f"layer '{layer.name}' produced {y.shape}, expected {layer.shape}")
        acts[layer.name] = y
        if not keep_all:
            for i in dict.fromkeys(layer.inputs):
                remaining[i] -= 1
                if remaining[i] == 0 and i != net.output:
                    del acts[i]
    return acts if keep_all else acts[net.output]
