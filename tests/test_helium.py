"""The library's Helium kernels (micro/runtime/tms_nn_helium.inc) against TFLite's arithmetic, bit for bit.

A call exported for a core with MVE takes the Helium layouts (``nn.select(..., mve=True)``: weights
K-contiguous per channel, a channel table of int32 arrays, ``TMS_PACK_HELIUM``). The same random cases
(channel counts that leave every remainder 1-15 after blocks of 16 and of 4, odd channels, strides, padding,
dilation, per-channel and per-tensor quantization, batches, left shifts that take the exact requantisation,
activation ranges) run

* on the host (quick): the library built for the host computes the Helium layouts in plain C;
* in QEMU on the Cortex-M55 (slow): one small firmware holds the cases and numpy's expected outputs, runs
  the Helium kernels (MVE intrinsics, vector requantisation) on all of them and prints each mismatch; built
  with GCC and with Clang. ADD / SUB (no layout of their own: MVE whenever the core has it) run there too.
"""

import ctypes
import os
import re
import subprocess

import numpy as np
import pytest

from test_micro_nn import (RUNTIME, Conv, Fc, act_range, conv_desc, expected_conv, ptr, quant_params,
                           random_add_case, requant, tir_table)
from tvm_memsched.micro import nn
from tvm_memsched.micro.toolchain import host_cc


def _k16(k):
    return -(-k // 16) * 16


def random_conv_case(rng, depthwise, extreme=False, pointwise=False):
    """A random convolution (depthwise: depth multiplier 1; ``pointwise``: 1 x 1, stride 1) as (desc, x, w,
    bias, mult, shift)."""
    n = int(rng.integers(1, 3))
    c = int(rng.integers(1, 41)) if depthwise else int(rng.integers(1, 24))
    oc = c if depthwise else int(rng.integers(1, 22))
    kh, kw = (1, 1) if pointwise else (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
    stride = (1, 1) if pointwise else (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    dil = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    h, wd = int(rng.integers(kh * dil[0], 9)), int(rng.integers(kw * dil[1], 9))
    pad = (int(rng.integers(0, kh)), int(rng.integers(0, kw)))
    oh = (h + pad[0] + int(rng.integers(0, kh)) - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (wd + pad[1] + int(rng.integers(0, kw)) - (kw - 1) * dil[1] - 1) // stride[1] + 1
    zp_in, zp_out = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    x = rng.integers(-128, 128, (n, h, wd, c)).astype(np.int8)
    w = rng.integers(-127, 128, (1, kh, kw, c) if depthwise else (oc, kh, kw, c)).astype(np.int8)
    bias = rng.integers(-5000, 5000, oc).astype(np.int64)
    mult, shift = quant_params(rng, oc, bool(rng.integers(2)), extreme=extreme)
    lo, hi = act_range(rng)
    desc = conv_desc(x.shape, w.shape, (n, oh, ow, oc), stride, pad, dil, zp_in, mult, shift, zp_out, lo, hi,
                     depthwise)
    return desc, x, w, bias, mult, shift


def random_fc_case(rng, extreme=False):
    """A random fully connected layer as (desc, x, w, bias, mult, shift); desc as nn.channel_table reads it."""
    rows, k, n = int(rng.integers(1, 4)), int(rng.integers(1, 70)), int(rng.integers(1, 23))
    x = rng.integers(-128, 128, (rows, k)).astype(np.int8)
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    bias = rng.integers(-5000, 5000, n).astype(np.int64)
    mult, shift = quant_params(rng, n, bool(rng.integers(2)), extreme=extreme)
    lo, hi = act_range(rng)
    zp_in, zp_out = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    per_channel = len(set(zip(mult.tolist(), shift.tolist()))) > 1
    desc = {"op": "dense", "x": [rows, k], "w": [n, k], "y": [rows, n], "in_offset": -zp_in, "has_bias": True,
            "requant": {"multiplier": None if per_channel else int(mult[0]),
                        "shift": None if per_channel else int(shift[0]), "offset": zp_out, "lo": lo, "hi": hi}}
    return desc, x, w, bias, mult, shift


def expected(desc, x, w, bias, mult, shift):
    if desc["op"] != "dense":
        return expected_conv(desc, x, w, bias, mult, shift)
    acc = (x.astype(np.int64) + desc["in_offset"]) @ w.astype(np.int64).T + bias
    rq = desc["requant"]
    return requant(acc, mult, shift, rq["offset"], rq["lo"], rq["hi"])


def helium_constants(desc, w, bias, mult, shift):
    """(packed weights, table) as the export writes them for a core with MVE."""
    table = nn.helium_table(nn.channel_table(desc, w, tir_table(desc, bias, mult, shift)), desc["op"])
    packed = w.reshape(-1) if desc["op"] == "depthwise_conv2d" else nn.pack_helium(w, desc["op"])
    return packed, table


def scratch_bytes(desc):
    """The workspace of a Helium call (as nn._take_helium asks for it)."""
    if desc["op"] == "conv2d":
        return 4 * _k16(int(np.prod(desc["w"][1:])))
    if desc["op"] == "depthwise_conv2d":
        return 8 * desc["w"][1] * desc["w"][2] + _k16(desc["x"][3])
    return 0


def conv_struct(desc):
    n, oh, ow, oc = desc["y"]
    _, h, wd, c = desc["x"]
    rq = desc["requant"]
    return dict(batch=n, in_h=h, in_w=wd, in_c=c, out_h=oh, out_w=ow, out_c=oc, kh=desc["w"][1], kw=desc["w"][2],
                sh=desc["strides"][0], sw=desc["strides"][1], dh=desc["dilation"][0], dw=desc["dilation"][1],
                pad_t=desc["padding"][0], pad_l=desc["padding"][1], in_zp=-desc["in_offset"],
                out_zp=rq["offset"], act_min=rq["lo"], act_max=rq["hi"])


def fc_struct(desc):
    rq = desc["requant"]
    return dict(rows=desc["x"][0], in_n=desc["x"][1], out_n=desc["w"][0], in_zp=-desc["in_offset"],
                out_zp=rq["offset"], act_min=rq["lo"], act_max=rq["hi"])


def cases(seed, count):
    """``count`` random cases of each kind; every fourth with scales that take the exact requantisation."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        extreme = i % 4 == 3
        out.append(random_conv_case(rng, False, extreme, pointwise=i % 3 == 1))
        out.append(random_conv_case(rng, True, extreme))
        out.append(random_fc_case(rng, extreme))
    return out


# ------------------------------------------------------------------ host: the layouts in plain C
@pytest.fixture(scope="module")
def hostlib(tmp_path_factory):
    out = tmp_path_factory.mktemp("tms_helium") / "libtms.so"
    subprocess.run([host_cc(), "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    os.path.join(RUNTIME, "tms_nn.c"), "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


def run_host(lib, desc, x, w, bias, mult, shift):
    packed, table = helium_constants(desc, w, bias, mult, shift)
    wbuf = np.zeros(packed.size + 16, np.int8)
    off = (-wbuf.ctypes.data) % 16
    wbuf[off:off + packed.size] = packed
    y = np.zeros(int(np.prod(desc["y"])), np.int8)
    xa = np.ascontiguousarray(x)
    if desc["op"] == "dense":
        lib.tms_fc_s8_helium(ctypes.byref(Fc(**fc_struct(desc))), ptr(xa), ptr(wbuf[off:]), ptr(table), ptr(y))
    else:
        scratch = np.zeros(scratch_bytes(desc) // 8 + 2, np.int64)
        fn = lib.tms_conv_s8_helium if desc["op"] == "conv2d" else lib.tms_dwconv_s8_helium
        fn(ctypes.byref(Conv(**conv_struct(desc))), ptr(xa), ptr(wbuf[off:]), ptr(table), ptr(y), ptr(scratch))
    return y.reshape(desc["y"]), table


def test_helium_layouts_in_plain_c_match_tflite(hostlib):
    fast = 0
    for desc, x, w, bias, mult, shift in cases(5, 40):
        got, table = run_host(hostlib, desc, x, w, bias, mult, shift)
        np.testing.assert_array_equal(got, expected(desc, x, w, bias, mult, shift), err_msg=str(desc))
        fast += int(table[0]) & 1
    assert 0 < fast < 120                 # both requantisations exercised


def test_helium_table_and_packing():
    w = np.arange(2 * 3 * 1 * 5, dtype=np.int8).reshape(2, 3, 1, 5) - 15
    p = nn.pack_helium(w).reshape(2, 16)           # a convolution's rows: K = 15 padded to 16
    assert p[:, :15].tolist() == w.reshape(2, 15).tolist() and not p[:, 15:].any()
    d = nn.pack_helium(w.reshape(2, 15), "dense")   # rows K apart, two zero rows
    assert d.size == 4 * 15 and d[:30].tolist() == w.reshape(-1).tolist() and not d[30:].any()
    desc = conv_desc((1, 3, 3, 5), w.shape, (1, 1, 3, 2), (1, 1), (0, 0), (1, 1), 3, np.array([1 << 30] * 2),
                     np.array([-2, 3]), 0, -128, 127, False)
    t = nn.channel_table(desc, w, tir_table(desc, np.array([10, 20]), np.array([1 << 30, 1 << 29]),
                                            np.array([-2, 3])))
    h = nn.helium_table(t)
    assert h[0] == t[0, 0] | 4 and h.size == 3 + 2 + 2 + 2
    assert h[3:5].tolist() == t[1:, 0].tolist() and h[5:7].tolist() == [1 << 30, 1 << 29]
    assert h[7:].view(np.int8).tolist() == [0, 3, 0, 0, -2, 0, 0, 0]      # left shifts, negated right shifts
    r = nn.helium_table(t, "conv2d")
    assert r[0] == h[0] and r[1:3].tolist() == t[0, 1:].tolist() and r.size == 3 + 2 * 3
    rec = r[3:].reshape(2, 3)
    assert rec[:, :2].tolist() == t[1:, :2].tolist() and rec[:, 2].tolist() == [0xfe << 8, 3]


def test_helium_depthwise_table_order():
    c = 11                                          # a block of eight, then a last block of three
    t = np.zeros((c + 1, 3), np.int32)
    t[1:, 0], t[1:, 1], t[1:, 2] = np.arange(c), 100 + np.arange(c), (np.arange(c) + 1) << 16
    h = nn.helium_table(t, "depthwise_conv2d")
    order = [0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 9]
    assert h[3:3 + c].tolist() == order and h[3 + c:3 + 2 * c].tolist() == [100 + i for i in order]
    s = h[3 + 2 * c:].view(np.int8)                 # C8 = 16 left shifts, 16 negated right shifts
    assert s.size == 32 and not s[:16].any() and s[16:16 + c].tolist() == [-(i + 1) for i in order]
    assert not s[16 + c:].any()


@pytest.mark.parametrize("op,shape", [("dense", (640, 128)), ("dense", (8, 128)), ("dense", (128, 8)),
                                      ("dense", (12, 37)), ("conv2d", (16, 3, 3, 16)), ("conv2d", (64, 1, 1, 64)),
                                      ("conv2d", (6, 1, 1, 32)), ("depthwise_conv2d", (1, 3, 3, 64)),
                                      ("depthwise_conv2d", (1, 3, 3, 13))])
def test_helium_constants_no_larger_than_dsp(op, shape):
    """The Helium layouts of a call's constants (weights and channel table) take no more bytes than the DSP
    path's for the same weights (a fully connected layer's channels in fours, a convolution's K in sixteens
    as every MLPerf-Tiny layer but the first has them; the table alone for every channel count >= 4)."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, shape).astype(np.int8)
    oc = shape[-1] if op == "depthwise_conv2d" else shape[0]
    mult, shift = quant_params(rng, oc, True, extreme=True)
    bias = rng.integers(-5000, 5000, oc).astype(np.int64)
    if op == "dense":
        desc = {"op": "dense", "x": [1, shape[1]], "w": list(shape), "y": [1, oc], "in_offset": 3, "has_bias": True,
                "requant": {"multiplier": None, "shift": None, "offset": 0, "lo": -128, "hi": 127}}
    else:
        desc = conv_desc((1, 4, 4, shape[3]), shape, (1, 4, 4, oc), (1, 1), (1, 1), (1, 1), -3, mult, shift, 0,
                         -128, 127, op == "depthwise_conv2d")
    table = nn.channel_table(desc, w, tir_table(desc, bias, mult, shift))
    dsp_w = nn.pack_depthwise(w) if op == "depthwise_conv2d" else nn.pack_weights(w)
    packed, helium = helium_constants(desc, w, bias, mult, shift)
    assert helium.nbytes <= table.nbytes and packed.nbytes + helium.nbytes <= dsp_w.nbytes + table.nbytes
    for c in range(4, 40):                          # the table alone, any channel count
        t = np.zeros((c + 1, 3), np.int32)
        assert max(nn.helium_table(t, kind).nbytes for kind in nn.HELIUM_OPS) <= t.nbytes


# ------------------------------------------------------------------ QEMU: the MVE code on the Cortex-M55
def _c_bytes(name, a, ctype="int8_t"):
    vals = ",".join(str(int(v)) for v in np.asarray(a).reshape(-1)) or "0"
    return f"static const {ctype} {name}[] __attribute__((aligned(16))) = {{{vals}}};\n"


def firmware_source(all_cases):
    """C of a test program: every case's constants and expected output, a loop calling the kernels."""
    src = ['#include <stdio.h>', '#include <string.h>', '#include "tms_nn.h"', ""]
    rows, ymax, smax = [], 0, 0
    for i, case in enumerate(all_cases):
        if case[0]["op"] == "add":            # (desc, a, b, parameters, expected): x the first input, w the second
            desc, a, b, prm, want = case
            src += [_c_bytes(f"x{i}", a), _c_bytes(f"w{i}", b), _c_bytes(f"e{i}", want),
                    f"static const tms_add_t p{i} = {{{', '.join(f'.{k} = {v}' for k, v in prm.items())}}};"]
            ymax = max(ymax, a.size)
            rows.append(f"{{3, &p{i}, x{i}, w{i}, NULL, e{i}, {a.size}u}}")
            continue
        desc, x, w, bias, mult, shift = case
        packed, table = helium_constants(desc, w, bias, mult, shift)
        src += [_c_bytes(f"x{i}", x), _c_bytes(f"w{i}", packed), _c_bytes(f"t{i}", table, "int32_t"),
                _c_bytes(f"e{i}", expected(desc, x, w, bias, mult, shift))]
        if desc["op"] == "dense":
            fields = ", ".join(f".{k} = {v}" for k, v in fc_struct(desc).items())
            src.append(f"static const tms_fc_t p{i} = {{{fields}}};")
            kind = 2
        else:
            fields = ", ".join(f".{k} = {v}" for k, v in conv_struct(desc).items())
            src.append(f"static const tms_conv_t p{i} = {{{fields}}};")
            kind = 0 if desc["op"] == "conv2d" else 1
        ny = int(np.prod(desc["y"]))
        ymax, smax = max(ymax, ny), max(smax, scratch_bytes(desc))
        rows.append(f"{{{kind}, &p{i}, x{i}, w{i}, (const tms_chan_t*)t{i}, e{i}, {ny}u}}")
    src += ["typedef struct { int kind; const void* p; const int8_t *x, *w; const tms_chan_t* t; const int8_t* e;"
            " unsigned n; } case_t;",
            f"static const case_t cases[] = {{{', '.join(rows)}}};",
            f"static int8_t y[{ymax + 16}];",
            f"static int32_t scratch[{smax // 4 + 4}];",
            "int main(void) {",
            "  unsigned bad = 0, n = sizeof(cases) / sizeof(cases[0]);",
            "  for (unsigned i = 0; i < n; ++i) {",
            "    const case_t* c = &cases[i];",
            "    memset(y, 0x55, sizeof(y));",
            "    if (c->kind == 0) tms_conv_s8_helium(c->p, c->x, c->w, c->t, y, (int8_t*)scratch);",
            "    else if (c->kind == 1) tms_dwconv_s8_helium(c->p, c->x, c->w, c->t, y, scratch);",
            "    else if (c->kind == 2) tms_fc_s8_helium(c->p, c->x, c->w, c->t, y);",
            "    else tms_add_s8(c->p, c->x, c->w, y);",
            "    unsigned diff = 0;",
            "    for (unsigned j = 0; j < c->n; ++j) diff += y[j] != c->e[j];",
            "    diff += y[c->n] != 0x55;",
            "    if (diff) { ++bad; printf(\"case %u kind %d: %u wrong\\n\", i, c->kind, diff); }",
            "  }",
            "  printf(\"helium cases %u failed %u\\n\", n, bad);",
            "  return 0;",
            "}", ""]
    return "\n".join(src)


def build_and_run(tmp_path, all_cases, compiler):
    from tvm_memsched.micro import get_board
    from tvm_memsched.micro.cmake import clang_cflags, clang_triple
    from tvm_memsched.micro.firmware import COMMON_CFLAGS, arm_link_flags, board_linker_script, runtime_file
    from tvm_memsched.micro.toolchain import compile_objects, find_tool, link

    board = get_board("mps3-an547")
    main = tmp_path / "helium_cases.c"
    main.write_text(firmware_source(all_cases))
    sources = [str(main), os.path.join(RUNTIME, "tms_nn.c"), runtime_file("startup.c")]
    flags = COMMON_CFLAGS + ["-I", RUNTIME, "-DTMS_NN_ALL_VARIANTS"]
    if compiler == "clang":
        gcc = find_tool("arm-none-eabi-gcc")
        sysroot = os.path.realpath(os.path.join(os.path.dirname(subprocess.run(
            [gcc, "-print-file-name=libc.a"], capture_output=True, text=True, check=True).stdout.strip()), ".."))
        cc, cflags = "clang", [f"--target={clang_triple(board)}", f"--sysroot={sysroot}", *clang_cflags(board)]
        objs, _ = compile_objects(cc, sources[:2], str(tmp_path / "o"), cflags + flags)
        objs += compile_objects(gcc, sources[2:], str(tmp_path / "s"), board.cflags() + flags)[0]
    else:
        objs, _ = compile_objects(find_tool("arm-none-eabi-gcc"), sources, str(tmp_path / "o"),
                                  board.cflags() + flags)
    script = board_linker_script(str(tmp_path / "fw.ld"), board, 4096)
    elf = str(tmp_path / "helium.elf")
    link(find_tool("arm-none-eabi-gcc"), objs, elf, arm_link_flags(board, script))
    out = subprocess.run([find_tool("qemu-system-arm"), "-M", board.emulator, "-nographic", "-monitor", "none",
                          "-semihosting", "-kernel", elf], capture_output=True, text=True, timeout=120)
    return out.stdout + out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_helium_kernels_in_qemu_m55_match_tflite(tmp_path, compiler):
    rng = np.random.default_rng(9)
    all_cases = cases(7, 30) + [random_add_case(rng, i % 3 == 2) for i in range(30)]
    text = build_and_run(tmp_path, all_cases, compiler)
    m = re.search(r"helium cases (\d+) failed (\d+)", text)
    assert m, text
    assert int(m.group(1)) == len(all_cases) and int(m.group(2)) == 0, text
