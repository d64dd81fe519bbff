"""Inputs frozen to a value: ``--input-value NAME=V[,V...]``.

A streaming model often takes a configuration input that a deployment never
changes: Silero VAD's sample rate ``sr`` (an ``If`` on ``sr == 16000`` picks the
16 kHz network), a flag, a step count. Planning ahead of time needs the graph
that value selects. The importers replace such an input with a constant of the
given value (:func:`frozen_array` makes it, in the input's own dtype and shape),
after which the constant folding of the importers removes what the value
decides (an ``If`` whose condition folds is inlined). The reference runtimes are
fed the same value, so numeric checks compare the same computation.

Example
-------
>>> v = parse_input_value("sr=16000")
>>> v
('sr', (16000,))
>>> frozen_array("sr", v[1], "int64", (), "model")
array(16000)
>>> frozen_array("w", (0.5,), "float32", (2, 2), "model").tolist()
[[0.5, 0.5], [0.5, 0.5]]
>>> frozen_array("sr", (0.5,), "int64", (), "model")
Traceback (most recent call last):
...
tvm_memsched.core.errors.UnsupportedError: model: --input-value gives input 'sr' (int64) the value 0.5, which int64 cannot hold
"""

from __future__ import annotations

import math
import re

import numpy as np

from .errors import MemschedError, UnsupportedError
from .limits import check_tensor_bytes

__all__ = ["parse_input_value", "frozen_array", "InputValueArg"]

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


class InputValueArg(str):
    """An ``--input-value`` item on the command line (kept in the same list as ``--input-shape`` items, so
    every command that takes input shapes takes values too)."""


def parse_input_value(item: str) -> tuple[str, tuple]:
    """``(name, values)`` of ``NAME=V`` or ``NAME=V1,V2,...`` (numbers; ``true``/``false`` for booleans)."""
    name, _, text = str(item).partition("=")
    parts = [p.strip().lower() for p in text.split(",")]
    if not name or not text.strip() or not all(re.fullmatch(_NUMBER, p) or p in ("true", "false") for p in parts):
        raise MemschedError(f"bad --input-value '{item}': use NAME=VALUE or NAME=V1,V2,... with numbers, "
                            "e.g. sr=16000")
    values = tuple(p == "true" if p in ("true", "false") else
                   int(p) if re.fullmatch(r"[-+]?\d+", p) else float(p) for p in parts)
    return name, values


def frozen_array(name: str, values: tuple, dtype: str, shape, what: str) -> np.ndarray:
    """The value of input ``name`` as an array of its ``dtype`` and ``shape``: one value fills the shape, else
    the values fill it in row-major order (their count must be the shape's size). Refuses values the dtype
    cannot hold (0.5 for an integer, 300 for uint8) rather than wrapping or rounding them."""
    shape = tuple(int(d) for d in shape)
    size = math.prod(shape)
    dt = np.dtype(dtype)
    check_tensor_bytes(size * dt.itemsize, name, what, shape)
    if len(values) not in (1, size):
        raise UnsupportedError(f"{what}: --input-value gives input '{name}' {len(values)} values; its shape "
                               f"{'x'.join(map(str, shape)) or 'scalar'} holds {size}")
    for v in values:
        if dt.kind in "iub":
            ok = float(v).is_integer() and (dt.kind == "b" and v in (0, 1) or
                                             dt.kind != "b" and np.iinfo(dt).min <= v <= np.iinfo(dt).max)
        else:
            ok = dt.kind in "fc" and math.isfinite(float(v)) and abs(float(v)) <= np.finfo(dt).max
        if not ok:
            raise UnsupportedError(f"{what}: --input-value gives input '{name}' ({dt.name}) the value {v}, which "
                                   f"{dt.name} cannot hold")
    arr = np.array(values, dtype=np.float64 if dt.kind in "fc" else object).astype(dt)
    return np.full(shape, arr[0], dt) if len(values) == 1 else arr.reshape(shape)
