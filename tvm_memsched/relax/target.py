"""Targets and TVM's default Relax pass lists for them.

:func:`as_target` accepts the forms the public functions take (a Target, a
JSON-style dict, a bare kind name); :func:`stages` returns TVM's default
pipeline for a target split into its four stages, which our pipeline
(:mod:`.pipeline`), the comparison (:mod:`.compare`), the identity rewriting's
kernel-level scoring (:mod:`.rewrite`) and the microcontroller export put
their passes into.

Example
-------
>>> as_target("llvm").kind.name
'llvm'
>>> sorted(stages({"kind": "llvm"}))
['dataflow_lower', 'dispatch', 'finalize', 'legalize']
"""

from __future__ import annotations

import importlib

import tvm

from ..core.errors import UnsupportedError

__all__ = ["as_target", "stages"]

_BACKENDS = {"llvm": "cpu_generic", "c": "cpu_generic", "cuda": "cuda", "rocm": "rocm", "metal": "gpu_generic",
             "vulkan": "gpu_generic", "opencl": "gpu_generic", "webgpu": "gpu_generic"}


def as_target(target) -> tvm.target.Target:
    """A Target from a Target, a JSON-style dict, or a bare kind name such as ``"llvm"``."""
    if target is None:
        target = {"kind": "llvm"}
    if isinstance(target, tvm.target.Target):
        return target
    if isinstance(target, str) and target.isidentifier():
        target = {"kind": target}
    return tvm.target.Target(target)


def stages(target) -> dict[str, list]:
    """TVM's default pass lists for ``target``: dispatch, legalize, dataflow_lower, finalize."""
    target = as_target(target)
    name = _BACKENDS.get(target.kind.name)
    if name is None:
        raise UnsupportedError(f"no default Relax pipeline for target kind '{target.kind.name}'")
    mod = importlib.import_module(f"tvm.relax.backend.{name}.pipeline")
    dispatch = mod.library_dispatch_passes(target) if hasattr(mod, "library_dispatch_passes") else []
    return {"dispatch": list(dispatch), "legalize": list(mod.legalize_passes(target)),
            "dataflow_lower": list(mod.dataflow_lower_passes(target)), "finalize": list(mod.finalize_passes(target))}
