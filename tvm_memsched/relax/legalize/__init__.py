"""Legalizations of Relax operators that TVM 0.27 leaves unlowered, one module per operator.

Importing this package registers them (TVM's ``FLegalize`` operator attribute, wrapping TVM's own
function, which keeps every case it handles): :mod:`.conv2d_transpose` (channels-last transposed
convolutions, as TFLite's ``TRANSPOSE_CONV`` imports).
"""

from . import conv2d_transpose  # noqa: F401
