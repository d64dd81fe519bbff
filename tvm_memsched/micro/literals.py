"""Exact C literals for the constants of an exported model (``<name>_params.c``), and names from a model file
as C string literals (:func:`c_string_literal`).

Floats are written as hex literals (every bit kept), infinities and NaNs through
``math.h``, 64-bit integers through ``INT64_C``/``UINT64_C``, and ``INT32_MIN``
by name (``-2147483648`` is not an ``int`` literal in C).

Example
-------
>>> import numpy as np
>>> c_literals(np.array([0.5, -np.inf], np.float32), "float32")
['0x1.0000000000000p-1f', '-INFINITY']
>>> c_literals(np.array([-2 ** 31, 7], np.int32), "int32")
['INT32_MIN', '7']
>>> print(c_string_literal('in"put??/1'))
"in\\"put\\?\\?/1"
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["c_literals", "c_string_literal", "c_byte_rows"]


def c_literals(flat: np.ndarray, dtype: str) -> list[str]:
    """Exact C literals for a flat array (hex floats; INFINITY/NAN from math.h)."""
    if dtype in ("float32", "float64"):
        suffix = "f" if dtype == "float32" else ""
        out = []
        for v in flat.tolist():
            if math.isnan(v):
                out.append("NAN")
            elif math.isinf(v):
                out.append("INFINITY" if v > 0 else "-INFINITY")
            else:
                out.append(float(v).hex() + suffix)
        return out
    if dtype == "bool":
        return ["1" if v else "0" for v in flat.tolist()]
    if dtype == "int64":
        return [f"INT64_C({v})" for v in flat.tolist()]
    if dtype == "uint64":
        return [f"UINT64_C({v})" for v in flat.tolist()]
    if dtype == "int32":
        return [str(v) if v != -2 ** 31 else "INT32_MIN" for v in flat.tolist()]
    if dtype == "uint32":
        return [f"{v}u" for v in flat.tolist()]
    return [str(v) for v in flat.tolist()]


def c_string_literal(text: str) -> str:
    """``text`` (UTF-8) as a C string literal: printable ASCII as is except ``"``, ``\\`` and ``?`` (no
    trigraphs), everything else as three-digit octal escapes (which never swallow a following digit)."""
    out = []
    for b in str(text).encode("utf-8", "replace"):
        c = chr(b)
        out.append("\\" + c if c in '"\\?' else c if 32 <= b < 127 else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_byte_rows(data: bytes, indent: str = "    ") -> str:
    """``data`` as the rows of a C ``uint8_t`` array initializer, 16 bytes a row (one zero byte when empty).

    >>> print(c_byte_rows(bytes([1, 255])))
        0x01, 0xff,
    """
    rows = [indent + ", ".join(f"0x{b:02x}" for b in data[i:i + 16]) + "," for i in range(0, len(data), 16)]
    return "\n".join(rows) or indent + "0x00,"

