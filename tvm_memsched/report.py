"""Former location of :mod:`tvm_memsched.app.report` (the benchmark report): its public names under the old path."""

from .app import report as _new

globals().update({k: v for k, v in vars(_new).items() if not k.startswith("_")})
__all__ = _new.__all__
