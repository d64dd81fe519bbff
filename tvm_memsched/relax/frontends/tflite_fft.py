"""TFLite ``RFFT2D`` as LiteRT computes it: in double precision, in compact loops.

LiteRT's kernel copies each ``[fft_height, fft_width]`` slice of the float input into doubles (zero-padding or
cutting it to ``fft_length``), runs Ooura's ``rdft2d`` and rounds the ``fft_width / 2 + 1`` bins of every row
to ``complex<float>``. TVM's converter computes in float32 and, for power-of-two sizes, writes every
butterfly of every stage out as its own statements: BirdNET's spectrogram (511 frames of 2048 samples) became
a 7.9 MB kernel that LLVM did not finish compiling in half an hour.

Here the transform is two kernels, in float64: :func:`rows_primfunc` takes every real row to its
``W / 2 + 1`` complex bins (an iterative radix-2 FFT: a bit-reversed load, then ``log2 W`` stages of ``W / 2``
butterflies as loops over a twiddle table computed once per call), and, when ``fft_height > 1``,
:func:`columns_primfunc` transforms each kept bin along the height the same way (complex input). Both
lengths are powers of two, as LiteRT requires (its ``fft2d`` library handles no others). The result
differs from LiteRT's by the rounding of a double computed in another order: the float32 outputs agree to
about one unit in the last place. Complex values are pairs in a trailing axis of 2, as TVM's frontend writes
``COMPLEX64``.

Example
-------
>>> f = rows_primfunc(2, 1, 8, 1, 8, "float32")
>>> [tuple(int(d) for d in p.shape) for p in f.params]
[(2, 1, 8), (2, 1, 5, 2)]
"""

from __future__ import annotations

import math

__all__ = ["rows_primfunc", "columns_primfunc", "is_power_of_two"]

_F32, _F64 = "float32", "float64"          # (names, not strings, in the kernels' annotations)


def is_power_of_two(n: int) -> bool:
    """Whether ``n`` is a positive power of two.

    >>> is_power_of_two(2048), is_power_of_two(12)
    (True, False)
    """
    return n > 0 and n & (n - 1) == 0


def _fft_macros(T, n: int):
    """TVMScript macros of an ``n``-point radix-2 FFT (``n`` a power of two): the twiddle table
    ``tw[k] = exp(-2 pi i k / n)`` (k < n / 2), the bit reversal of an index into ``rev[0]``, and the
    ``log2 n`` in-place butterfly stages over ``re`` / ``im`` (``v``: four float64 locals)."""
    bits, half = int(math.log2(n)), max(n // 2, 1)
    two_pi = 2.0 * math.pi

    @T.macro
    def twiddles(tw):
        for k in range(half):
            with T.sblock("twiddle"):
                vk = T.axis.spatial(half, k)
                tw[vk, 0] = T.cos(T.float64(-two_pi) * T.Cast("float64", vk) / T.float64(n))
                tw[vk, 1] = T.sin(T.float64(-two_pi) * T.Cast("float64", vk) / T.float64(n))

    @T.macro
    def bit_reverse(i, rev):
        rev[0] = 0
        for t in range(bits):
            rev[0] = rev[0] | (T.bitwise_and(T.shift_right(i, t), 1) << (bits - 1 - t))

    @T.macro
    def stages(re, im, tw, v):
        for s in range(bits):
            for p in range(n // 2):
                k = T.bitwise_and(p, T.shift_left(1, s) - 1)
                a = T.shift_left(T.shift_right(p, s), s + 1) + k
                c = a + T.shift_left(1, s)
                wi = T.shift_left(k, bits - 1 - s)
                v[0] = re[c] * tw[wi, 0] - im[c] * tw[wi, 1]
                v[1] = re[c] * tw[wi, 1] + im[c] * tw[wi, 0]
                v[2] = re[a]
                v[3] = im[a]
                re[a] = v[2] + v[0]
                im[a] = v[3] + v[1]
                re[c] = v[2] - v[0]
                im[c] = v[3] - v[1]
    return twiddles, bit_reverse, stages


def rows_primfunc(batch: int, h_in: int, w_in: int, height: int, width: int, out_dtype: str):
    """Kernel ``data[batch, h_in, w_in] (float32) -> out[batch, height, width // 2 + 1, 2] (out_dtype)``: the
    real FFT of each row of the input zero-padded (or cut) to ``[height, width]`` (powers of two), in float64."""
    from tvm.script.parser import tirx as T

    ow = width // 2 + 1
    hv, wv = min(h_in, height), min(w_in, width)
    if not is_power_of_two(width):
        raise ValueError(f"RFFT2D width {width} is no power of two")
    half_w = max(width // 2, 1)
    twiddles, bit_reverse, stages = _fft_macros(T, width)

    @T.prim_func(private=True, s_tir=True, check_well_formed=False)
    def fft_rows(data: T.Buffer((batch, h_in, w_in), _F32),
                 out: T.Buffer((batch, height, ow, 2), out_dtype)):
        tw = T.alloc_buffer((half_w, 2), "float64")
        twiddles(tw)
        for b, y in T.grid(batch, height):
            with T.sblock("fft_row"):
                vb, vy = T.axis.remap("SS", [b, y])
                T.reads(data[vb, 0:h_in, 0:w_in], tw[0:half_w, 0:2])
                T.writes(out[vb, vy, 0:ow, 0:2])
                re = T.alloc_buffer((width,), "float64")
                im = T.alloc_buffer((width,), "float64")
                rev = T.alloc_buffer((1,), "int32", scope="local")
                v = T.alloc_buffer((4,), "float64", scope="local")      # a butterfly's operands
                for x in range(width):                       # bit-reversed load, zero-padded
                    bit_reverse(x, rev)
                    re[rev[0]] = T.if_then_else(T.And(vy < hv, x < wv),
                                                T.Cast("float64", data[vb, T.min(vy, hv - 1), T.min(x, wv - 1)]),
                                                T.float64(0))
                    im[rev[0]] = T.float64(0)
                stages(re, im, tw, v)
                for x in range(ow):
                    out[vb, vy, x, 0] = T.Cast(out_dtype, re[x])
                    out[vb, vy, x, 1] = T.Cast(out_dtype, im[x])
    return fft_rows



def columns_primfunc(batch: int, height: int, ow: int):
    """Kernel ``x[batch, height, ow, 2] (float64) -> out[batch, height, ow, 2] (float32)``: the complex FFT of
    every column (along the height, a power of two), in float64.

    >>> f = columns_primfunc(1, 4, 3)
    >>> [str(p.dtype) for p in f.params]
    ['float64', 'float32']
    """
    from tvm.script.parser import tirx as T

    if not is_power_of_two(height):
        raise ValueError(f"RFFT2D height {height} is no power of two")
    half_h = max(height // 2, 1)
    twiddles, bit_reverse, stages = _fft_macros(T, height)

    @T.prim_func(private=True, s_tir=True, check_well_formed=False)
    def fft_columns(x: T.Buffer((batch, height, ow, 2), _F64),
                    out: T.Buffer((batch, height, ow, 2), _F32)):
        tw = T.alloc_buffer((half_h, 2), "float64")
        twiddles(tw)
        for b, col in T.grid(batch, ow):
            with T.sblock("fft_column"):
                vb, vc = T.axis.remap("SS", [b, col])
                T.reads(x[vb, 0:height, vc, 0:2], tw[0:half_h, 0:2])
                T.writes(out[vb, 0:height, vc, 0:2])
                re = T.alloc_buffer((height,), "float64")
                im = T.alloc_buffer((height,), "float64")
                rev = T.alloc_buffer((1,), "int32", scope="local")
                v = T.alloc_buffer((4,), "float64", scope="local")      # a butterfly's operands
                for y in range(height):
                    bit_reverse(y, rev)
                    re[rev[0]] = x[vb, y, vc, 0]
                    im[rev[0]] = x[vb, y, vc, 1]
                stages(re, im, tw, v)
                for y in range(height):
                    out[vb, y, vc, 0] = T.Cast("float32", re[y])
                    out[vb, y, vc, 1] = T.Cast("float32", im[y])
    return fft_columns

