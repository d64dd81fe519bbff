"""Former location of :mod:`tvm_memsched.app.cli` (the ``tvm-memsched`` command): its public names under the old
path; ``python -m tvm_memsched.cli`` runs the command."""

import sys

from .app import cli as _new

globals().update({k: v for k, v in vars(_new).items() if not k.startswith("_")})
__all__ = _new.__all__

if __name__ == "__main__":
    sys.exit(_new.main())
