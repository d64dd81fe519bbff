"""Limits on what a model file may make this tool allocate.

A model file is untrusted input: a few bytes can declare a tensor of terabytes.
Every importer and every command that allocates from declared sizes (constant
folding, random inputs for numeric checks, arenas) checks against these first
and refuses with one line naming the tensor.

>>> check_tensor_bytes(1024, "x", "model")
>>> check_tensor_bytes(MAX_TENSOR_BYTES + 1, "x", "model")
Traceback (most recent call last):
...
tvm_memsched.core.errors.UnsupportedError: model: tensor 'x' needs 1,073,741,825 bytes, more than the 1,073,741,824 B limit per tensor
"""

from __future__ import annotations

from .errors import UnsupportedError

__all__ = ["MAX_TENSOR_BYTES", "check_tensor_bytes", "available_memory", "check_available_memory"]

#: the largest tensor (stored or computed) a model may declare, in bytes
MAX_TENSOR_BYTES = 1 << 30


def check_tensor_bytes(nbytes: int, name: str, what: str, shape=None, limit: int = MAX_TENSOR_BYTES) -> None:
    """Raise :class:`UnsupportedError` if tensor ``name`` of ``what`` needs more than ``limit`` bytes."""
    if nbytes > limit:
        dims = f" of shape {'x'.join(map(str, shape))}" if shape is not None else ""
        raise UnsupportedError(f"{what}: tensor '{name}'{dims} needs {nbytes:,} bytes, more than the {limit:,} B "
                               "limit per tensor")


def available_memory() -> int | None:
    """Bytes the kernel says can be allocated without swapping (``MemAvailable``), or None where unknown.

    >>> m = available_memory(); m is None or m > 0
    True
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_available_memory(nbytes: int, what: str, hint: str = "") -> None:
    """Raise :class:`UnsupportedError` if ``nbytes`` exceed the memory available now (when it is known)."""
    free = available_memory()
    if free is not None and nbytes > free:
        raise UnsupportedError(f"{what} needs about {nbytes:,} bytes of memory, {free:,} are available"
                               + (f"; {hint}" if hint else ""))
