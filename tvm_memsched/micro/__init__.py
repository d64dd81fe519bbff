"""Microcontroller target: a Relax model as C with one static arena, for Cortex-M boards.

TVM 0.27 has no microTVM; this package is the path from a Relax module to a
microcontroller. :func:`export` compiles the model with tvm_memsched's pipeline
(memory-aware order, one arena holding every intermediate tensor and every
kernel's workspace) and TVM's C code generator, and writes a self-contained C
project: ``model.h``/``model.c`` (``int model_run(const void* const* inputs,
void* const* outputs)``, kernels called in the scheduled order, ``static uint8_t
model_arena[MODEL_ARENA_BYTES]``), ``model_params.c`` (constants in flash),
``model_kernels.c`` (TVM's kernels), a tiny runtime shim in place of libtvm and
TVM's C headers. :func:`run_host` and :func:`run_qemu` build and run it and
compare the outputs with TVM's; :mod:`.boards` knows the boards.
:func:`write_mlperf_tiny_harness` writes the device side of MLPerf Tiny's
runner (EEMBC EnergyRunner) for an export and :func:`run_mlperf_tiny_qemu`
drives it in QEMU over its serial port (:mod:`.mlperf_tiny`).

Only :mod:`.boards` is imported eagerly (no TVM needed to list boards).

Example
-------
>>> from tvm_memsched import micro
>>> micro.get_board("mps2-an386").core
'Cortex-M4F'
>>> "sparkfun_edge" in micro.board_names()
True
"""

from .boards import BOARDS, Board, board_names, boards_table, get_board  # noqa: F401

__all__ = ["export", "run_host", "run_qemu", "reference_outputs", "default_inputs", "MicroExport", "RunResult",
           "PlanSizes", "DoesNotFitError", "ToolchainError", "Board", "BOARDS", "get_board", "board_names",
           "boards_table", "boards", "write_mlperf_tiny_harness", "run_mlperf_tiny_qemu"]

_LAZY = {
    "export": ("tvm_memsched.micro.builder", "export"),
    "MicroExport": ("tvm_memsched.micro.builder", "MicroExport"),
    "PlanSizes": ("tvm_memsched.micro.builder", "PlanSizes"),
    "DoesNotFitError": ("tvm_memsched.micro.builder", "DoesNotFitError"),
    "run_host": ("tvm_memsched.micro.run", "run_host"),
    "run_qemu": ("tvm_memsched.micro.run", "run_qemu"),
    "reference_outputs": ("tvm_memsched.micro.run", "reference_outputs"),
    "default_inputs": ("tvm_memsched.micro.run", "default_inputs"),
    "RunResult": ("tvm_memsched.micro.run", "RunResult"),
    "ToolchainError": ("tvm_memsched.micro.toolchain", "ToolchainError"),
    "write_mlperf_tiny_harness": ("tvm_memsched.micro.mlperf_tiny", "write_harness"),
    "run_mlperf_tiny_qemu": ("tvm_memsched.micro.mlperf_tiny", "run_harness_qemu"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tvm_memsched.micro' has no attribute {name!r}")
