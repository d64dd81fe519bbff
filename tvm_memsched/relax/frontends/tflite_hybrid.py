"""Dynamic-range quantized ("hybrid") TFLite operators in Relax, computed as LiteRT computes them.

A hybrid CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED reads a float32 input
and int8 weights (scales per output channel or per tensor). LiteRT quantizes
the input on the fly, per batch, multiplies integers and scales the sums back
to float. TVM's frontend refuses these operators; this module writes them as
two kernels of its own and Relax operators, step by step as LiteRT's kernels do:

* **the input, quantized per batch** (per image; per row for fully connected
  layers). Depthwise convolutions, convolutions with per-channel scales (not all
  equal) and fully connected layers with ``asymmetric_quantize_inputs``
  : ``[-128, 127]`` with a zero point, from the
  batch's minimum and maximum (both widened to include 0), scale and zero
  point computed in double precision as LiteRT does, once per batch by one
  kernel (:func:`quantization_params`), then applied by another
  (:func:`quantize`; both described, so the microcontroller export runs them as
  one library function each for every shape). Other fully connected
  layers and per-tensor convolutions :
  ``[-127, 127]``, scale ``max|x| / 127``. Values are rounded half away from
  zero (LiteRT's ``TfLiteRound``; Relax's ``round`` rounds half to even), before
  the zero point is added (LiteRT's vector code on Arm and x86). The result is
  the integer ``q - zero point`` held in float32, and the batch's scale;
* **the product of integers**: a float32 convolution / matmul of those values
  with the int8 weights widened by ``astype`` (every partial sum is an integer,
  exact in float32 below 2**24), which :class:`~tvm_memsched.relax.passes.
  float_kernels.FloatKernels` stores int8 in the microcontroller export;
* **the rescale**: ``sum * weight scale[channel] * input scale + bias``, then
  the fused activation, in the order of float operations of LiteRT's builtin
  (reference) kernels. LiteRT's default resolver hands hybrid convolutions and
  fully connected layers to XNNPACK, which quantizes differently (always
  asymmetric, ties to even, fused multiply-add): its outputs differ from the
  builtin kernels' by up to a few percent, and these follow the builtin ones.

Example
-------
>>> f = quantization_params((1, 4, 4, 8), asymmetric=True)
>>> str(f.attrs["global_symbol"]), len(f.params)
('quant_params_asym_1x4x4x8', 2)
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx

from ..int8.kernels import finish

__all__ = ["quantization_params", "quantize", "hybrid_conv2d", "hybrid_dense", "HYBRID_OPS"]

#: the operators LiteRT runs in dynamic-range form that are imported here
HYBRID_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"})

_ops = relax.op


def _round_away(v, dtype: str):
    """TIR: ``v`` rounded half away from zero (C's ``round``) for ``|v| < 2**31``: the integer part by a
    cast (one instruction where there is no rounding instruction), then the halves."""
    t = v.astype("int32").astype(dtype)
    f = v - t
    half = tirx.const(0.5, dtype)
    return t + tirx.Select(f >= half, tirx.const(1.0, dtype), tirx.Select(f <= -half, tirx.const(-1.0, dtype),
                                                                          tirx.const(0.0, dtype)))


def quantization_params(shape, asymmetric: bool) -> tvm.tirx.PrimFunc:
    """A kernel ``x`` (float32 ``shape``) -> ``(N, 3)``: per batch (axis 0) LiteRT's scale, its float32
    inverse and the zero point of quantizing the rest of ``x`` on the fly.

    ``asymmetric`` (``AsymmetricQuantizeFloats``): the range widened to include 0, scale
    ``double(f32(max - min)) / 255``, the zero point of the smaller error, rounded half away from zero in
    double; ``inv = f32(1 / f32(scale))``. Symmetric (``SymmetricQuantizeFloats``): scale
    ``f32(max|x| / 127)``, ``inv = f32(127 / max|x|)``, zero point 0. An all-zero batch: scale 1, inverse 0.
    """
    f32, f64 = "float32", "float64"
    n = shape[0]
    x = te.placeholder(shape, f32, "x")
    rest = shape[1:]

    def reduce(fn, name):
        axes = [te.reduce_axis((0, d), f"r{k}") for k, d in enumerate(rest)]
        return te.compute((n,), lambda b: fn(x[(b, *axes)], axis=axes), name=name)

    mn, mx = reduce(te.min, "mn"), reduce(te.max, "mx")
    c32 = lambda v: tirx.const(v, f32)          # noqa: E731
    c64 = lambda v: tirx.const(v, f64)          # noqa: E731

    def param(b, j):
        if asymmetric:
            fmin, fmax = tirx.min(mn[b], c32(0.0)), tirx.max(mx[b], c32(0.0))
            span = (fmax - fmin).astype(f64)
            empty = span == c64(0.0)
            scale = tirx.Select(empty, c64(1.0), span / c64(255.0))
            lo, hi = fmin.astype(f64) / scale, fmax.astype(f64) / scale
            zpd = tirx.Select(c64(128.0) + tirx.abs(lo) < c64(127.0) + tirx.abs(hi), c64(-128.0) - lo,
                              c64(127.0) - hi)
            zp = tirx.Select(zpd <= c64(-128.0), c64(-128.0),
                             tirx.Select(zpd >= c64(127.0), c64(127.0), _round_away(zpd, f64)))
            s32 = scale.astype(f32)
            inv = tirx.Select(empty, c32(0.0), c32(1.0) / s32)
            zp = tirx.Select(empty, c64(0.0), zp).astype(f32)
        else:
            rng = tirx.max(tirx.abs(mn[b]), tirx.abs(mx[b]))
            empty = rng == c32(0.0)
            s32 = tirx.Select(empty, c32(1.0), rng / c32(127.0))
            inv = tirx.Select(empty, c32(0.0), c32(127.0) / rng)
            zp = c32(0.0)
        return tirx.Select(j == 0, s32, tirx.Select(j == 1, inv, zp))

    out = te.compute((n, 3), param, name="params")
    return finish([x, out], f"quant_params_{'asym' if asymmetric else 'sym'}_{'x'.join(map(str, shape))}",
                  describe={"op": "quant_params", "x": list(shape), "asymmetric": bool(asymmetric)})


def quantize(shape, asymmetric: bool) -> tvm.tirx.PrimFunc:
    """A kernel ``(x, params) -> q``: float32 ``x`` (``shape``) quantized with each batch's parameters
    (:func:`quantization_params`), as the integers ``q - zero point`` in float32: ``q = clip(zero point +
    round(x * inverse), lo, 127)``, rounded half away from zero *before* the zero point is added (LiteRT's
    vector code), ``lo`` -128 (asymmetric) or -127."""
    f32 = "float32"
    x = te.placeholder(shape, f32, "x")
    params = te.placeholder((shape[0], 3), f32, "params")
    lo, hi = tirx.const(-128.0 if asymmetric else -127.0, f32), tirx.const(127.0, f32)

    def value(*i):
        zp = params[i[0], 2]
        q = zp + _round_away(x[i] * params[i[0], 1], f32)
        return tirx.max(tirx.min(q, hi), lo) - zp

    q = te.compute(shape, value, name="q")
    return finish([x, params, q], f"quantize_{'asym' if asymmetric else 'sym'}_{'x'.join(map(str, shape))}",
                  describe={"op": "quantize", "x": list(shape), "asymmetric": bool(asymmetric)})


def _quantize(x, shape, asymmetric: bool, bb):
    """``(q - zero point`` as float32 ``shape``, the scale ``(N, 1, ...)``) of float32 ``x``, quantized per
    batch as LiteRT does (:func:`quantization_params`, :func:`quantize`)."""
    shape = tuple(int(d) for d in shape)
    n = shape[0]
    find, apply = (bb.add_func(f, str(f.attrs["global_symbol"]))
                   for f in (quantization_params(shape, asymmetric), quantize(shape, asymmetric)))
    params = bb.emit(relax.call_tir(find, [x], relax.TensorType([n, 3], "float32")))
    q = relax.call_tir(apply, [x, params], relax.TensorType(list(shape), "float32"))
    keep = [n] + [1] * (len(shape) - 1)
    scale = _ops.reshape(_ops.strided_slice(params, axes=[1], begin=[0], end=[1]), keep)
    return q, scale


def _same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def hybrid_conv2d(bb, x, x_shape, w: np.ndarray, w_scale: np.ndarray, bias, *, depthwise: bool, strides,
                  dilation, same: bool, act_lo=None, act_hi=None):
    """A hybrid NHWC convolution (its quantization kernel added to BlockBuilder ``bb``): ``x`` float32
    ``x_shape``; ``w`` the int8 filter in TFLite's layout (OHWI, or
    ``(1, kh, kw, C * multiplier)`` when ``depthwise``); ``w_scale`` one scale per output channel (or one);
    ``bias`` a float32 array or None; the output clamped to ``[act_lo, act_hi]`` (None: open)."""
    n, h, wd, c = x_shape
    scale = np.asarray(w_scale, np.float32).reshape(-1)
    # LiteRT: a depthwise convolution always quantizes its input asymmetrically, a convolution only with
    # per-channel scales that are not all equal
    per_channel = depthwise or bool(np.any(scale != scale[0]))
    q, sx = _quantize(x, x_shape, per_channel, bb)
    if depthwise:
        kh, kw, oc = w.shape[1], w.shape[2], w.shape[3]
        if c == 1:
            kernel, layout, groups = w.reshape(kh, kw, 1, oc), "HWIO", 1
        else:
            kernel, layout, groups = w.reshape(kh, kw, oc, 1), "HWOI", c
    else:
        oc, kh, kw = w.shape[0], w.shape[1], w.shape[2]
        kernel, layout, groups = np.ascontiguousarray(w.transpose(1, 2, 3, 0)), "HWIO", 1
    pads = [0, 0, 0, 0]
    if same:
        (pt, pb), (pl, pr) = (_same_pads(h, kh, strides[0], dilation[0]), _same_pads(wd, kw, strides[1], dilation[1]))
        pads = [pt, pl, pb, pr]
    wf = _ops.astype(relax.const(np.ascontiguousarray(kernel, np.int8), "int8"), "float32")
    acc = _ops.nn.conv2d(q, wf, strides=list(strides), padding=pads, dilation=list(dilation), groups=groups,
                         data_layout="NHWC", kernel_layout=layout, out_dtype="float32")
    if per_channel and not depthwise:        # (sum * weight scale) * input scale, LiteRT's reference order
        y = _ops.multiply(_ops.multiply(acc, relax.const(scale, "float32")), sx)
    else:                                    # sum * (weight scale * input scale)
        y = _ops.multiply(acc, _ops.multiply(relax.const(scale if scale.size > 1 else scale[0], "float32"), sx))
    return _finish(y, bias, act_lo, act_hi)


def hybrid_dense(bb, x, x_shape, w: np.ndarray, w_scale: np.ndarray, bias, act_lo=None, act_hi=None,
                 asymmetric: bool = False):
    """A hybrid fully connected layer (its quantization kernel added to ``bb``): ``x`` float32 ``x_shape``
    ``(rows, K)``, ``w`` int8 ``(N, K)``, one scale (or one
    per unit); each row quantized on its own, symmetrically unless ``asymmetric`` (the layer's
    ``asymmetric_quantize_inputs``). ``bias + sum * (weight scale * row scale)``."""
    q, sx = _quantize(x, x_shape, asymmetric, bb)
    wf = _ops.astype(relax.const(np.ascontiguousarray(w.T, np.int8), "int8"), "float32")
    acc = _ops.matmul(q, wf, out_dtype="float32")
    scale = np.asarray(w_scale, np.float32).reshape(-1)
    y = _ops.multiply(acc, _ops.multiply(relax.const(scale if scale.size > 1 else scale[0], "float32"), sx))
    return _finish(y, bias, act_lo, act_hi, bias_first=True)


def _finish(y, bias, lo, hi, bias_first: bool = False):
    if bias is not None:
        b = relax.const(np.asarray(bias, np.float32).reshape(-1), "float32")
        y = _ops.add(b, y) if bias_first else _ops.add(y, b)
    if lo == 0.0 and hi is None:
        return _ops.nn.relu(y)
    if lo is not None and hi is not None:
        return _ops.clip(y, float(lo), float(hi))
    if lo is not None or hi is not None:
        raise ValueError(f"activation range [{lo}, {hi}]: give both bounds or the ReLU's")
    return y
