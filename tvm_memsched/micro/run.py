"""Run an exported model on the host or on a QEMU Cortex-M machine and check it against TVM.

Both modes build the same C files with a small test program
(``runtime/harness.c``) that copies a fixed input into RAM, calls
``<name>_run`` once and prints every output as hex bytes; the outputs are
compared with the TVM Relax VM's (``llvm``, TVM's default pipeline) within a
float tolerance.

* :func:`run_host` compiles with the host C compiler and runs the program:
  fast, for tests of the generated C.
* :func:`run_qemu` cross-compiles with ``arm-none-eabi-gcc`` and newlib's
  semihosting library and runs ``qemu-system-arm -M <machine> -nographic
  -semihosting -kernel <elf>`` (with ``-icount shift=0``, so the instruction
  count is exact). The linker script gets the board's flash and SRAM sizes: a
  model that does not fit the board does not link (:class:`DoesNotFitError`).
  Real boards run on their ``qemu_stand_in`` machine with their own sizes.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import MemschedError, UnsupportedError
from .boards import board_names, get_board
from .builder import DoesNotFitError, MicroExport
from .firmware import arm_link_flags, compile_model, linker_script, runtime_file, stack_estimate
from .toolchain import CompileError, find_tool, host_cc, link
from .toolchain import run as run_command

__all__ = ["RunResult", "run_host", "run_qemu", "reference_outputs", "default_inputs", "HARNESS_STACK_BYTES"]

#: stack reserved on top of the model's estimate for the test program (main, output printing, semihosting)
HARNESS_STACK_BYTES = 1024


@dataclass
class RunResult:
    """Outputs of one run of the exported model and how they compare with TVM's."""

    mode: str
    outputs: list
    reference: list | None
    max_abs_err: float
    ok: bool
    seconds: float
    workspace_high_water: int
    instructions: int | None = None
    stack_used: int | None = None
    stack_reserved: int | None = None
    warnings: str = ""
    stdout: str = field(default="", repr=False)
    program: str = ""

    def summary(self) -> str:
        parts = [f"{self.mode}: {len(self.outputs)} output(s), "
                 + ("no reference" if self.reference is None else
                    f"max abs error vs TVM {self.max_abs_err:.3g} ({'ok' if self.ok else 'MISMATCH'})"),
                 f"run {self.seconds:.2f} s"]
        if self.instructions is not None:
            parts.append(f"{self.instructions:,} instructions")
        if self.stack_used is not None:
            parts.append(f"stack used {self.stack_used:,} B of {self.stack_reserved:,} B reserved")
        parts.append(f"workspace high water {self.workspace_high_water:,} B")
        return "; ".join(parts)


def default_inputs(exp: MicroExport, seed: int = 0) -> list[np.ndarray]:
    """The fixed test input: seeded random arrays matching ``main``'s parameters."""
    from ..relax.compare import random_inputs

    return random_inputs(exp.mod["main"], seed)


def reference_outputs(mod, inputs) -> list[np.ndarray]:
    """``main``'s outputs on the TVM Relax VM (llvm, TVM's default pipeline), flattened."""
    import tvm
    from tvm import relax

    from ..relax.compare import run_vm

    target = tvm.target.Target({"kind": "llvm"})
    return run_vm(tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target)), inputs)


def _check_inputs(exp: MicroExport, inputs) -> list[np.ndarray]:
    spec = exp.program.inputs
    if len(inputs) != len(spec):
        raise MemschedError(f"model '{exp.name}' takes {len(spec)} input(s), got {len(inputs)}")
    out = []
    for a, (name, shape, dtype) in zip(inputs, spec):
        a = np.ascontiguousarray(a)
        if tuple(a.shape) != tuple(shape) or str(a.dtype) != dtype:
            raise MemschedError(f"input '{name}' must be {dtype}{list(shape)}, got {a.dtype}{list(a.shape)}")
        out.append(a)
    return out


def _hex_rows(data: bytes, indent: str = "    ") -> str:
    rows = []
    for i in range(0, len(data), 16):
        rows.append(indent + ", ".join(f"0x{b:02x}" for b in data[i:i + 16]) + ",")
    return "\n".join(rows) or indent + "0x00,"


def _write_harness(exp: MicroExport, inputs, build_dir: str, api: str = "auto") -> str:
    """Write harness_data.h/.c for ``inputs`` into ``build_dir``; returns the .c path.

    ``api``: ``"zero-copy"`` writes the inputs into the arena and calls ``<p>_invoke``
    (models whose inputs and outputs live in the arena), ``"run"`` calls ``<p>_run``
    on separate buffers, ``"auto"`` the former when the model has it.
    """
    p, P = exp.name, exp.name.upper()
    os.makedirs(build_dir, exist_ok=True)
    if api not in ("auto", "zero-copy", "run"):
        raise MemschedError(f"unknown harness api '{api}': use auto, zero-copy or run")
    io = exp.program.io_in_arena and api != "run"
    if api == "zero-copy" and not exp.program.io_in_arena:
        raise MemschedError(f"model '{p}' keeps its inputs and outputs outside the arena: no zero-copy API")
    h = [f"/* harness_data.h: test data for model '{p}', generated by tvm_memsched.micro */",
         "#ifndef HARNESS_DATA_H_", "#define HARNESS_DATA_H_", "#include <stdint.h>", f'#include "{p}.h"',
         '#include "tvm_memsched_rt.h"', f"#define HARNESS_RUN {p}_run",
         f"#define HARNESS_NUM_INPUTS {P}_NUM_INPUTS", f"#define HARNESS_NUM_OUTPUTS {P}_NUM_OUTPUTS"]
    if io:   # inputs and outputs in the arena: the zero-copy API, as an application would use it
        h += ["#define HARNESS_IO_IN_ARENA 1", f"#define HARNESS_INVOKE {p}_invoke",
              f"#define HARNESS_INPUT(i) {p}_input(i)", f"#define HARNESS_OUTPUT(k) {p}_output(k)"]
    h += ["extern const uint8_t* const harness_input_data[];", "extern void* const harness_input_buffers[];",
          "extern const void* const harness_inputs[];", "extern void* const harness_outputs[];",
          "extern const uint32_t harness_input_bytes[];", "extern const uint32_t harness_output_bytes[];",
          "#endif", ""]
    c = [f"/* harness_data.c: fixed input and I/O buffers for model '{p}', generated by tvm_memsched.micro */",
         '#include "harness_data.h"', ""]
    for i, a in enumerate(inputs):
        c.append(f"static const uint8_t input_{i}[{max(1, a.nbytes)}] = {{")
        c.append(_hex_rows(a.tobytes()))
        c.append("};")
        if not io:
            c.append(f"static uint8_t input_buffer_{i}[{max(1, a.nbytes)}] __attribute__((aligned(16)));")
    if not io:
        for i, (shape, dtype) in enumerate(exp.program.outputs):
            c.append(f"static uint8_t output_buffer_{i}[{P}_OUTPUT_{i}_BYTES > 0 ? {P}_OUTPUT_{i}_BYTES : 1] "
                     "__attribute__((aligned(16)));")
    n_in, n_out = len(inputs), len(exp.program.outputs)

    def table(decl, items, empty):
        return f"{decl}[{max(1, len(items))}] = {{{', '.join(items) if items else empty}}};"

    buffers_in = [] if io else [f"input_buffer_{i}" for i in range(n_in)]
    buffers_out = [] if io else [f"output_buffer_{i}" for i in range(n_out)]
    c += [table("const uint8_t* const harness_input_data", [f"input_{i}" for i in range(n_in)], "NULL"),
          table("void* const harness_input_buffers", buffers_in, "NULL"),
          table("const void* const harness_inputs", buffers_in, "NULL"),
          table("void* const harness_outputs", buffers_out, "NULL"),
          table("const uint32_t harness_input_bytes", [f"{a.nbytes}u" for a in inputs], "0u"),
          table("const uint32_t harness_output_bytes", [f"{P}_OUTPUT_{i}_BYTES" for i in range(n_out)], "0u"), ""]
    with open(os.path.join(build_dir, "harness_data.h"), "w", encoding="utf-8") as f:
        f.write("\n".join(h))
    path = os.path.join(build_dir, "harness_data.c")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(c))
    return path


def _parse(exp: MicroExport, stdout: str):
    """(outputs, stats, error) from the test program's output."""
    outputs: dict = {}
    stats: dict = {}
    current = None
    error = None
    for line in stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(output|instructions|stack_used|workspace_high_water|error_call) (\d+)$", line)
        if m:
            if m.group(1) == "output":
                current = int(m.group(2))
                outputs[current] = []
            else:
                stats[m.group(1)] = int(m.group(2))
                current = None
        elif line.startswith("error "):
            error = line[6:]
        elif line == "done" or line.startswith("tvm_memsched"):
            current = None
        elif current is not None and re.fullmatch(r"[0-9a-f]+", line):
            outputs[current].append(line)
    arrays = []
    for k, (shape, dtype) in enumerate(exp.program.outputs):
        if k not in outputs:
            arrays.append(None)
            continue
        data = bytes.fromhex("".join(outputs[k]))
        arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape).copy())
    return arrays, stats, error


def _compare(outputs, reference, rtol, atol):
    err, ok = 0.0, len(outputs) == len(reference)
    for a, b in zip(outputs, reference):
        if a is None or a.shape != b.shape:
            return math.inf, False
        if a.size:
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            err = max(err, float(np.max(d)))
            if np.issubdtype(b.dtype, np.floating):
                ok = ok and bool(np.all(d <= atol + rtol * np.abs(b.astype(np.float64))))
            else:
                ok = ok and bool(np.array_equal(a, b))
    return err, ok


def _finish(exp, mode, out, inputs, reference, check, rtol, atol, warnings, program, stack_reserved=None):
    outputs, stats, error = _parse(exp, out.stdout)
    if out.returncode != 0 or error is not None:
        if error is not None:
            raise MemschedError(f"{exp.name}_run failed in kernel call {stats.get('error_call', '?')}: {error}")
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
        raise MemschedError(f"the test program exited with status {out.returncode} ({mode}):\n{tail}")
    if any(a is None for a in outputs):
        raise MemschedError(f"the test program printed no complete output ({mode})")
    if check and reference is None:
        reference = reference_outputs(exp.mod, inputs)
    err, ok = _compare(outputs, reference, rtol, atol) if reference is not None else (0.0, True)
    return RunResult(mode, outputs, reference, err, ok, out.seconds, stats.get("workspace_high_water", 0),
                     stats.get("instructions"), stats.get("stack_used"), stack_reserved, warnings, out.stdout,
                     program)


def run_host(exp: MicroExport, inputs=None, *, seed: int = 0, reference=None, check: bool = True,
             rtol: float = 1e-4, atol: float = 1e-4, timeout: float = 120, api: str = "auto") -> RunResult:
    """Build the exported C with the host compiler, run it on ``inputs`` and compare with TVM.

    ``inputs`` default to :func:`default_inputs` (``seed``); ``reference`` (TVM's
    outputs) is computed when ``check`` and not given. ``api``: which entry point
    the test program uses (see :func:`_write_harness`).
    """
    inputs = _check_inputs(exp, default_inputs(exp, seed) if inputs is None else inputs)
    build_dir = os.path.join(exp.out_dir, "run", "host")
    data = _write_harness(exp, inputs, build_dir, api)
    objs = compile_model(exp, build_dir, None, extra_sources=[runtime_file("harness.c"), data],
                         extra_flags=["-I", build_dir])
    exe = os.path.join(build_dir, f"{exp.name}_test")
    link(host_cc(), objs.objects, exe, ["-lm"])
    out = run_command([exe], timeout=timeout)
    return _finish(exp, "host", out, inputs, reference, check, rtol, atol, objs.warnings, exe)


def run_qemu(exp: MicroExport, inputs=None, *, seed: int = 0, reference=None, check: bool = True,
             rtol: float = 1e-4, atol: float = 1e-4, timeout: float = 600, board=None) -> RunResult:
    """Cross-compile the exported C for its board, run it on QEMU and compare with TVM.

    ``board`` overrides the export's board (same core family expected). Raises
    :class:`DoesNotFitError` when the firmware does not link within the board's
    flash and SRAM, :class:`UnsupportedError` for boards QEMU cannot run.
    """
    board = get_board(board) if board is not None else exp.board
    machine = board.emulator
    if machine is None:
        runnable = [n for n in board_names() if get_board(n).runnable]
        raise UnsupportedError(f"board {board.name} ({board.core}) has no QEMU machine; run it with run_host, "
                               f"or export for one of: {', '.join(runnable)}")
    qemu = find_tool("qemu-system-arm")
    inputs = _check_inputs(exp, default_inputs(exp, seed) if inputs is None else inputs)
    build_dir = os.path.join(exp.out_dir, "run", board.name)
    data = _write_harness(exp, inputs, build_dir)
    objs = compile_model(exp, build_dir, board, extra_sources=[runtime_file("harness.c"), runtime_file("startup.c"),
                                                               data], extra_flags=["-I", build_dir])
    stack = -(-(stack_estimate(exp, objs.usage) + HARNESS_STACK_BYTES) // 8) * 8
    script = linker_script(os.path.join(build_dir, "firmware.ld"), board.flash_bytes, board.sram_bytes, stack)
    elf = os.path.join(build_dir, f"{exp.name}.elf")
    try:
        link(find_tool("arm-none-eabi-gcc"), objs.objects, elf,
             arm_link_flags(board, script, os.path.join(build_dir, f"{exp.name}.map")))
    except CompileError as e:
        text = str(e)
        over = dict(re.findall(r"region `(\w+)' overflowed by (\d+) bytes", text))
        if over or "RAM overflow" in text:
            what = []
            if "CODE" in over:
                what.append(f"flash (region CODE) overflowed by {int(over['CODE']):,} bytes (model flash "
                            f"{exp.flash_bytes or 0:,} B, constants {exp.params_bytes:,} B)")
            if "RAM" in over or "RAM overflow" in text:
                what.append((f"region RAM overflowed by {int(over['RAM']):,} bytes" if "RAM" in over else
                             "the RAM region cannot hold .data + .bss + the stack reserve")
                            + f" (arena {exp.arena_bytes:,} B, test I/O buffers {exp.io_bytes:,} B, "
                              f"stack reserve {stack:,} B)")
            raise DoesNotFitError(f"model '{exp.name}' does not link for {board.name} ({board.sram_bytes:,} B SRAM, "
                                  f"{board.flash_bytes:,} B flash): {'; '.join(what)}", exp) from None
        raise
    cmd = [qemu, "-M", machine, "-nographic", "-monitor", "none", "-semihosting", "-icount", "shift=0",
           "-kernel", elf]
    out = run_command(cmd, timeout=timeout)
    return _finish(exp, f"qemu {machine}" + (f" as {board.name}" if board.qemu_machine is None else ""), out,
                   inputs, reference, check, rtol, atol, objs.warnings, elf, stack)
