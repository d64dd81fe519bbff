"""Write an exported model's C project: the program, its kernels and constants, the runtime shim, the
microkernel library's files when the model calls it, and TVM's C headers (:func:`write_project`).

Example
-------
>>> sorted(h for _, h in HEADERS)[:2]
['dlpack/dlpack.h', 'tvm/ffi/c_api.h']
"""

from __future__ import annotations

import os

from ..core.errors import MemschedError
from ..core.files import atomic_write, copy_file, output_dir

__all__ = ["write_project", "HEADERS"]

_RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
#: TVM's C headers the generated kernels include: (wheel, path under its include directory)
HEADERS = [("tvm", "tvm/runtime/base.h"), ("tvm", "tvm/runtime/c_backend_api.h"),
           ("tvm_ffi", "tvm/ffi/c_api.h"), ("tvm_ffi", "tvm/ffi/extra/c_env_api.h"),
           ("tvm_ffi", "dlpack/dlpack.h")]


def write_project(out_dir: str, name: str, prog, kernels, library: bool = False) -> dict:
    """Write the C project (with the microkernel library's files if ``library``); returns ``{kind: path}``."""
    from .toolchain import tvm_include_dirs

    output_dir(out_dir)
    files = {}

    def put(kind, fname, text):
        path = os.path.join(out_dir, fname)
        atomic_write(path, text)
        files[kind] = os.path.abspath(path)

    put("header", f"{name}.h", prog.header())
    put("source", f"{name}.c", prog.source())
    put("params", f"{name}_params.c", prog.params_source())
    put("kernels", f"{name}_kernels.c", kernels.source)
    from .nn import LIBRARY_FILES

    for fname in ("tvm_memsched_rt.c", "tvm_memsched_rt.h") + (LIBRARY_FILES if library else ()):
        copy_file(os.path.join(_RUNTIME_DIR, fname), os.path.join(out_dir, fname))
        files[fname.replace(".", "_")] = os.path.abspath(os.path.join(out_dir, fname))
    if library:             # the library's variants the calls reach; the others are not compiled
        from .nn import config_header

        put("tms_nn_config_h", "tms_nn_config.h", config_header(prog, kernels.library))
    inc_dirs = tvm_include_dirs()
    for _pkg, rel in HEADERS:
        src = next((os.path.join(d, rel) for d in inc_dirs if os.path.exists(os.path.join(d, rel))), None)
        if src is None:
            raise MemschedError(f"TVM header {rel} not found in the installed wheels ({', '.join(inc_dirs)})")
        dst = os.path.join(output_dir(out_dir, "include", os.path.dirname(rel)), os.path.basename(rel))
        copy_file(src, dst)
    files["include"] = os.path.abspath(os.path.join(out_dir, "include"))
    return files
