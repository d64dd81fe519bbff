#!/usr/bin/env python3
"""Our whole pipeline against TVM's default build, per model: memory, run time, compile time, compiler memory.

Every model is measured by :func:`tvm_memsched.relax.compare.compare` exactly as
``tvm-memsched compare MODEL --tradeoff T`` runs it (llvm, method ``auto``, in-place
execution, layout ``auto``, producers inlined, numerics checked on the VM), in a fresh
Python process of its own (this script with ``--one``), so compiler peak RSS and caches
are the model's alone; a model that fails, runs out of ``--timeout`` or grows past
``--max-rss-gb`` gets a row saying so. Columns: planned activation bytes of each build
and their ratio, our live-tensor peak with kernel workspace, the VM's median run time of
each executable (``--repeat`` runs after a warm-up), each side's compile time and the
compiler's peak resident memory during each build, numerics against TVM's default build,
and the model process's wall time.

Models are specs as ``tvm-memsched compare`` takes them (``zoo:NAME``, a .tflite, .onnx or
.pt2 file) and ``--timm NAME[@SIZE]``: a timm architecture with random weights
(``pretrained=False``), batch 1, SIZE x SIZE input (default: the model's own
``pretrained_cfg`` input size), exported with ``torch.export.export(model.eval(), (x,))``
and ``torch.export.save`` into ``--cache`` (once; reused afterwards). The export runs in a
separate process with ``--export-python`` (default: this interpreter), which needs timm
and a working torchvision (with a CPU-only torch, PyPI's torchvision wheels do not load:
point ``--export-python`` at a virtual environment with torch, torchvision and timm).

Results go to ``--out`` as ``pipeline.json`` and ``pipeline.md``; ``--merge`` keeps the
rows of models this run does not measure from an earlier ``pipeline.json`` there.

    python scripts/bench_pipeline.py --out docs/bench/pipeline zoo:swiftnet_like zoo:resnet ...
    python scripts/bench_pipeline.py --out docs/bench/pipeline --merge --timeout 1200 \\
        --timm deit_tiny_patch16_224 --timm mobilevit_xxs@256 --timm hrnet_w18_small --timm densenet121
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.core.files import atomic_write  # noqa: E402

SCRIPT = os.path.abspath(__file__)
ZOO_MODELS = ["zoo:swiftnet_like", "zoo:resnet", "zoo:densenet_like", "zoo:mobilenet_v2", "zoo:hrnet_tiny",
              "zoo:randwire_tiny"]
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tvm_memsched", "timm")
#: Comparison fields kept in pipeline.json (the per-block and per-function reports are left out)
DROP_FIELDS = ("functions", "blocks", "default_storages", "rewrites")

# run by --export-python: NAME SIZE(0 = the model's pretrained_cfg size) OUT.pt2|OUT.onnx OUT.json
EXPORT_CODE = r"""
import json, os, sys, time
import torch, timm
name, size, out, meta_out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.manual_seed(0)
model = timm.create_model(name, pretrained=False)
size = size or int(model.pretrained_cfg.get("input_size", (3, 224, 224))[-1])
x = torch.randn(1, 3, size, size)
t0 = time.perf_counter()
tmp = out + ".part"
if out.endswith(".onnx"):      # the TorchScript exporter, as most published ONNX files were made
    torch.onnx.export(model.eval(), (x,), tmp, input_names=["x"], output_names=["y"], opset_version=17,
                      dynamo=False)
else:
    torch.export.save(torch.export.export(model.eval(), (x,)), tmp)
os.replace(tmp, out)
meta = {"timm": timm.__version__, "torch": torch.__version__, "size": size,
        "params": sum(p.numel() for p in model.parameters()), "export_seconds": round(time.perf_counter() - t0, 1)}
with open(meta_out, "w") as f:
    json.dump(meta, f)
print(json.dumps(meta))
"""


# ---------------------------------------------------------------- one model, in its own process
def run_one(spec: str, json_path: str, tradeoff: str, repeat: int, tune: int = 0,
            tune_database: str | None = None) -> int:
    """``tvm-memsched compare SPEC --tradeoff T`` (with ``repeat`` timed runs; ``--tune N``: both sides tuned
    with MetaSchedule, ``N`` trials per kernel, kept in ``tune_database``); the Comparison as JSON."""
    from tvm_memsched.app.models import load_relax_spec
    from tvm_memsched.relax.compare import compare

    t0 = time.perf_counter()
    mod, name = load_relax_spec(spec)
    t1 = time.perf_counter()
    c = compare(mod, "llvm", method="auto", time_limit=None, name=name, progress=None, run=True, rewrite=False,
                inplace=True, layout="auto", inline_producers=True, tradeoff=tradeoff, repeat=repeat,
                tune=tune, tune_database=tune_database)
    d = c.to_dict()
    d["import_seconds"] = round(t1 - t0, 3)
    d["compare_seconds"] = round(time.perf_counter() - t1, 3)
    d["profile_text"] = c.profile()
    from tvm_memsched.app.yardsticks import spec_timings

    d["runtimes"] = [t.to_dict() for t in spec_timings(spec, mod, repeat=repeat)]
    atomic_write(json_path, json.dumps(d, default=str))
    print(c.summary())
    print("compile time per pass (own time, nested passes excluded):")
    print(d["profile_text"], flush=True)
    return 0


# ---------------------------------------------------------------- the driver
def _rss_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_process(cmd: list, log_path: str, timeout: float, max_rss: int | None, env=None) -> dict:
    """Run ``cmd`` (output to ``log_path``); kill its process group past ``timeout`` seconds or ``max_rss``
    resident bytes. Returns returncode, wall seconds, peak RSS (the kernel's, from wait4) and why it was
    killed (None if it was not)."""
    t0 = time.perf_counter()
    sampled, killed = 0, None
    with open(log_path, "wb") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            sampled = max(sampled, _rss_of(p.pid))
            elapsed = time.perf_counter() - t0
            if killed is None and elapsed > timeout:
                killed = f"timed out after {timeout:.0f} s"
            elif killed is None and max_rss and sampled > max_rss:
                killed = f"killed at {sampled / 1e9:.1f} GB resident (limit {max_rss / 1e9:.1f} GB)"
            if killed:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                pid, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.25)
        p.returncode = os.waitstatus_to_exitcode(status)   # reaped here: Popen must not wait for it again
    return {"returncode": p.returncode, "wall_seconds": round(time.perf_counter() - t0, 1),
            "peak_rss_bytes": max(usage.ru_maxrss * 1024, sampled), "killed": killed}


def tail(path: str, n: int = 6) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def export_timm(name: str, size: int | None, args, work: str, fmt: str = "pt2") -> tuple[str | None, dict]:
    """The cached ``.pt2`` (``fmt="onnx"``: ``.onnx``) of timm model ``name`` at ``size`` (exported now if
    missing): (path, meta)."""
    os.makedirs(args.cache, exist_ok=True)
    stem = os.path.join(args.cache, f"{name}@{size or 'cfg'}")
    path, meta_path = (stem + ".pt2", stem + ".json") if fmt == "pt2" else (stem + ".onnx", stem + ".onnx.json")
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as f:
            return path, dict(json.load(f), cached=True)
    log = os.path.join(work, f"export-{name}.log")
    r = run_process([args.export_python, "-c", EXPORT_CODE, name, str(size or 0), path, meta_path], log,
                    args.export_timeout, args.max_rss)
    if r["killed"] or r["returncode"] != 0 or not os.path.exists(meta_path):
        return None, {"error": f"export failed ({r['killed'] or 'exit code %s' % r['returncode']}): " + tail(log),
                      "export_wall_seconds": r["wall_seconds"]}
    with open(meta_path, encoding="utf-8") as f:
        return path, dict(json.load(f), cached=False, export_wall_seconds=r["wall_seconds"])


def measure(label: str, spec: str, args, work: str, extra: dict | None = None) -> dict:
    """One model in a fresh process: its row (``status`` ok / mismatch / failed / timeout / memory)."""
    row = {"model": label, "spec": spec, **(extra or {})}
    json_path = os.path.join(work, "one.json")
    if os.path.exists(json_path):
        os.remove(json_path)
    cmd = [sys.executable, SCRIPT, "--one", spec, "--json", json_path, "--tradeoff", args.tradeoff,
           "--repeat", str(args.repeat)]
    if args.tune:
        cmd += ["--tune", str(args.tune), "--tune-database", args.tune_database]
    env = dict(os.environ)
    if args.threads:
        env["TVM_NUM_THREADS"] = str(args.threads)
    log = os.path.join(work, "one.log")
    r = run_process(cmd, log, args.timeout, args.max_rss, env)
    row.update(wall_seconds=r["wall_seconds"], process_peak_rss_bytes=r["peak_rss_bytes"])
    if r["killed"]:
        row.update(status="timeout" if r["killed"].startswith("timed out") else "memory", error=r["killed"],
                   log_tail=tail(log))
        return row
    if r["returncode"] != 0 or not os.path.exists(json_path):
        row.update(status="failed", error=f"exit code {r['returncode']}", log_tail=tail(log))
        return row
    with open(json_path, encoding="utf-8") as f:
        c = json.load(f)
    for k in DROP_FIELDS:
        c.pop(k, None)
    choices = c.pop("kernel_choices", [])
    c["kernel_choices_fast"] = sum(1 for k in choices if k.get("fast"))
    c["kernel_choices_total"] = len(choices)
    row["compare"] = c
    row["status"] = "ok" if c["numerics_ok"] else "mismatch"
    return row


# ---------------------------------------------------------------- results
def ratios(row: dict) -> dict:
    c = row["compare"]
    out = {"memory": c["ratio"],
           "compile": c["memsched_compile_seconds"] / max(1e-9, c["default_compile_seconds"]),
           "rss": c["memsched_peak_rss_bytes"] / max(1, c["default_peak_rss_bytes"])}
    if c.get("default_run_seconds"):
        out["run"] = c["memsched_run_seconds"] / c["default_run_seconds"]
    return out


def summary(rows: list) -> dict:
    ok = [r for r in rows if "compare" in r]
    s = {"models": len(rows), "measured": len(ok), "failed": [r["model"] for r in rows if "compare" not in r],
         "numerics_mismatch": [r["model"] for r in ok if not r["compare"]["numerics_ok"]]}
    for key in ("run", "compile", "memory", "rss"):
        vals = [(ratios(r)[key], r["model"]) for r in ok if key in ratios(r)]
        if vals:
            s[f"geomean_{key}_ratio"] = round(math.exp(sum(math.log(v) for v, _ in vals) / len(vals)), 4)
            v, m = max(vals)
            s[f"max_{key}_ratio"] = {"ratio": round(v, 4), "model": m}
    return s


def runtime_table(rows: list) -> list:
    """The runtimes a user would deploy instead (ONNX Runtime for an .onnx, LiteRT for a .tflite or a zoo network
    as the zoo converts it), next to the two TVM builds."""
    have = [r for r in rows if "compare" in r and r["compare"].get("runtimes")]
    if not have:
        return []
    out = ["", "## Side by side with the runtimes users deploy", "",
           "The same file in ONNX Runtime (CPU provider) or LiteRT (default op resolver, XNNPACK), each in a process "
           "of its own, with 1 thread and with all cores; memory = that process's peak resident growth while "
           "creating the session and running (`tvm_memsched.app.yardsticks`). A zoo network runs in LiteRT as the "
           "zoo's converter writes it (NHWC).", "",
           "| model | runtime | TVM default (ms) | ours (ms) | runtime 1 thread (ms) | all cores (ms) | "
           "ours / runtime (1 thread) | ours / runtime (all cores) | runtime memory growth (MB) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in have:
        c = r["compare"]
        by = {t["threads"]: t for t in c["runtimes"]}
        one, allc = by.get(1, {}), by.get(0, {})
        if one.get("error") or not one.get("seconds"):
            out.append(f"| {r['model']} | {one.get('runtime', '?')} | | | does not run: "
                       f"{(one.get('error') or '?')[:120].replace('|', '/')} | | | | |")
            continue
        ours = c.get("memsched_run_seconds")
        ms = lambda x: f"{x * 1e3:.2f}" if x else "-"  # noqa: E731
        ratio = lambda t: f"{ours / t['seconds']:.2f}x" if ours and t.get("seconds") else "-"  # noqa: E731
        out.append(f"| {r['model']} | {one['runtime']} | {ms(c.get('default_run_seconds'))} | {ms(ours)} | "
                   f"{ms(one['seconds'])} | {ms(allc.get('seconds'))} | {ratio(one)} | {ratio(allc)} | "
                   f"{one['rss_growth_bytes'] / 1e6:.1f} |")
    return out


def markdown(data: dict) -> str:
    meta, rows = data["meta"], data["rows"]
    mb = lambda n: f"{n / 1e6:.2f}"  # noqa: E731
    out = ["# Our pipeline vs TVM's default build", "",
           f"{meta['date']}, Python {meta['python']}, TVM {meta['tvm']}, torch {meta['torch']}, {meta['machine']} "
           f"({meta['cpus']} cores), target llvm; tradeoff `{meta['tradeoff']}`, run time = VM median of "
           f"{meta['repeat']} runs after a warm-up, "
           f"TVM_NUM_THREADS={meta['threads'] or 'TVM default'}. Each model ran in a fresh process "
           "(`tvm_memsched.relax.compare.compare`, as `tvm-memsched compare MODEL` runs it). "
           "MB = 10^6 bytes.", "",
           "| model | TVM planned (MB) | ours planned (MB) | ratio TVM/ours | ours live peak incl. workspace (MB) | "
           "run TVM / ours (ms) | run ours/TVM | compile TVM / ours (s) | compile ours/TVM | "
           "compiler peak RSS TVM / ours (MB) | numerics (max abs diff) | wall (s) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        if "compare" not in r:
            why = (r.get("error") or r["status"]).replace("\n", " ").replace("|", "\\|")
            last = (r.get("log_tail") or "").strip().splitlines()
            if last:
                why += ": `" + last[-1][:160].replace("|", "\\|").replace("`", "'") + "`"
            out.append(f"| {r['model']} | **{r['status'].upper()}**: {why} | | | | | | | | "
                       f"{r.get('process_peak_rss_bytes', 0) / 1e6:.0f} (process) | | "
                       f"{r.get('wall_seconds', 0):.0f} |")
            continue
        c, q = r["compare"], ratios(r)
        run = (f"{c['default_run_seconds'] * 1e3:.2f} / {c['memsched_run_seconds'] * 1e3:.2f} | {q['run']:.3f}"
               if "run" in q else "- | -")
        num = ("ok" if c["numerics_ok"] else "**MISMATCH**") + f" ({c['max_abs_diff']:.1e})"
        out.append(f"| {r['model']} | {mb(c['default_planned_bytes'])} | {mb(c['memsched_planned_bytes'])} | "
                   f"{q['memory']:.2f}x | {mb(c['memsched_live_peak_with_workspace_bytes'])} | {run} | "
                   f"{c['default_compile_seconds']:.2f} / {c['memsched_compile_seconds']:.2f} | {q['compile']:.2f} | "
                   f"{c['default_peak_rss_bytes'] / 1e6:.0f} / {c['memsched_peak_rss_bytes'] / 1e6:.0f} | {num} | "
                   f"{r['wall_seconds']:.0f} |")
    if meta.get("tune"):
        out += ["", f"Both sides tuned with MetaSchedule, {meta['tune']} trials per kernel (TVM's default build with "
                "MetaSchedule's CPU rules, ours with `unsplit` on the kernels our pipeline emits; the `memory` "
                "tradeoff keeps a tuned kernel only where the plan stays the least-memory build's); compile time "
                "excludes tuning (a second build from the database tunes nothing):", ""]
        for r in rows:
            t = (r.get("compare") or {}).get("tuning")
            if t:
                tuned = lambda side: sum(1 for k in t[side] if k.get("tuned"))  # noqa: E731
                out.append(f"* {r['model']}: tuned kernels TVM {tuned('default')} of {len(t['default'])}, ours "
                           f"{tuned('memsched')} of {len(t['memsched'])}; tuning {t['seconds']:.0f} s, "
                           f"{t['kernels_tuned_now']} kernels tuned in this run")
    s = data["summary"]
    out.append("")
    if s.get("geomean_run_ratio") is not None:
        out.append(f"Over the {s['measured']} measured models: run time ours/TVM geomean "
                   f"**{s['geomean_run_ratio']:.3f}**, max {s['max_run_ratio']['ratio']:.3f} "
                   f"({s['max_run_ratio']['model']}); compile time ours/TVM geomean {s['geomean_compile_ratio']:.2f}, "
                   f"max {s['max_compile_ratio']['ratio']:.2f} ({s['max_compile_ratio']['model']}); planned memory "
                   f"TVM/ours geomean {s['geomean_memory_ratio']:.2f}x, max {s['max_memory_ratio']['ratio']:.2f}x "
                   f"({s['max_memory_ratio']['model']}); compiler peak RSS ours/TVM max "
                   f"{s['max_rss_ratio']['ratio']:.2f} ({s['max_rss_ratio']['model']}).")
    if s["failed"] or s["numerics_mismatch"]:
        out.append(f"Not measured: {', '.join(s['failed']) or 'none'}; numerics mismatch: "
                   f"{', '.join(s['numerics_mismatch']) or 'none'}.")
    out += runtime_table(rows)
    timm_rows = [r for r in rows if r.get("timm")]
    if timm_rows:
        out += ["", "timm models: random weights (`pretrained=False`, seed 0), batch 1, exported with "
                "`torch.export.export(model.eval(), (x,))` + `torch.export.save` (rows marked (ONNX): the same "
                "model and weights with `torch.onnx.export(model.eval(), (x,), opset_version=17, dynamo=False)`); "
                + "; ".join(
                    f"{r['model']}: {r['timm'].get('params', 0) / 1e6:.1f} M parameters, timm "
                    f"{r['timm'].get('timm', '?')}" for r in timm_rows if "error" not in r["timm"]
                    and r["timm"].get("format", "pt2") == "pt2") + "."]
    slow = [r for r in rows if "compare" in r and ratios(r)["compile"] > meta["compile_ratio_flag"]]
    if slow:
        out += ["", f"## Slowest compiler passes where compile ours/TVM > {meta['compile_ratio_flag']:g}", "",
                "Own time per pass (nested passes excluded; the shared dispatch and legalization counted on both "
                "sides), as `tvm-memsched compare MODEL --profile` prints it.", ""]
        for r in slow:
            out += [f"**{r['model']}** (compile {ratios(r)['compile']:.2f}x):", "", "```",
                    r["compare"].get("profile_text", "").rstrip(), "```", ""]
    failed = [r for r in rows if "compare" not in r and r.get("log_tail")]
    if failed:
        out += ["", "## Failures (last lines of the model process's output)", ""]
        for r in failed:
            out += [f"**{r['model']}** ({r.get('error', r['status'])}):", "", "```", r["log_tail"], "```", ""]
    out += ["", "Columns: planned = the `alloc_storage` bytes right after memory planning (function outputs are "
            "planned by neither); ours live peak = the simulated live-tensor peak of our order with each kernel's "
            "workspace (the VM serves workspace from a separate pool); compile = each side's build (shared dispatch "
            "and legalization counted on both); compiler peak RSS = the process's resident memory peak during "
            "each build; wall = the whole model process (import, both builds, analysis, numerics, timing).",
            "", "Commands:", ""]
    out += [f"- `{c}` ({d})" for c, d in meta["commands"]]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", metavar="MODEL",
                    help="zoo:NAME or a .tflite/.onnx/.pt2 file (default: the six zoo models, when no --timm)")
    ap.add_argument("--out", default=None, metavar="DIR", help="write pipeline.json and pipeline.md here")
    ap.add_argument("--merge", action="store_true", help="keep the other models' rows of DIR/pipeline.json")
    ap.add_argument("--timm", action="append", default=[], metavar="NAME[@SIZE]",
                    help="a timm model (random weights, batch 1, SIZE x SIZE; repeatable)")
    ap.add_argument("--cache", default=DEFAULT_CACHE, help=f"exported .pt2 files (default {DEFAULT_CACHE})")
    ap.add_argument("--export-python", default=sys.executable, metavar="PYTHON",
                    help="interpreter with timm and torchvision for the export (default: this one)")
    ap.add_argument("--export-timeout", type=float, default=1800, metavar="SECONDS")
    ap.add_argument("--timm-onnx", action="store_true",
                    help="also export each timm model to ONNX (torch.onnx.export, opset 17) and measure it as a row "
                         "of its own, ONNX Runtime beside it")
    ap.add_argument("--tradeoff", default="memory", choices=["memory", "balanced", "speed"])
    ap.add_argument("--repeat", type=int, default=5, help="timed VM runs per executable (median; 0: no timing)")
    ap.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                    help="per model process (default 1200 s; with --tune 4 hours: MetaSchedule tunes each kernel "
                         "of both sides)")
    ap.add_argument("--max-rss-gb", type=float, default=16.0, help="kill a model process past this resident size")
    ap.add_argument("--threads", type=int, default=None, help="TVM_NUM_THREADS for the model processes")
    ap.add_argument("--compile-ratio-flag", type=float, default=2.0,
                    help="show the pass profile of models whose compile ours/TVM exceeds this")
    ap.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                    help="tune both sides with MetaSchedule, TRIALS per kernel (compare --tune; tuning time is "
                         "reported apart from compile time)")
    ap.add_argument("--tune-database", default=None, metavar="DIR",
                    help="the tuning database (default: tvm_memsched's, ~/.cache/tvm_memsched/tuning); a second "
                         "run with the same one tunes nothing")
    ap.add_argument("--one", metavar="SPEC", help=argparse.SUPPRESS)
    ap.add_argument("--json", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        return run_one(args.one, args.json, args.tradeoff, args.repeat, args.tune, args.tune_database)
    args.max_rss = int(args.max_rss_gb * 1e9) if args.max_rss_gb else None
    if args.timeout is None:
        args.timeout = 4 * 3600 if args.tune else 1200
    if args.tune:
        from tvm_memsched.relax.passes.tune_kernels import default_tuning_database

        args.tune_database = os.path.abspath(args.tune_database or default_tuning_database())
    specs = args.specs or ([] if args.timm else list(ZOO_MODELS))

    import torch
    import tvm

    command = "python scripts/bench_pipeline.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "tvm": tvm.__version__, "torch": torch.__version__.split("+")[0],
            "tradeoff": args.tradeoff, "repeat": args.repeat, "threads": args.threads,
            "compile_ratio_flag": args.compile_ratio_flag, "tune": args.tune, "commands": []}
    rows = []
    old_path = os.path.join(args.out, "pipeline.json") if args.out else None
    if args.merge and old_path and os.path.exists(old_path):
        with open(old_path, encoding="utf-8") as f:
            old = json.load(f)
        for k in ("tradeoff", "repeat", "threads", "tune"):
            if old["meta"].get(k) != meta[k]:
                print(f"warning: {old_path} was measured with {k}={old['meta'].get(k)}, this run {meta[k]}",
                      file=sys.stderr)
        meta["commands"] = [tuple(c) for c in old["meta"].get("commands", [])]
        rows = old["rows"]
    meta["commands"].append((command, meta["date"]))

    def put(row):
        for i, r in enumerate(rows):
            if r["model"] == row["model"]:
                rows[i] = row
                return
        rows.append(row)

    with tempfile.TemporaryDirectory(prefix="bench_pipeline-") as work:
        jobs = [(spec, spec, None) for spec in specs]
        for t in args.timm:
            name, _, size = t.partition("@")
            for fmt in ("pt2", "onnx") if args.timm_onnx else ("pt2",):
                jobs.append((f"timm:{t}", None, (name, int(size) if size else None, fmt)))
        for label, spec, timm_model in jobs:
            extra = None
            if timm_model:
                print(f"{label}: export ...", file=sys.stderr, flush=True)
                spec, info = export_timm(*timm_model[:2], args, work, timm_model[2])
                info["format"] = timm_model[2]
                if timm_model[2] == "onnx":
                    label += " (ONNX)"
                extra = {"timm": info}
                if spec is None:
                    put({"model": label, "status": "export", "error": info["error"].splitlines()[0],
                         "log_tail": info["error"], "timm": info})
                    print(f"{label}: {info['error']}", file=sys.stderr, flush=True)
                    continue
                if timm_model[1] is None:                 # the label names the size the export used
                    label = label.replace(f"timm:{timm_model[0]}", f"timm:{timm_model[0]}@{info['size']}", 1)
            print(f"{label} ...", file=sys.stderr, flush=True)
            row = measure(label, spec, args, work, extra)
            put(row)
            if "compare" in row:
                q = ratios(row)
                print(f"{label}: {row['status']}, memory {q['memory']:.2f}x, run ours/TVM {q.get('run', 0):.3f}, "
                      f"compile ours/TVM {q['compile']:.2f}, process peak RSS {row['process_peak_rss_bytes'] / 1e6:.0f} "
                      f"MB, wall {row['wall_seconds']:.0f} s", file=sys.stderr, flush=True)
            else:
                print(f"{label}: {row['status'].upper()} ({row.get('error')}) after {row['wall_seconds']:.0f} s\n"
                      f"{row.get('log_tail', '')}", file=sys.stderr, flush=True)
            if args.out:           # after every model: a long run interrupted keeps what it measured
                write(args.out, meta, rows)
    data = write(args.out, meta, rows) if args.out else {"meta": meta, "rows": rows, "summary": summary(rows)}
    print(markdown(data))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


def write(out_dir: str, meta: dict, rows: list) -> dict:
    data = {"meta": meta, "rows": rows, "summary": summary(rows)}
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, "pipeline.json"), json.dumps(data, indent=1, default=str) + "\n")
    atomic_write(os.path.join(out_dir, "pipeline.md"), markdown(data))
    return data


if __name__ == "__main__":
    sys.exit(main())
