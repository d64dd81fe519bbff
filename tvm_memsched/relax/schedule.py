"""TVM schedules for the passes that try many of them: the same primitives without the Python argument checks.

Every primitive of ``tvm.s_tir.Schedule`` goes through a Python decorator that binds its arguments with
``inspect.signature`` and checks each against the type hints before the call reaches C++. For a kernel scheduled
once that is nothing, but InlineProducers and ShrinkWorkspace try hundreds of ``get_sblock`` / ``get_loops`` /
``compute_at`` calls on every model, and the checks took about a third of those passes' time (swiftnet_like:
InlineProducers 2.0 s -> 1.2-1.6 s, ShrinkWorkspace 0.5-0.7 s -> 0.2-0.4 s, on a loaded 2-core machine). Our
calls pass TVM's own random variables and Python ints; a wrong one still fails, in C++, with TVM's message.

:class:`Schedule` wraps a ``tvm.s_tir.Schedule``: each primitive is the undecorated function (the decorator's
``__wrapped__``), everything else (``mod``, ``trace``, ...) is the wrapped schedule's, and ``copy()`` returns a
:class:`Schedule` again. The wrapped schedule is ``.sch`` for TVM functions that take one.

Example
-------
>>> from tvm.script import tirx as T
>>> @T.prim_func(s_tir=True)
... def k(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
...     for i in range(8):
...         with T.sblock("copy"):
...             vi = T.axis.remap("S", [i])
...             b[vi] = a[vi]
>>> sch = Schedule(k)
>>> outer, inner = sch.split(sch.get_loops(sch.get_sblock("copy"))[0], [None, 4])
>>> [int(sch.get(lp).extent) for lp in sch.get_loops(sch.get_sblock("copy"))]
[2, 4]
>>> type(sch.copy()).__name__
'Schedule'
"""

from __future__ import annotations

import functools

from tvm import s_tir

__all__ = ["Schedule"]

_RAW: dict = {}


def _raw(name: str):
    """The undecorated ``tvm.s_tir.Schedule`` attribute ``name`` (None for non-functions)."""
    if name not in _RAW:
        attr = getattr(s_tir.Schedule, name, None)
        _RAW[name] = getattr(attr, "__wrapped__", attr) if callable(attr) else None
    return _RAW[name]


class Schedule:
    """A ``tvm.s_tir.Schedule`` of ``func`` (a PrimFunc or IRModule, with ``s_tir.Schedule``'s keywords) or
    around an existing one, whose primitives skip TVM's Python argument checks (see the module docstring)."""

    __slots__ = ("sch",)

    def __init__(self, func, **kwargs):
        self.sch = func if isinstance(func, s_tir.Schedule) and not kwargs else s_tir.Schedule(func, **kwargs)

    def __getattr__(self, name):
        raw = _raw(name)
        if raw is None:
            return getattr(self.sch, name)
        return functools.partial(raw, self.sch)

    def copy(self) -> "Schedule":
        """An independent copy, as ``tvm.s_tir.Schedule.copy``."""
        return Schedule(self.sch.copy())
