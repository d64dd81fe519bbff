"""Deterministic synthetic weights with batch norm folded in.

Random weights make deep cell networks explode or vanish (20 NAS cells sum and
concatenate dozens of branches). Real networks avoid that with batch norm, and
the zoo's convolutions "with bias" stand for conv + BN, so this module emulates
exactly that: for every such layer it draws He-normal weights, runs the layer in
float64 on a fixed random calibration image (through the numpy reference, in
program order), and folds a batch norm with the per-channel statistics of that image
(gamma = 1, beta ~ N(0, 0.1^2)) into the weights and bias. Every BN output thus
has zero mean and unit variance on the calibration image, so activations keep a
magnitude of a few units at any depth. When the smallest BN layer has fewer than
64 pixels, a batch of images is used so that every channel's statistics rest on
at least 64 samples (otherwise a 2x2 feature map would be "normalised" on 4
values and blow up on any other input).

* Layers without bias (e.g. the depthwise half of a separable convolution) keep
  plain He-normal weights (std ``sqrt(2 / fan_in)``).
* Dense layers (classifiers) have no batch norm: LeCun-normal weights (std
  ``sqrt(1 / fan_in)``) and N(0, 0.1^2) biases. (Normalising them on the
  calibration image would be degenerate: after per-image batch norm, the global
  average of every channel on that image is exactly its beta.)
* Everything is a deterministic function of the net and ``seed``: one
  ``numpy.random.default_rng(seed)`` stream consumed in program order, float64
  maths, float32 results. (The folded scales go through BLAS sums, so another
  BLAS build could in principle change the last bit of a few float32 values.)

Example
-------
>>> from tvm_memsched.zoo.netdef import NetBuilder
>>> b = NetBuilder("toy")
>>> x = b.input((1, 3, 8, 8))
>>> net = b.build(b.conv2d(x, 4, 3))
>>> w = make_weights(net, seed=0)
>>> sorted(w), w["conv.weight"].shape, w["conv.weight"].dtype
(['conv.bias', 'conv.weight'], (4, 3, 3, 3), dtype('float32'))
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .reference import apply_act, run_layer

__all__ = ["make_weights", "calibration_input", "calibration_batch"]

BETA_STD = 0.1
MIN_SAMPLES = 64
MAX_BATCH = 16
_EPS = 1e-3


def calibration_batch(net) -> int:
    """Images in the calibration batch: >= 64 samples per channel at the smallest BN layer (at most 16 images)."""
    spatial = [math.prod(l.shape[2:]) for l in net.layers
               if l.op in ("conv2d", "depthwise_conv2d") and l.attrs.get("bias")]
    return max(1, min(MAX_BATCH, -(-MIN_SAMPLES // min(spatial, default=MIN_SAMPLES))))


def calibration_input(net, seed: int = 0) -> np.ndarray:
    """The float64 N(0, 1) images (NCHW, :func:`calibration_batch` of them) the batch-norm statistics use."""
    shape = (calibration_batch(net),) + tuple(net.input_shape[1:])
    return np.random.default_rng([seed, 0x5EED]).standard_normal(shape)


def _fold(z: np.ndarray, per_channel: bool, beta: np.ndarray):
    """Return (scale, shift) so that ``z * scale + shift`` has mean ``beta`` and unit variance."""
    if per_channel:
        axes = (0,) + tuple(range(2, z.ndim))
        mu, var = z.mean(axis=axes), z.var(axis=axes)
    else:
        mu = np.full(z.shape[1], z.mean())
        var = np.full(z.shape[1], z.var())
    var = var + _EPS * max(float(var.mean()), 1e-12)
    scale = 1.0 / np.sqrt(var)
    return scale, beta - mu * scale


def make_weights(net, seed: int = 0) -> dict[str, np.ndarray]:
    """Float32 weights for every parameter of ``net`` (a :class:`~.netdef.Net`):
    ``{"<layer>.weight": ..., "<layer>.bias": ...}``.

    Convolution weights are OIHW, depthwise weights ``(C, 1, kh, kw)``, dense
    weights ``(units, in_features)``. See the module docstring for the recipe.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    acts = {net.input: calibration_input(net, seed)}
    remaining = {name: len(c) for name, c in net.consumers().items()}
    for layer in net.layers:
        if layer.op == "input":
            continue
        ins = [acts[i] for i in layer.inputs]
        shapes = net.param_shapes(layer)   # empty for layers without weights
        if shapes:
            fan_in = math.prod(shapes["weight"][1:])
            gain = 1.0 if layer.op == "dense" else 2.0            # LeCun for classifiers, He otherwise
            w = rng.standard_normal(shapes["weight"]) * math.sqrt(gain / fan_in)
            wkey, bkey = f"{layer.name}.weight", f"{layer.name}.bias"
            if layer.op == "dense" or "bias" not in shapes:
                if "bias" in shapes:
                    out[bkey] = (rng.standard_normal(shapes["bias"]) * BETA_STD).astype(np.float32)
                y = run_layer(layer, ins, {wkey: w, bkey: out.get(bkey)})
            else:
                # conv + BN: raw pre-activation output, then fold the batch statistics into (w, b)
                beta = rng.standard_normal(shapes["bias"]) * BETA_STD
                z = run_layer(_without_act(layer), ins, {wkey: w})
                scale, shift = _fold(z, per_channel=z.size // z.shape[1] >= 16, beta=beta)
                w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
                out[bkey] = shift.astype(np.float32)
                y = apply_act(z * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1), layer.attrs["act"])
            out[wkey] = w.astype(np.float32)
        else:
            y = run_layer(layer, ins, {})
        acts[layer.name] = y
        for i in dict.fromkeys(layer.inputs):
            remaining[i] -= 1
            if remaining[i] == 0:
                del acts[i]
    return out


def _without_act(layer):
    """The same layer without bias and fused activation (its raw pre-BN output)."""
    return dataclasses.replace(layer, attrs=dict(layer.attrs, act=None, bias=False))
