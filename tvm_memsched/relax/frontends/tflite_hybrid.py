"""Dynamic-range quantized ("hybrid") TFLite operators in Relax, computed as LiteRT computes them.

A hybrid CONV_2D, DEPTHWISE_CONV_2D or FULLY_CONNECTED reads a float32 input
and int8 weights (scales per output channel or per tensor). LiteRT quantizes
the input on the fly, per batch, multiplies integers and scales the sums back
to float. TVM's frontend refuses these operators; this module writes each as
one kernel of its own (:func:`conv_kernel`, :func:`dense_kernel`), with the int8
weights as its constant and a description, so the microcontroller export runs
it as one library function (:mod:`tvm_memsched.micro.nn`). Step by step, as
LiteRT's builtin kernels compute:

* **the input, quantized per batch** (per image; per row for fully connected
  layers). Depthwise convolutions, convolutions with per-channel scales (not all
  equal) and fully connected layers with ``asymmetric_quantize_inputs``:
  ``[-128, 127]`` with a zero point, from the batch's minimum and maximum (both
  widened to include 0), scale and zero point computed in double precision as
  LiteRT does (:func:`quantization_params`). Other fully connected layers and
  per-tensor convolutions: ``[-127, 127]``, scale ``max|x| / 127``. Values are
  rounded half away from zero (LiteRT's ``TfLiteRound``; Relax's ``round``
  rounds half to even), before the zero point is added (LiteRT's vector code on
  Arm and x86);
* **the product of integers**: the int32 sum of ``(q - zero point) * w`` over
  the taps inside the image;
* **the rescale**: ``sum * weight scale[channel] * input scale + bias``, then
  the fused activation, in the order of float operations of LiteRT's builtin
  (reference) kernels. LiteRT's default resolver hands hybrid convolutions and
  fully connected layers to XNNPACK, which quantizes differently (always
  asymmetric, ties to even, fused multiply-add): its outputs differ from the
  builtin kernels' by up to a few percent, and these follow the builtin ones.

A hybrid TRANSPOSE_CONV follows LiteRT's ``HybridTransposeConv`` (:func:`transpose_conv_kernel`): the input
quantized asymmetrically per image, each tap's integer product scaled to float32 on its own and the taps
summed in float32, in the order of LiteRT's scatter loop.

A hybrid BATCH_MATMUL (float32 input, int8 constant weights) follows LiteRT's reference kernel
(:func:`batch_matmul_kernel`): each row of the input quantized on its own (``asymmetric_quantize_inputs`` or
symmetric), the int32 sum of ``q * w`` corrected for the row's zero point in float32 (``sum - row_sum *
zero point``), times ``row scale * weight scale``. The shapes LiteRT's kernel indexes wrongly are refused
(:func:`litert_batch_layout`).

The kernel finds every batch's parameters first, then quantizes each output
pixel's window (a fully connected layer's row) once, before it writes that
pixel's outputs: its output may overwrite its input as a float32 kernel's would,
and no quantized copy of the input is ever held.

Example
-------
>>> f = quantization_params((1, 4, 4, 8), asymmetric=True)
>>> str(f.attrs["global_symbol"]), len(f.params)
('quant_params_asym_1x4x4x8', 2)
>>> k = dense_kernel((1, 16), (4, 16), asymmetric=False, per_channel=True, has_bias=True)
>>> str(k.attrs["global_symbol"]), [str(p.name) for p in k.params]
('hybrid_dense', ['x', 'w', 'scales', 'bias', 'y'])
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, te, tirx

from ..int8.kernels import finish

__all__ = ["quantization_params", "conv_kernel", "dense_kernel", "batch_matmul_kernel", "transpose_conv_kernel",
           "hybrid_conv2d", "hybrid_dense", "hybrid_transpose_conv", "hybrid_batch_matmul", "litert_batch_layout",
           "HYBRID_OPS"]

#: the operators LiteRT runs in dynamic-range form that are imported here
HYBRID_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"})


def _round_away(v, dtype: str):
    """TIR: ``v`` rounded half away from zero (C's ``round``) for ``|v| < 2**31``: the integer part by a
    cast (one instruction where there is no rounding instruction), then the halves."""
    t = v.astype("int32").astype(dtype)
    f = v - t
    half = tirx.const(0.5, dtype)
    return t + tirx.Select(f >= half, tirx.const(1.0, dtype), tirx.Select(f <= -half, tirx.const(-1.0, dtype),
                                                                          tirx.const(0.0, dtype)))


def _params(x, asymmetric: bool):
    """TE: ``(N, 3)`` per batch of ``x`` (axis 0): LiteRT's scale, its float32 inverse and the zero point of
    quantizing the batch on the fly (see :func:`quantization_params`)."""
    n, rest = x.shape[0], x.shape[1:]

    def reduce(fn, name):
        axes = [te.reduce_axis((0, d), f"r{k}") for k, d in enumerate(rest)]
        return te.compute((n,), lambda b: fn(x[(b, *axes)], axis=axes), name=name)

    mn, mx = reduce(te.min, "mn"), reduce(te.max, "mx")
    return te.compute((n, 3), lambda b, j: _param(mn[b], mx[b], j, asymmetric), name="params")


def _param(lo_v, hi_v, j, asymmetric: bool):
    """TIR: parameter ``j`` (0 scale, 1 its float32 inverse, 2 zero point) of quantizing a batch whose least
    and greatest values are ``lo_v`` and ``hi_v`` (see :func:`quantization_params`)."""
    f32, f64 = "float32", "float64"
    c32 = lambda v: tirx.const(v, f32)          # noqa: E731
    c64 = lambda v: tirx.const(v, f64)          # noqa: E731

    def param(mn, mx):
        if asymmetric:
            fmin, fmax = tirx.min(mn, c32(0.0)), tirx.max(mx, c32(0.0))
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
            rng = tirx.max(tirx.abs(mn), tirx.abs(mx))
            empty = rng == c32(0.0)
            s32 = tirx.Select(empty, c32(1.0), rng / c32(127.0))
            inv = tirx.Select(empty, c32(0.0), c32(127.0) / rng)
            zp = c32(0.0)
        return tirx.Select(j == 0, s32, tirx.Select(j == 1, inv, zp))

    return param(lo_v, hi_v)


def quantization_params(shape, asymmetric: bool) -> tvm.tirx.PrimFunc:
    """A kernel ``x`` (float32 ``shape``) -> ``(N, 3)``: per batch (axis 0) LiteRT's scale, its float32
    inverse and the zero point of quantizing the rest of ``x`` on the fly, as every hybrid kernel here
    computes them first (and the microcontroller library's ``tms_quant_params_f32``).

    ``asymmetric`` (``AsymmetricQuantizeFloats``): the range widened to include 0, scale
    ``double(f32(max - min)) / 255``, the zero point of the smaller error, rounded half away from zero in
    double; ``inv = f32(1 / f32(scale))``. Symmetric (``SymmetricQuantizeFloats``): scale
    ``f32(max|x| / 127)``, ``inv = f32(127 / max|x|)``, zero point 0. An all-zero batch: scale 1, inverse 0.
    """
    x = te.placeholder(shape, "float32", "x")
    return finish([x, _params(x, asymmetric)],
                  f"quant_params_{'asym' if asymmetric else 'sym'}_{'x'.join(map(str, shape))}")


def _quantized(v, prm, b, asymmetric: bool):
    """TIR: float32 ``v`` of batch ``b`` quantized with the batch's parameters ``prm`` as LiteRT does, as the
    int32 ``q - zero point``: ``q = clip(zero point + round(v * inverse), lo, 127)``, rounded half away from
    zero *before* the zero point is added (LiteRT's vector code), ``lo`` -128 (asymmetric) or -127."""
    zp = prm[b, 2]
    return _quantized_value(v, zp, prm[b, 1], asymmetric) - zp.astype("int32")


def _quantized_value(v, zp, inv, asymmetric: bool):
    """TIR: the int32 ``q = clip(zp + round(v * inv), lo, 127)`` of :func:`_quantized` (``zp``, ``inv``:
    float32 expressions)."""
    f32 = "float32"
    q = zp + _round_away(v * inv, f32)
    q = tirx.max(tirx.min(q, tirx.const(127.0, f32)), tirx.const(-128.0 if asymmetric else -127.0, f32))
    return q.astype("int32")


def _rescale(acc, sx, ws, bias, lo, hi, w_first: bool):
    """TIR: the int32 sum ``acc`` as LiteRT's builtin kernels scale it back to float32: ``(sum * weight
    scale) * input scale`` (``w_first``: a per-channel convolution) or ``sum * (weight scale * input
    scale)``, plus the bias, then the activation range (``max`` / ``min`` as Relax's ``relu`` / ``clip``)."""
    v = acc.astype("float32")
    v = v * ws * sx if w_first else v * (ws * sx)
    if bias is not None:
        v = v + bias
    if lo is not None:
        v = tirx.max(v, tirx.const(float(lo), "float32"))
    if hi is not None:
        v = tirx.min(v, tirx.const(float(hi), "float32"))
    return v


def _schedule(func, at: dict) -> tvm.tirx.PrimFunc:
    """``compute_at`` the blocks of ``at`` (name: how many loops of block ``y`` deep, -1 the innermost; in
    reverse order of creation) in scope ``local``; the others stay where they are (computed first)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    for name, depth in at.items():
        blk = sch.get_sblock(name)
        sch.compute_at(blk, sch.get_loops(sch.get_sblock("y"))[depth], preserve_unit_loops=False)
        sch.set_scope(blk, 0, "local")
    for name in ("mn", "mx", "params"):
        sch.set_scope(sch.get_sblock(name), 0, "local")
    return sch.mod["main"]


def _operands(x_shape, w_shape, channels: int, *, asymmetric: bool, per_channel: bool, has_bias: bool):
    """TE placeholders of a hybrid kernel, ``[x, w, scales, (bias)]``, and the batches' parameters of ``x``."""
    ops = [te.placeholder(x_shape, "float32", "x"), te.placeholder(w_shape, "int8", "w"),
           te.placeholder((channels if per_channel else 1,), "float32", "scales")]
    if has_bias:
        ops.append(te.placeholder((channels,), "float32", "bias"))
    return ops, _params(ops[0], asymmetric)


def conv_kernel(x_shape, w_shape, out_shape, *, strides, padding, dilation, depthwise: bool, asymmetric: bool,
                per_channel: bool, w_first: bool, has_bias: bool, lo=None, hi=None) -> tvm.tirx.PrimFunc:
    """A hybrid NHWC convolution, one kernel ``(x, w, scales, [bias]) -> y`` as LiteRT's builtin kernels
    compute it: each image of the float32 input ``x`` quantized on the fly (:func:`quantization_params`,
    ``asymmetric`` or symmetric), the int32 sum of ``(q - zero point) * w`` over the taps inside the image
    with ``w`` int8 OHWI (depthwise: ``(1, kh, kw, C * multiplier)``), rescaled as :func:`_rescale` says
    into float32 ``y``; ``scales`` float32, one per output channel (or one, ``per_channel`` False).
    ``padding``: top, left (, bottom, right).

    The parameters of every image are found first; then, pixel by pixel, a convolution quantizes the pixel's
    window once and computes every output channel from it, a depthwise convolution each channel from its
    taps: every read of an output's inputs comes before its write, which lets the output overwrite ``x``
    as a float32 kernel's would (:mod:`tvm_memsched.relax.analysis.inplace`)."""
    n_, h_, wd_, c_ = x_shape
    sh, sw = strides
    dh, dw = dilation
    pt, pl = padding[0], padding[1]
    oc_ = out_shape[3]
    ops, prm = _operands(x_shape, w_shape, oc_, asymmetric=asymmetric, per_channel=per_channel, has_bias=has_bias)
    x, w, scales, b = (ops + [None])[:4]
    kh_, kw_ = w_shape[1], w_shape[2]
    rh, rw = te.reduce_axis((0, kh_), "rh"), te.reduce_axis((0, kw_), "rw")
    zero = tirx.const(0, "int32")

    def tap(n, oh, ow, kh, kw, c):
        ih, iw = oh * sh - pt + kh * dh, ow * sw - pl + kw * dw
        inside = tirx.all(ih >= 0, ih < h_, iw >= 0, iw < wd_)
        xv = x[n, tirx.if_then_else(inside, ih, 0), tirx.if_then_else(inside, iw, 0), c]
        return tirx.if_then_else(inside, _quantized(xv, prm, n, asymmetric), zero)

    if depthwise:
        mult = oc_ // c_                    # output channel oc reads input channel oc // mult
        acc = te.compute(out_shape, lambda n, oh, ow, oc: te.sum(
            tap(n, oh, ow, rh, rw, oc if mult == 1 else oc // mult) * w[0, rh, rw, oc].astype("int32"),
            axis=[rh, rw]), name="acc")
        at = {"acc": -1}
    else:
        win = te.compute((n_, out_shape[1], out_shape[2], kh_, kw_, c_), tap, name="win")
        rc = te.reduce_axis((0, c_), "rc")
        acc = te.compute(out_shape, lambda n, oh, ow, oc: te.sum(
            win[n, oh, ow, rh, rw, rc] * w[oc, rh, rw, rc].astype("int32"), axis=[rh, rw, rc]), name="acc")
        at = {"acc": -1, "win": 2}
    y = te.compute(out_shape, lambda n, oh, ow, oc: _rescale(
        acc[n, oh, ow, oc], prm[n, 0], scales[oc if per_channel else 0], None if b is None else b[oc],
        lo, hi, w_first), name="y")
    op = "hybrid_depthwise_conv2d" if depthwise else "hybrid_conv2d"
    desc = {"op": op, "x": list(x_shape), "w": list(w_shape), "y": list(out_shape), "strides": list(strides),
            "padding": list(padding), "dilation": list(dilation), "asymmetric": asymmetric,
            "per_channel": per_channel, "w_first": w_first, "has_bias": has_bias, "lo": lo, "hi": hi}
    return finish(ops + [y], op, describe=desc, schedule=lambda f: _schedule(f, at))


def dense_kernel(x_shape, w_shape, *, asymmetric: bool, per_channel: bool, has_bias: bool, lo=None,
                 hi=None) -> tvm.tirx.PrimFunc:
    """A hybrid fully connected layer, one kernel ``(x, w, scales, [bias]) -> y``: each row of float32
    ``x`` ``(rows, K)`` quantized on its own (``asymmetric`` or symmetric) once, then every unit of ``w``
    int8 ``(N, K)`` from it: ``bias + sum * (weight scale * row scale)``, clamped."""
    rows, k_ = x_shape
    units = w_shape[0]
    ops, prm = _operands(x_shape, w_shape, units, asymmetric=asymmetric, per_channel=per_channel, has_bias=has_bias)
    x, w, scales, b = (ops + [None])[:4]
    win = te.compute(x_shape, lambda r, k: _quantized(x[r, k], prm, r, asymmetric), name="win")
    rk = te.reduce_axis((0, k_), "rk")
    acc = te.compute((rows, units), lambda r, u: te.sum(win[r, rk] * w[u, rk].astype("int32"), axis=[rk]),
                     name="acc")
    y = te.compute((rows, units), lambda r, u: _rescale(
        acc[r, u], prm[r, 0], scales[u if per_channel else 0], None if b is None else b[u], lo, hi, False),
        name="y")
    desc = {"op": "hybrid_dense", "x": list(x_shape), "w": list(w_shape), "y": [rows, units],
            "asymmetric": asymmetric, "per_channel": per_channel, "w_first": False, "has_bias": has_bias,
            "lo": lo, "hi": hi}
    return finish(ops + [y], "hybrid_dense", describe=desc, schedule=lambda f: _schedule(f, {"acc": -1, "win": 0}))


def _same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _activation(lo, hi):
    """The activation range as the kernels take it: ReLU ``(0, None)``, a clip ``(lo, hi)``, or none."""
    if (lo is None) != (hi is None) and not (lo == 0.0 and hi is None):
        raise ValueError(f"activation range [{lo}, {hi}]: give both bounds or the ReLU's")
    return lo, hi


def _call(bb, kernel, args, out_shape):
    """``call_tir`` of ``kernel``, added to ``bb`` under a name of its own (its C symbol too)."""
    func = bb.add_func(kernel, str(kernel.attrs["global_symbol"]))
    bb.update_func(func, kernel.with_attr("global_symbol", func.name_hint))
    return relax.call_tir(func, args, relax.TensorType([int(d) for d in out_shape], "float32"))


def _constants(w_scale, bias):
    """The weight scales as a flat float32 array, and the kernel's constants: the scales, then the bias."""
    scale = np.asarray(w_scale, np.float32).reshape(-1)
    consts = [relax.const(scale, "float32")]
    if bias is not None:
        consts.append(relax.const(np.asarray(bias, np.float32).reshape(-1), "float32"))
    return scale, consts


def hybrid_conv2d(bb, x, x_shape, w: np.ndarray, w_scale: np.ndarray, bias, *, depthwise: bool, strides,
                  dilation, same: bool, act_lo=None, act_hi=None):
    """A hybrid NHWC convolution (its kernel added to BlockBuilder ``bb``): ``x`` float32 ``x_shape``;
    ``w`` the int8 filter in TFLite's layout (OHWI, or ``(1, kh, kw, C * multiplier)`` when
    ``depthwise``); ``w_scale`` one scale per output channel (or one); ``bias`` a float32 array or None;
    the output clamped to ``[act_lo, act_hi]`` (None: open)."""
    lo, hi = _activation(act_lo, act_hi)
    n, h, wd, c = (int(d) for d in x_shape)
    scale, consts = _constants(w_scale, bias)
    # LiteRT: a depthwise convolution always quantizes its input asymmetrically, a convolution only with
    # per-channel scales that are not all equal
    per_channel = depthwise or bool(np.any(scale != scale[0]))
    kh, kw = w.shape[1], w.shape[2]
    w_first = per_channel and not depthwise
    if depthwise and c == 1:                 # one input channel: a convolution with C * multiplier filters
        w, depthwise = np.ascontiguousarray(w.reshape(kh, kw, -1).transpose(2, 0, 1)[..., None]), False
    oc = w.shape[3] if depthwise else w.shape[0]
    pads = [0, 0, 0, 0]
    if same:
        (pt, pb), (pl, pr) = (_same_pads(h, kh, strides[0], dilation[0]), _same_pads(wd, kw, strides[1], dilation[1]))
        pads = [pt, pl, pb, pr]
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    kernel = conv_kernel((n, h, wd, c), tuple(w.shape), (n, oh, ow, oc), strides=tuple(strides), padding=pads,
                         dilation=tuple(dilation), depthwise=depthwise, asymmetric=per_channel,
                         per_channel=scale.size > 1, w_first=w_first, has_bias=bias is not None, lo=lo, hi=hi)
    return _call(bb, kernel, [x, relax.const(np.ascontiguousarray(w, np.int8), "int8"), *consts], (n, oh, ow, oc))


def hybrid_dense(bb, x, x_shape, w: np.ndarray, w_scale: np.ndarray, bias, act_lo=None, act_hi=None,
                 asymmetric: bool = False):
    """A hybrid fully connected layer (its kernel added to ``bb``): ``x`` float32 ``x_shape``
    ``(rows, K)``, ``w`` int8 ``(N, K)``, one scale (or one per unit); each row quantized on its own,
    symmetrically unless ``asymmetric`` (the layer's ``asymmetric_quantize_inputs``).
    ``bias + sum * (weight scale * row scale)``."""
    lo, hi = _activation(act_lo, act_hi)
    rows, k = (int(d) for d in x_shape)
    scale, consts = _constants(w_scale, bias)
    kernel = dense_kernel((rows, k), tuple(w.shape), asymmetric=asymmetric, per_channel=scale.size > 1,
                          has_bias=bias is not None, lo=lo, hi=hi)
    return _call(bb, kernel, [x, relax.const(np.ascontiguousarray(w, np.int8), "int8"), *consts],
                 (rows, w.shape[0]))


def transpose_conv_kernel(x_shape, w_shape, out_shape, *, strides, padding, has_bias: bool, lo=None,
                          hi=None) -> tvm.tirx.PrimFunc:
    """A hybrid NHWC transposed convolution, one kernel ``(x, w, scales, [bias]) -> y`` as LiteRT's
    ``HybridTransposeConv`` computes it: each image of float32 ``x`` quantized asymmetrically
    (``AsymmetricQuantizeFloats``, :func:`quantization_params`); every tap's product ``(q - zero point) * w``
    (``w`` int8 ``(O, kh, kw, I)``) scaled to float32 on its own, ``(product * scale[channel]) * input
    scale``, and the taps summed in float32 in LiteRT's order (input row, column, channel ascending: its
    scatter loop, written here as a gather); then the bias and the activation range. ``padding``: top, left
    (LiteRT's, without the odd remainder: :func:`hybrid_transpose_conv`)."""
    n_, h_, wd_, c_ = x_shape
    sh, sw = strides
    pt, pl = padding
    oc_ = out_shape[3]
    kh_, kw_ = w_shape[1], w_shape[2]
    ops, prm = _operands(x_shape, w_shape, oc_, asymmetric=True, per_channel=True, has_bias=has_bias)
    x, w, scales, b = (ops + [None])[:4]
    ry, rx = te.reduce_axis((0, -(-kh_ // sh)), "ry"), te.reduce_axis((0, -(-kw_ // sw)), "rx")
    rc = te.reduce_axis((0, c_), "rc")
    zero = tirx.const(0.0, "float32")

    def term(n, oy, ox, oc, ry, rx, rc):
        # the input pixels whose scatter reaches (oy, ox), in ascending order: iy = ceil((oy + pt - kh + 1) / sh) + ry
        iy = tirx.floordiv(oy + pt - kh_ + sh, sh) + ry
        ix = tirx.floordiv(ox + pl - kw_ + sw, sw) + rx
        fy, fx = oy + pt - iy * sh, ox + pl - ix * sw
        inside = tirx.all(iy >= 0, iy < h_, ix >= 0, ix < wd_, fy >= 0, fy < kh_, fx >= 0, fx < kw_)
        yi, xi = tirx.if_then_else(inside, iy, 0), tirx.if_then_else(inside, ix, 0)
        fyi, fxi = tirx.if_then_else(inside, fy, 0), tirx.if_then_else(inside, fx, 0)
        prod = _quantized(x[n, yi, xi, rc], prm, n, True) * w[oc, fyi, fxi, rc].astype("int32")
        return tirx.if_then_else(inside, prod.astype("float32") * scales[oc] * prm[n, 0], zero)

    acc = te.compute(out_shape, lambda n, oy, ox, oc: te.sum(term(n, oy, ox, oc, ry, rx, rc), axis=[ry, rx, rc]),
                     name="acc")

    def out(n, oy, ox, oc):
        v = acc[n, oy, ox, oc]
        if b is not None:
            v = v + b[oc]
        if lo is not None:
            v = tirx.max(v, tirx.const(float(lo), "float32"))
        if hi is not None:
            v = tirx.min(v, tirx.const(float(hi), "float32"))
        return v

    y = te.compute(out_shape, out, name="y")
    desc = {"op": "hybrid_transpose_conv2d", "x": list(x_shape), "w": list(w_shape), "y": list(out_shape),
            "strides": list(strides), "padding": list(padding), "has_bias": has_bias, "lo": lo, "hi": hi}
    return finish(ops + [y], "hybrid_transpose_conv2d", describe=desc, schedule=lambda f: _schedule(f, {"acc": -1}))


def _transpose_pad(out_size: int, k: int, stride: int, same: bool) -> int:
    """LiteRT's padding of a transposed convolution (``ComputePaddingHeightWidth`` on its output size; the odd
    remainder, ``offset``, is not used by ``HybridTransposeConv``)."""
    n = -(-out_size // stride) if same else (out_size - k + stride) // stride
    return max((n - 1) * stride + k - out_size, 0) // 2


def hybrid_transpose_conv(bb, x, x_shape, w: np.ndarray, w_scale: np.ndarray, bias, out_shape, *, strides,
                          same: bool, act_lo=None, act_hi=None):
    """A hybrid TRANSPOSE_CONV (its kernel added to ``bb``): ``x`` float32 ``x_shape`` NHWC, ``w`` int8
    ``(O, kh, kw, I)`` with one scale per output channel (a single scale is used for every channel),
    ``out_shape`` the operator's output shape, SAME or VALID padding (:func:`transpose_conv_kernel`)."""
    lo, hi = _activation(act_lo, act_hi)
    n, h, wd, c = (int(d) for d in x_shape)
    oc, kh, kw = (int(d) for d in w.shape[:3])
    scale, consts = _constants(w_scale, bias)
    if scale.size == 1:
        consts[0] = relax.const(np.full(oc, scale[0], np.float32), "float32")
    out = tuple(int(d) for d in out_shape)
    pads = (_transpose_pad(out[1], kh, strides[0], same), _transpose_pad(out[2], kw, strides[1], same))
    kernel = transpose_conv_kernel((n, h, wd, c), tuple(w.shape), out, strides=tuple(strides), padding=pads,
                                   has_bias=bias is not None, lo=lo, hi=hi)
    return _call(bb, kernel, [x, relax.const(np.ascontiguousarray(w, np.int8), "int8"), *consts], out)


def litert_batch_layout(x_shape, w_shape, adj_x: bool, adj_y: bool) -> None:
    """Refuse (``ValueError``) the dynamic-range BATCH_MATMUL shapes LiteRT's reference kernel computes
    wrongly, so that no model gets a result the runtime it is checked against does not give.

    LiteRT first merges the input's last batch dimension into its rows when the weights' last batch
    dimension is 1 (with ``adj_x`` it then reads the transposed input with the untransposed shape), sums the
    rows of the weight matrices of batch dimensions 1 and 2 of its five only, and advances the pointers to
    the rows' scales and the weights' row sums by one matrix per step of *each* batch dimension (right for
    one batch dimension longer than 1, not for two).

    >>> litert_batch_layout((2, 4, 32), (2, 32, 32), False, False)
    >>> litert_batch_layout((2, 3, 4, 8), (2, 3, 8, 5), False, False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: LiteRT's reference kernel reads the rows' scales of other batches with 2 batch dimensions ...
    """
    xs, ws = list(x_shape), list(w_shape)
    what = f"(shapes {xs} and {ws}); not imported"
    if len(ws) > 2 and len(xs) > 2 and ws[-3] == 1:
        if adj_x:
            raise ValueError(f"LiteRT's reference kernel reads the transposed input with its untransposed "
                             f"shape when the weights' last batch dimension is 1 and adj_x is set {what} (without "
                             "adj_x it is)")
        xs, ws = xs[:-3] + [xs[-3] * xs[-2], xs[-1]], ws[:-3] + ws[-2:]
    ex, ew = [1] * (5 - len(xs)) + xs, [1] * (5 - len(ws)) + ws
    if ew[0] > 1:
        raise ValueError(f"LiteRT's reference kernel leaves the row sums of weights with 5 dimensions "
                         f"uncomputed {what} (weights of up to 4 dimensions are)")
    for name, shape in (("rows' scales", ex), ("weights' row sums", ew)):
        longer = sum(d > 1 for d in shape[:3])
        if longer > 1:
            raise ValueError(f"LiteRT's reference kernel reads the {name} of other batches with {longer} batch "
                             f"dimensions longer than 1 {what} (operands with one are)")


def batch_matmul_kernel(x_shape, w_shape, y_shape, *, adj_x: bool, adj_y: bool, asymmetric: bool,
                        per_channel: bool) -> tvm.tirx.PrimFunc:
    """A dynamic-range BATCH_MATMUL, one kernel ``(x, w, row_sums, scales) -> y`` as LiteRT's reference
    kernel computes it: float32 ``x`` ``(..., M, K)`` (``adj_x``: ``(..., K, M)``), int8 ``w`` ``(..., K, N)``
    (``adj_y``: ``(..., N, K)``), batch dimensions broadcast; each row of ``x`` quantized on its own
    (``asymmetric`` or symmetric, :func:`quantization_params`) once; per output the int32 sum of ``q * w``,
    corrected for the row's zero point in float32 as LiteRT does (``sum -= row_sum * float(zero point)``,
    with ``row_sums`` int32 ``(..., N)`` the sums of the weights' columns) and scaled by ``row scale *
    weight scale`` (``scales``: one, or one per output column); ``y_shape`` ``(..., M, N)``, the batch
    dimensions of both broadcast."""
    batch = tuple(y_shape[:-2])
    k_ = x_shape[-2] if adj_x else x_shape[-1]
    n_ = w_shape[-2] if adj_y else w_shape[-1]
    rows = tuple(x_shape[:-2]) + (y_shape[-2],)
    x = te.placeholder(x_shape, "float32", "x")
    w = te.placeholder(w_shape, "int8", "w")
    sums = te.placeholder(tuple(w_shape[:-2]) + (n_,), "int32", "row_sums")
    scales = te.placeholder((n_ if per_channel else 1,), "float32", "scales")

    def xv(r, k):
        return x[(*r[:-1], k, r[-1])] if adj_x else x[(*r[:-1], r[-1], k)]

    r1, r2 = te.reduce_axis((0, k_), "r1"), te.reduce_axis((0, k_), "r2")
    mn = te.compute(rows, lambda *r: te.min(xv(r, r1), axis=r1), name="mn")
    mx = te.compute(rows, lambda *r: te.max(xv(r, r2), axis=r2), name="mx")
    prm = te.compute(rows + (3,), lambda *i: _param(mn[i[:-1]], mx[i[:-1]], i[-1], asymmetric), name="params")
    win = te.compute(rows + (k_,), lambda *i: _quantized_value(xv(i[:-1], i[-1]), prm[(*i[:-1], 2)],
                                                               prm[(*i[:-1], 1)], asymmetric), name="win")
    rk = te.reduce_axis((0, k_), "rk")

    def at(shape, idx):                  # an operand's batch index under broadcasting
        lead = len(batch) - len(shape)
        return tuple(0 if shape[k] == 1 else idx[k + lead] for k in range(len(shape)))

    def acc_body(*i):
        bx, bw, m, n = at(x_shape[:-2], i[:-2]), at(w_shape[:-2], i[:-2]), i[-2], i[-1]
        wv = w[(*bw, n, rk)] if adj_y else w[(*bw, rk, n)]
        return te.sum(win[(*bx, m, rk)] * wv.astype("int32"), axis=rk)

    acc = te.compute(tuple(y_shape), acc_body, name="acc")

    def out(*i):
        bx, bw, m, n = at(x_shape[:-2], i[:-2]), at(w_shape[:-2], i[:-2]), i[-2], i[-1]
        f32 = "float32"
        total = (acc[i].astype(f32) - sums[(*bw, n)].astype(f32) * prm[(*bx, m, 2)]).astype("int32")
        return (prm[(*bx, m, 0)] * scales[n if per_channel else 0]) * total.astype(f32)

    y = te.compute(tuple(y_shape), out, name="y")
    desc = {"op": "hybrid_batch_matmul", "x": list(x_shape), "w": list(w_shape), "y": list(y_shape), "k": k_,
            "adj_x": adj_x, "adj_y": adj_y, "asymmetric": asymmetric, "per_channel": per_channel}

    def schedule(func):
        from tvm import s_tir

        sch = s_tir.Schedule(func)
        loops = sch.get_loops(sch.get_sblock("y"))
        sch.compute_at(sch.get_sblock("acc"), loops[-1], preserve_unit_loops=False)
        sch.set_scope(sch.get_sblock("acc"), 0, "local")
        sch.compute_at(sch.get_sblock("win"), sch.get_loops(sch.get_sblock("y"))[len(batch)],
                       preserve_unit_loops=False)
        sch.set_scope(sch.get_sblock("win"), 0, "local")
        for name in ("mn", "mx", "params"):
            sch.set_scope(sch.get_sblock(name), 0, "local")
        return sch.mod["main"]

    return finish([x, w, sums, scales, y], "hybrid_batch_matmul", describe=desc, schedule=schedule)


def hybrid_batch_matmul(bb, x, x_shape, w: np.ndarray, w_scale: np.ndarray, y_shape, *, adj_x: bool,
                        adj_y: bool, asymmetric: bool):
    """A dynamic-range BATCH_MATMUL (its kernel added to ``bb``): float32 ``x`` of ``x_shape`` times the int8
    constant ``w`` (one scale, or one per output column) into ``y_shape``, as :func:`batch_matmul_kernel`
    computes it. Raises ``ValueError`` for the shapes LiteRT computes wrongly (:func:`litert_batch_layout`)."""
    x_shape = [int(d) for d in x_shape]
    litert_batch_layout(x_shape, w.shape, adj_x, adj_y)
    k = x_shape[-2] if adj_x else x_shape[-1]
    if k > _HYBRID_MAX_TERMS:
        raise ValueError(f"{k} products per output, more than the {_HYBRID_MAX_TERMS} an int32 sum holds "
                         "without overflow")
    sums = w.astype(np.int32).sum(axis=-1 if adj_y else -2)
    scale = np.asarray(w_scale, np.float32).reshape(-1)
    y_shape = tuple(int(d) for d in y_shape)
    kernel = batch_matmul_kernel(tuple(x_shape), tuple(w.shape), y_shape, adj_x=adj_x, adj_y=adj_y,
                                 asymmetric=asymmetric, per_channel=scale.size > 1)
    args = [x, relax.const(np.ascontiguousarray(w, np.int8), "int8"),
            relax.const(np.ascontiguousarray(sums, np.int32), "int32"), relax.const(scale, "float32")]
    return _call(bb, kernel, args, y_shape)


#: most products one int32 sum takes: |q| <= 128, |w| <= 128
_HYBRID_MAX_TERMS = (2 ** 31 - 1) // (128 * 128)
