"""Keep TVM's native log lines off the terminal while a frontend imports a model.

When an importer fails half-way, TVM's C++ ``BlockBuilder`` is destroyed with
open blocks and logs a warning straight to file descriptor 2, after the
one-line error the command prints. :func:`native_stderr_silenced` points
descriptor 2 at ``/dev/null`` for the duration of an import and collects the
garbage of a failed one before restoring it; :func:`quiet_import` runs an
import so and raises its failure, as the caller classifies it, only once the
failed import's objects are gone.

Example
-------
>>> import os
>>> with native_stderr_silenced():
...     _ = os.write(2, b"not shown\\n")
"""

from __future__ import annotations

import gc
import os
import sys
from contextlib import contextmanager

__all__ = ["native_stderr_silenced", "native_stderr_to_file", "quiet_import"]


@contextmanager
def _descriptor2_to(fd: int, keep_python: bool):
    """Point descriptor 2 at ``fd`` (closed afterwards) inside the block; ``keep_python``: Python's
    ``sys.stderr`` keeps writing where descriptor 2 pointed before."""
    import io

    sys.stderr.flush()
    saved = os.dup(2)
    old = sys.stderr
    try:
        wrap = keep_python and old.fileno() == 2
    except (AttributeError, OSError, ValueError):
        wrap = False
    if wrap:                     # a stream over a copy of the original descriptor 2
        sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(saved), "wb", buffering=0), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
    os.dup2(fd, 2)
    try:
        yield
    finally:
        gc.collect()
        sys.stderr.flush()
        os.dup2(saved, 2)
        if wrap:
            sys.stderr.close()
            sys.stderr = old
        os.close(saved)
        os.close(fd)


def native_stderr_silenced():
    """File descriptor 2 goes to ``/dev/null`` inside the block (garbage is collected before it comes back)."""
    return _descriptor2_to(os.open(os.devnull, os.O_WRONLY), keep_python=False)


def native_stderr_to_file(path: str):
    """Inside the block, what native code (TVM's C++ logging, child processes) writes to descriptor 2 goes to
    ``path``; Python's own ``sys.stderr`` (messages, progress) keeps writing where it did.

    >>> import os, tempfile
    >>> log = os.path.join(tempfile.mkdtemp(), "tvm.log")
    >>> with native_stderr_to_file(log):
    ...     _ = os.write(2, b"from C++\\n")
    >>> open(log).read()
    'from C++\\n'
    """
    return _descriptor2_to(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600), keep_python=True)


def quiet_import(fn, classify):
    """``fn()`` with descriptor 2 silenced; if it raises, ``classify(exception)`` gives the exception to raise
    instead (a :class:`~tvm_memsched.core.errors.MemschedError` passes through as a fresh copy), raised after
    the failed import and its traceback are collected.

    >>> quiet_import(lambda: 1 / 0, lambda e: ValueError(f"bad: {e}"))
    Traceback (most recent call last):
    ...
    ValueError: bad: division by zero
    """
    from ...core.errors import MemschedError

    failure = None
    with native_stderr_silenced():
        try:
            return fn()
        except MemschedError as e:
            failure = type(e)(*e.args)
        except Exception as e:  # noqa: BLE001 - the caller decides what each failure means
            failure = classify(e)
    raise failure
