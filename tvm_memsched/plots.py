"""Former location of :mod:`tvm_memsched.app.plots` (the report's figures); kept as an alias."""

from .app.plots import *  # noqa: F401,F403
from .app.plots import __all__  # noqa: F401
