"""Differences between two runs' outputs, as every numeric check here counts them.

NaN against NaN and an infinity against the same infinity are equal (a logarithm of a negative input is NaN
in every runtime, on the host and on the board); NaN against a number is infinitely far.

Example
-------
>>> import numpy as np
>>> difference(np.array([1.0, np.nan, np.inf, 2.0]), np.array([1.5, np.nan, np.inf, np.nan])).tolist()
[0.5, 0.0, 0.0, inf]
"""

from __future__ import annotations

import numpy as np

__all__ = ["difference", "random_array"]


def difference(x, y) -> np.ndarray:
    """``|x - y|`` element by element in float64 (``y`` reshaped to ``x``'s shape), with the equalities of the
    module docstring."""
    x = np.asarray(x).astype(np.float64)
    y = np.asarray(y).astype(np.float64).reshape(x.shape)
    with np.errstate(invalid="ignore"):
        d = np.abs(x - y)
    d[(np.isnan(x) & np.isnan(y)) | (x == y)] = 0.0
    d[np.isnan(d)] = np.inf
    return d


def random_array(rng, shape, dtype) -> np.ndarray:
    """Test values of ``dtype``: floats standard normal, booleans coin flips, integers uniform over
    ``[-100, 100)`` clipped to the type's range (an index or a length stays small).

    >>> a = random_array(np.random.default_rng(0), (3,), "uint8")
    >>> a.dtype.name, bool((a < 100).all())
    ('uint8', True)
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dt)

