"""Former location of :mod:`tvm_memsched.tflite.coral.learned` (the learned Coral segmenter): its public names
under the old path."""

from .coral import learned as _new

globals().update({k: v for k, v in vars(_new).items() if not k.startswith("_")})
__all__ = _new.__all__
