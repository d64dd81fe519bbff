"""Read a ``torch.export`` archive (``.pt2``) without running anything the file holds.

``torch.export.load`` trusts its file: it unpickles the sample inputs
(``data/sample_inputs/*.pt``), pickled weights and constants (``"use_pickle":
true``), legacy ``.pt`` weight files, torchbind and opaque objects, and loads
AOTInductor's native libraries; shape expressions go through ``sympy.sympify``
(Python's ``eval``) and operator names through ``getattr`` chains from ``torch``.
Any of these runs code chosen by whoever wrote the file.

:func:`load_exported_program` reads only what an exported program needs and
what can be read without code: the program's JSON (``models/<name>.json``), the
weight and constant tables (JSON) and their raw tensor bytes. Before the JSON
reaches torch's deserializer it is checked: operator targets must be ATen /
higher-order operators (``torch.ops.<ns>.<op>[.<overload>]``), ``_operator`` /
``math`` functions or torch's symbolic-int helpers; shape expressions may only
name shape symbols (``s0``, ``u1``...), numbers and torch's sympy functions;
guard code is dropped; sample inputs are never read. An archive that needs any
of the refused parts is an :class:`~tvm_memsched.core.errors.UntrustedModelError`
naming the part and the opt-in: ``trust_model_code=True`` (the CLI's
``--trust-model-code``), which hands the file to ``torch.export.load``, as
``torch.load(weights_only=False)`` does for checkpoints.

Example
-------
>>> import io, torch
>>> class Net(torch.nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = torch.nn.Linear(4, 2)
...     def forward(self, x):
...         return torch.relu(self.fc(x))
>>> f = io.BytesIO()
>>> torch.export.save(torch.export.export(Net(), (torch.ones(1, 4),)), f)
>>> ep = load_exported_program(f.getvalue())
>>> sorted(ep.state_dict), ep.example_inputs is None
(['fc.bias', 'fc.weight'], True)
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import json
import posixpath
import re
import zipfile

from ...core.errors import InputFileError, UntrustedModelError, last_line
from ...core.limits import check_tensor_bytes

__all__ = ["load_exported_program", "trusting_model_code", "MAX_ARCHIVE_BYTES"]

#: the most bytes the entries of one archive may unpack to (declared sizes, checked before reading)
MAX_ARCHIVE_BYTES = 8 << 30

_TRUST = contextvars.ContextVar("tvm_memsched_trust_model_code", default=False)

_OPT_IN = "pass --trust-model-code (trust_model_code=True) only if you trust whoever wrote the file"

#: identifiers a shape expression may contain besides shape symbols and numbers
_SYMPY_NAMES = frozenset((
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt", "FloorToInt",
    "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator",
    "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity", "OpaqueUnaryFn_sqrt",
    "Max", "Min", "Abs", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not", "True", "False", "oo",
    "Integer", "Rational", "Float", "floor", "ceiling", "sqrt", "Symbol", "Add", "Mul", "Pow",
    "positive", "integer", "nonnegative", "real", "finite", "negative", "nonpositive"))
_SYMBOL = re.compile(r"[a-z]{1,8}\d+\Z")
_EXPR_CHARS = re.compile(r"[\w\s+\-*/%(),.<>=!&|~^']*\Z")
_TARGETS = (re.compile(r"torch\.ops\.[A-Za-z]\w*\.[A-Za-z]\w*(\.[A-Za-z]\w*)?\Z"),
            re.compile(r"(_operator|math)\.[a-z][a-z0-9_]*\Z"),
            re.compile(r"torch\.(sym_[a-z_]+|_sym_sqrt)\Z"))
_NATIVE = (".so", ".dll", ".dylib", ".pyd", ".cubin", ".o")


@contextlib.contextmanager
def trusting_model_code(trust: bool = True):
    """Within the block, :func:`load_exported_program` calls without ``trust_model_code`` use ``trust``
    (what the CLI's ``--trust-model-code`` sets for one command).

    >>> with trusting_model_code():
    ...     _TRUST.get()
    True
    """
    token = _TRUST.set(bool(trust))
    try:
        yield
    finally:
        _TRUST.reset(token)


def load_exported_program(buf: bytes, what: str = "model", trust_model_code: bool | None = None):
    """The ``torch.export.ExportedProgram`` stored in ``buf`` (see the module docstring).

    Parameters
    ----------
    buf : bytes
        The ``.pt2`` file's bytes.
    what : str
        How errors name the file.
    trust_model_code : bool, optional
        ``True``: load with ``torch.export.load`` (runs the file's pickles and native code); default: the
        innermost :func:`trusting_model_code` block's setting, else ``False``.

    Raises
    ------
    UntrustedModelError
        The archive needs code to load (pickles, torchbind or opaque objects, native code, unknown operator
        targets or expressions).
    InputFileError
        Not a readable archive (corrupt, truncated, inconsistent tables, oversized entries).
    """
    import torch

    if trust_model_code is None:
        trust_model_code = _TRUST.get()
    if trust_model_code:
        return torch.export.load(io.BytesIO(bytes(buf)))
    try:
        archive = zipfile.ZipFile(io.BytesIO(bytes(buf)))
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise InputFileError(f"{what} is not a readable torch.export program (.pt2): {last_line(e, 160)}") \
            from None
    with archive:
        return _Reader(archive, what).program()


class _Reader:
    """One archive's entries, read within :data:`MAX_ARCHIVE_BYTES`."""

    def __init__(self, archive: zipfile.ZipFile, what: str):
        self.archive, self.what = archive, what
        self.sizes = {i.filename: i.file_size for i in archive.infolist()}
        if sum(self.sizes.values()) > MAX_ARCHIVE_BYTES:
            raise InputFileError(f"{what}: the archive unpacks to {sum(self.sizes.values()):,} bytes, more than "
                                 f"the {MAX_ARCHIVE_BYTES:,} B limit")
        versions = [n for n in self.sizes if posixpath.basename(n) == "archive_version" and n.count("/") <= 1]
        if len(versions) != 1:
            raise InputFileError(f"{what} is not a torch.export archive (.pt2): no archive_version entry")
        self.root = versions[0][:-len("archive_version")]
        for name in self.sizes:
            rel = name[len(self.root):] if name.startswith(self.root) else name
            if rel.startswith("data/aotinductor/") or name.lower().endswith(_NATIVE):
                self.refuse(f"holds AOTInductor native code ({rel})")

    def refuse(self, why: str):
        raise UntrustedModelError(f"{self.what}: {why}, which only runs by executing code from the file; "
                                  f"{_OPT_IN}")

    def error(self, why: str):
        raise InputFileError(f"{self.what} is not a readable torch.export program (.pt2): {why}")

    def has(self, rel: str) -> bool:
        return self.root + rel in self.sizes

    def read(self, rel: str) -> bytes:
        if not self.has(rel):
            self.error(f"entry {rel} is missing")
        try:
            return self.archive.read(self.root + rel)
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as e:
            self.error(f"entry {rel}: {last_line(e, 120)}")

    def json(self, rel: str):
        try:
            return json.loads(self.read(rel))
        except (ValueError, RecursionError) as e:
            self.error(f"entry {rel} is not JSON: {last_line(e, 120)}")

    def program(self):
        from torch._export.serde import schema
        from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass
        from torch.export.pt2_archive.constants import ARCHIVE_VERSION_VALUE

        version = self.read("archive_version").decode("utf-8", "replace").strip()
        if version != ARCHIVE_VERSION_VALUE:
            self.error(f"archive version {version[:20]!r}, this PyTorch reads {ARCHIVE_VERSION_VALUE!r}")
        if self.has("byteorder") and self.read("byteorder").strip() not in (b"little", b""):
            self.error("big-endian tensor data")
        models = sorted(n[len(self.root) + len("models/"):-len(".json")] for n in self.sizes
                        if n.startswith(self.root + "models/") and n.endswith(".json"))
        if not models:
            self.error("no models/<name>.json entry")
        name = "model" if "model" in models else models[0]
        if len(models) > 1 and name != "model":
            self.error(f"{len(models)} programs ({', '.join(models[:4])}) and none named 'model'")
        program = self.json(f"models/{name}.json")
        _check_program(program, self)
        state = self.tensors("weights", name)
        constants = self.tensors("constants", name)
        try:
            serialized = _dict_to_dataclass(schema.ExportedProgram, program)
            return ExportedProgramDeserializer().deserialize(serialized, state, constants, None)
        except RecursionError:
            self.error("the program nests too deeply")
        except Exception as e:  # SerializeError, KeyError, TypeError... from a malformed program
            self.error(f"{type(e).__name__}: {last_line(e, 160)}")

    def tensors(self, kind: str, name: str) -> dict:
        """The weights or constants table, tensors made from raw bytes (never unpickled)."""
        if self.has(f"data/{kind}/{name}.pt"):
            self.refuse(f"stores its {kind} as a pickle (data/{kind}/{name}.pt, the legacy format)")
        table = self.json(f"data/{kind}/{name}_{kind}_config.json") if self.has(
            f"data/{kind}/{name}_{kind}_config.json") else {"config": {}}
        entries = table.get("config") if isinstance(table, dict) else None
        if not isinstance(entries, dict):
            self.error(f"data/{kind}/{name}_{kind}_config.json has no 'config' table")
        out = {}
        for fqn, meta in entries.items():
            if not isinstance(meta, dict) or not isinstance(meta.get("path_name"), str):
                self.error(f"{kind} entry {fqn!r} has no path_name")
            path = meta["path_name"]
            if meta.get("use_pickle") or not path.startswith("tensor_") and kind == "constants" or \
                    not path.startswith("weight_") and kind == "weights":
                self.refuse(f"stores {kind[:-1]} {fqn!r} as a pickled object ({path})")
            if "/" in path or "\\" in path or path in (".", ".."):
                self.error(f"{kind} entry {fqn!r} names the path {path!r}")
            out[fqn] = self.tensor(f"data/{kind}/{path}", meta.get("tensor_meta"), fqn, meta.get("is_param"))
        return out

    def tensor(self, rel: str, meta, fqn: str, is_param):
        import torch
        from torch._export.serde.serialize import deserialize_scalar_type

        if not isinstance(meta, dict):
            self.error(f"{fqn!r} has no tensor_meta")
        try:
            dtype = deserialize_scalar_type(meta["dtype"])
            sizes = [_int(s) for s in meta["sizes"]]
            strides = [_int(s) for s in meta["strides"]]
            offset = _int(meta["storage_offset"])
        except (KeyError, TypeError, ValueError) as e:
            self.error(f"tensor {fqn!r}: bad tensor_meta ({last_line(e, 80)})")
        if len(sizes) != len(strides) or min(sizes + strides + [offset], default=0) < 0:
            self.error(f"tensor {fqn!r}: sizes {sizes[:8]} / strides {strides[:8]} do not describe a tensor")
        item = torch.empty((), dtype=dtype).element_size()
        numel = 1
        for n in sizes:
            numel *= n
        # a stride of 0 repeats a few stored bytes over any shape: the importer materialises all of it
        check_tensor_bytes(numel * item, fqn, self.what, sizes)
        data = self.read(rel)
        if len(data) % item:
            self.error(f"tensor {fqn!r}: {len(data)} bytes is not a whole number of {dtype} elements")
        needed = 0 if 0 in sizes else offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
        if needed * item > len(data):
            self.error(f"tensor {fqn!r} of shape {sizes} needs {needed * item:,} bytes, its entry holds "
                       f"{len(data):,}")
        flat = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
        t = torch.as_strided(flat, sizes, strides, offset)
        if is_param:
            return torch.nn.Parameter(t, requires_grad=bool(meta.get("requires_grad")) and t.is_floating_point())
        return t


def _int(value) -> int:
    """A serialized SymInt that must be a plain integer."""
    if isinstance(value, dict) and isinstance(value.get("as_int"), int):
        return value["as_int"]
    raise ValueError("symbolic or missing size")


def _check_program(program, reader: _Reader) -> None:
    """Refuse operator targets and shape expressions that torch would resolve by ``getattr`` or ``eval``
    beyond the allowed forms; drop guard code (iteratively, so deep nesting is no recursion bomb)."""
    if not isinstance(program, dict):
        reader.error("models/<name>.json is not an object")
    program["guards_code"] = []
    stack = [program]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        target = item.get("target")
        if isinstance(target, str) and "inputs" in item and "outputs" in item:
            if not any(p.match(target) for p in _TARGETS):
                reader.refuse(f"names the operator {target[:80]!r}, which is not an ATen or standard operator")
            metadata = item.get("metadata")
            if isinstance(metadata, dict):      # its source_fn_stack is resolved by getattr from torch
                metadata.pop("source_fn_stack", None)
        expr = item.get("expr_str")
        if expr is not None and not _safe_expr(expr):
            reader.refuse(f"holds the shape expression {str(expr)[:80]!r}, which is not arithmetic on shape "
                          "symbols")
        stack.extend(item.values())


def _safe_expr(expr) -> bool:
    """Whether ``expr`` is arithmetic on shape symbols, numbers and torch's sympy functions only.

    >>> _safe_expr("FloorDiv(Symbol('s0', integer=True), 2) + 1"), _safe_expr("__import__('os').system('x')")
    (True, False)
    """
    if not isinstance(expr, str) or len(expr) > 4096 or not _EXPR_CHARS.match(expr):
        return False
    quoted = re.findall(r"'([^']*)'", expr)
    if expr.count("'") != 2 * len(quoted) or not all(_SYMBOL.match(q) for q in quoted):
        return False
    for name in re.findall(r"[A-Za-z_]\w*", expr):
        if name not in _SYMPY_NAMES and not _SYMBOL.match(name):
            return False
    return "__" not in expr
