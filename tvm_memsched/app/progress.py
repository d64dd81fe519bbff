"""Progress reporting for long work, with no dependencies.

On a terminal :class:`Progress` redraws one status line; otherwise (CI, pipes,
logs) it prints a plain line at most every ``interval`` seconds. Schedulers take
a ``progress`` callable (anything accepting a message string); pass
``Progress(...).log`` or ``print`` or ``None``.

Example
-------
>>> import io
>>> out = io.StringIO()
>>> with Progress(3, "models", stream=out, interval=0) as bar:
...     for _ in range(3):
...         bar.advance()
>>> "3/3 models" in out.getvalue()
True
"""

from __future__ import annotations

import sys
import time

__all__ = ["Progress", "ProgressLog", "progress_for"]


class Progress:
    """A progress bar over ``total`` items (a terminal bar, or periodic log lines)."""

    def __init__(self, total: int | None, unit: str = "items", *, stream=None, interval: float = 5.0,
                 label: str = "", enabled: bool = True):
        self.total, self.unit, self.label = total, unit, label
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.done = 0
        self.note = ""
        self.start = time.perf_counter()
        self._last = -float("inf")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.done += n
        if note is not None:
            self.note = note
        self._draw(force=self.total is not None and self.done >= self.total)

    def log(self, message: str) -> None:
        """Show a free-form status message (rate-limited like the bar)."""
        self.note = message
        self._draw()

    def _line(self) -> str:
        elapsed = time.perf_counter() - self.start
        if self.total:
            frac = min(1.0, self.done / self.total)
            width = 24
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            eta = (elapsed / frac - elapsed) if 0 < frac < 1 else 0.0
            head = f"[{bar}] {self.done}/{self.total} {self.unit} {elapsed:6.1f}s"
            if eta:
                head += f" eta {eta:5.0f}s"
        else:
            head = f"{self.done} {self.unit} {elapsed:6.1f}s"
        prefix = f"{self.label}: " if self.label else ""
        return f"{prefix}{head}" + (f"  {self.note}" if self.note else "")

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.tty:
            if force or now - self._last >= 0.1:
                self.stream.write("\r\x1b[2K" + self._line()[:200])
                self.stream.flush()
                self._last = now
        elif force or now - self._last >= self.interval:
            self.stream.write(self._line() + "\n")
            self.stream.flush()
            self._last = now

    def close(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r\x1b[2K" + self._line()[:200] + "\n")
            self.stream.flush()
        elif self.done and (self.total is None or self.done < self.total):
            self._draw(force=True)


class ProgressLog:
    """A rate-limited message printer: ``ProgressLog()("message")`` (for scheduler ``progress``).

    Quiet for the first ``delay`` seconds, so quick runs print nothing; after that
    at most one line every ``interval`` seconds.
    """

    def __init__(self, prefix: str = "", interval: float = 2.0, stream=None, delay: float = 1.0):
        self.prefix, self.interval = prefix, interval
        self.stream = stream if stream is not None else sys.stderr
        self._created = time.perf_counter()
        self._last = -float("inf")
        self.delay = delay

    def __call__(self, message: str, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._created < self.delay:
            return
        if force or now - self._last >= self.interval:
            self.stream.write(f"{self.prefix}{message}\n")
            self.stream.flush()
            self._last = now


def progress_for(args):
    """The ``progress`` callable of a command: indented, rate-limited lines on stderr, None with ``--quiet``."""
    return None if getattr(args, "quiet", False) else ProgressLog(prefix="  ")
