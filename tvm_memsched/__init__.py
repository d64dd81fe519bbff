"""tvm_memsched: memory-aware operator scheduling and arena planning for TVM and edge runtimes.

The framework-neutral core (:mod:`tvm_memsched.core`) and the schedulers
(:mod:`tvm_memsched.schedulers`) need only numpy and networkx. The TVM parts
(``transform``, ``pipeline``, ``build``, ``compare`` and their ``PipelineOptions``) are imported on first use,
so ``import tvm_memsched`` works without TVM installed.
"""

__version__ = "0.1.0"

from .core import Graph, MemschedError, Op, Tensor, lower_bound, simulate  # noqa: F401

_LAZY = {
    "schedule": ("tvm_memsched.schedulers", "schedule"),
    "transform": ("tvm_memsched.transform", None),
    "pipeline": ("tvm_memsched.relax.pipeline", "pipeline"),
    "build": ("tvm_memsched.relax.pipeline", "build"),
    "compare": ("tvm_memsched.relax.compare", "compare"),
    "PipelineOptions": ("tvm_memsched.relax.options", "PipelineOptions"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tvm_memsched' has no attribute {name!r}")
