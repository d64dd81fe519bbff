"""TIR kernels -> one C file with TVM's C code generator, and what each kernel needs at run time.

All PrimFuncs a model calls are built together into one C module (one
``__tvm_ffi__library_ctx``), each with the ``global_symbol`` ``<prefix>_<name>``
so the C function is ``__tvm_ffi_<prefix>_<name>``; two models can be linked
into one firmware. Assertions and vectorization are disabled (asserts cost
flash and check nothing a static export can get wrong; vectorized loops come
out as OpenCL-style C that GCC rejects). ``fabs`` gets a lowering rule for the
C target (TVM 0.27 has none and fails with ``Unresolved call tirx.fabs``).
TVM prints float32 immediates with 7 significant digits, too few to give every
float32 back (a quantization scale of 0.0176254269 came out as 1.762543e-02f,
one unit in the last place off, and a QUANTIZE rounded a value to the next
step): :func:`c_exact_floats` writes each with the 9 it needs, from the values
in the lowered TIR the code generator was given.

The generated kernels call ``TVMBackendAllocWorkspace`` for internal buffers of
1 KiB or more and free them in reverse order. :func:`workspace_requests` reads
those calls from the C text; :func:`workspace_need` replays them with the
runtime's alignment rule, which gives the exact bytes the runtime will be
asked for, so each kernel call's region can be planned ahead of time.

Example
-------
>>> src = '''TVM_DLL int32_t __tvm_ffi_m_k(void* self_handle, void* args, int32_t num_args, void* result) {
...   float* a = ((float*)TVMBackendAllocWorkspace(1, dev_id, (uint64_t)1028ULL, 2, 32));
...   float* b = ((float*)TVMBackendAllocWorkspace(1, dev_id, (uint64_t)2048ULL, 2, 32));
...   if (TVMBackendFreeWorkspace(1, dev_id, b) != 0) { return -1; }
...   if (TVMBackendFreeWorkspace(1, dev_id, a) != 0) { return -1; }
...   return 0;
... }'''
>>> reqs = workspace_requests(src)
>>> reqs
{'m_k': [('alloc', 1028), ('alloc', 2048), ('free', 0), ('free', 0)]}
>>> workspace_need(reqs["m_k"], align=8)
3080
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..core.errors import UnsupportedError

__all__ = ["KernelModule", "compile_kernels", "c_identifier", "library_args", "workspace_requests", "workspace_need", "c_special_floats", "c_exact_floats",
           "workspace_align", "SUPPORTED_DTYPES"]

#: tensor dtypes the C export handles (C has no portable half / bfloat16 / fp8 type)
SUPPORTED_DTYPES = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                    "uint64", "bool")

_RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
_FUNC_RE = re.compile(r"TVM_DLL int32_t __tvm_ffi_(\w+)\(void\* self_handle, void\* args, int32_t num_args, "
                      r"void\* result\) \{")
_EVENT_RE = re.compile(r"TVMBackend(Alloc|Free)Workspace\(([^;]*)")
_NBYTES_RE = re.compile(r"^\s*\d+\s*,\s*\w+\s*,\s*\(uint64_t\)(\d+)ULL\s*,")
_fabs_registered = False


def workspace_align() -> int:
    """The runtime's workspace alignment (``TVM_MEMSCHED_WS_ALIGN`` in ``runtime/tvm_memsched_rt.h``)."""
    with open(os.path.join(_RUNTIME_DIR, "tvm_memsched_rt.h"), encoding="utf-8") as f:
        return int(re.search(r"#define TVM_MEMSCHED_WS_ALIGN (\d+)", f.read()).group(1))


def c_identifier(name: str) -> str:
    """``name`` with every character that is not valid in a C identifier replaced by ``_``."""
    ident = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return ident if ident and not ident[0].isdigit() else "_" + ident


def _function_bodies(source: str) -> dict[str, str]:
    """``{symbol suffix: body text}`` of every ``__tvm_ffi_*`` definition in ``source``."""
    out = {}
    for m in _FUNC_RE.finditer(source):
        depth, i = 1, m.end()
        while depth and i < len(source):
            c = source[i]
            depth += (c == "{") - (c == "}")
            i += 1
        out[m.group(1)] = source[m.end():i]
    return out


def workspace_requests(source: str) -> dict[str, list[tuple[str, int]]]:
    """Workspace calls of each kernel in ``source`` in program order: ``[("alloc", bytes) | ("free", 0)]``.

    Raises :class:`UnsupportedError` for a request whose size is not a constant.
    """
    out = {}
    for name, body in _function_bodies(source).items():
        events = []
        for m in _EVENT_RE.finditer(body):
            if m.group(1) == "Free":
                events.append(("free", 0))
                continue
            size = _NBYTES_RE.match(m.group(2))
            if size is None:
                raise UnsupportedError(f"kernel {name} requests a workspace of non-constant size "
                                       f"({m.group(0).strip()}); static export needs static shapes")
            events.append(("alloc", int(size.group(1))))
        out[name] = events
    return out


def workspace_need(events, align: int | None = None) -> int:
    """Peak bytes a LIFO allocator with ``align``-byte starts needs for ``events`` (see the runtime)."""
    align = workspace_align() if align is None else align
    top = peak = 0
    stack = []
    for kind, n in events:
        if kind == "alloc":
            start = -(-top // align) * align
            stack.append(start)
            top = start + n
            peak = max(peak, top)
        elif stack:
            top = stack.pop()
    return peak


@dataclass
class KernelModule:
    """The kernels of one model as C source, with their symbols and workspace needs."""

    source: str
    symbols: dict = field(default_factory=dict)     # PrimFunc name -> C function symbol
    workspace: dict = field(default_factory=dict)   # PrimFunc name -> bytes the runtime must provide
    requests: dict = field(default_factory=dict)    # PrimFunc name -> workspace events in program order
    num_params: dict = field(default_factory=dict)  # PrimFunc name -> number of arguments
    library: dict = field(default_factory=dict)     # PrimFunc name -> the microkernel library's kernel
    outputs: dict = field(default_factory=dict)     # PrimFunc name -> positions of the params it only writes


def _register_fabs() -> None:
    """Lower ``tirx.fabs`` to ``fabsf``/``fabs`` for the C target (missing in TVM 0.27)."""
    global _fabs_registered
    if _fabs_registered:
        return
    from tvm.tirx import call_pure_extern, register_intrin_lowering

    def rule(op):
        dt = str(op.ty.dtype)
        if dt == "float32":
            return call_pure_extern(op.ty, "fabsf", *op.args)
        if dt == "float64":
            return call_pure_extern(op.ty, "fabs", *op.args)
        return op

    try:
        register_intrin_lowering("tirx.fabs", target="c", f=rule, level=100)
    except Exception:  # already registered at this level by someone else: theirs does the same job
        pass
    _fabs_registered = True


_HEADER = """\
/* Kernels of model '{prefix}', generated by TVM's C code generator for tvm_memsched.micro.
 * Packed calling convention: int32_t __tvm_ffi_<name>(void* self, TVMFFIAny* args, int32_t n, TVMFFIAny* ret)
 * with DLTensor* arguments (type index kTVMFFIDLTensorPtr). Assertions are compiled out.
 * Workspace comes from TVMBackendAllocWorkspace (tvm_memsched_rt.c); no heap is used. */
#include <math.h>
#define __tvm_ffi__library_ctx {prefix}_tvm_library_ctx
#define __tvm_ffi_main {prefix}_tvm_main
/* TVM's output declares shape/stride variables it does not use when assertions are off */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wunused-variable"
#pragma clang diagnostic ignored "-Wunused-parameter"
#pragma clang diagnostic ignored "-Wunused-function"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-function"
#endif
"""


def c_special_floats(source: str) -> str:
    """TVM's C output with its infinite and NaN float immediates, which it prints as ``inff`` / ``nanf`` (not C),
    written as ``INFINITY`` / ``NAN`` (math.h): a clamp to float32's range in a model's kernels otherwise fails to
    compile.

    >>> c_special_floats("v = (x < inff) ? x : inff; w = -inff; nanf(s); y = nanf;")
    'v = (x < INFINITY) ? x : INFINITY; w = -INFINITY; nanf(s); y = NAN;'
    """
    source = re.sub(r"(?<![\w.])inff(?![\w(])", "INFINITY", source)
    return re.sub(r"(?<![\w.])nanf(?![\w(])", "NAN", source)


_FLOAT32_LITERAL = re.compile(r"(?<![\w.])(\d\.\d{6}e[+-]\d{2,3})f(?![\w.])")


def c_exact_floats(source: str, values) -> str:
    """TVM's C output with each float32 literal (printed ``%.6e``, 7 significant digits) written with the 9
    digits that give the float32 back; ``values`` are the float32 immediates of the TIR it was printed from.

    >>> c_exact_floats("y = x / 1.762543e-02f + 5.000000e-01f;", [0.01762542687356472, 0.5])
    'y = x / 1.76254269e-02f + 5.000000e-01f;'
    """
    import numpy as np

    exact: dict = {}
    for v in values:
        f = abs(float(np.float32(v)))
        printed, full = "%.6e" % abs(float(v)), "%.8e" % f
        if float(np.float32(float(printed))) == f:
            continue                              # 7 digits give it back
        if exact.setdefault(printed, full) != full:
            raise UnsupportedError(f"two float32 constants of a kernel print alike in TVM's C output ({printed})")
    if not exact:
        return source
    return _FLOAT32_LITERAL.sub(lambda m: exact.get(m.group(1), m.group(1)) + "f", source)


def _float32_immediates(mods) -> list[float]:
    """The float32 immediates of the PrimFuncs in ``mods`` (from their TVMScript, which prints each one
    as ``T.float32(<repr of its value>)``)."""
    import tvm

    found = []
    for mod in mods:
        for func in mod.functions.values():
            if isinstance(func, tvm.tirx.PrimFunc):
                for m in re.finditer(r"T\.float32\(([-+0-9.eE]+)\)", func.script()):
                    try:
                        found.append(float(m.group(1)))
                    except ValueError:
                        continue
    return found


def _build_c(tmod, target):
    """``tvm.tirx.build(tmod, target)`` and the lowered modules its C code generator was given."""
    import tvm

    seen = []
    original = tvm.get_global_func("target.build.c")

    def build_c(mod, tgt):
        seen.append(mod)
        return original(mod, tgt)
    tvm.register_global_func("target.build.c", build_c, override=True)
    try:
        return tvm.tirx.build(tmod, target=target), seen
    finally:
        tvm.register_global_func("target.build.c", original, override=True)


_LIBRARY_PART = """
/* ---- kernels computed by tvm_memsched's microkernel library (tms_nn.c) ---- */
#include "tvm/runtime/c_backend_api.h"
#include "tvm/ffi/c_api.h"
#include "tms_nn.h"
#include "tvm_memsched_rt.h" /* tvm_memsched_workspace */

/* argument i: model.c passes the library's kernels an array of the data pointers themselves (integers as
 * pointer-sized values), not TVMFFIAny */
static void* tms_arg(void* args, int i) { return ((void* const*)args)[i]; }
"""


def library_args(args, data, at_run_time) -> tuple[list[str], list[int]]:
    """A library call's arguments as C ``void*`` expressions: a tensor's ``data(t)``, or NULL where
    ``at_run_time(t)`` (a caller's buffer, which ``<p>_run`` sets: its position is returned), integers as
    pointer-sized values (the wrapper reads them with ``tms_arg``).

    >>> library_args([("int", 1)], str, bool)
    (['(void*)(intptr_t)1'], [])
    """
    entries, runtime = [], []
    for j, a in enumerate(args):
        if isinstance(a, tuple) and a[0] == "int":
            entries.append(f"(void*)(intptr_t){int(a[1])}")
        elif isinstance(a, tuple):
            raise UnsupportedError("the microkernel library takes no float arguments")
        elif at_run_time(a):
            runtime.append(j)
            entries.append("NULL")
        else:
            entries.append(f"(void*)({data(a)})")
    return entries, runtime


def _library_wrappers(library: dict, names, symbols: dict) -> list[str]:
    """The library kernels' C functions, one per distinct function: a kernel whose wrapper would equal an
    earlier one's (the same operator and shapes, as TVM writes one PrimFunc per call site) calls that one,
    and ``symbols`` is changed to say so."""
    shared, out = {}, []
    for n in names:
        if n not in library:
            continue
        text = library[n].wrapper(symbols[n])
        key = text.split("\n", 1)[1].replace(symbols[n], "\0")      # without the comment naming the kernel
        if key in shared:
            symbols[n] = shared[key]
        else:
            shared[key] = symbols[n]
            out.append(text)
    return out


def compile_kernels(mod, names, target, prefix: str = "model", library=None) -> KernelModule:
    """Build the PrimFuncs ``names`` of ``mod`` into one C source for ``target`` (a C target).

    ``library``: ``{name: kernel}`` for kernels computed by the microkernel library instead
    (:func:`tvm_memsched.micro.nn.select`); ``kernel.wrapper(symbol)`` is the C function calling it.

    Raises :class:`UnsupportedError` when TVM's C code generator rejects a kernel.
    """
    import tvm

    _register_fabs()
    library = dict(library or {})
    symbols = {name: c_identifier(f"{prefix}_{name}") for name in names}
    if len(set(symbols.values())) != len(symbols):
        raise UnsupportedError("kernel names collide after conversion to C identifiers")
    from ..relax.analysis.inplace import write_only_params

    funcs = {}
    num_params, outputs = {}, {}
    for name in names:
        func = mod[name]
        if not isinstance(func, tvm.tirx.PrimFunc):
            raise UnsupportedError(f"'{name}' is not a TIR PrimFunc")
        num_params[name] = len(func.params)
        outputs[name] = write_only_params(func)
        if name not in library:
            funcs[symbols[name]] = func.with_attr("global_symbol", symbols[name])
    body = ""
    if funcs:
        tmod = tvm.IRModule(funcs)
        config = {"tirx.disable_assert": True, "tirx.disable_vectorize": True}
        try:
            with tvm.transform.PassContext(opt_level=3, config=config):
                lib, lowered = _build_c(tmod, target)
        except Exception as e:  # TVM raises assorted errors for kernels the C codegen cannot handle
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            raise UnsupportedError(f"TVM's C code generator cannot compile the kernels: "
                                   f"{lines[-1] if lines else type(e).__name__}") from None
        body = c_exact_floats(c_special_floats(lib.inspect_source()), _float32_immediates(lowered))
    if library:
        body += _LIBRARY_PART + "\n".join(_library_wrappers(library, names, symbols))
    reqs = workspace_requests(lib.inspect_source()) if funcs else {}
    by_symbol = {sym: name for name, sym in symbols.items()}
    requests = {by_symbol[s]: ev for s, ev in reqs.items() if s in by_symbol}
    requests.update({n: library[n].workspace_events() for n in names if n in library})
    missing = [n for n in names if n not in requests]
    if missing:
        raise UnsupportedError(f"TVM's C output has no function for kernel(s) {', '.join(missing)}")
    align = workspace_align()
    workspace = {n: workspace_need(ev, align) for n, ev in requests.items()}
    return KernelModule(_HEADER.format(prefix=prefix) + body, symbols, workspace, requests, num_params,
                        {n: k for n, k in library.items() if n in symbols}, outputs)
