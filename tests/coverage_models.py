"""The operator-coverage models of ``tests/data/coverage`` (made by TensorFlow's converter,
``scripts/make_coverage_models.py``): listing them, their inputs, and one check of our build against the
runtimes the file was made for."""

import json
import os

import numpy as np

from tvm_memsched.micro.sidebyside import tflm_undefined

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "data", "coverage")


def manifest(folder: str = FOLDER) -> dict:
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f)


def entries(folder: str = FOLDER) -> list:
    return manifest(folder)["files"]


def read(entry, folder: str = FOLDER) -> bytes:
    with open(os.path.join(folder, entry["file"]), "rb") as f:
        return f.read()


def inputs(entry, buf: bytes, seed: int = 0, count: int = 1) -> list:
    """Input sets in the ranges the manifest gives (a logarithm's input stays positive), quantized as the
    file's int8 / int16 inputs are; ``count`` sets for successive invocations."""
    from tvm_memsched.tflite.builder import load

    m = load(buf)
    sg = m.subgraphs[0]
    out = []
    for k in range(count):
        rng = np.random.default_rng(seed + k)
        feeds = []
        for t_idx, spec in zip(sg.inputs, entry["inputs"] + [None] * len(sg.inputs)):
            t = sg.tensors[t_idx]
            shape = [int(d) for d in t.shape]
            lo, hi = spec["range"] if spec else (-1.0, 1.0)
            dtype = {0: np.float32, 2: np.int32, 9: np.int8, 7: np.int16, 6: np.bool_, 3: np.uint8}[t.type]
            if dtype is np.bool_:
                feeds.append(rng.integers(0, 2, shape).astype(bool))
            elif dtype is np.int32 and (t.quantization is None or not t.quantization.scale):
                feeds.append(rng.integers(int(lo), int(hi), shape).astype(np.int32))
            elif dtype is np.float32:
                feeds.append(rng.uniform(lo, hi, shape).astype(np.float32))
            else:
                q = t.quantization
                s, z = float(q.scale[0]), int(q.zeroPoint[0])
                info = np.iinfo(dtype)
                v = np.round(rng.uniform(lo, hi, shape) / s) + z
                feeds.append(np.clip(v, info.min, info.max).astype(dtype))
        out.append(feeds)
    return out


def references(buf: bytes, sequence) -> dict:
    """``{runtime: outputs per invocation or the error text}`` for TFLite Micro and LiteRT's reference
    kernels (one interpreter each, invoked in turn: a stateful model carries its state)."""
    from tvm_memsched.tflite.verify import litert_interpreter, litert_run_sequence, tflm_run_sequence

    out = {}
    try:
        names = [d["name"] for d in litert_interpreter(buf, True).get_input_details()]
        out["litert"] = [list(r.values()) for r in
                         litert_run_sequence(buf, [dict(zip(names, s)) for s in sequence], reference_kernels=True)]
    except Exception as e:  # noqa: BLE001 - the runtime's refusal is a fact
        out["litert"] = str(e)
    try:
        out["tflm"] = tflm_run_sequence(buf, [{str(i): v for i, v in enumerate(s)} for s in sequence])
    except Exception as e:  # noqa: BLE001
        out["tflm"] = str(e)
    return out


def ours(buf: bytes, sequence, target: str = "llvm") -> list:
    """Our build of ``buf`` (tvm_memsched's pipeline, integer kernels for quantized operators) on each input
    set in turn, the state carried."""
    import tvm

    from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
    from tvm_memsched.relax.frontends.tflite_state import run_sequence
    from tvm_memsched.relax.pipeline import build

    mod = from_tflite_bytes(buf)
    ex = build(mod, target)
    return [[np.asarray(o) for o in outs] for outs in run_sequence(ex, mod, sequence)]


def agree(got, ref, exact: bool) -> tuple[bool, float]:
    """(equal, max difference) of two output lists per invocation: bit for bit when ``exact`` (integer
    outputs), else within 1e-4 of the largest reference value (NaN equals NaN)."""
    worst, ok = 0.0, True
    for a_list, b_list in zip(got, ref):
        if len(a_list) != len(b_list):
            return False, float("inf")
        for a, b in zip(a_list, b_list):
            a, b = np.asarray(a), np.asarray(b)
            if a.size != b.size:
                return False, float("inf")
            b = b.reshape(a.shape)
            if exact or a.dtype.kind in "biu":
                same = a.astype(np.float64).tobytes() == b.astype(np.float64).tobytes()
                d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0))
                ok, worst = ok and same, max(worst, d)
            else:
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                both_nan = np.isnan(a64) & np.isnan(b64)
                d = np.where(both_nan | (a64 == b64), 0.0, np.abs(a64 - b64))
                d = np.where(np.isnan(d), np.inf, d)
                tol = 1e-4 * max(1.0, float(np.max(np.abs(np.nan_to_num(b64)), initial=0)))
                ok, worst = ok and bool(np.all(d <= tol)), max(worst, float(np.max(d, initial=0)))
    return ok, worst


#: operators whose models carry state from one invocation to the next (checked over several)
STATEFUL = ("UNIDIRECTIONAL_SEQUENCE_LSTM", "VAR_HANDLE", "SVDF")


def check(entry, folder: str = FOLDER) -> tuple:
    """``(verdict, detail)`` of one manifest entry: ``ok``, ``MISMATCH`` (the largest difference), ``FAIL``
    (our error) or ``n/a`` (no reference runtime runs the file). Integer kinds are compared bit for bit with
    TFLite Micro, or LiteRT's reference kernels where TFLite Micro refuses the file, for hybrid files
    (TFLite Micro loads some and computes NaN) and where TFLite Micro's outputs are undefined
    (:func:`~tvm_memsched.micro.sidebyside.tflm_undefined`); stateful models over three invocations."""
    buf = read(entry, folder)
    n = 3 if any(o in entry["operators"] for o in STATEFUL) else 1
    seq = inputs(entry, buf, 0, n)
    refs = references(buf, seq)
    runs = [k for k, v in refs.items() if not isinstance(v, str)]
    if "litert" in runs and (entry["kind"] in ("hybrid", "float16") or tflm_undefined(buf)):
        runs = ["litert"]
    if not runs:
        return "n/a", "; ".join(f"{k}: {v[:100]}" for k, v in refs.items())
    try:
        got = ours(buf, seq)
    except Exception as ex:  # noqa: BLE001 - reported, not raised
        return "FAIL", (str(ex).strip().splitlines() or [type(ex).__name__])[-1][:300]
    name = "tflm" if "tflm" in runs else "litert"
    ok, d = agree(got, refs[name], entry["kind"] in ("int8", "int16x8"))
    return ("ok" if ok else "MISMATCH"), f"vs {name} {d:.3g}"
