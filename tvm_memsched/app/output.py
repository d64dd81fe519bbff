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
import os

from ..core.errors import InputFileError, MemschedError
from ..core.files import atomic_write

__all__ = ["fmt_bytes", "table", "write_json", "write_bytes", "write_results", "check_paths"]

#: argparse attributes holding input files / output files / output directories
INPUT_ARGS = ("graph", "model")
FILE_OUTPUT_ARGS = ("output", "json")
DIR_OUTPUT_ARGS = ("out",)


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


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_paths(args) -> None:
    """Refuse, before any work, an output path the command could not write or must not overwrite.

    A file output (``-o``, ``--json FILE``) needs an existing, writable directory
    and must not be a directory; one that is an input file of the command (the
    same file, by any path) is refused unless ``--force``. An output directory
    (``--out``) must not be an existing non-directory. Raises MemschedError
    naming the path.
    """
    inputs = [v for v in (getattr(args, k, None) for k in INPUT_ARGS) if isinstance(v, str) and os.path.isfile(v)]
    force = bool(getattr(args, "force", False))
    outs = []
    for k in FILE_OUTPUT_ARGS:
        path = getattr(args, k, None)
        if not isinstance(path, str) or not path:
            continue
        outs.append(path)
        flag = "--json" if k == "json" else "--output"
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise MemschedError(f"cannot write {flag} {path!r}: directory {parent!r} does not exist")
        if os.path.isdir(path):
            raise MemschedError(f"{flag} {path!r} is a directory")
        if not os.access(parent, os.W_OK):
            raise MemschedError(f"cannot write {flag} {path!r}: directory {parent!r} is not writable")
        if not force and os.path.exists(path) and any(_same_file(path, src) for src in inputs):
            raise MemschedError(f"{flag} {path!r} is the input file; refusing to overwrite it "
                                "(give another path, or --force)")
    if len(outs) == 2 and (os.path.abspath(outs[0]) == os.path.abspath(outs[1])
                           or (all(os.path.exists(p) for p in outs) and _same_file(*outs))):
        raise MemschedError(f"--output and --json are the same file {outs[0]!r}")
    for k in DIR_OUTPUT_ARGS:
        path = getattr(args, k, None)
        if isinstance(path, str) and path and os.path.exists(path) and not os.path.isdir(path):
            raise MemschedError(f"--out {path!r} exists and is not a directory")
