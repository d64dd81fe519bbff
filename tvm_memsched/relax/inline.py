"""Remove needless kernel-internal copies by inlining padding (and other injective) stages.

Legalized convolutions copy their input into a ``pad_temp`` buffer, even a 1x1
convolution with no padding. Inlining that stage into its consumer (the
convolution reads ``if_then_else(in bounds, x, 0)`` instead) removes the buffer,
and with it that kernel's workspace, at the cost of a bounds test in the inner
loop. :func:`inline_padding` does this for every PrimFunc of a module: each
block that writes an internal buffer and is not a reduction is inlined if
TVM's schedule accepts it.
"""

from __future__ import annotations

from tvm import s_tir, tirx

from .workspace import internal_allocations, workspace_bytes

__all__ = ["inline_padding_func", "inline_padding"]


def _producer_blocks(func) -> list[str]:
    """Names of the blocks that write the function's internal buffers."""
    internal = {name for name, _, _ in internal_allocations(func)}
    names = []
    sch = s_tir.Schedule(func)
    for blk in sch.get_child_blocks(sch.get_sblock("root")) if _has_root(sch) else []:
        block = sch.get(blk)
        if any(_region_buffer(w).name in internal for w in block.writes) and not _is_reduction(block):
            names.append(block.name_hint)
    return names


def _region_buffer(region):
    """The buffer of a block's read/write region (``TensorRegion.source`` in TVM 0.27)."""
    return getattr(region, "buffer", None) or region.source


def _has_root(sch) -> bool:
    try:
        sch.get_sblock("root")
        return True
    except s_tir.ScheduleError:
        return False


def _is_reduction(block) -> bool:
    return any(int(iv.iter_type) != 0 for iv in block.iter_vars)


def inline_padding_func(func):
    """``func`` with its inlinable internal stages inlined; returns (new func, bytes saved)."""
    before = workspace_bytes(func)
    current = func
    for name in _producer_blocks(func):
        sch = s_tir.Schedule(current)
        try:
            sch.compute_inline(sch.get_sblock(name))
        except s_tir.ScheduleError:
            continue
        current = sch.mod["main"]
    return current, before - workspace_bytes(current)


def inline_padding(mod):
    """Apply :func:`inline_padding_func` to every PrimFunc. Returns (module, {func: bytes saved})."""
    saved = {}
    new_mod = mod
    for gv, func in mod.functions_items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        try:
            new_func, n = inline_padding_func(func)
        except Exception:  # unusual kernels the schedule cannot analyse are left alone
            continue
        if n > 0:
            if new_mod is mod:
                new_mod = mod.clone()
            attrs = func.attrs
            new_mod[gv] = new_func.with_attr(dict(attrs)) if attrs is not None else new_func
            saved[gv.name_hint] = n
    return new_mod, saved
