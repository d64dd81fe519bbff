#!/usr/bin/env python3
"""ONNX and PyTorch (.pt2) files of public architectures: TVM's default build against ours.

SqueezeNet 1.1, Inception v1 (GoogLeNet), DenseNet-121 and ShuffleNet v2 1.0x, written by hand after the papers
(:mod:`tvm_memsched.zoo.torch_nets`, random weights, 224x224), exported as ONNX (TorchScript-based exporter) and
as ``torch.export`` programs (``.pt2``), then compared as ``tvm-memsched compare FILE`` does: planned activation
memory of TVM's default pipeline vs tvm_memsched's (order + arena), numerics checked on the VM.

    python scripts/bench_frontends.py --out docs/bench/frontends [--size 224] [--models squeezenet ...]

``--external torchvision:densenet121`` (or ``timm:NAME``, repeatable) adds the same architecture as a third
party defines it, exported by ``--export-python`` (an interpreter with torch, onnx and torchvision or timm; default
this one) with the same two exporters, so one architecture can be compared across the files users bring:

    python scripts/bench_frontends.py --out docs/bench/frontends/densenet121 --models densenet \
        --external torchvision:densenet121 --external timm:densenet121 --export-python VENV/bin/python

``--keep-exporter-forms`` measures ours without the passes that write the styles one way (``FoldAffineChains``,
``AbsorbTransposes``). ``--styles`` writes each zoo model as the exporters of :mod:`tvm_memsched.zoo.exporter_styles` write it
(torchvision's ONNX, ``.pt2``, Caffe2's batch norm + Mul + Add, folded Mul + Add, Sub / Div / Mul / Add,
Keras channels-last with transposes) instead of ``--formats``; ``--stem`` names the output files:

    python scripts/bench_frontends.py --out docs/bench/frontends/densenet121 --models densenet \
        --styles onnx pt2 caffe2 affine decomposed keras --stem styles

Every ``.onnx`` file is also run in onnxruntime (CPU) on compare's inputs, against our build.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tvm_memsched.app.output import write_results  # noqa: E402
from tvm_memsched.app.models import load_relax_spec  # noqa: E402
from tvm_memsched.zoo import exporter_styles, torch_nets  # noqa: E402


#: run by --export-python: a torchvision or timm model (random weights, eval mode) as .onnx or .pt2
_EXPORT = """
import json, sys, torch
kind, name, fmt, path, size = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
torch.manual_seed(0)
if kind == "torchvision":
    import torchvision as lib
    model = getattr(lib.models, name)(weights=None)
else:
    import timm as lib
    model = lib.create_model(name, pretrained=False)
model.eval()
x = torch.randn(1, 3, size, size)
if fmt == "onnx":
    torch.onnx.export(model, (x,), path, dynamo=False, opset_version=17, input_names=["input"])
else:
    torch.export.save(torch.export.export(model, (x,)), path)
print(json.dumps({kind: lib.__version__, "torch": torch.__version__}))
"""


def export_external(kind: str, name: str, fmt: str, path: str, size: int, python: str) -> dict:
    """Export ``kind:name`` (torchvision or timm) to ``path`` in a separate process; the versions it used."""
    import json

    r = subprocess.run([python, "-c", _EXPORT, kind, name, fmt, path, str(size)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"exporting {kind}:{name} as .{fmt} with {python} failed:\n{r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def onnxruntime_reference(path: str):
    """``(name, run)`` running the ``.onnx`` file in onnxruntime (CPU), as compare's ``reference``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return "onnxruntime (CPU)", lambda inputs: session.run(None, dict(zip(names, inputs)))


def measure(name: str, fmt: str, path: str, **options) -> dict:
    import tvm

    from tvm_memsched.relax.compare import compare

    t0 = time.perf_counter()
    mod, _ = load_relax_spec(path)
    t1 = time.perf_counter()
    reference = onnxruntime_reference(path) if fmt == "onnx" else None
    c = compare(mod, tvm.target.Target({"kind": "llvm"}), name=f"{name}.{fmt}", reference=reference,
                **options).to_dict()
    row = {"model": name, "format": fmt, "file_bytes": os.path.getsize(path), "import_seconds": round(t1 - t0, 1),
           "compare_seconds": round(time.perf_counter() - t1, 1), "tvm_default_bytes": c["default_planned_bytes"],
           "ours_bytes": c["memsched_planned_bytes"], "ratio": c["ratio"], "numerics_ok": c["numerics_ok"],
           "max_abs_diff": c["max_abs_diff"],
           "tvm_default_with_workspace_bytes": c["default_live_peak_with_workspace_bytes"],
           "ours_with_workspace_bytes": c["memsched_live_peak_with_workspace_bytes"]}
    if reference is not None:
        row.update(onnxruntime_ok=c["reference_ok"], onnxruntime_max_abs_diff=c["reference_max_abs_diff"])
    return row


def markdown(rows, meta) -> str:
    out = ["# ONNX and .pt2 files: TVM's default build vs tvm_memsched", "",
           f"{meta['date']}, Python {meta['python']}, {meta['machine']}, {meta['size']}x{meta['size']} inputs; "
           f"`{meta.get('command', 'python scripts/bench_frontends.py')}`. Source zoo: architectures written "
           "after the papers (`tvm_memsched.zoo.torch_nets`, random weights); ONNX from PyTorch's TorchScript-based "
           "exporter (BatchNorm folded into convolutions where it follows one), .pt2 from `torch.export` "
           "(BatchNorm kept). Planned bytes: the arena plans of the whole function (TVM's "
           "`StaticPlanBlockMemory`; ours: memory-aware order, in-place execution, one arena). With "
           "workspace: the live peak of each build's order with every kernel's workspace counted where it runs "
           "(the VM serves workspace from a pool of its own; ours includes the bands of convolution chains).",
           "", "| model | source | file | TVM default planned | tvm_memsched | ratio | TVM default with workspace "
           "| tvm_memsched with workspace | numerics |",
           "|---|---|---|---:|---:|---:|---:|---:|---|"]
    styled = any("style" in r for r in rows)
    if styled:
        out[2] += (" Exporter styles (`tvm_memsched.zoo.exporter_styles`): the same network and weights as "
                    "torchvision's ONNX export writes it (`onnx`), as `torch.export` does (`pt2`), Caffe2-style "
                    "(batch norm with scale 1, shift 0, then `Mul` gamma and `Add` beta: `caffe2`), folded "
                    "statistics (`Mul` + `Add`: `affine`), spelled out (`Sub` mean, `Div` `Sqrt(var + eps)`, `Mul`, "
                    "`Add`: `decomposed`) and Keras-style channels-last (NHWC input, `Transpose` around every "
                    "convolution and pooling, `Mul` + `Add` of `[C]` constants: `keras`). Numerics: our outputs "
                    "against TVM's default build of the same file (max abs diff; bit-identical is 0) and, for "
                    ".onnx, against onnxruntime.")
        out[-2] = out[-2].replace("| file |", "| file | style |")
        out[-1] = out[-1].replace("|---|---|---|", "|---|---|---|---|")

    def mib(r, key):
        return f"{r[key] / 2**20:.2f} MiB" if key in r else "-"

    def numerics(r):
        text = "equal" if r["numerics_ok"] else "DIFFERENT"
        if styled:
            text += f" (max diff {r.get('max_abs_diff', 0):.2g})"
        if "onnxruntime_ok" in r:
            text += (f"; onnxruntime {'equal' if r['onnxruntime_ok'] else 'DIFFERENT'} "
                     f"(max diff {r['onnxruntime_max_abs_diff']:.2g})")
        return text

    for r in rows:
        style = f" {r.get('style', '-')} |" if styled else ""
        out.append(f"| {r['model']} | {r.get('source', 'zoo')} | .{r['format']} |{style} "
                   f"{mib(r, 'tvm_default_bytes')} | {mib(r, 'ours_bytes')} | {r['ratio']:.2f}x | "
                   f"{mib(r, 'tvm_default_with_workspace_bytes')} | {mib(r, 'ours_with_workspace_bytes')} | "
                   f"{numerics(r)} |")
    versions = sorted({f"{k} {v}" for r in rows for k, v in r.get("versions", {}).items()})
    if versions:
        out += ["", "Third-party definitions: random weights, eval mode, exported by the same two exporters with "
                + ", ".join(versions) + "."]
    ours = [r["ours_bytes"] for r in rows]
    if (versions or styled) and len(rows) > 1:
        out += ["", f"Our plans differ by at most {100 * (max(ours) / min(ours) - 1):.1f}% across the "
                    f"{len(rows)} files."]
    return "\n".join(out + [""])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write frontends.json and frontends.md here")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--models", nargs="*", default=list(torch_nets.NETWORKS))
    ap.add_argument("--formats", nargs="*", default=["onnx", "pt2"], choices=["onnx", "pt2"])
    ap.add_argument("--external", action="append", default=[], metavar="torchvision:NAME|timm:NAME",
                    help="also a third party's definition of an architecture (repeatable)")
    ap.add_argument("--export-python", default=sys.executable,
                    help="interpreter with torch, onnx and torchvision / timm for --external (default: this one)")
    ap.add_argument("--styles", nargs="*", default=None, choices=exporter_styles.STYLES,
                    help="write each zoo model in these exporter styles (in place of --formats)")
    ap.add_argument("--stem", default="frontends", help="output files: STEM.json and STEM.md (default frontends)")
    ap.add_argument("--keep-exporter-forms", action="store_true",
                    help="ours without FoldAffineChains and AbsorbTransposes (what the styles planned before them)")
    args = ap.parse_args(argv)
    for e in args.external:
        if e.split(":", 1)[0] not in ("torchvision", "timm") or ":" not in e:
            ap.error(f"--external takes torchvision:NAME or timm:NAME, got {e!r}")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for e in args.external:
            kind, name = e.split(":", 1)
            for fmt in args.formats:
                path = os.path.join(d, f"{kind}_{name}.{fmt}")
                versions = export_external(kind, name, fmt, path, args.size, args.export_python)
                print(f"{kind}:{name}.{fmt} ...", file=sys.stderr)
                rows.append(dict(measure(name, fmt, path), source=kind, versions=versions))
                print(f"  {rows[-1]}", file=sys.stderr)
        for name in args.models:
            net = torch_nets.NETWORKS[name]()
            if args.styles is not None:
                for style in args.styles:
                    fmt = "pt2" if style == "pt2" else "onnx"
                    path = os.path.join(d, f"{name}_{style}.{fmt}")
                    exporter_styles.export_style(net, style, path, args.size)
                    print(f"{name} ({style}).{fmt} ...", file=sys.stderr)
                    keep = {"affine_chains": False, "absorb_transposes": False} if args.keep_exporter_forms else {}
                    rows.append(dict(measure(name, fmt, path, **keep), source="zoo", style=style))
                    print(f"  {rows[-1]}", file=sys.stderr)
                continue
            for fmt in args.formats:
                path = os.path.join(d, f"{name}.{fmt}")
                (torch_nets.export_onnx if fmt == "onnx" else torch_nets.export_pt2)(net, path, args.size)
                print(f"{name}.{fmt} ...", file=sys.stderr)
                rows.append(dict(measure(name, fmt, path), source="zoo"))
                print(f"  {rows[-1]}", file=sys.stderr)
    command = " ".join(["python", "scripts/bench_frontends.py"] + [
        a if not a.startswith(os.path.expanduser("~")) else "VENV/bin/python" if a.endswith("python") else a
        for a in (argv if argv is not None else sys.argv[1:])])
    meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(), "machine": platform.machine(),
            "size": args.size, "command": command}
    print(markdown(rows, meta))
    if args.out:
        write_results(args.out, args.stem, {"meta": meta, "rows": rows}, markdown(rows, meta))
    return 0 if all(r["numerics_ok"] and r.get("onnxruntime_ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
