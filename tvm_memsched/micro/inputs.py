"""The fixed test inputs of an exported model: what ``micro --run``'s test program, the exported example
(:mod:`.cmake`) and the MLPerf Tiny harness (:mod:`.mlperf_tiny`) feed it.

Example
-------
>>> import inspect
>>> list(inspect.signature(default_sequence).parameters)
['exp', 'count', 'seed']
"""

from __future__ import annotations

import numpy as np

__all__ = ["default_inputs", "default_sequence"]


def default_inputs(exp, seed: int = 0) -> list[np.ndarray]:
    """Seeded random arrays matching the export's ``main`` parameters (not its states)."""
    from ..relax.compare import random_inputs

    state_params = {s.param for s in exp.states}
    return [a for i, a in enumerate(random_inputs(exp.mod["main"], seed)) if i not in state_params]


def default_sequence(exp, count: int, seed: int = 0) -> list[list[np.ndarray]]:
    """``count`` invocations' :func:`default_inputs` (seeds ``seed``, ``seed + 1``, ...)."""
    return [default_inputs(exp, seed + k) for k in range(count)]
