"""The inputs of TFLite's ``UNIDIRECTIONAL_SEQUENCE_LSTM`` by role, shared by its float/hybrid and int8 importers.

The operator takes 24 inputs (TFLite's ``lstm_shared.h``); absent optional ones are ``-1``. :data:`INPUTS`
names them: one index, or one per gate ``i, f, c, o`` (peepholes: ``i, f, o``).

Example
-------
>>> INPUTS["w_x"], INPUTS["h"], INPUTS["c"]
((1, 2, 3, 4), 18, 19)
"""

from __future__ import annotations

__all__ = ["INPUTS", "present_tensor", "tensor_name"]

#: the operator's input indices by role
INPUTS = {"x": 0, "w_x": (1, 2, 3, 4), "w_h": (5, 6, 7, 8), "peephole": (9, 10, 11), "bias": (12, 13, 14, 15),
          "proj_w": 16, "proj_b": 17, "h": 18, "c": 19, "layer_norm": (20, 21, 22, 23)}


def present_tensor(t, i) -> bool:
    """True if input ``i`` of the operator's input tensor wrappers ``t`` (None where absent) is given."""
    return i < len(t) and t[i] is not None and t[i].tensor_idx >= 0


def tensor_name(tw) -> str:
    """The name of a TFLite tensor wrapper."""
    n = tw.tensor.Name()
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)
