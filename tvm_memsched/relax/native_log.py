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

__all__ = ["native_stderr_silenced", "quiet_import"]


@contextmanager
def native_stderr_silenced():
    """File descriptor 2 goes to ``/dev/null`` inside the block (garbage is collected before it comes back)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        gc.collect()
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def quiet_import(fn, classify):
    """``fn()`` with descriptor 2 silenced; if it raises, ``classify(exception)`` gives the exception to raise
    instead (a :class:`~tvm_memsched.core.errors.MemschedError` passes through as a fresh copy), raised after
    the failed import and its traceback are collected.

    >>> quiet_import(lambda: 1 / 0, lambda e: ValueError(f"bad: {e}"))
    Traceback (most recent call last):
    ...
    ValueError: bad: division by zero
    """
    from ..core.errors import MemschedError

    failure = None
    with native_stderr_silenced():
        try:
            return fn()
        except MemschedError as e:
            failure = type(e)(*e.args)
        except Exception as e:  # noqa: BLE001 - the caller decides what each failure means
            failure = classify(e)
    raise failure
