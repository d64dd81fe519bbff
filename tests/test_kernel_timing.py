"""Kernel timing for the passes that trade speed (relax/analysis/kernel_timing.py)."""

import tvm
from tvm.script import tirx as T

from tvm_memsched.relax.analysis import kernel_timing as kt

LLVM = tvm.target.Target("llvm")


@T.prim_func(s_tir=True)
def small(a: T.Buffer((256,), "float32"), b: T.Buffer((256,), "float32")):
    for i in range(256):
        b[i] = a[i] * T.float32(2)


@T.prim_func(s_tir=True)
def large(a: T.Buffer((256,), "float32"), b: T.Buffer((256,), "float32")):
    for i, j in T.grid(256, 256):
        b[i] = b[i] + a[j] * T.float32(2)


@T.prim_func(s_tir=True)
def symbolic(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float32")
    B = T.match_buffer(b, (n,), "float32")
    for i in range(n):
        B[i] = A[i]


def test_more_work_takes_longer_and_bodies_are_timed_once(monkeypatch):
    builds = []
    real = tvm.tirx.build
    monkeypatch.setattr(tvm.tirx, "build", lambda m, **kw: builds.append(len(m.functions)) or real(m, **kw))
    kt._CACHE.clear()
    t_small, t_large, t_again = kt.kernel_seconds([small, large, small], LLVM, repeat=3, min_seconds=0.002)
    assert t_small == t_again and 0 < 20 * t_small < t_large       # 256x the multiply-adds
    assert sum(builds) == 2                                          # each body built once
    assert kt.kernel_seconds([large.with_attr("global_symbol", "x")], LLVM)[0] is not None
    assert kt.kernel_seconds([small], LLVM) == [t_small] and sum(builds) == 3   # cached


def test_untimeable_kernels_and_targets_give_none():
    assert kt.kernel_seconds([symbolic], LLVM) == [None]
    assert kt.kernel_seconds([small], tvm.target.Target("c")) == [None]
    assert not kt.can_time(tvm.target.Target({"kind": "llvm", "mtriple": "thumbv7em-none-eabi"}))
