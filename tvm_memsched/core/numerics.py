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

__all__ = ["difference"]


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
