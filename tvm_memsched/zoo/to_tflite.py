"""Write a zoo :class:`~tvm_memsched.zoo.netdef.Net` as a ``.tflite`` flatbuffer (float32, float16 weights,
dynamic-range (hybrid) or full int8).

Layout is NHWC: activations ``(1, H, W, C)``, convolution filters OHWI,
depthwise filters ``(1, kh, kw, C)``, dense weights ``(units, in)``. Operators
appear in the Net's layer order (its program order), one TFLite operator per
layer, and every tensor is named like its layer, so schedules computed on the
core Graph map one-to-one onto the file:

============================  ==========================================
layer                         TFLite operator
============================  ==========================================
conv2d                        CONV_2D (fused ReLU/ReLU6 if ``act``)
depthwise_conv2d              DEPTHWISE_CONV_2D (multiplier 1)
relu / relu6                  RELU / RELU6
add                           ADD (fused activation)
concat                        CONCATENATION (axis 3)
avg_pool2d / max_pool2d       AVERAGE_POOL_2D / MAX_POOL_2D
global_avg_pool               MEAN over H, W (keepDims false)
dense                         FULLY_CONNECTED
strided_slice                 STRIDED_SLICE
upsample_nearest              RESIZE_NEAREST_NEIGHBOR (half-pixel off)
============================  ==========================================

Windows must use ``SAME`` or ``VALID`` padding as TFLite defines them (the zoo's
default ``"same"`` is exactly TFLite's ``SAME``). Convolutions always get a
bias tensor (zeros when the layer has none): LiteRT requires one.

For ``dtype="hybrid"`` (TFLite's dynamic-range quantization: the converter's ``optimizations=[DEFAULT]``
without a representative dataset) convolution, depthwise and dense weights are int8 (symmetric, per output
channel), biases and activations float32: the operators read the int8 weights directly and quantize their
input on the fly (dense layers asymmetrically: ``asymmetric_quantize_inputs``, as today's converter writes
them).

For ``dtype="int8"`` the model is fully integer (int8 input and output) with
the parameters of :mod:`.quant`: per-tensor activation scales from a
calibration run, per-channel symmetric conv weights, per-tensor dense weights,
int32 biases, shared parameters across concatenations, pools, slices and
upsampling.

Example
-------
>>> from tvm_memsched.zoo.netdef import NetBuilder
>>> b = NetBuilder("toy")
>>> x = b.input((1, 3, 8, 8))
>>> buf = net_to_tflite(b.build(b.conv2d(x, 4, 3, act="relu")))
>>> buf[4:8]
b'TFL3'
"""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from .netdef import Layer, Net, same_pads
from ..core.files import atomic_write

__all__ = ["net_to_tflite", "write_tflite", "tflite_padding", "nchw_to_nhwc", "nhwc_to_nchw"]

# Operator versions as the TFLite converter writes them (float32, int8).
_VERSIONS = {
    "CONV_2D": (1, 3), "DEPTHWISE_CONV_2D": (1, 3), "RELU": (1, 2), "RELU6": (1, 2), "ADD": (1, 2),
    "CONCATENATION": (1, 2), "AVERAGE_POOL_2D": (1, 2), "MAX_POOL_2D": (1, 2), "MEAN": (1, 2),
    "FULLY_CONNECTED": (1, 4), "STRIDED_SLICE": (1, 2), "RESIZE_NEAREST_NEIGHBOR": (1, 2),
}

# ... and for operators reading int8 weights from float inputs (dynamic-range quantization, per-channel
# weights; fully connected with asymmetric_quantize_inputs, as the converter writes them)
_HYBRID_VERSIONS = {"CONV_2D": 5, "DEPTHWISE_CONV_2D": 6, "FULLY_CONNECTED": 12}


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    """Transpose a 4-D NCHW array to NHWC (other ranks are returned unchanged)."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if x.ndim == 4 else x


def nhwc_to_nchw(x: np.ndarray) -> np.ndarray:
    """Transpose a 4-D NHWC array to NCHW (other ranks are returned unchanged)."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if x.ndim == 4 else x


def tflite_padding(layer: Layer, in_shape) -> str:
    """``"SAME"`` or ``"VALID"`` for a windowed layer; raises ValueError if its pads are neither."""
    a = layer.attrs
    h, w = in_shape[2], in_shape[3]
    (kh, kw), (sh, sw) = a["kernel"], a["stride"]
    dh, dw = a.get("dilation", (1, 1))
    t, b, _ = same_pads(h, kh, sh, dh)
    l, r, _ = same_pads(w, kw, sw, dw)
    if tuple(a["pads"]) == (t, l, b, r):
        return "SAME"
    if tuple(a["pads"]) == (0, 0, 0, 0):
        return "VALID"
    raise ValueError(f"layer '{layer.name}': pads {a['pads']} are neither TFLite SAME nor VALID")


class _Writer:
    def __init__(self, net: Net, weights: Mapping[str, np.ndarray], qp: Mapping | None, half: bool = False,
                 hybrid: bool = False):
        from ..tflite import builder

        self.bld = builder
        self.tfl = builder.tfl
        self.net, self.w, self.qp = net, weights, qp
        self.int8 = qp is not None
        self.half = half
        self.hybrid = hybrid
        self.mb = builder.ModelBuilder(description=f"tvm_memsched zoo: {net.name}")
        self.index: dict[str, int] = {}

    # ---------------------------------------------------------------- tensors
    def act(self, layer: Layer) -> int:
        shape = layer.shape if len(layer.shape) != 4 else (layer.shape[0], layer.shape[2], layer.shape[3],
                                                          layer.shape[1])
        if self.int8:
            s, z = self.qp[layer.name]
            idx = self.mb.tensor(layer.name, shape, np.int8, scale=s, zero_point=z)
        else:
            idx = self.mb.tensor(layer.name, shape, np.float32)
        self.index[layer.name] = idx
        return idx

    def const_i32(self, name, values) -> int:
        v = np.asarray(values, dtype=np.int32)
        return self.mb.tensor(name, v.shape, np.int32, data=v)

    def weights(self, layer: Layer, w_tfl: np.ndarray, channel_axis: int | None, out_ch: int) -> tuple[int, int]:
        """Filter and bias tensors; ``w_tfl`` is already in TFLite layout."""
        b = self.w.get(f"{layer.name}.bias")
        b = np.zeros(out_ch, np.float32) if b is None else np.asarray(b, np.float32)
        if self.half:          # float16 constants, widened by DEQUANTIZE (the converter's float16 quantization)
            return tuple(self.widened(f"{layer.name}/{what}", a) for what, a in (("weight", w_tfl), ("bias", b)))
        if self.hybrid:        # int8 weights read by the float operator, float32 bias
            from .quant import quantize_symmetric

            q, sc = quantize_symmetric(w_tfl, 0 if channel_axis is None else channel_axis)
            wi = self.mb.tensor(f"{layer.name}/weight", q.shape, np.int8, data=q, scale=sc,
                                zero_point=[0] * len(sc), quantized_dimension=channel_axis or 0)
            return wi, self.mb.tensor(f"{layer.name}/bias", b.shape, np.float32, data=b)
        if not self.int8:
            wi = self.mb.tensor(f"{layer.name}/weight", w_tfl.shape, np.float32, data=w_tfl)
            bi = self.mb.tensor(f"{layer.name}/bias", b.shape, np.float32, data=b)
            return wi, bi
        from .quant import quantize_symmetric

        q, s = quantize_symmetric(w_tfl, channel_axis)
        s_in = self.qp[layer.inputs[0]][0]
        wi = self.mb.tensor(f"{layer.name}/weight", q.shape, np.int8, data=q, scale=s,
                            zero_point=[0] * len(s), quantized_dimension=channel_axis or 0)
        bscale = s_in * s
        bq = np.round(b / bscale).astype(np.int64)
        bq = np.clip(bq, -(2 ** 31) + 1, 2 ** 31 - 1).astype(np.int32)
        bi = self.mb.tensor(f"{layer.name}/bias", bq.shape, np.int32, data=bq, scale=bscale,
                            zero_point=[0] * len(bscale))
        return wi, bi

    def widened(self, name: str, a: np.ndarray) -> int:
        """A float32 tensor computed by DEQUANTIZE from ``a`` stored as float16 (version 3: float16 input)."""
        half = self.mb.tensor(f"{name}_fp16", a.shape, np.float16, data=np.asarray(a, np.float16))
        out = self.mb.tensor(name, a.shape, np.float32)
        self.mb.op(self.tfl.BuiltinOperator.DEQUANTIZE, [half], [out], self.tfl.BuiltinOptions.NONE, None,
                   version=3)
        return out

    # -------------------------------------------------------------------- ops
    def op(self, name: str, inputs, out: int, opt_name: str | None = None, opt=None, version: int | None = None):
        tfl = self.tfl
        code = getattr(tfl.BuiltinOperator, name)
        otype = getattr(tfl.BuiltinOptions, opt_name) if opt_name else tfl.BuiltinOptions.NONE
        if version is None:
            version = _HYBRID_VERSIONS[name] if self.hybrid and name in _HYBRID_VERSIONS else _VERSIONS[name][self.int8]
        self.mb.op(code, inputs, [out], otype, opt, version=version)

    def fused(self, act):
        A = self.tfl.ActivationFunctionType
        return {None: A.NONE, "relu": A.RELU, "relu6": A.RELU6}[act]

    def layer(self, l: Layer):
        tfl, a, net = self.tfl, l.attrs, self.net
        ins = [self.index[x] for x in l.inputs]
        in_shape = net.in_shape(l)
        if l.op in ("conv2d", "depthwise_conv2d", "avg_pool2d", "max_pool2d"):
            pad = getattr(tfl.Padding, tflite_padding(l, in_shape))
        if l.op == "conv2d":
            w = np.asarray(self.w[f"{l.name}.weight"], np.float32).transpose(0, 2, 3, 1)   # OIHW -> OHWI
            wi, bi = self.weights(l, np.ascontiguousarray(w), 0, a["out_channels"])
            opt = tfl.Conv2DOptionsT()
            opt.padding, (opt.strideH, opt.strideW) = pad, a["stride"]
            opt.dilationHFactor, opt.dilationWFactor = a["dilation"]
            opt.fusedActivationFunction = self.fused(a["act"])
            self.op("CONV_2D", ins + [wi, bi], self.act(l), "Conv2DOptions", opt)
        elif l.op == "depthwise_conv2d":
            w = np.asarray(self.w[f"{l.name}.weight"], np.float32).transpose(1, 2, 3, 0)   # (C,1,kh,kw) -> 1HWC
            wi, bi = self.weights(l, np.ascontiguousarray(w), 3, l.shape[1])
            opt = tfl.DepthwiseConv2DOptionsT()
            opt.padding, (opt.strideH, opt.strideW) = pad, a["stride"]
            opt.dilationHFactor, opt.dilationWFactor = a["dilation"]
            opt.depthMultiplier = 1
            opt.fusedActivationFunction = self.fused(a["act"])
            # the converter marks dilated float depthwise convolutions as version 2
            version = 2 if not self.int8 and tuple(a["dilation"]) != (1, 1) else None
            self.op("DEPTHWISE_CONV_2D", ins + [wi, bi], self.act(l), "DepthwiseConv2DOptions", opt, version)
        elif l.op in ("relu", "relu6"):
            self.op(l.op.upper(), ins, self.act(l))
        elif l.op == "add":
            opt = tfl.AddOptionsT()
            opt.fusedActivationFunction = self.fused(a["act"])
            self.op("ADD", ins, self.act(l), "AddOptions", opt)
        elif l.op == "concat":
            opt = tfl.ConcatenationOptionsT()
            opt.axis = 3
            self.op("CONCATENATION", ins, self.act(l), "ConcatenationOptions", opt)
        elif l.op in ("avg_pool2d", "max_pool2d"):
            opt = tfl.Pool2DOptionsT()
            opt.padding, (opt.strideH, opt.strideW) = pad, a["stride"]
            opt.filterHeight, opt.filterWidth = a["kernel"]
            name = "AVERAGE_POOL_2D" if l.op == "avg_pool2d" else "MAX_POOL_2D"
            self.op(name, ins, self.act(l), "Pool2DOptions", opt)
        elif l.op == "global_avg_pool":
            axes = self.const_i32(f"{l.name}/axes", [1, 2])
            opt = tfl.ReducerOptionsT()
            opt.keepDims = False
            self.op("MEAN", ins + [axes], self.act(l), "ReducerOptions", opt)
        elif l.op == "dense":
            if len(in_shape) != 2:
                raise ValueError(f"layer '{l.name}': dense needs a (1, features) input")
            w = np.ascontiguousarray(np.asarray(self.w[f"{l.name}.weight"], np.float32))
            wi, bi = self.weights(l, w, None, a["units"])
            opt = tfl.FullyConnectedOptionsT()
            opt.fusedActivationFunction = self.fused(a["act"])
            opt.asymmetricQuantizeInputs = self.hybrid
            self.op("FULLY_CONNECTED", ins + [wi, bi], self.act(l), "FullyConnectedOptions", opt)
        elif l.op == "strided_slice":
            perm = (0, 2, 3, 1)
            b_ = self.const_i32(f"{l.name}/begin", [a["begin"][p] for p in perm])
            e_ = self.const_i32(f"{l.name}/end", [a["end"][p] for p in perm])
            s_ = self.const_i32(f"{l.name}/strides", [a["strides"][p] for p in perm])
            self.op("STRIDED_SLICE", ins + [b_, e_, s_], self.act(l), "StridedSliceOptions",
                    tfl.StridedSliceOptionsT())
        elif l.op == "upsample_nearest":
            size = self.const_i32(f"{l.name}/size", [l.shape[2], l.shape[3]])
            opt = tfl.ResizeNearestNeighborOptionsT()
            opt.alignCorners, opt.halfPixelCenters = False, False
            self.op("RESIZE_NEAREST_NEIGHBOR", ins + [size], self.act(l), "ResizeNearestNeighborOptions", opt)
        else:
            raise ValueError(f"layer '{l.name}': no TFLite mapping for op '{l.op}'")

    def build(self) -> bytes:
        net = self.net
        for l in net.layers:
            if l.op == "input":
                self.act(l)
            else:
                self.layer(l)
        return self.mb.finish([self.index[net.input]], [self.index[net.output]])


def net_to_tflite(net: Net, dtype: str = "float32", *, weights: Mapping[str, np.ndarray] | None = None,
                  seed: int = 0, qparams: Mapping[str, tuple[float, int]] | None = None) -> bytes:
    """The ``.tflite`` bytes of ``net``.

    Parameters
    ----------
    dtype : ``"float32"``, ``"float16"``, ``"hybrid"`` or ``"int8"``
        ``"float16"``: float32 activations, weights and biases stored as float16 and widened by
        ``DEQUANTIZE`` operators (what TFLite's converter writes with float16 quantization, and MediaPipe's
        models); ``"hybrid"``: int8 weights read by float operators (dynamic-range quantization);
    weights : mapping, optional
        Float weights as produced by :meth:`Net.weights` (default: ``net.weights(seed)``).
    qparams : mapping, optional
        int8 only: ``layer -> (scale, zero_point)`` for every layer output
        (default: :func:`tvm_memsched.zoo.quant.activation_qparams`).
    """
    if dtype not in ("float32", "float16", "hybrid", "int8"):
        raise ValueError(f"dtype must be 'float32', 'float16', 'hybrid' or 'int8', got {dtype!r}")
    if weights is None:
        weights = net.weights(seed)
    if dtype == "int8" and qparams is None:
        from .quant import activation_qparams
        qparams = activation_qparams(net, weights)
    return _Writer(net, weights, qparams if dtype == "int8" else None, half=dtype == "float16",
                   hybrid=dtype == "hybrid").build()


def write_tflite(net: Net, path: str | os.PathLike, dtype: str = "float32", **kwargs) -> int:
    """Write ``net`` as a ``.tflite`` file; returns the number of bytes written."""
    buf = net_to_tflite(net, dtype, **kwargs)
    atomic_write(path, buf)
    return len(buf)
