"""Write a ``.tflite`` whose operators follow a given schedule.

Interpreters without a graph-rewriting delegate (TFLite Micro always; LiteRT
with the builtin kernels) execute the operators of subgraph 0 strictly in file
order, and TFLM's memory planner derives tensor lifetimes from that order. So
permuting ``subgraphs[0].operators`` is all it takes to run a model in a
memory-saving order. Tensors, buffers, signatures and other subgraphs keep
their indices, so the rewrite is otherwise byte-for-byte the same model.

An ``OfflineMemoryAllocation`` metadata entry already in the input describes
tensor offsets for the *old* order and could overlap tensors that are now live
together, so it is dropped whenever the order changes (:mod:`.offline_plan`
writes a new one).

:func:`renumber_tensors` permutes the tensor list of subgraph 0 (every
reference is remapped: operators, subgraph inputs/outputs, signatures). The
model computes the same thing; what changes is the order in which TFLite
Micro's greedy planner considers equally sized tensors (it breaks ties by
tensor index), which :mod:`.optimize` uses to steer that planner to a tighter
arena when no offline plan is written.

Example
-------
>>> from tvm_memsched import zoo
>>> from tvm_memsched.schedulers import schedule
>>> from tvm_memsched.tflite.reader import read_tflite
>>> tg = read_tflite(zoo.tflite("swiftnet_like"))
>>> order = schedule(tg.graph, "rpo").order
>>> out = read_tflite(reorder_tflite(tg, order))
>>> [op.name for op in out.graph.ops] == list(order), out.graph.tensors == tg.graph.tensors
(True, True)
"""

from __future__ import annotations

from typing import Sequence

from . import builder
from .reader import TFLiteGraph, load_model

__all__ = ["reorder_model", "reorder_tflite", "renumber_tensors", "OFFLINE_PLAN_NAME", "drop_metadata"]

OFFLINE_PLAN_NAME = "OfflineMemoryAllocation"


def _name(m) -> str:
    return m.name.decode(errors="replace") if isinstance(m.name, bytes) else (m.name or "")


def drop_metadata(model, name: str) -> bool:
    """Remove metadata entries called ``name`` (their buffers stay, emptied); True if any was removed."""
    meta = list(model.metadata or [])
    keep = [m for m in meta if _name(m) != name]
    for m in meta:
        if _name(m) == name:
            model.buffers[int(m.buffer)] = builder.tfl.BufferT()
    model.metadata = keep or None
    return len(keep) != len(meta)


def reorder_model(model, operator_order: Sequence[int]):
    """Permute the operators of subgraph 0 of ``model`` (a ``ModelT``, modified and returned).

    ``operator_order`` lists every operator index of subgraph 0 exactly once.
    Dependency validity is the caller's business (:func:`reorder_tflite`
    validates it against the graph).
    """
    ops = list(model.subgraphs[0].operators or [])
    order = [int(i) for i in operator_order]
    if sorted(order) != list(range(len(ops))):
        raise ValueError(f"operator order must be a permutation of 0..{len(ops) - 1}")
    model.subgraphs[0].operators = [ops[i] for i in order]
    if order != list(range(len(ops))):
        drop_metadata(model, OFFLINE_PLAN_NAME)
    return model


def renumber_tensors(model, new_order: Sequence[int]):
    """Permute the tensors of subgraph 0 of ``model`` (a ``ModelT``, modified and returned).

    ``new_order[i]`` is the old index of the tensor that gets index ``i``.
    Operator inputs/outputs/intermediates, the subgraph's inputs and outputs
    and the signature definitions of subgraph 0 are remapped; an offline plan
    (indexed by tensor) is dropped unless the permutation is the identity.
    """
    sg = model.subgraphs[0]
    tensors = list(sg.tensors or [])
    perm = [int(i) for i in new_order]
    if sorted(perm) != list(range(len(tensors))):
        raise ValueError(f"tensor order must be a permutation of 0..{len(tensors) - 1}")
    if perm == list(range(len(tensors))):
        return model
    new_index = {old: new for new, old in enumerate(perm)}

    def remap(lst):
        return None if lst is None else [new_index[int(i)] if int(i) >= 0 else -1 for i in lst]

    sg.tensors = [tensors[i] for i in perm]
    for op in sg.operators or []:
        op.inputs, op.outputs = remap(op.inputs), remap(op.outputs)
        if op.intermediates is not None and len(op.intermediates):
            op.intermediates = remap(op.intermediates)
    sg.inputs, sg.outputs = remap(sg.inputs), remap(sg.outputs)
    for sig in model.signatureDefs or []:
        if int(sig.subgraphIndex) == 0:
            for tm in list(sig.inputs or []) + list(sig.outputs or []):
                tm.tensorIndex = new_index[int(tm.tensorIndex)]
    drop_metadata(model, OFFLINE_PLAN_NAME)
    return model


def reorder_tflite(tg: TFLiteGraph, order: Sequence, *, tensor_order: Sequence[int] | None = None,
                   model=None) -> bytes:
    """The bytes of ``tg``'s model with its operators in ``order``.

    ``order`` is a schedule of ``tg.graph`` (op names or op ids); it is
    validated (:class:`~tvm_memsched.core.errors.OrderError` if it is not a
    topological order of all ops). ``tensor_order`` optionally renumbers the
    tensors of subgraph 0 (see :func:`renumber_tensors`). ``model`` may be a
    fresh ``ModelT`` copy to edit (default: re-loaded from ``tg.buf``, so
    ``tg.model`` is never changed). A model whose constants were stored after
    the flatbuffer (``Buffer.offset``) is written in the same layout.
    """
    op_order = tg.operator_order(order)
    m = model if model is not None else load_model(tg.buf)
    reorder_model(m, op_order)
    if tensor_order is not None:
        renumber_tensors(m, tensor_order)
    return builder.serialize(m, offset_buffers=tg.offset_buffers)
