"""TFLite RFFT2D kernels (:mod:`tvm_memsched.relax.frontends.tflite_fft`): float64 FFT loops equal numpy's
double-precision ``rfft2`` rounded to float32, for one row or many, with the input zero-padded or cut to
``fft_length``; the TensorFlow-made files (rfft2d, stft, cast_complex) are checked against LiteRT in
tests/test_coverage.py."""

import numpy as np
import pytest
import tvm

from tvm_memsched.relax.frontends.tflite_fft import columns_primfunc, rows_primfunc


def _run(func, *arrays):
    lib = tvm.tirx.build(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    bufs = [tvm.runtime.tensor(a) for a in arrays]
    lib["main"](*bufs)
    return bufs[-1].numpy()


@pytest.mark.parametrize("batch,h_in,w_in,height,width", [
    (2, 1, 8, 1, 8), (3, 1, 2048, 1, 2048), (1, 4, 8, 4, 8), (1, 3, 6, 4, 8), (1, 2, 9, 2, 8), (2, 5, 16, 4, 4),
    (1, 1, 1, 1, 1)])
def test_rfft2d_equals_numpy_in_double_precision(batch, h_in, w_in, height, width):
    x = np.random.default_rng(height * 100 + width).standard_normal((batch, h_in, w_in)).astype(np.float32)
    ow = width // 2 + 1
    if height == 1:
        got = _run(rows_primfunc(batch, h_in, w_in, height, width, "float32"), x,
                   np.zeros((batch, height, ow, 2), "float32"))
    else:
        rows = _run(rows_primfunc(batch, h_in, w_in, height, width, "float64"), x,
                    np.zeros((batch, height, ow, 2), "float64"))
        got = _run(columns_primfunc(batch, height, ow), rows, np.zeros((batch, height, ow, 2), "float32"))
    padded = np.zeros((batch, height, width))
    padded[:, :min(h_in, height), :min(w_in, width)] = x[:, :min(h_in, height), :min(w_in, width)]
    want = np.fft.rfft2(padded)
    want = np.stack([want.real, want.imag], -1).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_lengths_that_are_no_power_of_two_are_refused_as_litert_refuses_them():
    with pytest.raises(ValueError, match="width 12 is no power of two"):
        rows_primfunc(1, 1, 12, 1, 12, "float32")
    with pytest.raises(ValueError, match="height 6 is no power of two"):
        columns_primfunc(1, 6, 5)
