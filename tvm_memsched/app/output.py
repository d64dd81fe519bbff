"""What the commands print and write: byte sizes, text tables, JSON and binary files.

Example
-------
>>> fmt_bytes(3 * 2 ** 20), fmt_bytes(1536), fmt_bytes(12)
('3.00 MiB', '1.50 KiB', '12 B')
>>> print(table([["dp", "12"], ["rpo", "345"]], ["method", "peak"]))
method  peak
------  ----
dp        12
rpo      345
"""

from __future__ import annotations

import json

from ..core.errors import InputFileError
from ..core.files import atomic_write

__all__ = ["fmt_bytes", "table", "write_json", "write_bytes", "write_results"]


def fmt_bytes(n: int) -> str:
    """``n`` bytes in MiB, KiB or B, two decimals."""
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def table(rows: list, header: list) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned, a rule under the header."""
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w)  # noqa: E731
                              for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(header), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`~tvm_memsched.core.files.atomic_write`: complete or not at
    all); a one-line InputFileError if that fails."""
    try:
        atomic_write(path, data)
    except OSError as e:
        raise InputFileError(f"cannot write {path}: {e.strerror or e}") from None


def write_json(path: str, obj) -> None:
    """Write ``obj`` as indented JSON (unknown values as strings); a one-line InputFileError if that fails."""
    write_bytes(path, (json.dumps(obj, indent=1, default=str) + "\n").encode())


def write_results(out_dir: str, stem: str, data, text: str) -> list[str]:
    """Write a benchmark's ``data`` as ``<stem>.json`` and its table ``text`` as ``<stem>.md`` into ``out_dir``
    (created if needed); returns the two paths."""
    import os

    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, f"{stem}.json"), os.path.join(out_dir, f"{stem}.md")]
    write_json(paths[0], data)
    write_bytes(paths[1], text.encode())
    return paths
