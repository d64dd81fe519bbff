"""Streaming keyword-spotting models: int8 ``.tflite`` files with resource variables, as deployed with TFLM.

Streaming models (microWakeWord-style, run on ESP32-class boards) see a few new
spectrogram frames per invocation and keep the past frames each convolution
needs in *resource variables*. :func:`streaming_kws_tflite` writes one in the
layout the TFLite converter produces:

* subgraph 0 (main) starts with ``CALL_ONCE(init_subgraph_index=1)`` and one
  ``VAR_HANDLE`` per variable (``container`` / ``shared_name``); every
  streaming layer then ``READ_VARIABLE``\\ s its ring buffer, ``CONCATENATION``\\ s
  the new frames to it along time, ``STRIDED_SLICE``\\ s the newest frames back
  into the variable with ``ASSIGN_VARIABLE`` and convolves the concatenation
  (a ``VALID`` convolution over time leaves the new output frames);
* the blocks are depthwise-separable: ``SPLIT_V`` over channels into groups
  with different kernel sizes (mixed convolutions; smaller kernels
  ``STRIDED_SLICE`` the newest part of the window), ``DEPTHWISE_CONV_2D`` per
  group, ``CONCATENATION``, pointwise ``CONV_2D`` with ReLU;
* a streaming average over the last ``pool`` frames, ``FULLY_CONNECTED`` and
  ``LOGISTIC`` give the wake-word probability (int8, scale 1/256);
* subgraph 1 (init) has the same ``VAR_HANDLE``\\ s and ``ASSIGN_VARIABLE``\\ s of
  constant zeros (the zero point of each variable's quantization).

Operators are written in the order a layer-by-layer trace produces (each read
next to its use, ``layout="traced"``) or, as a harder case for memory, with
every ``READ_VARIABLE`` right after the handles and every ``ASSIGN_VARIABLE``
at the end (``layout="hoisted"``: all ring-buffer copies live from the start,
every new state to the end); both are valid files computing the same thing.

Everything is int8 with per-channel symmetric weights and int32 biases; the
weights are random (seeded) and the activation scales are set from the
weights so values neither vanish nor saturate. Time is the height axis of
NHWC tensors ``(1, frames, 1, channels)``.

Example
-------
>>> from tvm_memsched.tflite.builder import load, operator_names
>>> m = load(streaming_kws_tflite())
>>> len(m.subgraphs), operator_names(m)[:3]
(2, ['CALL_ONCE', 'VAR_HANDLE', 'VAR_HANDLE'])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["StreamingConfig", "streaming_kws_tflite", "SMALL", "MICRO_WAKE_WORD_LIKE"]


@dataclass(frozen=True)
class StreamingConfig:
    """Shape of a streaming KWS model.

    ``stride`` new frames of ``features`` values per invocation; the first
    convolution (``first_kernel`` frames, stride ``stride``, ``first_channels``
    filters) leaves one frame per invocation; each entry of ``blocks`` is
    ``(kernel sizes of the channel groups, pointwise output channels)``;
    ``pool`` frames are averaged before the classifier.
    """

    stride: int = 3
    features: int = 40
    first_kernel: int = 5
    first_channels: int = 32
    blocks: tuple = (((5,), 32), ((5, 9), 48), ((9, 13), 64))
    pool: int = 4


#: a small model for tests (a few hundred bytes of activations)
SMALL = StreamingConfig(stride=2, features=16, first_kernel=3, first_channels=8,
                        blocks=(((3,), 8), ((3, 5), 12)), pool=3)
#: about the size of microWakeWord's streaming MixedNet models
MICRO_WAKE_WORD_LIKE = StreamingConfig(stride=3, features=40, first_kernel=5, first_channels=32,
                                       blocks=(((5,), 64), ((5, 9), 64), ((9, 13), 64), ((13, 21), 64)),
                                       pool=6)


class _Writer:
    def __init__(self, cfg: StreamingConfig, seed: int, container: str, layout: str):
        from ..tflite import builder

        self.tfl = builder.tfl
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        self.container = container
        self.layout = layout
        self.mb = builder.ModelBuilder(description="tvm_memsched streaming keyword spotting")
        self.variables: list = []      # (shared name, shape, scale, zero point)
        self.n = 0

    # ------------------------------------------------------------- helpers
    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def act(self, base: str, shape, scale: float, zp: int) -> int:
        return self.mb.tensor(self.name(base), shape, np.int8, scale=scale, zero_point=zp)

    def const_i32(self, base: str, values) -> int:
        v = np.asarray(values, np.int32)
        return self.mb.tensor(self.name(base), v.shape, np.int32, data=v)

    def op(self, name: str, inputs, outputs, opt_name: str | None = None, opt=None, version: int = 1) -> int:
        tfl = self.tfl
        otype = getattr(tfl.BuiltinOptions, opt_name) if opt_name else tfl.BuiltinOptions.NONE
        return self.mb.op(getattr(tfl.BuiltinOperator, name), inputs, outputs, otype, opt, version)

    def qparams(self, t: int) -> tuple[float, int]:
        q = self.mb.tensors[t].quantization
        return float(q.scale[0]), int(q.zeroPoint[0])

    def tfl_name(self, op) -> str:
        from ..tflite.builder import opcode_name

        return opcode_name(self.mb.opcodes[op.opcodeIndex])

    def var_handle(self, shared: str) -> int:
        tfl = self.tfl
        h = self.mb.tensor(self.name(f"{shared}/handle"), [], type_code=tfl.TensorType.RESOURCE)
        opt = tfl.VarHandleOptionsT()
        opt.container, opt.sharedName = self.container, shared
        self.op("VAR_HANDLE", [], [h], "VarHandleOptions", opt)
        return h

    def weights(self, base: str, w: np.ndarray, in_scale: float, axis: int, bias: np.ndarray):
        """int8 per-channel symmetric weights (channel ``axis``) and int32 bias tensors."""
        amax = np.max(np.abs(w), axis=tuple(i for i in range(w.ndim) if i != axis))
        s = np.maximum(amax, 1e-8) / 127.0
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / s.reshape(shape)), -127, 127).astype(np.int8)
        wi = self.mb.tensor(self.name(f"{base}/weights"), q.shape, np.int8, data=q, scale=s,
                            zero_point=[0] * len(s), quantized_dimension=axis)
        bs = in_scale * s
        bq = np.round(bias / bs).astype(np.int32)
        bi = self.mb.tensor(self.name(f"{base}/bias"), bq.shape, np.int32, data=bq, scale=bs,
                            zero_point=[0] * len(bs))
        return wi, bi

    # -------------------------------------------------------------- layers
    def stream(self, x: int, frames: int, shared: str, handle: int) -> int:
        """READ the ring buffer of ``frames`` frames, CONCATENATE ``x``, keep the newest ``frames`` (ASSIGN);
        returns the concatenation."""
        tfl = self.tfl
        t = self.mb.tensors[x]
        _, new, w, c = t.shape
        scale, zp = self.qparams(x)
        self.variables.append((shared, [1, frames, w, c], scale, zp))
        state = self.act(f"{shared}/read", [1, frames, w, c], scale, zp)
        self.op("READ_VARIABLE", [handle], [state], "ReadVariableOptions", tfl.ReadVariableOptionsT())
        cat = self.act(f"{shared}/concat", [1, frames + new, w, c], scale, zp)
        opt = tfl.ConcatenationOptionsT()
        opt.axis = 1
        self.op("CONCATENATION", [state, x], [cat], "ConcatenationOptions", opt, 2)
        self.slice_time(cat, new, frames + new, shared, assign=handle)
        return cat

    def slice_time(self, x: int, start: int, end: int, base: str, assign: int | None = None) -> int:
        tfl = self.tfl
        shape = list(self.mb.tensors[x].shape)
        scale, zp = self.qparams(x)
        out = self.act(f"{base}/slice", [shape[0], end - start, shape[2], shape[3]], scale, zp)
        b = self.const_i32(f"{base}/begin", [0, start, 0, 0])
        e = self.const_i32(f"{base}/end", [shape[0], end, shape[2], shape[3]])
        s = self.const_i32(f"{base}/strides", [1, 1, 1, 1])
        self.op("STRIDED_SLICE", [x, b, e, s], [out], "StridedSliceOptions", tfl.StridedSliceOptionsT(), 2)
        if assign is not None:
            self.op("ASSIGN_VARIABLE", [assign, out], [], "AssignVariableOptions", tfl.AssignVariableOptionsT())
        return out

    def conv(self, x: int, kernel: int, stride: int, channels: int, base: str) -> int:
        tfl = self.tfl
        _, h, w, c = self.mb.tensors[x].shape
        s_in, _ = self.qparams(x)
        wf = self.rng.standard_normal((channels, kernel, 1, c)).astype(np.float32) / np.sqrt(kernel * c)
        bias = self.rng.standard_normal(channels).astype(np.float32) * 0.1
        wi, bi = self.weights(base, wf, s_in, 0, bias)
        out_h = (h - kernel) // stride + 1
        out = self.act(f"{base}/conv", [1, out_h, w, channels], s_in * 1.5 / 2, -128)   # ReLU: zp -128
        opt = tfl.Conv2DOptionsT()
        opt.padding, opt.strideH, opt.strideW = tfl.Padding.VALID, stride, 1
        opt.dilationHFactor = opt.dilationWFactor = 1
        opt.fusedActivationFunction = tfl.ActivationFunctionType.RELU
        self.op("CONV_2D", [x, wi, bi], [out], "Conv2DOptions", opt, 3)
        return out

    def depthwise(self, x: int, kernel: int, base: str) -> int:
        tfl = self.tfl
        _, h, w, c = self.mb.tensors[x].shape
        s_in, _ = self.qparams(x)
        wf = self.rng.standard_normal((1, kernel, 1, c)).astype(np.float32) / np.sqrt(kernel)
        bias = self.rng.standard_normal(c).astype(np.float32) * 0.1
        wi, bi = self.weights(base, wf, s_in, 3, bias)
        out = self.act(f"{base}/dwconv", [1, h - kernel + 1, w, c], s_in * 0.75, 0)
        opt = tfl.DepthwiseConv2DOptionsT()
        opt.padding, opt.strideH, opt.strideW = tfl.Padding.VALID, 1, 1
        opt.dilationHFactor = opt.dilationWFactor = 1
        opt.depthMultiplier = 1
        self.op("DEPTHWISE_CONV_2D", [x, wi, bi], [out], "DepthwiseConv2DOptions", opt, 3)
        return out

    def block(self, x: int, kernels, channels: int, k: int, handle: int) -> int:
        tfl = self.tfl
        base = f"block{k}"
        kmax = max(kernels)
        cat = self.stream(x, kmax - 1, f"{base}/stream", handle)
        c = self.mb.tensors[cat].shape[3]
        groups = [c // len(kernels)] * len(kernels)
        groups[-1] += c - sum(groups)
        parts = [cat]
        if len(kernels) > 1:
            scale, zp = self.qparams(cat)
            parts = [self.act(f"{base}/split", [1, kmax, 1, g], scale, zp) for g in groups]
            sizes = self.const_i32(f"{base}/split_sizes", groups)
            axis = self.const_i32(f"{base}/split_axis", 3)
            opt = tfl.SplitVOptionsT()
            opt.numSplits = len(groups)
            self.op("SPLIT_V", [cat, sizes, axis], parts, "SplitVOptions", opt, 2)
        outs = []
        for g, (part, kern) in enumerate(zip(parts, kernels)):
            if kern < kmax:
                part = self.slice_time(part, kmax - kern, kmax, f"{base}/g{g}")
            outs.append(self.depthwise(part, kern, f"{base}/g{g}"))
        y = outs[0]
        if len(outs) > 1:
            scale, zp = self.qparams(outs[0])
            y = self.act(f"{base}/mix", [1, 1, 1, c], scale, zp)
            opt = tfl.ConcatenationOptionsT()
            opt.axis = 3
            self.op("CONCATENATION", outs, [y], "ConcatenationOptions", opt, 2)
        return self.conv(y, 1, 1, channels, f"{base}/pointwise")

    def build(self) -> bytes:
        tfl, cfg, mb = self.tfl, self.cfg, self.mb
        n_vars = 2 + len(cfg.blocks)
        names = ["stream_input"] + [f"block{k}/stream" for k in range(len(cfg.blocks))] + ["pool/stream"]
        # subgraph 0: CALL_ONCE, VAR_HANDLEs, then the network
        opt = tfl.CallOnceOptionsT()
        opt.initSubgraphIndex = 1
        self.op("CALL_ONCE", [], [], "CallOnceOptions", opt)
        handles = [self.var_handle(n) for n in names]
        x_in = self.act("input", [1, cfg.stride, cfg.features], 0.1, 0)
        shape = self.const_i32("reshape/shape", [1, cfg.stride, 1, cfg.features])
        x = self.act("reshape", [1, cfg.stride, 1, cfg.features], 0.1, 0)
        ropt = tfl.ReshapeOptionsT()
        ropt.newShape = [1, cfg.stride, 1, cfg.features]
        self.op("RESHAPE", [x_in, shape], [x], "ReshapeOptions", ropt)
        cat = self.stream(x, cfg.first_kernel - 1, names[0], handles[0])
        x = self.conv(cat, cfg.first_kernel, cfg.stride, cfg.first_channels, "first")
        for k, (kernels, channels) in enumerate(cfg.blocks):
            x = self.block(x, kernels, channels, k, handles[k + 1])
        cat = self.stream(x, cfg.pool - 1, names[-1], handles[-1])
        scale, zp = self.qparams(cat)
        c = mb.tensors[cat].shape[3]
        pooled = self.act("pool/avg", [1, 1, 1, c], scale, zp)
        popt = tfl.Pool2DOptionsT()
        popt.padding, popt.strideH, popt.strideW = tfl.Padding.VALID, 1, 1
        popt.filterHeight, popt.filterWidth = cfg.pool, 1
        self.op("AVERAGE_POOL_2D", [cat], [pooled], "Pool2DOptions", popt, 2)
        flat_shape = self.const_i32("flatten/shape", [1, c])
        flat = self.act("flatten", [1, c], scale, zp)
        ropt = tfl.ReshapeOptionsT()
        ropt.newShape = [1, c]
        self.op("RESHAPE", [pooled, flat_shape], [flat], "ReshapeOptions", ropt)
        wf = self.rng.standard_normal((1, c)).astype(np.float32) / np.sqrt(c)
        wi, bi = self.weights("classifier", wf, scale, 0, np.zeros(1, np.float32))
        mb.tensors[wi].quantization.quantizedDimension = 0
        logit = self.act("classifier/logit", [1, 1], scale * 2.0, 0)
        fopt = tfl.FullyConnectedOptionsT()
        self.op("FULLY_CONNECTED", [flat, wi, bi], [logit], "FullyConnectedOptions", fopt, 4)
        prob = self.act("probability", [1, 1], 1.0 / 256, -128)
        self.op("LOGISTIC", [logit], [prob], version=2)
        assert len(self.variables) == n_vars
        if self.layout == "hoisted":
            names = [self.tfl_name(o) for o in mb.operators]
            rank = {"CALL_ONCE": 0, "VAR_HANDLE": 1, "READ_VARIABLE": 2, "ASSIGN_VARIABLE": 4}
            order = sorted(range(len(names)), key=lambda i: (rank.get(names[i], 3), i))
            mb.operators[:] = [mb.operators[i] for i in order]
        # subgraph 1: VAR_HANDLE + ASSIGN_VARIABLE of zeros for every variable
        mb.subgraph("init")
        for shared, vshape, scale, zp in self.variables:
            h = self.var_handle(shared)
            zeros = mb.tensor(self.name(f"{shared}/zeros"), vshape, np.int8, data=np.full(vshape, zp, np.int8),
                              scale=scale, zero_point=zp)
            self.op("ASSIGN_VARIABLE", [h, zeros], [], "AssignVariableOptions", tfl.AssignVariableOptionsT())
        mb.use(0)
        return mb.finish([x_in], [prob])


def streaming_kws_tflite(config: StreamingConfig = SMALL, *, seed: int = 0, container: str = "",
                         layout: str = "traced") -> bytes:
    """The ``.tflite`` bytes of a streaming keyword-spotting model (see the module docstring).

    ``config`` sets the sizes (:data:`SMALL` for tests, :data:`MICRO_WAKE_WORD_LIKE`
    for benchmarks); ``seed`` the random weights; ``container`` the resource
    variables' container name (the converter writes an empty one); ``layout``
    the operator order, ``"traced"`` or ``"hoisted"``.
    """
    if layout not in ("traced", "hoisted"):
        raise ValueError(f"layout must be 'traced' or 'hoisted', got {layout!r}")
    return _Writer(config, seed, container, layout).build()
