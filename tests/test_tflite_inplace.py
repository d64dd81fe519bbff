"""In-place offline plans for TFLite Micro: shifts against the reference loop nests, bit-identity per op type."""

import math
import random

import numpy as np
import pytest

from tvm_memsched.tflite.builder import tfl
from tvm_memsched.tflite.inplace import inplace_declarations, window_shift, with_inplace

B = tfl.BuiltinOperator


def corrupted_reads(in_shape, out_shape, k, stride, pad_same, dil, isz, osz, shift, mode):
    """Run TFLM's reference loop nest over a byte-addressed memory where the output starts
    ``shift`` bytes below the input; return how many reads saw a byte already overwritten."""
    n, h, w, c = in_shape
    _, ho, wo, co = out_shape
    in_base = shift
    owner = {}                      # byte address -> "in" or "out"
    for a in range(in_base, in_base + n * h * w * c * isz):
        owner[a] = "in"

    def pad(size, out, s, eff):
        return max((out - 1) * s + eff - size, 0) // 2 if pad_same else 0

    ph = pad(h, ho, stride, (k - 1) * dil + 1)
    pw = pad(w, wo, stride, (k - 1) * dil + 1)
    bad = 0
    widx = 0
    for b in range(n):
        for oy in range(ho):
            for ox in range(wo):
                if mode == "conv":
                    chans = [(oc, range(c)) for oc in range(co)]
                else:                               # depthwise (ic, m) / pool (channel)
                    mult = co // c
                    chans = [(ic * mult + m, [ic]) for ic in range(c) for m in range(mult)]
                for _oc, ics in chans:
                    for fy in range(k):
                        for fx in range(k):
                            iy, ix = oy * stride - ph + fy * dil, ox * stride - pw + fx * dil
                            if not (0 <= iy < h and 0 <= ix < w):
                                continue
                            for ic in ics:
                                e = ((b * h + iy) * w + ix) * c + ic
                                if any(owner.get(in_base + e * isz + j) != "in" for j in range(isz)):
                                    bad += 1
                    for j in range(osz):
                        owner[widx * osz + j] = "out"
                    widx += 1
    return bad


@pytest.mark.parametrize("seed", range(40))
def test_window_shift_is_the_smallest_safe_shift(seed):
    rng = random.Random(seed)
    mode = rng.choice(["conv", "depthwise", "pool"])
    k, stride, dil = rng.choice([1, 2, 3]), rng.choice([1, 2]), rng.choice([1, 1, 2])
    pad_same = rng.random() < 0.6
    h, w, c = rng.randint(k * dil, 7), rng.randint(k * dil, 7), rng.randint(1, 3)
    mult = rng.choice([1, 2]) if mode == "depthwise" else 1
    co = rng.randint(1, 4) if mode == "conv" else c * mult
    if mode == "pool":
        dil = 1
    if pad_same:
        ho, wo = math.ceil(h / stride), math.ceil(w / stride)
    else:
        ho, wo = (h - (k - 1) * dil - 1) // stride + 1, (w - (k - 1) * dil - 1) // stride + 1
    n = rng.choice([1, 1, 2])
    isz, osz = rng.choice([(1, 1), (4, 4), (1, 4), (4, 1)])
    shift = window_shift((n, h, w, c), (n, ho, wo, co), kernel=(k, k), stride=(stride, stride),
                         padding="SAME" if pad_same else "VALID", itemsize=(isz, osz), dilation=(dil, dil),
                         depthwise=mode == "depthwise", pool=mode == "pool")
    args = ((n, h, w, c), (n, ho, wo, co), k, stride, pad_same, dil, isz, osz)
    assert corrupted_reads(*args, shift, mode) == 0
    if shift > 0:
        assert corrupted_reads(*args, shift - 1, mode) > 0


def _ops():
    import tflite_ops as T

    rng = np.random.default_rng(0)
    P = tfl.Padding
    return {
        "depthwise_same": lambda: T.conv(rng, depthwise=True, hw=(9, 8), cin=4),
        "depthwise_stride2_mult2": lambda: T.conv(rng, depthwise=True, hw=(9, 7), cin=3, stride=2, multiplier=2),
        "depthwise_valid_dilated": lambda: T.conv(rng, depthwise=True, hw=(9, 9), cin=2, pad=P.VALID, dil=2),
        "conv_same": lambda: T.conv(rng, hw=(8, 7), cin=3, cout=5),
        "conv_1x1_expand": lambda: T.conv(rng, hw=(6, 6), cin=2, cout=6, k=1),
        "conv_stride2": lambda: T.conv(rng, hw=(9, 8), cin=4, cout=3, stride=2),
        "max_pool": lambda: T.pool(B.MAX_POOL_2D),
        "avg_pool": lambda: T.pool(B.AVERAGE_POOL_2D, shape=(1, 6, 6, 2), out_shape=(1, 6, 6, 2), stride=1),
        "add": lambda: T.binary(rng, B.ADD),
        "sub": lambda: T.binary(rng, B.SUB),
        "mul": lambda: T.binary(rng, B.MUL),
        "relu": lambda: T.unary(B.RELU),
        "logistic": lambda: T.unary(B.LOGISTIC, qout=(1 / 256, -128)),
        "tanh": lambda: T.unary(B.TANH, qout=(1 / 128, 0)),
        "requantize": lambda: T.unary(B.QUANTIZE),
    }


OPS = list(_ops())


@pytest.mark.parametrize("name", OPS)
def test_tflm_bit_identical_with_each_qualifying_op_in_place(name):
    pytest.importorskip("tflite_micro")
    from tvm_memsched.tflite.optimize import optimize_tflite
    from tvm_memsched.tflite.reader import read_tflite

    model = _ops()[name]()
    tg = read_tflite(model)
    decl = inplace_declarations(tg, "windowed")
    assert len(decl) == 1, decl                     # the op qualifies
    (_op, (out, inp, shift)), = decl.items()
    r = optimize_tflite(tg, offline_plan=True, verify=True, inplace="windowed", trials=3)
    offs = r.plan.by_name
    assert r.used_plan and offs[inp] - offs[out] >= shift                 # the output took the input over
    assert offs[inp] < offs[out] + tg.graph.tensor_bytes(out)              # ... and really overlaps it
    assert r.predicted["out_plan"] < r.predicted["out_plan_no_inplace"]
    assert r.tflm["out_plan"]["identical"] and r.litert["out_plan"]["identical"]


def test_broadcasting_and_constant_inputs_do_not_qualify():
    import tflite_ops as T

    from tvm_memsched.tflite.reader import read_tflite
    rng = np.random.default_rng(1)
    tg = read_tflite(T.binary(rng, B.ADD, shape1=(1, 4, 4, 3), shape2=(1, 1, 1, 3)))
    assert inplace_declarations(tg, "windowed") == {}
    tg = read_tflite(T.conv(rng, depthwise=True))
    assert inplace_declarations(tg, "elementwise") == {}   # windows only with the reference-kernel mode
    assert with_inplace(tg, "off") is tg.graph


@pytest.mark.parametrize("name,dtype", [("resnet", "int8"), ("densenet_like", "float32")])
def test_zoo_offline_plan_in_place_is_smaller_and_bit_identical(name, dtype):
    pytest.importorskip("tflite_micro")
    from tvm_memsched import zoo
    from tvm_memsched.tflite.optimize import optimize_tflite

    r = optimize_tflite(zoo.tflite(name, dtype), offline_plan=True, measure=True, verify=True, inplace="windowed")
    assert r.predicted["out_plan"] < r.predicted["out_plan_no_inplace"]
    assert r.measured["out_plan"]["min_arena"] <= 0.8 * r.measured["in"]["min_arena"]
    assert r.identical and r.tflm["out_plan"]["identical"]
