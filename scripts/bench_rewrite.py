"""Benchmark identity graph rewriting: peak and planned bytes with and without rewriting.

For every model (zoo models when :mod:`tvm_memsched.zoo` is available, else the
built-in irregular test networks), at operator level (right after import):

* the peak of the block in program order (the converter's order, what a
  TFLite-style runtime executes) and scheduled with ``--method``;
* the same after :func:`~tvm_memsched.relax.rewrite.identity_rewrite` in each
  configuration (:data:`CONFIGS`: policy and rule set; sites rewritten, rules
  used, time);

and, unless ``--no-compare``, at kernel level with :func:`tvm_memsched.relax.compare.compare`
(TVM's default pipeline vs ours, planned arena bytes) on the original and on the
rewritten module, plus a numerical check of the rewritten module against the
original on the Relax VM. SERENITY's published figures are listed side by side.

Writes ``rewrite.json`` and ``rewrite.md`` to ``--out``.

Usage::

    python scripts/bench_rewrite.py --out bench/rewrite
    python scripts/bench_rewrite.py --models swiftnet_like darts_v2_cifar --configs if-better --out /tmp/rw
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

import numpy as np

SMALL_ZOO = ["swiftnet_like", "darts_v2_cifar_tiny", "nasnet_a_cifar_tiny", "amoebanet_a_cifar_tiny",
             "randwire_tiny", "densenet_like"]
MEDIUM_ZOO = ["darts_v2_cifar", "nasnet_a_cifar", "amoebanet_a_cifar"]
BUILTIN = ["branchy4", "branchy8", "random30"]

#: name -> (policy, rules): every rule and duplicate merging where they lower the peak; SERENITY-style concat
#: rules only; every concat rule applied; duplicate merging alone (to separate its effect)
CONFIGS = {
    "if-better": ("if-better", None),
    "if-better/concat": ("if-better", "concat"),
    "always/concat": ("always", "concat"),
    "merge-only": ("if-better", "merge"),
}

#: SERENITY (MLSys 2020) figures, ../shared/reference/published-results.md
SERENITY = {
    "dp_vs_tflite": 1.68,
    "dp_plus_rewrite_vs_tflite": 1.86,
    "extra_from_rewriting": 0.107,
    "swiftnet_cell_a_with_allocator_kb": (250.9, 225.8),
    "swiftnet_cell_a_without_allocator_kb": (200.7, 188.2),
}


def zoo_available() -> bool:
    try:
        from tvm_memsched import zoo  # noqa: F401
    except ImportError:
        return False
    return True


def load_model(name: str):
    """The Relax module of a zoo model or of a built-in network (``branchyN``, ``randomN``)."""
    from tvm_memsched.relax import testing

    if name.startswith("branchy"):
        return testing.branchy_module(branches=int(name[7:] or 4), channels=16, size=32)
    if name.startswith("random"):
        return testing.random_module(seed=int(name[6:] or 0), n_ops=int(name[6:] or 30), size=16,
                                     multi_output=False)
    from tvm_memsched import zoo

    return zoo.load(name)


def block_peaks(mod, method: str, time_limit: float | None):
    """Program-order and scheduled peak of ``main``'s largest block, and its op count."""
    from tvm import relax

    from tvm_memsched.core.simulate import peak_bytes
    from tvm_memsched.relax.graph import block_to_graph
    from tvm_memsched.schedulers import schedule

    func = mod["main"]
    prog = sched = ops = 0
    for k, block in enumerate(func.body.blocks):
        if not isinstance(block, relax.DataflowBlock):
            continue
        g = block_to_graph(func, k).graph
        prog = max(prog, peak_bytes(g, [o.name for o in g.ops]))
        sched = max(sched, schedule(g, method, time_limit=time_limit).peak_bytes)
        ops += g.num_ops
    return prog, sched, ops


def run_default(mod, inputs):
    """Outputs of ``mod`` compiled with TVM's default llvm pipeline."""
    import tvm
    from tvm import relax

    from tvm_memsched.relax.compare import run_vm

    target = tvm.target.Target({"kind": "llvm"})
    return run_vm(tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target)), inputs)


def config_rules(which):
    from tvm_memsched.relax.rewrite import MERGE, RULES

    return {None: None, "concat": list(RULES), "merge": [MERGE]}[which]


def bench_model(name: str, args) -> dict:
    from tvm_memsched.relax.compare import compare, random_inputs
    from tvm_memsched.relax.rewrite import identity_rewrite

    t0 = time.perf_counter()
    mod = load_model(name)
    prog, sched, ops = block_peaks(mod, args.method, args.time_limit)
    row = {"model": name, "ops": ops, "program_peak_bytes": prog, "scheduled_peak_bytes": sched,
           "load_seconds": round(time.perf_counter() - t0, 2), "configs": {}}
    print(f"{name}: {ops} ops, program order {prog} B, scheduled ({args.method}) {sched} B", flush=True)
    compared = {}
    if args.compare:
        c = compare(mod, method=args.method, time_limit=args.time_limit, name=name, run=False,
                    workspace=args.workspace)
        compared = {"default_planned_bytes": c.default_planned_bytes,
                    "memsched_planned_bytes": c.memsched_planned_bytes,
                    "kernel_peak_bytes": c.memsched_live_peak_bytes}
        row.update(compared)
        print(f"  planned: TVM default {c.default_planned_bytes} B, memsched {c.memsched_planned_bytes} B", flush=True)
    inputs = random_inputs(mod["main"], seed=0)
    reference = None
    for label in args.configs:
        policy, which = CONFIGS[label]
        t0 = time.perf_counter()
        new, report = identity_rewrite(mod, rules=config_rules(which), policy=policy, method=args.method,
                                       time_limit=args.time_limit, max_passes=args.max_passes, level=args.level)
        seconds = time.perf_counter() - t0
        _, after, new_ops = block_peaks(new, args.method, args.time_limit)
        res = {"policy": policy, "rules": which or "all", "chosen_level": report.chosen.get("main", ""),
               "sites": len(report.sites), "rules_applied": dict(collections.Counter(s.rule for s in report.sites)),
               "plans": len({(s.function, s.block, s.plan) for s in report.sites}),
               "evaluations": sum(b.evaluations for b in report.blocks), "rewrite_seconds": round(seconds, 2),
               "ops": new_ops, "scheduled_peak_bytes": after,
               "peak_gain": round(1 - after / sched, 4) if sched else 0.0}
        if args.compare and report.sites:
            c = compare(new, method=args.method, time_limit=args.time_limit, name=name, run=False,
                        workspace=args.workspace)
            res["default_planned_bytes"] = c.default_planned_bytes
            res["memsched_planned_bytes"] = c.memsched_planned_bytes
            res["kernel_peak_bytes"] = c.memsched_live_peak_bytes
            res["planned_gain"] = round(1 - c.memsched_planned_bytes / compared["memsched_planned_bytes"], 4)
        elif args.compare:
            res.update(default_planned_bytes=compared["default_planned_bytes"],
                       memsched_planned_bytes=compared["memsched_planned_bytes"],
                       kernel_peak_bytes=compared["kernel_peak_bytes"], planned_gain=0.0)
        if args.numerics and report.sites:
            if reference is None:
                reference = run_default(mod, inputs)
            got = run_default(new, inputs)
            diff = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(reference, got))
            scale = max(float(np.max(np.abs(a))) for a in reference)
            res["max_abs_diff"] = diff
            res["numerics_ok"] = bool(all(np.allclose(b, a, rtol=1e-5, atol=1e-5 * max(1.0, scale))
                                          for a, b in zip(reference, got)))
        row["configs"][label] = res
        print(f"  {label}: {res['sites']} rewrites in {res['plans']} plans, scheduled peak {after} B "
              f"({100 * res['peak_gain']:.1f}% less), {res['evaluations']} evaluations, {seconds:.1f}s"
              + (f", planned {res['memsched_planned_bytes']} B ({100 * res['planned_gain']:.1f}% less)"
                 if args.compare else "")
              + (f", numerics {'ok' if res['numerics_ok'] else 'MISMATCH'} (max diff {res['max_abs_diff']:.2g})"
                 if "numerics_ok" in res else ""), flush=True)
    return row


def kb(n) -> str:
    return f"{n / 1024:.1f}" if isinstance(n, (int, float)) else "-"


def pct(x) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "-"


def markdown(rows, args) -> str:
    lines = ["# Identity graph rewriting: peak memory with and without rewriting", "",
             f"Scheduler `{args.method}` (time limit {args.time_limit}), configurations: "
             + "; ".join(f"`{c}` = policy {CONFIGS[c][0]}, rules {CONFIGS[c][1] or 'all'}" for c in args.configs)
             + " (rules `all` = the concat rules and duplicate merging, `concat` = the concat rules only, "
             "`merge` = duplicate merging only). Sizes in KiB. *Scheduled peak*: live-tensor peak of the "
             "operator-level block (right after import) in the scheduler's order, without an allocator "
             "(SERENITY's \"without the memory allocator\"). *Planned*: arena bytes after TVM's default pipeline "
             "(`default`) and ours (`memsched`: MemoryAwareReorder + ArenaPlanMemory) at kernel level, "
             "from `tvm_memsched.relax.compare.compare` (SERENITY's \"with the memory allocator\"); "
             f"kernel workspace in the reorder objective: {args.workspace or 'none'}.", ""]
    head = ["model", "ops", "program order", "scheduled"]
    for p in args.configs:
        head += [f"{p}", "gain", "rewrites"]
    lines += ["Scheduled peak (operator level):", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], str(r["ops"]), kb(r["program_peak_bytes"]), kb(r["scheduled_peak_bytes"])]
        for p in args.configs:
            res = r["configs"][p]
            cells += [kb(res["scheduled_peak_bytes"]), pct(res["peak_gain"]), str(res["sites"])]
        lines.append("| " + " | ".join(cells) + " |")
    if args.compare:
        head = ["model", "kernel peak", "planned default", "planned memsched"]
        for p in args.configs:
            head += [f"{p}: kernel peak", "planned", "gain"]
        lines += ["", "Kernel level (after TVM's fusion, our order): live-tensor peak and planned arena bytes:", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in rows:
            cells = [r["model"], kb(r.get("kernel_peak_bytes")), kb(r.get("default_planned_bytes")),
                     kb(r.get("memsched_planned_bytes"))]
            for p in args.configs:
                res = r["configs"][p]
                cells += [kb(res.get("kernel_peak_bytes")), kb(res.get("memsched_planned_bytes")),
                          pct(res.get("planned_gain"))]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Rules applied and cost:", ""]
    for r in rows:
        for p in args.configs:
            res = r["configs"][p]
            rules = ", ".join(f"{k} {v}" for k, v in sorted(res["rules_applied"].items())) or "none"
            num = ""
            if "numerics_ok" in res:
                num = f"; numerics vs original {'ok' if res['numerics_ok'] else 'MISMATCH'} " \
                      f"(max abs diff {res['max_abs_diff']:.2g})"
            chosen = res["chosen_level"]
            kept = ("" if not chosen else "kept the original; " if chosen == "original"
                    else f"kept the search scored at {chosen}; ")
            lines.append(f"* {r['model']} ({p}): {rules}; {kept}{res['evaluations']} evaluations, "
                         f"{res['rewrite_seconds']}s{num}")
    s = SERENITY
    (w0, w1), (n0, n1) = s["swiftnet_cell_a_with_allocator_kb"], s["swiftnet_cell_a_without_allocator_kb"]
    lines += ["", "SERENITY (MLSys 2020), published: peak memory vs TensorFlow Lite "
              f"{s['dp_vs_tflite']}x smaller with the DP scheduler, {s['dp_plus_rewrite_vs_tflite']}x with identity "
              f"graph rewriting (an extra {pct(s['extra_from_rewriting'])}); SwiftNet cell A {w0} -> {w1} KB with the "
              f"allocator ({pct(1 - w1 / w0)} less), {n0} -> {n1} KB without it ({pct(1 - n1 / n0)} less). Their "
              "networks are the published SwiftNet/DARTS/RandWire; ours are the zoo's re-creations, so compare the "
              "relative gains (the `gain` columns: rewriting on top of the same scheduler), not absolute sizes."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", help="zoo model names or branchyN / randomN "
                                                "(default: the small zoo networks, or the built-in ones)")
    ap.add_argument("--medium", action="store_true", help="also the CIFAR-10 NAS networks (20 cells)")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS),
                    help="rewrite configurations (default: all)")
    ap.add_argument("--method", default="beam", help="scheduler for evaluations and peaks (default: beam)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per schedule (default: none)")
    ap.add_argument("--max-passes", type=int, default=2)
    ap.add_argument("--level", default="best", choices=["best", "kernel", "operator"],
                    help="where identity_rewrite scores blocks (default: best of both)")
    ap.add_argument("--workspace", default=None, choices=["lowered", "tir"],
                    help="kernel workspace in compare()'s reorder objective (default: none, the objective "
                         "identity_rewrite scores with)")
    ap.add_argument("--no-compare", dest="compare", action="store_false",
                    help="skip the kernel-level planned bytes (compiles every model twice per configuration)")
    ap.add_argument("--no-numerics", dest="numerics", action="store_false",
                    help="skip running rewritten vs original on the VM")
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args(argv)
    models = args.models or ((SMALL_ZOO + (MEDIUM_ZOO if args.medium else [])) if zoo_available() else BUILTIN)
    os.makedirs(args.out, exist_ok=True)
    rows = [bench_model(m, args) for m in models]
    doc = {"method": args.method, "time_limit": args.time_limit, "level": args.level, "workspace": args.workspace,
           "configs": {c: {"policy": CONFIGS[c][0], "rules": CONFIGS[c][1] or "all"} for c in args.configs},
           "max_passes": args.max_passes, "serenity": SERENITY, "models": rows}
    with open(os.path.join(args.out, "rewrite.json"), "w") as f:
        json.dump(doc, f, indent=1)
    with open(os.path.join(args.out, "rewrite.md"), "w") as f:
        f.write(markdown(rows, args))
    print(f"wrote {args.out}/rewrite.json and rewrite.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
