"""Schedulers: one module per algorithm, one registry, one result type.

Importing this package registers every scheduler; :func:`schedule` runs one by name.
"""

from . import baselines  # noqa: F401  (registers program, kahn, rpo)
from .base import Deadline, ScheduleResult, make_result
from .registry import available_methods, get_scheduler, register, schedule

__all__ = ["schedule", "ScheduleResult", "available_methods", "get_scheduler", "register",
           "make_result", "Deadline"]
