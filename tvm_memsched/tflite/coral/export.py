"""Writing a segmentation: one ``.tflite`` per stage and ``manifest.json``, checked by chaining them in LiteRT.

:func:`coral_export` is the whole ``tvm-memsched coral`` job on a
:class:`~tvm_memsched.tflite.reader.TFLiteGraph`: schedule, segment, write,
verify. Segment inputs and outputs are the tensors crossing the cuts, named
as in the model (made unique), which is how Coral's ``PipelinedModelRunner``
matches them.

Example
-------
>>> edgetpu_compiler_commands(["m_seg0.tflite", "m_seg1.tflite"])  # doctest: +NORMALIZE_WHITESPACE
['edgetpu_compiler -s -o edgetpu m_seg0.tflite', 'edgetpu_compiler -s -o edgetpu m_seg1.tflite']
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Sequence

from ...core.errors import MemschedError, UnsupportedError
from .cost import EdgeTpuCostModel, Segmentation, evaluate, stage_io
from .learned import segment_learned
from .segment import segment
from ...core.files import atomic_write

__all__ = ["edgetpu_compiler_commands", "write_segments", "run_segments", "coral_export"]


def edgetpu_compiler_commands(paths: Sequence[str], out_dir: str = "edgetpu") -> list:
    """The ``edgetpu_compiler`` call for each segment file (one call per segment).

    Compiling each segment on its own gives each its own Edge TPU (passing
    several models to one call *co-compiles* them to share one TPU's
    parameter cache, which is not what a pipeline wants). ``-s`` prints the
    operators mapped to the TPU; the compiled file is ``<name>_edgetpu.tflite``.
    """
    import shlex

    return [f"edgetpu_compiler -s -o {shlex.quote(out_dir)} {shlex.quote(p)}" for p in paths]


def _segment_model(tg, op_indices: list, in_ids: list, out_ids: list, k: int, nk: int):
    """A one-subgraph ``ModelT`` holding operators ``op_indices`` of ``tg`` (tensor ids of subgraph 0)."""
    from .. import builder
    from ..reader import is_constant, load_model

    tfl = builder.tfl
    m = load_model(tg.buf)                       # a fresh copy we may edit
    sg = m.subgraphs[0]
    ops = [sg.operators[i] for i in op_indices]
    used = set(in_ids) | set(out_ids)
    for op in ops:
        for lst in (op.inputs, op.outputs, op.intermediates):
            used.update(int(i) for i in ([] if lst is None else lst) if int(i) >= 0)
    tmap: dict = {}
    buffers = [tfl.BufferT()]
    bmap: dict = {}
    tensors = []
    for old in sorted(used):
        t = sg.tensors[old]
        if is_constant(m, t):
            ob = int(t.buffer)
            if ob not in bmap:
                bmap[ob] = len(buffers)
                buffers.append(m.buffers[ob])
            t.buffer = bmap[ob]
        else:
            t.buffer = 0
        t.name = tg.unique_names[old]
        tmap[old] = len(tensors)
        tensors.append(t)
    codes, cmap = [], {}
    for op in ops:
        oc = int(op.opcodeIndex)
        if oc not in cmap:
            cmap[oc] = len(codes)
            codes.append(m.operatorCodes[oc])
        op.opcodeIndex = cmap[oc]
        op.inputs = [tmap[int(i)] if int(i) >= 0 else -1 for i in op.inputs]
        op.outputs = [tmap[int(i)] for i in op.outputs]
        if op.intermediates is not None and len(op.intermediates):
            op.intermediates = [tmap[int(i)] for i in op.intermediates]
    new = tfl.SubGraphT()
    new.tensors, new.operators = tensors, ops
    new.inputs, new.outputs = [tmap[i] for i in in_ids], [tmap[i] for i in out_ids]
    new.name = f"segment_{k}"
    model = tfl.ModelT()
    model.version = 3
    desc = m.description.decode(errors="replace") if isinstance(m.description, bytes) else (m.description or "")
    model.description = f"{desc} | tvm_memsched Coral segment {k + 1}/{nk}".strip(" |")
    model.operatorCodes, model.subgraphs, model.buffers = codes, [new], buffers
    model.metadata = None
    model.signatureDefs = None
    return model


def _io_order(tg, ids: list, model_order: list) -> list:
    """Tensor ids with the model's own input/output order first, then by tensor index."""
    first = [t for t in model_order if t in ids]
    return first + sorted(t for t in ids if t not in first)


def write_segments(tg, seg: Segmentation, out_dir: str, *, stem: str | None = None,
                   source: str | None = None) -> tuple[dict, list]:
    """Write one ``.tflite`` per stage of ``seg`` (a segmentation of ``tg.graph``) and ``manifest.json``.

    Segment files are ``<stem>_seg<k>.tflite``; their inputs and outputs carry
    the model's tensor names (made unique where the model repeats a name, see
    :mod:`~tvm_memsched.tflite.reader`), so a pipelined runner can match them by name. Returns
    ``(manifest, [(path, bytes), ...])``.
    """
    from ...core.simulate import peak_bytes
    from .. import builder
    from ..reader import read_tflite

    g = tg.graph
    if seg.order and set(seg.order) != set(g.op_index):
        raise MemschedError("the segmentation does not cover the model's operators")
    stem = stem or g.name
    os.makedirs(out_dir, exist_ok=True)
    stage_of = [0] * g.num_ops
    for s, ops in enumerate(seg.stages):
        for name in ops:
            stage_of[g.op_index[name]] = s
    ins, outs = stage_io(g, stage_of, seg.k)
    sg0 = tg.model.subgraphs[0]
    model_in = [int(i) for i in sg0.inputs]
    model_out = [int(i) for i in sg0.outputs]
    consumers_stage = {t: sorted({stage_of[c] for c in g.consumers[t]}) for t in range(g.num_tensors)}
    files, segments = [], []
    dtypes = set()
    for s, ops in enumerate(seg.stages):
        op_idx = [g.op(name).attrs["index"] for name in ops]
        in_t = _io_order(tg, [tg.tensor_ids[g.tensors[t].name] for t in ins[s]], model_in)
        out_t = _io_order(tg, [tg.tensor_ids[g.tensors[t].name] for t in outs[s]], model_out)
        model = _segment_model(tg, op_idx, in_t, out_t, s, seg.k)
        buf = builder.serialize(model)
        fname = f"{stem}_seg{s}.tflite"
        path = os.path.join(out_dir, fname)
        atomic_write(path, buf)
        files.append((path, buf))
        sub = read_tflite(buf, name=f"{stem}_seg{s}")
        peak = peak_bytes(sub.graph, list(range(sub.graph.num_ops)))

        def describe(ti, role):
            t = sg0.tensors[ti]
            gname = tg.unique_names[ti]
            gid = g.tensor_index[gname]
            d = {"name": gname, "shape": [int(x) for x in t.shape], "dtype": _tname(t.type).lower(),
                 "bytes": g.size[gid]}
            if t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale):
                d["quantization"] = {"scale": [float(x) for x in t.quantization.scale],
                                     "zero_point": [int(x) for x in t.quantization.zeroPoint]}
            if role == "in":
                p = g.producer[gid]
                d["from"] = "model input" if p < 0 else f"segment {stage_of[p]}"
            else:
                later = [c for c in consumers_stage[gid] if c > s]
                d["to"] = [f"segment {c}" for c in later] + (["model output"] if g.is_output[gid] else [])
            dtypes.add(d["dtype"])
            return d

        fig = seg.figures[s]
        segments.append({"index": s, "file": fname, "ops": len(ops), "first_op": ops[0], "last_op": ops[-1],
                         "operators": list(ops),
                         "inputs": [describe(t, "in") for t in in_t], "outputs": [describe(t, "out") for t in out_t],
                         "param_bytes": fig.param_bytes, "macs": fig.macs, "in_bytes": fig.in_bytes,
                         "out_bytes": fig.out_bytes, "compute_ms": round(fig.compute_ms, 6),
                         "stream_ms": round(fig.stream_ms, 6), "transfer_ms": round(fig.transfer_ms, 6),
                         "time_ms": round(fig.time_ms, 6), "peak_activation_bytes": peak})
    one = evaluate(g, [list(range(g.num_ops))], seg.cost_model)[0]
    weight_types = {_tname(t.type).lower() for t in sg0.tensors if _is_const(tg, t)}
    int_ok = dtypes <= {"int8", "uint8"} and weight_types <= {"int8", "uint8", "int32"}
    paths = [os.path.basename(p) for p, _ in files]
    manifest = {
        "format": "tvm_memsched-coral-pipeline/1",
        "model": g.name,
        "source": source,
        "source_sha256": hashlib.sha256(tg.buf).hexdigest(),
        "stages": seg.k,
        "solver": {"method": seg.method, "free_order": seg.free_order, "optimal": seg.optimal,
                   "bottleneck_ms": round(seg.bottleneck_ms, 6), "lower_bound_ms": round(seg.lower_bound_ms, 6),
                   "seconds": round(seg.seconds, 3)},
        "predicted": {"stage_ms": [round(x, 6) for x in seg.stage_ms],
                      "bottleneck_ms": round(seg.bottleneck_ms, 6),
                      "throughput_per_s": round(1000.0 / seg.bottleneck_ms, 3) if seg.bottleneck_ms else None,
                      "single_tpu_ms": round(one.time_ms, 6),
                      "speedup_vs_single_tpu": round(one.time_ms / seg.bottleneck_ms, 4) if seg.bottleneck_ms
                      else None},
        "cost_model": seg.cost_model.to_dict(),
        "cut_bytes": list(seg.cut_bytes),
        "segments": segments,
        "edgetpu_compatible": int_ok,
        "edgetpu_note": ("full-integer model: compile every segment with the commands below" if int_ok else
                         "not a full-integer model: the Edge TPU compiler accepts only int8/uint8-quantized models; "
                         "these segments run in LiteRT/TFLM but cannot be compiled for the Edge TPU"),
        "edgetpu_compiler": edgetpu_compiler_commands(paths),
        "edgetpu_compiler_note": "run in this directory; each segment is compiled on its own (one Edge TPU each)",
        "runner": ("pycoral.pipeline.pipelined_model_runner.PipelinedModelRunner over one interpreter per "
                   "compiled segment (make_interpreter(path, device=':<k>')), in segment order; tensors are "
                   "matched by name"),
    }
    _write_manifest(out_dir, manifest)
    return manifest, files


def _write_manifest(out_dir: str, manifest: dict) -> None:
    atomic_write(os.path.join(out_dir, "manifest.json"), json.dumps(manifest, indent=1) + "\n")


def _tname(code) -> str:
    from ..reader import type_name

    return type_name(code)


def _is_const(tg, t) -> bool:
    from ..reader import is_constant

    return is_constant(tg.model, t)


def run_segments(bufs: Sequence[bytes], inputs: dict) -> dict:
    """Run segment files in sequence in LiteRT, passing tensors by name; returns the last segment's outputs.

    ``inputs`` holds the model inputs by name. A tensor stays available to
    every later segment (as in Coral's pipelined runner).
    """
    import numpy as np

    from ..verify import litert_interpreter

    env = dict(inputs)
    out: dict = {}
    for i, buf in enumerate(bufs):
        it = litert_interpreter(buf)
        for d in it.get_input_details():
            if d["name"] not in env:
                raise MemschedError(f"segment {i} needs tensor '{d['name']}', which no earlier segment produces")
            it.set_tensor(d["index"], env[d["name"]])
        it.invoke()
        out = {d["name"]: np.array(it.get_tensor(d["index"])) for d in it.get_output_details()}
        env.update(out)
    return out


def coral_export(tg, k: int, out_dir: str, *, method: str = "auto", schedule_time_limit: float | None = None,
                 free_order: bool = True, time_limit: float = 10.0, cost_model: EdgeTpuCostModel | None = None,
                 verify: bool = True, trials: int = 2, seed: int = 0, source: str | None = None,
                 segmenter: str = "exact", progress=None) -> tuple[dict, Segmentation]:
    """Schedule ``tg`` (a :class:`~tvm_memsched.tflite.reader.TFLiteGraph`), segment it into ``k`` stages, write the segments
    and the manifest to ``out_dir`` and (``verify``) check the chained segments against the whole model in
    LiteRT on ``trials`` random inputs; the result lands in the manifest's ``validation``.

    ``segmenter="exact"`` cuts the scheduled order optimally (and with
    ``free_order`` lets CP-SAT change the order); ``"learned"`` uses the learned
    segmenter of :mod:`.learned` (its decodes plus the exact cut of the
    scheduled order; no optimality proof)."""
    from ...schedulers import schedule
    from ..verify import compare_litert

    if segmenter not in ("exact", "learned"):
        raise MemschedError(f"unknown segmenter {segmenter!r}; use 'exact' or 'learned'")
    if tg.stateful:
        raise UnsupportedError(f"'{tg.graph.name}' keeps state in resource variables across invocations; a stateful "
                               "model cannot be split into pipeline segments")
    g = tg.graph
    base = schedule(g, method, time_limit=schedule_time_limit, progress=progress)
    if segmenter == "learned":
        seg = segment_learned(g, k, cost_model=cost_model, order=base.order)
    else:
        seg = segment(g, k, order=base.order, free_order=free_order, time_limit=time_limit,
                      cost_model=cost_model)
    if progress:
        progress(f"segmentation ({seg.method}): bottleneck {seg.bottleneck_ms:.4f} ms, stages "
                 f"{', '.join(f'{x:.4f}' for x in seg.stage_ms)} ms")
    manifest, files = write_segments(tg, seg, out_dir, source=source)
    manifest["schedule"] = {"method": method, "peak_bytes": base.peak_bytes, "optimal": base.optimal}
    if verify:
        bufs = [b for _, b in files]
        cmp = compare_litert(tg.buf, None, trials=trials, seed=seed, run_b=lambda feeds: run_segments(bufs, feeds))
        manifest["validation"] = {"runtime": "LiteRT (builtin kernels, no delegate)", "identical": cmp.identical,
                                  "trials": cmp.trials, "outputs": cmp.outputs, "mismatches": cmp.mismatches}
        _write_manifest(out_dir, manifest)
    return manifest, seg
