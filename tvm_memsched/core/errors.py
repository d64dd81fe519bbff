"""Exceptions raised for bad input.

Every error a user can cause (a malformed graph, an invalid order, an impossible
budget, an unsupported model) is a :class:`MemschedError`. The CLI turns these into
a one-line message and exit code 2; library users can catch the specific subclass.
"""


class MemschedError(Exception):
    """Base class of every error caused by bad input."""


class GraphError(MemschedError, ValueError):
    """The graph is malformed (cycle, unknown tensor, duplicate name, bad size...)."""


class OrderError(MemschedError, ValueError):
    """An operator order is not a valid schedule of the graph."""


class BudgetError(MemschedError, ValueError):
    """No schedule fits the requested memory budget."""


class UnsupportedError(MemschedError, ValueError):
    """The input uses a feature this tool does not support (dynamic shapes, an op...)."""


class InputFileError(MemschedError, ValueError):
    """A file could not be read or parsed (missing, malformed JSON, corrupt flatbuffer)."""


class UntrustedModelError(InputFileError):
    """A model file needs code execution to load (pickles, native libraries) and was not marked trusted."""


def last_line(exc: BaseException, limit: int = 240) -> str:
    """The last non-empty line of ``exc``'s message (where TVM, protobuf and friends put the reason), at most
    ``limit`` characters; the exception's type name if the message is empty.

    >>> last_line(ValueError("Traceback (most recent call last):\\n  ...\\nValueError: bad shape\\n"))
    'ValueError: bad shape'
    """
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(exc).__name__)[:limit]
