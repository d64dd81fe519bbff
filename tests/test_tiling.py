"""Patch tiling of a .tflite's first stage: halo arithmetic against brute force, tiled == untiled bit for bit."""

import math
import random
import re

import numpy as np
import pytest

from tvm_memsched.app.cli import main as cli_main
from tvm_memsched.core.errors import UnsupportedError
from tvm_memsched.tflite.builder import ModelBuilder, tfl
from tvm_memsched.tflite.reader import read_tflite
from tvm_memsched.tflite.tiling import input_range, search_tiling, split_points, tile_model

B, O = tfl.BuiltinOperator, tfl.BuiltinOptions


@pytest.mark.parametrize("seed", range(300))
def test_input_range_matches_brute_force(seed):
    rng = random.Random(seed)
    k, s, d = rng.randint(1, 5), rng.randint(1, 3), rng.randint(1, 3)
    size = rng.randint(1, 20)
    pad = rng.randint(0, (k - 1) * d)
    out = (size + 2 * pad - (k - 1) * d - 1) // s + 1
    if out < 1:
        return
    a = rng.randrange(out)
    b = rng.randint(a + 1, out)
    taps = [o * s - pad + j * d for o in range(a, b) for j in range(k)]
    inside = [t for t in taps if 0 <= t < size]
    lo, hi, before, after = input_range(a, b, stride=s, kernel=k, dilation=d, pad_before=pad, size=size)
    # the crop spans the window clipped to the tensor (with dilation it may hold rows no tap reads), and the
    # zero rows stand exactly for the taps outside it
    assert all(lo <= t < hi for t in inside)
    assert (lo, hi) == (max(0, min(taps)), min(size, max(taps) + 1))
    assert before == max(0, -min(taps)) and after == max(0, max(taps) + 1 - size)
    assert hi - lo + before + after == (b - a - 1) * s + (k - 1) * d + 1     # the padded window


# ------------------------------------------------------------ random stacks
def _q(rng, int8):
    return dict(scale=float(rng.uniform(0.02, 0.1)), zero_point=int(rng.integers(-20, 20))) if int8 else {}


def random_stack(seed: int, int8: bool):
    """A random NHWC stack: convs / depthwise (strides, dilations, SAME / VALID, odd sizes), PAD (spatial and
    channel), max pooling
    without padding, activations and a residual ADD."""
    rng = np.random.default_rng(seed)
    dt = np.int8 if int8 else np.float32
    mb = ModelBuilder()
    h, w, c = int(rng.integers(9, 16)), int(rng.integers(9, 16)), int(rng.integers(1, 4))
    x = mb.tensor("x", [1, h, w, c], dt, **_q(rng, int8))
    cur, shape = x, [1, h, w, c]
    skip = None
    for i in range(int(rng.integers(3, 6))):
        kind = rng.choice(["conv", "dw", "pad", "pool", "relu", "add"])
        n, hh, ww, cc = shape
        if kind in ("conv", "dw"):
            k = int(rng.choice([1, 3, 3, 5]))
            s = int(rng.choice([1, 1, 2]))
            dil = int(rng.choice([1, 1, 2])) if s == 1 else 1
            same = bool(rng.random() < 0.7)
            eff = (k - 1) * dil + 1
            if not same and (hh < eff or ww < eff):
                continue
            oh = math.ceil(hh / s) if same else (hh - eff) // s + 1
            ow = math.ceil(ww / s) if same else (ww - eff) // s + 1
            oc = cc if kind == "dw" else int(rng.integers(1, 5))
            wshape = [1, k, k, oc] if kind == "dw" else [oc, k, k, cc]
            if int8:
                ws = rng.uniform(0.005, 0.02, oc).astype(np.float32)
                wt = mb.tensor(f"w{i}", wshape, np.int8, data=rng.integers(-127, 128, wshape).astype(np.int8),
                               scale=ws, zero_point=np.zeros(oc, int), quantized_dimension=3 if kind == "dw" else 0)
                sx = mb.tensors[cur].quantization.scale[0]
                bias = mb.tensor(f"b{i}", [oc], np.int32, data=rng.integers(-500, 500, [oc]).astype(np.int32),
                                 scale=sx * ws, zero_point=np.zeros(oc, int))
            else:
                wt = mb.tensor(f"w{i}", wshape, np.float32, data=rng.standard_normal(wshape).astype(np.float32))
                bias = mb.tensor(f"b{i}", [oc], np.float32, data=rng.standard_normal([oc]).astype(np.float32))
            y = mb.tensor(f"t{i}", [1, oh, ow, oc], dt, **_q(rng, int8))
            if kind == "dw":
                o = tfl.DepthwiseConv2DOptionsT()
                o.depthMultiplier = 1
                code, ot = B.DEPTHWISE_CONV_2D, O.DepthwiseConv2DOptions
            else:
                o = tfl.Conv2DOptionsT()
                code, ot = B.CONV_2D, O.Conv2DOptions
            o.padding = tfl.Padding.SAME if same else tfl.Padding.VALID
            o.strideH = o.strideW = s
            o.dilationHFactor = o.dilationWFactor = dil
            o.fusedActivationFunction = int(rng.choice([0, 1, 3]))
            mb.op(code, [cur, wt, bias], [y], ot, o, version=3 if int8 else 1)
            cur, shape = y, [1, oh, ow, oc]
        elif kind == "pad":
            p = rng.integers(0, 3, size=(3, 2))       # H, W and (a residual shortcut's) channel padding
            if rng.random() < 0.5:
                p[2] = 0
            pads = mb.tensor(f"p{i}", [4, 2], np.int32,
                             data=np.array([[0, 0], p[0], p[1], p[2]], np.int32))
            q = mb.tensors[cur].quantization
            shape = [1, hh + int(p[0].sum()), ww + int(p[1].sum()), cc + int(p[2].sum())]
            y = mb.tensor(f"t{i}", shape, dt,
                          **({"scale": q.scale[0], "zero_point": q.zeroPoint[0]} if int8 else {}))
            mb.op(B.PAD, [cur, pads], [y], O.PadOptions, tfl.PadOptionsT(), version=2 if int8 else 1)
            cur = y
        elif kind == "pool" and hh >= 2 and ww >= 2:
            o = tfl.Pool2DOptionsT()
            o.padding, o.strideH, o.strideW, o.filterHeight, o.filterWidth = tfl.Padding.VALID, 2, 2, 2, 2
            q = mb.tensors[cur].quantization
            y = mb.tensor(f"t{i}", [1, hh // 2, ww // 2, cc], dt,
                          **({"scale": q.scale[0], "zero_point": q.zeroPoint[0]} if int8 else {}))
            mb.op(B.MAX_POOL_2D, [cur], [y], O.Pool2DOptions, o, version=2 if int8 else 1)
            cur, shape = y, [1, hh // 2, ww // 2, cc]
        elif kind == "relu":
            y = mb.tensor(f"t{i}", shape, dt, **_q(rng, int8))
            mb.op(B.RELU, [cur], [y], version=2 if int8 else 1)
            skip, cur = cur, y
        elif kind == "add" and skip is not None and list(mb.tensors[skip].shape) == shape:
            y = mb.tensor(f"t{i}", shape, dt, **_q(rng, int8))
            o = tfl.AddOptionsT()
            mb.op(B.ADD, [cur, skip], [y], O.AddOptions, o, version=2 if int8 else 1)
            cur = y
    if cur == x:
        return None
    # a tail the stage feeds: one more conv that stays untiled
    y = mb.tensor("head", shape, dt, **_q(rng, int8))
    mb.op(B.RELU, [cur], [y], version=2 if int8 else 1)
    return mb.finish([x], [y])


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
def test_tiled_random_stacks_are_bit_identical(seed, int8):
    pytest.importorskip("tflite_micro")
    from tvm_memsched.tflite.verify import compare_litert, compare_tflm

    buf = random_stack(seed, int8)
    if buf is None:
        pytest.skip("degenerate stack")
    tg = read_tflite(buf)
    points = split_points(tg)
    if not points:
        pytest.skip("no split point")
    rng = random.Random(seed)
    split = rng.choice(points)
    shape = list(tg.model.subgraphs[0].tensors[split].shape)
    grid = (rng.randint(1, min(4, shape[1])), rng.randint(1, min(4, shape[2])))
    try:
        tiled, info = tile_model(tg, split, grid)
    except UnsupportedError as e:
        assert "padding" in str(e)
        return
    assert info["tiled_ops"] > info["stage_ops"] or grid == (1, 1)
    assert compare_litert(buf, tiled, trials=2, reference_kernels=True).identical
    if int8:                                   # integer kernels: bit-identical on LiteRT's optimised ones too
        assert compare_litert(buf, tiled, trials=2).identical
    assert compare_tflm(buf, tiled, trials=2).identical


def shortcut_block(int8: bool):
    """A landmark-model residual block: conv 3x3 s2 on one side, max pooling and a channel PAD (the shortcut
    widened to the conv's channels) on the other, ADD, PRELU-free head."""
    rng = np.random.default_rng(7)
    dt = np.int8 if int8 else np.float32
    q = dict(scale=0.05, zero_point=3) if int8 else {}
    mb = ModelBuilder()
    x = mb.tensor("x", [1, 13, 12, 4], dt, **q)
    wshape = [8, 3, 3, 4]
    if int8:
        ws = np.full(8, 0.01, np.float32)
        w = mb.tensor("w", wshape, np.int8, data=rng.integers(-127, 128, wshape).astype(np.int8), scale=ws,
                      zero_point=np.zeros(8, int), quantized_dimension=0)
        b = mb.tensor("b", [8], np.int32, data=rng.integers(-500, 500, [8]).astype(np.int32), scale=0.05 * ws,
                      zero_point=np.zeros(8, int))
    else:
        w = mb.tensor("w", wshape, np.float32, data=rng.standard_normal(wshape).astype(np.float32))
        b = mb.tensor("b", [8], np.float32, data=rng.standard_normal([8]).astype(np.float32))
    conv = mb.tensor("conv", [1, 7, 6, 8], dt, **q)
    o = tfl.Conv2DOptionsT()
    o.padding, o.strideH, o.strideW, o.dilationHFactor, o.dilationWFactor = tfl.Padding.SAME, 2, 2, 1, 1
    mb.op(B.CONV_2D, [x, w, b], [conv], O.Conv2DOptions, o, version=3 if int8 else 1)
    xp = mb.tensor("xp", [1, 14, 12, 4], dt, **q)             # odd height: pad one row so pooling covers it
    mb.op(B.PAD, [x, mb.tensor("p0", [4, 2], np.int32, data=np.array([[0, 0], [0, 1], [0, 0], [0, 0]],
                                                                              np.int32))],
          [xp], O.PadOptions, tfl.PadOptionsT(), version=2 if int8 else 1)
    pool = mb.tensor("pool", [1, 7, 6, 4], dt, **q)
    po = tfl.Pool2DOptionsT()
    po.padding, po.strideH, po.strideW, po.filterHeight, po.filterWidth = tfl.Padding.VALID, 2, 2, 2, 2
    mb.op(B.MAX_POOL_2D, [xp], [pool], O.Pool2DOptions, po, version=2 if int8 else 1)
    wide = mb.tensor("wide", [1, 7, 6, 8], dt, **q)
    mb.op(B.PAD, [pool, mb.tensor("p1", [4, 2], np.int32, data=np.array([[0, 0], [0, 0], [0, 0], [0, 4]],
                                                                         np.int32))],
          [wide], O.PadOptions, tfl.PadOptionsT(), version=2 if int8 else 1)
    add = mb.tensor("add", [1, 7, 6, 8], dt, **q)
    mb.op(B.ADD, [wide, conv], [add], O.AddOptions, tfl.AddOptionsT(), version=2 if int8 else 1)
    head = mb.tensor("head", [1, 7, 6, 8], dt, **q)
    mb.op(B.RELU, [add], [head], version=2 if int8 else 1)
    return mb.finish([x], [head])


@pytest.mark.parametrize("int8", [False, True], ids=["float32", "int8"])
@pytest.mark.parametrize("grid", [(2, 2), (3, 2), (7, 1)])
def test_channel_padded_shortcut_is_tiled_bit_identically(int8, grid):
    pytest.importorskip("tflite_micro")
    from tvm_memsched.tflite.verify import compare_litert, compare_tflm

    buf = shortcut_block(int8)
    tg = read_tflite(buf)
    assert tg.tensor_ids["add"] in split_points(tg)
    tiled, info = tile_model(tg, "add", grid)
    m = read_tflite(tiled).model
    pads = [op for op in m.subgraphs[0].operators if m.operatorCodes[op.opcodeIndex].builtinCode == B.PAD]
    assert len(pads) >= grid[0] * grid[1]                      # the channel padding repeated in every patch
    assert compare_litert(buf, tiled, trials=2, reference_kernels=True).identical
    assert compare_tflm(buf, tiled, trials=2).identical


def dequantized_weights_stack():
    """Float convolutions whose weights are int8 constants DEQUANTIZEd at run time (as converters emit for
    weight-only quantization): the dequantized weights are computed from constants, the same for every patch."""
    rng = np.random.default_rng(3)
    mb = ModelBuilder()
    x = mb.tensor("x", [1, 14, 13, 3], np.float32)
    cur, c = x, 3
    for i, (oc, s) in enumerate([(8, 2), (8, 1), (6, 1)]):
        wq = mb.tensor(f"wq{i}", [oc, 3, 3, c], np.int8, data=rng.integers(-127, 128, [oc, 3, 3, c]).astype(np.int8),
                       scale=np.full(oc, 0.01, np.float32), zero_point=np.zeros(oc, int), quantized_dimension=0)
        w = mb.tensor(f"w{i}", [oc, 3, 3, c], np.float32)
        mb.op(B.DEQUANTIZE, [wq], [w], version=2)
        b = mb.tensor(f"b{i}", [oc], np.float32, data=rng.standard_normal([oc]).astype(np.float32))
        h = (mb.tensors[cur].shape[1] + s - 1) // s
        wd = (mb.tensors[cur].shape[2] + s - 1) // s
        y = mb.tensor(f"t{i}", [1, h, wd, oc], np.float32)
        o = tfl.Conv2DOptionsT()
        o.padding, o.strideH, o.strideW, o.dilationHFactor, o.dilationWFactor = tfl.Padding.SAME, s, s, 1, 1
        o.fusedActivationFunction = 1
        mb.op(B.CONV_2D, [cur, w, b], [y], O.Conv2DOptions, o)
        cur, c = y, oc
    head = mb.tensor("head", list(mb.tensors[cur].shape), np.float32)
    mb.op(B.RELU, [cur], [head])
    return mb.finish([x], [head])


def test_weights_dequantized_at_run_time_are_read_like_constants():
    pytest.importorskip("tflite_micro")
    from tvm_memsched.tflite.verify import compare_litert, compare_tflm

    buf = dequantized_weights_stack()
    tg = read_tflite(buf)
    assert tg.tensor_ids["t2"] in split_points(tg)
    tiled, info = tile_model(tg, "t2", (3, 2))
    assert info["stage_ops"] == 3                      # the convolutions; the DEQUANTIZEs stay before the stage
    assert compare_litert(buf, tiled, trials=2, reference_kernels=True).identical
    assert compare_tflm(buf, tiled, trials=2).identical


def test_not_a_split_point_is_named():
    from tvm_memsched import zoo

    tg = read_tflite(zoo.tflite("mobilenet_v2", "int8"))
    with pytest.raises(UnsupportedError, match="not a split point"):
        tile_model(tg, tg.tensor_ids["stem"], (2, 2))          # a single op: nothing to tile
    with pytest.raises(UnsupportedError, match="no activation tensor named"):
        tile_model(tg, "nope", (2, 2))


def test_search_reports_every_candidate_and_keeps_the_budget():
    from tvm_memsched import zoo

    tg = read_tflite(zoo.tflite("mobilenet_v2", "int8"))
    res = search_tiling(tg, grids=((2, 2), (3, 3)), split="block1/project")
    assert len(res.candidates) == 2 and res.chosen is not None
    assert all(c.mac_overhead <= 0.15 for c in res.candidates if c.within_budget)
    assert res.chosen.plan_bytes < res.untiled_plan_bytes
    tight = search_tiling(tg, grids=((3, 3),), split="block1/project", budget=0.001)
    assert tight.chosen is None and not tight.candidates[0].within_budget


def test_cli_tile_writes_a_bit_identical_smaller_file(tmp_path, capsys):
    pytest.importorskip("tflite_micro")
    out = tmp_path / "m.tflite"
    rc = cli_main(["tflite", "zoo:mobilenet_v2", "-o", str(out), "--tile", "--tile-grid", "3x3", "--tile-at",
                   "block1/project", "--offline-plan", "--report", "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "bit-identical, TFLite Micro bit-identical" in text
    ratio = float(text.split("TFLite Micro smallest arena")[1].split("(")[1].split("x")[0])
    assert ratio <= 0.5                                  # a MobileNet-like float model: at most half
    rc = cli_main(["tflite", "zoo:mobilenet_v2", "-o", str(out), "--tile-at", "nope"])
    assert rc == 2


@pytest.mark.slow
def test_micro_tile_runs_in_qemu_against_the_untiled_model(tmp_path, capsys):
    rc = cli_main(["micro", "zoo:mobilenet_v2:int8", "--board", "mps2-an386", "--out", str(tmp_path), "--tile",
                   "--tile-grid", "3x3", "--tile-at", "block1/project", "--run", "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "max abs error vs TVM 0 (ok)" in text and "vs TFLite Micro: bit-identical (ok)" in text
    before, after = (int(v.replace(",", "")) for v in re.search(r"plan ([\d,]+) -> ([\d,]+) B", text).groups())
    assert before >= 2.0 * after        # the int8 model's plan at least halves (was compare's check on it)
