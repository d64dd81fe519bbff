"""A memory-planned Relax ``main`` -> C: ``<prefix>.h``, ``<prefix>.c`` and ``<prefix>_params.c``.

Input: ``main`` after memory planning (``ArenaPlanMemory`` or TVM's
``StaticPlanBlockMemory``) and before ``LowerAllocTensor``. Every binding is
translated as follows:

* ``R.memory.alloc_storage``: a region of the one ``static uint8_t`` arena
  (ArenaPlanMemory makes one; StaticPlanBlockMemory's storages are laid out one
  after the other);
* ``R.memory.alloc_tensor(storage, offset, ...)``: a ``DLTensor`` over
  ``arena + region + offset`` (``ensure_zero_offset`` is the same tensor);
* a call to a PrimFunc: a kernel call, in program order, with its arguments in
  a ``const TVMFFIAny`` array (``DLTensor*`` with type index
  ``kTVMFFIDLTensorPtr``, scalars as ints/floats); a call of the microkernel
  library, which reads only the data of its tensors, gets an array of the
  data pointers themselves (integers as pointer-sized values): no DLTensor
  and 4 bytes an argument in flash, or in RAM with the pointers to the
  caller's buffers set by ``<prefix>_run``; before the call the runtime's
  workspace is pointed at the region planned for that call;
* ``R.reshape`` / ``R.memory.view`` / var aliases / match-casts: the same
  memory with a new shape; tuples and tuple items: structure;
* ``R.builtin.alloc_tensor`` (a result of ``main``): the caller's output buffer;
* relax constants: ``const`` arrays in ``<prefix>_params.c`` (flash), one per
  distinct content (dtype and bytes, by SHA-256, whatever the shape); function
  parameters: the ``inputs`` array, or regions of the arena when the planner
  placed the inputs and outputs there (``<prefix>_input(i)``, ``<prefix>_invoke()``,
  ``<prefix>_output(k)``; not for stateful models);
* the states of a stateful model (:mod:`tvm_memsched.relax.frontends.tflite_state`: a
  parameter and a result of ``main`` per resource variable) are static
  persistent buffers ``<prefix>_state_<k>`` outside the arena, set to their
  initial values by ``<prefix>_init()`` (``<prefix>_run`` calls it once by
  itself). A new state is written straight into its buffer when every kernel
  reading the old one runs before the kernel writing the new one, else into
  ``<prefix>_state_next_<k>`` and copied over at the end of the run.

Anything else (control flow, dynamic shapes, packed calls, calls to other Relax functions, unsupported
dtypes) raises :class:`UnsupportedError`. DLTensors and argument arrays of arena and constant tensors are
``const`` (flash); only the DLTensors over caller buffers live in RAM.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax

from ..core.errors import UnsupportedError
from ..relax.ir import shape_values
from .kernels import SUPPORTED_DTYPES, KernelModule, library_args
from .literals import c_literals, c_string_literal

__all__ = ["Tensor", "KernelCall", "CState", "CProgram", "translate", "check_dtype", "check_shape", "tensor_nbytes"]

_DL_CODES = {"int": "kDLInt", "uint": "kDLUInt", "float": "kDLFloat", "bool": "kDLBool"}
_C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
            "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
            "uint64": "uint64_t", "bool": "uint8_t"}
_IGNORED_OPS = {"relax.memory.kill_storage", "relax.memory.kill_tensor", "relax.null_value"}
_VIEW_OPS = {"relax.reshape", "relax.memory.view", "relax.memory.ensure_zero_offset"}


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def check_dtype(ty, what: str) -> str:
    """The dtype of TensorType ``ty``; UnsupportedError (naming ``what``) if C cannot hold it."""
    dtype = str(ty.dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise UnsupportedError(f"{what} has dtype {dtype}; the C export supports {', '.join(SUPPORTED_DTYPES)}")
    return dtype


def check_shape(ty, what: str) -> tuple:
    """The static shape of TensorType ``ty``; UnsupportedError (naming ``what``) if it is dynamic."""
    shape = getattr(ty, "shape", None)
    vals = getattr(shape, "values", None)
    if vals is None or not all(isinstance(v, (int, tvm.tirx.IntImm)) for v in vals):
        raise UnsupportedError(f"{what} has a dynamic or unknown shape ({ty}); the C export needs static shapes")
    return tuple(int(v) for v in vals)


def tensor_nbytes(shape, dtype: str) -> int:
    return int(math.prod(shape)) * max(1, tvm.DataType(dtype).bits // 8)


@dataclass(frozen=True)
class Tensor:
    """A tensor of the C program: ``shape``/``dtype`` over ``base`` + ``offset`` bytes.

    ``base`` is ``("arena", byte offset)``, ``("param", index)``, ``("input", k)``,
    ``("state", k)`` / ``("state_next", k)`` (state buffers) or ``("result",
    alloc id)`` (an ``R.builtin.alloc_tensor``, later an output or a state).
    """

    base: tuple
    offset: int
    shape: tuple
    dtype: str

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.shape, self.dtype)


@dataclass
class KernelCall:
    """One kernel call: PrimFunc name, arguments (Tensors or ("int"/"float", value)), workspace region."""

    kernel: str
    args: list
    workspace_offset: int = 0
    workspace_bytes: int = 0


@dataclass
class CState:
    """A state buffer: its name, shape and dtype, the constant holding its initial value and whether the new
    state is written in place (else via ``<prefix>_state_next_<k>``)."""

    name: str
    shape: tuple
    dtype: str
    init_param: int
    in_place: bool = True

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.shape, self.dtype)


@dataclass
class CProgram:
    """The translated program; :meth:`header`, :meth:`source` and :meth:`params_source` write the C."""

    prefix: str
    inputs: list                      # [(name, shape, dtype)]
    outputs: list                     # [(shape, dtype)]
    calls: list                       # [KernelCall] in program order
    params: list                      # [np.ndarray] constants, deduplicated
    storage_bytes: int                # tensor part of the arena (all storages)
    workspace_bytes: int              # workspace region after the storages (0: planned inside them)
    arena_bytes: int
    output_bases: dict = field(default_factory=dict)   # result alloc id -> ("output", k) / ("state[_next]", k)
    output_copies: list = field(default_factory=list)  # (output index, source Tensor)
    kernels: KernelModule | None = None
    comment: str = ""
    states: list = field(default_factory=list)         # [CState]
    state_copies: list = field(default_factory=list)   # (state index, source Tensor), at the end of a run
    input_places: list = field(default_factory=list)   # io in the arena: Tensor of each input
    output_places: list = field(default_factory=list)  # io in the arena: Tensor of each output

    @property
    def io_in_arena(self) -> bool:
        """Inputs and outputs live in the arena (``<p>_input(i)``/``<p>_output(i)``), as in TFLite Micro."""
        return bool(self.input_places or self.output_places)

    @property
    def state_bytes(self) -> int:
        """Static RAM of the states: their buffers, and the next-state buffers of those not updated in place."""
        return sum(s.nbytes * (1 if s.in_place else 2) for s in self.states)

    # ------------------------------------------------------------------ naming
    @property
    def upper(self) -> str:
        return self.prefix.upper()

    def _resolve(self, t: Tensor) -> Tensor:
        if t.base[0] == "result":
            return Tensor(self.output_bases[t.base[1]], t.offset, t.shape, t.dtype)
        return t

    def _data_expr(self, t: Tensor) -> str:
        kind, ref = t.base
        if kind == "arena":
            return f"{self.prefix}_arena + {ref + t.offset}"
        if kind in ("state", "state_next"):
            return f"{self.prefix}_{kind}_{ref} + {t.offset}"
        base = {"param": f"{self.prefix}_param_{ref}", "input": f"inputs[{ref}]", "output": f"outputs[{ref}]"}[kind]
        if not t.offset:
            return f"(void*){base}" if kind != "output" else base
        cast = "uint8_t*" if kind == "output" else "const uint8_t*"
        return f"(void*)(({cast}){base} + {t.offset})"

    # ------------------------------------------------------------------ header
    def header(self) -> str:
        p, P = self.prefix, self.upper
        lines = [f"/* {p}.h: interface of model '{p}', generated by tvm_memsched.micro. Do not edit.",
                 " *",
                 f" * int {p}_run(const void* const* inputs, void* const* outputs);",
                 " *   inputs[i] / outputs[i] point at dense row-major buffers of",
                 f" *   {P}_INPUT_<i>_BYTES / {P}_OUTPUT_<i>_BYTES bytes (see the tables below).",
                 f" *   Returns 0, or the 1-based number of the kernel call that failed ({p}_last_error()",
                 " *   says why). Every intermediate tensor and every kernel's workspace lives in one static",
                 f" *   arena of {P}_ARENA_BYTES bytes; nothing is allocated at run time. Not reentrant."]
        if self.io_in_arena:
            lines += [" *",
                      " * The inputs and outputs live in the arena too (as in TFLite Micro): write input i",
                      f" * at {p}_input(i), call {p}_invoke(), read output k at {p}_output(k); no other",
                      f" * buffers are needed. {p}_run copies from/to the caller's buffers around {p}_invoke",
                      " * (nothing is copied when a pointer already is the arena's)."]
        if self.states:
            lines += [" *",
                      f" * void {p}_init(void);",
                      f" *   The model keeps {len(self.states)} state buffer(s) ({P}_STATE_BYTES bytes, static, outside "
                      "the arena)",
                      f" *   from one {p}_run to the next; {p}_init() sets them to their initial values. {p}_run calls",
                      " *   it before its first run; call it again to start a new stream."]
        lines += [" */",
                 f"#ifndef {P}_H_", f"#define {P}_H_", "", "#include <stdint.h>", "",
                 "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
                 f"#define {P}_ARENA_BYTES {self.arena_bytes}u",
                 f"#define {P}_WORKSPACE_BYTES {self.max_workspace}u /* largest kernel workspace, inside the arena */",
                 f"#define {P}_NUM_KERNEL_CALLS {len(self.calls)}",
                 f"#define {P}_NUM_INPUTS {len(self.inputs)}",
                 f"#define {P}_NUM_OUTPUTS {len(self.outputs)}"]
        if self.states:
            lines += [f"#define {P}_NUM_STATES {len(self.states)}",
                      f"#define {P}_STATE_BYTES {self.state_bytes}u /* state buffers (and next-state buffers) */"]
        for i, (name, shape, dtype) in enumerate(self.inputs):
            nbytes = tensor_nbytes(shape, dtype)
            lines.append(f"#define {P}_INPUT_{i}_BYTES {nbytes}u /* '{name}' {dtype}{list(shape)} */")
        for i, (shape, dtype) in enumerate(self.outputs):
            lines.append(f"#define {P}_OUTPUT_{i}_BYTES {tensor_nbytes(shape, dtype)}u /* {dtype}{list(shape)} */")
        lines += ["",
                  "typedef struct {",
                  "  const char* name;",
                  "  int32_t ndim;",
                  "  const int64_t* shape;",
                  "  uint8_t dtype_code; /* DLPack: 0 int, 1 uint, 2 float, 6 bool */",
                  "  uint8_t dtype_bits;",
                  "  uint32_t nbytes;",
                  f"}} {p}_tensor_info_t;",
                  "",
                  f"extern const {p}_tensor_info_t {p}_input_info[{P}_NUM_INPUTS];",
                  f"extern const {p}_tensor_info_t {p}_output_info[{P}_NUM_OUTPUTS];",
                  "",
                  f"int {p}_run(const void* const* inputs, void* const* outputs);",
                  f"const char* {p}_last_error(void);"] + ([f"void {p}_init(void);"] if self.states else []) + (
                  [f"int {p}_invoke(void);",
                   f"void* {p}_input(int i);          /* NULL for a bad index */",
                   f"const void* {p}_output(int k);   /* NULL for a bad index */"] if self.io_in_arena else []) + [
                  "",
                  "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {P}_H_ */", ""]
        return "\n".join(lines)

    @property
    def max_workspace(self) -> int:
        return max([c.workspace_bytes for c in self.calls] or [0])

    # ------------------------------------------------------------------ model.c
    def source(self) -> str:
        p, P = self.prefix, self.upper
        shapes: dict = {}
        statics: dict = {}      # Tensor -> C name (const DLTensors in flash)
        dynamic: dict = {}      # Tensor -> index into <p>_io (DLTensors over caller buffers)

        def shape_name(shape) -> str:
            if shape not in shapes:
                shapes[shape] = f"{p}_shape_{len(shapes)}"
            return shapes[shape]

        def tensor_ref(t: Tensor) -> str:
            t = self._resolve(t)
            if t.base[0] in ("input", "output"):
                if t not in dynamic:
                    dynamic[t] = len(dynamic)
                return f"&{p}_io[{dynamic[t]}]"
            if t not in statics:
                statics[t] = f"{p}_t{len(statics)}"
            return f"&{statics[t]}"

        def dltensor(t: Tensor, data: str) -> str:
            dt = tvm.DataType(t.dtype)
            code = _DL_CODES["bool" if t.dtype == "bool" else t.dtype.rstrip("0123456789")]
            shape = f"(int64_t*){shape_name(t.shape)}" if t.shape else "NULL"
            return (f"{{.data = {data}, .device = {{kDLCPU, 0}}, .ndim = {len(t.shape)}, "
                    f".dtype = {{{code}, {dt.bits}, 1}}, .shape = {shape}, .strides = NULL, .byte_offset = 0}}")

        # DLTensors over caller buffers first, in a stable order (inputs, then outputs, by index)
        library = getattr(self.kernels, "library", {})
        used = [self._resolve(a) for c in self.calls if c.kernel not in library for a in c.args
                if isinstance(a, Tensor)]
        order = {"input": 0, "output": 1}
        for t in sorted({t for t in used if t.base[0] in order},
                        key=lambda t: (order[t.base[0]], t.base[1], t.offset, t.shape, t.dtype)):
            dynamic[t] = len(dynamic)
        arg_arrays = []
        patches = []            # (call, argument, tensor over a caller buffer): <p>_run sets the pointer
        for k, call in enumerate(self.calls):
            entries = []
            if call.kernel in library:
                entries, runtime = library_args(call.args, lambda t: self._data_expr(self._resolve(t)),
                                                lambda t: self._resolve(t).base[0] in order)
                patches += [(k, j, self._resolve(call.args[j])) for j in runtime]
                arg_arrays.append((entries, bool(runtime)))
                continue
            for a in call.args:
                if isinstance(a, Tensor):
                    entries.append(f"{{.type_index = kTVMFFIDLTensorPtr, .v_ptr = (void*){tensor_ref(a)}}}")
                elif a[0] == "int":
                    entries.append(f"{{.type_index = kTVMFFIInt, .v_int64 = {int(a[1])}}}")
                else:
                    entries.append(f"{{.type_index = kTVMFFIFloat, .v_float64 = {float(a[1]).hex()}}}")
            arg_arrays.append(entries)

        out = [f"/* {p}.c: model '{p}', generated by tvm_memsched.micro. Do not edit."]
        if self.comment:
            out += [f" * {ln}" if ln else " *" for ln in self.comment.splitlines()]
        out += [" */",
                "#include <stddef.h>", "#include <stdint.h>", "#include <string.h>", "",
                "#include <tvm/ffi/c_api.h> /* TVMFFIAny, DLTensor */", "",
                f'#include "{p}.h"', '#include "tvm_memsched_rt.h"', "",
                f"/* kernels ({p}_kernels.c), TVM's packed calling convention */"]
        for sym in sorted({self.kernels.symbols[c.kernel] for c in self.calls}):
            out.append(f"int32_t __tvm_ffi_{sym}(void* self, void* args, int32_t num_args, void* result);")
        if self.params:
            out += ["", f"/* constants ({p}_params.c, in flash) */"]
            for i, arr in enumerate(self.params):
                out.append(f"extern const {_C_TYPES[str(arr.dtype)]} {p}_param_{i}[{max(1, arr.size)}];")
        if self.calls or self.io_in_arena:
            out += ["",
                    "/* The arena: every intermediate tensor and every kernel call's workspace, at the offsets",
                    f" * tvm_memsched planned. Define {P}_ARENA_ATTRIBUTES to place it (e.g. in a section). */",
                    f"#ifndef {P}_ARENA_ATTRIBUTES", f"#define {P}_ARENA_ATTRIBUTES", "#endif",
                    f"static uint8_t {p}_arena[{P}_ARENA_BYTES > 0 ? {P}_ARENA_BYTES : 1] "
                    f"__attribute__((aligned(16))) {P}_ARENA_ATTRIBUTES;"]
        if self.states:
            out += ["", f"/* state kept from one {p}_run to the next (persistent, outside the arena) */"]
            for k, st in enumerate(self.states):
                kinds = ["state"] + ([] if st.in_place else ["state_next"])
                for kind in kinds:
                    out.append(f"static uint8_t {p}_{kind}_{k}[{max(1, st.nbytes)}] __attribute__((aligned(16))); "
                               f"/* '{st.name}' {st.dtype}{list(st.shape)} */")
            out.append(f"static int {p}_initialised;")
        out.append("")
        # every shape array is emitted before the DLTensors and tables that point at it
        for t in list(statics) + list(dynamic) + [self._resolve(s) for _, s in self.output_copies]:
            if t.shape:
                shape_name(t.shape)
        for _, shape, _ in self.inputs:
            if shape:
                shape_name(tuple(shape))
        for shape, _ in self.outputs:
            if shape:
                shape_name(tuple(shape))
        for shape, name in shapes.items():
            out.append(f"static const int64_t {name}[{len(shape)}] = {{{', '.join(str(d) for d in shape)}}};")
        if statics:
            out += ["", "/* tensors in the arena and in flash */"]
            for t, name in statics.items():
                out.append(f"static const DLTensor {name} = {dltensor(t, self._data_expr(t))};")
        if dynamic:
            out += ["", f"/* tensors over the caller's buffers: {p}_run sets their data pointers */",
                    f"static DLTensor {p}_io[{len(dynamic)}] = {{"]
            for t, i in dynamic.items():
                out.append(f"    {dltensor(t, 'NULL')}, /* {t.base[0]} {t.base[1]} */")
            out.append("};")
        out += ["", "/* kernel arguments: TVM's kernels take TVMFFIAny, the library's the data pointers (and integers)",
                " * themselves, no DLTensor */"]
        for k, entries in enumerate(arg_arrays):
            if not entries:
                continue
            if isinstance(entries, tuple):          # a library call's pointers; in RAM when <p>_run sets some
                entries, patched = entries
                out.append(f"static void* {'' if patched else 'const '}{p}_args_{k}[{len(entries)}] = {{")
            else:
                out.append(f"static const TVMFFIAny {p}_args_{k}[{len(entries)}] = {{")
            out += [f"    {e}," for e in entries]
            out.append("};")
        # info tables
        out += [""]
        for kind, items in (("input", [(n, s, d) for n, s, d in self.inputs]),
                            ("output", [(f"output{i}", s, d) for i, (s, d) in enumerate(self.outputs)])):
            rows = []
            for name, shape, dtype in items:
                dt = tvm.DataType(dtype)
                code = int(dt.type_code)
                sname = shape_name(tuple(shape)) if shape else "NULL"
                nbytes = tensor_nbytes(shape, dtype)
                rows.append(f'    {{{c_string_literal(name)}, {len(shape)}, {sname}, {code}, {dt.bits}, {nbytes}u}},')
            n = len(items)
            out.append(f"const {p}_tensor_info_t {p}_{kind}_info[{P}_NUM_{kind.upper()}S] = {{")
            out += rows if n else ['    {"", 0, NULL, 0, 0, 0u},']
            out.append("};")
        out += ["", f"const char* {p}_last_error(void) {{ return tvm_memsched_last_error(); }}", ""]
        if self.calls:
            out += self._call_table()
        if self.states:
            out += [f"void {p}_init(void) {{"]
            out += [f"  memcpy({p}_state_{k}, {p}_param_{st.init_param}, {st.nbytes}u);"
                    for k, st in enumerate(self.states)]
            out += [f"  {p}_initialised = 1;", "}", ""]
        if self.io_in_arena:
            out += self._io_functions()
            out += [f"int {p}_invoke(void) {{"]
        else:
            out += [f"int {p}_run(const void* const* inputs, void* const* outputs) {{"]
        if self.states:
            out.append(f"  if (!{p}_initialised) {p}_init();")
        if not self.io_in_arena:
            if not any(t.base[0] == "input" for t in dynamic) and not any(
                    s.base[0] == "input" for _, s in self.output_copies):
                out.append("  (void)inputs;")
            if not self.outputs:
                out.append("  (void)outputs;")
        out.append('  tvm_memsched_set_error("");')
        for t, i in dynamic.items():
            out.append(f"  {p}_io[{i}].data = {self._data_expr(t)};")
        for k, j, t in patches:
            out.append(f"  {p}_args_{k}[{j}] = {self._data_expr(t)};")
        if self.calls:
            out += [f"  for (int k = 0; k < {P}_NUM_KERNEL_CALLS; ++k) {{",
                    f"    int rc = {p}_call(k);",
                    "    if (rc != 0) return rc;",
                    "  }"]
        for k, src in self.output_copies:
            src = self._resolve(src)
            out.append(f"  memcpy(outputs[{k}], {self._data_expr(src)}, {src.nbytes}u); /* output {k} */")
        for k, src in self.state_copies:
            src = self._resolve(src)
            out.append(f"  memcpy({p}_state_{k}, {self._data_expr(src)}, {src.nbytes}u); /* new state {k} */")
        out += ["  return 0;", "}", ""]
        if self.io_in_arena:
            out += [f"int {p}_run(const void* const* inputs, void* const* outputs) {{",
                    f"  for (int i = 0; i < {P}_NUM_INPUTS; ++i) {{",
                    f"    if (inputs[i] != {p}_input(i)) memcpy({p}_input(i), inputs[i], {p}_input_info[i].nbytes);",
                    "  }",
                    f"  int rc = {p}_invoke();",
                    "  if (rc != 0) return rc;",
                    f"  for (int k = 0; k < {P}_NUM_OUTPUTS; ++k) {{",
                    f"    if (outputs[k] != {p}_output(k)) memcpy(outputs[k], {p}_output(k), "
                    f"{p}_output_info[k].nbytes);",
                    "  }",
                    "  return 0;", "}", ""]
        return "\n".join(out)

    def _call_table(self) -> list[str]:
        """The kernel calls as a table in flash (kernel, arguments, workspace region) and ``<p>_call(k)``."""
        p, P = self.prefix, self.upper
        out = ["typedef int32_t (*tvm_memsched_kernel_fn)(void* self, void* args, int32_t num_args, void* result);",
               "typedef struct {", "  tvm_memsched_kernel_fn fn;", "  const void* args;", "  uint32_t num_args;",
               "  uint32_t workspace_offset;", "  uint32_t workspace_bytes;", f"}} {p}_call_t;", "",
               "/* the kernel calls in the scheduled order: kernel, arguments, workspace region in the arena */",
               f"static const {p}_call_t {p}_calls[{P}_NUM_KERNEL_CALLS] = {{"]
        for k, call in enumerate(self.calls):
            sym = self.kernels.symbols[call.kernel]
            args = f"{p}_args_{k}" if call.args else "NULL"
            desc = ", ".join(self._describe(a) for a in call.args)
            out.append(f"    {{__tvm_ffi_{sym}, {args}, {len(call.args)}u, {call.workspace_offset}u, "
                       f"{call.workspace_bytes}u}}, /* call {k + 1}: {call.kernel}({desc}) */")
        out += ["};", "",
                "#ifdef TVM_MEMSCHED_PROFILE /* the application's hook around each kernel call: 0 before, 1 after */",
                "void tvm_memsched_profile_call(int k, int end);", "#define TVM_MEMSCHED_PROFILE_HOOK(k, end) "
                "tvm_memsched_profile_call(k, end)", "#else", "#define TVM_MEMSCHED_PROFILE_HOOK(k, end) ((void)0)",
                "#endif", "",
                "/* Run kernel call k (0-based); 0, or k + 1 when it fails (the runtime's error says why). */",
                f"static int {p}_call(int k) {{",
                f"  const {p}_call_t* c = &{p}_calls[k];",
                "  TVMFFIAny ret;",
                f"  tvm_memsched_set_workspace({p}_arena + c->workspace_offset, c->workspace_bytes);",
                "  ret.type_index = kTVMFFINone;",
                "  TVM_MEMSCHED_PROFILE_HOOK(k, 0);", "  int32_t rc = c->fn(NULL, (void*)c->args, (int32_t)c->num_args, &ret);",
                "  TVM_MEMSCHED_PROFILE_HOOK(k, 1);", "  if (rc != 0) {",
                "    if (tvm_memsched_last_error()[0] == '\\0') tvm_memsched_set_error(\"kernel failed\");",
                "    return k + 1;",
                "  }",
                "  return 0;", "}", ""]
        return out

    def _io_functions(self) -> list[str]:
        """``<p>_input(i)`` and ``<p>_output(k)``: where the inputs and outputs live in the arena."""
        p, P = self.prefix, self.upper

        def table(name, ctype, items):
            return [f"static {ctype} const {p}_{name}[{max(1, len(items))}] = {{"
                    + (", ".join(items) if items else "NULL") + "};"]

        out = table("input_data", "void*", [f"{p}_arena + {t.base[1] + t.offset}" for t in self.input_places])
        out += table("output_data", "const void*", [self._data_expr(self._resolve(t)) for t in self.output_places])
        out += [f"void* {p}_input(int i) {{ return (i >= 0 && i < {P}_NUM_INPUTS) ? {p}_input_data[i] : NULL; }}",
                f"const void* {p}_output(int k) {{ return (k >= 0 && k < {P}_NUM_OUTPUTS) ? {p}_output_data[k] "
                ": NULL; }", ""]
        return out

    def _describe(self, a) -> str:
        if not isinstance(a, Tensor):
            return str(a[1])
        t = self._resolve(a)
        kind, ref = t.base
        where = {"arena": f"arena+{ref + t.offset}", "param": f"param{ref}", "input": f"in{ref}",
                 "output": f"out{ref}", "state": f"state{ref}", "state_next": f"state_next{ref}"}[kind]
        if kind != "arena" and t.offset:
            where += f"+{t.offset}"
        return f"{where}:{t.dtype}{list(t.shape)}"

    # --------------------------------------------------------------- params.c
    def params_source(self) -> str:
        p = self.prefix
        out = [f"/* {p}_params.c: constants of model '{p}' (flash), generated by tvm_memsched.micro. */",
               "#include <math.h>", "#include <stdint.h>", ""]
        for i, arr in enumerate(self.params):
            dtype = str(arr.dtype)
            ctype = _C_TYPES[dtype]
            values = c_literals(arr.reshape(-1), dtype) or ["0"]
            out.append(f"const {ctype} {p}_param_{i}[{len(values)}] __attribute__((aligned(16))) = {{ "
                       f"/* {dtype}{list(arr.shape)} */")
            for j in range(0, len(values), 8):
                out.append("    " + ", ".join(values[j:j + 8]) + ",")
            out.append("};")
        if not self.params:
            out.append(f"typedef int {p}_no_params; /* ISO C wants something in every file */")
        return "\n".join(out) + "\n"


# ============================================================== translation
class _Translator:
    def __init__(self, func, kernels: KernelModule, alignment: int, states=(), input_offsets=None):
        self.func = func
        self.input_offsets = input_offsets
        self.state_of_param = {s.param: k for k, s in enumerate(states)}
        self.state_of_output = {s.output: k for k, s in enumerate(states)}
        self.kernels = kernels
        self.alignment = alignment
        self.values: dict = {}          # Var -> Tensor | ("tuple", [values]) | ("storage", base) | None
        self.storages: list = []        # (var, bytes)
        self.storage_base: dict = {}    # storage var -> byte offset in the arena
        self.storage_top = 0
        self.calls: list = []
        self.params: list = []
        self.param_index: dict = {}
        self.results: int = 0

    # --------------------------------------------------------------- helpers
    def const(self, c) -> Tensor:
        arr = c.value.numpy()
        ty = c.ty
        dtype = check_dtype(ty, "a constant")
        return Tensor(("param", self.add_array(arr)), 0, tuple(arr.shape), dtype)

    def value(self, expr, what: str):
        if isinstance(expr, relax.Var):
            if expr not in self.values:
                raise UnsupportedError(f"{what}: variable '{expr.name}' is not supported here")
            return self.values[expr]
        if isinstance(expr, tvm.ir.Constant):
            return self.const(expr)
        if isinstance(expr, relax.Tuple):
            return ("tuple", [self.value(f, what) for f in expr.fields])
        raise UnsupportedError(f"{what}: {type(expr).__name__} arguments are not supported")

    def tensor(self, expr, what: str) -> Tensor:
        v = self.value(expr, what)
        if not isinstance(v, Tensor):
            raise UnsupportedError(f"{what}: expected a tensor")
        return v

    # ------------------------------------------------------------------- run
    def run(self) -> None:
        f = self.func
        user = 0
        for i, p in enumerate(f.params):
            if not isinstance(p.ty, relax.TensorType):
                raise UnsupportedError(f"parameter '{p.name}' is not a tensor ({p.ty}); the C export takes tensors")
            if i in self.state_of_param:
                base = ("state", self.state_of_param[i])
            elif self.input_offsets is not None:
                base, user = ("arena", int(self.input_offsets[user])), user + 1
            else:
                base, user = ("input", user), user + 1
            self.values[p] = Tensor(base, 0, check_shape(p.ty, f"parameter '{p.name}'"),
                                    check_dtype(p.ty, f"parameter '{p.name}'"))
        body = f.body
        if not isinstance(body, relax.SeqExpr):
            raise UnsupportedError("main's body is not a sequence of bindings")
        for block in body.blocks:
            for b in block.bindings:
                self.binding(b)
        self.result = self.value(body.body, "the function result")

    def binding(self, b) -> None:
        var, value = b.var, b.value
        name = var.name
        if isinstance(b, relax.MatchCast):
            self.values[var] = self.value(value, f"match-cast '{name}'")
            return
        if isinstance(value, (relax.Var, relax.Tuple)) or isinstance(value, tvm.ir.Constant):
            self.values[var] = self.value(value, f"binding '{name}'")
            return
        if isinstance(value, relax.TupleGetItem):
            tup = self.value(value.tuple_value, f"binding '{name}'")
            if not (isinstance(tup, tuple) and tup[0] == "tuple"):
                raise UnsupportedError(f"binding '{name}' indexes something that is not a tuple")
            self.values[var] = tup[1][value.index]
            return
        if isinstance(value, relax.If):
            raise UnsupportedError("control flow (If) is not supported by the C export (an If on an input a "
                                   "deployment fixes: freeze it with --input-value NAME=VALUE)")
        if not isinstance(value, tvm.ir.Call):
            raise UnsupportedError(f"binding '{name}': {type(value).__name__} is not supported by the C export")
        op = value.op
        if isinstance(op, tvm.ir.GlobalVar):
            self.kernel_call(var, value)
            return
        if not isinstance(op, tvm.ir.Op):
            what = f"the packed function '{op.global_symbol}'" if isinstance(op, relax.ExternFunc) \
                else type(op).__name__
            raise UnsupportedError(f"the model calls {what}; the C export only calls TIR kernels "
                                   "(operators must be lowered to TIR by TVM's legalization)")
        opname = op.name
        if opname in _IGNORED_OPS:
            self.values[var] = None
        elif opname == "relax.memory.alloc_storage":
            size = shape_values(value.args[0])
            if size is None:
                raise UnsupportedError(f"storage '{name}' has a dynamic size")
            size = size[0]
            scope = str(value.args[2].value) if hasattr(value.args[2], "value") else str(value.args[2])
            if scope != "global":
                raise UnsupportedError(f"storage '{name}' is in memory scope '{scope}'; only 'global' is supported")
            base = _align(self.storage_top, self.alignment)
            self.storage_base[var] = base
            self.storage_top = base + size
            self.values[var] = ("storage", base)
        elif opname == "relax.memory.alloc_tensor":
            storage = value.args[0]
            if storage not in self.storage_base:
                raise UnsupportedError(f"tensor '{name}' is allocated in an unknown storage")
            off = value.args[1]
            if not isinstance(off, (int, tvm.tirx.IntImm)):
                raise UnsupportedError(f"tensor '{name}' has a dynamic offset")
            self.values[var] = Tensor(("arena", self.storage_base[storage] + int(off)), 0,
                                      check_shape(var.ty, f"tensor '{name}'"), check_dtype(var.ty, f"tensor '{name}'"))
        elif opname == "relax.builtin.alloc_tensor":
            self.values[var] = Tensor(("result", self.results), 0, check_shape(var.ty, f"tensor '{name}'"),
                                      check_dtype(var.ty, f"tensor '{name}'"))
            self.results += 1
        elif opname in _VIEW_OPS:
            src = self.tensor(value.args[0], f"view '{name}'")
            extra = 0
            if opname == "relax.memory.view" and len(value.args) > 3:
                off = value.args[3]
                if isinstance(off, (int, tvm.tirx.IntImm)):
                    extra = int(off)
                elif not (isinstance(off, relax.Tuple) and not off.fields):
                    raise UnsupportedError(f"view '{name}' has a dynamic byte offset")
            t = Tensor(src.base, src.offset + extra, check_shape(var.ty, f"view '{name}'"),
                       check_dtype(var.ty, f"view '{name}'"))
            if extra + t.nbytes > src.nbytes:
                raise UnsupportedError(f"view '{name}' reaches past the end of its source tensor")
            self.values[var] = t
        else:
            raise UnsupportedError(f"operator {opname} (binding '{name}') is not supported by the C export; "
                                   "it must be lowered to a TIR kernel")

    def kernel_call(self, var, call) -> None:
        gv = call.op
        name = gv.name_hint
        if name not in self.kernels.symbols:
            flow = name[7:].split("_")[0].upper() if name.startswith(("tflite_if", "tflite_while")) else None
            raise UnsupportedError(f"control flow (TFLite {flow}, imported as Relax function '{name}') is not "
                                   "supported by the C export" if flow else f"call to '{name}', which is not a TIR "
                                   "kernel (calls to other Relax functions are not supported by the C export)")
        args = []
        for a in call.args:
            if isinstance(a, (relax.Var, tvm.ir.Constant)):
                args.append(self.tensor(a, f"argument of kernel {name}"))
            elif isinstance(a, tvm.tirx.IntImm):
                args.append(("int", int(a.value)))
            elif isinstance(a, tvm.tirx.FloatImm):
                args.append(("float", float(a.value)))
            elif isinstance(a, relax.ShapeExpr) and all(isinstance(v, tvm.tirx.IntImm) for v in a.values):
                args.extend(("int", int(v)) for v in a.values)
            else:
                raise UnsupportedError(f"kernel {name} takes a {type(a).__name__} argument the C export cannot pass")
        expected = self.kernels.num_params.get(name)
        if expected is not None and expected != len(args):
            raise UnsupportedError(f"kernel {name} takes {expected} arguments but is called with {len(args)}")
        self.calls.append(KernelCall(name, args))
        self.values[var] = None

    # -------------------------------------------------------------- outputs
    def outputs(self):
        leaves = []

        def flat(v):
            if isinstance(v, tuple) and v and v[0] == "tuple":
                for x in v[1]:
                    flat(x)
            elif isinstance(v, Tensor):
                leaves.append(v)
            else:
                raise UnsupportedError("main returns something that is not a tensor or a tuple of tensors")

        flat(self.result)
        bases, copies, state_copies, in_place = {}, [], [], {}
        user = [t for o, t in enumerate(leaves) if o not in self.state_of_output]
        for k, t in enumerate(user):
            if t.base[0] == "result" and t.base[1] not in bases and t.offset == 0:
                bases[t.base[1]] = ("output", k)
            else:
                copies.append((k, t))
        for o, k in sorted(self.state_of_output.items(), key=lambda x: x[1]):
            t = leaves[o]
            in_place[k] = True
            if t.base == ("state", k) and t.offset == 0:
                continue                        # the state does not change
            if t.base[0] == "state":
                raise UnsupportedError(f"state {k} becomes the old value of state {t.base[1]}; not supported")
            if t.base[0] == "result" and t.base[1] not in bases and t.offset == 0:
                in_place[k] = self._writes_after_reads(t.base[1], k)
                bases[t.base[1]] = ("state" if in_place[k] else "state_next", k)
                if not in_place[k]:
                    state_copies.append((k, Tensor(("state_next", k), 0, t.shape, t.dtype)))
            else:
                state_copies.append((k, t))
        for k, t in copies + state_copies:
            if t.base[0] == "result" and t.base[1] not in bases:
                raise UnsupportedError(f"output {k} is a partial view of a result buffer; not supported")
        for c in self.calls:
            for a in c.args:
                if isinstance(a, Tensor) and a.base[0] == "result" and a.base[1] not in bases:
                    raise UnsupportedError("an unplanned tensor that is not a result of main; "
                                           "memory planning must place every intermediate tensor")
        return user, bases, copies, state_copies, in_place

    def _writes_after_reads(self, result: int, state: int) -> bool:
        """True if every kernel call reading state ``state`` comes before the first call writing ``result``."""
        def uses(c, base):
            return any(isinstance(a, Tensor) and a.base == base for a in c.args)

        writes = [i for i, c in enumerate(self.calls) if uses(c, ("result", result))]
        reads = [i for i, c in enumerate(self.calls) if uses(c, ("state", state))]
        return not writes or not reads or max(reads) < min(writes)

    def add_array(self, arr: np.ndarray) -> int:
        """Index of a constant array in the params: one per distinct content (same dtype and bytes, by
        SHA-256, whatever the shape)."""
        arr = np.ascontiguousarray(arr)
        key = (str(arr.dtype), arr.nbytes, hashlib.sha256(arr.tobytes()).digest())
        if key not in self.param_index:
            self.param_index[key] = len(self.params)
            self.params.append(arr)
        return self.param_index[key]


def translate(func, kernels: KernelModule, *, workspace=None, alignment: int = 16, prefix: str = "model",
              input_names=None, comment: str = "", states=(), input_offsets=None) -> CProgram:
    """Translate a planned Relax ``main`` into a :class:`CProgram`.

    ``workspace``: ``[(offset, bytes)]`` per kernel call in program order when the
    planner placed each call's workspace in the arena (ArenaPlanMemory); None
    appends one shared workspace region, as large as the largest need, after the
    storages (TVM's StaticPlanBlockMemory plans no workspace). ``states``: the
    :class:`~tvm_memsched.relax.frontends.tflite_state.StateVar`\\ s of a stateful
    ``main`` (their parameters and results become state buffers).
    ``input_offsets``: the arena offset of each input when the planner placed the
    inputs and outputs in the arena (``plan_function(io=True)``; not with states);
    the program then reads its inputs from and leaves its outputs in the arena.
    """
    if input_offsets is not None and states:
        raise UnsupportedError("a stateful model keeps its inputs and outputs outside the arena")
    tr = _Translator(func, kernels, alignment, states, input_offsets)
    tr.run()
    leaves, bases, copies, state_copies, in_place = tr.outputs()
    if input_offsets is not None:
        bases, copies = {}, []
    cstates = [CState(s.name, tuple(s.shape), s.dtype, tr.add_array(s.init), in_place[k])
               for k, s in enumerate(states)]
    storage_bytes = tr.storage_top
    if workspace is None:
        ws_base = _align(storage_bytes, alignment)
        ws_bytes = max([kernels.workspace[c.kernel] for c in tr.calls] or [0])
        for c in tr.calls:
            c.workspace_offset, c.workspace_bytes = ws_base, kernels.workspace[c.kernel]
        arena = ws_base + ws_bytes if ws_bytes else storage_bytes
    else:
        if len(workspace) != len(tr.calls):
            raise RuntimeError(f"workspace plan has {len(workspace)} calls, the program {len(tr.calls)}")
        for c, (off, size) in zip(tr.calls, workspace):
            need = kernels.workspace[c.kernel]
            if need > size:
                raise RuntimeError(f"kernel {c.kernel} needs {need} workspace bytes but {size} were planned")
            c.workspace_offset, c.workspace_bytes = off, size
        ws_bytes = 0
        arena = storage_bytes
    user = [p for i, p in enumerate(func.params) if i not in tr.state_of_param]
    names = list(input_names) if input_names is not None else [p.name for p in user]
    inputs = [(names[i], tr.values[p].shape, tr.values[p].dtype) for i, p in enumerate(user)]
    outputs = [(t.shape, t.dtype) for t in leaves]
    prog = CProgram(prefix, inputs, outputs, tr.calls, tr.params, storage_bytes, ws_bytes, arena, bases, copies,
                    kernels, comment, cstates, state_copies)
    if input_offsets is not None:
        prog.input_places = [tr.values[p] for p in user]
        prog.output_places = leaves
    return prog
