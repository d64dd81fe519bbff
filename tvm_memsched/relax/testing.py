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

__all__ = ["branchy_module", "random_module", "weight"]


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
