"""Schedulers: one module per algorithm, one registry, one result type.

Importing this package registers every scheduler; :func:`schedule` runs one by name.
"""

# importing registers the schedulers, in the order tables list them
from . import baselines  # noqa: F401,I001  program, kahn, rpo
from . import greedy  # noqa: F401
from . import dp  # noqa: F401
from . import hmcos  # noqa: F401
from . import learned  # noqa: F401
from . import ilp  # noqa: F401
from . import auto  # noqa: F401
from .base import Deadline, ScheduleResult, make_result
from .registry import available_methods, get_scheduler, register, schedule

__all__ = ["schedule", "ScheduleResult", "available_methods", "get_scheduler", "register",
           "make_result", "Deadline"]
