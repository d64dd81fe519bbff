"""Where a compile spends its time and memory: seconds per pass, and the compiler's peak resident memory.

* :class:`PassTimer` is a TVM pass instrument: put it in a ``PassContext`` and it
  records every pass that runs, with its own time (children excluded, so a
  ``Sequential`` does not count its passes twice);
* :func:`peak_rss` measures the largest resident set of this process while a
  block runs (a sampling thread reading ``/proc/self/statm``; elsewhere the
  process's lifetime high-water mark from ``getrusage``).

Example
-------
>>> import tvm
>>> from tvm import relax
>>> from tvm_memsched.relax.testing import branchy_module
>>> timer = PassTimer()
>>> with tvm.transform.PassContext(instruments=[timer]):
...     _ = relax.transform.FoldConstant()(branchy_module(branches=2))
>>> "FoldConstant" in timer.seconds and timer.calls["FoldConstant"] == 1
True
>>> with peak_rss() as m:
...     _ = bytearray(1 << 20)
>>> m.peak_bytes >= m.start_bytes > 0
True
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

from tvm.ir.instrument import pass_instrument

__all__ = ["PassTimer", "peak_rss", "RssMeter", "profile_table"]


@pass_instrument
class PassTimer:
    """Self time of every pass run under it, summed by pass name (``.seconds``, in first-run order)."""

    def __init__(self):
        self.seconds: dict = {}
        self.calls: dict = {}
        self._stack: list = []

    def run_before_pass(self, mod, info):
        self._stack.append([info.name, time.perf_counter(), 0.0])

    def run_after_pass(self, mod, info):
        name, t0, children = self._stack.pop()
        total = time.perf_counter() - t0
        self.seconds[name] = self.seconds.get(name, 0.0) + total - children
        self.calls[name] = self.calls.get(name, 0) + 1
        if self._stack:
            self._stack[-1][2] += total

    def top(self, n: int = 10) -> list:
        """The ``n`` passes that took longest: ``[(name, seconds, calls)]``."""
        return [(k, v, self.calls[k]) for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1])[:n]]


def profile_table(sides: dict, n: int = 12) -> str:
    """A table of the slowest passes of one or more compiles (``{side name: {pass: seconds}}``)."""
    names = []
    for secs in sides.values():
        for k, _ in sorted(secs.items(), key=lambda kv: -kv[1])[:n]:
            if k not in names:
                names.append(k)
    names.sort(key=lambda k: -max(s.get(k, 0.0) for s in sides.values()))
    rows = [("pass",) + tuple(sides)]
    rows += [(k,) + tuple(f"{s[k]:.3f} s" if k in s else "-" for s in sides.values()) for k in names[:n]]
    rows.append(("total",) + tuple(f"{sum(s.values()):.3f} s" for s in sides.values()))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r))
                     for r in rows)


class RssMeter:
    """What :func:`peak_rss` measured: resident bytes at the start and at the peak."""

    start_bytes: int = 0
    peak_bytes: int = 0

    @property
    def growth_bytes(self) -> int:
        return max(0, self.peak_bytes - self.start_bytes)


def _rss() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextmanager
def peak_rss(interval: float = 0.01):
    """Sample this process's resident memory every ``interval`` seconds while the block runs."""
    meter = RssMeter()
    meter.start_bytes = meter.peak_bytes = _rss()
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            meter.peak_bytes = max(meter.peak_bytes, _rss())
            stop.wait(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield meter
    finally:
        stop.set()
        thread.join()
        meter.peak_bytes = max(meter.peak_bytes, _rss())
