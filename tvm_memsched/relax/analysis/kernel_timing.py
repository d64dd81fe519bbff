"""How long a TIR kernel takes on this machine: build it alone and time it, for passes that trade speed.

:func:`kernel_seconds` builds kernels for a host target in one module, runs each on
random tensors of its buffers' shapes (zeros for integer buffers, so an index read
from an input stays in bounds) and returns the fastest of several repeats, which
are interleaved kernel by kernel so a machine that slows down in between slows
every candidate alike. Results are cached per kernel body (structural hash) and
target for the life of the process, so a kernel that several call sites or
compiles share is timed once. :func:`can_time` says whether a target's code runs
here (LLVM for this machine's triple); kernels for other targets, or with a
symbolic shape, are not timed (``None``).

Example
-------
>>> import tvm
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def add_one(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
...     for i in range(64):
...         b[i] = a[i] + T.float32(1)
>>> llvm = tvm.target.Target("llvm")
>>> can_time(llvm), can_time(tvm.target.Target("c"))
(True, False)
>>> (t,) = kernel_seconds([add_one], llvm, repeat=2, min_seconds=0.001)
>>> 0 < t < 0.01
True
"""

from __future__ import annotations

import time

import numpy as np
import tvm
import tvm_ffi
from tvm.s_tir import SBlock

from ..ir import build_in_parts
from .workspace import walk_stmts

__all__ = ["can_time", "kernel_seconds", "kernel_work"]

_CACHE: dict = {}


def can_time(target) -> bool:
    """True when code built for ``target`` runs on this machine (LLVM for the host's triple)."""
    if target is None or target.kind.name != "llvm":
        return False
    triple = str(target.attrs.get("mtriple", "") or "")
    return triple in ("", tvm.target.codegen.llvm_get_system_triple())


def kernel_work(func) -> int | None:
    """Points of the largest block iteration domain in ``func`` (a convolution's multiply-accumulates); None
    when a block's extent is not static.

    >>> from tvm.script import tirx as T
    >>> @T.prim_func(s_tir=True)
    ... def mm(a: T.Buffer((8, 16), "float32"), b: T.Buffer((16, 4), "float32"), c: T.Buffer((8, 4), "float32")):
    ...     for i, j, k in T.grid(8, 4, 16):
    ...         with T.sblock("c"):
    ...             vi, vj, vk = T.axis.remap("SSR", [i, j, k])
    ...             with T.init():
    ...                 c[vi, vj] = T.float32(0)
    ...             c[vi, vj] = c[vi, vj] + a[vi, vk] * b[vk, vj]
    >>> kernel_work(mm)
    512
    """
    sizes = []

    def visit(s):
        if isinstance(s, SBlock) and s.iter_vars:
            n = 1
            for iv in s.iter_vars:
                if not isinstance(iv.dom.extent, tvm.tirx.IntImm):
                    sizes.append(None)
                    return
                n *= int(iv.dom.extent)
            sizes.append(n)

    walk_stmts(func.body, visit)
    if None in sizes:
        return None
    return max(sizes, default=0)


def _arguments(func, dev, rng):
    """Random tensors for ``func``'s buffer parameters, or None when a parameter is not a static buffer."""
    args = []
    for p in func.params:
        dims = getattr(p, "shape", None)
        if dims is None or not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
            return None
        shape = tuple(int(d) for d in dims)
        dtype = str(p.dtype)
        if "float" in dtype:
            data = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            data = np.zeros(shape, dtype)
        args.append(tvm.runtime.tensor(data, dev))
    return args


def _build(kernels: dict, target) -> dict:
    """``{name: callable}``: the kernels built for ``target`` (:func:`~tvm_memsched.relax.ir.build_in_parts`)."""
    return {n: lib[n] for names, lib in build_in_parts(kernels, target) for n in names}


def _seconds(call, args, runs: int) -> float:
    t0 = time.perf_counter()
    for _ in range(runs):
        call(*args)
    return (time.perf_counter() - t0) / runs


def kernel_seconds(funcs, target, repeat: int = 3, min_seconds: float = 0.002,
                   enough_seconds: float = 0.02) -> list:
    """Seconds per run of each PrimFunc of ``funcs`` on this machine (None where it cannot be timed).

    Parameters
    ----------
    funcs : list of PrimFunc
        The kernels (any attributes; each is built under a name of its own).
    target : Target
        A target :func:`can_time` accepts; otherwise every entry is None.
    repeat : int
        Rounds (the first is one run of each kernel); each kernel's time is its fastest round.
    min_seconds : float
        Each round of a kernel runs it often enough to last at least this long (at most 1,000 runs).
    enough_seconds : float
        A kernel that has run this long in all is not run in further rounds (a long kernel is timed once).
    """
    if not can_time(target):
        return [None] * len(funcs)
    key = [(tvm_ffi.structural_hash(f), str(target)) for f in funcs]
    todo = {}
    for k, f in zip(key, funcs):
        if k not in _CACHE and k not in todo:
            todo[k] = f
    if todo:
        dev = tvm.cpu(0)
        rng = np.random.default_rng(0)
        names, args, kernels = {}, {}, {}
        for i, (k, f) in enumerate(todo.items()):
            a = _arguments(f, dev, rng)
            if a is None:
                _CACHE[k] = None
                continue
            names[k] = f"tms_timed_{i}"
            args[k] = a
            kernels[names[k]] = f.with_attr("global_symbol", names[k])
        if kernels:
            calls = _build(kernels, target)
            runs, best, spent = {}, {}, {}
            for k, n in names.items():          # a first run, which also tells how many runs fill a round
                calls[k] = calls.pop(n)
                best[k] = spent[k] = _seconds(calls[k], args[k], 1)
                runs[k] = max(1, min(1000, int(min_seconds / max(best[k], 1e-9)) + 1))
            for _ in range(max(0, repeat - 1)):
                for k in names:
                    if spent[k] < enough_seconds:
                        t = _seconds(calls[k], args[k], runs[k])
                        best[k], spent[k] = min(best[k], t), spent[k] + t * runs[k]
            _CACHE.update(best)
    return [_CACHE[k] for k in key]
