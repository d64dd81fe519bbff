"""MLPerf Tiny's runner (EEMBC EnergyRunner) driving an exported model: the device side, and a QEMU driver.

MLPerf Tiny measures a device under test over a serial port: the runner sends ASCII commands ending in
``%`` (``name``, ``profile``, ``db load N``, ``db HEXBYTES``..., ``infer N W``, ``results``) and reads
lines ending in ``\\r\\n`` until ``m-ready``. :func:`write_harness` writes that device side for an
exported model (:class:`~tvm_memsched.micro.builder.MicroExport`) into a folder: the protocol and the
``th_*`` functions of MLPerf Tiny's API (``runtime/mlperf_tiny/*.c``, our own code under the API's
names, copied), a generated ``th_config.h``/``th_config.c`` (the model's entry points, inputs,
outputs and quantization) and a README with the build and the commands.

What the runner sends (:class:`HarnessSpec`): the model's inputs one after the other, each as the
model stores it (int8/uint8 as is; a float32 input as its little-endian float32 bytes, 4 per value:
what the anomaly-detection runner sends). ``benchmark`` selects MLPerf Tiny's own conventions
instead: ``ic01``/``vww01`` send uint8 pixels, made int8 by subtracting 128 for an int8 model;
``ad01`` sends float32 values, quantized on the device for an int8/uint8 model (rounding half away
from zero, as the reference submission), and its result is one number, the mean squared difference
between the dequantized output and the input; ``kws01`` sends the int8 features as stored.

What the device answers (``m-results-[...]``): every output element in order, quantized integers
dequantized (``(q - zero_point) * scale`` in float32, the reference submissions' arithmetic) with at
least their 3 decimals and as many more as the output's quantization step needs to be told apart,
float outputs with 9 significant digits, other integers as integers. The quantization comes from the
``.tflite`` file (``tflite=``); without one, integer outputs are printed as integers.

:func:`run_harness_qemu` builds the firmware for the export's board (the CMSDK UART0 of QEMU's
MPS2/MPS3 machines, :attr:`~tvm_memsched.micro.boards.Machine.uart_base`; SysTick timestamps, so
``m-lap-us`` differences times 1000 are instructions under ``-icount shift=0``) and drives it over
``-serial stdio`` with a command sequence, waiting for ``m-ready`` after each command as the runner
does; :func:`run_harness_host` does the same with the host compiler (stdin/stdout).
:func:`runner_commands` is the runner's sequence for given inputs, :func:`parse_results` reads the
``m-results`` lines and :func:`compare_results` checks them against reference outputs.

Example
-------
>>> runner_commands(bytes([1, 2, 255]), chunk=2)
['name', 'profile', 'db load 3', 'db 0102', 'db ff', 'infer 1 0', 'results']
>>> parse_results("m-infer-done\\r\\nm-results-[0.125,-1.500]\\r\\nm-ready\\r\\n")
[[0.125, -1.5]]
>>> print(c_string_literal('a "quoted" name\\n??/'))
"a \\"quoted\\" name\\012\\?\\?/"
>>> fixed_decimals(0.00468572)
3
>>> format_fixed(-0.0625, 3)
'-0.063'
"""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import MemschedError, UnsupportedError
from ..core.files import atomic_write, copy_file, output_dir
from .boards import get_board
from .firmware import arm_link_flags, board_linker_script, compile_model, runtime_file, stack_estimate
from .inputs import default_inputs
from .literals import c_literals, c_string_literal
from .toolchain import find_tool, host_cc, link

__all__ = ["BENCHMARKS", "HarnessSpec", "InputSpec", "OutputSpec", "HarnessFiles", "Transcript", "ResultCheck",
           "harness_spec", "config_files", "write_harness", "runner_commands", "parse_results", "parse_laps",
           "compare_results", "run_harness_qemu", "run_harness_host", "fixed_decimals",
           "format_fixed", "CHUNK_BYTES", "HARNESS_FILES"]

#: MLPerf Tiny's benchmarks (the model versions ``profile`` reports) and what their runner sends
BENCHMARKS = {
    "kws01": "keyword spotting: int8 features as stored",
    "vww01": "visual wake words: uint8 pixels (minus 128 for an int8 input)",
    "ic01": "image classification: uint8 pixels (minus 128 for an int8 input)",
    "ad01": "anomaly detection: float32 values (quantized for an int8/uint8 input); result: mean squared error",
}
#: bytes per ``db`` command, as MLPerf Tiny's Python runner sends them (benchmark/runner/device_under_test.py: 62
#: hex digits, within the device's 80-character command buffer)
CHUNK_BYTES = 31
#: the files copied from ``runtime/mlperf_tiny`` (the ports: ``th_port_cmsdk.c`` for MPS2/MPS3, ``th_port_stdio.c``)
HARNESS_FILES = ("ee_protocol.h", "ee_protocol.c", "th_api.h", "th_model.c", "th_io.c", "th_main.c",
                 "th_port_cmsdk.c", "th_port_stdio.c")
_COMMON = ("ee_protocol.c", "th_model.c", "th_io.c", "th_main.c", "th_config.c")
_VENDOR = "tvm_memsched"
_UART_BAUD = 115200
#: stack for the harness around the model: the parser's command copies, th_printf, th_results
_HARNESS_STACK = 1536
_TYPES = {"int8": "TH_TYPE_INT8", "uint8": "TH_TYPE_UINT8", "int16": "TH_TYPE_INT16", "uint16": "TH_TYPE_UINT16",
          "int32": "TH_TYPE_INT32", "uint32": "TH_TYPE_UINT32", "int64": "TH_TYPE_INT64", "uint64": "TH_TYPE_UINT64",
          "float32": "TH_TYPE_FLOAT32", "float64": "TH_TYPE_FLOAT64", "bool": "TH_TYPE_BOOL"}
_CONVERSIONS = {"copy": "TH_WIRE_COPY", "uint8-to-int8": "TH_WIRE_UINT8_TO_INT8",
                "float-to-int8": "TH_WIRE_FLOAT_TO_INT8", "float-to-uint8": "TH_WIRE_FLOAT_TO_UINT8"}
_MSE_DECIMALS = 6


# ------------------------------------------------------------------ C text
def _protocol_text(text: str) -> str:
    """``text`` safe inside a ``m-...-[...]`` message: printable ASCII without brackets or ``%``."""
    return "".join(c if 32 <= ord(c) < 127 and c not in "[]%" else "_" for c in str(text)) or "_"


def fixed_decimals(scale: float) -> int:
    """Decimals that print every step of a quantization ``scale`` distinctly (a quarter step), at least 3
    (the reference submissions' ``%0.3f``), at most 9."""
    if not scale > 0 or not math.isfinite(scale):
        return 9
    return int(min(9, max(3, math.ceil(math.log10(4.0 / scale)))))


def format_fixed(value: float, decimals: int) -> str:
    """``value`` as the device's ``th_print_fixed`` prints it (the same double arithmetic: |v| * 10**d + 0.5,
    truncated; the sign of a negative value kept even when it rounds to zero)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    scale = 10 ** decimals
    m = int(abs(value) * float(scale) + 0.5)
    text = f"{m // scale}" + (f".{m % scale:0{decimals}d}" if decimals else "")
    return "-" + text if value < 0 else text


# ------------------------------------------------------------------ what the runner sends, what comes back
@dataclass(frozen=True)
class InputSpec:
    """One model input as the runner sends it: ``conversion`` is how the device makes the model's bytes of
    the downloaded ones (``copy``, ``uint8-to-int8``, ``float-to-int8``, ``float-to-uint8``)."""

    name: str
    shape: tuple
    dtype: str
    conversion: str = "copy"
    scale: float | None = None
    zero_point: int = 0

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.count * np.dtype(self.dtype).itemsize

    @property
    def wire_bytes(self) -> int:
        return self.count * 4 if self.conversion.startswith("float-to") else self.nbytes


@dataclass(frozen=True)
class OutputSpec:
    """One model output; ``scale`` None: not dequantized."""

    shape: tuple
    dtype: str
    scale: float | None = None
    zero_point: int = 0

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def decimals(self) -> int:
        return fixed_decimals(self.scale) if self.scale is not None else 0


@dataclass
class HarnessSpec:
    """The model as the harness sees it: C prefix, the version ``profile`` reports, inputs and outputs."""

    name: str
    model_version: str
    benchmark: str | None
    inputs: list
    outputs: list
    io_in_arena: bool
    mse: bool = False

    @property
    def wire_bytes(self) -> int:
        """What ``db load N`` announces: every input's downloaded bytes."""
        return sum(i.wire_bytes for i in self.inputs)

    def wire(self, inputs) -> bytes:
        """The bytes the runner sends for the model inputs ``inputs`` (arrays in the model's dtypes); the
        device's conversion of them gives ``inputs`` back exactly (checked)."""
        if len(inputs) != len(self.inputs):
            raise MemschedError(f"model '{self.name}' takes {len(self.inputs)} input(s), got {len(inputs)}")
        parts = []
        for a, spec in zip(inputs, self.inputs):
            a = np.asarray(a)
            if a.size != spec.count or str(a.dtype) != spec.dtype:
                raise MemschedError(f"input '{spec.name}' must be {spec.dtype}{list(spec.shape)}, got "
                                    f"{a.dtype}{list(a.shape)}")
            if spec.conversion == "uint8-to-int8":
                parts.append((a.view(np.uint8) ^ 0x80).tobytes())
            elif spec.conversion.startswith("float-to"):
                v = (a.astype(np.int64) - spec.zero_point).astype(np.float32) * np.float32(spec.scale)
                parts.append(v.astype("<f4").tobytes())
            else:
                parts.append(a.tobytes())
        data = b"".join(parts)
        back = self.model_inputs(data)
        if any(not np.array_equal(x.reshape(-1), np.asarray(a).reshape(-1)) for x, a in zip(back, inputs)):
            raise MemschedError("these inputs do not survive the runner's conversion")
        return data

    def model_inputs(self, data: bytes) -> list[np.ndarray]:
        """The model inputs the device makes of downloaded bytes (``th_load_tensor``'s arithmetic)."""
        if len(data) != self.wire_bytes:
            raise MemschedError(f"{len(data)} bytes for inputs of {self.wire_bytes}")
        out, at = [], 0
        for spec in self.inputs:
            chunk, at = data[at:at + spec.wire_bytes], at + spec.wire_bytes
            if spec.conversion == "uint8-to-int8":
                a = (np.frombuffer(chunk, np.uint8) ^ 0x80).view(np.int8)
            elif spec.conversion.startswith("float-to"):
                t = (np.frombuffer(chunk, "<f4").astype(np.float32) / np.float32(spec.scale)).astype(np.float64)
                lo, hi = (-128, 127) if spec.conversion == "float-to-int8" else (0, 255)
                with np.errstate(invalid="ignore"):
                    r = np.where(t >= 0, np.floor(t + 0.5), -np.floor(-t + 0.5))
                    r = np.where(np.isnan(t), 0, np.clip(r, -1e9, 1e9)) + spec.zero_point
                a = np.clip(r, lo, hi).astype(spec.dtype)
            else:
                a = np.frombuffer(chunk, spec.dtype)
            out.append(a.reshape(spec.shape).copy())
        return out

    def expected(self, outputs, data: bytes) -> list[str]:
        """What ``m-results-[...]`` holds for the model outputs ``outputs`` (and the downloaded ``data``, for
        ``ad01``), item by item, as the device formats it (floats as Python's shortest repr: compare them
        with a tolerance, :func:`compare_results`)."""
        if len(outputs) != len(self.outputs):
            raise MemschedError(f"{len(outputs)} output(s) for a model of {len(self.outputs)}")
        if self.mse:
            y = self._values(self.outputs[0], outputs[0]).astype(np.float32)
            x = np.frombuffer(data[:self.inputs[0].wire_bytes], "<f4").astype(np.float32)
            total = np.float32(0)
            for d in (y - x).astype(np.float32):
                total = np.float32(total + np.float32(d * d))
            return [format_fixed(float(np.float32(total / np.float32(len(x)))), _MSE_DECIMALS)]
        items = []
        for spec, a in zip(self.outputs, outputs):
            v = self._values(spec, a)
            if spec.scale is not None:
                items += [format_fixed(float(x), spec.decimals) for x in v]
            elif v.dtype.kind == "f":
                items += [repr(float(x)) for x in v]
            else:
                items += [str(int(x)) for x in v]
        return items

    @staticmethod
    def _values(spec: OutputSpec, a) -> np.ndarray:
        a = np.asarray(a).reshape(-1)
        if spec.scale is None:
            return a.astype(np.uint8) if a.dtype == bool else a
        return (a.astype(np.int64) - spec.zero_point).astype(np.float32) * np.float32(spec.scale)


def _quantization(buf: bytes, exp):
    """``([(scale, zp) | None per input], [... per output])`` of the ``.tflite`` ``buf`` for ``exp``'s inputs and
    outputs (subgraph 0's, in order; they must match the export's dtypes and sizes)."""
    from ..tflite.builder import load, type_name

    sg = load(bytes(buf)).subgraphs[0]

    def params(indices, spec, what):
        if len(indices) != len(spec):
            raise UnsupportedError(f"the .tflite has {len(indices)} {what}(s), the export {len(spec)}")
        out = []
        for i, (shape, dtype) in zip(indices, spec):
            t = sg.tensors[i]
            tdtype = type_name(t.type).lower()
            size = int(np.prod([int(d) for d in (t.shape if t.shape is not None else [])], dtype=np.int64))
            if tdtype != dtype or size != int(np.prod(shape, dtype=np.int64)):
                raise UnsupportedError(f"the .tflite's {what} {i} is {tdtype} of {size} elements, the export's "
                                       f"{dtype}{list(shape)}")
            q = t.quantization
            scale = [] if q is None or q.scale is None else [float(s) for s in np.asarray(q.scale).reshape(-1)]
            zps = [0] if q is None or q.zeroPoint is None else [int(z) for z in np.asarray(q.zeroPoint).reshape(-1)]
            if dtype.startswith(("int", "uint")) and len(scale) == 1 and scale[0] > 0:
                out.append((float(np.float32(scale[0])), zps[0] if zps else 0))
            elif len(scale) > 1:
                raise UnsupportedError(f"the .tflite's {what} {i} is quantized per channel: the harness prints "
                                       "per-tensor quantized outputs only")
            else:
                out.append(None)
        return out

    program = exp.program
    return (params(list(sg.inputs), [(s, d) for _, s, d in program.inputs], "input"),
            params(list(sg.outputs), list(program.outputs), "output"))


def harness_spec(exp, tflite: bytes | None = None, benchmark: str | None = None,
                 model_version: str | None = None) -> HarnessSpec:
    """The :class:`HarnessSpec` of an export: quantization from ``tflite`` (its bytes), MLPerf Tiny's conventions
    for ``benchmark`` (one of :data:`BENCHMARKS`, or None: every input as stored); ``model_version`` (what
    ``profile`` reports; default the benchmark, else the export's name)."""
    if benchmark is not None and benchmark not in BENCHMARKS:
        raise UnsupportedError(f"unknown MLPerf Tiny benchmark '{benchmark}': use one of {', '.join(BENCHMARKS)}")
    program = exp.program
    if not program.inputs or not program.outputs:
        raise UnsupportedError(f"model '{exp.name}' has no inputs or no outputs: nothing for the runner to send "
                               "or read")
    unknown = sorted({d for _, d in program.outputs if d not in _TYPES})
    if unknown:
        raise UnsupportedError(f"the harness cannot print outputs of type {', '.join(unknown)}")
    qin, qout = _quantization(tflite, exp) if tflite is not None else ([None] * len(program.inputs),
                                                                     [None] * len(program.outputs))
    inputs = [InputSpec(n, tuple(int(d) for d in s), d, "copy", *(q or (None, 0))) for (n, s, d), q in
              zip(program.inputs, qin)]
    outputs = [OutputSpec(tuple(int(d) for d in s), d, *(q or (None, 0))) for (s, d), q in zip(program.outputs, qout)]
    mse = False
    if benchmark is not None:
        if len(inputs) != 1:
            raise UnsupportedError(f"MLPerf Tiny's {benchmark} sends one input; model '{exp.name}' takes "
                                   f"{len(inputs)}")
        x = inputs[0]
        if benchmark == "kws01" and x.dtype not in ("int8", "uint8"):
            raise UnsupportedError(f"kws01's runner sends int8 features: model '{exp.name}' takes {x.dtype}")
        if benchmark in ("ic01", "vww01"):
            if x.dtype not in ("int8", "uint8"):
                raise UnsupportedError(f"{benchmark}'s runner sends uint8 pixels: model '{exp.name}' takes "
                                       f"{x.dtype} (export the int8 model)")
            if x.dtype == "int8":
                inputs[0] = InputSpec(x.name, x.shape, x.dtype, "uint8-to-int8", x.scale, x.zero_point)
        if benchmark == "ad01":
            if x.dtype in ("int8", "uint8"):
                if x.scale is None:
                    raise UnsupportedError("ad01's runner sends float32 values: quantizing them needs the "
                                           "input's scale (give the .tflite)")
                inputs[0] = InputSpec(x.name, x.shape, x.dtype, f"float-to-{x.dtype}", x.scale, x.zero_point)
            elif x.dtype != "float32":
                raise UnsupportedError(f"ad01's runner sends float32 values: model '{exp.name}' takes {x.dtype}")
            y = outputs[0]
            if y.count != x.count or not (y.scale is not None or y.dtype == "float32"):
                raise UnsupportedError("ad01's result compares output 0 with the input: it needs a float32 or "
                                       f"quantized output of the input's {x.count} elements")
            mse = True
    version = _protocol_text(model_version or benchmark or exp.name)
    return HarnessSpec(exp.name, version, benchmark, inputs, outputs, bool(program.io_in_arena), mse)


# ------------------------------------------------------------------ writing the harness
def _float(x) -> str:
    return c_literals(np.array([0.0 if x is None else x], np.float32), "float32")[0]


def _layout(spec: HarnessSpec):
    """(stage offsets, stage bytes, stage in the download buffer, output offsets, output buffer bytes)."""
    wire_offsets, at = [], 0
    for x in spec.inputs:
        wire_offsets.append(at)
        at += x.wire_bytes
    in_db = all(x.conversion == "copy" for x in spec.inputs) and all(o % 16 == 0 for o in wire_offsets)
    stage, at = [], 0
    for x in spec.inputs:
        stage.append(at)
        at += -(-x.nbytes // 16) * 16
    if in_db:
        stage = wire_offsets
    outs, o = [], 0
    for y in spec.outputs:
        outs.append(o)
        o += -(-y.count * np.dtype("uint8" if y.dtype == "bool" else y.dtype).itemsize // 16) * 16
    return wire_offsets, stage, max(1, at), in_db, outs, max(1, o)


def config_files(spec: HarnessSpec, board=None) -> tuple[str, str]:
    """``(th_config.h, th_config.c)`` for ``spec`` (the UART and clock of ``board``'s own QEMU machine, if any)."""
    p = spec.name
    wire, stage, stage_bytes, in_db, outs, out_bytes = _layout(spec)
    h = [f"/* th_config.h: model {c_string_literal(p)[1:-1]} for the MLPerf Tiny harness, generated by "
         "tvm_memsched.micro.mlperf_tiny. Do not edit (write the harness again instead). */",
         "#ifndef TH_CONFIG_H_", "#define TH_CONFIG_H_", "", f'#include "{p}.h"', '#include "th_api.h"', "",
         f"#define TH_MODEL_NAME {c_string_literal(p)}",
         f"#define TH_MODEL_VERSION {c_string_literal(spec.model_version)}",
         f"#define TH_VENDOR_NAME_STRING {c_string_literal(_VENDOR)}",
         f"#define MAX_DB_INPUT_SIZE {spec.wire_bytes}u /* bytes the runner sends: every input, in order */",
         f"#define TH_NUM_INPUTS {len(spec.inputs)}", f"#define TH_NUM_OUTPUTS {len(spec.outputs)}",
         f"#define TH_STAGE_IN_DB {int(in_db)}", f"#define TH_STAGE_BYTES {stage_bytes}u",
         f"#define TH_OUTPUT_BUFFER_BYTES {out_bytes}u", f"#define TH_IO_IN_ARENA {int(spec.io_in_arena)}",
         f"#define TH_MODEL_RUN {p}_run", f"#define TH_MODEL_LAST_ERROR {p}_last_error"]
    if spec.io_in_arena:
        h += [f"#define TH_MODEL_INVOKE {p}_invoke", f"#define TH_MODEL_INPUT {p}_input",
              f"#define TH_MODEL_OUTPUT {p}_output"]
    h += [f"#define TH_RESULTS_MSE {int(spec.mse)}", f"#define TH_MSE_DECIMALS {_MSE_DECIMALS}u"]
    machine = board.machine if board is not None and board.qemu_machine is not None else None
    if machine is not None and machine.uart_base is not None:
        hz = _clock_hz(machine)
        h += ["", f"/* board {board.name}: UART0 and SysTick of its QEMU machine (th_port_cmsdk.c) */"]
        for name, value in (("TH_UART_BASE", f"0x{machine.uart_base:08x}u"), ("TH_UART_CLOCK_HZ", f"{hz}u"),
                            ("TH_TIMER_HZ", f"{hz}u"), ("TH_UART_BAUD", f"{_UART_BAUD}u")):
            h += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
    h += ["", "extern const th_input_desc_t th_input_descs[TH_NUM_INPUTS];",
          "extern const th_output_desc_t th_output_descs[TH_NUM_OUTPUTS];",
          "extern const char* const th_input_names[TH_NUM_INPUTS];", "", "#endif /* TH_CONFIG_H_ */", ""]
    c = [f"/* th_config.c: inputs and outputs of model {c_string_literal(p)[1:-1]} for the MLPerf Tiny harness, "
         "generated by tvm_memsched.micro.mlperf_tiny. */", '#include "th_config.h"', "",
         "const th_input_desc_t th_input_descs[TH_NUM_INPUTS] = {"]
    for x, w, s in zip(spec.inputs, wire, stage):
        c.append(f"    {{{w}u, {x.wire_bytes}u, {s}u, {x.nbytes}u, {x.count}u, {_CONVERSIONS[x.conversion]}, "
                 f"{_float(x.scale)}, {int(x.zero_point)}}},")
    c += ["};", "const th_output_desc_t th_output_descs[TH_NUM_OUTPUTS] = {"]
    for y, o in zip(spec.outputs, outs):
        c.append(f"    {{{o}u, {y.count}u, {_TYPES[y.dtype]}, {int(y.scale is not None)}, {y.decimals}u, "
                 f"{_float(y.scale)}, {int(y.zero_point)}}},")
    c += ["};", "const char* const th_input_names[TH_NUM_INPUTS] = {"]
    c += [f"    {c_string_literal(x.name)}," for x in spec.inputs]
    c += ["};", ""]
    return "\n".join(h), "\n".join(c)


def _clock_hz(machine) -> int:
    """SysTick's (and the UART's) clock: a tick is instructions_per_tick instructions of 1 ns."""
    num, den = machine.instructions_per_tick
    return 1_000_000_000 * den // num


@dataclass
class HarnessFiles:
    """What :func:`write_harness` wrote: the folder, its sources (ports apart), the README and the spec."""

    dir: str
    sources: list
    readme: str
    spec: HarnessSpec
    qemu: dict = field(default_factory=dict)      # startup / linker script for the board's QEMU machine

    def port(self, name: str) -> str:
        return os.path.join(self.dir, f"th_port_{name}.c")


def write_harness(exp, out_dir: str, *, tflite: bytes | None = None, benchmark: str | None = None,
                  model_version: str | None = None) -> HarnessFiles:
    """Write the MLPerf Tiny device side for ``exp`` into ``out_dir`` (see the module docstring); returns
    :class:`HarnessFiles`. ``tflite``, ``benchmark``, ``model_version``: :func:`harness_spec`."""
    spec = harness_spec(exp, tflite, benchmark, model_version)
    out_dir = output_dir(out_dir, drop_links=True)
    for f in HARNESS_FILES:
        copy_file(runtime_file(os.path.join("mlperf_tiny", f)), os.path.join(out_dir, f))
    header, source = config_files(spec, exp.board)
    atomic_write(os.path.join(out_dir, "th_config.h"), header)
    atomic_write(os.path.join(out_dir, "th_config.c"), source)
    qemu = {}
    board = exp.board
    if board.qemu_machine is not None:
        qdir = output_dir(out_dir, "qemu", drop_links=True)
        copy_file(runtime_file("startup.c"), os.path.join(qdir, "startup.c"))
        stack = -(-((exp.stack_bytes or 1024) + _HARNESS_STACK) // 8) * 8
        qemu = {"startup": os.path.join(qdir, "startup.c"),
                "ld": board_linker_script(os.path.join(qdir, f"{board.qemu_machine}.ld"), board, stack)}
    readme = os.path.join(out_dir, "README.md")
    atomic_write(readme, _readme(exp, spec, qemu))
    return HarnessFiles(out_dir, [os.path.join(out_dir, f) for f in _COMMON], readme, spec, qemu)


def _model_sources(exp) -> list[str]:
    names = [exp.files["kernels"], exp.files["source"], exp.files["params"], "tvm_memsched_rt.c"]
    names += [exp.files["tms_nn_c"]] if "tms_nn_c" in exp.files else []
    return ["../" + os.path.basename(n) for n in names]


def _readme(exp, spec: HarnessSpec, qemu: dict) -> str:
    board = exp.board
    what = BENCHMARKS.get(spec.benchmark, "each input as the model stores it (float32: 4 little-endian bytes "
                                          "a value)")
    rows = []
    at = 0
    for x in spec.inputs:
        q = f", scale {x.scale:.9g}, zero point {x.zero_point}" if x.scale is not None else ""
        rows.append(f"| {_protocol_text(x.name)} | {x.dtype}{list(x.shape)}{q} | {at} | {x.wire_bytes} | "
                    f"{x.conversion} |")
        at += x.wire_bytes
    outs = []
    for k, y in enumerate(spec.outputs):
        how = (f"dequantized, {y.decimals} decimals (scale {y.scale:.9g}, zero point {y.zero_point})"
               if y.scale is not None else "9 significant digits" if y.dtype.startswith("float") else "integers")
        outs.append(f"| {k} | {y.dtype}{list(y.shape)} | {y.count} | {how} |")
    results = ("one value: the mean squared difference between output 0, dequantized, and the downloaded float32 "
               "input (anomaly score)" if spec.mse else "every output element, in order")
    cc = f"arm-none-eabi-gcc {' '.join(board.cflags())}"
    srcs = " ".join(_model_sources(exp))
    lines = [
        f"# MLPerf Tiny harness for model `{spec.name}` ({board.name}, {board.core})", "",
        "The device side of MLPerf Tiny's runner (EEMBC EnergyRunner) for the exported model one folder up, "
        "generated by `tvm_memsched.micro.mlperf_tiny`. The runner sends commands ending in `%` over the "
        "serial port (115200 baud, 8N1) and reads lines until `m-ready`.", "",
        f"* model version (`profile`): `{spec.model_version}`; runner data: {what}",
        f"* `db load {spec.wire_bytes}`: the runner sends {spec.wire_bytes} bytes, the inputs one after the other:", "",
        "| input | model tensor | offset | bytes | on the device |", "|---|---|---|---|---|", *rows, "",
        f"* `m-results-[...]`: {results}:", "",
        "| output | tensor | values | printed |", "|---|---|---|---|", *outs, "",
        "## Commands", "",
        "`name`, `profile`, `help`, `timestamp`, `db load N`, `db HEX...` (two digits a byte, up to 80 characters "
        "a command), `db print [N [OFFSET]]`, `infer N [W]` (W warm-up runs, default 10, then N timed between "
        "two `m-lap-us-` timestamps, then the results), `results`. A malformed command gets an `e-[...]` line "
        "and changes nothing. The session `tvm-memsched micro ... --harness mlperf-tiny --run` checks:", "",
        "```", "name%", "profile%", f"db load {spec.wire_bytes}%", f"db <{2 * CHUNK_BYTES} hex digits>%   (repeated)",
        "infer 1 0%", "results%", "```", "",
        "Each timed inference copies the inputs into the model's arena (when they live there) and runs it. "
        "The timestamps are microseconds of SysTick; under QEMU's `-icount shift=0` one microsecond is "
        "1000 instructions.", "",
        "## Build", "",
    ]
    if qemu:
        m = board.qemu_machine
        lines += [
            f"For QEMU's `{m}` (UART0 at its CMSDK APB UART, the start-up code and linker script in `qemu/`):", "",
            "```sh", "cd mlperf_tiny",
            f"{cc} -O2 -std=c11 -ffunction-sections -fdata-sections -I. -I.. -I../include \\",
            f"  {srcs} \\",
            "  ee_protocol.c th_model.c th_io.c th_main.c th_config.c th_port_cmsdk.c qemu/startup.c \\",
            f"  --specs=rdimon.specs -T qemu/{m}.ld -Wl,--gc-sections -lm -o dut.elf",
            f"qemu-system-arm -M {m} -display none -monitor none -serial pty -semihosting -icount shift=0 "
            "-kernel dut.elf",
            "```", "",
            "`-serial pty` prints the pseudo-terminal (`/dev/pts/N`) to give MLPerf Tiny's runner "
            "(mlcommons/tiny `benchmark/runner`) as the device's serial port at 115200 baud; `-serial stdio` lets "
            "you type the commands yourself. The firmware prints `m-init-done` and `m-ready` once at start-up: "
            "read them before the runner connects (else its first command sees them and retries).", ""]
    lines += [
        "On a real board: compile the same sources with the board's start-up code, linker script and flags "
        "(not `qemu/`, not `--specs=rdimon.specs`), and replace `th_port_cmsdk.c` by a port of five functions "
        "(see `th_api.h`): `th_serialport_initialize`, `th_getchar`, `th_port_putchar` (the UART the runner "
        "is connected to, 115200 baud), `th_port_timer_start`, `th_port_microseconds` (a free-running "
        "microsecond clock); energy mode (`-DEE_CFG_ENERGY_MODE=1`) also needs `th_port_timestamp_pin`. "
        "Flash the firmware as for any application of the board; the runner finds it by `name`. "
        "`th_port_stdio.c` builds the harness as a host program (stdin/stdout) for tests.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ the runner's side
def runner_commands(data: bytes, *, chunk: int = CHUNK_BYTES, iterations: int = 1, warmup: int = 0) -> list[str]:
    """The runner's session for the downloaded bytes ``data``: ``name``, ``profile``, ``db load N``, the data in
    ``db`` commands of ``chunk`` bytes, ``infer iterations warmup``, ``results`` (without the ``%``)."""
    if chunk < 1 or iterations < 1 or warmup < 0:
        raise MemschedError("chunk and iterations must be positive, warmup non-negative")
    db = [f"db {bytes(data[i:i + chunk]).hex()}" for i in range(0, len(data), chunk)]
    return ["name", "profile", f"db load {len(data)}", *db, f"infer {iterations} {warmup}", "results"]


def parse_results(text: str, *, as_text: bool = False) -> list[list]:
    """The items of every ``m-results-[...]`` line of a transcript, as floats (or as printed)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("m-results-[") and line.endswith("]"):
            items = [s.strip() for s in line[len("m-results-["):-1].split(",") if s.strip()]
            out.append(items if as_text else [float(s) for s in items])
    return out


def parse_laps(text: str) -> list[int]:
    """The ``m-lap-us-N`` timestamps of a transcript, in order."""
    return [int(line.strip()[len("m-lap-us-"):]) for line in text.splitlines()
            if line.strip().startswith("m-lap-us-") and line.strip()[len("m-lap-us-"):].isdigit()]


@dataclass
class Transcript:
    """A session with the device: every command, its answer (up to and including ``m-ready``), the whole text."""

    mode: str
    commands: list
    answers: list
    text: str
    returncode: int | None
    seconds: float
    spec: HarnessSpec | None = None
    program: str = ""

    def results(self, as_text: bool = False) -> list[list]:
        return parse_results(self.text, as_text=as_text)

    def errors(self) -> list[str]:
        return [line.strip() for line in self.text.splitlines() if line.strip().startswith("e-[")]

    def answer(self, command: str) -> str:
        """The answer to the last ``command`` sent."""
        for c, a in zip(reversed(self.commands), reversed(self.answers)):
            if c == command:
                return a
        raise KeyError(command)

    @property
    def infer_microseconds(self) -> int | None:
        """The last ``infer``'s time between its two timestamps."""
        for c, a in zip(reversed(self.commands), reversed(self.answers)):
            if c.startswith("infer"):
                laps = parse_laps(a)
                return laps[1] - laps[0] if len(laps) == 2 else None
        return None


class _Reader(threading.Thread):
    """Collects a process's output as it comes (the serial port is never left full)."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.data, self.done = stream, bytearray(), False
        self.cond = threading.Condition()

    def run(self):
        while True:
            chunk = os.read(self.stream.fileno(), 65536)
            with self.cond:
                if not chunk:
                    self.done = True
                    self.cond.notify_all()
                    return
                self.data += chunk
                self.cond.notify_all()

    def wait_for(self, count: int, deadline: float) -> bool:
        """Until the text holds ``count`` m-ready lines; False on end of output or time out."""
        with self.cond:
            while self.data.count(b"m-ready\r\n") < count:
                if self.done or time.monotonic() > deadline:
                    return False
                self.cond.wait(0.05)
            return True


def _drive(cmd: list[str], commands, *, timeout: float, mode: str, spec=None, program: str = "") -> Transcript:
    """Run ``cmd`` and hold the session: wait for the first ``m-ready``, send each command with ``%`` and wait
    for its ``m-ready``, then ``exit``; ``timeout`` is per command (and for start-up)."""
    bad = [c for c in commands if "%" in c or "\r" in c or "\n" in c]
    if bad:
        raise MemschedError(f"a command holds the terminator '%' or a line end: {bad[0][:40]!r}")
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        reader = _Reader(proc.stdout)
        reader.start()
        answers, sent = [], []
        try:
            def fail(what):
                proc.kill()
                proc.wait()
                reader.join(5)
                err.seek(0)
                tail = "\n".join((bytes(reader.data).decode("latin-1") + err.read().decode("utf-8", "replace"))
                                 .strip().splitlines()[-8:])
                raise MemschedError(f"the MLPerf Tiny harness ({mode}) {what} (exit status {proc.returncode}); "
                                    f"last lines:\n{tail}")

            if not reader.wait_for(1, time.monotonic() + timeout):
                fail(f"did not become ready within {timeout:g} s")
            for k, command in enumerate(commands):
                start = len(reader.data)
                try:
                    proc.stdin.write(command.encode("latin-1") + b"%")
                    proc.stdin.flush()
                except (BrokenPipeError, UnicodeEncodeError) as e:
                    fail(f"could not take command {command!r} ({e})")
                sent.append(command)
                if not reader.wait_for(k + 2, time.monotonic() + timeout):
                    fail(f"gave no m-ready for {command[:40]!r} within {timeout:g} s")
                answers.append(bytes(reader.data[start:]).decode("latin-1"))
            try:
                proc.stdin.write(b"exit%")
                proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                fail("did not exit")
            reader.join(5)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = bytes(reader.data).decode("latin-1")
    if code != 0:
        raise MemschedError(f"the MLPerf Tiny harness ({mode}) exited with status {code}:\n"
                            + "\n".join(text.strip().splitlines()[-5:]))
    return Transcript(mode, sent, answers, text, code, time.perf_counter() - t0, spec, program)


def run_harness_qemu(exp, commands=None, *, inputs=None, tflite: bytes | None = None, benchmark: str | None = None,
                     model_version: str | None = None, harness_dir: str | None = None, board=None,
                     timeout: float = 300) -> Transcript:
    """Write the harness (``harness_dir``, default ``<export>/mlperf_tiny``), build it for ``board`` (default the
    export's; real boards on their QEMU stand-in) and drive it in ``qemu-system-arm`` over its first serial
    port with ``commands`` (default :func:`runner_commands` of ``inputs``, default the export's test input).
    Raises :class:`UnsupportedError` for boards QEMU cannot run, :class:`MemschedError` when the device
    stops answering or exits with a non-zero status (a fault)."""
    board = get_board(board) if board is not None else exp.board
    if board.emulator is None:
        raise UnsupportedError(f"board {board.name} ({board.core}) has no QEMU machine to run the MLPerf Tiny "
                               "harness on")
    machine = board.machine
    if machine.uart_base is None:
        raise UnsupportedError(f"QEMU machine {machine.name}: no UART0 address known for the harness")
    files = write_harness(exp, harness_dir or os.path.join(exp.out_dir, "mlperf_tiny"), tflite=tflite,
                          benchmark=benchmark, model_version=model_version)
    commands = _commands(exp, files.spec, commands, inputs)
    build = os.path.join(exp.out_dir, "run", f"mlperf_tiny-{board.name}")
    hz = _clock_hz(machine)
    defines = ["-DTH_EXIT_COMMAND=1", f"-DTH_UART_BASE=0x{machine.uart_base:08x}u", f"-DTH_UART_CLOCK_HZ={hz}u",
               f"-DTH_TIMER_HZ={hz}u"]
    objs = compile_model(exp, build, board, extra_sources=files.sources + [files.port("cmsdk"),
                                                                          runtime_file("startup.c")],
                         extra_flags=["-I", files.dir, *defines])
    stack = -(-(stack_estimate(exp, objs.usage, objs.graph) + _HARNESS_STACK) // 8) * 8
    script = board_linker_script(os.path.join(build, "firmware.ld"), board, stack)
    elf = os.path.join(build, "mlperf_tiny_dut.elf")
    link(find_tool("arm-none-eabi-gcc"), objs.objects, elf, arm_link_flags(board, script))
    cmd = [find_tool("qemu-system-arm"), "-M", board.emulator, "-display", "none", "-monitor", "none", "-serial",
           "stdio", "-semihosting", "-icount", "shift=0", "-kernel", elf]
    return _drive(cmd, commands, timeout=timeout, mode=f"qemu {board.emulator}", spec=files.spec, program=elf)


def run_harness_host(exp, commands=None, *, inputs=None, tflite: bytes | None = None, benchmark: str | None = None,
                     model_version: str | None = None, harness_dir: str | None = None,
                     timeout: float = 120, cflags=()) -> Transcript:
    """:func:`run_harness_qemu` with the host compiler: the harness as a program on stdin/stdout."""
    files = write_harness(exp, harness_dir or os.path.join(exp.out_dir, "mlperf_tiny"), tflite=tflite,
                          benchmark=benchmark, model_version=model_version)
    commands = _commands(exp, files.spec, commands, inputs)
    build = os.path.join(exp.out_dir, "run", "mlperf_tiny-host")
    objs = compile_model(exp, build, None, extra_sources=files.sources + [files.port("stdio")],
                         extra_flags=["-I", files.dir, "-DTH_EXIT_COMMAND=1", *cflags])
    exe = os.path.join(build, "mlperf_tiny_dut")
    link(host_cc(), objs.objects, exe, ["-lm"])
    return _drive([exe], commands, timeout=timeout, mode="host", spec=files.spec, program=exe)


def _commands(exp, spec: HarnessSpec, commands, inputs) -> list[str]:
    if commands is not None:
        return list(commands)
    if inputs is None:
        inputs = default_inputs(exp)
    return runner_commands(spec.wire(inputs))


# ------------------------------------------------------------------ checking the results
@dataclass
class ResultCheck:
    """How printed results compare with reference outputs: ``ok``, the largest difference, how many items."""

    ok: bool
    max_abs_err: float
    items: int
    mismatches: list = field(default_factory=list)     # (index, printed, expected), the first few


def compare_results(spec: HarnessSpec, printed, outputs, data: bytes, *, rtol: float = 1e-6) -> ResultCheck:
    """Printed ``m-results`` items (as text) against reference ``outputs`` for the downloaded ``data``:
    dequantized and integer items must be the exact text the device prints for them; float items within
    ``rtol``; the ``ad01`` score within its last decimal (float sums may be fused on one side)."""
    want = spec.expected(outputs, data)
    kinds = ["mse"] if spec.mse else [("fixed" if y.scale is not None else "float" if y.dtype.startswith("float")
                                       else "int") for y in spec.outputs for _ in range(y.count)]
    ok, err, bad = len(printed) == len(want), 0.0, []
    for i, (got, exp_text, kind) in enumerate(zip(printed, want, kinds)):
        try:
            g, e = float(got), float(exp_text)
        except ValueError:
            ok = False
            bad.append((i, got, exp_text))
            continue
        d = abs(g - e) if not (math.isnan(g) and math.isnan(e)) else 0.0
        err = max(err, d if math.isfinite(d) else math.inf)
        if kind == "float":
            good = d <= rtol * abs(e) or got == exp_text or (math.isnan(g) and math.isnan(e))
        elif kind == "mse":
            good = d <= 1.5 * 10.0 ** -_MSE_DECIMALS + 1e-5 * abs(e)
        else:
            good = got == exp_text
        if not good:
            ok = False
            bad.append((i, got, exp_text))
    if len(printed) != len(want):
        bad.append((min(len(printed), len(want)), f"{len(printed)} items", f"{len(want)} items"))
    return ResultCheck(ok, err, len(want), bad[:8])
