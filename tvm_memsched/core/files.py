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

__all__ = ["atomic_write", "output_dir", "copy_file"]


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
        if os.path.isfile(path) and not os.path.islink(path):
            try:
                os.chmod(tmp, os.lstat(path).st_mode & 0o7777)
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


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy ``src`` to ``dst`` by :func:`atomic_write` (a link at ``dst`` is replaced, never written through)."""
    with open(src, "rb") as f:
        atomic_write(dst, f.read())


def output_dir(root: str | os.PathLike, *parts: str, drop_links: bool | None = None) -> str:
    """The directory ``root/parts...``, created; below ``root`` (which the user named) no symbolic link is
    followed: a link in the way is removed and a real directory made in its place, and links directly inside
    the returned directory are removed too (``drop_links``, default: when ``parts`` are given), so tools
    that write there (compilers, ``open``) cannot be redirected outside it. Returns the path.

    >>> import os, tempfile
    >>> d, elsewhere = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> os.symlink(elsewhere, os.path.join(d, "include"))
    >>> p = output_dir(d, "include", "sub")
    >>> os.path.islink(os.path.join(d, "include")), os.path.isdir(p), os.listdir(elsewhere)
    (False, True, [])
    """
    path = os.fspath(root)
    os.makedirs(path, exist_ok=True)
    for part in parts:
        for name in part.replace("\\", "/").split("/"):
            if name in ("", "."):
                continue
            if name == "..":
                raise OSError(f"output folder part {part!r} leaves {root}")
            path = os.path.join(path, name)
            if os.path.islink(path):
                os.unlink(path)
            if not os.path.isdir(path):
                os.mkdir(path)
    if drop_links or drop_links is None and parts:
        for entry in os.scandir(path):
            if entry.is_symlink():
                os.unlink(entry.path)
    return path
