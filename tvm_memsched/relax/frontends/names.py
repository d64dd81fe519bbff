"""C-safe variable names: a model file's tensor names never reach generated code as written.

Frontends name Relax variables after the model's tensors, and TVM's code
generators turn those names into C identifiers (kernel parameters, locals). A
name with a quote, a newline followed by ``#include``, a backslash, ``*/``, a
space or non-ASCII letters would break the C build or inject lines into it.
:func:`c_safe_names` renames every variable of every Relax function to a
sanitised identifier (letters, digits and underscores, not starting with a
digit), made unique with a numeric suffix; the original names stay available
as a mapping for reports.

Example
-------
>>> c_identifier('my "input"\\n#include "evil.h"')
'my_input_include_evil_h'
>>> c_identifier("3x3 conv")
'v_3x3_conv'
"""

from __future__ import annotations

import re

from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

__all__ = ["c_identifier", "c_safe_names"]


def c_identifier(name: str, fallback: str = "v") -> str:
    """``name`` reduced to ``[A-Za-z0-9_]`` (runs of anything else become one ``_``), never starting with a digit."""
    s = re.sub(r"[^A-Za-z0-9_]+", "_", str(name)).strip("_")
    if not s:
        return fallback
    if s[0].isdigit():
        s = f"{fallback}_{s}"
    return s[:64]


@mutator
class _Renamer(PyExprMutator):
    """Rebuilds every var definition of a function with a sanitised unique name."""

    def __init__(self, mod=None):
        super().__init__(mod)
        self.used: set = set()
        self.renamed: dict = {}

    def fresh(self, name: str) -> str:
        base = c_identifier(name)
        out, k = base, 1
        while out in self.used:
            k += 1
            out = f"{base}_{k}"
        self.used.add(out)
        if out != name:
            self.renamed[out] = name
        return out

    def _new(self, var):
        cls = relax.DataflowVar if isinstance(var, relax.DataflowVar) else relax.Var
        new = cls(self.fresh(var.name), var.ty, var.span)
        self.set_var_remap(var, new)
        return new

    def visit_var_def_(self, var):
        return self._new(var)

    def visit_dataflow_var_def_(self, var):
        return self._new(var)


def c_safe_names(mod) -> tuple:
    """``(module with every Relax variable renamed to a unique C identifier, {new name: original name})``.

    Functions whose variables already are such identifiers come back unchanged.
    """
    new_mod = mod
    renamed: dict = {}
    for gv, func in mod.functions_items():
        if not isinstance(func, relax.Function):
            continue
        names = [p.name for p in func.params]
        if all(c_identifier(n) == n for n in names) and _bindings_safe(func):
            continue
        r = _Renamer(mod)
        params = [r._new(p) for p in func.params]
        body = r.visit_expr(func.body)
        new_func = relax.Function(params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
        if new_mod is mod:
            new_mod = mod.clone()
        new_mod[gv] = new_func
        renamed.update(r.renamed)
    return new_mod, renamed


def _bindings_safe(func) -> bool:
    names = []

    def visit(e):
        if isinstance(e, relax.Var):
            names.append(e.name)

    relax.analysis.post_order_visit(func.body, visit)
    return all(c_identifier(n) == n for n in names) and len(set(names)) == len(set(map(c_identifier, names)))
