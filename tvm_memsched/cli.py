"""Former location of :mod:`tvm_memsched.app.cli` (the ``tvm-memsched`` command); kept as an alias."""

import sys

from .app.cli import *  # noqa: F401,F403
from .app.cli import __all__, main  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
