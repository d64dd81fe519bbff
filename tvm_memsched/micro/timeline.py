"""The arena over the kernel calls of an exported model: which bytes hold live data at each call.

The planner (:func:`tvm_memsched.relax.passes.arena.plan_function`) places
every buffer (intermediate tensors, inputs and outputs in the arena, each
call's workspace) at an offset for an interval of ``main``'s bindings;
:func:`arena_timeline` re-expresses those intervals in kernel calls, the unit
of the C program and of a profiled run, and :func:`live_bytes` measures the
union of the byte ranges live at each call (a kernel writing in place over its
input shares bytes with it, counted once).

Example
-------
>>> rows = [("a", 0, 64, 0, 1), ("b", 64, 32, 1, 2), ("c", 0, 64, 2, 2)]
>>> live_bytes(rows, 3)
[64, 96, 96]
"""

from __future__ import annotations

__all__ = ["arena_timeline", "live_bytes"]


def arena_timeline(layout, call_steps, scope: str = "global") -> list[tuple]:
    """``[(name, offset, size, first call, last call)]`` of the buffers in ``scope`` that are live during at
    least one kernel call, from the planner's ``layout`` rows ``(name, scope, offset, size, start step, end
    step)`` and the step of each call (``FunctionPlan.call_steps``), ordered by first call and offset.

    >>> arena_timeline([("x", "global", 0, 16, 0, 3), ("t", "global", 16, 8, 2, 2)], [1, 3])
    [('x', 0, 16, 0, 1)]
    """
    out = []
    for name, sc, offset, size, start, end in layout:
        if sc != scope or not size:
            continue
        calls = [k for k, step in enumerate(call_steps) if start <= step <= end]
        if calls:
            out.append((name, int(offset), int(size), calls[0], calls[-1]))
    return sorted(out, key=lambda r: (r[3], r[1], r[0]))


def live_bytes(timeline, n_calls: int) -> list[int]:
    """Bytes of the arena live at each of ``n_calls`` calls: the union of the ranges of the ``timeline``
    rows ``(name, offset, size, first call, last call)`` spanning the call."""
    out = []
    for k in range(n_calls):
        ranges = sorted((off, off + size) for _, off, size, first, last in timeline if first <= k <= last)
        total, end = 0, 0
        for lo, hi in ranges:
            if hi > end:
                total += hi - max(lo, end)
                end = hi
        out.append(total)
    return out
