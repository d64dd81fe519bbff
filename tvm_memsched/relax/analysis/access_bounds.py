"""How far a kernel's output may overlap its input, from interval bounds of its TIR loop nest, in bounded memory.

:mod:`.access_trace` numbers every block instance and every element it
touches: exact, but its arrays grow with the kernel (a convolution of a large
network has billions of instance-element pairs). This module gets the same
kind of answer from **bounds**: the loop nest is cut into at most
:data:`MAX_STEPS` *steps* (outer loops are enumerated while the number of their
iterations stays within the budget; every loop inside is summarised), and for
each step it computes, by interval arithmetic over the summarised loop
variables (``+ - * floordiv floormod min max`` of affine indices, guarded
padding clipped to the buffer), the lowest element each param reads and the
highest it writes. A step is one point in time: its writes are taken to happen
before its reads, except where it is a single store-only block instance, whose
reads come first. The overlap then follows as in
:func:`~tvm_memsched.relax.analysis.access_trace.overlap_shift`: the output, placed
``shift`` bytes below the input, must at every step have written only below
the lowest input byte any later step reads.

Every answer is safe (bounds only widen, coarser steps only add constraints);
with every loop enumerated it is the tracer's answer for kernels whose output
advances monotonically (all of them in practice). Memory and time are
``O(steps)`` per block, independent of tensor sizes.

Example
-------
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def blur(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
...     for i in range(8):
...         with T.sblock("b"):
...             v = T.axis.spatial(8, i)
...             b[v] = a[v] + T.if_then_else(v > 0, a[v - 1], T.float32(0))
>>> s = access_spans(blur)
>>> span_shift(s, 0, 1)            # b[i] must stay one element behind a[i]
4
>>> span_shift(access_spans(blur, max_steps=1), 0, 1) is None  # one step: b written before a is read
True
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import tirx
from tvm.s_tir import SBlock, SBlockRealize

from .workspace import walk_stmts

__all__ = ["MAX_STEPS", "Spans", "access_spans", "span_shift"]

#: at most this many steps (enumerated iterations of outer loops) per loop nest
MAX_STEPS = 1 << 15

#: ``tirx.ForKind.VECTORIZED``
_VECTORIZED = 2
_NONE_READ = np.iinfo(np.int64).max
_NONE_WRITTEN = -1


class _Unbounded(Exception):
    pass


class Spans:
    """Per-step access bounds of a kernel's params.

    ``rmin[k][t]``: the lowest element of param ``k`` read at step ``t`` (int64 max: none);
    ``wmax[k][t]``: the highest written (-1: none); ``itemsize[k]``: bytes per element;
    ``size[k]``: elements; ``ordered[t]``: step ``t`` reads everything before it writes.
    """

    def __init__(self, steps: int, params: dict):
        self.steps = steps
        self.rmin = {k: np.full(steps, _NONE_READ, np.int64) for k in params}
        self.wmax = {k: np.full(steps, _NONE_WRITTEN, np.int64) for k in params}
        self.itemsize = {k: isz for k, (_, _, isz) in params.items()}
        self.size = {k: math.prod(shape) for k, (shape, _, _) in params.items()}
        self.ordered = np.zeros(steps, bool)


# ------------------------------------------------------------------ interval arithmetic
def _lo_hi(v):
    return v if isinstance(v, tuple) else (v, v)


def _ival(expr, env: dict):
    """``(lo, hi)`` bounds of an integer index expression: ints or int64 arrays over the enumerated steps."""
    if isinstance(expr, tirx.IntImm):
        return int(expr), int(expr)
    if isinstance(expr, tvm.ir.Var):
        try:
            return env[expr.__hash__()]
        except KeyError:
            raise _Unbounded(f"free variable {expr}") from None
    name = type(expr).__name__
    if name == "Cast":
        return _ival(expr.value, env)
    if name in ("Add", "Sub", "Mul", "Min", "Max", "FloorDiv", "FloorMod"):
        (al, ah), (bl, bh) = _ival(expr.a, env), _ival(expr.b, env)
        if name == "Add":
            return al + bl, ah + bh
        if name == "Sub":
            return al - bh, ah - bl
        if name == "Min":
            return np.minimum(al, bl), np.minimum(ah, bh)
        if name == "Max":
            return np.maximum(al, bl), np.maximum(ah, bh)
        if name == "Mul":
            cands = [al * bl, al * bh, ah * bl, ah * bh]
            return np.minimum.reduce(np.broadcast_arrays(*cands)), np.maximum.reduce(np.broadcast_arrays(*cands))
        if not (isinstance(bl, int) and bl == bh and bl > 0):
            raise _Unbounded(f"{name} by a non-constant")
        c = bl
        if name == "FloorDiv":
            return np.floor_divide(al, c), np.floor_divide(ah, c)
        same = np.floor_divide(al, c) == np.floor_divide(ah, c)       # no wrap inside the interval
        return np.where(same, np.mod(al, c), 0), np.where(same, np.mod(ah, c), c - 1)
    raise _Unbounded(f"index expression {name}")


def _store_only(block) -> bool:
    return block.init is None and isinstance(block.body, tirx.BufferStore)


# ------------------------------------------------------------------ the walk
class _Bounder:
    def __init__(self, func, max_steps: int):
        self.max_steps = max_steps
        self.params = {}
        for k, p in enumerate(func.params):
            if getattr(p, "shape", None) is None or getattr(p, "dtype", None) is None:
                continue
            strides = getattr(p, "strides", None) or []
            off = getattr(p, "elem_offset", 0)
            if len(strides) or not (isinstance(off, (int, tirx.IntImm)) and int(off) == 0):
                raise _Unbounded(f"param {p.name} is not a compact buffer")
            shape = [self._const(s) for s in p.shape]
            self.params[p.__hash__()] = (k, shape, p)
        self.spans = None

    @staticmethod
    def _const(e) -> int:
        if not isinstance(e, tirx.IntImm):
            raise _Unbounded("dynamic shape")
        return int(e)

    def expand(self, outer: int, n: int) -> bool:
        return outer * n <= self.max_steps

    def slots(self, stmt, outer: int) -> int:
        """Steps one execution of ``stmt`` takes when ``outer`` iterations around it are enumerated."""
        if isinstance(stmt, SBlockRealize):
            return 1
        if isinstance(stmt, tirx.For):
            n = self._const(stmt.extent)
            if int(stmt.kind) == _VECTORIZED:             # every lane in one step
                return 1
            return n * self.slots(stmt.body, outer * n) if self.expand(outer, n) else 1
        if isinstance(stmt, tirx.SeqStmt):
            return sum(self.slots(s, outer) for s in stmt.seq)
        if isinstance(stmt, tirx.IfThenElse):
            return self.slots(stmt.then_case, outer) + (self.slots(stmt.else_case, outer) if stmt.else_case else 0)
        if isinstance(stmt, (tirx.BufferStore, tirx.Evaluate)):
            return 0
        body = getattr(stmt, "body", None)
        if isinstance(body, tirx.Stmt):
            return self.slots(body, outer)
        raise _Unbounded(f"statement {type(stmt).__name__}")

    def walk(self, stmt, env: dict, base, outer: int, enumerating: bool) -> None:
        if isinstance(stmt, SBlockRealize):
            self.block(stmt, env, base, enumerating)
        elif isinstance(stmt, tirx.For):
            if int(stmt.kind) not in (0, 3, _VECTORIZED):
                raise _Unbounded(f"{tirx.ForKind(int(stmt.kind)).name.lower()} loop")
            n, lo = self._const(stmt.extent), self._const(stmt.min)
            env2 = dict(env)
            if int(stmt.kind) == _VECTORIZED:     # one step: a single store's lanes all read before any writes
                env2[stmt.loop_var.__hash__()] = (lo, lo + n - 1)
                single = enumerating and isinstance(stmt.body, SBlockRealize)
                if single:
                    self.block(stmt.body, env2, base, True)
                else:
                    self.walk(stmt.body, env2, base, outer, False)
            elif enumerating and self.expand(outer, n):
                step = self.slots(stmt.body, outer * n)
                axis = np.arange(lo, lo + n, dtype=np.int64).reshape((1,) * base.ndim + (n,))
                for key, v in env.items():
                    env2[key] = tuple(np.expand_dims(x, -1) if isinstance(x, np.ndarray) else x for x in v)
                env2[stmt.loop_var.__hash__()] = (axis, axis)
                self.walk(stmt.body, env2, np.expand_dims(base, -1) + (axis - lo) * step, outer * n, True)
            else:                                 # summarised: the whole loop is one step
                env2[stmt.loop_var.__hash__()] = (lo, lo + n - 1)
                self.walk(stmt.body, env2, base, outer, False)
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                self.walk(s, env, base, outer, enumerating)
                if enumerating:
                    base = base + self.slots(s, outer)
        elif isinstance(stmt, tirx.IfThenElse):
            self.walk(stmt.then_case, env, base, outer, enumerating)
            if stmt.else_case:
                off = self.slots(stmt.then_case, outer) if enumerating else 0
                self.walk(stmt.else_case, env, base + off, outer, enumerating)
        elif isinstance(stmt, (tirx.BufferStore, tirx.Evaluate)):
            if isinstance(stmt, tirx.BufferStore) and stmt.buffer.__hash__() in self.params:
                raise _Unbounded("param store outside a block")
        elif isinstance(stmt, tirx.LetStmt):
            env2 = dict(env)
            env2[stmt.var.__hash__()] = _ival(stmt.value, env)
            self.walk(stmt.body, env2, base, outer, enumerating)
        else:
            body = getattr(stmt, "body", None)
            if not isinstance(body, tirx.Stmt):
                raise _Unbounded(f"statement {type(stmt).__name__}")
            self.walk(body, env, base, outer, enumerating)

    def block(self, realize, env: dict, base, enumerating: bool) -> None:
        block = realize.block
        inner = []
        walk_stmts(block.body, lambda x: inner.append(x) if isinstance(x, SBlock) else None)
        if inner:
            raise _Unbounded("nested blocks")
        benv = dict(env)
        for iv, val in zip(block.iter_vars, realize.iter_values):
            benv[iv.var.__hash__()] = _ival(val, env)
        steps = base.reshape(-1)
        sp = self.spans
        if enumerating and _store_only(block):
            sp.ordered[steps] = True
        for regions, is_write in ((block.reads, False), (block.writes, True)):
            for r in regions:
                src = getattr(r, "buffer", None) or r.source
                k, bshape, pbuf = self.params.get(src.__hash__(), (None, None, None))
                if pbuf is None or not src.same_as(pbuf):
                    continue
                lo_flat, hi_flat, valid = self.region(r, benv, bshape, base.shape)
                if is_write:
                    np.maximum.at(sp.wmax[k], steps[valid], hi_flat[valid])
                else:
                    np.minimum.at(sp.rmin[k], steps[valid], lo_flat[valid])

    def region(self, r, env, bshape, shape):
        """Lowest and highest flat element of region ``r`` per step, and where any of it is inside the buffer."""
        lo_flat = np.zeros(shape, np.int64)
        hi_flat = np.zeros(shape, np.int64)
        valid = np.ones(shape, bool)
        for x, s in zip(r.region, bshape):
            lo, hi = _ival(x.min, env)
            _, ext_hi = _ival(x.extent, env)
            hi = hi + ext_hi - 1
            lo_c = np.clip(np.broadcast_to(lo, shape), 0, s - 1)
            hi_c = np.clip(np.broadcast_to(hi, shape), 0, s - 1)
            valid &= (np.broadcast_to(hi, shape) >= 0) & (np.broadcast_to(lo, shape) < s)
            lo_flat = lo_flat * s + lo_c
            hi_flat = hi_flat * s + hi_c
        return lo_flat.reshape(-1), hi_flat.reshape(-1), valid.reshape(-1)


def access_spans(func, max_steps: int = MAX_STEPS) -> Spans | None:
    """The per-step access bounds of a PrimFunc (see the module docstring), or None when it cannot be bounded
    (dynamic shapes, parallel loops, nested blocks, other index expressions). A vectorised loop is one step:
    over a single store-only block, every lane reads before any lane writes (a vector load, then a vector
    store); over anything else, writes are taken to come first."""
    if not isinstance(func, tirx.PrimFunc):
        return None
    try:
        b = _Bounder(func, max_steps)
        body = func.body
        if isinstance(body, SBlockRealize):
            if body.block.init is not None:
                return None
            body = body.block.body
        steps = b.slots(body, 1)
        b.spans = Spans(max(1, steps), {k: (shape, p, max(1, tvm.runtime.DataType(str(p.dtype)).bits // 8))
                                          for k, shape, p in b.params.values()})
        b.walk(body, {}, np.zeros((), dtype=np.int64), 1, True)
    except (_Unbounded, ValueError, TypeError, AttributeError, IndexError, RuntimeError):
        return None
    return b.spans


def span_shift(spans: Spans, i: int, o: int) -> int | None:
    """Bytes output param ``o`` must start below input param ``i`` to be written over it; None if that saves
    nothing (or either is not a param the bounds cover)."""
    if i not in spans.rmin or o not in spans.wmax:
        return None
    isz, osz = spans.itemsize[i], spans.itemsize[o]
    wmax = spans.wmax[o]
    if not (wmax >= 0).any():
        return None
    written = np.maximum.accumulate(np.where(wmax >= 0, (wmax + 1) * osz, 0))
    big = np.int64(1) << 60
    rmin = spans.rmin[i]
    read = np.where(rmin != _NONE_READ, rmin * isz, big)
    at_or_after = np.minimum.accumulate(read[::-1])[::-1]
    after = np.append(at_or_after[1:], big)
    lowest = np.where(spans.ordered, after, at_or_after)
    need = np.where(written > 0, written - np.minimum(lowest, big), 0)
    shift = max(0, int(need.max()))
    if shift >= spans.size[o] * osz:
        return None
    return shift
