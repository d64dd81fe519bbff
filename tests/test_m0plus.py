"""The microkernel library on ARMv6-M (Cortex-M0/M0+: Thumb-1, no 32x32->64 multiply, no DSP instructions).

* The requantisation in 32-bit pieces (``srdhm_v6m``, ``srdhm_any_v6m`` and the ``rq_fast`` / ``rq_exact``
  built on them with ``TMS_NN_EMULATE_V6M``) against the 64-bit formula of TFLite's
  MultiplyByQuantizedMultiplier, on the host: every pair of edge values (0, +-1, the 16-bit piece borders,
  +-2^30, INT32_MIN/MAX ...) and many random ones, negative products included.
* The library's kernels with that requantisation, on the host, against TFLite's reference arithmetic (the
  random-shape checks of test_micro_nn.py on a third build of the library).
* The object built for the Cortex-M0+ calls no ``__aeabi_lmul`` and holds the Thumb-1 loops.
* Slow: single-operator models of random shapes exported for ``mps2-an385-m0plus`` and run in QEMU (the
  Thumb-1 assembly), bit-identical to TVM's integer kernels.
"""

import ctypes
import os
import subprocess

import numpy as np
import pytest

import test_micro_nn as nnt
import tflite_ops as T
from tvm_memsched.micro.toolchain import host_cc
from tvm_memsched.relax.int8.fixedpoint import mbqm_array

RUNTIME = nnt.RUNTIME
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1

HARNESS = r"""
#define TMS_NN_EMULATE_V6M 1
#include "tms_nn.c"
#if !TMS_V6M
#error "TMS_NN_EMULATE_V6M should select the ARMv6-M requantisation"
#endif
void t_srdhm(int n, const int32_t* a, const int32_t* m, int32_t* y) { for (int i = 0; i < n; ++i) y[i] = srdhm_v6m(a[i], m[i]); }
void t_srdhm_any(int n, const int32_t* a, const int32_t* m, int32_t* y) { for (int i = 0; i < n; ++i) y[i] = srdhm_any_v6m(a[i], m[i]); }
void t_rq_exact(int n, const int32_t* a, const int32_t* m, const int32_t* info, int32_t* y) {
  for (int i = 0; i < n; ++i) y[i] = rq_exact(a[i], m[i], info[i]);
}
void t_rq_fast(int n, const int32_t* a, const int32_t* m, const int32_t* info, int32_t z, int32_t* y) {
  for (int i = 0; i < n; ++i) y[i] = rq_fast(a[i], m[i], info[i], 2 * z + 1);
}
"""


@pytest.fixture(scope="module")
def rq(tmp_path_factory):
    d = tmp_path_factory.mktemp("v6m_rq")
    (d / "h.c").write_text(HARNESS)
    out = d / "librq.so"
    subprocess.run([host_cc(), "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-I", RUNTIME,
                    str(d / "h.c"), "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


def call(fn, *arrays, z=None):
    arrays = [np.ascontiguousarray(a, np.int32) for a in arrays]
    y = np.zeros(arrays[0].size, np.int32)
    args = [ctypes.c_int(y.size)] + [nnt.ptr(a) for a in arrays] + ([ctypes.c_int32(z)] if z is not None else [])
    fn(*args, nnt.ptr(y))
    return y.astype(np.int64)


def srdhm_ref(a, m):
    """gemmlowp's SaturatingRoundingDoublingHighMul in int64: round half away from zero of a m / 2^31."""
    ab = np.asarray(a, np.int64) * np.asarray(m, np.int64)
    num = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    return np.where(num >= 0, num >> 31, -((-num) >> 31))


EDGES = np.array(sorted({0, 1, -1, 2, -2, 3, 0x7fff, 0x8000, 0x8001, 0xffff, 0x10000, 0x10001, -0x7fff, -0x8000,
                         -0x8001, -0xffff, -0x10000, -0x10001, 0x12345678, -0x12345678, (1 << 29), -(1 << 29),
                         (1 << 30) - 1, -(1 << 30) + 1, 1 << 30, -(1 << 30), I32_MAX, I32_MIN, I32_MAX - 1,
                         I32_MIN + 1, 0x7fff0000, -0x7fff0000, 0x0000ffff, 0x40000000 + 0xffff}), np.int64)


def pairs(rng, values, randoms):
    a, m = np.meshgrid(values, values)
    ra = rng.integers(I32_MIN, I32_MAX, randoms, endpoint=True)
    rm = rng.integers(I32_MIN, I32_MAX, randoms, endpoint=True)
    return np.concatenate([a.ravel(), ra, ra]), np.concatenate([m.ravel(), rm, np.roll(rm, 1)])


def test_srdhm_in_16_bit_pieces_equals_the_64_bit_product(rq):
    """Any int32 pair (but INT32_MIN squared, the saturating case rq_exact handles apart); and the fast form
    on its domain |a| < 2^30, 0 <= m < 2^31, edge values of both and random ones, products of either sign."""
    rng = np.random.default_rng(0)
    a, m = pairs(rng, EDGES, 200_000)
    keep = ~((a == I32_MIN) & (m == I32_MIN))
    a, m = a[keep], m[keep]
    assert np.array_equal(call(rq.t_srdhm_any, a, m), srdhm_ref(a, m))
    ea, em = np.meshgrid(EDGES[np.abs(EDGES) < (1 << 30)], EDGES[EDGES >= 0])
    fa = np.concatenate([ea.ravel(), rng.integers(-(1 << 30) + 1, 1 << 30, 200_000)])
    fm = np.concatenate([em.ravel(), rng.integers(0, 1 << 31, 100_000), rng.integers(1 << 30, 1 << 31, 100_000)])
    assert np.all(np.abs(fa) < (1 << 30)) and np.all(fm >= 0)
    assert np.array_equal(call(rq.t_srdhm, fa, fm), srdhm_ref(fa, fm))
    assert (fa * fm < 0).sum() > 1000 and (fa * fm > 0).sum() > 1000


def test_requantisation_equals_multiply_by_quantized_multiplier(rq):
    """rq_exact (any accumulator, multiplier, left or right shift; INT32_MIN cases) and rq_fast (with the output
    zero point and int8 saturation, on the domain the fast flag proves) as TFLite computes them."""
    rng = np.random.default_rng(1)
    a, m = pairs(rng, EDGES, 100_000)
    shift = rng.integers(-31, 8, a.size)
    shift[: EDGES.size ** 2] = np.resize(np.array([0, -1, -31, 1, 7, -2, -16]), EDGES.size ** 2)
    ls, rs = np.maximum(shift, 0), np.maximum(-shift, 0)
    info = (np.maximum(rs - 1, 0) & 0xff) | (ls << 8) | (rs << 16)
    assert np.array_equal(call(rq.t_rq_exact, a, m, info), mbqm_array(a, m, shift))
    assert ((a == I32_MIN) & (m == I32_MIN)).any()
    # fast: no left shift, right shift 1..31, |acc| < 2^30, m >= 0
    acc = np.concatenate([rng.integers(-(1 << 30) + 1, 1 << 30, 100_000), rng.integers(-5000, 5000, 100_000),
                          np.resize(EDGES[np.abs(EDGES) < (1 << 30)], 20_000)])
    mult = np.concatenate([rng.integers(1 << 30, 1 << 31, 150_000), rng.integers(0, 1 << 31, 70_000)])
    rsh = np.concatenate([rng.integers(1, 32, 150_000), rng.integers(1, 12, 70_000)])
    info = (rsh - 1) | (rsh << 16)
    for zp in (-128, -3, 0, 77, 127):
        want = np.clip(mbqm_array(acc, mult, -rsh) + zp, -128, 127)
        assert np.array_equal(call(rq.t_rq_fast, acc, mult, info, z=zp), want), zp


@pytest.fixture(scope="module")
def v6m_lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("tms") / "libtms_v6m.so"
    subprocess.run([host_cc(), "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    "-DTMS_NN_EMULATE_V6M", os.path.join(RUNTIME, "tms_nn.c"), "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


@pytest.mark.parametrize("check", ["conv", "depthwise", "fully_connected", "add", "sub"])
def test_kernels_with_the_v6m_requantisation_match_tflite_on_the_host(v6m_lib, check):
    """The random-shape checks of test_micro_nn.py (both output stages: fast and exact) on the library built
    with the ARMv6-M requantisation."""
    if check in ("conv", "depthwise"):
        nnt.test_convolutions_match_tflite_on_random_shapes(v6m_lib, check == "depthwise")
    elif check == "fully_connected":
        nnt.test_fully_connected_matches_tflite(v6m_lib)
    else:
        nnt.test_add_matches_tflite(v6m_lib, check == "sub")


def test_cortex_m0plus_object_has_no_64_bit_multiply_and_has_the_thumb1_loops(tmp_path):
    from tvm_memsched.micro.toolchain import find_tool

    try:
        cc, nm = find_tool("arm-none-eabi-gcc"), find_tool("arm-none-eabi-nm")
    except Exception as e:                                  # pragma: no cover - toolchain missing
        pytest.skip(f"no Arm toolchain: {e}")
    obj = tmp_path / "tms_nn.o"
    subprocess.run([cc, "-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft", "-O2", "-std=c11", "-Wall", "-Wextra",
                    "-Werror", "-DTMS_NN_ALL_VARIANTS", "-c", os.path.join(RUNTIME, "tms_nn.c"), "-o", str(obj)],
                   check=True)
    syms = subprocess.run([nm, str(obj)], check=True, capture_output=True, text=True).stdout
    undefined = {line.split()[-1] for line in syms.splitlines() if line.split()[0] == "U"}
    assert "__aeabi_lmul" not in undefined, sorted(undefined)
    assert "memcpy" not in undefined                        # unaligned words by bytes, not a call per word
    defined = {line.split()[-1] for line in syms.splitlines() if len(line.split()) == 3}
    assert {"dot_2x2_v6m", "dot_1x4_v6m", "dw_block4_v6m"} <= defined


# ------------------------------------------------------------------ QEMU: the Thumb-1 assembly
def random_models(seed=7):
    """Single-operator int8 models of random shapes: odd channel counts, K not a multiple of 4, strides,
    padding, dilation, odd and even tap counts, a fully connected layer's channels in fours plus a rest,
    ADD (fast stage) and SUB (exact stage)."""
    rng = np.random.default_rng(seed)
    B = T.B
    models = {}
    for i in range(2):
        cin, cout, k = int(rng.integers(1, 14)), int(rng.integers(1, 12)), int(rng.integers(1, 5))
        models[f"conv{i}_{k}x{k}_{cin}to{cout}"] = T.conv(
            rng, k=k, hw=(int(rng.integers(k + 1, 10)), int(rng.integers(k + 1, 9))), cin=cin, cout=cout,
            stride=int(rng.integers(1, 3)), act=int(rng.integers(0, 2)), per_channel=bool(i % 2),
            pad=T.tfl.Padding.SAME if i == 0 else T.tfl.Padding.VALID)
    for i, k in enumerate((3, 2)):
        cin = int(rng.integers(1, 14))
        models[f"depthwise{i}_{k}x{k}_{cin}"] = T.conv(
            rng, depthwise=True, k=k, hw=(int(rng.integers(k + 1, 10)), int(rng.integers(k + 1, 9))), cin=cin,
            stride=int(rng.integers(1, 3)), act=3 if i == 1 else 0)
    for i in range(2):
        k, n = int(rng.integers(5, 60)), int(rng.integers(5, 14))
        models[f"fully_connected{i}_{k}to{n}"] = T.fully_connected(rng, k=k, n=n, act=i % 2)
    models["add"] = T.binary(rng, B.ADD, act=1, shape1=(1, 5, 3, 7), shape2=(1, 5, 3, 7))
    models["sub"] = T.binary(rng, B.SUB, shape1=(1, 3, 4, 5), shape2=(1, 3, 4, 5))
    return models


@pytest.mark.slow
def test_random_operators_in_qemu_on_the_cortex_m0plus(tmp_path):
    """The Thumb-1 loops (2x2 convolution, 1x4 fully connected, depthwise blocks) and the 32-bit
    requantisation as the Cortex-M0+ runs them (QEMU, unaligned accesses trapped): bit-identical."""
    from tvm_memsched import micro

    models = random_models()       # side by side in one model: one export, one firmware, one QEMU run
    exp = nnt.export_fast(T.side_by_side(models), "mps2-an385-m0plus", tmp_path)
    assert len(exp.library_kernels) == exp.kernels == len(models), exp.library_kernels     # every operator
    ref = micro.reference_outputs(exp.mod, micro.default_inputs(exp))
    r = micro.run_qemu(exp, reference=ref)
    bad = nnt.differing(list(models), r.outputs, ref)
    assert r.ok and r.max_abs_err == 0 and not bad, (bad, r.summary())
