"""Former location of :mod:`tvm_memsched.tflite.coral.learned` (the learned Coral segmenter); kept as an alias."""

from .coral.learned import *  # noqa: F401,F403
from .coral.learned import __all__  # noqa: F401
