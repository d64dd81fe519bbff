"""Atomic file writes: an output appears complete or not at all.

The data goes to a temporary file beside the target, is flushed to disk, and
replaces the target in one rename, so a full disk, a size limit or an
interrupt never leaves a truncated output, and an output that is also an
input is only replaced once the new content is complete.

Example
-------
>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> atomic_write(os.path.join(d, "x.txt"), b"hello")
>>> open(os.path.join(d, "x.txt"), "rb").read(), os.listdir(d)
(b'hello', ['x.txt'])
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically; raises OSError on failure (the target
    is then left as it was and no temporary file remains)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(path):
            try:
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            except OSError:
                pass
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
