"""The Cortex-M4F speed paths of the microkernel library against TFLite's arithmetic.

* ``tms_conv_s8_wide``: the convolution whose pair of windows is gathered widened to int16 (the export's
  choice on cores with the DSP extension and no Helium), on the host through the portable C of the DSP
  instructions (``TMS_NN_EMULATE_DSP``) and the plain build (where it is ``tms_conv_s8``), on random shapes
  whose windows hit every remainder of the gather (input channels not a multiple of 4, borders, dilation, an
  odd pixel and channel count), in place at the lag the TIR analysis allows; in QEMU (slow) the assembly of
  the channel loop (an odd and an even group count, both output stages), with a check that it is the
  path taken (instructions per multiply-accumulate below what the int8-column loop can reach).
"""

import ctypes

import numpy as np
import pytest

import test_micro_nn as nnt
import tflite_ops as T
from tvm_memsched.micro import nn


# ------------------------------------------------------------------ host: tms_conv_s8_wide
def run_conv_wide(lib, desc, x, w, bias, mult, shift, *, y_in_x=None, entry="tms_conv_s8_wide"):
    """The library's output through ``entry`` with the widened column's workspace (TMS_CONV_WIDE_COL_BYTES);
    ``y_in_x``: the output this many bytes below the input in one buffer."""
    table = nn.channel_table(desc, w, nnt.tir_table(desc, bias, mult, shift))
    packed = nn.pack_weights(w)
    n, oh, ow, oc = desc["y"]
    p = nnt.Conv(batch=n, in_h=x.shape[1], in_w=x.shape[2], in_c=x.shape[3], out_h=oh, out_w=ow, out_c=oc,
                 kh=w.shape[1], kw=w.shape[2], sh=desc["strides"][0], sw=desc["strides"][1],
                 dh=desc["dilation"][0], dw=desc["dilation"][1], pad_t=desc["padding"][0],
                 pad_l=desc["padding"][1], in_zp=-desc["in_offset"], out_zp=desc["requant"]["offset"],
                 act_min=desc["requant"]["lo"], act_max=desc["requant"]["hi"])
    col_bytes = 4 * (-(-w[0].size // 4) * 4)
    wbuf = np.zeros(packed.size + 16, np.int8)
    off = (-wbuf.ctypes.data) % 16
    wbuf[off:off + packed.size] = packed
    ysize = n * oh * ow * oc
    if y_in_x is None:
        y = np.zeros(ysize, np.int8)
        xa = np.ascontiguousarray(x)
    else:
        shared = np.zeros(max(x.size + y_in_x, ysize) + 8, np.int8)
        shared[y_in_x:y_in_x + x.size] = x.reshape(-1)
        xa, y = shared[y_in_x:], shared[:]
    # the column's bytes past its end stay untouched (a sentinel after it)
    colbuf = np.full(col_bytes + 24, 0x5A, np.int8)
    coff = (-colbuf.ctypes.data) % 8
    getattr(lib, entry)(ctypes.byref(p), nnt.ptr(xa), nnt.ptr(wbuf[off:]), nnt.ptr(table), nnt.ptr(y),
                        nnt.ptr(colbuf[coff:]))
    assert (colbuf[coff + col_bytes:] == 0x5A).all(), "the column overran TMS_CONV_WIDE_COL_BYTES"
    return y[:ysize].reshape(n, oh, ow, oc), table


def random_wide_conv(rng, case):
    """A random convolution; every third one with a window whose rows are a multiple of 4 bytes (the word
    path of the gather), else any channel count (the element path)."""
    desc, x, w, bias, mult, shift = nnt.random_conv(rng, False, extreme=case % 7 == 6, big_bias=case % 11 == 10)
    if case % 3 == 0:
        c4 = 4 * int(rng.integers(1, 5))
        x = rng.integers(-128, 128, x.shape[:3] + (c4,)).astype(np.int8)
        w = rng.integers(-127, 128, w.shape[:3] + (c4,)).astype(np.int8)
        desc["x"], desc["w"] = list(x.shape), list(w.shape)
    return desc, x, w, bias, mult, shift


def test_wide_convolution_matches_tflite_on_random_shapes(lib):
    rng = np.random.default_rng(41)
    fast = 0
    for case in range(60):
        desc, x, w, bias, mult, shift = random_wide_conv(rng, case)
        got, table = run_conv_wide(lib, desc, x, w, bias, mult, shift)
        assert np.array_equal(got, nnt.expected_conv(desc, x, w, bias, mult, shift)), (case, desc)
        fast += int(table[0, 0] & 1)
    assert 20 < fast < 60                   # both epilogues ran


def test_wide_convolution_in_place_at_the_lag_the_tir_analysis_allows(lib):
    rng = np.random.default_rng(7)
    tried = 0
    for case, conv, lag in nnt.inplace_conv_cases(lambda case: random_wide_conv(rng, case)):
        got, _ = run_conv_wide(lib, *conv, y_in_x=lag)
        assert np.array_equal(got, nnt.expected_conv(*conv)), (case, conv[0], lag)
        tried += 1
    assert tried >= 8


def test_dsp_cores_export_the_wide_convolution(tmp_path):
    """Cores with the DSP extension and no Helium call the widened column's entry point with twice the
    workspace; the others keep theirs."""
    import re

    from tvm_memsched import micro
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    buf = T.conv(np.random.default_rng(1), hw=(5, 5), cin=4, cout=6)
    calls = {}
    for board in ("mps2-an386", "mps2-an505", "mps2-an385", "mps3-an547"):
        micro.export(from_tflite_bytes(buf), board, str(tmp_path / board), measure=False, check_fit=False)
        src = (tmp_path / board / "model_kernels.c").read_text()
        calls[board] = re.search(r"tvm_memsched_workspace\((\d+)u\);\s+if \(scratch == NULL\) return -1;\s+"
                                 r"(tms_conv_s8\w*)\(", src).group(2, 1)
    assert calls == {"mps2-an386": ("tms_conv_s8_wide", "144"), "mps2-an505": ("tms_conv_s8_wide", "144"),
                     "mps2-an385": ("tms_conv_s8", "72"), "mps3-an547": ("tms_conv_s8_helium", "192")}, calls


fixture_lib = nnt.lib        # the plain and the DSP (emulated) host builds of the library
lib = fixture_lib


def export_library(buf, board, out, kernels="fast"):
    from tvm_memsched import micro
    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

    exp = micro.export(from_tflite_bytes(buf), board, str(out), measure=False, check_fit=False, kernels=kernels)
    assert exp.library_kernels, "the library should compute this model's operator"
    return exp


def test_a_widened_column_over_the_ram_budget_falls_back_to_the_int8_column(tmp_path):
    """``kernels="auto"`` keeps the library with int8 columns where widened ones would cost more RAM than
    TVM's kernels plus the budget (and the widened ones where they fit)."""
    rng = np.random.default_rng(2)
    # K = 576: 2,304 B of column widened, 1,152 B not; budget: 5% of about 28 KB
    big = T.conv(rng, hw=(20, 20), cin=64, cout=8, k=3, pad=T.tfl.Padding.VALID)
    small = T.conv(rng, hw=(6, 6), cin=4, cout=8)
    for name, buf, entry in (("big", big, "tms_conv_s8("), ("small", small, "tms_conv_s8_wide(")):
        exp = export_library(buf, "mps2-an386", tmp_path / name, kernels="auto")
        assert entry in (tmp_path / name / "model_kernels.c").read_text(), (name, exp.kernel_choice)


# ------------------------------------------------------------------ host: fully connected, pair16 layout
def run_fc(lib, x, w, bias, zp_in, zp_out, mult, shift, lo, hi, *, pair16=True):
    rows, k = x.shape
    n = w.shape[0]
    per_channel = len(set(zip(mult.tolist(), shift.tolist()))) > 1
    desc = {"op": "dense", "x": [rows, k], "w": [n, k], "y": [rows, n], "in_offset": -zp_in, "w_offset": 0,
            "requant": {"multiplier": None if per_channel else int(mult[0]),
                        "shift": None if per_channel else int(shift[0]), "offset": zp_out, "lo": lo, "hi": hi},
            "has_bias": True, "dtypes": ["int8"] * 3}
    table = nn.channel_table(desc, w, nnt.tir_table(desc, bias, mult, shift))
    if pair16:
        packed = nn.pack_pair16(w)
        table[0, 0] |= 8                                   # TMS_PACK_PAIR16
    else:
        packed = nn.pack_weights(w)
    wbuf = np.zeros(packed.size + 16, np.int8)
    off = (-wbuf.ctypes.data) % 16
    wbuf[off:off + packed.size] = packed
    y = np.zeros((rows, n), np.int8)
    p = nnt.Fc(rows=rows, in_n=k, out_n=n, in_zp=zp_in, out_zp=zp_out, act_min=lo, act_max=hi)
    lib.tms_fc_s8(ctypes.byref(p), nnt.ptr(x), nnt.ptr(wbuf[off:]), nnt.ptr(table), nnt.ptr(y))
    return y, table


def test_pair16_fully_connected_matches_tflite(lib):
    """Random shapes (K and the channel count with every remainder mod 4, several rows), both output stages,
    and weights at the layout's bound: the high channel's sum of |w| * 128 just under 2^23 with every input
    -128 (the largest sum the shifted difference must carry)."""
    rng = np.random.default_rng(9)
    fast = 0
    for case in range(50):
        rows, k, n = int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(1, 30))
        x = rng.integers(-128, 128, (rows, k)).astype(np.int8)
        w = rng.integers(-127, 128, (n, k)).astype(np.int8)
        if case % 10 == 9:                                 # the bound: 512 * 127 * 128 < 2^23
            k, n = 512, 6
            x = np.full((rows, k), -128, np.int8)
            w = np.where(rng.integers(0, 2, (n, k)) == 1, 127, -127).astype(np.int8)
            w[1::2] = -127
        bias = rng.integers(-9000, 9000, n).astype(np.int64)
        zp_in, zp_out = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
        mult, shift = nnt.quant_params(rng, n, bool(rng.integers(2)), extreme=case % 9 == 8)
        lo, hi = nnt.act_range(rng)
        assert nn.pair16_fits(w)
        y, table = run_fc(lib, x, w, bias, zp_in, zp_out, mult, shift, lo, hi)
        acc = (x.astype(np.int64) - zp_in) @ w.astype(np.int64).T + bias
        assert np.array_equal(y, nnt.requant(acc, mult, shift, zp_out, lo, hi)), (case, rows, k, n)
        fast += int(table[0, 0] & 1)
    assert 10 < fast < 50


def test_pair16_layout_takes_only_weights_that_fit_it():
    """An int16 per channel pair and the high channel's sum bounded: else the export keeps channel pairs."""
    assert nn.pair16_fits(np.full((2, 516), 127, np.int8))
    assert not nn.pair16_fits(np.full((2, 517), 127, np.int8))           # 517 * 127 * 128 >= 2^23
    low_only = np.full((3, 600), 127, np.int8)
    low_only[1] = 0                                                      # pairs (0, 1), (2, -): high ones 0
    assert nn.pair16_fits(low_only)
    w = np.zeros((2, 4), np.int8)
    w[1, 2], w[0, 2] = -128, -1                                          # h = -1 - 32768: not an int16
    assert not nn.pair16_fits(w)
    w[0, 2] = 0
    assert nn.pair16_fits(w)


# ------------------------------------------------------------------ QEMU: the assembly
def wide_conv_models(seed=3):
    """Convolutions through the widened column's assembly: an odd group count (K = 36: 9 groups, entering the
    two-group loop at its second half) with an odd channel count and pixel count and a ReLU (the clamped
    output stage), an even one (1 x 1, 8 channels: 2 groups) at the full range, 3 input channels (the
    element path of the gather, K = 27 padded to 28) with stride 2, and a wider layer (16 -> 16, 3 x 3: 36
    groups) for the speed check."""
    rng = np.random.default_rng(seed)
    return {"odd_groups": T.conv(rng, act=1, hw=(5, 5), cin=4, cout=7),
            "even_groups": T.conv(rng, k=1, hw=(4, 6), cin=8, cout=6),
            "rgb_s2": T.conv(rng, stride=2, hw=(9, 8), cin=3, cout=8, act=3),
            "wide16": T.conv(rng, hw=(8, 8), cin=16, cout=16)}


@pytest.mark.slow
@pytest.mark.parametrize("board", ["mps2-an386", "mps2-an505"])
def test_wide_convolution_in_qemu(board, tmp_path):
    from tvm_memsched import micro

    runs = {}
    for name, buf in wide_conv_models().items():
        exp = export_library(buf, board, tmp_path / name)
        assert "tms_conv_s8_wide(" in (tmp_path / name / "model_kernels.c").read_text()
        r = micro.run_qemu(exp)
        assert r.ok and r.max_abs_err == 0, (name, r.summary())
        runs[name] = r
    # the path taken: 8 x 8 x 16 -> 16, 3 x 3 (147,456 multiply-accumulates) took 225,160 instructions with
    # the int8 column (1.53 per multiply-accumulate), 185,240 with the widened one (1.26)
    r = runs["wide16"]
    assert r.instructions < 1.35 * 147456, r.summary()


def pair16_models(seed=4):
    """Fully connected layers through the pair16 assembly: an odd group count (K = 36) with channels left over
    after blocks of four (n = 10) and a ReLU (the clamped stage), an even one (K = 64, n = 8) at the full
    range, several rows, plus a wider layer for the speed check (K not a multiple of 4 takes the C form: the
    host tests)."""
    rng = np.random.default_rng(seed)
    return {"odd_groups": T.fully_connected(rng, k=36, n=10, act=1),
            "even_groups": T.fully_connected(rng, k=64, n=8),
            "rows": T.fully_connected(rng, k=20, n=12, batch=3),
            "wide": T.fully_connected(rng, k=256, n=64)}


@pytest.mark.slow
@pytest.mark.parametrize("board", ["mps2-an386", "mps2-an505"])
def test_pair16_fully_connected_in_qemu(board, tmp_path):
    from tvm_memsched import micro

    runs = {}
    for name, buf in pair16_models().items():
        exp = export_library(buf, board, tmp_path / name)
        assert "#define TMS_NN_FC_PAIR16 1" in (tmp_path / name / "tms_nn_config.h").read_text()
        r = micro.run_qemu(exp)
        assert r.ok and r.max_abs_err == 0, (name, r.summary())
        runs[name] = r
    # the path taken: 256 -> 64 (16,384 multiply-accumulates) took 24,600 instructions with channel pairs
    # (1.50 per multiply-accumulate), 18,520 with the pair16 layout (1.13)
    r = runs["wide"]
    assert r.instructions < 1.3 * 16384, r.summary()
