"""An exported model as a CMake library any firmware project can add, with a runnable example (:func:`write_cmake`).

:func:`tvm_memsched.micro.builder.export` calls :func:`write_cmake` after
writing the C files, so ``tvm-memsched micro MODEL --out DIR`` also leaves:

* ``DIR/CMakeLists.txt``: the static-library target ``<name>`` (the model's
  sources, its include directories) and ``tvm_memsched_runtime`` (the runtime
  shim and the microkernels, shared when several exported models are added to
  one firmware; when their microkernel variants differ, all variants are
  compiled, and models exported by different versions are refused by name).
  ``add_subdirectory(DIR)`` + ``target_link_libraries(app PRIVATE <name>)`` from
  plain CMake, the Raspberry Pi Pico SDK or a Zephyr application (the
  library then takes Zephyr's flags from ``zephyr_interface``); in ESP-IDF the
  folder is a component (``idf_component_register``). The code is compiled with
  ``-O2`` (``TVM_MEMSCHED_OPTIMIZE``), as the export measured it, after the
  project's own flags.
* ``DIR/sources.mk``: the same for a plain Makefile (``include DIR/sources.mk``;
  variables ``<name>_SRCS``, ``<name>_INCLUDES``, ``<name>_CFLAGS``,
  ``<name>_LDLIBS`` and, from the first model's fragment,
  ``TVM_MEMSCHED_RUNTIME_SRCS``).
* ``DIR/example/``: a minimal application (``main.c``; ``main.cpp``, the same in
  C++17, with ``-DTMS_EXAMPLE_CXX=ON``) that runs the model on a fixed input
  and prints its outputs, the QEMU machine's start-up code and linker script,
  toolchain files for arm-none-eabi-gcc and for Clang (``--target=thumbv*``,
  ld.lld, newlib from the GNU toolchain) with the board's core flags, and a
  ``run`` target that runs it in ``qemu-system-arm``. Written for boards QEMU
  runs (their own machine or a stand-in).

The example prints what the test program of :func:`.run.run_qemu` prints
(``invocation 0``, ``output K``, hex rows), so its outputs can be checked
against ``micro --run``'s with :func:`parse_example_output`.

Example
-------
>>> from tvm_memsched.micro.boards import get_board
>>> clang_triple(get_board("mps2-an386"))
'thumbv7em-none-eabihf'
>>> clang_triple(get_board("mps2-an385-m0plus"))
'thumbv6m-none-eabi'
"""

from __future__ import annotations

import os

import numpy as np

from ..core.errors import MemschedError
from ..core.files import atomic_write, copy_file, output_dir
from .boards import Board
from .firmware import linker_script, runtime_file

__all__ = ["write_cmake", "clang_triple", "clang_cflags", "example_inputs", "parse_example_output", "EXAMPLE_STACK_MARGIN"]

#: stack bytes the example reserves beyond the model's estimate (main, printf and newlib's semihosting)
EXAMPLE_STACK_MARGIN = 2048
_TEMPLATES = "cmake"
_TRIPLES = {"cortex-m0": "thumbv6m", "cortex-m0plus": "thumbv6m", "cortex-m1": "thumbv6m", "cortex-m3": "thumbv7m",
            "cortex-m4": "thumbv7em", "cortex-m7": "thumbv7em", "cortex-m23": "thumbv8m.base",
            "cortex-m33": "thumbv8m.main", "cortex-m35p": "thumbv8m.main", "cortex-m55": "thumbv8.1m.main",
            "cortex-m85": "thumbv8.1m.main"}


def clang_triple(board: Board) -> str:
    """Clang's ``--target`` for ``board``'s core (``eabihf`` when it has a floating-point unit).

    >>> from tvm_memsched.micro.boards import get_board
    >>> clang_triple(get_board("mps3-an547"))
    'thumbv8.1m.main-none-eabihf'
    """
    arch = _TRIPLES.get(board.cpu)
    if arch is None:
        raise MemschedError(f"no Clang target known for -mcpu={board.cpu} (board {board.name})")
    return f"{arch}-none-{'eabihf' if board.fpu else 'eabi'}"


def clang_cflags(board: Board) -> list[str]:
    """The code-generation flags of ``board``'s core for Clang (GCC's ``-mfpu=auto``, which takes the FPU
    and Helium from ``-mcpu``, is Clang's default and not an option it knows).

    >>> from tvm_memsched.micro.boards import get_board
    >>> clang_cflags(get_board("mps3-an547"))
    ['-mcpu=cortex-m55', '-mthumb', '-mfloat-abi=hard']
    """
    return [f for f in board.cflags() if f != "-mfpu=auto"]


def example_inputs(exp) -> list[np.ndarray]:
    """The fixed input the example runs: seeded random arrays for ``main``'s parameters other than its states,
    the first input ``micro --run`` uses (:func:`.run.default_inputs` with seed 0)."""
    from ..relax.compare import random_inputs

    state_params = {s.param for s in exp.states}
    return [a for i, a in enumerate(random_inputs(exp.mod["main"], 0)) if i not in state_params]


def _template(name: str, values: dict) -> str:
    with open(runtime_file(os.path.join(_TEMPLATES, name)), encoding="utf-8") as f:
        text = f.read()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def _hex_rows(data: bytes) -> str:
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
    return ",\n".join(f"    {r}" for r in rows) if rows else "    0"


def _inputs_source(exp, inputs) -> tuple[str, str]:
    p, P = exp.name, exp.name.upper()
    h = [f"/* example_input.h: a fixed input for model '{p}' (generated by tvm_memsched.micro) */",
         f"#ifndef {P}_EXAMPLE_INPUT_H_", f"#define {P}_EXAMPLE_INPUT_H_", "#include <stdint.h>", f'#include "{p}.h"',
         "#ifdef __cplusplus", 'extern "C" {', "#endif",
         f"extern const uint8_t* const example_input[{P}_NUM_INPUTS > 0 ? {P}_NUM_INPUTS : 1];",
         "#ifdef __cplusplus", "}", "#endif", "#endif", ""]
    c = [f"/* example_input.c: a fixed input for model '{p}' (generated by tvm_memsched.micro) */",
         '#include "example_input.h"', ""]
    for i, a in enumerate(inputs):
        c += [f"static const uint8_t input_{i}[{max(1, a.nbytes)}] = {{", _hex_rows(a.tobytes()), "};"]
    names = [f"input_{i}" for i in range(len(inputs))] or ["0"]
    c += [f"const uint8_t* const example_input[{P}_NUM_INPUTS > 0 ? {P}_NUM_INPUTS : 1] = {{{', '.join(names)}}};",
          ""]
    return "\n".join(h), "\n".join(c)


def _main_source(exp, cxx: bool) -> str:
    p, P = exp.name, exp.name.upper()
    n_in, n_out = len(exp.program.inputs), len(exp.program.outputs)
    cast = (lambda t, e: f"static_cast<{t}>({e})") if cxx else (lambda t, e: f"({t})({e})")
    lines = [f"/* {'main.cpp (C++17)' if cxx else 'main.c'}: runs model '{p}' once on a fixed input and prints its "
             "outputs as hex bytes.",
             " * Generated by tvm_memsched.micro as an example of the model's API; see "
             f"{p}.h. */",
             "#include <stdint.h>", "#include <stdio.h>", "#include <string.h>", "",
             '#include "example_input.h"', f'#include "{p}.h"', "",
             "/* the caller's buffers (the model keeps everything else in its static arena) */"]
    for i in range(n_in):
        lines.append(f"static uint8_t input_{i}[{P}_INPUT_{i}_BYTES > 0 ? {P}_INPUT_{i}_BYTES : 1] "
                     "__attribute__((aligned(16)));")
    for k in range(n_out):
        lines.append(f"static uint8_t output_{k}[{P}_OUTPUT_{k}_BYTES > 0 ? {P}_OUTPUT_{k}_BYTES : 1] "
                     "__attribute__((aligned(16)));")
    lines += [f"static const void* const inputs[{max(1, n_in)}] = {{{', '.join(f'input_{i}' for i in range(n_in)) or '0'}}};",
              f"static void* const outputs[{max(1, n_out)}] = {{{', '.join(f'output_{k}' for k in range(n_out)) or '0'}}};",
              f"static const uint32_t output_bytes[{max(1, n_out)}] = "
              f"{{{', '.join(f'{P}_OUTPUT_{k}_BYTES' for k in range(n_out)) or '0'}}};", "",
              "static void print_hex(const uint8_t* p, uint32_t n) {",
              "  for (uint32_t i = 0; i < n; ++i) {",
              f"    printf(\"%02x\", {cast('unsigned', 'p[i]')});",
              "    if (i % 32u == 31u || i + 1u == n) printf(\"\\n\");",
              "  }", "}", "",
              "int main(void) {"]
    for i in range(n_in):
        lines.append(f"  memcpy(input_{i}, example_input[{i}], {P}_INPUT_{i}_BYTES);")
    lines += [f"  int rc = {p}_run(inputs, outputs);",
              "  if (rc != 0) {",
              f"    printf(\"error %s\\n\", {p}_last_error());",
              "    return 1;", "  }",
              "  printf(\"invocation 0\\n\");",
              f"  for (int k = 0; k < {P}_NUM_OUTPUTS; ++k) {{",
              "    printf(\"output %d\\n\", k);",
              f"    print_hex({cast('const uint8_t*', 'outputs[k]')}, output_bytes[k]);",
              "  }",
              "  printf(\"done\\n\");",
              "  return 0;", "}", ""]
    return "\n".join(lines)


def write_cmake(exp) -> dict:
    """Write ``CMakeLists.txt`` and ``sources.mk`` into the export's folder and, for a board QEMU runs,
    ``example/``;
    returns ``{kind: path}`` of what it wrote.

    >>> import inspect
    >>> list(inspect.signature(write_cmake).parameters)
    ['exp']
    """
    board, out = exp.board, exp.out_dir
    model_sources = [os.path.basename(exp.files[k]) for k in ("source", "kernels", "params")]
    runtime_sources = ["tvm_memsched_rt.c"] + (["tms_nn.c"] if "tms_nn_c" in exp.files else [])
    headers = ["tms_nn.h", "tms_nn_float.inc"] if "tms_nn_c" in exp.files else []
    cpu_flags = " ".join(board.cflags())
    values = {"NAME": exp.name, "BOARD": board.name, "CORE": board.core, "CPU_FLAGS": cpu_flags,
              "CLANG_CPU_FLAGS": " ".join(clang_cflags(board)),
              "MODEL_SOURCES": " ".join(model_sources), "RUNTIME_SOURCES": " ".join(runtime_sources),
              "RUNTIME_HEADERS": " ".join(headers), "TRIPLE": clang_triple(board) if board.cpu in _TRIPLES else "",
              "MODEL_SOURCES_MK": " ".join(f"$({exp.name}_DIR)/{f}" for f in model_sources),
              "RUNTIME_SOURCES_MK": " ".join(f"$({exp.name}_DIR)/{f}" for f in runtime_sources)}
    files = {"cmake": os.path.join(out, "CMakeLists.txt"), "make": os.path.join(out, "sources.mk")}
    atomic_write(files["cmake"], _template("library.cmake.in", values))
    atomic_write(files["make"], _template("sources.mk.in", values))
    if board.emulator is None:
        return files
    ex = output_dir(out, "example")
    machine = board.emulator
    values["MACHINE"] = machine
    stack = -(-((exp.stack_bytes or 4096) + EXAMPLE_STACK_MARGIN) // 8) * 8
    linker_script(os.path.join(ex, f"{machine}.ld"), min(board.flash_bytes, board.machine.code_bytes),
                  min(board.sram_bytes, board.machine.ram_bytes), stack, board)
    copy_file(runtime_file("startup.c"), os.path.join(ex, "startup.c"))
    h, c = _inputs_source(exp, example_inputs(exp))
    written = {"example_cmake": ("CMakeLists.txt", _template("example.cmake.in", values)),
               "example_main": ("main.c", _main_source(exp, cxx=False)),
               "example_main_cxx": ("main.cpp", _main_source(exp, cxx=True)),
               "example_input_h": ("example_input.h", h), "example_input_c": ("example_input.c", c),
               "toolchain_gcc": ("toolchain-gcc.cmake", _template("toolchain-gcc.cmake.in", values)),
               "toolchain_clang": ("toolchain-clang.cmake", _template("toolchain-clang.cmake.in", values))}
    for kind, (fname, text) in written.items():
        files[kind] = os.path.join(ex, fname)
        atomic_write(files[kind], text)
    files["example"] = ex
    return files


def parse_example_output(exp, stdout: str) -> list[np.ndarray]:
    """The outputs the example printed, as arrays of the model's output shapes and types; a
    :class:`MemschedError` naming what is missing when it did not print them all.

    >>> import inspect
    >>> list(inspect.signature(parse_example_output).parameters)
    ['exp', 'stdout']
    """
    hexes: dict = {}
    current = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("output "):
            current = hexes.setdefault(int(line.split()[1]), [])
        elif line.startswith("error "):
            raise MemschedError(f"the example failed: {line[6:]}")
        elif current is not None and line and all(ch in "0123456789abcdef" for ch in line):
            current.append(line)
        else:
            current = None
    arrays = []
    for k, (shape, dtype) in enumerate(exp.program.outputs):
        data = bytes.fromhex("".join(hexes.get(k, [])))
        want = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if len(data) != want:
            raise MemschedError(f"the example printed {len(data)} bytes of output {k}, {want} expected")
        arrays.append(np.frombuffer(data, dtype=dtype).reshape(shape).copy())
    return arrays
