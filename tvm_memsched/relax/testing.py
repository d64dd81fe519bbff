"""Small Relax models for tests, docs and tutorials.

* :func:`branchy_module`: parallel conv branches joined by a concat (the classic
  case where the order decides the peak);
* :func:`random_module`: a random DAG of convolutions, depthwise convolutions,
  activations, adds, concats and poolings, optionally with several outputs.

Example
-------
>>> mod = random_module(seed=3, n_ops=12)
>>> mod["main"].params[0].name
'x'
"""

from __future__ import annotations

import random

import numpy as np
from tvm import relax

__all__ = ["branchy_module", "random_module", "weight", "conv_stack_module", "preactivation_module",
           "dense_block_module"]


def weight(rng: np.random.Generator, *shape, scale: float = 1.0) -> relax.Constant:
    """A constant weight of ``shape`` with fan-in-scaled normal values (activations stay O(1))."""
    fan_in = int(np.prod(shape[1:])) or 1
    return relax.const((rng.standard_normal(shape) * scale / np.sqrt(fan_in)).astype("float32"))


def branchy_module(branches: int = 4, channels: int = 8, size: int = 16, seed: int = 0):
    """``x -> branches x (3x3 conv -> relu -> 1x1 conv) -> concat -> 1x1 conv``."""
    rng = np.random.default_rng(seed)
    c = channels
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, c, size, size], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            outs = []
            for _ in range(branches):
                a = bb.emit(relax.op.nn.conv2d(x, weight(rng, 2 * c, c, 3, 3), padding=(1, 1)))
                a = bb.emit(relax.op.nn.relu(a))
                outs.append(bb.emit(relax.op.nn.conv2d(a, weight(rng, c, 2 * c, 1, 1))))
            cat = bb.emit(relax.op.concat(outs, axis=1))
            y = bb.emit_output(relax.op.nn.conv2d(cat, weight(rng, c, c * branches, 1, 1)))
        bb.emit_func_output(y)
    return bb.finalize()


def random_module(seed: int = 0, n_ops: int = 12, channels=(4, 8, 16), size: int = 8, multi_output: bool = True,
                  params_as_inputs: bool = False):
    """A random Relax DAG on ``1 x C x size x size`` feature maps.

    Ops: 3x3 conv, depthwise 3x3 conv, 1x1 conv, relu, add, concat (channels),
    max/avg pool 3x3 stride 1 (keeping the size). Tensors nobody reads become
    outputs (a tuple when there are several and ``multi_output``). With
    ``params_as_inputs`` the weights are function parameters and the result is
    ``(module, [weight arrays])``.
    """
    rng_py = random.Random(seed)
    rng = np.random.default_rng(seed)
    bb = relax.BlockBuilder()
    c0 = rng_py.choice(channels)
    x = relax.Var("x", relax.TensorType([1, c0, size, size], "float32"))
    weights: list[relax.Var] = []
    values = []

    def param(*shape):
        const = weight(rng, *shape)
        if not params_as_inputs:
            return const
        v = relax.Var(f"w{len(weights)}", relax.TensorType(list(shape), "float32"))
        weights.append(v)
        values.append(const.value.numpy())
        return v

    avail: list[tuple[str, int]] = [("x", c0)]
    plan = []
    for v in range(n_ops):
        kind = rng_py.choice(["conv3", "dw", "conv1", "relu", "add", "concat", "maxpool", "avgpool"])
        a, ca = rng_py.choice(avail)
        if kind == "add":
            same = [t for t in avail if t[1] == ca and t[0] != a]
            if not same:
                kind = "relu"
            else:
                b, _ = rng_py.choice(same)
                plan.append((kind, [a, b], ca))
                avail.append((f"t{v}", ca))
                continue
        if kind == "concat":
            others = [t for t in avail if t[0] != a]
            if not others:
                kind = "relu"
            else:
                b, cb = rng_py.choice(others)
                plan.append((kind, [a, b], ca + cb))
                avail.append((f"t{v}", ca + cb))
                continue
        cout = rng_py.choice(channels) if kind in ("conv3", "conv1") else ca
        plan.append((kind, [a], cout))
        avail.append((f"t{v}", cout))
    # emit
    wshapes = []
    for kind, ins, cout in plan:
        cin = dict(avail)[ins[0]]
        if kind == "conv3":
            wshapes.append((cout, cin, 3, 3))
        elif kind == "conv1":
            wshapes.append((cout, cin, 1, 1))
        elif kind == "dw":
            wshapes.append((cin, 1, 3, 3))
        else:
            wshapes.append(None)
    ws = [param(*s) if s is not None else None for s in wshapes]
    params = [x] + weights
    with bb.function("main", params):
        with bb.dataflow():
            env = {"x": x}
            read = set()
            for v, ((kind, ins, cout), w) in enumerate(zip(plan, ws)):
                a = env[ins[0]]
                read.update(ins)
                if kind == "conv3":
                    e = relax.op.nn.conv2d(a, w, padding=(1, 1))
                elif kind == "conv1":
                    e = relax.op.nn.conv2d(a, w)
                elif kind == "dw":
                    e = relax.op.nn.conv2d(a, w, padding=(1, 1), groups=dict(avail)[ins[0]])
                elif kind == "relu":
                    e = relax.op.nn.relu(a)
                elif kind == "add":
                    e = relax.op.add(a, env[ins[1]])
                elif kind == "concat":
                    e = relax.op.concat([a, env[ins[1]]], axis=1)
                elif kind == "maxpool":
                    e = relax.op.nn.max_pool2d(a, pool_size=(3, 3), strides=(1, 1), padding=(1, 1))
                else:
                    e = relax.op.nn.avg_pool2d(a, pool_size=(3, 3), strides=(1, 1), padding=(1, 1))
                env[f"t{v}"] = bb.emit(e, f"t{v}")
            loose = [f"t{v}" for v in range(len(plan)) if f"t{v}" not in read] or [f"t{len(plan) - 1}"]
            if multi_output and len(loose) > 1:
                out = bb.emit_output(relax.Tuple([env[t] for t in loose]))
            else:
                out = bb.emit_output(env[loose[-1]])
        bb.emit_func_output(out)
    mod = bb.finalize()
    return (mod, values) if params_as_inputs else mod


def conv_stack_module(layout: str = "NCHW", size: int = 24, channels: int = 8, seed: int = 0, *,
                      layers=None, batch_norm: bool = False):
    """A MobileNet-like stem: a list of ``(kind, out channels, kernel, stride, dilation, padding)`` layers
    (``kind``: ``conv``, ``dw`` (depthwise), ``max`` / ``avg`` pooling, ``relu6``, ``bias``), then a
    global mean and a dense head. ``layout``: NCHW or NHWC (weights OIHW / OHWI).

    Example
    -------
    >>> mod = conv_stack_module("NHWC", size=12)
    >>> [int(d) for d in mod["main"].params[0].ty.shape]
    [1, 12, 12, 3]
    """
    rng = np.random.default_rng(seed)
    if layers is None:
        layers = [("conv", channels, 3, 2, 1, 1), ("bias",), ("relu6",), ("dw", channels, 3, 1, 1, 1), ("relu6",),
                  ("conv", 2 * channels, 1, 1, 1, 0), ("dw", 2 * channels, 3, 2, 1, 1), ("relu6",),
                  ("conv", channels, 1, 1, 1, 0), ("max", channels, 2, 2, 1, 0)]
    nhwc = layout == "NHWC"
    shape = [1, size, size, 3] if nhwc else [1, 3, size, size]
    cax = 3 if nhwc else 1
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h, c = x, 3
            for spec in layers:
                kind = spec[0]
                if kind in ("conv", "dw"):
                    _, co, k, s, d, p = spec
                    groups = c if kind == "dw" else 1
                    co = c if kind == "dw" else co
                    w = weight(rng, co, c // groups, k, k)
                    if nhwc:
                        w = relax.const(np.transpose(w.value.numpy(), (0, 2, 3, 1)).copy())
                    h = bb.emit(relax.op.nn.conv2d(h, w, strides=s, padding=p, dilation=d, groups=groups,
                                                   data_layout=layout, kernel_layout="OHWI" if nhwc else "OIHW"))
                    c = co
                    if batch_norm:
                        ch = [c]
                        stats = [relax.const(rng.uniform(0.5, 1.5, ch).astype("float32")),
                                 relax.const(rng.standard_normal(ch).astype("float32") * 0.1),
                                 relax.const(rng.standard_normal(ch).astype("float32") * 0.1),
                                 relax.const(rng.uniform(0.5, 1.5, ch).astype("float32"))]
                        bn = bb.emit(relax.op.nn.batch_norm(h, *stats, axis=cax))
                        h = bb.emit(relax.TupleGetItem(bn, 0))
                elif kind in ("max", "avg"):
                    _, _, k, s, d, p = spec
                    fn = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d
                    h = bb.emit(fn(h, k, s, p, d, layout=layout))
                elif kind == "relu6":
                    h = bb.emit(relax.op.clip(h, 0.0, 6.0))
                elif kind == "bias":
                    b = rng.standard_normal(c).astype("float32")
                    h = bb.emit(relax.op.add(h, relax.const(b.reshape((1, 1, 1, c) if nhwc else (1, c, 1, 1)))))
            m = bb.emit(relax.op.mean(h, axis=[1, 2] if nhwc else [2, 3]))
            y = bb.emit_output(relax.op.matmul(m, weight(rng, c, 10)))
        bb.emit_func_output(y)
    return bb.finalize()


def preactivation_module(channels: int = 8, size: int = 16, seed: int = 0):
    """A pre-activation residual block: ``y = conv(x); z = conv(relu(y)); y + z`` (``y`` lives across the
    ``relu``, so TVM keeps ``relu(y)`` as a tensor of its own)."""
    rng = np.random.default_rng(seed)
    c = channels
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, c, size, size], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, weight(rng, c, c, 3, 3), padding=(1, 1)))
            r = bb.emit(relax.op.nn.relu(y))
            z = bb.emit(relax.op.nn.conv2d(r, weight(rng, c, c, 3, 3), padding=(1, 1)))
            out = bb.emit_output(relax.op.add(y, z))
        bb.emit_func_output(out)
    return bb.finalize()


def dense_block_module(layers: int = 2, channels: int = 16, growth: int = 8, size: int = 32,
                       layout: str = "NHWC", seed: int = 0):
    """DenseNet-BC layers, as ``torch.export`` imports them: each takes ``x``, computes
    ``conv3x3(relu(bn(conv1x1(relu(bn(x))))))`` (a bottleneck of ``4 * growth`` channels) and concatenates
    it to ``x``. ``x`` lives across its batch norm (a square root per element), and the bottleneck tensor
    is the largest in the layer.

    Example
    -------
    >>> mod = dense_block_module(layers=2, channels=16, growth=8, size=8)
    >>> [int(d) for d in mod["main"].ret_ty.shape]
    [1, 8, 8, 32]
    """
    rng = np.random.default_rng(seed)
    nhwc = layout == "NHWC"
    cax = 3 if nhwc else 1

    def bn_relu(bb, h, c):
        stats = [relax.const(rng.uniform(0.5, 1.5, [c]).astype("float32")),
                 relax.const(rng.standard_normal([c]).astype("float32") * 0.1),
                 relax.const(rng.standard_normal([c]).astype("float32") * 0.1),
                 relax.const(rng.uniform(0.5, 1.5, [c]).astype("float32"))]
        bn = bb.emit(relax.op.nn.batch_norm(h, *stats, axis=cax, epsilon=1e-5, training=False))
        return bb.emit(relax.op.nn.relu(bb.emit(relax.TupleGetItem(bn, 0))))

    def conv(bb, h, ci, co, k):
        w = weight(rng, co, ci, k, k)
        if nhwc:
            w = relax.const(np.transpose(w.value.numpy(), (0, 2, 3, 1)).copy())
        return bb.emit(relax.op.nn.conv2d(h, w, padding=k // 2, data_layout=layout,
                                          kernel_layout="OHWI" if nhwc else "OIHW"))

    shape = [1, size, size, channels] if nhwc else [1, channels, size, size]
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h, c = x, channels
            for _ in range(layers):
                mid = conv(bb, bn_relu(bb, h, c), c, 4 * growth, 1)
                new = conv(bb, bn_relu(bb, mid, 4 * growth), 4 * growth, growth, 3)
                h, c = bb.emit(relax.op.concat([h, new], axis=cax)), c + growth
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.finalize()
