"""Compile an exported model for the host or a Cortex-M board; measure flash, RAM and stack.

* :func:`compile_model` builds the model's C files (kernels, model, constants,
  runtime shim) plus any extra sources into objects, with ``-Wall -Wextra``;
  for a board also ``-fstack-usage``.
* :func:`measure` links two size probes with the board's flags, one calling
  ``<name>_run`` and one not; the difference of their sections is the model's
  flash (code, constants, libm/libgcc routines it pulls in) and static RAM (the
  arena and the runtime's statics). The stack estimate is ``<name>_run``'s
  deepest chain of calls, from GCC's call graph with stack usage
  (``-fcallgraph-info=su``): a call through the kernel table counts as the
  deepest kernel, callees outside the model's files (runtime shim, libm) at
  least :data:`LEAF_STACK_ALLOWANCE`; interrupts are not included.
* :func:`linker_script` writes the linker script for a board's QEMU machine
  (its memory map) with the board's flash and SRAM sizes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..core.files import atomic_write, output_dir
from .boards import MACHINES, Board
from .toolchain import call_graph, compile_objects, find_tool, host_cc, link, section_sizes, stack_usage

__all__ = ["COMMON_CFLAGS", "LEAF_STACK_ALLOWANCE", "Objects", "Measurement", "compile_model", "measure",
           "stack_estimate", "naked_frames", "linker_script", "board_linker_script", "arm_link_flags", "runtime_file"]

COMMON_CFLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-ffunction-sections", "-fdata-sections"]
#: stack bytes allowed for library routines the kernels call (expf, sqrtf, ...; newlib's need well under this)
LEAF_STACK_ALLOWANCE = 128
_RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
_CODE_SECTIONS = (".isr_vector", ".text", ".ARM.extab", ".ARM.exidx", ".preinit_array", ".init_array",
                  ".fini_array", ".data")
_RAM_SECTIONS = (".data", ".bss")


def runtime_file(name: str) -> str:
    """Path of a file shipped in ``tvm_memsched/micro/runtime``."""
    return os.path.join(_RUNTIME_DIR, name)


@dataclass
class Objects:
    """Compiled objects, GCC's stack usage per function, its call graph and any compiler warnings."""

    objects: list
    usage: dict
    warnings: str
    graph: tuple = ({}, {})


def _model_sources(exp) -> list[str]:
    return [exp.files["kernels"], exp.files["source"], exp.files["params"],
            os.path.join(exp.out_dir, "tvm_memsched_rt.c")] + ([exp.files["tms_nn_c"]] if "tms_nn_c" in exp.files else [])


def compile_model(exp, build_dir: str, board: Board | None = None, extra_sources=(), extra_flags=()) -> Objects:
    """Compile the exported model (and ``extra_sources``) for ``board`` (None: the host)."""
    cc = find_tool("arm-none-eabi-gcc") if board is not None else host_cc()
    flags = (board.cflags() if board is not None else []) + COMMON_CFLAGS + \
        ["-I", exp.out_dir, "-I", os.path.join(exp.out_dir, "include"), *extra_flags]
    sources = _model_sources(exp) + list(extra_sources)
    objs, warnings = compile_objects(cc, sources, build_dir, flags, stack_usage=board is not None)
    usage = stack_usage([o[:-2] + ".su" for o in objs]) if board is not None else {}
    graph = call_graph([o[:-2] + ".ci" for o in objs]) if board is not None else ({}, {})
    if board is not None and "tms_nn_c" in exp.files:     # hand-written frames GCC reports as 0
        frames = dict(graph[0])
        for name, n in naked_frames(exp.files["tms_nn_c"]).items():
            for title in frames:
                if title == name or title.endswith(":" + name):
                    frames[title] = (n, "static")
        graph = (frames, graph[1])
    return Objects(objs, usage, warnings, graph)


def naked_frames(path: str) -> dict:
    """``{function: stack bytes}`` of the naked (hand-written assembly) functions of a C file and of the
    ``.inc`` files it includes from its directory: the registers its ``push`` and ``vpush`` save and its
    ``sub sp, sp, #N``."""
    import re

    with open(path, encoding="utf-8") as f:
        text = f.read()
    for inc in re.findall(r'#include "([\w.]+\.inc)"', text):
        inc_path = os.path.join(os.path.dirname(path), inc)
        if os.path.exists(inc_path):
            with open(inc_path, encoding="utf-8") as f:
                text += "\n" + f.read()
    out = {}
    for m in re.finditer(r"__attribute__\(\(naked[^)]*\)\)\s*static\s+void\s+(\w+)\(", text):
        body = text[m.end():text.find("\n}", m.end())]
        regs = 0
        push = re.search(r"push \{([^}]*)\}", body)
        for part in (push.group(1).split(",") if push else []):
            a, _, b = part.strip().partition("-")
            regs += (int(b.strip()[1:]) - int(a[1:]) + 1) if b else 1
        vpush = re.search(r"vpush \{d(\d+)-d(\d+)\}", body)
        regs += 2 * (int(vpush.group(2)) - int(vpush.group(1)) + 1) if vpush else 0
        sub = re.search(r"sub sp, sp, #(\d+)", body)
        out[m.group(1)] = 4 * regs + (int(sub.group(1)) if sub else 0)
    return out


def _reachable(fn: str, edges: dict) -> set:
    """Functions reachable from ``fn`` along direct calls (``fn`` included)."""
    seen, todo = {fn}, [fn]
    while todo:
        for c in edges.get(todo.pop(), ()):
            if c not in seen:
                seen.add(c)
                todo.append(c)
    return seen


def _depth(fn: str, frames: dict, edges: dict, memo: dict, leaf: int) -> int:
    """Worst-case stack below and including ``fn`` along its direct calls (unknown callees: ``leaf``)."""
    if fn in memo:
        return memo[fn]
    if fn == "__indirect_call":       # the kernel calls through the call table: counted on their own
        return 0
    if fn not in frames:
        return leaf
    memo[fn] = frames[fn][0] + leaf              # provisional: cuts a (never expected) recursion
    memo[fn] = frames[fn][0] + max([_depth(c, frames, edges, memo, leaf) for c in edges.get(fn, ())] or [0])
    return memo[fn]


def stack_estimate(exp, usage: dict, graph=None) -> int:
    """Stack bytes ``<name>_run`` needs (see the module docstring).

    With GCC's call graph (``graph``, :func:`compile_model`): the deepest chain of calls below
    ``<name>_run``, a call through the call table as deep as the deepest kernel (a kernel it calls
    directly is on the chain once, not added again), each function's
    frame as GCC reports it (hand-written ones from their ``push`` and ``sub sp``), callees outside the
    model's files at :data:`LEAF_STACK_ALLOWANCE`. Without it: the largest frames, added.
    """
    syms = {f"__tvm_ffi_{exp.program.kernels.symbols[c.kernel]}" for c in exp.program.calls}
    frames, edges = graph if graph is not None else ({}, {})
    if frames:
        memo: dict = {}
        kernel = max([_depth(s, frames, edges, memo, LEAF_STACK_ALLOWANCE) for s in syms] or [0])
        start = f"{exp.name}_run"
        reach = _reachable(start, edges)
        memo["__indirect_call"] = kernel         # a call through the call table: the deepest kernel
        depth = _depth(start, frames, edges, memo, LEAF_STACK_ALLOWANCE)
        missing = syms - reach
        if missing and "__indirect_call" not in reach:  # kernels the graph does not show being called
            depth += max(_depth(s, frames, edges, memo, LEAF_STACK_ALLOWANCE) for s in missing)
        return depth
    run = usage.get(f"{exp.name}_run", (0, ""))[0]
    kernel = max([usage.get(s, (0, ""))[0] for s in syms] or [0])
    leaf = max([usage.get(f, (0, ""))[0] for f in ("TVMBackendAllocWorkspace", "TVMBackendFreeWorkspace",
                                                  "tvm_memsched_set_error")] + [LEAF_STACK_ALLOWANCE])
    return run + kernel + leaf


def linker_script(path: str, flash_bytes: int, ram_bytes: int, stack_bytes: int, board=None) -> str:
    """Write the linker script for ``board``'s QEMU machine (:attr:`.Board.machine`; an MPS2 machine's when
    None) with these region sizes to ``path``; returns ``path``."""
    m = board.machine if board is not None else MACHINES["mps2-an386"]
    with open(runtime_file("cortexm.ld.in"), encoding="utf-8") as f:
        text = f.read()
    vec = "" if m.vector_origin is None else f"  VEC  (rx)  : ORIGIN = 0x{m.vector_origin:08x}, LENGTH = 1K\n"
    text = (text.replace("@MACHINE@", m.name).replace("@VECTOR_REGION@", vec)
            .replace("@VECTOR_MEMORY@", "CODE" if m.vector_origin is None else "VEC")
            .replace("@CODE_ORIGIN@", f"0x{m.code_origin:08x}").replace("@RAM_ORIGIN@", f"0x{m.ram_origin:08x}")
            .replace("@FLASH_BYTES@", str(flash_bytes)).replace("@RAM_BYTES@", str(ram_bytes))
            .replace("@STACK_BYTES@", str(stack_bytes)))
    atomic_write(path, text)
    return path


def board_linker_script(path: str, board: Board, stack_bytes: int) -> str:
    """:func:`linker_script` for ``board`` with its flash and SRAM (cut to what its QEMU machine maps)."""
    m = board.machine
    return linker_script(path, min(board.flash_bytes, m.code_bytes), min(board.sram_bytes, m.ram_bytes),
                         stack_bytes, board)


def arm_link_flags(board: Board, script: str, map_file: str | None = None) -> list[str]:
    """Link flags for a semihosting (newlib rdimon) firmware for ``board``."""
    flags = board.cflags() + ["--specs=rdimon.specs", "-T", script, "-Wl,--gc-sections"]
    if map_file:
        flags.append(f"-Wl,-Map={map_file}")
    return flags + ["-lm"]


@dataclass
class Measurement:
    """Flash, static RAM and stack of the model on a board (bytes)."""

    flash_bytes: int
    static_ram_bytes: int
    stack_bytes: int
    usage: dict


_PROBE = """\
/* size probe generated by tvm_memsched.micro: links {what} */
#include "{name}.h"
int main(void) {{
{body}
}}
"""


def measure(exp, build_dir: str | None = None) -> Measurement:
    """Cross-compile ``exp`` for its board and measure it (see the module docstring)."""
    board = exp.board
    build_dir = build_dir or output_dir(exp.out_dir, "build", board.name)
    output_dir(build_dir, drop_links=True)
    probes = {}
    for kind, body in (("model", f"  const void* const* volatile in = 0;\n  void* const* volatile out = 0;\n"
                                 f"  return {exp.name}_run(in, out);"),
                       ("bare", "  return 0;")):
        path = os.path.join(build_dir, f"probe_{kind}.c")
        atomic_write(path, _PROBE.format(what="the model" if kind == "model" else "nothing", name=exp.name,
                                         body=body))
        probes[kind] = path
    objs = compile_model(exp, build_dir, board, extra_sources=[runtime_file("startup.c"), *probes.values()])
    by_name = {os.path.basename(o): o for o in objs.objects}
    model_objs = [o for o in objs.objects if not os.path.basename(o).startswith(("probe_", "startup"))]
    script = linker_script(os.path.join(build_dir, "probe.ld"), 64 << 20, 64 << 20, 0, board)
    sizes = {}
    for kind in ("model", "bare"):
        elf = os.path.join(build_dir, f"probe_{kind}.elf")
        objects = [by_name["startup.o"], by_name[f"probe_{kind}.o"]] + (model_objs if kind == "model" else [])
        link(find_tool("arm-none-eabi-gcc"), objects, elf, arm_link_flags(board, script))
        sizes[kind] = section_sizes(elf)

    def total(s, names):
        return sum(s.get(n, 0) for n in names)

    flash = total(sizes["model"], _CODE_SECTIONS) - total(sizes["bare"], _CODE_SECTIONS)
    ram = total(sizes["model"], _RAM_SECTIONS) - total(sizes["bare"], _RAM_SECTIONS)
    return Measurement(flash, ram, stack_estimate(exp, objs.usage, objs.graph), objs.usage)
