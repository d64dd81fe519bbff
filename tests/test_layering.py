"""The package's structure, read from the source with ``ast``: layers, no import cycles, no private names across
modules, small modules.

Every module of every package counts, and so does every import in it: module-level and function-level
``import`` / ``from ... import`` statements, ``importlib.import_module("tvm_memsched....")`` and the module
names of lazy-import tables (a string constant that is exactly a module's name).
"""

from __future__ import annotations

import ast
import os
import re
import sys

import networkx as nx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "tvm_memsched"

#: what each layer may import (``top``: the modules at the package's top, e.g. ``tvm_memsched.transform``);
#: ``core <- schedulers <- relax, tflite <- micro <- zoo <- app``, relax and tflite are siblings
ALLOWED = {
    "core": {"core"},
    "schedulers": {"core", "schedulers"},
    "relax": {"core", "schedulers", "relax"},
    "tflite": {"core", "schedulers", "tflite"},
    "micro": {"core", "schedulers", "relax", "tflite", "micro"},
    "zoo": {"core", "schedulers", "relax", "tflite", "micro", "zoo"},
    "app": {"core", "schedulers", "relax", "tflite", "micro", "zoo", "app"},
}
ALLOWED["top"] = set(ALLOWED) | {"top"}

#: third-party modules the TVM-free layers may import, at module level and inside functions (optional extras)
THIRD_PARTY = {"core": ({"numpy", "networkx"}, {"ortools"}), "schedulers": ({"numpy", "networkx"}, {"ortools"})}

MAX_LINES = 800


def _module_files() -> dict[str, str]:
    """Module name -> path, for every ``.py`` file of the package."""
    out = {}
    for dirpath, _, files in os.walk(os.path.join(ROOT, PKG)):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


MODULES = _module_files()
TREES = {m: _parse(p) for m, p in MODULES.items()}


def layer(module: str) -> str:
    """The package a module belongs to (``core``, ...), or ``top`` for the modules at the package's top."""
    parts = module.split(".")
    is_package = MODULES[module].endswith("__init__.py")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and is_package) else "top"


class Import:
    """One import: ``module`` imports ``target`` (a module of the package), maybe the name ``name`` from it."""

    def __init__(self, module, target, name, line, top_level):
        self.module, self.target, self.name, self.line, self.top_level = module, target, name, line, top_level

    def __repr__(self):
        what = f"{self.target}.{self.name}" if self.name else self.target
        return f"{self.module}:{self.line} imports {what}"


def _top_level_nodes(tree) -> set:
    """The import nodes that run when the module is imported (not inside a function)."""
    out = set()

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.add(child)
            visit(child)

    visit(tree)
    return out


def _resolve(module: str, level: int, target: str | None) -> str:
    base = module.split(".") if MODULES[module].endswith("__init__.py") else module.split(".")[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _owning_module(dotted: str) -> str:
    """The longest prefix of ``dotted`` that is a module of the package."""
    parts = dotted.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts)


def parse(module: str):
    """``(imports of the package's modules, third-party imports as (top name, line, top level))`` of a module."""
    tree = TREES[module]
    top = _top_level_nodes(tree)
    internal, external = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == PKG or a.name.startswith(PKG + "."):
                    internal.append(Import(module, _owning_module(a.name), None, node.lineno, node in top))
                else:
                    external.append((a.name.split(".")[0], node.lineno, node in top))
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node.level, node.module) if node.level else (node.module or "")
            if not (source == PKG or source.startswith(PKG + ".")):
                if not node.level:
                    external.append((source.split(".")[0], node.lineno, node in top))
                continue
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in MODULES:
                    internal.append(Import(module, full, None, node.lineno, node in top))
                else:
                    internal.append(Import(module, _owning_module(source), a.name, node.lineno, node in top))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value != PKG \
                and node.value in MODULES:
            internal.append(Import(module, node.value, None, node.lineno, False))   # lazy-import tables
    return internal, external


IMPORTS = {m: parse(m) for m in sorted(MODULES)}


def test_every_package_has_a_layer():
    packages = {m.split(".")[1] for m in MODULES if m.count(".") >= 1 and layer(m) != "top"}
    assert packages <= set(ALLOWED), f"packages without a layer in ALLOWED: {packages - set(ALLOWED)}"
    assert {"core", "schedulers", "relax", "tflite", "micro", "zoo", "app"} <= packages


def test_imports_point_down_the_layers():
    bad = [imp for m, (internal, _) in IMPORTS.items() for imp in internal
           if layer(imp.target) not in ALLOWED[layer(m)]]
    assert not bad, "imports against the layering " + str(ALLOWED) + ":\n" + "\n".join(map(repr, bad))


def test_no_import_cycles_between_modules():
    g = nx.DiGraph()
    g.add_nodes_from(MODULES)
    for m, (internal, _) in IMPORTS.items():
        for imp in internal:
            if imp.target != m:
                g.add_edge(m, imp.target, line=imp.line)
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    detail = []
    for c in cycles:
        cyc = nx.find_cycle(g.subgraph(c))
        detail.append(" -> ".join(f"{u}:{g.edges[u, v]['line']}" for u, v in cyc) + f" -> {cyc[0][0]}")
    assert not cycles, "import cycles:\n" + "\n".join(detail)


def _module_aliases(module: str) -> dict:
    """Names bound to modules of the package by imports in ``module`` (``from . import builder`` -> builder)."""
    out = {}
    for node in ast.walk(TREES[module]):
        if isinstance(node, ast.ImportFrom):
            source = _resolve(module, node.level, node.module) if node.level else (node.module or "")
            for a in node.names:
                if f"{source}.{a.name}" in MODULES:
                    out[a.asname or a.name] = f"{source}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name in MODULES:
                    out[a.asname] = a.name
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_names_across_modules():
    bad = [imp for m, (internal, _) in IMPORTS.items() for imp in internal
           if imp.name and _private(imp.name) and imp.target != m]
    bad += [imp for m, (internal, _) in IMPORTS.items() for imp in internal
            if imp.name is None and _private(imp.target.rsplit(".", 1)[-1])
            and imp.target.rsplit(".", 1)[0] != m.rsplit(".", 1)[0]]
    for m in MODULES:
        aliases = _module_aliases(m)
        for node in ast.walk(TREES[m]):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases and _private(node.attr) and aliases[node.value.id] != m:
                bad.append(f"{m}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert not bad, "private names used across modules:\n" + "\n".join(map(str, bad))


def test_tvm_free_layers_import_only_numpy_and_networkx():
    """core and schedulers: the standard library, numpy and networkx; OR-Tools only inside functions."""
    bad = []
    for m, (_, external) in IMPORTS.items():
        if layer(m) not in THIRD_PARTY:
            continue
        at_top, inside = THIRD_PARTY[layer(m)]
        for name, line, top_level in external:
            if name in sys.stdlib_module_names or name == "__future__":
                continue
            if name not in at_top and (top_level or name not in inside):
                bad.append(f"{m}:{line} imports {name}" + (" at module level" if top_level else ""))
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    with open(MODULES[module], encoding="utf-8") as f:
        n = sum(1 for _ in f)
    assert n <= MAX_LINES, f"{module} has {n} lines (at most {MAX_LINES}: split it by job)"


#: relax/'s top level: the glue; everything else lives in a room (frontends/, passes/, analysis/, int8/, rewrite/,
#: legalize/: lowerings of Relax operators TVM leaves unlowered); ir and schedule are the TVM helpers the rooms share
RELAX_TOP = {"pipeline", "options", "compare", "graph", "ir", "schedule", "target", "testing"}
RELAX_ROOMS = {"frontends", "passes", "analysis", "int8", "rewrite", "legalize"}


def _in(module: str, room: str) -> bool:
    return module == f"{PKG}.relax.{room}" or module.startswith(f"{PKG}.relax.{room}.")


def test_relax_top_level_is_the_glue_and_rooms_hold_the_rest():
    top = {m.split(".")[2] for m in MODULES if m.startswith(f"{PKG}.relax.") and m.count(".") == 2}
    packages = {m.split(".")[2] for m in MODULES if m.startswith(f"{PKG}.relax.") and m.count(".") == 2
                and MODULES[m].endswith("__init__.py")}
    assert packages == RELAX_ROOMS, f"relax/ packages {sorted(packages)}, expected {sorted(RELAX_ROOMS)}"
    assert top - packages == RELAX_TOP, f"modules at relax/'s top: {sorted(top - packages)}"


def test_relax_rooms_keep_apart():
    """Importers use no pass, passes use no importer, nothing under relax/ uses app/."""
    rules = [("frontends", lambda t: _in(t, "passes"), "a pass"), ("passes", lambda t: _in(t, "frontends"), "an importer")]
    bad = [f"{imp!r} ({what})" for m, (internal, _) in IMPORTS.items() for room, wrong, what in rules
           if _in(m, room) for imp in internal if wrong(imp.target)]
    bad += [repr(imp) for m, (internal, _) in IMPORTS.items() if m.startswith(f"{PKG}.relax")
            for imp in internal if imp.target.startswith(f"{PKG}.app")]
    assert not bad, "imports across relax/'s rooms:\n" + "\n".join(bad)


def test_readme_layout_lists_every_package():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text[text.index("## Layout and development"):]
    block = re.search(r"```\n(.*?)```", section, re.S).group(1)
    listed = set(re.findall(r"^  (\w+)/", block, re.M))
    packages = {m.split(".")[1] for m in MODULES if m.count(".") == 1 and MODULES[m].endswith("__init__.py")}
    assert listed == packages, f"README layout lists {sorted(listed)}, the package has {sorted(packages)}"


def test_the_checker_sees_function_level_and_lazy_imports():
    """The checks above are only as good as the parser: it must see imports inside functions and lazy tables."""
    internal, _ = IMPORTS["tvm_memsched.relax.passes.transform"]
    assert any(i.target == "tvm_memsched.relax.passes.arena" for i in internal)
    internal, _ = IMPORTS["tvm_memsched"]
    assert any(i.target == "tvm_memsched.relax.pipeline" for i in internal)         # the _LAZY table
    internal, _ = IMPORTS["tvm_memsched.app.cli"]
    inner = [i for i in internal if i.target == "tvm_memsched.relax.compare"]
    assert inner and not any(i.top_level for i in inner)                             # inside cmd_compare
    internal, _ = IMPORTS["tvm_memsched.relax.rewrite.search"]
    assert any(i.target == "tvm_memsched.schedulers" and i.name == "schedule" for i in internal)
