"""Compilers and emulator: find them, run them, and explain what is missing.

* the Cortex-M cross compiler ``arm-none-eabi-gcc`` (+ ``arm-none-eabi-size``)
  with newlib (Debian: ``gcc-arm-none-eabi``, ``libnewlib-arm-none-eabi``);
* ``qemu-system-arm`` (Debian: ``qemu-system-arm``);
* the host C compiler (``$CC``, ``gcc`` or ``cc``) for the fast host mode.

A missing tool raises :class:`ToolchainError` naming the Debian packages.
Compiler diagnostics are returned to the caller as :class:`CompileError`.
The include directories of TVM's C headers are found in the installed wheels.

Example
-------
>>> try:
...     find_tool("qemu-system-nonexistent")
... except ToolchainError as e:
...     print(str(e).split(". ")[0])
'qemu-system-nonexistent' not found on PATH
>>> DEBIAN_PACKAGES["arm-none-eabi-gcc"]
'gcc-arm-none-eabi libnewlib-arm-none-eabi'
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from ..core.errors import MemschedError
from ..core.files import output_dir

__all__ = ["ToolchainError", "CompileError", "DEBIAN_PACKAGES", "find_tool", "host_cc", "tvm_include_dirs",
           "compile_objects", "link", "section_sizes", "stack_usage", "call_graph", "run", "RunOutput"]

#: the Debian packages that provide each tool
DEBIAN_PACKAGES = {
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "arm-none-eabi-size": "binutils-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
}
_ALL_PACKAGES = "gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm"


class ToolchainError(MemschedError):
    """A compiler or emulator is missing."""


class CompileError(MemschedError):
    """The C compiler or the linker failed (the message holds its diagnostics)."""


def find_tool(name: str) -> str:
    """Absolute path of ``name`` on PATH; :class:`ToolchainError` naming its Debian package if missing."""
    path = shutil.which(name)
    if path is None:
        pkg = DEBIAN_PACKAGES.get(name, name)
        raise ToolchainError(f"'{name}' not found on PATH. On Debian/Ubuntu install it with: "
                             f"sudo apt-get install {pkg} (the microcontroller flow needs "
                             f"{_ALL_PACKAGES})")
    return path


def host_cc() -> str:
    """The host C compiler: ``$CC``, else ``gcc``, else ``cc``."""
    for name in (os.environ.get("CC"), "gcc", "cc"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise ToolchainError("no host C compiler found (set CC, or install gcc: sudo apt-get install gcc)")


def tvm_include_dirs() -> list[str]:
    """Directories holding ``tvm/runtime/c_backend_api.h``, ``tvm/ffi/c_api.h`` and ``dlpack/dlpack.h``."""
    import tvm
    import tvm_ffi

    dirs = []
    for pkg in (tvm, tvm_ffi):
        d = os.path.join(os.path.dirname(os.path.abspath(pkg.__file__)), "include")
        if os.path.isdir(d):
            dirs.append(d)
    return dirs


def _check(proc, what: str) -> None:
    if proc.returncode != 0:
        text = (proc.stderr or "") + (proc.stdout or "")
        raise CompileError(f"{what} failed (exit {proc.returncode}):\n{text.strip()}")


def compile_objects(cc: str, sources: list[str], out_dir: str, flags: list[str], *, jobs: int = 2,
                    stack_usage: bool = False) -> tuple[list[str], str]:
    """Compile each source to ``out_dir/<stem>.o`` (``jobs`` at a time); returns (objects, warnings).

    With ``stack_usage`` GCC also writes ``<stem>.su`` (``-fstack-usage``) and the call graph with each
    function's frame, ``<stem>.ci`` (``-fcallgraph-info=su``; see :func:`call_graph`).
    """
    output_dir(out_dir, drop_links=True)      # no planted link redirects GCC's outputs
    objs, procs, warnings = [], [], []
    pending = list(sources)
    while pending or procs:
        while pending and len(procs) < max(1, jobs):
            src = pending.pop(0)
            obj = os.path.join(out_dir, os.path.splitext(os.path.basename(src))[0] + ".o")
            cmd = [cc, *flags, "-c", src, "-o", obj] + (["-fstack-usage", "-fcallgraph-info=su"] if stack_usage
                                                        else [])
            procs.append((src, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                cwd=out_dir)))
            objs.append(obj)
        src, p = procs.pop(0)
        out, err = p.communicate()
        if p.returncode != 0:
            for _, q in procs:
                q.wait()
            raise CompileError(f"compiling {os.path.basename(src)} failed:\n{(err + out).strip()}")
        if (err + out).strip():
            warnings.append((err + out).strip())
    return objs, "\n".join(warnings)


def link(cc: str, objects: list[str], output: str, flags: list[str]) -> None:
    """Link ``objects`` into ``output`` (``flags`` go after the objects: libraries, scripts)."""
    proc = subprocess.run([cc, *objects, *flags, "-o", output], capture_output=True, text=True)
    _check(proc, f"linking {os.path.basename(output)}")


def section_sizes(elf: str) -> dict[str, int]:
    """``{section: bytes}`` of an ARM ELF, from ``arm-none-eabi-size -A``."""
    proc = subprocess.run([find_tool("arm-none-eabi-size"), "-A", "-d", elf], capture_output=True, text=True)
    _check(proc, "arm-none-eabi-size")
    sizes = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"^(\.\S+)\s+(\d+)\s+(\d+)", line)
        if m:
            sizes[m.group(1)] = int(m.group(2))
    return sizes


def stack_usage(su_files: list[str]) -> dict[str, tuple[int, str]]:
    """``{function: (bytes, qualifier)}`` from GCC ``.su`` files (qualifier: static/dynamic/bounded)."""
    out = {}
    for path in su_files:
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    fn = parts[0].rsplit(":", 1)[-1]
                    out[fn] = (int(parts[1]), parts[2])
    return out


_CI_NODE = re.compile(r'^node: \{ title: "([^"]+)" label: "([^\\"]+)\\n[^"]*?\\n(\d+) bytes \((\w+)\)')
_CI_EDGE = re.compile(r'^edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def call_graph(ci_files: list[str]) -> tuple[dict, dict]:
    """``({function: (frame bytes, qualifier)}, {function: {callees}})`` from GCC ``.ci`` files.

    Functions are named as GCC titles them: ``name`` for external ones, ``file:name`` for static ones (so
    two static functions of the same name stay apart); a callee without a node is outside these files.
    """
    frames, edges = {}, {}
    for path in ci_files:
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = _CI_NODE.match(line)
                if m:
                    frames[m.group(1)] = (int(m.group(3)), m.group(4))
                    continue
                m = _CI_EDGE.match(line)
                if m:
                    edges.setdefault(m.group(1), set()).add(m.group(2))
    return frames, edges


@dataclass
class RunOutput:
    """What a program printed, how it exited and how long it took."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run(cmd: list[str], *, timeout: float, cwd: str | None = None) -> RunOutput:
    """Run ``cmd``; a timeout raises :class:`MemschedError` naming the command.

    Its output goes to files, not pipes: QEMU writes its console without blocking and drops what a full
    pipe does not take, which cut long outputs off when this process was slow to read (a loaded machine).
    """
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.run(cmd, stdout=out, stderr=err, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise MemschedError(f"'{os.path.basename(cmd[0])}' did not finish within {timeout:g} s") from None
        text = []
        for f in (out, err):
            f.seek(0)
            text.append(f.read().decode("utf-8", "replace"))
    return RunOutput(proc.returncode, text[0], text[1], time.perf_counter() - t0)
