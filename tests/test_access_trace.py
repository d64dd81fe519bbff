"""Shifted in-place overlaps traced from TIR, checked by running the kernels over one shared buffer.

Random windowed kernels (depthwise convolution and window sums, NHWC and NCHW,
strides, dilations, padding, odd sizes, accumulating into the output or
computing each element in one store) are traced; the kernel is then compiled
twice, once with separate buffers and once with input and output declared over
one buffer, the output ``shift`` bytes below the input. The aliased run must be
bit-identical, and one element less of shift must break it (the shift is the
smallest safe one, not merely a safe one).
"""

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

from tvm_memsched.relax.analysis.access_trace import access_times, overlap_shift
from tvm_memsched.relax.analysis.inplace import kernel_inplace_pairs, kernel_inplace_shifts


def _out(size, k, s, d, pad):
    return (size + 2 * pad - (k - 1) * d - 1) // s + 1


def kernel_source(cfg, aliased=None):
    """TVMScript of a windowed kernel; ``aliased=(total, offset a, offset b)`` declares a and b over one buffer."""
    c, h, w, k, s, d, pad, nhwc, accumulate = (cfg[x] for x in ("c", "h", "w", "k", "s", "d", "pad", "nhwc",
                                                                  "accumulate"))
    ho, wo = _out(h, k, s, d, pad), _out(w, k, s, d, pad)
    ash = (1, h, w, c) if nhwc else (1, c, h, w)
    bsh = (1, ho, wo, c) if nhwc else (1, c, ho, wo)

    def at(y, x, ch):
        return f"[0, {y}, {x}, {ch}]" if nhwc else f"[0, {ch}, {y}, {x}]"

    if aliased is None:
        head = f'def f(a: T.Buffer({ash}, "float32"), b: T.Buffer({bsh}, "float32")):\n'
    else:
        total, oa, ob = aliased
        head = (f'def f(big: T.Buffer(({total},), "float32")):\n'
                f'    a = T.decl_buffer({ash}, "float32", data=big.data, elem_offset={oa})\n'
                f'    b = T.decl_buffer({bsh}, "float32", data=big.data, elem_offset={ob})\n')
    order = "y, x, ch" if nhwc else "ch, y, x"
    ext = f"{ho}, {wo}, {c}" if nhwc else f"{c}, {ho}, {wo}"

    def tap(ry, rx):
        iy, ix = f"vy * {s} + {ry} * {d} - {pad}", f"vx * {s} + {rx} * {d} - {pad}"
        cond = f"0 <= {iy} and {iy} < {h} and 0 <= {ix} and {ix} < {w}"
        weight = f"T.Cast(\"float32\", ({ry}) * {k} + ({rx}) + vc + 1)"
        return f"T.if_then_else({cond}, a{at(iy, ix, 'vc')} * {weight}, T.float32(0))"

    if accumulate:
        body = (f"    for {order}, ry, rx in T.grid({ext}, {k}, {k}):\n"
                f'        with T.sblock("b"):\n'
                f'            {"vy, vx, vc" if nhwc else "vc, vy, vx"}, vry, vrx = '
                f'T.axis.remap("SSSRR", [{order}, ry, rx])\n'
                f"            with T.init():\n"
                f"                b{at('vy', 'vx', 'vc')} = T.float32(0)\n"
                f"            b{at('vy', 'vx', 'vc')} = b{at('vy', 'vx', 'vc')} + {tap('vry', 'vrx')}\n")
    else:
        total_expr = " + ".join(tap(str(ry), str(rx)) for ry in range(k) for rx in range(k))
        body = (f"    for {order} in T.grid({ext}):\n"
                f'        with T.sblock("b"):\n'
                f'            {"vy, vx, vc" if nhwc else "vc, vy, vx"} = T.axis.remap("SSS", [{order}])\n'
                f"            b{at('vy', 'vx', 'vc')} = {total_expr}\n")
    src = "@T.prim_func(s_tir=True)\n" + head + body
    return src, ash, bsh


def _func(src):
    return tvm.script.from_source(src, extra_vars={"T": T}, s_tir=True)


def _compile(func):
    f = func.with_attr("global_symbol", "f").with_attr("tirx.noalias", False)
    return tvm.compile(tvm.IRModule({"f": f}), target="llvm")["f"]


def _run_aliased(cfg, shift_elems, x, ash, bsh):
    na, nb = int(np.prod(ash)), int(np.prod(bsh))
    oa = shift_elems
    ob = oa - shift_elems
    total = max(oa + na, ob + nb)
    src, _, _ = kernel_source(cfg, (total, oa, ob))
    big = np.zeros(total, "float32")
    big[oa:oa + na] = x.reshape(-1)
    t = tvm.runtime.tensor(big)
    _compile(_func(src))(t)
    return t.numpy()[ob:ob + nb].reshape(bsh)


def _configs(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        cfg = dict(c=int(rng.integers(1, 4)), h=int(rng.integers(3, 8)), w=int(rng.integers(3, 8)),
                   k=int(rng.choice([1, 2, 3])), s=int(rng.choice([1, 1, 2])), d=int(rng.choice([1, 1, 2])),
                   pad=int(rng.integers(0, 2)), nhwc=bool(rng.integers(0, 2)), accumulate=bool(rng.integers(0, 2)))
        if _out(cfg["h"], cfg["k"], cfg["s"], cfg["d"], cfg["pad"]) >= 1 \
                and _out(cfg["w"], cfg["k"], cfg["s"], cfg["d"], cfg["pad"]) >= 1:
            out.append(cfg)
    return out


@pytest.mark.parametrize("cfg", _configs(40, 1), ids=lambda c: "-".join(f"{k}{int(v)}" for k, v in c.items()))
def test_traced_shift_is_the_smallest_safe_overlap(cfg):
    src, ash, bsh = kernel_source(cfg)
    func = _func(src)
    times = access_times(func)
    assert times is not None
    shift = overlap_shift(times[0], times[1])
    x = np.random.default_rng(3).standard_normal(ash).astype("float32")
    ref = tvm.runtime.tensor(np.zeros(bsh, "float32"))
    _compile(func)(tvm.runtime.tensor(x), ref)
    if shift is None:          # no overlap saves anything: the output must not even touch the input
        return
    assert shift % 4 == 0
    got = _run_aliased(cfg, shift // 4, x, ash, bsh)
    assert np.array_equal(got, ref.numpy())
    if shift > 0:
        bad = _run_aliased(cfg, shift // 4 - 1, x, ash, bsh)
        assert not np.array_equal(bad, ref.numpy()), "a smaller shift was safe too: the trace is not tight"


def test_depthwise_lags_one_row_and_one_pixel():
    cfg = dict(c=2, h=6, w=5, k=3, s=1, d=1, pad=1, nhwc=True, accumulate=False)
    func = _func(kernel_source(cfg)[0])
    assert kernel_inplace_pairs(func, 1) == []                 # not same-index
    # output pixel (y, x) is written after reading rows y-1..y+1; the next pixel still needs
    # (y-1, x): the output trails by one row and one pixel of 2 channels, 4 bytes each
    assert kernel_inplace_shifts(func, 1) == [(0, 1, (5 + 1) * 2 * 4)]


def test_untraceable_kernels_are_never_shifted():
    src = kernel_source(dict(c=2, h=4, w=4, k=3, s=1, d=1, pad=1, nhwc=True, accumulate=False))[0]
    par = src.replace("for y, x, ch in T.grid", "for y, x, ch in T.grid").replace(
        "    for y, x, ch in T.grid(4, 4, 2):", "    for y in T.parallel(4):\n     for x, ch in T.grid(4, 2):")
    func = _func(par)
    assert access_times(func) is None
    assert kernel_inplace_shifts(func, 1) == []


# ------------------------------------------------------------------ bounds (the compile-time analysis)
def test_bounds_equal_the_trace_when_every_loop_is_enumerated():
    """access_spans at full enumeration gives the tracer's (oracle's) shift on 120 random kernels."""
    from tvm_memsched.relax.analysis.access_bounds import access_spans, span_shift

    for cfg in _configs(120, 7):
        func = _func(kernel_source(cfg)[0])
        t = access_times(func)
        assert span_shift(access_spans(func), 0, 1) == overlap_shift(t[0], t[1]), cfg


@pytest.mark.parametrize("budget", [1, 3, 17, 64])
def test_coarse_bounds_are_never_below_the_trace(budget):
    """Fewer steps only widen the bounds: a coarse shift is at least the exact one (so it is safe)."""
    from tvm_memsched.relax.analysis.access_bounds import access_spans, span_shift

    for cfg in _configs(40, budget):
        func = _func(kernel_source(cfg)[0])
        t = access_times(func)
        exact = overlap_shift(t[0], t[1])
        coarse = span_shift(access_spans(func, max_steps=budget), 0, 1)
        assert coarse is None or (exact is not None and coarse >= exact), cfg


def test_bounds_of_a_large_kernel_take_little_time_and_memory():
    """A depthwise convolution with 2**33 instance-element pairs: no tracing, bounded steps, the right lag."""
    import time
    import tracemalloc

    from tvm_memsched.relax.analysis.access_bounds import MAX_STEPS, access_spans, span_shift
    from tvm_memsched.relax.int8.kernels import Requant, conv2d

    c, h, w = 512, 160, 160
    f = conv2d((1, h, w, c), (1, 3, 3, c), (1, h, w, c), strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1),
               groups=1, depth_multiplier=1, in_offset=3, requant=Requant(1 << 30, -3, 0), has_bias=False)
    tracemalloc.start()
    t0 = time.perf_counter()
    spans = access_spans(f)
    shift = span_shift(spans, 0, 2)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert spans.steps <= MAX_STEPS and peak < 256 << 20 and seconds < 30
    # one row and one pixel of lag (the pixel's own window taken as read after its writes at this granularity)
    assert (w + 1) * c <= shift <= (w + 2) * c


def test_each_kernel_body_is_analysed_once(monkeypatch):
    """Repeated kernels (same body, other attributes) reuse the first analysis: access_spans runs once."""
    import tvm_memsched.relax.analysis.inplace as ip

    calls = []
    real = ip.access_spans
    monkeypatch.setattr(ip, "access_spans", lambda f, *a, **k: calls.append(1) or real(f, *a, **k))
    monkeypatch.setattr(ip, "_SPANS", {})
    monkeypatch.setattr(ip, "_SHIFTS", {})
    cfg = dict(c=2, h=5, w=6, k=3, s=1, d=1, pad=1, nhwc=True, accumulate=False)
    src, _, _ = kernel_source(cfg)
    first = ip._shifts_cached(_func(src), 1, ())
    again = ip._shifts_cached(_func(src).with_attr("global_symbol", "another_name"), 1, ())
    assert first == again and first and len(calls) == 1          # the shifts, found once
    cfg["k"] = 1                                  # a different body is analysed anew
    ip._shifts_cached(_func(kernel_source(cfg)[0]), 1, ())
    assert len(calls) == 2
