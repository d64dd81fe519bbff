"""Run an exported model on the host or on a QEMU Cortex-M machine and check it against TVM.

Both modes build the same C files with a small test program
(``runtime/harness.c``) that copies a fixed input into RAM, calls
``<name>_run`` once and prints every output as hex bytes; the outputs are
compared with the TVM Relax VM's (``llvm``, TVM's default pipeline) within a
float tolerance. Given a ``sequence`` of inputs, the program invokes the model
on each in turn: a stateful model (:mod:`tvm_memsched.relax.frontends.tflite_state`) is
initialised once with ``<name>_init()`` and carries its state from one
invocation to the next, and every invocation is checked (against the VM with
the state threaded through, or against a given reference such as LiteRT's).

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
from ..core.files import atomic_write, output_dir
from ..core.numerics import difference
from .boards import board_names, get_board
from .builder import DoesNotFitError, MicroExport
from .firmware import arm_link_flags, board_linker_script, compile_model, runtime_file, stack_estimate
from .inputs import default_inputs, default_sequence
from .literals import c_byte_rows
from .toolchain import CompileError, find_tool, host_cc, link
from .toolchain import run as run_command

__all__ = ["RunResult", "run_host", "run_qemu", "profile_table", "profile_layers", "reference_outputs", "reference_sequence", "litert_reference",
           "tflm_sequence_reference", "tflm_differs_from_litert", "TFLM_OWN_KERNELS", "default_inputs",
           "default_sequence", "HARNESS_STACK_BYTES"]

#: stack reserved on top of the model's estimate for the test program (main, output printing, semihosting)
HARNESS_STACK_BYTES = 1024
#: what the measured stack may hold beyond the model's own estimate: the SysTick exception frame with the FPU
#: context (26 words) and the harness's call frame below which the measurement starts
_MEASURED_STACK_SLACK = 104 + 32


@dataclass
class RunResult:
    """Outputs of a run of the exported model and how they compare with the reference (TVM's unless given).

    ``outputs``/``reference`` are those of the first invocation; ``sequence``
    and ``reference_sequence`` hold every invocation's (one list of arrays
    each); instructions and stack use are measured on the first.
    """

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
    sequence: list = field(default_factory=list, repr=False)
    reference_sequence: list | None = field(default=None, repr=False)
    reference_name: str = "TVM"
    profile: dict = field(default_factory=dict)     # kernel call index -> instructions (profiled runs)
    macs: int = 0                                   # multiply-accumulates of one inference (from the model)

    @property
    def instructions_per_mac(self) -> float | None:
        return self.instructions / self.macs if self.instructions and self.macs else None

    @property
    def invocations(self) -> int:
        return max(1, len(self.sequence))

    def summary(self) -> str:
        calls = f" x {self.invocations} invocations" if self.invocations > 1 else ""
        parts = [f"{self.mode}: {len(self.outputs)} output(s){calls}, "
                 + ("no reference" if self.reference is None else
                    f"max abs error vs {self.reference_name} {self.max_abs_err:.3g} "
                    f"({'ok' if self.ok else 'MISMATCH'})"),
                 f"run {self.seconds:.2f} s"]
        if self.instructions is not None:
            parts.append(f"{self.instructions:,} instructions"
                         + (f" ({self.instructions_per_mac:.2f} per multiply-accumulate, {self.macs:,} MACs)"
                            if self.instructions_per_mac else ""))
        if self.stack_used is not None:
            parts.append(f"stack used {self.stack_used:,} B of {self.stack_reserved:,} B reserved")
        parts.append(f"workspace high water {self.workspace_high_water:,} B")
        return "; ".join(parts)


def litert_reference(buf: bytes, sequence) -> list[list[np.ndarray]]:
    """The outputs of every invocation of ``sequence`` (input lists in the model's input order) in LiteRT with
    TFLite's reference kernels, which the int8 lowering reproduces bit for bit; state carried."""
    from ..tflite.verify import litert_run_sequence

    return [list(o.values()) for o in litert_run_sequence(buf, sequence, reference_kernels=True)]


#: operators whose integer kernels differ between TFLite Micro and LiteRT (TFLM's LSTM uses fixed
#: intermediate scales, LiteRT's the operator's intermediate tensors; LiteRT's int8 SVDF applies ReLU)
TFLM_OWN_KERNELS = frozenset({"UNIDIRECTIONAL_SEQUENCE_LSTM", "SVDF"})


def tflm_differs_from_litert(buf: bytes) -> bool:
    """True if ``buf`` has an operator of :data:`TFLM_OWN_KERNELS`: a stateful run checks against TFLM."""
    from ..tflite.builder import load, operator_names

    return bool(set(operator_names(load(bytes(buf)))) & TFLM_OWN_KERNELS)


def tflm_sequence_reference(buf: bytes, sequence) -> list[list[np.ndarray]]:
    """The outputs of every invocation of ``sequence`` in TFLite Micro's interpreter, state carried: the ground
    truth of a stateful model TFLM runs (its integer LSTM differs from LiteRT's)."""
    from ..tflite.verify import tflm_run_sequence

    return tflm_run_sequence(buf, [{str(i): v for i, v in enumerate(inputs)} for inputs in sequence])


def _build_reference(mod):
    import tvm
    from tvm import relax

    target = tvm.target.Target({"kind": "llvm"})
    return tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))


def reference_outputs(mod, inputs) -> list[np.ndarray]:
    """``main``'s outputs on the TVM Relax VM (llvm, TVM's default pipeline), flattened."""
    from ..relax.compare import run_vm

    return run_vm(_build_reference(mod), inputs)


def reference_sequence(mod, sequence, states=None) -> list[list[np.ndarray]]:
    """The outputs of every invocation of ``sequence`` on the TVM VM, the state (``states``: the
    :class:`~tvm_memsched.relax.frontends.tflite_state.StateVar`\\ s, default those of ``mod``) threaded through from its
    initial value."""
    from ..relax.frontends.tflite_state import run_sequence

    return run_sequence(_build_reference(mod), mod, sequence, states)


def _check_inputs(exp: MicroExport, inputs) -> list[np.ndarray]:
    spec = exp.program.inputs
    if len(inputs) != len(spec):
        raise MemschedError(f"model '{exp.name}' takes {len(spec)} input(s), got {len(inputs)}")
    out = []
    for a, (name, shape, dtype) in zip(inputs, spec):
        a = np.asarray(a, order="C")          # (ascontiguousarray makes a scalar 1-d)
        if tuple(a.shape) != tuple(shape) or str(a.dtype) != dtype:
            raise MemschedError(f"input '{name}' must be {dtype}{list(shape)}, got {a.dtype}{list(a.shape)}")
        out.append(a)
    return out


def _write_harness(exp: MicroExport, sequence, build_dir: str, api: str = "auto") -> str:
    """Write harness_data.h/.c for the invocations' inputs ``sequence`` into ``build_dir``; returns the .c path.

    ``api``: ``"zero-copy"`` writes the inputs into the arena and calls ``<p>_invoke``
    (models whose inputs and outputs live in the arena), ``"run"`` calls ``<p>_run``
    on separate buffers, ``"auto"`` the former when the model has it.
    """
    p, P = exp.name, exp.name.upper()
    output_dir(build_dir, drop_links=True)
    if api not in ("auto", "zero-copy", "run"):
        raise MemschedError(f"unknown harness api '{api}': use auto, zero-copy or run")
    if api == "zero-copy" and not exp.program.io_in_arena:
        raise MemschedError(f"model '{p}' keeps its inputs and outputs outside the arena: no zero-copy API")
    io = exp.program.io_in_arena and api != "run"
    h = [f"/* harness_data.h: test data for model '{p}', generated by tvm_memsched.micro */",
         "#ifndef HARNESS_DATA_H_", "#define HARNESS_DATA_H_", "#include <stdint.h>", f'#include "{p}.h"',
         '#include "tvm_memsched_rt.h"', f"#define HARNESS_RUN {p}_run",
         f"#define HARNESS_INVOCATIONS {len(sequence)}"] + ([f"#define HARNESS_INIT {p}_init"] if exp.states else []) + [
         f"#define HARNESS_NUM_INPUTS {P}_NUM_INPUTS", f"#define HARNESS_NUM_OUTPUTS {P}_NUM_OUTPUTS"] + (
        ["#define HARNESS_IO_IN_ARENA 1", f"#define HARNESS_INVOKE {p}_invoke",
         f"#define HARNESS_INPUT(i) {p}_input(i)", f"#define HARNESS_OUTPUT(k) {p}_output(k)"] if io else []) + [
         "extern const uint8_t* const harness_input_data[];", "extern void* const harness_input_buffers[];",
         "extern const void* const harness_inputs[];", "extern void* const harness_outputs[];",
         "extern const uint32_t harness_input_bytes[];", "extern const uint32_t harness_output_bytes[];",
         "#endif", ""]
    c = [f"/* harness_data.c: fixed input and I/O buffers for model '{p}', generated by tvm_memsched.micro */",
         '#include "harness_data.h"', ""]
    inputs = sequence[0]
    for j, invocation in enumerate(sequence):
        for i, a in enumerate(invocation):
            c.append(f"static const uint8_t input_{j}_{i}[{max(1, a.nbytes)}] = {{")
            c.append(c_byte_rows(a.tobytes()))
            c.append("};")
    n_in, n_out = len(inputs), len(exp.program.outputs)
    buffers_in = [] if io else [f"input_buffer_{i}" for i in range(n_in)]      # none: the arena holds them
    buffers_out = [] if io else [f"output_buffer_{i}" for i in range(n_out)]
    for i, a in enumerate(inputs if not io else []):
        c.append(f"static uint8_t input_buffer_{i}[{max(1, a.nbytes)}] __attribute__((aligned(16)));")
    for i in range(len(buffers_out)):
        c.append(f"static uint8_t output_buffer_{i}[{P}_OUTPUT_{i}_BYTES > 0 ? {P}_OUTPUT_{i}_BYTES : 1] "
                 "__attribute__((aligned(16)));")

    def table(decl, items, empty):
        return f"{decl}[{max(1, len(items))}] = {{{', '.join(items) if items else empty}}};"

    c += [table("const uint8_t* const harness_input_data",
                [f"input_{j}_{i}" for j in range(len(sequence)) for i in range(n_in)], "NULL"),
          table("void* const harness_input_buffers", buffers_in, "NULL"),
          table("const void* const harness_inputs", buffers_in, "NULL"),
          table("void* const harness_outputs", buffers_out, "NULL"),
          table("const uint32_t harness_input_bytes", [f"{a.nbytes}u" for a in inputs], "0u"),
          table("const uint32_t harness_output_bytes", [f"{P}_OUTPUT_{i}_BYTES" for i in range(n_out)], "0u"), ""]
    atomic_write(os.path.join(build_dir, "harness_data.h"), "\n".join(h))
    path = os.path.join(build_dir, "harness_data.c")
    atomic_write(path, "\n".join(c))
    return path


def _parse(exp: MicroExport, stdout: str):
    """(outputs of each invocation, stats, error) from the test program's output."""
    runs: list = []
    stats: dict = {}
    current = None
    error = None
    for line in stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(invocation|output|instructions|stack_used|workspace_high_water|error_call|"
                     r"profile_call|profile_instructions) (\d+)$", line)
        if m and m.group(1).startswith("profile_"):
            current = None
            if m.group(1) == "profile_call":
                stats["_call"] = int(m.group(2))
            elif "_call" in stats:
                stats.setdefault("profile", {})[stats.pop("_call")] = int(m.group(2))
        elif m:
            current = None
            if m.group(1) == "invocation":
                runs.append({})
            elif m.group(1) == "output" and runs:
                current = runs[-1].setdefault(int(m.group(2)), [])
            elif m.group(1) != "output":
                stats[m.group(1)] = int(m.group(2))
        elif line.startswith("error "):
            error = line[6:]
        elif line == "done" or line.startswith("tvm_memsched"):
            current = None
        elif current is not None and re.fullmatch(r"[0-9a-f]+", line):
            current.append(line)
    arrays = []
    for i, hexes in enumerate(runs):
        row = []
        for k, (shape, dtype) in enumerate(exp.program.outputs):
            data = bytes.fromhex("".join(hexes[k])) if k in hexes and len("".join(hexes[k])) % 2 == 0 else None
            want = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if data is not None and len(data) != want:
                error = error or (f"output {k} of invocation {i} has {len(data)} bytes, {want} expected "
                                  "(the program's output was cut off)")
                data = None
            row.append(None if data is None else np.frombuffer(data, dtype=dtype).reshape(shape).copy())
        arrays.append(row)
    return arrays, stats, error


def _run_complete(cmd, timeout, exp, attempts: int = 2):
    """Run the test program; once more when its printed outputs came out cut off (seen under heavy load:
    the program is deterministic, so a second complete run is the same run)."""
    for k in range(attempts):
        out = run_command(cmd, timeout=timeout)
        _, _, error = _parse(exp, out.stdout)
        if out.returncode != 0 or error is None or "cut off" not in error or k == attempts - 1:
            return out
    return out


def _compare(outputs, reference, rtol, atol):
    err, ok = 0.0, len(outputs) == len(reference)
    for a, b in zip(outputs, reference):
        if a is None or a.shape != b.shape:
            return math.inf, False
        if a.size:
            d = difference(a, b)            # NaN where the reference has NaN is equal
            err = max(err, float(np.max(d)))
            if np.issubdtype(b.dtype, np.floating):
                with np.errstate(invalid="ignore"):
                    ok = ok and bool(np.all(d <= atol + rtol * np.nan_to_num(np.abs(b.astype(np.float64)))))
            else:
                ok = ok and bool(np.array_equal(a, b))
    return err, ok


def _finish(exp, mode, out, sequence, reference, check, rtol, atol, warnings, program, stack_reserved=None,
            reference_name="TVM", stack_estimated=None):
    runs, stats, error = _parse(exp, out.stdout)
    used = stats.get("stack_used")
    if stack_estimated is not None and used is not None and used > stack_estimated + _MEASURED_STACK_SLACK:
        raise MemschedError(f"{exp.name}_run used {used:,} B of stack in {mode}, more than the {stack_estimated:,} B "
                            f"estimated from GCC's stack usage (+{_MEASURED_STACK_SLACK} B for the interrupt and "
                            "harness frames): the RAM total would be understated")
    if out.returncode != 0 or error is not None:
        if error is not None and "cut off" in error and out.returncode == 0:
            raise MemschedError(f"the test program ({mode}): {error}")
        if error is not None:
            raise MemschedError(f"{exp.name}_run failed in kernel call {stats.get('error_call', '?')}: {error}")
        tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-5:])
        raise MemschedError(f"the test program exited with status {out.returncode} ({mode}):\n{tail}")
    if len(runs) != len(sequence) or any(a is None for r in runs for a in r):
        raise MemschedError(f"the test program printed no complete output ({mode})")
    if check and reference is None:
        reference = reference_sequence(exp.mod, sequence, exp.states) if exp.states or len(sequence) > 1 \
            else [reference_outputs(exp.mod, sequence[0])]
    err, ok = 0.0, True
    if reference is not None:
        if len(reference) != len(runs):
            raise MemschedError(f"{len(reference)} reference invocation(s) for {len(runs)} run(s)")
        for got, want in zip(runs, reference):
            e, o = _compare(got, want, rtol, atol)
            err, ok = max(err, e), ok and o
    return RunResult(mode, runs[0], None if reference is None else reference[0], err, ok, out.seconds,
                     stats.get("workspace_high_water", 0), stats.get("instructions"), stats.get("stack_used"),
                     stack_reserved, warnings, out.stdout, program, runs, reference, reference_name,
                     stats.get("profile", {}), getattr(exp, "macs", 0) or 0)


def _sequence(exp, inputs, sequence, seed, reference):
    """The invocations' checked inputs and the reference per invocation (``reference`` as given: the outputs of
    one run when ``inputs`` is given, of every invocation when ``sequence`` is)."""
    if inputs is not None and sequence is not None:
        raise MemschedError("give inputs or sequence, not both")
    if sequence is None:
        sequence = [default_inputs(exp, seed) if inputs is None else inputs]
        reference = None if reference is None else [reference]
    if not sequence:
        raise MemschedError("the input sequence is empty")
    return [_check_inputs(exp, x) for x in sequence], reference


def run_host(exp: MicroExport, inputs=None, *, sequence=None, seed: int = 0, reference=None, check: bool = True,
             rtol: float = 1e-4, atol: float = 1e-4, timeout: float = 120, reference_name: str = "TVM",
             api: str = "auto", cflags=()) -> RunResult:
    """Build the exported C with the host compiler, run it on ``inputs`` and compare with TVM.

    ``inputs`` default to :func:`default_inputs` (``seed``); ``reference`` (TVM's
    outputs) is computed when ``check`` and not given. ``sequence`` (a list of
    input lists, instead of ``inputs``) invokes the model on each in turn;
    ``reference`` then holds the outputs of every invocation. ``api``: which entry
    point the test program uses (``_write_harness``). ``cflags``: extra compiler flags (e.g.
    ``-DTMS_NN_EMULATE_DSP`` runs the microkernel library's DSP path in portable C).
    """
    sequence, reference = _sequence(exp, inputs, sequence, seed, reference)
    build_dir = os.path.join(exp.out_dir, "run", "host")
    data = _write_harness(exp, sequence, build_dir, api)
    objs = compile_model(exp, build_dir, None, extra_sources=[runtime_file("harness.c"), data],
                         extra_flags=["-I", build_dir, *cflags])
    exe = os.path.join(build_dir, f"{exp.name}_test")
    link(host_cc(), objs.objects, exe, ["-lm"])
    out = run_command([exe], timeout=timeout)
    return _finish(exp, "host", out, sequence, reference, check, rtol, atol, objs.warnings, exe,
                   reference_name=reference_name)


def run_qemu(exp: MicroExport, inputs=None, *, sequence=None, seed: int = 0, reference=None, check: bool = True,
             rtol: float = 1e-4, atol: float = 1e-4, timeout: float = 600, board=None,
             reference_name: str = "TVM", profile: bool = False) -> RunResult:
    """Cross-compile the exported C for its board, run it on QEMU and compare with TVM (``inputs``,
    ``sequence`` and ``reference`` as for :func:`run_host`).

    ``profile``: also time every kernel call of the first invocation (``.profile``,
    :func:`profile_table`); the hooks add a few instructions per call to the total.

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
    sequence, reference = _sequence(exp, inputs, sequence, seed, reference)
    build_dir = os.path.join(exp.out_dir, "run", board.name)
    data = _write_harness(exp, sequence, build_dir)
    num, den = board.machine.instructions_per_tick
    objs = compile_model(exp, build_dir, board, extra_sources=[runtime_file("harness.c"), runtime_file("startup.c"),
                                                               data],
                         extra_flags=["-I", build_dir, f"-DHARNESS_TICK_INSTRUCTIONS={num}u",
                                      f"-DHARNESS_TICK_DIVISOR={den}u"]
                         + (["-DTVM_MEMSCHED_PROFILE"] if profile else []))
    estimated = stack_estimate(exp, objs.usage, objs.graph)
    stack = -(-(estimated + HARNESS_STACK_BYTES) // 8) * 8
    script = board_linker_script(os.path.join(build_dir, "firmware.ld"), board, stack)
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
    out = _run_complete(cmd, timeout, exp)
    return _finish(exp, f"qemu {machine}" + (f" as {board.name}" if board.qemu_machine is None else ""), out,
                   sequence, reference, check, rtol, atol, objs.warnings, elf, stack, reference_name, estimated)


def profile_table(exp: MicroExport, result: RunResult, top: int = 12) -> str:
    """Where a profiled run's instructions went, by kernel: calls, instructions, share, multiply-accumulates
    and instructions per multiply-accumulate (where the kernel's operator is known)."""
    if not result.profile:
        return "  no profile (run with profile=True on a Cortex-M board)"
    rows: dict = {}
    for k, n in result.profile.items():
        if k >= len(exp.program.calls):
            continue
        name = exp.program.calls[k].kernel
        r = rows.setdefault(name, [0, 0, 0])
        r[0] += 1
        r[1] += n
        macs = exp.call_macs[k] if k < len(exp.call_macs) else None
        r[2] += macs or 0
    total = sum(r[1] for r in rows.values()) or 1
    lib = exp.library_kernels
    table = [("kernel", "code", "calls", "instructions", "share", "MACs", "per MAC")]
    for name, (calls, n, macs) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:top]:
        table.append((name, lib.get(name, "TVM C"), str(calls), f"{n:,}", f"{100 * n / total:.1f}%",
                      f"{macs:,}" if macs else "-", f"{n / macs:.2f}" if macs else "-"))
    if len(rows) > top:
        rest = sorted(rows.values(), key=lambda r: -r[1])[top:]
        n = sum(r[1] for r in rest)
        table.append((f"({len(rest)} more)", "", str(sum(r[0] for r in rest)), f"{n:,}", f"{100 * n / total:.1f}%",
                      "", ""))
    w = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w[i]) if i < 2 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip()
                     for r in table)


def profile_layers(exp: MicroExport, result: RunResult) -> list[dict]:
    """One row per kernel call of a profiled run, in the order they ran: the kernel, what computes it (the
    library's operator or TVM's C), its instructions, multiply-accumulates where known, and the arena bytes
    live during the call (:func:`.timeline.live_bytes`; the call's own inputs, outputs and workspace included)."""
    from .timeline import live_bytes

    calls = exp.program.calls
    live = live_bytes(exp.timeline, len(calls)) if exp.timeline else [None] * len(calls)
    lib = exp.library_kernels
    return [{"call": k, "kernel": c.kernel, "code": lib.get(c.kernel, "TVM C"),
             "instructions": result.profile.get(k), "macs": exp.call_macs[k] if k < len(exp.call_macs) else None,
             "live_bytes": live[k]} for k, c in enumerate(calls)]
