"""OR-Tools' CP-SAT module, imported without paying for pandas.

``ortools.sat.python.cp_model`` imports pandas at module level, only for its
``*_series`` helpers and type hints: 0.3 s of the 0.5 s the import takes, in
every compile that plans an arena. :func:`cp_model` imports it with a stand-in
``pandas`` module whose attributes are placeholder types while the import runs
and the real pandas, imported on first use, afterwards; so the series helpers
still work, and a real ``pandas`` imported elsewhere is used as it is.

>>> m = cp_model()
>>> model = m.CpModel(); x = model.new_int_var(0, 3, "x"); model.maximize(x)
>>> m.CpSolver().solve(model) == m.OPTIMAL
True
"""

from __future__ import annotations

import importlib
import sys
import types

__all__ = ["cp_model"]


class _LazyPandas(types.ModuleType):
    """``pandas`` for cp_model: placeholder classes during its import, the real module after."""

    def __init__(self):
        super().__init__("pandas")
        self._importing = True

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if self.__dict__.get("_importing", False):
            return type(name, (), {})             # Index / Series in type hints
        return getattr(importlib.import_module("pandas"), name)


def cp_model():
    """The ``ortools.sat.python.cp_model`` module (see the module docstring)."""
    done = sys.modules.get("ortools.sat.python.cp_model")
    if done is not None:
        return done
    if "pandas" in sys.modules:
        return importlib.import_module("ortools.sat.python.cp_model")
    stand_in = _LazyPandas()
    sys.modules["pandas"] = stand_in
    try:
        module = importlib.import_module("ortools.sat.python.cp_model")
    finally:
        stand_in._importing = False
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
    return module
