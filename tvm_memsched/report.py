"""Former location of :mod:`tvm_memsched.app.report` (the benchmark report); kept as an alias."""

from .app.report import *  # noqa: F401,F403
from .app.report import __all__  # noqa: F401
