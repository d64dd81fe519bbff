"""The benchmark report: every scheduler and TVM's planner on the zoo networks.

For each model :func:`run_report` measures

* the peak of the program / RPO / Kahn / dp / hmcos / ilp / auto orders (and any
  other registered method asked for) on the network's graph, the best proven
  lower bound, and the scheduling seconds (median of repeats for quick methods);
* with TVM: TVM's default planned activation bytes and ours (our order and
  arena through :func:`tvm_memsched.compare`), with the numerical check;
* the ratios against TVM's default and against reverse post-order, next to the
  published ratios of the reference papers for the same network.

:func:`write_report` writes ``results.json``, ``results.md`` and the plots
(memory over time for TVM's order vs ours, our arena layout, peaks per model).
``tvm-memsched bench`` and ``scripts/bench.py`` run both.

Example
-------
>>> rep = run_report(["swiftnet_like"], methods=["program", "rpo", "dp"], tvm=False, repeats=1,
...                  progress=False)
>>> row = rep["models"][0]
>>> row["peaks"]["dp"] <= row["peaks"]["rpo"], row["optimal"]["dp"]
(True, True)
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

from ..core.files import atomic_write
from .progress import Progress

__all__ = ["run_report", "write_report", "markdown", "QUICK_MODELS", "FULL_MODELS", "REPORT_METHODS", "published_rows"]

REPORT_METHODS = ["program", "rpo", "kahn", "dp", "hmcos", "ilp", "auto"]
QUICK_MODELS = ["swiftnet_like", "resnet"]
FULL_MODELS = ["swiftnet_like", "nasnet_a_cifar_tiny", "darts_v2_cifar_tiny", "randwire_tiny", "hrnet_tiny",
               "resnet", "mobilenet_v2", "densenet_like", "hrnet_w18_small_v1", "hrnet_w18_small_v2",
               "randwire_ws_1", "randwire_ws_2", "randwire_ws_3", "darts_v2_cifar", "amoebanet_a_cifar",
               "nasnet_a_cifar", "nasnet_a_imagenet", "amoebanet_a_imagenet", "darts_v2_imagenet"]
# graphs whose TVM build is slow (224x224 NAS nets): scheduled, not compiled, unless asked
SCHEDULE_ONLY = {"nasnet_a_imagenet", "amoebanet_a_imagenet", "darts_v2_imagenet"}


def published_rows(model: str) -> list[dict]:
    """Published figures for ``model`` (source, network, reduction vs RPO/TFLite)."""
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "zoo", "data", "published.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    out = []
    for key, section in data.items():
        if key.startswith("_"):
            continue
        for row in section["rows"]:
            if row["zoo"] == model:
                out.append({"paper": key, "network": row["network"], "reduction": row["reduction"],
                            "baseline": "program" if key == "serenity" else "rpo", "seconds": row.get("seconds")})
    return out


def _schedule_row(graph, methods, time_limit, repeats, bar) -> dict:
    from ..core.simulate import simulate
    from ..schedulers import available_methods, schedule

    peaks, optimal, seconds, orders, lower = {}, {}, {}, {}, 0
    for m in methods:
        if m not in available_methods():
            continue
        bar.log(f"{graph.name}: {m}")
        times = []
        r = None
        for i in range(max(1, repeats)):
            t = time.perf_counter()
            r = schedule(graph, m, time_limit=time_limit)
            times.append(time.perf_counter() - t)
            if times[-1] > 1.0:
                break  # slow methods run once: the limit, not noise, dominates
        peaks[m] = r.peak_bytes
        optimal[m] = r.optimal
        seconds[m] = round(statistics.median(times), 4)
        orders[m] = list(r.order)
        lower = max(lower, r.lower_bound_bytes)
    best = min(peaks, key=lambda m: peaks[m]) if peaks else None
    prof = {}
    for m in ("program", "rpo", "auto"):
        if m in orders:
            prof[m] = list(simulate(graph, orders[m]).stable)
    return {"peaks": peaks, "optimal": optimal, "seconds": seconds, "lower_bound": lower, "best_method": best,
            "profiles": prof}


def _model(spec: str, input_shapes):
    """``(name, graph, relax module or None (zoo: loaded when needed), size class)`` of a zoo name or a model
    file."""
    from .. import zoo
    from .models import is_model_file, load_graph_spec, load_relax_spec

    if not is_model_file(spec):
        return spec, zoo.graph(spec), None, zoo.info(spec).get("size", "")
    mod, name = load_relax_spec(spec, input_shapes)
    if spec.lower().endswith(".tflite"):
        graph = load_graph_spec(spec)
    else:
        from ..relax.graph import function_graph

        graph = function_graph(mod["main"], name)
    return name, graph, mod, "file"


def run_report(models=None, *, quick: bool = False, methods=None, time_limit: float | None = None,
               repeats: int | None = None, tvm: bool = True, tvm_all: bool = False, progress: bool = True,
               target="llvm", input_shapes=None) -> dict:
    """Measure ``models`` (zoo names, ``"default"`` for the zoo's default model, or model files: ``.tflite``,
    ``.onnx``, ``.pt2``, with ``input_shapes`` for their symbolic inputs)."""
    from .. import zoo
    from .models import is_model_file

    if models is None:
        models = QUICK_MODELS if quick else FULL_MODELS
    models = [zoo.default_model() if m == "default" else m for m in models]
    for m in models:
        if is_model_file(m):
            if not os.path.isfile(m):
                from ..core.errors import InputFileError

                raise InputFileError(f"cannot read {m}: no such file")
        else:
            zoo.get_net(m)  # unknown names fail before any work
    methods = list(methods or REPORT_METHODS)
    time_limit = time_limit if time_limit is not None else (2.0 if quick else 10.0)
    repeats = repeats if repeats is not None else (1 if quick else 3)
    rows = []
    start = time.perf_counter()
    with Progress(len(models), "models", label="bench", enabled=progress) as bar:
        for spec in models:
            name, g, mod, size = _model(spec, input_shapes)
            row = {"model": name, "ops": g.num_ops, "tensors": g.num_tensors,
                   "activation_bytes": g.total_bytes, "size_class": size}
            row.update(_schedule_row(g, methods, time_limit, repeats, bar))
            peaks = row["peaks"]
            for base in ("rpo", "program"):
                if base in peaks and "auto" in peaks:
                    row[f"auto_vs_{base}"] = round(peaks[base] / peaks["auto"], 4)
                    row[f"reduction_vs_{base}"] = round(1 - peaks["auto"] / peaks[base], 4)
            row["published"] = published_rows(name)
            row["tvm"] = None
            if tvm and (tvm_all or name not in SCHEDULE_ONLY):
                bar.log(f"{name}: TVM default vs tvm_memsched build")
                from ..relax.compare import compare

                c = compare(mod if mod is not None else zoo.load(name), target, method="auto",
                            time_limit=time_limit, name=name)
                row["tvm"] = c.to_dict(details=True)
            rows.append(row)
            bar.advance(note=name)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "python": platform.python_version(),
            "machine": platform.machine(), "cpus": os.cpu_count(), "time_limit": time_limit,
            "repeats": repeats, "quick": quick, "seconds": round(time.perf_counter() - start, 1)}
    try:
        import tvm as _tvm

        meta["tvm"] = _tvm.__version__
    except ImportError:
        pass
    return {"meta": meta, "methods": methods, "models": rows}


def _mb(n) -> str:
    return "" if n is None else f"{n / 1e6:.3f}"


def markdown(report: dict) -> str:
    methods = report["methods"]
    head = (["model", "ops", "TVM default MB", "ours MB", "vs TVM", "in-place gain"] + [f"{m} MB" for m in methods]
            + ["lower bound MB", "auto vs RPO", "auto s"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["models"]:
        t = r.get("tvm") or {}
        cells = [r["model"], str(r["ops"]), _mb(t.get("default_planned_bytes")), _mb(t.get("memsched_planned_bytes")),
                 f"{t['ratio']:.2f}x" if t else "",
                 f"{t['memsched_planned_no_inplace_bytes'] / t['memsched_planned_bytes']:.2f}x"
                 if t.get("memsched_planned_no_inplace_bytes") and t.get("memsched_planned_bytes") else ""]
        for m in methods:
            p = r["peaks"].get(m)
            cells.append("" if p is None else _mb(p) + ("*" if r["optimal"].get(m) else ""))
        cells += [_mb(r["lower_bound"]), f"{r.get('auto_vs_rpo', 0):.2f}x",
                  f"{r['seconds'].get('auto', 0):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Peaks are of the network graph (float32 activations, the op-level schedule); * = proven optimal. "
              "TVM default / ours = planned activation bytes of TVM's default Relax pipeline vs tvm_memsched's "
              "order + arena, measured from the lowered modules (kernel level, outputs excluded); in-place gain "
              "= ours without in-place execution / ours (kernel outputs over dying inputs, from the kernels' TIR)."]
    # published comparison
    pub = ["", "### Against the published results", "",
           "Reduction of the peak by our `auto` order against the baseline the paper used (reverse post-order for "
           "HMCOS and Zhong et al., the TFLite/program order for SERENITY). Our networks are regenerated with random "
           "weights, so absolute sizes differ from the papers'.", "",
           "| model | baseline | ours | published | paper | network in the paper |",
           "|---|---|---|---|---|---|"]
    for r in report["models"]:
        for p in r["published"]:
            ours = r.get(f"reduction_vs_{p['baseline']}", 0)
            pub.append(f"| {r['model']} | {p['baseline']} | {100 * ours:.1f}% | {100 * p['reduction']:.1f}% | "
                       f"{p['paper']} | {p['network']} |")
    return "\n".join(lines + pub) + "\n"


def write_report(report: dict, out_dir: str, *, plots: bool = True) -> list[str]:
    """Write results.json, results.md and the plots into ``out_dir``; returns the files written."""
    os.makedirs(out_dir, exist_ok=True)
    files = []
    path = os.path.join(out_dir, "results.json")
    atomic_write(path, json.dumps(report, indent=1))
    files.append(path)
    path = os.path.join(out_dir, "results.md")
    atomic_write(path, f"# tvm_memsched benchmark ({report['meta']['date']})\n\n" + markdown(report))
    files.append(path)
    if not plots:
        return files
    from . import plots as P

    bars = {}
    for r in report["models"]:
        name = r["model"]
        t = r.get("tvm")
        if t and t.get("default_profile"):
            files.append(P.memory_over_time({"TVM default order": t["default_profile"],
                                             "tvm_memsched order": t["memsched_profile"]},
                                            os.path.join(out_dir, f"{name}_memory.png"),
                                            title=f"{name}: kernel-level memory over time"))
            files.append(P.arena_layout(t["layout"], os.path.join(out_dir, f"{name}_arena.png"),
                                        title=f"{name}: tvm_memsched arena", arena_bytes=t["memsched_planned_bytes"]))
        elif r.get("profiles"):
            files.append(P.memory_over_time(r["profiles"], os.path.join(out_dir, f"{name}_memory.png"),
                                            title=f"{name}: network-level memory over time"))
        bars[name] = {"rpo": r["peaks"].get("rpo"), "auto": r["peaks"].get("auto"),
                      "lower bound": r["lower_bound"]}
        if t:
            bars[name]["TVM default planned"] = t["default_planned_bytes"]
            bars[name]["ours planned"] = t["memsched_planned_bytes"]
    files.append(P.peaks_bar_chart(bars, os.path.join(out_dir, "peaks.png"), title="peak memory per model"))
    return files
