"""Patch-based tiling of a ``.tflite``'s first stage (MCUNetV2-style), written in builtin operators.

The first blocks of MobileNet-like and landmark models hold the largest
activations; no order and no plan helps while a whole 112x112 feature map must
exist at once. Running that stage patch by patch does: each patch of the stage
output is computed from its window of the model input (the receptive field,
with overlapping halos), so only one patch's intermediates live at a time.

**The stage.** A tensor ``T`` of the main subgraph is a *split point* when every
operator it depends on is spatially local and tileable (below), reads only the
model's single 4-D NHWC input ``X``, constants (or tensors computed from constants only, such as
weights DEQUANTIZEd from float16 at run time) and other stage tensors, and no
stage tensor but ``T`` is read outside the stage. Tileable operators:
CONV_2D and DEPTHWISE_CONV_2D (any stride, dilation, SAME or VALID padding),
AVERAGE_POOL_2D / MAX_POOL_2D without padding (TFLite's SAME pooling excludes
padded elements, which no explicit padding reproduces), PAD / PADV2 on the
spatial and channel axes (the channel padding of residual shortcuts, repeated in
every patch), element-wise activations, QUANTIZE / DEQUANTIZE, and ADD / SUB /
MUL / SQUARED_DIFFERENCE whose other operands are stage tensors of the same
shape or per-channel constants.

**The rewrite** (:func:`tile_model`): ``T`` is split into an ``n x m`` grid.
Regions are propagated backwards through the stage (:func:`input_range`): a
window op with output rows ``[a, b)`` needs input rows ``[a*s - p, (b-1)*s - p +
(k-1)*d + 1)``, clipped to the tensor, the part outside being the op's own
padding at a true border. Each patch is computed by the same operators on
STRIDED_SLICE crops of its inputs, with an explicit PAD (zeros, or the zero
point: the value SAME padding reads) where the window crosses a true border and
VALID padding on the op; CONCATENATION along W then H rebuilds ``T`` for its
readers. Every output element is computed by the same kernel arithmetic over
the same inputs (a padded tap adds exactly what a skipped one does), so outputs
are bit-identical, which :func:`tflite --tile --report` checks in LiteRT and
TFLite Micro.

**Choosing where and how much** (:func:`search_tiling`): every split point and
grid is scored by our scheduler (``auto``, which finds the patch-by-patch order
in the rewritten graph: the rewrite lists the ops layer by layer) and the
offline planner (with the in-place level the plan uses), plus TFLite Micro's
persistent tail when it is installed (each patch adds operators whose per-op
data lives there); candidates whose extra multiply-accumulates exceed the
budget (default 15% of the model's) are skipped. Every candidate considered is
reported.

Example
-------
>>> input_range(2, 4, stride=2, kernel=3, dilation=1, pad_before=1, size=8)   # rows [2, 4) of a s2 conv
(3, 8, 0, 0)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import UnsupportedError
from ..core.tiling import DEFAULT_BUDGET, DEFAULT_GRIDS, TilingCandidate, TilingResult, input_range, patch_ranges
from . import builder
from .reader import TFLiteGraph, is_constant, load_model, read_tflite

__all__ = ["input_range", "split_points", "tile_model", "search_tiling", "TilingCandidate", "TilingResult",
           "DEFAULT_GRIDS", "DEFAULT_BUDGET"]

tfl = builder.tfl
B = tfl.BuiltinOperator

_WINDOW = {"CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "MAX_POOL_2D"}
_PADS = {"PAD", "PADV2"}
_UNARY = {"RELU", "RELU6", "RELU_N1_TO_1", "LOGISTIC", "TANH", "HARD_SWISH", "LEAKY_RELU", "ABS", "NEG",
          "QUANTIZE", "DEQUANTIZE", "PRELU"}
_BINARY = {"ADD", "SUB", "MUL", "SQUARED_DIFFERENCE"}


def _same_pad(size: int, out: int, stride: int, kernel: int, dilation: int) -> int:
    """TFLite's ``ComputePaddingHeightWidth``: the padding before the first element (SAME)."""
    eff = (kernel - 1) * dilation + 1
    return max((out - 1) * stride + eff - size, 0) // 2


def _shape(t) -> list[int]:
    return [] if t.shape is None else [int(s) for s in t.shape]


@dataclass
class _Geom:
    """Per spatial axis (H, W): kernel, stride, dilation, padding before, padding after (for PAD); for PAD also
    the channel padding (before, after), which every patch repeats (it is element-wise in space)."""

    kernel: tuple = (1, 1)
    stride: tuple = (1, 1)
    dilation: tuple = (1, 1)
    pad: tuple = (0, 0)
    channel_pad: tuple = (0, 0)


def _geometry(kind: str, op, tensors, model, label: str) -> _Geom | None:
    """Window geometry of a tileable op, None for element-wise ops; raises UnsupportedError otherwise."""
    ins = [int(i) for i in op.inputs]
    x, y = tensors[ins[0]], tensors[int(op.outputs[0])]
    if kind in _WINDOW:
        o = op.builtinOptions
        xs, ys = _shape(x), _shape(y)
        if kind.endswith("POOL_2D"):
            k, d = (int(o.filterHeight), int(o.filterWidth)), (1, 1)
        else:
            f = _shape(tensors[ins[1]])
            k, d = (f[1], f[2]), (int(o.dilationHFactor), int(o.dilationWFactor))
        s = (int(o.strideH), int(o.strideW))
        same = int(o.padding) == tfl.Padding.SAME
        pad = tuple(_same_pad(xs[1 + a], ys[1 + a], s[a], k[a], d[a]) if same else 0 for a in range(2))
        if kind.endswith("POOL_2D") and same and any(
                max((ys[1 + a] - 1) * s[a] + k[a] - xs[1 + a], 0) for a in range(2)):
            raise UnsupportedError(f"{label}: {kind} with SAME padding pads (TFLite excludes padded elements "
                                   "from pooling; no explicit padding reproduces it)")
        return _Geom(k, s, d, pad)
    if kind in _PADS:
        p = np.asarray(_const(model, tensors[ins[1]])).reshape(-1, 2)
        if p.shape[0] != 4 or p[0].any():
            raise UnsupportedError(f"{label}: {kind} pads the batch axis")
        if kind == "PADV2" and len(ins) > 2 and ins[2] >= 0:
            v = np.asarray(_const(model, tensors[ins[2]])).reshape(-1)
            zp = (x.quantization.zeroPoint[0] if x.quantization is not None and x.quantization.zeroPoint
                  is not None and len(x.quantization.zeroPoint) else 0)
            if v.size != 1 or int(v[0]) != int(zp):
                raise UnsupportedError(f"{label}: PADV2 with a constant other than zero")
        return _Geom(pad=((int(p[1][0]), int(p[1][1])), (int(p[2][0]), int(p[2][1]))),
                     channel_pad=(int(p[3][0]), int(p[3][1])))
    return None


def _const(model, tensor):
    buf = model.buffers[int(tensor.buffer)]
    data = bytes(bytearray(buf.data)) if buf.data is not None else b""
    dt = {2: np.int32, 4: np.int64}.get(int(tensor.type), np.int32)
    return np.frombuffer(data, dtype=dt).reshape(_shape(tensor) or [-1])


@dataclass
class _Stage:
    ops: list            # operator indices in the stage, topological (file) order
    output: int          # T's tensor index
    input: int           # X's tensor index


def _constant_like(model, sg) -> list[bool]:
    """Per tensor: a constant, or computed from constants only (float16 / int8 weights DEQUANTIZEd at run
    time): the same for every patch, so the stage reads it as it reads a constant."""
    const = [is_constant(model, t) for t in sg.tensors]
    for op in sg.operators:
        ins = [int(i) for i in op.inputs if int(i) >= 0]
        if ins and all(const[i] for i in ins):
            for o in op.outputs:
                if int(o) >= 0:
                    const[int(o)] = True
    return const


def _kind(model, op) -> str:
    return builder.opcode_name(model.operatorCodes[int(op.opcodeIndex)])


def split_points(tg: TFLiteGraph) -> list[int]:
    """Tensor indices of the split points of ``tg`` (see the module docstring), in file order."""
    return [s.output for s in _stages(tg)]


def _stages(tg: TFLiteGraph) -> list[_Stage]:
    model = tg.model
    sg = model.subgraphs[0]
    tensors = list(sg.tensors)
    ops = list(sg.operators)
    inputs = [int(i) for i in sg.inputs]
    if len(inputs) != 1 or len(_shape(tensors[inputs[0]])) != 4 or tg.stateful:
        return []
    x = inputs[0]
    const = _constant_like(model, sg)
    producer = {}
    for k, op in enumerate(ops):
        for o in op.outputs:
            producer[int(o)] = k
    readers: dict = {}
    for k, op in enumerate(ops):
        for i in op.inputs:
            if int(i) >= 0:
                readers.setdefault(int(i), []).append(k)
    graph_outputs = {int(o) for o in sg.outputs}
    out = []
    tileable: dict = {}
    for k, op in enumerate(ops):
        kind = _kind(model, op)
        ok = len([o for o in op.outputs if int(o) >= 0]) == 1 and len(_shape(tensors[int(op.outputs[0])])) == 4
        if ok and kind in _WINDOW | _PADS:
            try:
                _geometry(kind, op, tensors, model, kind)
            except (UnsupportedError, Exception):  # noqa: BLE001 - not tileable: ends every stage through it
                ok = False
        elif ok and kind in _BINARY:
            yshape = _shape(tensors[int(op.outputs[0])])
            for i in op.inputs:
                s = _shape(tensors[int(i)])
                if const[int(i)]:
                    ok = ok and (len(s) <= 1 or (len(s) == 4 and s[1] == s[2] == 1))
                else:
                    ok = ok and s == yshape
        elif ok and kind in _UNARY:
            ok = all(const[int(i)] for i in list(op.inputs)[1:])
        else:
            ok = False
        tileable[k] = ok
    for k, op in enumerate(ops):
        t = int(op.outputs[0]) if len(op.outputs) else -1
        if t < 0 or not tileable.get(k):
            continue
        # the stage of t: every op it depends on
        stage, stack, good = set(), [k], True
        while stack and good:
            v = stack.pop()
            if v in stage:
                continue
            if not tileable.get(v):
                good = False
                break
            stage.add(v)
            for i in ops[v].inputs:
                i = int(i)
                if i < 0 or const[i] or i == x:
                    continue
                if i not in producer:
                    good = False
                    break
                stack.append(producer[i])
        if not good or len(stage) < 2:
            continue
        made = {int(ops[v].outputs[0]) for v in stage}
        if any(m != t and (m in graph_outputs or any(r not in stage for r in readers.get(m, []))) for m in made):
            continue
        if not any(int(i) == x for v in stage for i in ops[v].inputs):
            continue
        out.append(_Stage(sorted(stage), t, x))
    return out


class _Rewriter:
    """Builds the tiled subgraph 0 in a copy of the model."""

    def __init__(self, model, stage: _Stage):
        self.m = copy.deepcopy(model)
        self.sg = self.m.subgraphs[0]
        self.stage = stage
        self.codes: dict = {}
        for k, oc in enumerate(self.m.operatorCodes):
            self.codes.setdefault((builder.builtin_code(oc), int(oc.version)), k)
        self.names = {t.name.decode() if isinstance(t.name, bytes) else t.name for t in self.sg.tensors}
        self.new_ops: list = []
        self.macs = 0

    def opcode(self, code: int, version: int = 1) -> int:
        key = (int(code), int(version))
        if key not in self.codes:
            oc = tfl.OperatorCodeT()
            oc.builtinCode = key[0]
            oc.deprecatedBuiltinCode = min(key[0], 127)
            oc.version = key[1]
            self.m.operatorCodes.append(oc)
            self.codes[key] = len(self.m.operatorCodes) - 1
        return self.codes[key]

    def _name(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def tensor_like(self, src: int, shape, name: str) -> int:
        t = copy.deepcopy(self.sg.tensors[src])
        t.name = self._name(name)
        t.shape = [int(s) for s in shape]
        t.shapeSignature = None
        t.buffer = self._empty_buffer()
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def _empty_buffer(self) -> int:
        self.m.buffers.append(tfl.BufferT())
        return len(self.m.buffers) - 1

    def const_i32(self, values, name: str) -> int:
        data = np.asarray(values, dtype=np.int32)
        self.m.buffers.append(builder.AlignedBufferT(data))
        t = tfl.TensorT()
        t.name, t.shape, t.type, t.buffer = self._name(name), list(data.shape), tfl.TensorType.INT32, \
            len(self.m.buffers) - 1
        self.sg.tensors.append(t)
        return len(self.sg.tensors) - 1

    def op(self, code, inputs, outputs, options_type=0, options=None, version=1, like=None):
        o = copy.deepcopy(like) if like is not None else tfl.OperatorT()
        if like is None:
            o.opcodeIndex = self.opcode(code, version)
            o.builtinOptionsType, o.builtinOptions = options_type, options
        o.inputs, o.outputs = [int(i) for i in inputs], [int(i) for i in outputs]
        self.new_ops.append(o)

    def crop(self, src: int, region, have, name: str) -> int:
        """STRIDED_SLICE of ``src`` (covering ``have``) down to ``region`` (both (y0, y1, x0, x1))."""
        if tuple(region) == tuple(have):
            return src
        y0, y1, x0, x1 = region
        c = _shape(self.sg.tensors[src])[3]
        n = _shape(self.sg.tensors[src])[0]
        out = self.tensor_like(src, [n, y1 - y0, x1 - x0, c], name)
        begin = self.const_i32([0, y0 - have[0], x0 - have[2], 0], name + "/begin")
        end = self.const_i32([n, y1 - have[0], x1 - have[2], c], name + "/end")
        strides = self.const_i32([1, 1, 1, 1], name + "/strides")
        self.op(B.STRIDED_SLICE, [src, begin, end, strides], [out], tfl.BuiltinOptions.StridedSliceOptions,
                tfl.StridedSliceOptionsT())
        return out

    def pad(self, src: int, pads, name: str) -> int:
        (pt, pb), (pl, pr) = pads
        if not (pt or pb or pl or pr):
            return src
        n, h, w, c = _shape(self.sg.tensors[src])
        out = self.tensor_like(src, [n, h + pt + pb, w + pl + pr, c], name)
        p = self.const_i32([[0, 0], [pt, pb], [pl, pr], [0, 0]], name + "/paddings")
        self.op(B.PAD, [src, p], [out], tfl.BuiltinOptions.PadOptions, tfl.PadOptionsT())
        return out


def _op_macs(kind: str, geom: _Geom | None, out_shape, in_shape) -> int:
    elems = math.prod(out_shape)
    if kind == "CONV_2D":
        return elems * geom.kernel[0] * geom.kernel[1] * in_shape[3]
    if kind == "DEPTHWISE_CONV_2D":
        return elems * geom.kernel[0] * geom.kernel[1]
    return 0


def tile_model(tg: TFLiteGraph, split: int | str, grid: tuple[int, int]) -> tuple[bytes, dict]:
    """The ``.tflite`` with the stage ending at tensor ``split`` (index or name) computed in a ``grid`` of
    patches (see the module docstring). Returns ``(file bytes, info)``; info has ``stage_ops``,
    ``tiled_ops``, ``stage_macs``, ``tiled_macs``. Raises UnsupportedError when ``split`` is not a split point.
    """
    stages = {s.output: s for s in _stages(tg)}
    if isinstance(split, str):
        idx = tg.tensor_ids.get(split)
        if idx is None:
            raise UnsupportedError(f"--tile-at: no activation tensor named '{split}'")
        split = idx
    if split not in stages:
        name = tg.tensor_names[split] if 0 <= split < len(tg.tensor_names) else split
        raise UnsupportedError(f"tensor '{name}' is not a split point: the ops it depends on must all be "
                               "spatially local, start from the model's single NHWC input, and only it may be "
                               "read after the stage")
    stage = stages[split]
    n_rows, n_cols = grid
    if n_rows < 1 or n_cols < 1:
        raise UnsupportedError(f"tile grid must be at least 1x1, got {n_rows}x{n_cols}")
    rw = _Rewriter(tg.model, stage)
    model, sg = rw.m, rw.sg
    tensors = sg.tensors
    ops = list(sg.operators)
    stage_set = set(stage.ops)
    const = _constant_like(model, sg)
    geoms = {v: _geometry(_kind(model, ops[v]), ops[v], tensors, model, "tile") for v in stage.ops}
    out_of = {v: int(ops[v].outputs[0]) for v in stage.ops}
    readers: dict = {}
    for v in stage.ops:
        for i in ops[v].inputs:
            readers.setdefault(int(i), []).append(v)
    ts = _shape(tensors[split])
    patches = [(ry, rx) for ry in patch_ranges(ts[1], n_rows) for rx in patch_ranges(ts[2], n_cols)]
    stage_macs = sum(_op_macs(_kind(model, ops[v]), geoms[v], _shape(tensors[out_of[v]]),
                              _shape(tensors[int(ops[v].inputs[0])])) for v in stage.ops)
    # regions each patch needs of every stage tensor (bounding boxes), backwards through the stage
    need: list[dict] = []
    for (y0, y1), (x0, x1) in patches:
        reg = {split: (y0, y1, x0, x1)}
        for v in reversed(stage.ops):
            t = out_of[v]
            if t not in reg:
                continue
            r = reg[t]
            g = geoms[v]
            xin = int(ops[v].inputs[0])
            ins = [xin] if g is not None else [int(i) for i in ops[v].inputs
                                               if int(i) >= 0 and not const[int(i)]]
            for i in ins:
                req = _required(r, g, _shape(tensors[i]), _kind(model, ops[v]))[0] if g is not None else r
                old = reg.get(i)
                reg[i] = req if old is None else (min(old[0], req[0]), max(old[1], req[1]),
                                                  min(old[2], req[2]), max(old[3], req[3]))
        need.append(reg)
    full_x = (0, _shape(tensors[stage.input])[1], 0, _shape(tensors[stage.input])[2])
    # emit layer by layer (the scheduler finds the patch order)
    patch_tensor: list[dict] = [{stage.input: (stage.input, full_x)} for _ in patches]
    tiled_macs = 0
    for v in stage.ops:
        op = ops[v]
        kind = _kind(model, op)
        g = geoms[v]
        t = out_of[v]
        base = (tensors[t].name.decode() if isinstance(tensors[t].name, bytes) else tensors[t].name)
        for p, reg in enumerate(need):
            if t not in reg:
                continue
            r = reg[t]
            tag = f"{base}/patch{p}"
            new_inputs = []
            if g is not None:
                xin = int(op.inputs[0])
                src, have = patch_tensor[p][xin]
                crop_reg, pads = _required(r, g, _shape(tensors[xin]), kind)
                x_t = rw.crop(src, crop_reg, have, f"{tag}/in")
                if kind in _PADS:      # the PAD itself: the spatial padding this patch crosses, all channel padding
                    if any(pads[0]) or any(pads[1]) or any(g.channel_pad):
                        out = rw.tensor_like(t, [ts_n(tensors, t), r[1] - r[0], r[3] - r[2],
                                                 _shape(tensors[t])[3]], tag)
                        p_t = rw.const_i32([[0, 0], list(pads[0]), list(pads[1]), list(g.channel_pad)],
                                           f"{tag}/paddings")
                        rest = [int(i) for i in list(op.inputs)[2:]]
                        rw.op(None, [x_t, p_t] + rest, [out], like=op)
                        patch_tensor[p][t] = (out, r)
                    else:                          # no padding in this patch: the crop is the patch
                        patch_tensor[p][t] = (x_t, r)
                    continue
                x_t = rw.pad(x_t, pads, f"{tag}/pad")
                new_inputs = [x_t] + [int(i) for i in list(op.inputs)[1:]]
                new_op = copy.deepcopy(op)
                new_op.builtinOptions = copy.deepcopy(op.builtinOptions)
                new_op.builtinOptions.padding = tfl.Padding.VALID
            else:
                for i in op.inputs:
                    i = int(i)
                    if i >= 0 and not const[i]:
                        src, have = patch_tensor[p][i]
                        new_inputs.append(rw.crop(src, r, have, f"{tag}/in{len(new_inputs)}"))
                    else:
                        new_inputs.append(i)
                new_op = op
            out = rw.tensor_like(t, [ts_n(tensors, t), r[1] - r[0], r[3] - r[2], _shape(tensors[t])[3]], tag)
            rw.op(None, new_inputs, [out], like=new_op)
            patch_tensor[p][t] = (out, r)
            tiled_macs += _op_macs(kind, g, _shape(tensors[out]), _shape(tensors[new_inputs[0]]))
    # rebuild T: concatenate each row of patches along W, then the rows along H
    rows = []
    k = 0
    base = tensors[split].name.decode() if isinstance(tensors[split].name, bytes) else tensors[split].name
    for ry in range(n_rows if n_rows <= ts[1] else ts[1]):
        row = []
        for _rx in range(n_cols if n_cols <= ts[2] else ts[2]):
            row.append(patch_tensor[k][split][0])
            k += 1
        rows.append(row)
    bands = []
    for i, row in enumerate(rows):
        if len(row) == 1:
            bands.append(row[0])
            continue
        h = _shape(tensors[row[0]])[1]
        band = split if len(rows) == 1 else rw.tensor_like(split, [ts[0], h, ts[2], ts[3]], f"{base}/row{i}")
        _concat(rw, row, band, axis=2)
        bands.append(band)
    if len(bands) > 1:
        _concat(rw, bands, split, axis=1)
    elif bands[0] != split:              # a 1x1 grid: the single patch is T
        _concat(rw, bands, split, axis=1)
    # splice: the tiled ops replace the stage, where T was produced
    last = max(stage.ops)
    new_list = []
    for v, op in enumerate(ops):
        if v in stage_set:
            if v == last:
                new_list.extend(rw.new_ops)
            continue
        new_list.append(op)
    sg.operators = new_list
    _drop_unused_tensors(sg)
    buf = builder.serialize(model)
    return buf, {"stage_ops": len(stage.ops), "tiled_ops": len(rw.new_ops), "stage_macs": stage_macs,
                 "tiled_macs": tiled_macs}


def _drop_unused_tensors(sg) -> None:
    """Remove the tensors no operator and no subgraph input/output refers to (the replaced stage's), renumbering
    the rest: TFLite Micro would otherwise still plan them."""
    used = {int(i) for op in sg.operators for i in list(op.inputs) + list(op.outputs) if int(i) >= 0}
    used |= {int(i) for i in list(sg.inputs) + list(sg.outputs)}
    for op in sg.operators:
        used |= {int(i) for i in (op.intermediates if op.intermediates is not None else []) if int(i) >= 0}
    keep = sorted(used)
    new = {old: k for k, old in enumerate(keep)}
    sg.tensors = [sg.tensors[i] for i in keep]
    for op in sg.operators:
        op.inputs = [new[int(i)] if int(i) >= 0 else -1 for i in op.inputs]
        op.outputs = [new[int(i)] if int(i) >= 0 else -1 for i in op.outputs]
        if op.intermediates is not None:
            op.intermediates = [new[int(i)] if int(i) >= 0 else -1 for i in op.intermediates]
    sg.inputs = [new[int(i)] for i in sg.inputs]
    sg.outputs = [new[int(i)] for i in sg.outputs]


def ts_n(tensors, t) -> int:
    return _shape(tensors[t])[0]


def _concat(rw: _Rewriter, parts, out, axis):
    o = tfl.ConcatenationOptionsT()
    o.axis = axis
    o.fusedActivationFunction = tfl.ActivationFunctionType.NONE
    rw.op(B.CONCATENATION, parts, [out], tfl.BuiltinOptions.ConcatenationOptions, o)


def _required(r, g: _Geom, in_shape, kind: str):
    """(input region to crop, ((top, bottom), (left, right)) zero padding) for output region ``r``."""
    if kind in _PADS:
        (pt, pb), (pl, pr) = g.pad
        out = []
        pads = []
        for a, (lo_o, hi_o) in enumerate(((r[0], r[1]), (r[2], r[3]))):
            before = (pt, pl)[a]
            size = in_shape[1 + a]
            lo, hi, zb, za = input_range(lo_o, hi_o, stride=1, kernel=1, dilation=1, pad_before=before, size=size)
            if hi <= lo:
                raise UnsupportedError("a patch lies entirely in a PAD's padding; use fewer patches")
            out.append((lo, hi))
            pads.append((zb, za))
        return (out[0][0], out[0][1], out[1][0], out[1][1]), tuple(pads)
    out, pads = [], []
    for a, (lo_o, hi_o) in enumerate(((r[0], r[1]), (r[2], r[3]))):
        lo, hi, zb, za = input_range(lo_o, hi_o, stride=g.stride[a], kernel=g.kernel[a], dilation=g.dilation[a],
                                     pad_before=g.pad[a], size=in_shape[1 + a])
        out.append((lo, hi))
        pads.append((zb, za))
    return (out[0][0], out[0][1], out[1][0], out[1][1]), tuple(pads)


def _score(tg: TFLiteGraph, inplace: str, time_limit: float, tflm: bool,
           exact: bool = False) -> tuple[int, int, int | None]:
    """(scheduled peak, our offline plan, TFLite Micro's persistent tail or None) of ``tg``, with the in-place
    level the plan will use. Every patch adds operators, and TFLite Micro keeps per-operator data (int8
    convolutions: a multiplier and a shift per channel) in its persistent tail, so fine grids can cost more
    tail than they save head: the tail is measured (one allocation, no bisection) when ``tflm``."""
    from ..core.errors import MemschedError
    from ..schedulers import schedule
    from .inplace import with_inplace
    from .offline_plan import plan_offline

    gi = with_inplace(tg, inplace)
    r = schedule(gi, "auto", time_limit=time_limit)
    plan = plan_offline(tg, r.order_ids, exact=exact, graph=None if gi is tg.graph else gi)
    tail = None
    if tflm:
        from .verify import tflm_arena

        try:
            tail = tflm_arena(tg.buf, bisect=False).tail
        except MemschedError:
            tail = None
    return r.peak_bytes, plan.arena_bytes, tail


def _tflm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("tflite_micro") is not None


def search_tiling(source, *, budget: float = DEFAULT_BUDGET, grids=DEFAULT_GRIDS, split=None, grid=None,
                  time_limit: float = 5.0, progress=None, inplace: str = "windowed",
                  tflm: bool | None = None) -> TilingResult:
    """Try split points x grids, score each by our schedule and offline plan (with the ``inplace`` level the
    plan will use, :mod:`.inplace`); the smallest plan within the MAC ``budget`` wins (see the module
    docstring). ``split`` / ``grid`` fix one of them. ``tflm``: add TFLite Micro's persistent tail to the score
    (default: when tflite-micro is installed; False for the Relax and microcontroller paths)."""
    tg = source if isinstance(source, TFLiteGraph) else read_tflite(source)
    g = tg.graph
    model_macs = sum(int(op.attrs.get("macs", 0)) for op in g.ops)
    tflm = (_tflm_available() if tflm is None else tflm) and not tg.offset_buffers
    base_peak, base_plan, base_tail = _score(tg, inplace, time_limit, tflm, exact=True)
    res = TilingResult(None, None, [], base_peak, base_plan, model_macs, base_tail)

    def total(plan, tail):
        return plan + (tail or 0)
    points = split_points(tg)
    if split is not None:
        idx = split if isinstance(split, int) else tg.tensor_ids.get(split)
        if idx not in points:
            tile_model(tg, split if idx is None else idx, (1, 1))   # raises the explanatory error
        points = [idx]
    if not points:
        raise UnsupportedError(f"{tg.graph.name}: no split point for patch tiling (the model needs a single NHWC "
                               "input followed by spatially local operators)")
    scored = []
    for t in points:
        for gr in ([tuple(grid)] if grid is not None else grids):
            import time

            t0 = time.perf_counter()
            name = tg.tensor_names[t]
            try:
                buf, info = tile_model(tg, t, gr)
            except UnsupportedError:
                continue
            extra = info["tiled_macs"] - info["stage_macs"]
            over = extra / model_macs if model_macs else 0.0
            cand = TilingCandidate(name, tuple(gr), info["stage_ops"], info["tiled_ops"], extra, over, None, None,
                                   over <= budget)
            if cand.within_budget:
                cand.peak_bytes, cand.plan_bytes, cand.tflm_tail_bytes = _score(
                    read_tflite(buf, name=g.name), inplace, time_limit, tflm)
                scored.append((cand, buf))
            cand.seconds = round(time.perf_counter() - t0, 3)
            res.candidates.append(cand)
            if progress:
                progress(f"tile at {name} {gr[0]}x{gr[1]}: overhead {100 * over:.1f}%, plan "
                         f"{cand.plan_bytes if cand.plan_bytes is not None else '-'} B")
    # the most promising few get the exact placement the final plan uses (as the untiled baseline did)
    scored.sort(key=lambda cb: total(cb[0].plan_bytes, cb[0].tflm_tail_bytes))
    for cand, buf in scored[:3]:
        cand.peak_bytes, cand.plan_bytes, cand.tflm_tail_bytes = _score(
            read_tflite(buf, name=g.name), inplace, time_limit, tflm, exact=True)
    best = min(scored[:3], key=lambda cb: total(cb[0].plan_bytes, cb[0].tflm_tail_bytes), default=None)
    if best is not None and total(best[0].plan_bytes, best[0].tflm_tail_bytes) < total(base_plan, base_tail):
        res.chosen, res.buf = best
    return res
