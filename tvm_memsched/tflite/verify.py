"""Check rewritten ``.tflite`` files: LiteRT outputs and TFLite Micro arena sizes.

* :func:`litert_run` runs a model in LiteRT (``ai-edge-litert``) with the
  builtin kernels and **no default delegate**
  (``OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES``): the XNNPACK delegate
  that LiteRT applies by default replaces the graph and executes in its own
  order, which would hide the file order we want to test.
  :func:`compare_litert` runs two models on the same random inputs and checks
  that every output is **bit-identical** (compared as raw bytes); with
  ``invocations`` > 1 over a sequence of inputs on one interpreter each, so
  stateful models (resource variables) carry their state from one invocation
  to the next (:func:`litert_run_sequence`).
* :func:`tflm_arena` measures what TFLite Micro (the ``tflite-micro`` wheel's
  Python interpreter, GreedyMemoryPlanner, offline plans honoured) needs: the
  ``head`` (non-persistent section: the activation plan, including kernel
  scratch buffers) and ``tail`` (persistent structures) parsed from
  ``print_allocations()``, which writes to the C-level stderr (captured by
  redirecting file descriptor 2), and the smallest ``arena_size`` that
  ``AllocateTensors`` accepts, found by bisection. TFLM aborts with a
  segmentation fault for some too-small arenas instead of failing cleanly, so
  every TFLM call runs in a forked child process. :func:`tflm_run_sequence`
  and :func:`compare_tflm` run and compare models in TFLM the same way
  (offline plans are only honoured there, so this is what checks them).

Both runtimes are imported lazily; without them these functions raise
:class:`~tvm_memsched.core.errors.UnsupportedError` naming the missing package.

Example
-------
>>> from tvm_memsched import zoo
>>> buf = zoo.tflite("swiftnet_like", "int8")
>>> compare_litert(buf, buf).identical
True
>>> a = tflm_arena(buf)
>>> a.head, a.min_arena >= a.head + a.tail - 64
(147456, True)
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import re
import sys
import tempfile
from dataclasses import asdict, dataclass

import numpy as np

from ..core.errors import MemschedError, UnsupportedError

__all__ = ["litert_interpreter", "litert_run", "litert_run_sequence", "random_inputs", "random_input_sequence",
           "compare_litert", "compare_tflm", "LiteRTComparison", "TflmArena", "tflm_arena", "tflm_run",
           "tflm_run_sequence", "in_child", "capture_fd2", "TflmRefusal", "tflm_refusal"]


# -------------------------------------------------------------------- LiteRT
def litert_interpreter(buf: bytes, reference_kernels: bool = False):
    """A LiteRT interpreter for ``buf`` (builtin kernels, no default delegate), tensors allocated.

    ``reference_kernels`` selects TFLite's reference kernels (``BUILTIN_REF``),
    which TFLite Micro runs too: LiteRT's optimized int8 kernels round some
    results 1 LSB differently.
    """
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:  # pragma: no cover - depends on the environment
        raise UnsupportedError("LiteRT is not installed: pip install ai-edge-litert") from None
    kind = OpResolverType.BUILTIN_REF if reference_kernels else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    try:
        it = Interpreter(model_content=bytes(buf), experimental_op_resolver_type=kind)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        raise MemschedError(f"LiteRT cannot load the model: {' '.join(str(e).split())[:300]}") from None
    return it


def random_inputs(buf: bytes, seed: int = 0) -> dict:
    """Random values for every model input, keyed by tensor name.

    Floats: standard normal; integers: uniform over the type's range (int32 and
    wider: -100..100); booleans: coin flips.
    """
    return random_input_sequence(buf, 1, seed)[0]


def random_input_sequence(buf: bytes, count: int, seed: int = 0) -> list[dict]:
    """``count`` sets of :func:`random_inputs` (the first is ``random_inputs(buf, seed)``), for the successive
    invocations of a stateful model."""
    details = litert_interpreter(buf).get_input_details()
    out = []
    for k in range(count):
        rng = np.random.default_rng(seed + k)
        feeds = {}
        for d in details:
            shape, dt = tuple(int(s) for s in d["shape"]), np.dtype(d["dtype"])
            if dt.kind == "f":
                v = rng.standard_normal(shape).astype(dt)
            elif dt == np.bool_:
                v = rng.integers(0, 2, shape).astype(dt)
            elif dt.kind in "iu":
                info = np.iinfo(dt)
                lo, hi = (int(info.min), int(info.max)) if dt.itemsize <= 2 else (-100, 100)
                lo = max(lo, 0) if dt.kind == "u" else lo
                v = rng.integers(lo, hi, shape, endpoint=True).astype(dt)
            else:
                raise UnsupportedError(f"input '{d['name']}' has dtype {dt}; cannot make random values for it")
            feeds[d["name"]] = v
        out.append(feeds)
    return out


def litert_run(buf: bytes, inputs: dict) -> dict:
    """Run ``buf`` once in LiteRT (file order); ``inputs`` by tensor name -> outputs by tensor name."""
    return litert_run_sequence(buf, [inputs])[0]


def litert_run_sequence(buf: bytes, inputs_seq, reference_kernels: bool = False) -> list[dict]:
    """Invoke one LiteRT interpreter of ``buf`` on each input dict of ``inputs_seq`` in turn (a stateful model
    carries its state from one invocation to the next); the outputs of each invocation by tensor name.
    ``inputs_seq`` items may also be lists of arrays in the model's input order."""
    it = litert_interpreter(buf, reference_kernels)
    details = it.get_input_details()
    results = []
    for inputs in inputs_seq:
        if not isinstance(inputs, dict):
            inputs = dict(zip([d["name"] for d in details], inputs))
        missing = [d["name"] for d in details if d["name"] not in inputs]
        if missing:
            raise MemschedError(f"no value for model input(s) {missing}")
        for d in details:
            it.set_tensor(d["index"], np.asarray(inputs[d["name"]]))
        try:
            it.invoke()
        except RuntimeError as e:   # a kernel refusing at run time (LiteRT's int8 SVDF without ReLU)
            raise MemschedError(f"LiteRT cannot run the model: {' '.join(str(e).split())[:300]}") from None
        results.append({d["name"]: np.array(it.get_tensor(d["index"])) for d in it.get_output_details()})
    return results


@dataclass
class LiteRTComparison:
    """Result of running two models on the same inputs (in LiteRT, or in TFLM: :func:`compare_tflm`)."""

    identical: bool
    trials: int
    outputs: list
    max_abs_diff: float
    mismatches: list
    invocations: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def _diff(ra: dict, rb: dict, where: str, mism: list) -> float:
    """Append a message to ``mism`` for each output of ``ra`` that ``rb`` does not match bit for bit."""
    worst = 0.0
    for n, a in ra.items():
        b = rb.get(n)
        if b is None or a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
            mism.append(f"{where}: output '{n}' differs" if b is not None else f"{where}: no output '{n}'")
            if b is not None and a.shape == b.shape:
                worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
    extra = sorted(set(rb) - set(ra))
    if extra:
        mism.append(f"{where}: unexpected outputs {extra}")
    return worst


def _compare_runs(run_a, run_b, feeds_of, trials: int, invocations: int) -> LiteRTComparison:
    mism, worst, names = [], 0.0, []
    for k in range(trials):
        feeds = feeds_of(k)
        ra, rb = run_a(feeds), run_b(feeds)
        names = list(ra[0]) if ra else []
        for j, (a, b) in enumerate(zip(ra, rb)):
            where = f"trial {k}" + (f", invocation {j}" if invocations > 1 else "")
            worst = max(worst, _diff(a, b, where, mism))
    return LiteRTComparison(not mism, trials, names, worst, mism, invocations)


def compare_litert(buf_a: bytes, buf_b: bytes, *, trials: int = 2, seed: int = 0, run_b=None,
                   invocations: int = 1, reference_kernels: bool = False) -> LiteRTComparison:
    """Run both models on ``trials`` sets of random inputs and compare the outputs bit for bit.

    Outputs are matched by tensor name. ``run_b(inputs) -> outputs`` replaces
    running ``buf_b`` (e.g. to chain pipeline segments). With ``invocations``
    > 1 each trial invokes one interpreter per model that many times on
    successive random inputs and compares every invocation (state carried).
    ``reference_kernels``: TFLite's reference kernels on both sides (LiteRT's
    optimised float kernels block their sums by tensor shape, so the same
    arithmetic on a smaller tensor may round differently).
    """
    def seq_b(feeds):
        return [run_b(f) for f in feeds] if run_b is not None else \
            litert_run_sequence(buf_b, feeds, reference_kernels)

    return _compare_runs(lambda feeds: litert_run_sequence(buf_a, feeds, reference_kernels), seq_b,
                         lambda k: random_input_sequence(buf_a, invocations, seed + 1000 * k), trials, invocations)


# ---------------------------------------------------------------------- TFLM
def capture_fd2(fn):
    """Run ``fn()`` and return ``(result, text written to file descriptor 2 meanwhile)``.

    TFLM's C++ code logs to fd 2 directly, which ``contextlib.redirect_stderr``
    does not see.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            res = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return res, tmp.read().decode(errors="replace")


def in_child(fn):
    """Run ``fn()`` in a forked child; returns ``(ok, value_or_message)``.

    ``ok`` is False with a message if ``fn`` raised or the child died (e.g. a
    segmentation fault inside TFLM). The value must be picklable.
    """
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child: whatever happens, never return into the caller's code
        try:
            faulthandler.disable()     # a crash here is an expected outcome, not worth a traceback dump
            os.close(r)
            try:
                payload = pickle.dumps((True, fn()))
            except BaseException as e:  # noqa: BLE001 - report everything to the parent
                payload = pickle.dumps((False, f"{type(e).__name__}: {e}"))
            with os.fdopen(w, "wb") as f:
                f.write(payload)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return False, f"crashed with signal {os.WTERMSIG(status)}"
    if not data:
        return False, f"exited with status {os.WEXITSTATUS(status)}"
    return pickle.loads(data)


def _tflm_runtime():
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:  # pragma: no cover - depends on the environment
        raise UnsupportedError("TFLite Micro's Python interpreter is not installed: pip install tflite-micro") \
            from None
    return runtime


def _tflm_make(buf: bytes, arena_size: int):
    """(interpreter or None, C log) for ``arena_size`` bytes; call in a child process."""
    runtime = _tflm_runtime()

    def make():
        try:
            return runtime.Interpreter.from_bytes(bytes(buf), arena_size=int(arena_size))
        except RuntimeError:
            return None
    return capture_fd2(make)


def _tflm_allocations(buf: bytes, arena_size: int) -> dict:
    it, log = _tflm_make(buf, arena_size)
    if it is None:
        raise RuntimeError(" ".join(log.split())[:300] or "TFLM failed to allocate tensors")
    _, text = capture_fd2(it.print_allocations)
    d = {k: int(v) for k, v in re.findall(r"Arena allocation (\w+) (\d+) bytes", text)}
    if not {"head", "tail", "total"} <= set(d):
        raise RuntimeError(f"unexpected print_allocations() output: {text[:200]!r}")
    return d


def _tflm_ok(buf: bytes, arena_size: int) -> bool:
    ok, val = in_child(lambda: _tflm_make(buf, arena_size)[0] is not None)
    return bool(ok and val)


#: Fragments of TFLM's messages when ``AllocateTensors`` runs out of arena (anything else is not about size).
_OOM_MESSAGES = ("failed to allocate", "failed to resize", "too many buffers", "missing:", "arena size")


def _out_of_memory(message: str) -> bool:
    m = str(message).lower()
    return "signal" in m or any(k in m for k in _OOM_MESSAGES)


@dataclass
class TflmArena:
    """TFLM's memory for one model: ``head`` (tensors + scratch), ``tail`` (persistent), ``total``
    from ``print_allocations()`` at a generous arena, and ``min_arena``, the smallest
    ``arena_size`` that allocates (bisected; None if not measured)."""

    head: int
    tail: int
    total: int
    min_arena: int | None

    def to_dict(self) -> dict:
        return asdict(self)


class TflmRefusal(MemschedError):
    """TFLite Micro refuses the model whatever its arena: an operator it lacks, a type its kernel does not
    take (not a matter of size)."""


def tflm_refusal(buf: bytes) -> str | None:
    """Why TFLite Micro refuses ``buf`` whatever its arena (its message), or None if it allocates it (in a
    child process, with an arena grown until the model fits)."""
    try:
        tflm_arena(buf, bisect=False)
    except TflmRefusal as e:
        return str(e).split("): ", 1)[-1]
    return None


def tflm_arena(buf: bytes, *, bisect: bool = True, arena_size: int | None = None) -> TflmArena:
    """Measure TFLM's arena for ``buf`` (see the module docstring); every TFLM call runs in a child.

    ``arena_size`` is the generous size used for ``print_allocations()``
    (default: 4 x the file size + 1 MiB, doubled until the model allocates).
    """
    _tflm_runtime()
    size = int(arena_size or 4 * len(buf) + (1 << 20))
    while True:
        ok, val = in_child(lambda: _tflm_allocations(buf, size))
        if ok:
            break
        if not _out_of_memory(val) or size >= 1 << 30:
            raise TflmRefusal(f"TFLM cannot allocate the model (arena {size} bytes): {val}")
        size *= 2
    head, tail, total = val["head"], val["tail"], val["total"]
    if not bisect:
        return TflmArena(head, tail, total, None)
    # The minimum is usually exactly ``total``; check that with two probes, else bisect.
    hi = total
    step = 64
    while hi < size and not _tflm_ok(buf, hi):      # ``size`` itself is known to work
        hi = min(size, hi + step)
        step *= 4
    if hi == total and not _tflm_ok(buf, hi - 1):
        return TflmArena(head, tail, total, hi)
    lo = max(0, min(head, hi - 1))
    if _tflm_ok(buf, lo):
        lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _tflm_ok(buf, mid):
            hi = mid
        else:
            lo = mid
    return TflmArena(head, tail, total, hi)


def tflm_run(buf: bytes, inputs: dict, arena_size: int | None = None) -> list:
    """Run ``buf`` in TFLM (in a child process). ``inputs`` holds one array per model input, in the
    model's input order (a dict keyed by name, as from :func:`random_inputs`); returns the outputs in order."""
    return tflm_run_sequence(buf, [inputs], arena_size)[0]


def tflm_run_sequence(buf: bytes, inputs_seq, arena_size: int | None = None) -> list:
    """Invoke one TFLM interpreter of ``buf`` (in a child process) on each element of ``inputs_seq`` (like the
    ``inputs`` of :func:`tflm_run`) in turn, state carried; the outputs of every invocation, in order."""
    from .reader import load_model

    n_out = len(load_model(bytes(buf)).subgraphs[0].outputs)

    def run():
        size = arena_size or 4 * len(buf) + (1 << 20)
        while True:
            it, log = _tflm_make(buf, size)
            if it is not None:
                break
            message = " ".join(log.split())[:300]
            if arena_size or not _out_of_memory(message) or size >= 1 << 30:
                raise RuntimeError(message)
            size *= 2            # the default arena was too small for a model with large activations
        results = []
        for inputs in inputs_seq:
            for i, v in enumerate(inputs.values()):
                it.set_input(np.asarray(v), i)
            it.invoke()
            results.append([np.array(it.get_output(i)) for i in range(n_out)])
        return results
    ok, val = in_child(run)
    if not ok:
        raise MemschedError(f"TFLM run failed: {val}")
    return val


def compare_tflm(buf_a: bytes, buf_b: bytes, *, trials: int = 2, seed: int = 0, invocations: int = 1,
                 arena_size: int | None = None) -> LiteRTComparison:
    """:func:`compare_litert` with TFLite Micro running both models (offline plans honoured, state carried
    over ``invocations``); ``arena_size`` is the arena of ``buf_b``'s interpreter (default: generous)."""
    def outputs(buf, size):
        def run(feeds):
            return [{f"output{i}": o for i, o in enumerate(outs)} for outs in tflm_run_sequence(buf, feeds, size)]
        return run

    return _compare_runs(outputs(buf_a, None), outputs(buf_b, arena_size),
                         lambda k: random_input_sequence(buf_a, invocations, seed + 1000 * k), trials, invocations)
