"""Public Relax passes: ``tvm_memsched.transform.MemoryAwareReorder``, ``ArenaPlanMemory``, ...

Importing this module imports TVM. See :mod:`tvm_memsched.relax.transform`.
"""

from .relax.transform import *  # noqa: F401,F403
from .relax.transform import __all__  # noqa: F401
