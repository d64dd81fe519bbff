"""Stateful TFLite models in Relax: the state as extra parameters and results of ``main``.

A streaming model keeps resource variables across invocations (``CALL_ONCE``
initialises them, every invocation reads and assigns them). TVM 0.27 imports
only the initialisation, as constants. :func:`import_stateful` imports one
invocation as a pure function instead::

    main(inputs..., state_0, ..., state_k) -> (outputs..., new_state_0, ..., new_state_k)

(a single result stays a tensor when the model has no state to carry). The
variables read before being assigned are the states (in the order of their
first reads); their ``CALL_ONCE`` initial values and where they are in the
signature are kept in the module attribute ``tvm_memsched_state``, which
:func:`states` reads back as :class:`StateVar`\\ s. Everything downstream sees
an ordinary function: the schedulers, TVM's pipeline, the numerical checks
(random states are as good inputs as any). The microcontroller export turns
the states into static persistent buffers initialised once, and
:func:`run_sequence` runs a sequence of invocations on the TVM VM, threading
the state through.

Example
-------
>>> from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
>>> from tvm_memsched.zoo.streaming import streaming_kws_tflite
>>> mod = from_tflite_bytes(streaming_kws_tflite())
>>> [(s.name, s.param, s.output, s.shape) for s in states(mod)][:2]
[('stream_input', 1, 1, (1, 2, 1, 16)), ('block0/stream', 2, 2, (1, 2, 1, 8))]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax

__all__ = ["StateVar", "STATE_ATTR", "import_stateful", "states", "run_sequence", "is_stateful_tflite"]

#: the IRModule attribute describing the state of ``main``
STATE_ATTR = "tvm_memsched_state"

#: operators of subgraph 0 that make a model stateful
_STATE_OPS = {"CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE"}


@dataclass(frozen=True)
class StateVar:
    """One state of ``main``: its parameter index, its index among the (flattened) results, and the
    initial value the model's ``CALL_ONCE`` gives it."""

    name: str
    param: int
    output: int
    shape: tuple
    dtype: str
    init: np.ndarray


def is_stateful_tflite(model, converter) -> bool:
    """True if subgraph 0 of the ``tflite.Model`` ``model`` uses resource variables or ``CALL_ONCE``, or an
    operator reads a variable tensor (an LSTM's states, which the runtimes keep between invocations)."""
    sg = model.Subgraphs(0)
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        if converter.get_op_code_str(op) in _STATE_OPS:
            return True
        if any(t >= 0 and sg.Tensors(t).IsVariable() for t in op.InputsAsNumpy()):
            return True
    return False


def import_stateful(model, converter_cls):
    """Import subgraph 0 of a stateful ``tflite.Model`` as a pure ``main`` (see the module docstring)."""
    from tvm.relax.frontend.tflite.tflite_frontend import ExprTable

    subgraph = model.Subgraphs(0)
    bb = relax.BlockBuilder()
    with bb.function("main"):
        with bb.dataflow():
            conv = converter_cls(model, subgraph, ExprTable(), bb)
            inputs, conv.exp_tab = conv._get_subgraph_params(subgraph)
            conv.check_unsupported_ops()
            conv.convert_op_to_relax()
            outputs = [conv.get_tensor_expr(t) for t in conv.get_tensors(subgraph.OutputsAsNumpy())]
            updates = conv.state_updates()
            results = outputs + [after for _, _, after, _ in updates]
            out = bb.emit_output(results[0] if len(results) == 1 else relax.Tuple(results))
        bb.emit_func_output(out, inputs + [before for _, before, _, _ in updates])
    mod = bb.get()
    params = [tvm.runtime.tensor(v) for _, v in conv.exp_tab.params.values()]
    mod["main"] = mod["main"].with_attrs({"num_input": len(inputs) + len(updates), "params": params})
    spec = []
    for k, (name, before, _, init) in enumerate(updates):
        if not isinstance(init, tvm.ir.Constant):
            raise tvm.error.OpNotImplemented(f"the initial value of resource variable '{name}' is computed, not "
                                             "a constant; not supported")
        ty = before.ty
        value = init.value.numpy().astype(str(ty.dtype)).reshape([int(d) for d in ty.shape.values])
        spec.append({"name": name, "param": len(inputs) + k, "output": len(outputs) + k,
                     "init": tvm.runtime.tensor(np.ascontiguousarray(value))})
    return mod.with_attr(STATE_ATTR, spec) if spec else mod


def states(mod) -> list[StateVar]:
    """The :class:`StateVar`\\ s of ``mod``'s ``main`` (empty for stateless modules)."""
    attrs = mod.attrs
    spec = attrs[STATE_ATTR] if attrs is not None and STATE_ATTR in attrs else []
    out = []
    for s in spec:
        init = s["init"].numpy()
        out.append(StateVar(str(s["name"]), int(s["param"]), int(s["output"]), tuple(init.shape), str(init.dtype),
                            init))
    return out


def run_sequence(ex, mod, inputs_seq, spec=None) -> list[list[np.ndarray]]:
    """Run a built ``main`` (``ex``, built from ``mod`` or a transform of it) on each input list of
    ``inputs_seq`` in turn, from the initial state, feeding each invocation's new state to the next; the
    outputs of every invocation (without the states). ``spec``: the states (default :func:`states` of
    ``mod``)."""
    from ..compare import run_vm

    spec = states(mod) if spec is None else spec
    state = [s.init for s in spec]
    first_state = spec[0].output if spec else None
    results = []
    for inputs in inputs_seq:
        outs = run_vm(ex, list(inputs) + state)
        if spec:
            state = [outs[s.output] for s in spec]
            outs = outs[:first_state]
        results.append(outs)
    return results
