"""PyTorch programs saved with ``torch.export.save`` (``.pt2``) -> Relax (used by :mod:`.frontend`).

The file is read by :func:`.pt2_archive.load_exported_program` (nothing in it is
unpickled or executed unless ``trust_model_code``) and imported with
``tvm.relax.frontend.torch.from_exported_program`` (weights as constants, a
single result unwrapped). Dimensions the program leaves symbolic
(``torch.export.Dim``) are set from ``input_shapes``. Errors:
:class:`InputFileError` for files ``torch.export.load`` cannot read (corrupt,
truncated, not a program), :class:`UnsupportedError` naming the operators TVM
cannot import, and shapes that stay symbolic.

Example
-------
>>> import io, torch
>>> class Net(torch.nn.Module):
...     def forward(self, x):
...         return torch.relu(x) + 1
>>> f = io.BytesIO()
>>> torch.export.save(torch.export.export(Net(), (torch.ones(1, 4),)), f)
>>> from_pt2_bytes(f.getvalue())["main"].params[0].ty
R.Tensor((1, 4), dtype="float32")
"""

from __future__ import annotations

import logging
import re
import warnings

from ...core.errors import InputFileError, MemschedError, UnsupportedError, last_line
from .input_shapes import bind_input_shapes, check_static
from .native_log import quiet_import
from .pt2_archive import load_exported_program

__all__ = ["from_pt2_bytes"]


def from_pt2_bytes(buf: bytes, input_shapes: dict | None = None, what: str = "model",
                   trust_model_code: bool | None = None):
    """Import a ``torch.export`` program (bytes of a ``.pt2`` file) into Relax (see the module docstring).

    ``trust_model_code``: as in :func:`.pt2_archive.load_exported_program`."""
    try:
        import torch
    except ImportError:
        raise UnsupportedError("importing .pt2 needs PyTorch (pip install 'tvm_memsched[torch]')") from None
    from tvm.relax.frontend.torch import from_exported_program

    log = logging.getLogger("torch.export")      # it logs a traceback before raising on a bad archive
    level = log.level
    try:
        log.setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = load_exported_program(buf, what, trust_model_code)
    except MemschedError:
        raise
    except Exception as e:  # zipfile.BadZipFile, RuntimeError, KeyError, pickle errors...
        raise InputFileError(f"{what} is not a readable torch.export program (.pt2): "
                             f"{type(e).__name__}: {last_line(e, 160)}") from None
    finally:
        log.setLevel(level)

    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return from_exported_program(ep, unwrap_unit_return_tuple=True)

    def failure(e):  # AssertionError for unknown operators, NotImplementedError, TVMError...
        m = re.search(r"Unsupported function types \[(.*)\]", str(e))
        if m:
            ops = ", ".join(s.strip().strip("'\"") for s in m.group(1).split(","))
            return UnsupportedError(f"{what}: unsupported PyTorch operator(s): {ops}")
        return UnsupportedError(f"{what} could not be imported by TVM's PyTorch frontend: {last_line(e)}")

    mod = quiet_import(run, failure)
    mod = bind_input_shapes(mod, input_shapes, what)
    check_static(mod, what)
    return mod
