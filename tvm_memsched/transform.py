"""Public Relax passes: ``tvm_memsched.transform.MemoryAwareReorder``, ``ArenaPlanMemory``, ...

Importing this module imports TVM. See :mod:`tvm_memsched.relax.passes.transform`.
"""

from .relax.passes.transform import *  # noqa: F401,F403
from .relax.passes.transform import __all__  # noqa: F401
