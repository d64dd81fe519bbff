"""Synthetic but consistent int8 quantization parameters for zoo nets.

Activations are quantized per tensor and asymmetrically; the ranges come from a
calibration run of the numpy reference (:mod:`.reference`) on a few N(0, 1)
inputs. Operators that only move values - concatenation, max/average pooling,
strided slice, nearest upsampling - get *identical* scale and zero point on all
their inputs and their output, as TFLite's int8 kernels require (LiteRT rejects
a mismatched CONCATENATION, silently miscomputes mismatched pools, and TFLM
refuses all of them); tensors tied that way form one group whose range is the
union of the members' ranges. Weights are symmetric int8 (zero point 0),
per output channel for convolutions; biases are int32 with scale
``input_scale * weight_scale``.

Example
-------
>>> qparams_from_range(-1.0, 3.0)
(0.01568627450980392, -64)
>>> q, s = quantize_symmetric(np.array([[1.0, -2.0], [0.5, 0.25]]), axis=0)
>>> q.tolist(), s.round(4).tolist()
([[64, -127], [127, 64]], [0.0157, 0.0039])
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .netdef import Net
from .reference import forward

__all__ = ["SHARED_QUANT_OPS", "calibration_inputs", "activation_ranges", "shared_groups",
           "qparams_from_range", "activation_qparams", "quantize_symmetric", "quantize", "dequantize"]

#: Ops whose inputs and output must share one (scale, zero point).
SHARED_QUANT_OPS = ("concat", "max_pool2d", "avg_pool2d", "strided_slice", "upsample_nearest")


def calibration_inputs(net: Net, n: int = 4, seed: int = 0) -> list[np.ndarray]:
    """``n`` float64 N(0, 1) NCHW inputs for calibration (distinct from the weight-folding image)."""
    rng = np.random.default_rng([seed, 0xCA1])
    return [rng.standard_normal(net.input_shape) for _ in range(n)]


def activation_ranges(net: Net, weights: Mapping[str, np.ndarray], inputs) -> dict[str, tuple[float, float]]:
    """``layer -> (min, max)`` of every layer output (the input included) over ``inputs``."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for x in inputs:
        acts = forward(net, np.asarray(x, dtype=np.float64), weights, keep_all=True)
        for k, a in acts.items():
            lo[k] = min(lo.get(k, np.inf), float(a.min()))
            hi[k] = max(hi.get(k, -np.inf), float(a.max()))
    return {k: (lo[k], hi[k]) for k in lo}


def shared_groups(net: Net) -> dict[str, str]:
    """``layer -> representative``: layers that must share quantization parameters have the same one."""
    parent = {l.name: l.name for l in net.layers}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for l in net.layers:
        if l.op in SHARED_QUANT_OPS:
            for x in l.inputs:
                ra, rb = find(x), find(l.name)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)   # deterministic representative
    return {name: find(name) for name in parent}


def qparams_from_range(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 ``(scale, zero_point)`` covering ``[min(lo, 0), max(hi, 0)]``."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    scale = (hi - lo) / 255.0
    zp = int(np.clip(round(-128 - lo / scale), -128, 127))
    return scale, zp


def activation_qparams(net: Net, weights: Mapping[str, np.ndarray], *, inputs=None, n: int = 4,
                       seed: int = 0) -> dict[str, tuple[float, int]]:
    """``layer -> (scale, zero_point)`` for every layer output, honouring :func:`shared_groups`."""
    if inputs is None:
        inputs = calibration_inputs(net, n, seed)
    ranges = activation_ranges(net, weights, inputs)
    groups = shared_groups(net)
    merged: dict[str, list[float]] = {}
    for name, (lo, hi) in ranges.items():
        g = merged.setdefault(groups[name], [np.inf, -np.inf])
        g[0], g[1] = min(g[0], lo), max(g[1], hi)
    return {name: qparams_from_range(*merged[groups[name]]) for name in ranges}


def quantize_symmetric(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights (zero point 0), per slice along ``axis`` or per tensor (``axis=None``)."""
    w = np.asarray(w, dtype=np.float64)
    if axis is None:
        s = np.atleast_1d(np.abs(w).max() / 127.0)
        shaped = s
    else:
        red = tuple(i for i in range(w.ndim) if i != axis)
        s = np.abs(w).max(axis=red) / 127.0
        shape = [1] * w.ndim
        shape[axis] = -1
        shaped = s.reshape(shape)
    s = np.maximum(s, 1e-12)
    shaped = np.maximum(shaped, 1e-12)
    q = np.clip(np.round(w / shaped), -127, 127).astype(np.int8)
    return q, s


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """Float -> int8 with round-to-nearest and saturation."""
    return np.clip(np.round(np.asarray(x) / scale) + zero_point, -128, 127).astype(np.int8)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return (np.asarray(q, dtype=np.float64) - zero_point) * scale
