"""When a kernel reads and writes each element of its params, traced from its TIR loop nest.

A kernel with static shapes and serial loops runs its blocks in one fixed
order. :func:`access_times` numbers every block instance in that order and
records, per element of each param, the **last read** and the **first write**
(from the blocks' ``reads`` / ``writes`` regions, which over-approximate what
the body touches, so the times are conservative both ways). Reads and writes
of one instance are ordered: a block whose body is a single store without an
``init`` reads before it writes; any other block is taken to write first.

:func:`overlap_shift` turns the times of an input and an output into the
smallest safe in-place overlap: the number of bytes the output must start
*below* the input so that every output element, when first written, lands only
on input bytes no later read needs. This is the *windowed* in-place pattern of
depthwise convolutions and pooling (a row and a pixel of lag), proven from the
kernel itself rather than from knowledge of the operator.

Example
-------
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def shift_left(a: T.Buffer((8,), "float32"), b: T.Buffer((7,), "float32")):
...     for i in range(7):
...         with T.sblock("b"):
...             v = T.axis.spatial(7, i)
...             b[v] = a[v + 1] - a[v]
>>> t = access_times(shift_left)
>>> overlap_shift(t[0], t[1])   # b[i] may overwrite a[i]: a[i] is read last by b[i] itself
0
"""

from __future__ import annotations

import math

import numpy as np
import tvm
from tvm import tirx
from tvm.s_tir import SBlock, SBlockRealize

from .workspace import walk_stmts

__all__ = ["AccessTimes", "access_times", "overlap_shift", "MAX_INSTANCES"]

#: kernels with more block instances (times region elements) than this are not traced
MAX_INSTANCES = 1 << 24

#: ``tirx.ForKind.VECTORIZED``: the lanes of a vectorised loop run each statement together (all of a
#: block's reads in one slot, then its writes), so its iterations share their time slots
_VECTORIZED = 2
_NEVER_READ = -1
_NEVER_WRITTEN = np.iinfo(np.int64).max


class _Untraceable(Exception):
    pass


class AccessTimes:
    """Per-element access times of one param buffer (row-major element index).

    ``last_read[i]``: the last time element ``i`` is read (-1: never);
    ``first_write[i]``: the first time it is written (int64 max: never);
    ``itemsize``: bytes per element.
    """

    def __init__(self, size: int, itemsize: int):
        self.itemsize = itemsize
        self.last_read = np.full(size, _NEVER_READ, dtype=np.int64)
        self.first_write = np.full(size, _NEVER_WRITTEN, dtype=np.int64)


_BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide,
    "FloorMod": np.mod, "Min": np.minimum, "Max": np.maximum,
}


def _eval(expr, env: dict):
    """``expr`` (an integer index expression) over the loop domain: an int64 array or an int."""
    if isinstance(expr, tirx.IntImm):
        return int(expr)
    if isinstance(expr, tvm.ir.Var):
        try:
            return env[expr.__hash__()]
        except KeyError:
            raise _Untraceable(f"free variable {expr}") from None
    name = type(expr).__name__
    if name in _BINARY:
        return _BINARY[name](_eval(expr.a, env), _eval(expr.b, env))
    if name == "Cast":
        return _eval(expr.value, env)
    raise _Untraceable(f"index expression {name}")


def _store_only(block) -> bool:
    """Whether every instance of ``block`` reads all it reads before it writes."""
    return block.init is None and isinstance(block.body, tirx.BufferStore)


class _Tracer:
    def __init__(self, func):
        self.func = func
        self.params = {}
        for k, p in enumerate(func.params):
            if getattr(p, "shape", None) is None or getattr(p, "dtype", None) is None:
                continue                               # a scalar param
            strides = getattr(p, "strides", None) or []
            off = getattr(p, "elem_offset", 0)
            if len(strides) or not (isinstance(off, (int, tirx.IntImm)) and int(off) == 0):
                raise _Untraceable(f"param {p.name} is not a compact buffer")
            shape = [self._const(s) for s in p.shape]
            self.params[p.__hash__()] = (k, shape, p)
        self.times = {k: AccessTimes(math.prod(shape), max(1, tvm.runtime.DataType(str(buf.dtype)).bits // 8))
                      for k, shape, buf in self.params.values()}
        self.instances = 0

    @staticmethod
    def _const(e) -> int:
        if not isinstance(e, tirx.IntImm):
            raise _Untraceable("dynamic shape")
        return int(e)

    def slots(self, stmt) -> int:
        """Time slots one execution of ``stmt`` takes (one per block instance)."""
        if isinstance(stmt, SBlockRealize):
            return 1
        if isinstance(stmt, tirx.For):
            if int(stmt.kind) == _VECTORIZED:          # the lanes share their time slots
                return self.slots(stmt.body)
            return self._const(stmt.extent) * self.slots(stmt.body)
        if isinstance(stmt, tirx.SeqStmt):
            return sum(self.slots(s) for s in stmt.seq)
        if isinstance(stmt, tirx.IfThenElse):       # both branches, one after the other (conservative)
            return self.slots(stmt.then_case) + (self.slots(stmt.else_case) if stmt.else_case else 0)
        if isinstance(stmt, (tirx.BufferStore, tirx.Evaluate)):
            return 0
        body = getattr(stmt, "body", None)
        if isinstance(body, tirx.Stmt):
            return self.slots(body)
        raise _Untraceable(f"statement {type(stmt).__name__}")

    def walk(self, stmt, env: dict, base, shape: tuple) -> None:
        """Trace ``stmt`` starting at time ``base`` (an array over the loop domain ``shape``)."""
        if isinstance(stmt, SBlockRealize):
            self.block(stmt, env, base, shape)
        elif isinstance(stmt, tirx.For):
            if int(stmt.kind) not in (0, 3, _VECTORIZED):   # serial or unrolled: program order is execution
                raise _Untraceable(f"{tirx.ForKind(int(stmt.kind)).name.lower()} loop")   # order
            n, lo = self._const(stmt.extent), self._const(stmt.min)
            step = 0 if int(stmt.kind) == _VECTORIZED else self.slots(stmt.body)
            axis = np.arange(lo, lo + n, dtype=np.int64).reshape((1,) * len(shape) + (n,))
            env2 = {k: (np.expand_dims(v, -1) if isinstance(v, np.ndarray) else v) for k, v in env.items()}
            env2[stmt.loop_var.__hash__()] = axis
            base2 = np.expand_dims(base, -1) + (axis - lo) * step
            self.walk(stmt.body, env2, base2, shape + (n,))
        elif isinstance(stmt, tirx.SeqStmt):
            for s in stmt.seq:
                self.walk(s, env, base, shape)
                base = base + self.slots(s)
        elif isinstance(stmt, tirx.IfThenElse):
            self.walk(stmt.then_case, env, base, shape)
            if stmt.else_case:
                self.walk(stmt.else_case, env, base + self.slots(stmt.then_case), shape)
        elif isinstance(stmt, (tirx.BufferStore, tirx.Evaluate)):
            self.direct(stmt)
        elif isinstance(stmt, tirx.LetStmt):
            env2 = dict(env)
            env2[stmt.var.__hash__()] = _eval(stmt.value, env)
            self.walk(stmt.body, env2, base, shape)
        else:
            body = getattr(stmt, "body", None)
            if not isinstance(body, tirx.Stmt):
                raise _Untraceable(f"statement {type(stmt).__name__}")
            self.walk(body, env, base, shape)

    def direct(self, stmt) -> None:
        """A store outside any block: only allowed when it touches no param."""
        if isinstance(stmt, tirx.BufferStore) and stmt.buffer.__hash__() in self.params:
            raise _Untraceable("param store outside a block")

    def block(self, realize, env: dict, base, shape: tuple) -> None:
        block = realize.block
        if block.init is not None and not isinstance(block.init, (tirx.BufferStore, tirx.SeqStmt)):
            raise _Untraceable("block init")
        inner = []
        _collect_blocks(block.body, inner)
        if inner:
            raise _Untraceable("nested blocks")
        benv = dict(env)
        for iv, val in zip(block.iter_vars, realize.iter_values):
            benv[iv.var.__hash__()] = _eval(val, env)
        n = int(np.prod(shape)) if shape else 1
        times = np.broadcast_to(base, shape).reshape(-1) * 2
        read_t = times
        write_t = times + 1 if _store_only(block) else times - 1
        for regions, is_write in ((block.reads, False), (block.writes, True)):
            for r in regions:
                src = getattr(r, "buffer", None) or r.source
                k, bshape, pbuf = self.params.get(src.__hash__(), (None, None, None))
                if pbuf is None or not src.same_as(pbuf):
                    continue
                self.instances += n * max(1, math.prod(self._const(x.extent) for x in r.region))
                if self.instances > MAX_INSTANCES:
                    raise _Untraceable("too many instances")
                flat, valid, rep = self.region(r, benv, shape, bshape)
                t = np.repeat(write_t if is_write else read_t, rep)
                acc = self.times[k]
                if is_write:
                    np.minimum.at(acc.first_write, flat[valid], t[valid])
                else:
                    np.maximum.at(acc.last_read, flat[valid], t[valid])

    def region(self, r, env, shape, bshape):
        """Flat element indices of region ``r`` per instance (instances major), valid mask, elements per instance."""
        coords = []
        ext = [self._const(x.extent) for x in r.region]
        rep = math.prod(ext)
        for d, x in enumerate(r.region):
            lo = np.broadcast_to(np.asarray(_eval(x.min, env), dtype=np.int64), shape).reshape(-1, 1)
            box = np.arange(ext[d], dtype=np.int64).reshape([1] * d + [ext[d]] + [1] * (len(ext) - d - 1))
            c = lo.reshape((-1,) + (1,) * len(ext)) + box.reshape((1,) + box.shape)
            coords.append(np.broadcast_to(c, (lo.shape[0],) + tuple(ext)).reshape(-1))
        valid = np.ones(coords[0].shape if coords else (1,), dtype=bool)
        flat = np.zeros_like(valid, dtype=np.int64)
        for c, s in zip(coords, bshape):
            valid &= (c >= 0) & (c < s)     # out of range: a guarded (padding) access, never performed
            flat = flat * s + c
        return flat, valid, rep


def _collect_blocks(stmt, out: list) -> None:
    walk_stmts(stmt, lambda x: out.append(x) if isinstance(x, SBlock) else None)


def access_times(func) -> dict[int, AccessTimes] | None:
    """``{param position: AccessTimes}`` of a PrimFunc, or None when its order cannot be traced.

    A vectorised loop's lanes share their time slots. Untraceable: dynamic shapes, parallel loops, nested blocks,
    index expressions other than ``+ - * floordiv floormod min max``, or more
    than :data:`MAX_INSTANCES` traced element accesses.
    """
    if not isinstance(func, tirx.PrimFunc):
        return None
    try:
        tr = _Tracer(func)
        body = func.body
        if isinstance(body, SBlockRealize):            # the root block
            root = body.block
            if root.init is not None:
                return None
            body = root.body
        tr.walk(body, {}, np.zeros((), dtype=np.int64), ())
    except (_Untraceable, ValueError, TypeError, AttributeError, MemoryError, RuntimeError):
        return None
    return tr.times


def overlap_shift(inp: AccessTimes, out: AccessTimes) -> int | None:
    """Bytes ``out`` must start below ``inp`` so the kernel may write ``out`` over ``inp``; None if no saving.

    Output element ``j`` (bytes ``[j*osz - shift, (j+1)*osz - shift)`` relative
    to the input's start) must end at or below the lowest input byte that is
    read after ``j`` is first written (anywhere, once no input byte is read any
    more: the pair then covers ``max(shift + input, output)`` bytes). Every
    larger shift is safe as well.
    """
    r, w = inp.last_read, out.first_write
    osz, isz = out.itemsize, inp.itemsize
    if not len(w) or not len(r):
        return None
    order = np.argsort(r, kind="stable")
    r_sorted = r[order]
    idx = order.astype(np.int64)
    suffix_min = np.minimum.accumulate(idx[::-1])[::-1]
    suffix_min = np.append(suffix_min, np.int64(1) << 50)           # nothing read later: no constraint
    k = np.searchsorted(r_sorted, w, side="right")                  # reads strictly after the first write
    lowest = suffix_min[k]
    written = w != _NEVER_WRITTEN
    if not written.any():
        return None
    ends = (np.arange(len(w), dtype=np.int64) + 1) * osz
    need = np.where(written, ends - lowest * isz, 0)
    shift = max(0, int(need.max()))
    if shift >= len(w) * osz:
        return None                                                 # no byte of overlap left
    return shift
