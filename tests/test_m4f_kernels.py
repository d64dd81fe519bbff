"""The Cortex-M4F (ARMv7E-M DSP) assembly forms added for speed, run in QEMU against TVM's integer kernels
(which equal TFLite Micro bit for bit): depthwise border pixels through the assembly row kernel (taps outside
the image read a zero-point row, channels in chunks of 64) and the ADD loop for TFLite's usual form (one input
of real multiplier 1/2). The host tests (tests/test_micro_nn.py) cover the C forms; these the assembly."""

import numpy as np
import pytest

import test_micro_nn as nnt
import tflite_ops as T


def depthwise_models(seed=11):
    """Depthwise convolutions whose channels are a multiple of 4 (the assembly's condition): SAME padding
    (border pixels on every side), strides 1 and 2, 3x3 and 5x5 (odd taps), dilation 2, a 2x2 kernel
    (even taps), more than 64 channels (several chunks, the last one short), an activation range."""
    rng = np.random.default_rng(seed)
    cases = [dict(k=3, cin=8, hw=(6, 5)), dict(k=3, cin=68, hw=(4, 5), stride=2), dict(k=5, cin=12, hw=(7, 6)),
             dict(k=3, cin=4, hw=(7, 7), dil=2), dict(k=2, cin=132, hw=(3, 4), act=3),
             dict(k=3, cin=16, hw=(5, 3), stride=2, act=1)]
    return {f"dw{i}_{c['k']}x{c['k']}_{c['cin']}": T.conv(rng, depthwise=True, **c) for i, c in enumerate(cases)}


def add_models(seed=5):
    """ADDs of random scales (one input's real multiplier is then 1/2, the assembly's form) with an odd and an
    even element count, a ReLU (a narrower range: the C form) and SUB (the exact form)."""
    rng = np.random.default_rng(seed)
    B = T.B
    models = {f"add{i}_{'x'.join(map(str, s))}": T.binary(rng, B.ADD, shape1=s, shape2=s)
              for i, s in enumerate([(1, 9, 9, 13), (1, 8, 8, 16), (1, 3, 5, 7)])}
    models["add_relu"] = T.binary(rng, B.ADD, act=1, shape1=(1, 6, 6, 8), shape2=(1, 6, 6, 8))
    models["sub"] = T.binary(rng, B.SUB, shape1=(1, 4, 4, 6), shape2=(1, 4, 4, 6))
    return models


def _run_all(models, board, tmp_path):
    from tvm_memsched import micro

    runs = {}
    for name, buf in models.items():
        exp = nnt.export_fast(buf, board, tmp_path / name)
        r = micro.run_qemu(exp)
        assert r.ok and r.max_abs_err == 0, (name, r.summary())
        runs[name] = r
    return runs


@pytest.mark.slow
def test_depthwise_borders_in_qemu_on_the_cortex_m4f(tmp_path):
    _run_all(depthwise_models(), "mps2-an386", tmp_path)


@pytest.mark.slow
def test_add_in_qemu_on_the_cortex_m4f(tmp_path):
    runs = _run_all(add_models(), "mps2-an386", tmp_path)
    # the assembly form: about 16 instructions per element (the C form took about 39)
    assert runs["add0_1x9x9x13"].instructions < 20 * 9 * 9 * 13, runs["add0_1x9x9x13"].summary()


@pytest.mark.slow
def test_depthwise_and_add_in_qemu_on_the_cortex_m33(tmp_path):
    models = depthwise_models()
    picked = {k: models[k] for k in list(models)[:2]}
    picked.update({k: v for k, v in add_models().items() if k.startswith("add0")})
    _run_all(picked, "mps2-an505", tmp_path)
