"""The runtimes a user would deploy instead of TVM, timed on the same file and inputs: ONNX Runtime for an
``.onnx``, LiteRT for a ``.tflite`` (:func:`runtime_timings`).

Each runtime runs in a fresh Python process (``python -m tvm_memsched.app.yardsticks``), so its memory is its
own: the process's peak resident memory growth from before the session (ONNX Runtime's ``InferenceSession``,
LiteRT's ``Interpreter``) is created to the end of the timed runs, sampled every 10 ms. The runs are timed as
:func:`tvm_memsched.relax.compare.time_vm` times TVM's builds: one warm-up run, then the median of up to
``repeat`` runs within a time budget. Each runtime is timed with one thread and with all of the machine's
cores. ONNX Runtime: CPU execution provider, default graph optimizations. LiteRT: its default op resolver
(XNNPACK for the operators it takes), as an application loads a model.

:func:`spec_timings` does it for a model as ``tvm-memsched compare`` takes it: an ``.onnx`` in ONNX Runtime
and a ``.tflite`` in LiteRT on compare's inputs; a zoo network (``zoo:NAME[:int8|:float16]``) in LiteRT as the
zoo's converter writes it (a float network in NHWC, so on random inputs of the file's own shapes).

Example
-------
>>> [t.label for t in runtime_timings("model.txt", [])]
[]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

import numpy as np

from ..core.numerics import random_array

__all__ = ["RuntimeTiming", "runtime_timings", "spec_timings", "runtime_kind", "measure"]


@dataclass
class RuntimeTiming:
    """One runtime's median latency (seconds) on the inputs, threads used (0: all cores), and the peak resident
    memory its process grew by while creating the session and running; ``error`` when it could not run."""

    runtime: str
    threads: int
    seconds: float | None = None
    runs: int = 0
    rss_growth_bytes: int | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        return f"{self.runtime} ({'1 thread' if self.threads == 1 else 'all cores'})"

    def to_dict(self) -> dict:
        return asdict(self)


def runtime_kind(path: str) -> str | None:
    """The runtime that runs the model file ``path``: ``"onnxruntime"``, ``"litert"`` or None.

    >>> runtime_kind("a.onnx"), runtime_kind("b.TFLITE"), runtime_kind("c.pt2")
    ('onnxruntime', 'litert', None)
    """
    low = path.lower()
    return "onnxruntime" if low.endswith(".onnx") else "litert" if low.endswith(".tflite") else None


def runtime_timings(path: str, inputs, *, threads=(1, 0), repeat: int = 5, budget: float = 10.0,
                    frozen: dict | None = None, timeout: float = 600) -> list[RuntimeTiming]:
    """Time the model file ``path`` in the runtime it was made for (:func:`runtime_kind`; none: ``[]``) on
    ``inputs`` (arrays in the order of the file's inputs, those in ``frozen`` left out; None: seeded random
    values of the shapes and types the runtime reports), once per entry of ``threads``, each in its own
    process."""
    kind = runtime_kind(path)
    if kind is None:
        return []
    out = []
    with tempfile.TemporaryDirectory(prefix="tvm_memsched_yardstick_") as tmp:
        feed = os.path.join(tmp, "inputs.npz")
        np.savez(feed, *[np.ascontiguousarray(a) for a in (inputs or [])],
                 **{f"frozen:{k}": np.asarray(v) for k, v in (frozen or {}).items()})
        for n in threads:
            cmd = [sys.executable, "-m", "tvm_memsched.app.yardsticks", kind, os.path.abspath(path),
                   feed if inputs is not None else "-", str(n), str(repeat), str(budget)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
                result = json.loads(lines[-1]) if proc.returncode == 0 and lines else \
                    {"error": (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1][:300]}
            except subprocess.TimeoutExpired:
                result = {"error": f"no result within {timeout:.0f} s"}
            out.append(RuntimeTiming({"onnxruntime": "ONNX Runtime", "litert": "LiteRT"}[kind], n, **result))
    return out


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _session(kind: str, path: str, threads: int, frozen: dict):
    """``(run, [(shape, dtype)])``: a function running the model on a list of arrays (in the file's input order,
    the frozen ones left out) and those inputs' shapes and types (a symbolic dimension as 1)."""
    if kind == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        inputs = [i for i in session.get_inputs() if i.name not in frozen]
        names = [i.name for i in inputs]
        types = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(int32)": "int32",
                 "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(bool)": "bool",
                 "tensor(float16)": "float16", "tensor(double)": "float64"}
        specs = [([d if isinstance(d, int) else 1 for d in i.shape], types.get(i.type, "float32")) for i in inputs]
        return (lambda arrays: session.run(None, {**dict(zip(names, arrays)), **frozen})), specs
    from ai_edge_litert.interpreter import Interpreter

    with open(path, "rb") as f:
        buf = f.read()
    it = Interpreter(model_content=buf, num_threads=threads or (os.cpu_count() or 1))
    it.allocate_tensors()
    details = it.get_input_details()
    specs = [(list(d["shape"]), np.dtype(d["dtype"]).name) for d in details]

    def run(arrays):
        for d, a in zip(details, arrays):
            it.set_tensor(d["index"], np.asarray(a, dtype=d["dtype"]).reshape(d["shape"]))
        it.invoke()
        return [it.get_tensor(d["index"]) for d in it.get_output_details()]

    return run, specs


def measure(kind: str, path: str, feed: str, threads: int, repeat: int = 5, budget: float = 10.0) -> dict:
    """In this process: create ``kind``'s session for ``path``, run it on the arrays of the ``.npz`` ``feed``
    (:func:`runtime_timings` writes it) and return ``{seconds, runs, rss_growth_bytes}``."""
    import threading
    import time

    arrays, frozen = None, {}
    if feed != "-":
        data = np.load(feed)
        arrays = [data[k] for k in sorted((k for k in data.files if not k.startswith("frozen:")),
                                          key=lambda k: int(k.split("_")[1]))]
        frozen = {k[len("frozen:"):]: data[k] for k in data.files if k.startswith("frozen:")}
    start = peak = _rss()
    stop = threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss())
            stop.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run, specs = _session(kind, path, threads, frozen)
        if arrays is None:
            arrays = [random_array(np.random.default_rng(k), shape, dtype) for k, (shape, dtype) in enumerate(specs)]
        t0 = time.perf_counter()
        run(arrays)
        warm = time.perf_counter() - t0
        times = [warm]
        if warm < budget:
            times = []
            for _ in range(max(1, min(repeat, int(budget / max(warm, 1e-9))))):
                t0 = time.perf_counter()
                run(arrays)
                times.append(time.perf_counter() - t0)
    finally:
        stop.set()
        sampler.join()
    peak = max(peak, _rss())
    return {"seconds": float(np.median(times)), "runs": len(times), "rss_growth_bytes": peak - start}


def spec_timings(spec: str, mod, input_shapes=None, **kwargs) -> list[RuntimeTiming]:
    """:func:`runtime_timings` for a model as ``tvm-memsched compare`` takes it (see the module docstring),
    ``mod`` its import; ``[]`` for a .pt2 file and a stateful model (the runtime keeps the state itself).

    >>> spec_timings("model.pt2", None)
    []
    """
    from ..relax.frontends.tflite_state import states
    from .models import as_input_shapes, parse_zoo_spec, tflite_bytes

    low, z = spec.lower(), parse_zoo_spec(spec)
    if not (low.endswith((".onnx", ".tflite")) or z is not None) or states(mod):
        return []
    from ..relax.compare import random_inputs

    if low.endswith(".onnx"):
        frozen = {}
        shapes = as_input_shapes(input_shapes)
        if shapes.frozen:
            import onnx

            from ..relax.frontends.onnx_frontend import frozen_inputs

            frozen = frozen_inputs(onnx.load(spec, load_external_data=False), shapes.frozen, shapes, spec)
        return runtime_timings(spec, random_inputs(mod["main"], 0), frozen=frozen, **kwargs)
    if z is not None:
        from .. import zoo

        buf, inputs = zoo.tflite(*z), (None if z[1] == "float32" else random_inputs(mod["main"], 0))
    else:
        buf, inputs = tflite_bytes(spec, input_shapes), random_inputs(mod["main"], 0)
    with tempfile.TemporaryDirectory(prefix="tvm_memsched_compare_") as tmp:
        path = os.path.join(tmp, "model.tflite")
        with open(path, "wb") as f:
            f.write(buf)
        return runtime_timings(path, inputs, **kwargs)


if __name__ == "__main__":      # the worker: kind path feed threads repeat budget -> one JSON line
    try:
        print(json.dumps(measure(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                                 float(sys.argv[6]))))
    except Exception as e:  # noqa: BLE001 - the runtime refuses the file: reported, not raised
        print(json.dumps({"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}))
