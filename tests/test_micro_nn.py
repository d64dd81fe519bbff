"""The microkernel library (micro/runtime/tms_nn.c) against TFLite's arithmetic, directly and through exports.

* Direct: the library built for the host twice, plain C and the DSP path with portable C for
  SXTB16/SMLAD/SMMULR/SSAT (``TMS_NN_EMULATE_DSP``), called through ctypes on random shapes and
  quantisation (odd channel counts, strides, padding, dilation, per-channel and per-tensor scales, batch),
  against a numpy implementation of TFLite's reference kernels; the fast requantisation flag is set only
  when proven, and both epilogues are exercised.
* In place: the output written over the input at the smallest lag tvm_memsched's TIR analysis allows for
  the same operator, in one shared buffer.
* Exports: single-operator models side by side in one model, exported with the library and run on the
  host (both paths) and in QEMU (Cortex-M4 with DSP, Cortex-M3 without), bit-identical to TVM's integer
  TIR kernels (the scalar path).
"""

import ctypes
import functools
import math
import os
import re
import subprocess

import numpy as np
import pytest

import tflite_ops as T
from tvm_memsched.micro import nn
from tvm_memsched.micro.toolchain import host_cc
from tvm_memsched.relax.int8.fixedpoint import mbqm_array
from tvm_memsched.relax.int8.params import conv_multipliers

RUNTIME = os.path.join(os.path.dirname(nn.__file__), "runtime")


# ------------------------------------------------------------------ host builds of the library
class Conv(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint16) for n in ("batch", "in_h", "in_w", "in_c", "out_h", "out_w", "out_c")] + \
        [(n, ctypes.c_uint8) for n in ("kh", "kw", "sh", "sw", "dh", "dw")] + \
        [(n, ctypes.c_int16) for n in ("pad_t", "pad_l")] + \
        [(n, ctypes.c_int8) for n in ("in_zp", "out_zp", "act_min", "act_max")]


class Fc(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint16) for n in ("rows", "in_n", "out_n")] + \
        [(n, ctypes.c_int8) for n in ("in_zp", "out_zp", "act_min", "act_max")]


class Add(ctypes.Structure):
    _fields_ = [("n", ctypes.c_uint32)] + [(n, ctypes.c_int32) for n in (
        "a_off", "b_off", "left_shift", "a_mult", "a_shift", "b_mult", "b_shift", "out_mult", "out_shift")] + \
        [(n, ctypes.c_int8) for n in ("out_zp", "act_min", "act_max")] + [("flags", ctypes.c_uint8)]


class Pool(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint16) for n in ("batch", "in_h", "in_w", "c", "out_h", "out_w")] + \
        [(n, ctypes.c_uint8) for n in ("kh", "kw", "sh", "sw")] + \
        [(n, ctypes.c_int16) for n in ("pad_t", "pad_l")] + [(n, ctypes.c_int8) for n in ("act_min", "act_max")]


_HOST_LIBS: dict = {}


def host_lib(kind, tmp_path_factory):
    """The library built for the host: ``"plain"`` C or ``"dsp"`` (the DSP path in portable C); once a process."""
    if kind not in _HOST_LIBS:
        out = tmp_path_factory.mktemp("tms") / f"libtms_{kind}.so"
        flags = ["-DTMS_NN_EMULATE_DSP"] if kind == "dsp" else []
        subprocess.run([host_cc(), "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", *flags,
                        os.path.join(RUNTIME, "tms_nn.c"), "-o", str(out)], check=True)
        _HOST_LIBS[kind] = ctypes.CDLL(str(out))
    return _HOST_LIBS[kind]


@pytest.fixture(scope="module", params=["plain", "dsp"])
def lib(request, tmp_path_factory):
    return host_lib(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """Both host builds, for tests whose reference (a TIR kernel built per case) costs more than the library
    call: one test checks both on the same cases."""
    return {kind: host_lib(kind, tmp_path_factory) for kind in ("plain", "dsp")}


def ptr(a):
    return a.ctypes.data_as(ctypes.c_void_p)


# ------------------------------------------------------------------ TFLite's reference arithmetic in numpy
def requant(acc, mult, shift, zp, lo, hi):
    return np.clip(mbqm_array(acc, mult, shift) + zp, lo, hi).astype(np.int8)


def ref_conv(x, w, bias, zp_in, stride, pad, dil, out_hw, depthwise):
    """int32 accumulators of CONV_2D (w OHWI) or DEPTHWISE_CONV_2D (w 1HWC): sum of (x - zp) w over the
    taps inside the image, plus the bias."""
    n, h, wd, c = x.shape
    kh, kw = w.shape[1], w.shape[2]
    oc = w.shape[3] if depthwise else w.shape[0]
    oh, ow = out_hw
    real = np.issubdtype(x.dtype, np.floating)
    kind = np.float64 if real else np.int64
    acc = np.zeros((n, oh, ow, oc), kind) + bias
    xs = x.astype(kind) - zp_in
    for ky in range(kh):
        for kx in range(kw):
            iy = np.arange(oh) * stride[0] - pad[0] + ky * dil[0]
            ix = np.arange(ow) * stride[1] - pad[1] + kx * dil[1]
            vy, vx = (iy >= 0) & (iy < h), (ix >= 0) & (ix < wd)
            patch = np.zeros((n, oh, ow, c), kind)
            patch[:, vy[:, None] & vx[None, :]] = xs[:, iy[vy]][:, :, ix[vx]].reshape(n, -1, c)
            if depthwise:
                acc += patch * w[0, ky, kx].astype(kind)
            else:
                acc += np.einsum("nhwc,oc->nhwo", patch, w[:, ky, kx].astype(kind))
    return acc


def quant_params(rng, oc, per_channel, *, extreme=False):
    """Random (multipliers, shifts) of a convolution; ``extreme``: scales >= 0.5 (a left shift: exact path)."""
    s_in, s_out = rng.uniform(0.01, 0.1), rng.uniform(0.02, 0.3)
    ws = rng.uniform(0.002, 0.02, oc if per_channel else 1)
    if extreme:
        ws = ws * rng.uniform(30, 300)
    m, s = conv_multipliers(s_in, ws, s_out)
    if not per_channel:
        m, s = m * oc, s * oc
    return np.array(m), np.array(s)


def act_range(rng):
    kind = rng.integers(3)
    return (-128, 127) if kind == 0 else (int(rng.integers(-128, 0)), 127) if kind == 1 else \
        (int(rng.integers(-128, -60)), int(rng.integers(0, 127)))


def conv_desc(x_shape, w_shape, y_shape, stride, pad, dil, zp_in, mult, shift, zp_out, lo, hi, depthwise):
    per_channel = len(set(zip(mult.tolist(), shift.tolist()))) > 1
    return {"op": "depthwise_conv2d" if depthwise else "conv2d", "x": list(x_shape), "w": list(w_shape),
            "y": list(y_shape), "strides": list(stride), "padding": [pad[0], pad[1], 0, 0],
            "dilation": list(dil), "groups": 1, "depth_multiplier": int(depthwise), "in_offset": -zp_in,
            "requant": {"multiplier": None if per_channel else int(mult[0]),
                        "shift": None if per_channel else int(shift[0]), "offset": zp_out, "lo": lo, "hi": hi},
            "has_bias": True, "dtypes": ["int8"] * 3}


def tir_table(desc, bias, mult, shift):
    """The TIR kernel's channel table: bias, then per-channel multipliers and shifts as rows."""
    rows = [bias] + ([mult, shift] if desc["requant"]["multiplier"] is None else [])
    return np.stack(rows).astype(np.int32)


def random_conv(rng, depthwise, *, extreme=False, big_bias=False):
    n = int(rng.integers(1, 3))
    c = int(rng.integers(1, 13)) if depthwise else int(rng.integers(1, 20))
    oc = c if depthwise else int(rng.integers(1, 20))
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    stride = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    dil = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    h, wd = int(rng.integers(kh * dil[0], 12)), int(rng.integers(kw * dil[1], 12))
    pad = (int(rng.integers(0, kh)), int(rng.integers(0, kw)))
    oh = (h + pad[0] + int(rng.integers(0, kh)) - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (wd + pad[1] + int(rng.integers(0, kw)) - (kw - 1) * dil[1] - 1) // stride[1] + 1
    zp_in, zp_out = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    x = rng.integers(-128, 128, (n, h, wd, c)).astype(np.int8)
    w = rng.integers(-127, 128, (1, kh, kw, c) if depthwise else (oc, kh, kw, c)).astype(np.int8)
    bias = rng.integers(-(1 << 30) if big_bias else -5000, (1 << 30) if big_bias else 5000, oc).astype(np.int64)
    mult, shift = quant_params(rng, oc, bool(rng.integers(2)), extreme=extreme)
    lo, hi = act_range(rng)
    desc = conv_desc(x.shape, w.shape, (n, oh, ow, oc), stride, pad, dil, zp_in, mult, shift, zp_out, lo, hi,
                     depthwise)
    return desc, x, w, bias, mult, shift


def run_conv(lib, desc, x, w, bias, mult, shift, *, y_in_x=None):
    """The library's output; ``y_in_x``: place the output this many bytes below the input in one buffer."""
    dw = desc["op"] == "depthwise_conv2d"
    table = nn.channel_table(desc, w, tir_table(desc, bias, mult, shift))
    packed = nn.pack_depthwise(w) if dw else nn.pack_weights(w)
    n, oh, ow, oc = desc["y"]
    p = Conv(batch=n, in_h=x.shape[1], in_w=x.shape[2], in_c=x.shape[3], out_h=oh, out_w=ow, out_c=oc,
             kh=w.shape[1], kw=w.shape[2], sh=desc["strides"][0], sw=desc["strides"][1], dh=desc["dilation"][0],
             dw=desc["dilation"][1], pad_t=desc["padding"][0], pad_l=desc["padding"][1], in_zp=-desc["in_offset"],
             out_zp=desc["requant"]["offset"], act_min=desc["requant"]["lo"], act_max=desc["requant"]["hi"])
    col_bytes = 2 * (-(-w[0].size // 4) * 4)              # two windows of kh * kw * in_c, rounded up to 4
    wbuf = np.zeros(packed.size + 16, np.int8)         # 16-byte aligned like the exported constants
    off = (-wbuf.ctypes.data) % 16
    wbuf[off:off + packed.size] = packed
    wp = wbuf[off:]
    ysize = n * oh * ow * oc
    if y_in_x is None:
        y = np.zeros(ysize, np.int8)
        xa = np.ascontiguousarray(x)
    else:
        shared = np.zeros(max(x.size + y_in_x, ysize) + 8, np.int8)
        shared[y_in_x:y_in_x + x.size] = x.reshape(-1)
        xa, y = shared[y_in_x:], shared[:]
    if dw:
        scratch = np.zeros(9 * w.shape[1] * w.shape[2] // 4 + 1, np.int32)
        lib.tms_dwconv_s8(ctypes.byref(p), ptr(xa), ptr(wp), ptr(table), ptr(y), ptr(scratch))
    else:
        colbuf = np.zeros(col_bytes + 8, np.int8)
        coff = (-colbuf.ctypes.data) % 8
        lib.tms_conv_s8(ctypes.byref(p), ptr(xa), ptr(wp), ptr(table), ptr(y), ptr(colbuf[coff:]))
    return y[:ysize].reshape(n, oh, ow, oc), table


def expected_conv(desc, x, w, bias, mult, shift):
    dw = desc["op"] == "depthwise_conv2d"
    acc = ref_conv(x, w, bias, -desc["in_offset"], desc["strides"], desc["padding"], desc["dilation"],
                   desc["y"][1:3], dw)
    rq = desc["requant"]
    return requant(acc, mult, shift, rq["offset"], rq["lo"], rq["hi"])


# ------------------------------------------------------------------ direct tests
@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_convolutions_match_tflite_on_random_shapes(lib, depthwise):
    rng = np.random.default_rng(11 + depthwise)
    fast = 0
    for case in range(60):
        desc, x, w, bias, mult, shift = random_conv(rng, depthwise, extreme=case % 7 == 6, big_bias=case % 11 == 10)
        got, table = run_conv(lib, desc, x, w, bias, mult, shift)
        want = expected_conv(desc, x, w, bias, mult, shift)
        assert np.array_equal(got, want), (case, desc)
        fast += int(table[0, 0] & 1)
    assert 20 < fast < 60                   # both epilogues ran


def test_fully_connected_matches_tflite(lib):
    rng = np.random.default_rng(5)
    for case in range(40):
        rows, k, n = int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(1, 30))
        x = rng.integers(-128, 128, (rows, k)).astype(np.int8)
        w = rng.integers(-127, 128, (n, k)).astype(np.int8)
        bias = rng.integers(-9000, 9000, n).astype(np.int64)
        zp_in, zp_out = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
        mult, shift = quant_params(rng, n, bool(rng.integers(2)), extreme=case % 9 == 8)
        lo, hi = act_range(rng)
        per_channel = len(set(zip(mult.tolist(), shift.tolist()))) > 1
        desc = {"op": "dense", "x": [rows, k], "w": [n, k], "y": [rows, n], "in_offset": -zp_in, "w_offset": 0,
                "requant": {"multiplier": None if per_channel else int(mult[0]),
                            "shift": None if per_channel else int(shift[0]), "offset": zp_out, "lo": lo, "hi": hi},
                "has_bias": True, "dtypes": ["int8"] * 3}
        table = nn.channel_table(desc, w, tir_table(desc, bias, mult, shift))
        packed = nn.pack_weights(w)
        wbuf = np.zeros(packed.size + 16, np.int8)
        off = (-wbuf.ctypes.data) % 16
        wbuf[off:off + packed.size] = packed
        y = np.zeros((rows, n), np.int8)
        p = Fc(rows=rows, in_n=k, out_n=n, in_zp=zp_in, out_zp=zp_out, act_min=lo, act_max=hi)
        lib.tms_fc_s8(ctypes.byref(p), ptr(x), ptr(wbuf[off:]), ptr(table), ptr(y))
        acc = (x.astype(np.int64) - zp_in) @ w.astype(np.int64).T + bias
        assert np.array_equal(y, requant(acc, mult, shift, zp_out, lo, hi)), case


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pools_match_tflite(lib, kind):
    rng = np.random.default_rng(8)
    for case in range(30):
        n, c = int(rng.integers(1, 3)), int(rng.integers(1, 9))
        kh, kw, sh, sw = (int(v) for v in rng.integers(1, 4, 4))
        h, wd = int(rng.integers(kh, 10)), int(rng.integers(kw, 10))
        pt, pl = int(rng.integers(0, kh)), int(rng.integers(0, kw))
        oh, ow = (h + 2 * pt - kh) // sh + 1, (wd + 2 * pl - kw) // sw + 1
        lo, hi = act_range(rng)
        x = rng.integers(-128, 128, (n, h, wd, c)).astype(np.int8)
        y = np.zeros((n, oh, ow, c), np.int8)
        p = Pool(batch=n, in_h=h, in_w=wd, c=c, out_h=oh, out_w=ow, kh=kh, kw=kw, sh=sh, sw=sw, pad_t=pt, pad_l=pl,
                 act_min=lo, act_max=hi)
        getattr(lib, f"tms_{kind}pool_s8")(ctypes.byref(p), ptr(x), ptr(y))
        want = np.zeros_like(y)
        for oy in range(oh):
            for ox in range(ow):
                y0, x0 = oy * sh - pt, ox * sw - pl
                win = x[:, max(y0, 0):min(y0 + kh, h), max(x0, 0):min(x0 + kw, wd)].astype(np.int64)
                if kind == "max":
                    v = win.max(axis=(1, 2))
                else:
                    s, cnt = win.sum(axis=(1, 2)), win.shape[1] * win.shape[2]
                    v = np.where(s > 0, (s + cnt // 2) // cnt, -((-s + cnt // 2) // cnt))
                want[:, oy, ox] = np.clip(v, lo, hi)
        assert np.array_equal(y, want), case


@pytest.mark.parametrize("sub", [False, True], ids=["add", "sub"])
def test_add_matches_tflite(lib, sub):
    rng = np.random.default_rng(4 + sub)
    fast = 0
    for case in range(40):
        desc, a, b, params, want = random_add_case(rng, sub, max_n=200)
        prm = Add(**params)
        fast += prm.flags & 1
        y = np.zeros(len(a), np.int8)
        lib.tms_add_s8(ctypes.byref(prm), ptr(a), ptr(b), ptr(y))
        assert np.array_equal(y, want), (case, desc)
    assert sub or fast > 30                     # ADD mostly proven for the fast path (SUB runs the exact one)


def random_add_case(rng, sub, max_n=70):
    """A random ADD / SUB as (desc, a, b, parameters, expected output)."""
    from tvm_memsched.relax.int8.params import add_params

    n = int(rng.integers(1, max_n))
    sa, sb, so = (float(np.float32(rng.uniform(0.005, 0.2))) for _ in range(3))
    za, zb, zo = (int(v) for v in rng.integers(-128, 128, 3))
    q = add_params(sa, sb, so, sub=sub)
    lo, hi = act_range(rng)
    desc = {"op": "add", "a": [n], "b": [n], "y": [n], "a_offset": -za, "b_offset": -zb,
            "left_shift": q["left_shift"], "a_mult": q["a_mult"], "a_shift": q["a_shift"], "b_mult": q["b_mult"],
            "b_shift": q["b_shift"], "requant": {"multiplier": q["out_mult"], "shift": q["out_shift"],
                                                 "offset": zo, "lo": lo, "hi": hi}, "negate_b": sub}
    a = rng.integers(-128, 128, n).astype(np.int8)
    b = rng.integers(-128, 128, n).astype(np.int8)
    ls = 1 << q["left_shift"]
    ra = mbqm_array((a.astype(np.int64) - za) * ls, q["a_mult"], q["a_shift"])
    rb = mbqm_array((b.astype(np.int64) - zb) * ls, q["b_mult"], q["b_shift"])
    want = requant(ra - rb if sub else ra + rb, q["out_mult"], q["out_shift"], zo, lo, hi)
    return desc, a, b, nn._add_params(desc), want


def test_table_lookup(lib):
    rng = np.random.default_rng(2)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    for n in (1, 3, 4, 5, 64, 131):
        x = rng.integers(-128, 128, n).astype(np.int8)
        y = np.zeros(n, np.int8)
        lib.tms_lut_s8(ctypes.c_uint32(n), ptr(x), ptr(table), ptr(y))
        assert np.array_equal(y, table[x.astype(np.int64) + 128])


def test_fast_requantisation_is_used_only_where_proven():
    """The header flag: no left shift, right shift >= 1 and |accumulator| < 2**30 for every channel."""
    rng = np.random.default_rng(0)
    desc, x, w, bias, mult, shift = random_conv(rng, False)
    ok = nn.channel_table(desc, w, tir_table(desc, bias, mult, shift))
    assert ok[0, 0] & 1 and np.all(shift < 0)
    shift2 = shift.copy()
    shift2[0] = 1                               # a left shift: exact path
    d2 = dict(desc, requant=dict(desc["requant"], multiplier=None, shift=None))
    assert not nn.channel_table(d2, w, tir_table(d2, bias, mult, shift2))[0, 0] & 1
    big = bias.copy()
    big[-1] = (1 << 30) - 10                    # the accumulator may reach 2**30
    assert not nn.channel_table(desc, w, tir_table(desc, big, mult, shift))[0, 0] & 1
    # folded bias: bias - zp_in * sum(w) per output channel; shifts as right - 1 | left << 8 | right << 16
    zp = -desc["in_offset"]
    assert np.array_equal(ok[1:, 0], bias - zp * w.reshape(w.shape[0], -1).astype(np.int64).sum(1))
    assert np.array_equal(ok[1:, 2] >> 16, -shift) and np.array_equal(ok[1:, 2] & 0xff, -shift - 1)


def test_packed_layouts():
    w = np.arange(3 * 5, dtype=np.int8).reshape(3, 5)
    p = nn.pack_weights(w).reshape(2, 2, 2, 4)            # [pair][group][row][4]
    assert p[0, 0, 0].tolist() == [0, 1, 2, 3] and p[0, 0, 1].tolist() == [5, 6, 7, 8]
    assert p[0, 1, 0].tolist() == [4, 0, 0, 0] and p[1, 0, 1].tolist() == [0, 0, 0, 0]
    dw = np.arange(1 * 3 * 1 * 6, dtype=np.int8).reshape(1, 3, 1, 6)    # taps 0..2, channels 0..5
    q = nn.pack_depthwise(dw).reshape(2, 12)
    # block 0, taps (0, 1): channels (0, 1) then (2, 3), each word [t c, t c+1, t+1 c, t+1 c+1]
    assert q[0, :8].tolist() == [0, 1, 6, 7, 2, 3, 8, 9] and q[0, 8:].tolist() == [12, 13, 14, 15]
    assert q[1, :8].tolist() == [4, 5, 10, 11, 0, 0, 0, 0] and q[1, 8:].tolist() == [16, 17, 0, 0]


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_in_place_at_the_lag_the_tir_analysis_allows(lib, depthwise):
    """Output written over the input at the smallest safe lag traced from the TIR kernel: same numbers."""
    rng = np.random.default_rng(3)
    tried = 0
    for case, conv, lag in inplace_conv_cases(lambda case: random_conv(rng, depthwise)):
        got, _ = run_conv(lib, *conv, y_in_x=lag)
        assert np.array_equal(got, expected_conv(*conv)), (case, conv[0], lag)
        tried += 1
    assert tried >= 8


def inplace_conv_cases(make, cases: int = 40):
    """``(case, (desc, x, w, bias, mult, shift), lag)`` for the random convolutions ``make(case)`` (batch 1,
    output no larger than the input) whose TIR kernel may write its output over its input: ``lag`` = the
    smallest safe shift the in-place analysis traces from that kernel."""
    from tvm_memsched.relax.analysis.inplace import kernel_inplace_shifts
    from tvm_memsched.relax.int8 import kernels as K

    for case in range(cases):
        conv = make(case)
        desc, x = conv[0], conv[1]
        if desc["x"][0] != 1 or math.prod(desc["y"]) > x.size:
            continue
        rq = desc["requant"]
        f = K.conv2d(tuple(desc["x"]), tuple(desc["w"]), tuple(desc["y"]), strides=tuple(desc["strides"]),
                     padding=tuple(desc["padding"]), dilation=tuple(desc["dilation"]), groups=1,
                     depth_multiplier=int(desc["op"] == "depthwise_conv2d"), in_offset=desc["in_offset"],
                     requant=K.Requant(rq["multiplier"], rq["shift"], rq["offset"], rq["lo"], rq["hi"]),
                     has_bias=True)
        shifts = [s for i, o, s in kernel_inplace_shifts(f, 3) if i == 0]
        if shifts:
            yield case, conv, min(shifts)


# ------------------------------------------------------------------ exports: host and QEMU
def single_op_models():
    """Small one-operator int8 files covering the library's kernels (odd channels, stride, dilation, bias)."""
    rng = np.random.default_rng(21)
    B = T.B
    return {
        "conv3x3_s2": T.conv(rng, act=1, stride=2, hw=(9, 7), cin=5, cout=7),
        "conv1x1": T.conv(rng, k=1, hw=(6, 5), cin=12, cout=9, per_channel=False),
        "conv_dilated_valid": T.conv(rng, k=3, dil=2, pad=T.tfl.Padding.VALID, hw=(9, 9), cin=3, cout=4,
                                     bias=False),
        "depthwise": T.conv(rng, depthwise=True, act=3, hw=(8, 7), cin=6, k=3),
        "depthwise_5x5_s2": T.conv(rng, depthwise=True, stride=2, hw=(9, 10), cin=9, k=5),
        "fully_connected": T.fully_connected(rng, k=37, n=11, act=1),
        "max_pool": T.pool(B.MAX_POOL_2D),
        "max_pool_8ch": T.pool(B.MAX_POOL_2D, shape=(1, 6, 5, 8), out_shape=(1, 3, 3, 8)),
        "avg_pool": T.pool(B.AVERAGE_POOL_2D),
        "add_relu": T.binary(rng, B.ADD, act=1, shape1=(1, 5, 4, 6), shape2=(1, 5, 4, 6)),
        "sub": T.binary(rng, B.SUB, shape1=(1, 3, 4, 5), shape2=(1, 3, 4, 5)),
        "relu_table": T.unary(B.RELU, shape=(1, 7, 3, 5)),
    }


def export_fast(buf, board, out):
    from tvm_memsched import micro
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    exp = micro.export(from_tflite_bytes(buf), board, str(out), measure=False, check_fit=False)
    assert exp.library_kernels, "the library should compute this model's operator"
    return exp


def export_single_ops(board, out):
    """The single-operator models side by side in one model (tflite_ops.side_by_side), exported for ``board``:
    one export, one library build and one run check every operator; ``(export, operator names)``."""
    names = list(single_op_models())
    exp = export_fast(T.side_by_side(single_op_models()), board, out)
    assert len(exp.library_kernels) == exp.kernels == len(names), exp.library_kernels   # every operator
    return exp, names


def differing(names, outputs, reference):
    """The operators whose output is not bit-identical to the reference's."""
    return [n for n, a, b in zip(names, outputs, reference) if a.shape != b.shape or not np.array_equal(a, b)]


def test_exported_operators_match_tvm_integer_kernels_on_the_host(tmp_path):
    """Both host builds of the library (plain C; DSP path in portable C) equal TVM's TIR kernels bit for bit."""
    from tvm_memsched import micro

    exp, names = export_single_ops("mps2-an386", tmp_path)
    ref = micro.reference_outputs(exp.mod, micro.default_inputs(exp))
    assert len(ref) == len(names)
    for flags in ([], ["-DTMS_NN_EMULATE_DSP"]):
        r = micro.run_host(exp, reference=ref, cflags=flags)
        assert r.ok and r.max_abs_err == 0 and not differing(names, r.outputs, ref), \
            (flags, differing(names, r.outputs, ref), r.summary())


@pytest.mark.slow
@pytest.mark.parametrize("board", ["mps2-an386", "mps2-an385"])
def test_exported_operators_match_in_qemu(board, tmp_path):
    """The real DSP path (Cortex-M4: SXTB16, SMLAD, SMMULR) and the plain path (Cortex-M3), in QEMU."""
    from tvm_memsched import micro

    exp, names = export_single_ops(board, tmp_path)
    ref = micro.reference_outputs(exp.mod, micro.default_inputs(exp))
    r = micro.run_qemu(exp, reference=ref)
    assert r.ok and r.max_abs_err == 0 and not differing(names, r.outputs, ref), \
        (differing(names, r.outputs, ref), r.summary())


@pytest.mark.slow
def test_zoo_kws_model_in_qemu_is_bit_identical_to_tflite_micro_and_faster_than_tvm_kernels(tmp_path):
    from tvm_memsched import micro, zoo
    from tvm_memsched.micro.sidebyside import check_against_tflite
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    buf = zoo.tflite("ds_cnn", "int8")
    mod = from_tflite_bytes(buf)
    fast = micro.export(mod, "mps2-an386", str(tmp_path / "fast"), check_fit=False)
    slow = micro.export(mod, "mps2-an386", str(tmp_path / "tvm"), check_fit=False, kernels="tvm")
    x = micro.default_inputs(fast)
    rf, rs = micro.run_qemu(fast, x), micro.run_qemu(slow, x)
    assert rf.ok and rs.ok and all(np.array_equal(a, b) for a, b in zip(rf.outputs, rs.outputs))
    assert check_against_tflite(buf, x, rf.outputs)["ok"]
    assert rf.macs == fast.macs == zoo.get_net("ds_cnn").total_macs()
    assert rf.instructions < rs.instructions


# ------------------------------------------------------------------ float32 kernels
class ConvF(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint16) for n in ("batch", "in_h", "in_w", "in_c", "out_h", "out_w", "out_c")] + \
        [(n, ctypes.c_uint8) for n in ("kh", "kw", "sh", "sw", "dh", "dw")] + \
        [(n, ctypes.c_int16) for n in ("pad_t", "pad_l")] + [("flags", ctypes.c_uint8)] + \
        [(n, ctypes.c_float) for n in ("lo", "hi")]


class FcF(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint16) for n in ("rows", "in_n", "out_n")] + [("flags", ctypes.c_uint8)] + \
        [(n, ctypes.c_float) for n in ("lo", "hi")]


def float_conv_case(rng, depthwise):
    desc, x8, w8, _, _, _ = random_conv(rng, depthwise)
    x = rng.standard_normal(x8.shape).astype(np.float32)
    w = rng.standard_normal(w8.shape).astype(np.float32)
    oc = desc["y"][3]
    bias = rng.standard_normal(oc).astype(np.float32) if rng.integers(2) else None
    res = rng.standard_normal(desc["y"]).astype(np.float32) if rng.integers(2) else None
    lo, hi = [(None, None), (0.0, None), (0.0, 6.0), (-1.0, 1.0)][int(rng.integers(4))]
    d = dict(desc, op=desc["op"] + "_f32", has_bias=bias is not None, residual=res is not None, lo=lo, hi=hi)
    return d, x, w, bias, res


def float_expected(d, x, w, bias, res):
    dw = d["op"].startswith("depthwise")
    acc = ref_conv(x.astype(np.float64), w.astype(np.float64), 0, 0, d["strides"], d["padding"], d["dilation"],
                   d["y"][1:3], dw)
    acc = acc + (bias if bias is not None else 0) + (res if res is not None else 0)
    return np.clip(acc, d["lo"] if d["lo"] is not None else -np.inf, d["hi"] if d["hi"] is not None else np.inf)


def run_float_conv(lib, d, x, w, bias, res, fma, y_in_x=None):
    prm = ConvF(**nn._convf_params(d, fma))
    n, oh, ow, oc = d["y"]
    size = n * oh * ow * oc
    if y_in_x is None:
        y, xa = np.zeros(size, np.float32), np.ascontiguousarray(x)
    else:                                   # the output starts y_in_x bytes below the input, in one buffer
        shared = np.zeros((max(x.nbytes + y_in_x, size * 4) + 16) // 4, np.float32)
        shared[y_in_x // 4:y_in_x // 4 + x.size] = x.reshape(-1)
        xa, y = shared[y_in_x // 4:], shared
    fn = lib.tms_dwconv_f32 if d["op"].startswith("depthwise") else lib.tms_conv_f32
    null = ctypes.c_void_p(None)
    fn(ctypes.byref(prm), ptr(xa), ptr(np.ascontiguousarray(w)), ptr(bias) if bias is not None else null,
       ptr(res) if res is not None else null, ptr(y))
    return y[:size].reshape(d["y"])


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
@pytest.mark.parametrize("fma", [True, False], ids=["fma", "separate"])
def test_float_convolutions_match_on_random_shapes(lib, depthwise, fma):
    rng = np.random.default_rng(31 + depthwise)
    for case in range(40):
        d, x, w, bias, res = float_conv_case(rng, depthwise)
        got = run_float_conv(lib, d, x, w, bias, res, fma)
        want = float_expected(d, x, w, bias, res)
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), (case, d)


def test_float_fully_connected(lib):
    rng = np.random.default_rng(9)
    for case in range(30):
        rows, k, n = int(rng.integers(1, 4)), int(rng.integers(1, 50)), int(rng.integers(1, 23))
        x = rng.standard_normal((rows, k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        res = rng.standard_normal((rows, n)).astype(np.float32) if case % 2 else None
        d = {"op": "dense_f32", "x": [rows, k], "w": [n, k], "y": [rows, n], "has_bias": True,
             "residual": res is not None, "lo": 0.0 if case % 3 else None, "hi": None}
        prm = FcF(**nn._fcf_params(d, True))
        y = np.zeros((rows, n), np.float32)
        lib.tms_fc_f32(ctypes.byref(prm), ptr(x), ptr(w), ptr(bias), ptr(res) if res is not None else
                       ctypes.c_void_p(None), ptr(y))
        want = x.astype(np.float64) @ w.T.astype(np.float64) + bias + (res if res is not None else 0)
        want = np.maximum(want, 0) if d["lo"] is not None else want
        assert np.allclose(y, want, rtol=1e-5, atol=1e-5), case


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_float_in_place_at_the_lag_the_tir_analysis_allows(lib, depthwise):
    from tvm_memsched.relax.passes.float_kernels import conv2d_f32
    from tvm_memsched.relax.analysis.inplace import kernel_inplace_shifts

    rng = np.random.default_rng(17)
    tried = 0
    for case in range(40):
        d, x, w, _, _ = float_conv_case(rng, depthwise)
        d = dict(d, has_bias=False, residual=False)
        if d["x"][0] != 1 or math.prod(d["y"]) > x.size:
            continue
        f = conv2d_f32(tuple(d["x"]), tuple(d["w"]), tuple(d["y"]), strides=tuple(d["strides"]),
                       padding=tuple(d["padding"]), dilation=tuple(d["dilation"]), depthwise=depthwise,
                       has_bias=False, residual=False, lo=d["lo"], hi=d["hi"])
        shifts = [s for i, o, s in kernel_inplace_shifts(f, 2) if i == 0]
        if not shifts:
            continue
        got = run_float_conv(lib, d, x, w, None, None, True, y_in_x=min(shifts))
        assert np.allclose(got, float_expected(d, x, w, None, None), rtol=1e-5, atol=1e-5), (case, d)
        tried += 1
    assert tried >= 8


def float_models():
    from tvm_memsched import zoo

    return {"resnet8": zoo.tflite("resnet8", "float32"), "ds_cnn": zoo.tflite("ds_cnn", "float32")}


@pytest.mark.parametrize("fma", [False, True], ids=["tvm-floats", "fma"])
def test_float_export_is_tvms_floats_without_fma(fma, tmp_path):
    """Without fused multiply-add the library computes TVM's very floats (same products, same order)."""
    from tvm_memsched import micro
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    mod = from_tflite_bytes(float_models()["ds_cnn"])
    exp = micro.export(mod, "mps2-an386", str(tmp_path), measure=False, float_fma=fma, kernels="fast")
    assert {"conv2d_f32", "depthwise_conv2d_f32", "dense_f32"} <= set(exp.library_kernels.values())
    r = micro.run_host(exp, cflags=["-ffp-contract=off"])
    assert r.ok, r.summary()
    assert r.max_abs_err == 0 or fma, r.summary()


@pytest.mark.slow
def test_float_models_in_qemu_beat_tvm_kernels(tmp_path):
    from tvm_memsched import micro
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    mod = from_tflite_bytes(float_models()["resnet8"])
    fast = micro.export(mod, "mps2-an386", str(tmp_path / "fast"), check_fit=False, kernels="fast")
    tvmk = micro.export(mod, "mps2-an386", str(tmp_path / "tvm"), check_fit=False, kernels="tvm")
    x = micro.default_inputs(fast)
    rf, rt = micro.run_qemu(fast, x, atol=1e-4, rtol=1e-4), micro.run_qemu(tvmk, x)
    assert rf.ok and rt.ok and rf.instructions < rt.instructions / 3


def test_board_database_says_which_cores_take_the_dsp_path(tmp_path):
    """The library picks its path from __ARM_FEATURE_DSP; the board database must agree for every board."""
    from tvm_memsched.micro.boards import BOARDS
    from tvm_memsched.micro.toolchain import find_tool

    try:
        cc = find_tool("arm-none-eabi-gcc")
    except Exception:
        pytest.skip("no arm-none-eabi-gcc")
    src = tmp_path / "probe.c"
    src.write_text("#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP\nint dsp = 1;\n#else\nint dsp = 0;\n#endif\n")
    for board in BOARDS.values():
        out = subprocess.run([cc, *board.cflags(), "-E", "-P", str(src)], capture_output=True, text=True, check=True)
        assert ("dsp = 1" in out.stdout) == board.dsp, board.name


# ------------------------------------------------------------------ float16 weights (tms_*_f32h)
def half_weights(rng, shape):
    """float16 weights with the awkward values among them: subnormals, signed zeros, the largest finite."""
    w = (rng.standard_normal(shape) * 0.5).astype(np.float16)
    flat = w.reshape(-1)
    specials = np.array([0x0001, 0x03FF, 0x8001, 0x8000, 0x0000, 0x7BFF, 0xFBFF, 0x0400], np.uint16).view(np.float16)
    k = min(len(specials), flat.size)
    flat[rng.choice(flat.size, k, replace=False)] = specials[:k]
    return w


@pytest.mark.parametrize("depthwise", [False, True], ids=["conv", "depthwise"])
def test_half_weight_convolutions_equal_the_float_ones_on_the_widened_weights(lib, depthwise):
    rng = np.random.default_rng(47 + depthwise)
    for case in range(30):
        d, x, w, bias, res = float_conv_case(rng, depthwise)
        w16 = half_weights(rng, w.shape)
        b16 = bias.astype(np.float16) if bias is not None else None
        want = run_float_conv(lib, d, x, w16.astype(np.float32), b16.astype(np.float32) if b16 is not None else None,
                              res, True)
        prm = ConvF(**nn._convf_params(d, True))
        y = np.zeros(want.size, np.float32)
        fn = lib.tms_dwconv_f32h if depthwise else lib.tms_conv_f32h
        null = ctypes.c_void_p(None)
        fn(ctypes.byref(prm), ptr(np.ascontiguousarray(x)), ptr(w16.view(np.uint16)),
           ptr(b16.view(np.uint16)) if b16 is not None else null, ptr(res) if res is not None else null, ptr(y))
        assert np.array_equal(y.reshape(want.shape).view(np.uint32), want.view(np.uint32)), (case, d)


def test_every_float16_value_widens_exactly(lib):
    """tms_half over all 65,536 bit patterns, through a 1-input fully connected layer (y = 1 * w)."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = bits.view(np.float16).astype(np.float32)
    for part in (bits[:1 << 15], bits[1 << 15:]):
        d = {"op": "dense_f32", "x": [1, 1], "w": [part.size, 1], "y": [1, part.size], "has_bias": False,
             "residual": False, "lo": None, "hi": None}
        prm = FcF(**nn._fcf_params(d, True))
        y = np.zeros(part.size, np.float32)
        lib.tms_fc_f32h(ctypes.byref(prm), ptr(np.ones(1, np.float32)), ptr(np.ascontiguousarray(part)),
                        ctypes.c_void_p(None), ctypes.c_void_p(None), ptr(y))
        w = part.view(np.float16).astype(np.float32)
        nan = np.isnan(w)
        assert np.array_equal(np.isnan(y), nan) and np.array_equal(y[~nan], w[~nan])
    assert want.size == 1 << 16


def test_widen_half_in_tir_is_exact_on_llvm_and_c():
    """The TIR widening TVM's kernels use (float16 weights read by TVM's C kernels or on the host)."""
    import tvm
    from tvm import te
    from tvm_memsched.relax.passes.float_kernels import widen_half

    h = te.placeholder((1 << 16,), "uint16", "h")
    f = te.create_prim_func([h, te.compute((1 << 16,), lambda i: widen_half(h[i]), name="y")])
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = bits.view(np.float16).astype(np.float32).view(np.uint32)
    out = tvm.runtime.tensor(np.zeros(1 << 16, np.float32))
    tvm.tirx.build(f, target="llvm")(tvm.runtime.tensor(bits), out)
    assert np.array_equal(out.numpy().view(np.uint32), want)
    src = tvm.tirx.build(f, target="c").inspect_source()
    assert "e-08" not in src and "e-8" not in src        # no rounded float constant printed for 2**-24


def half_model(name="ds_cnn"):
    from tvm_memsched import zoo

    return zoo.tflite(name, "float16")


@pytest.mark.parametrize("kernels", ["fast", "tvm"])
def test_float16_weights_stay_float16_in_flash_and_match_litert(kernels, tmp_path):
    from tvm_memsched import micro
    from tvm_memsched.micro.sidebyside import check_against_tflite, tflm_refuses
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    buf = half_model()
    assert tflm_refuses(buf) and not tflm_refuses(float_models()["ds_cnn"])
    exp16 = micro.export(from_tflite_bytes(buf), "mps2-an386", str(tmp_path / "h"), measure=False, kernels=kernels)
    exp32 = micro.export(from_tflite_bytes(float_models()["ds_cnn"]), "mps2-an386", str(tmp_path / "f"),
                         measure=False, kernels=kernels)
    c16, c32 = exp16.params_bytes, exp32.params_bytes
    assert c16 < 0.55 * c32
    r = micro.run_host(exp16)
    assert r.ok, r.summary()
    chk = check_against_tflite(buf, micro.default_inputs(exp16), r.outputs, tflm=False)
    assert chk["ok"] and "tflm" not in chk, chk


def test_widen_float16_stores_float32_weights(tmp_path):
    from tvm_memsched import micro
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    mod = from_tflite_bytes(half_model())
    kept = micro.export(mod, "mps2-an386", str(tmp_path / "k"), measure=False, kernels="fast")
    wide = micro.export(mod, "mps2-an386", str(tmp_path / "w"), measure=False, kernels="fast", keep_float16=False)
    assert wide.params_bytes > 1.9 * kept.params_bytes
    assert "tms_conv_f32h" in open(kept.files["kernels"]).read()
    assert "tms_conv_f32h" not in open(wide.files["kernels"]).read()
    r = micro.run_host(wide)
    assert r.ok, r.summary()


# ------------------------------------------------------------------ dynamic-range (hybrid) kernels
def hybrid_input(rng, shape):
    """Float input whose batches are of every kind: mixed signs, all positive, all negative, all zero, wide."""
    x = rng.standard_normal(shape).astype(np.float32)
    kinds = rng.integers(0, 5, shape[0])
    for b, kind in enumerate(kinds):
        if kind == 1:
            x[b] = np.abs(x[b])
        elif kind == 2:
            x[b] = -np.abs(x[b])
        elif kind == 3:
            x[b] = 0.0
        elif kind == 4:
            x[b] *= np.exp(3 * rng.standard_normal(x[b].shape)).astype(np.float32)
    return x


def hybrid_case(rng, op):
    """A random hybrid kernel (``conv_kernel`` / ``dense_kernel``) with its input and constants."""
    from tvm_memsched.relax.frontends.tflite_hybrid import conv_kernel, dense_kernel

    asymmetric, per_channel = bool(rng.integers(2)), bool(rng.integers(2))
    lo, hi = [(None, None), (0.0, None), (0.0, 6.0), (-1.0, 1.0)][int(rng.integers(4))]
    if op == "hybrid_dense":
        rows, k, n = int(rng.integers(1, 4)), int(rng.integers(1, 50)), int(rng.integers(1, 23))
        w = rng.integers(-127, 128, (n, k)).astype(np.int8)
        x_shape, oc = (rows, k), n
    else:
        d, _, w, _, _, _ = random_conv(rng, op == "hybrid_depthwise_conv2d")
        x_shape, oc = tuple(d["x"]), d["y"][3]
    bias = rng.standard_normal(oc).astype(np.float32) if rng.integers(2) else None
    scales = rng.uniform(0.002, 0.02, oc if per_channel else 1).astype(np.float32)
    common = dict(asymmetric=asymmetric, per_channel=per_channel, has_bias=bias is not None, lo=lo, hi=hi)
    if op == "hybrid_dense":
        f = dense_kernel(x_shape, w.shape, **common)
    else:
        f = conv_kernel(x_shape, w.shape, tuple(d["y"]), strides=tuple(d["strides"]), padding=tuple(d["padding"]),
                        dilation=tuple(d["dilation"]), depthwise=op != "hybrid_conv2d",
                        w_first=per_channel and op == "hybrid_conv2d" and bool(rng.integers(2)), **common)
    return f, hybrid_input(rng, x_shape), w, scales, bias


def hybrid_tir(f, x, w, scales, bias):
    """The TIR kernel's output (LLVM)."""
    import tvm

    from tvm_memsched.relax.int8.kernels import description

    args = [x, w, scales] + ([bias] if bias is not None else [])
    y = tvm.runtime.tensor(np.zeros(description(f)["y"], np.float32))
    tvm.tirx.build(f, target="llvm")(*[tvm.runtime.tensor(a) for a in args], y)
    return y.numpy()


@functools.lru_cache(maxsize=None)
def hybrid_cases(op, seed, count, in_place=False):
    """``count`` random cases of ``op`` from ``seed`` (:func:`hybrid_case`) as ``(f, x, w, scales, bias, TIR
    output, in-place shifts)``; ``in_place``: only the cases whose output may overlap their input (shifts
    from tvm_memsched's TIR analysis). The TIR kernels are built in one module, once a process (the cases
    depend on the seed alone)."""
    import tvm

    from tvm_memsched.relax.analysis.inplace import kernel_inplace_shifts
    from tvm_memsched.relax.int8.kernels import description

    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        f, x, w, scales, bias = hybrid_case(rng, op)
        shifts = [s for i, o, s in kernel_inplace_shifts(f, len(f.params) - 1) if i == 0] if in_place else []
        if in_place and not shifts:
            continue
        for a in (x, w, scales, bias):
            if a is not None:
                a.flags.writeable = False          # shared: a test changing them would change the other's
        cases.append((f, x, w, scales, bias, shifts))
    built = tvm.tirx.build(tvm.IRModule({f"k{k}": c[0].with_attr("global_symbol", f"k{k}")
                                         for k, c in enumerate(cases)}), target="llvm")
    out = []
    for k, (f, x, w, scales, bias, shifts) in enumerate(cases):
        y = tvm.runtime.tensor(np.zeros(description(f)["y"], np.float32))
        built[f"k{k}"](*[tvm.runtime.tensor(a) for a in [x, w, scales] + ([bias] if bias is not None else [])], y)
        out.append((f, x, w, scales, bias, y.numpy(), shifts))
    return out


def aligned(a: np.ndarray, align: int = 16) -> np.ndarray:
    buf = np.zeros(a.nbytes + align, np.uint8)
    off = (-buf.ctypes.data) % align
    out = buf[off:off + a.nbytes].view(a.dtype)
    out[:] = a.reshape(-1)
    return out


def hybrid_lib(lib, f, x, w, scales, bias, y_in_x=None, consume=0, sums_in_table=False):
    """The library's output; ``y_in_x``: the output placed this many bytes below the input, in one buffer;
    ``consume``: a depthwise convolution may overwrite its input; ``sums_in_table``: the weight sums in the
    table (TMS_F_SUMS), else computed into scratch."""
    from tvm_memsched.relax.int8.kernels import description

    d = description(f)
    op = d["op"]
    size = math.prod(d["y"])
    if y_in_x is None:
        y, xa = np.zeros(size, np.float32), np.ascontiguousarray(x)
    else:
        shared = np.zeros((max(x.nbytes + y_in_x, size * 4) + 16) // 4, np.float32)
        shared[y_in_x // 4:y_in_x // 4 + x.size] = x.reshape(-1)
        xa, y = shared[y_in_x // 4:], shared
    packed = aligned(w.reshape(-1) if op == "hybrid_depthwise_conv2d" else nn.pack_weights(w))
    sums = op != "hybrid_depthwise_conv2d" and bool(d["asymmetric"])   # a symmetric zero point needs none
    table = aligned(nn.hybrid_table(d, scales, bias, w if sums and sums_in_table else None))
    scratch = np.zeros(nn.hybrid_scratch_bytes(d, sums=sums and not sums_in_table) // 4, np.float32)
    x_shape = d["x"]
    batches = math.prod(x_shape[:-1]) if op == "hybrid_dense" else x_shape[0]
    c = ctypes.c_uint32
    lib.tms_quant_params_f32(c(batches), c(x.size // batches), ctypes.c_int32(int(d["asymmetric"])), ptr(xa),
                             ptr(scratch))
    col = ptr(scratch[3 * batches:])
    if op != "hybrid_depthwise_conv2d":
        prm = nn._hybrid_dense_params(d) if op == "hybrid_dense" else nn._convf_params(d, False)
        prm["flags"] |= 128 if sums and sums_in_table else 0                       # TMS_F_SUMS
        lib.tms_hconv_f32(ctypes.byref(ConvF(**prm)), ptr(xa), ptr(packed), ptr(table), ptr(y), ptr(scratch), col)
    else:
        lib.tms_hdwconv_f32(ctypes.byref(ConvF(**nn._convf_params(d, False))), ptr(xa), ptr(packed), ptr(table),
                            ptr(y), ptr(scratch), ctypes.c_int32(consume))
    return y[:size].reshape(d["y"])


@pytest.mark.parametrize("op", ["hybrid_conv2d", "hybrid_depthwise_conv2d", "hybrid_dense"])
def test_hybrid_kernels_equal_the_tir_kernels_bit_for_bit(libs, op):
    """tms_hconv_f32 (also for fully connected layers, rows as batches) and tms_hdwconv_f32 against the TIR
    kernels of the import (which equal LiteRT's builtin kernels, tests/test_hybrid.py), bit for bit: odd
    channel counts, several rows, strides, padding, dilation, batches of every sign (and all zero), asymmetric
    and symmetric quantization, per-channel and per-tensor scales, both rescale orders, with and without a
    bias, every activation range, the weight sums in the table or computed per call."""
    seed = {"hybrid_conv2d": 61, "hybrid_depthwise_conv2d": 62, "hybrid_dense": 63}[op]
    for kind, lib in libs.items():
        for case, (f, x, w, scales, bias, want, _) in enumerate(hybrid_cases(op, seed, 25)):
            for consume in (0, 1) if op == "hybrid_depthwise_conv2d" else (0,):
                for sums_in_table in (False, True):
                    got = hybrid_lib(lib, f, x.copy(), w, scales, bias, consume=consume,
                                     sums_in_table=sums_in_table)
                    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
                        (kind, case, consume, sums_in_table, dict(f.attrs))


@pytest.mark.parametrize("op", ["hybrid_conv2d", "hybrid_depthwise_conv2d", "hybrid_dense"])
def test_hybrid_kernels_in_place_at_the_lag_the_tir_analysis_allows(libs, op):
    """The output written over the input, placed where tvm_memsched's TIR analysis says it may be."""
    cases = hybrid_cases(op, 71, 40, in_place=True)
    for kind, lib in libs.items():
        for case, (f, x, w, scales, bias, want, shifts) in enumerate(cases):
            for consume in (0, 1) if op == "hybrid_depthwise_conv2d" else (0,):
                got = hybrid_lib(lib, f, x, w, scales, bias, y_in_x=min(shifts), consume=consume)
                assert np.array_equal(got, want), (kind, case, consume)
    assert len(cases) >= 8


def test_a_call_overwrites_its_input_only_where_nothing_reads_it_again():
    """``input_dies``: later reads of any byte of the input, before a later output covers it, keep it (a TVM
    kernel's arguments count as reads but for the params it only writes); so do the program's outputs and new
    states; the call's own output frees it too; tensors outside the arena are never overwritten."""
    from types import SimpleNamespace

    from tvm_memsched.micro.codegen import KernelCall, Tensor

    def t(off, n, base="arena"):
        return Tensor((base, off if base == "arena" else 0), 0 if base == "arena" else off, (n,), "int8")

    lib_kernels = {"dw": nn.NnKernel("dw", "hybrid_depthwise_conv2d", {}), "conv": nn.NnKernel("conv", "conv2d", {})}

    def dies(later, final=(), x=None, y=None):
        calls = [KernelCall("dw", [x or t(0, 100), t(500, 8, "param"), y or t(200, 100)])] + later
        prog = SimpleNamespace(calls=calls, output_copies=[(0, f) for f in final], state_copies=[], output_places=[],
                               kernels=SimpleNamespace(outputs={"tvm_add": frozenset({2})}))
        return nn.input_dies(prog, 0, lib_kernels)

    assert dies([])
    assert not dies([KernelCall("conv", [t(90, 20), t(300, 10)])])                  # reads x[90:100]
    assert dies([KernelCall("conv", [t(300, 10), t(0, 100)]), KernelCall("conv", [t(0, 10), t(400, 5)])])
    assert not dies([KernelCall("conv", [t(300, 10), t(0, 50)]), KernelCall("conv", [t(60, 10), t(400, 5)])])
    assert dies([KernelCall("conv", [t(0, 100), t(400, 5)])], y=t(0, 100))        # its output covers x
    assert not dies([KernelCall("tvm_kernel", [t(300, 10), t(0, 100)])])           # a TVM kernel's argument
    assert dies([KernelCall("tvm_add", [t(300, 10), t(310, 10), t(0, 100)])])      # ... that it only writes
    assert not dies([KernelCall("tvm_add", [t(0, 10), t(310, 10), t(20, 100)])])
    assert not dies([], final=[t(50, 10)])                                         # an output left in x
    assert not dies([], x=t(0, 100, "input"))                                      # the caller's buffer


@pytest.mark.parametrize("kernels", ["fast", "tvm"])
def test_hybrid_models_keep_int8_weights_in_flash_and_match_litert(kernels, tmp_path):
    """A dynamic-range quantized DS-CNN: int8 weights in flash (under 0.35x the float32 build's constants),
    the host run of the exported C equal to TVM and bit-identical to LiteRT's reference kernels."""
    from tvm_memsched import micro, zoo
    from tvm_memsched.micro.sidebyside import check_against_tflite, tflm_refuses
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    buf = zoo.tflite("ds_cnn", "hybrid")
    assert tflm_refuses(buf)
    exp8 = micro.export(from_tflite_bytes(buf), "mps2-an386", str(tmp_path / "h"), measure=False, kernels=kernels)
    exp32 = micro.export(from_tflite_bytes(float_models()["ds_cnn"]), "mps2-an386", str(tmp_path / "f"),
                         measure=False, kernels=kernels)
    assert exp8.params_bytes < 0.35 * exp32.params_bytes
    if kernels == "fast":
        src = open(exp8.files["kernels"]).read()
        assert "tms_hconv_f32" in src
        # the convolutions' weight sums cost no arena bytes computed per call: not in flash (TMS_F_SUMS, 128,
        # unset); the fully connected layer's, with one output position, are (nn.SUMS_MIN_POSITIONS)
        flags = dict(re.findall(r"(\w+)_params = \{.*\.flags = (\d+)", src))
        assert flags and all(bool(int(f) & 128) == n.endswith("dense") for n, f in flags.items()), flags
        # its depthwise convolutions' inputs die at them: each quantized once, over itself
        assert re.search(r"hybrid_depthwise_conv2d\w*\(.*, 1\) \*/", open(exp8.files["source"]).read())
    r = micro.run_host(exp8)
    assert r.ok, r.summary()
    chk = check_against_tflite(buf, micro.default_inputs(exp8), r.outputs, tflm=False)
    assert chk["ok"] and "tflm" not in chk, chk


def hybrid_layer_tensors(mb, rng, x_shape, w_shape, axis):
    """The input, int8 weights (per-channel scales along ``axis``) and float bias of one hybrid layer."""
    n = w_shape[axis]
    x = mb.tensor("x", x_shape)
    w = mb.tensor("w", list(w_shape), np.int8, data=rng.integers(-127, 128, w_shape).astype(np.int8),
                  scale=list(rng.uniform(0.002, 0.02, n)), zero_point=[0] * n, quantized_dimension=axis)
    b = mb.tensor("b", [n], np.float32, data=rng.standard_normal(n).astype(np.float32))
    return x, w, b


def test_weight_sums_go_to_flash_only_where_they_would_enlarge_the_arena(tmp_path):
    """A hybrid 1x1 convolution from 8 to 256 channels is the whole arena: its weight sums, computed per call
    into scratch, would add 1 KiB to it, so the export puts them in its flash table instead (TMS_F_SUMS) and
    the arena is the one with every sum in flash; the host run is bit-identical to LiteRT's reference
    kernels."""
    from tvm_memsched import micro
    from tvm_memsched.micro.sidebyside import check_against_tflite
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.tflite.builder import ModelBuilder, tfl

    mb = ModelBuilder()
    x, w, b = hybrid_layer_tensors(mb, np.random.default_rng(6), [1, 4, 4, 8], (256, 1, 1, 8), 0)
    y = mb.tensor("y", [1, 4, 4, 256])
    opt = tfl.Conv2DOptionsT()
    opt.padding, opt.strideH, opt.strideW = tfl.Padding.SAME, 1, 1
    opt.dilationHFactor = opt.dilationWFactor = 1
    mb.op(tfl.BuiltinOperator.CONV_2D, [x, w, b], [y], tfl.BuiltinOptions.Conv2DOptions, opt, version=5)
    buf = mb.finish(inputs=[x], outputs=[y])
    exp = micro.export(from_tflite_bytes(buf), "mps2-an386", str(tmp_path), measure=False, kernels="fast")
    flags = [int(f) for f in re.findall(r"_params = \{.*\.flags = (\d+)", open(exp.files["kernels"]).read())]
    assert flags and all(f & 128 for f in flags), flags
    assert exp.workspace_bytes < 64                         # parameters and two windows, no sums
    assert exp.arena_bytes < 4 * (4 * 4 * 256) + 4 * 256     # the output and less than the sums beside it
    r = micro.run_host(exp)
    assert r.ok, r.summary()
    chk = check_against_tflite(buf, micro.default_inputs(exp), r.outputs, tflm=False)
    assert chk["ok"] and chk["litert_ref"]["identical"], chk


def test_a_depthwise_input_read_again_is_not_overwritten(tmp_path):
    """A hybrid depthwise convolution whose input a later ADD reads again leaves it as it is; the host run of
    the export is bit-identical to LiteRT's reference kernels."""
    from tvm_memsched import micro
    from tvm_memsched.micro.sidebyside import check_against_tflite
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.tflite.builder import ModelBuilder, tfl

    mb = ModelBuilder()
    x, w, b = hybrid_layer_tensors(mb, np.random.default_rng(5), [1, 6, 6, 8], (1, 3, 3, 8), 3)
    d, y = mb.tensor("d", [1, 6, 6, 8]), mb.tensor("y", [1, 6, 6, 8])
    opt = tfl.DepthwiseConv2DOptionsT()
    opt.padding, opt.strideH, opt.strideW, opt.depthMultiplier = tfl.Padding.SAME, 1, 1, 1
    opt.dilationHFactor = opt.dilationWFactor = 1
    mb.op(tfl.BuiltinOperator.DEPTHWISE_CONV_2D, [x, w, b], [d], tfl.BuiltinOptions.DepthwiseConv2DOptions, opt,
          version=6)
    mb.op(tfl.BuiltinOperator.ADD, [x, d], [y], tfl.BuiltinOptions.AddOptions, tfl.AddOptionsT())
    buf = mb.finish(inputs=[x], outputs=[y])
    exp = micro.export(from_tflite_bytes(buf), "mps2-an386", str(tmp_path), measure=False, kernels="fast")
    assert re.search(r"hybrid_depthwise_conv2d\w*\(.*, 0\) \*/", open(exp.files["source"]).read())
    r = micro.run_host(exp)
    assert r.ok, r.summary()
    chk = check_against_tflite(buf, micro.default_inputs(exp), r.outputs, tflm=False)
    assert chk["ok"] and chk["litert_ref"]["identical"], chk


@pytest.mark.parametrize("asymmetric", [False, True])
def test_library_quantization_params_equal_the_tir_kernel(lib, asymmetric):
    """tms_quant_params_f32 (which every hybrid kernel calls first) against the TIR kernel, bit for bit, on
    batches of every kind: mixed signs, all positive, all negative, all zero, one element, a range of 1e30, and
    zero points near halves."""
    import tvm

    from tvm_memsched.relax.frontends.tflite_hybrid import quantization_params

    rng = np.random.default_rng(11)
    n, k = 64, 9
    x = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(1e-6, 1e3, (n, 1)).astype(np.float32)
    x[1], x[2], x[3] = np.abs(x[1]), 0.0, -np.abs(x[3])
    x[4] = [1e30, -1e-30, 0, 0, 0, 0, 0, 0, 0]
    x[5] = [-2.5, 0.5, 0, 0, 0, 0, 0, 0, 0]          # zero point from a range that is not a power of two
    for b in range(6, n):                             # zero points near x.5: -128 - 255 * min / (max - min)
        lo = -(b - 6 + 0.5) / 255.0 * rng.uniform(0.999, 1.001)
        x[b, :2] = [np.float32(lo), np.float32(1 + lo)]
    f = tvm.tirx.build(quantization_params((n, k), asymmetric), target="llvm")
    want = tvm.runtime.tensor(np.zeros((n, 3), np.float32))
    f(tvm.runtime.tensor(x), want)
    got = np.zeros((n, 3), np.float32)
    lib.tms_quant_params_f32(ctypes.c_uint32(n), ctypes.c_uint32(k), ctypes.c_int32(int(asymmetric)), ptr(x), ptr(got))
    assert np.array_equal(got.view(np.uint32), want.numpy().view(np.uint32))


def _litert_zero_points(fmin, fmax):
    """AsymmetricQuantizeFloats' zero point of each range, in numpy's double precision (its steps exactly)."""
    span = (fmax - fmin).astype(np.float64)               # the float difference, widened
    scale = span / 255.0
    lo, hi = fmin.astype(np.float64) / scale, fmax.astype(np.float64) / scale
    zpd = np.where(128.0 + np.abs(lo) < 127.0 + np.abs(hi), -128.0 - lo, 127.0 - hi)
    t = np.trunc(zpd)
    r = t + np.where(zpd - t >= 0.5, 1.0, np.where(zpd - t <= -0.5, -1.0, 0.0))
    return np.where(zpd <= -128.0, -128.0, np.where(zpd >= 127.0, 127.0, r)).astype(np.float32)


def test_library_zero_points_equal_double_precision_without_doubles(lib):
    """The microcontroller library finds the asymmetric zero point in integers (the board has no double
    precision FPU). On 400,000 ranges, a quarter of them with the zero point a few ulps from a half, its scale
    and zero point equal AsymmetricQuantizeFloats' in double precision, and the library links no double
    routine."""
    rng = np.random.default_rng(5)
    n = 100_000
    finite = lambda u: (u & np.uint32(0x7F7FFFFF)).view(np.float32)       # noqa: E731
    u = rng.integers(0, 2**32, (4, n), dtype=np.uint64).astype(np.uint32)
    k = rng.integers(0, 256, n)
    span = ((u[3] & np.uint32(0x7FFFFF)) | ((100 + (u[3] >> 25)) << 23).astype(np.uint32)).view(np.float32)
    near = (-(k + 0.5) / 255.0 * span.astype(np.float64)).astype(np.float32)
    nudge = lambda f: (f.view(np.uint32) + rng.integers(-2, 3, n).astype(np.uint32)).view(np.float32)  # noqa: E731
    fmin = np.concatenate([-np.abs(finite(u[0])), nudge(near), -finite(u[2]), np.zeros(n, np.float32)])
    fmax = np.concatenate([np.abs(finite(u[1])), nudge(span + near), finite(u[2]), finite(u[1])])
    assert fmin.dtype == fmax.dtype == np.float32
    fmin, fmax = np.minimum(fmin, 0).astype(np.float32), np.maximum(fmax, 0).astype(np.float32)
    with np.errstate(over="ignore"):                      # a range of two huge ends overflows: left out
        keep = np.isfinite(fmax - fmin) & (fmax - fmin > 0)
    fmin, fmax = fmin[keep], fmax[keep]
    x = np.stack([fmin, fmax], axis=1)
    got = np.zeros((len(x), 3), np.float32)
    lib.tms_quant_params_f32(ctypes.c_uint32(len(x)), ctypes.c_uint32(2), ctypes.c_int32(1), ptr(x), ptr(got))
    want_scale = ((fmax - fmin).astype(np.float64) / 255.0).astype(np.float32)
    assert np.array_equal(got[:, 0].view(np.uint32), want_scale.view(np.uint32))
    want = _litert_zero_points(fmin, fmax)
    assert len(x) > 390_000 and np.array_equal(got[:, 2], want), np.flatnonzero(got[:, 2] != want)[:10]


def test_every_double_step_of_the_zero_point_is_emulated_exactly(tmp_path):
    """tests/native/double_emulation.c: each double operation the library emulates in integers (the scale,
    |lo| and |hi|, the sums compared, both candidate zero points) equals the double operation, on 2 million
    ranges of every kind."""
    exe = tmp_path / "double_emulation"
    subprocess.run([host_cc(), "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME}",
                    os.path.join(os.path.dirname(__file__), "native", "double_emulation.c"), "-o", str(exe), "-lm"],
                   check=True)
    r = subprocess.run([str(exe), "2000000"], capture_output=True, text=True)
    assert r.returncode == 0 and "0 zero points and 0 steps differ" in r.stdout, r.stdout


def test_the_library_needs_no_double_precision_routine(tmp_path):
    """Built for every board, the library calls none of the compiler's double precision routines (2.9 KB of
    flash that a hybrid model's quantization pulled in before)."""
    from tvm_memsched.micro.boards import BOARDS
    from tvm_memsched.micro.toolchain import find_tool

    try:
        cc, nm = find_tool("arm-none-eabi-gcc"), find_tool("arm-none-eabi-nm")
    except Exception:
        pytest.skip("no arm-none-eabi-gcc")
    (tmp_path / "tms_nn_config.h").write_text("")
    for board in {tuple(b.cflags()): b for b in BOARDS.values()}.values():     # one build per set of flags
        obj = tmp_path / f"{board.name}.o"
        subprocess.run([cc, *board.cflags(), "-O2", "-std=c11", f"-I{tmp_path}", "-c",
                        os.path.join(RUNTIME, "tms_nn.c"), "-o", str(obj)], check=True)
        undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout.split()
        assert not [u for u in undefined if u.startswith("__aeabi_d") or u.endswith("df2") or u.endswith("df3")], \
            (board.name, undefined)


def _variant_lib(tmp_path, config: dict, flags=()):
    d = tmp_path / "_".join(f"{k[7:]}{v}" for k, v in config.items())
    d.mkdir()
    (d / "tms_nn_config.h").write_text("".join(f"#define {k} {v}\n" for k, v in config.items()))
    out = d / "libtms.so"
    subprocess.run([host_cc(), "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", f"-I{d}",
                    *flags, os.path.join(RUNTIME, "tms_nn.c"), "-o", str(out)], check=True)
    syms = subprocess.run(["nm", str(out)], capture_output=True, text=True, check=True).stdout
    return ctypes.CDLL(str(out)), {line.split()[-1] for line in syms.splitlines() if line.strip()}


@pytest.mark.parametrize("config", [
    {"TMS_NN_MODE_EXACT": 1, "TMS_NN_MODE_FULL": 0, "TMS_NN_MODE_CLAMP": 0},
    {"TMS_NN_MODE_EXACT": 1, "TMS_NN_MODE_FULL": 0, "TMS_NN_MODE_CLAMP": 1},
    {"TMS_NN_MODE_EXACT": 1, "TMS_NN_MODE_FULL": 1, "TMS_NN_MODE_CLAMP": 0},
], ids=["exact", "exact-clamp", "exact-full"])
@pytest.mark.parametrize("flags", [[], ["-DTMS_NN_EMULATE_DSP"]], ids=["plain", "dsp"])
def test_a_library_without_some_output_modes_computes_the_same(config, flags, tmp_path):
    """Compiled without some fast output modes (tms_nn_config.h), the library leaves their functions out and
    still computes every call exactly: a full range falls back to the clamped form, a clamped one to the exact."""
    lib, syms = _variant_lib(tmp_path, config, flags)
    for mode, i in (("FULL", 1), ("CLAMP", 2)):
        assert (f"conv_two_m{i}" in syms) == bool(config[f"TMS_NN_MODE_{mode}"]), sorted(s for s in syms if "_m" in s)
    rng = np.random.default_rng(3)
    for depthwise in (False, True):
        fast = 0
        for case in range(24):
            desc, x, w, bias, mult, shift = random_conv(rng, depthwise, extreme=case % 4 == 3, big_bias=case % 5 == 4)
            got, table = run_conv(lib, desc, x, w, bias, mult, shift)
            assert np.array_equal(got, expected_conv(desc, x, w, bias, mult, shift)), (case, desc)
            fast += int(table[0, 0] & 1)
        assert 0 < fast < 24                 # calls that asked for a fast mode and calls that asked for the exact


def test_a_library_with_one_multiply_add_variant_leaves_the_other_out(tmp_path):
    """TMS_NN_FMA_ON / _OFF: only the float drivers of the variant the model uses are compiled, and they
    compute what the full library computes for that variant."""
    full, _ = _variant_lib(tmp_path, {"TMS_NN_FMA_OFF": 1, "TMS_NN_FMA_ON": 1})
    for on in (0, 1):
        lib, syms = _variant_lib(tmp_path, {"TMS_NN_FMA_OFF": 1 - on, "TMS_NN_FMA_ON": on})
        assert {f"convf_pair_f{on}", f"dwf_pixel_f{on}"} <= syms
        assert not {f"convf_pair_f{1 - on}", f"dwf_pixel_f{1 - on}", f"fcf_row_f{1 - on}"} & syms
        rng = np.random.default_rng(on)
        for depthwise in (False, True):
            for _ in range(8):
                d, x, w, bias, res = float_conv_case(rng, depthwise)
                got = run_float_conv(lib, d, x, w, bias, res, bool(on))
                assert np.array_equal(got, run_float_conv(full, d, x, w, bias, res, bool(on)))


@pytest.mark.parametrize("spec", ["int8", "float32", "hybrid"])
def test_the_export_compiles_only_the_variants_its_calls_reach(spec, tmp_path):
    """tms_nn_config.h names the output modes the calls' tables (fast flag) and activation ranges select
    (int8), the multiply-add of the float kernels, and whether hybrid depthwise convolutions quantize their
    input once or tap by tap; the host run with it equals TVM's build."""
    from tvm_memsched import micro, zoo
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    buf = zoo.tflite("ds_cnn", spec) if spec != "float32" else float_models()["ds_cnn"]
    exp = micro.export(from_tflite_bytes(buf), "mps2-an386", str(tmp_path), measure=False, kernels="fast")
    macros = dict(re.findall(r"#define (\w+) (\d)", open(os.path.join(tmp_path, "tms_nn_config.h")).read()))
    source = open(exp.files["kernels"]).read()
    prog = exp.program
    if spec == "int8":
        modes, fc = set(), set()
        for call in prog.calls:
            if exp.library_kernels.get(call.kernel) not in ("conv2d", "depthwise_conv2d", "dense"):
                continue
            tab = np.asarray(prog.params[call.args[2].base[1]]).reshape(-1)
            if exp.library_kernels.get(call.kernel) == "dense":
                fc.add(bool(tab[0] & 8))          # TMS_PACK_PAIR16: the fully connected pair16 layout
            sym = re.escape(f"model_{call.kernel}_params")
            lo, hi = map(int, re.search(sym + r" = \{.*\.act_min = (-?\d+), \.act_max = (-?\d+)", source).groups())
            modes.add("EXACT" if not tab[0] & 1 else "FULL" if lo == -128 and hi == 127 else "CLAMP")
        assert modes
        assert fc and macros == {**{f"TMS_NN_MODE_{m}": str(int(m in modes)) for m in ("EXACT", "FULL", "CLAMP")},
                                 "TMS_NN_FC_PAIRS": str(int(False in fc)), "TMS_NN_FC_PAIR16": str(int(True in fc))}
    elif spec == "float32":
        fma = set(re.findall(r"_params = \{.*\.flags = (\d+)", source))
        assert fma and macros == {"TMS_NN_FMA_OFF": str(int(any(not int(f) & 16 for f in fma))),
                                  "TMS_NN_FMA_ON": str(int(any(int(f) & 16 for f in fma)))}
    else:
        once = set(re.findall(r"hybrid_depthwise_conv2d\w*\(.*, (\d)\) \*/", open(exp.files["source"]).read()))
        dw = [k for k in exp.program.kernels.library.values() if k.op == "hybrid_depthwise_conv2d"]
        flags = set(re.findall(r"_params = \{.*\.flags = (\d+)", source))      # TMS_F_ASYM: 64
        assert once and dw and macros == {
            "TMS_NN_HDW_TAPS": str(int("0" in once)), "TMS_NN_HDW_ONCE": str(int("1" in once)),
            "TMS_NN_HDW_REST": str(int(any(k.desc["x"][-1] % 4 for k in dw))),
            "TMS_NN_HYBRID_SYM": str(int(any(not int(f) & 64 for f in flags))),
            "TMS_NN_HYBRID_ASYM": str(int(any(int(f) & 64 for f in flags)))}
    r = micro.run_host(exp)
    assert r.ok and r.max_abs_err == 0, r.summary()


@pytest.mark.parametrize("config", [{"TMS_NN_HDW_TAPS": 0, "TMS_NN_HDW_ONCE": 1},
                                    {"TMS_NN_HDW_TAPS": 1, "TMS_NN_HDW_ONCE": 0}], ids=["once", "taps"])
def test_a_library_with_one_hybrid_depthwise_variant_computes_the_same(config, tmp_path):
    """Compiled with one of the two ways of quantizing a hybrid depthwise convolution's input, the library
    computes the TIR kernel's outputs; the tap-by-tap one leaves the input as it is whatever the call says."""
    lib, _ = _variant_lib(tmp_path, config)
    for case, (f, x, w, scales, bias, want, _) in enumerate(hybrid_cases("hybrid_depthwise_conv2d", 81, 10)):
        kept = x.copy()
        got = hybrid_lib(lib, f, kept, w, scales, bias, consume=config["TMS_NN_HDW_ONCE"])
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), case
        assert np.array_equal(kept, x) == (not config["TMS_NN_HDW_ONCE"]) or not x.any(), case


@pytest.mark.parametrize("config", [{"TMS_NN_HYBRID_SYM": 0, "TMS_NN_HYBRID_ASYM": 1},
                                    {"TMS_NN_HYBRID_SYM": 1, "TMS_NN_HYBRID_ASYM": 0},
                                    {"TMS_NN_HDW_REST": 0}], ids=["asymmetric", "symmetric", "blocks-of-four"])
def test_a_library_for_one_quantization_or_whole_channel_blocks_computes_the_same(config, tmp_path):
    """Compiled for asymmetric or symmetric quantization only, or for depthwise channels in whole blocks of
    four only (tms_nn_config.h), the library computes the TIR kernels' outputs bit for bit on the calls it was
    compiled for, and leaves out what it does not need (the zero point's integer arithmetic)."""
    from tvm_memsched.relax.int8.kernels import description

    lib, syms = _variant_lib(tmp_path, config)
    assert ("asymmetric_zero_point" in syms) == bool(config.get("TMS_NN_HYBRID_ASYM", 1))
    rng = np.random.default_rng(23)
    for op in nn.HYBRID_OPS:
        done = 0
        while done < 6:
            f, x, w, scales, bias = hybrid_case(rng, op)
            d = description(f)
            if "TMS_NN_HYBRID_ASYM" in config and bool(d["asymmetric"]) != bool(config["TMS_NN_HYBRID_ASYM"]):
                continue
            if "TMS_NN_HDW_REST" in config and op == "hybrid_depthwise_conv2d" and d["x"][-1] % 4:
                continue
            want = hybrid_tir(f, x, w, scales, bias)
            got = hybrid_lib(lib, f, x.copy(), w, scales, bias)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (op, d)
            done += 1


@pytest.mark.parametrize("io_in_arena", [True, False], ids=["io-in-arena", "caller-buffers"])
def test_library_calls_take_data_pointers_where_they_are_known(io_in_arena, tmp_path):
    """model.c passes the library's kernels arrays of the data pointers themselves (4 bytes an argument, no
    DLTensor), in flash where every pointer is known when the model is generated, else in RAM with the
    pointers to the caller's buffers set by model_run; TVM's kernels get TVMFFIAny arrays. Both run
    bit-identical to TVM's build on the host."""
    from tvm_memsched import micro, zoo
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    exp = micro.export(from_tflite_bytes(zoo.tflite("ds_cnn", "int8")), "mps2-an386", str(tmp_path),
                       measure=False, kernels="fast", io_in_arena=io_in_arena)
    source = open(exp.files["source"]).read()
    library = {exp.program.kernels.symbols[n] for n in exp.library_kernels}
    calls = re.findall(r"\{__tvm_ffi_(\w+), (\w+), (\d+)u,", source)
    assert calls and library
    patched = set()
    for sym, args, _ in calls:
        decl = re.search(rf"static (void\* (?:const )?|const TVMFFIAny ){args}\[\d+\] = \{{(.*?)\}};", source, re.S)
        if sym not in library:
            assert decl.group(1) == "const TVMFFIAny ", (sym, decl.group(1))
            continue
        assert "type_index" not in decl.group(2) and "DLTensor" not in decl.group(2)
        sets = re.findall(rf"  {args}\[(\d+)\] = ", source)
        assert (decl.group(1) == "void* const ") == (not sets), (args, decl.group(1), sets)
        patched |= {args} if sets else set()
    # with the caller's buffers, the first and last library calls read / write them through patched pointers
    assert bool(patched) == (not io_in_arena), patched
    if io_in_arena:      # every DLTensor left in flash is an argument of one of TVM's kernels (here: MEAN)
        defined = set(re.findall(r"static const DLTensor (\w+) =", source))
        tvm_args = {args for sym, args, _ in calls if sym not in library}
        used = {t for a in tvm_args for t in re.findall(
            r"&(\w+)\}", re.search(rf"{a}\[\d+\] = \{{(.*?)\}};", source, re.S).group(1))}
        assert defined and defined == used, (defined, used)
    r = micro.run_host(exp)
    assert r.ok and r.max_abs_err == 0, r.summary()
