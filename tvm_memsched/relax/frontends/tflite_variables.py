"""Resource variables and variable tensors of a TFLite model, imported as state carried across invocations.

:class:`VariableStateOps` is a mixin of
:class:`~.tflite_converter.OperatorConverter`: TVM imports only the
``CALL_ONCE`` initialisation of resource variables; here the first
``READ_VARIABLE`` of a variable in an invocation becomes a new Relax variable
(the state *before* the invocation, a parameter of ``main`` added by
:mod:`.tflite_state`), ``ASSIGN_VARIABLE`` makes its value the variable's
current value (which later reads return), and
:meth:`VariableStateOps.state_updates` lists each variable's state before and
after the invocation with its initial value. Variable tensors (an LSTM's
output and cell state) are carried the same way.

Example
-------
>>> sorted(m for m in vars(VariableStateOps) if m.startswith("convert_"))
['convert_assign_state', 'convert_read_state']
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

__all__ = ["VariableStateOps", "key_name", "tensor_name"]


def key_name(key) -> str:
    """The printable name of a resource key ``(container, shared_name)``.

    >>> key_name(("", "stream"))
    'stream'
    """
    container, shared = key
    return f"{container}/{shared}" if container else shared


def tensor_name(t) -> str:
    """The name of a TFLite tensor wrapper's tensor, as text."""
    n = t.tensor.Name()
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)


def _ident(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)


class VariableStateOps:
    """Converter methods for state carried from one invocation to the next (mixed into
    :class:`~.tflite_converter.OperatorConverter`, before TVM's converter)."""

    def convert_read_state(self, op):
        """READ_VARIABLE: the variable's current value; the first read of an invocation is the state before it."""
        if self.conversion_state["in_call_once_init"]:
            return self.convert_read_variable(op)
        (handle,), (out,) = self.get_input_tensors(op), self.get_output_tensors(op)
        key = self._get_resource_key_for_handle(handle, "READ_VARIABLE")
        st = self._state(key)
        if st["current"] is None:
            init = self.conversion_state["resource_values"].get(key)
            if init is None:
                raise tvm.error.OpNotImplemented(f"READ_VARIABLE of '{key_name(key)}' before any assignment and "
                                                 "without a CALL_ONCE initial value")
            shape = [int(d) for d in self.get_tensor_shape(out)]
            var = relax.Var(f"state_{_ident(key_name(key))}",
                            relax.TensorType(shape, self.get_tensor_type_str(out.tensor.Type())))
            st.update(param=var, current=var, init=init)
        return st["current"]

    def convert_assign_state(self, op):
        """ASSIGN_VARIABLE: in the initialisation subgraph TVM's (initial values); in subgraph 0 the value
        becomes the variable's current one."""
        if self.conversion_state["in_call_once_init"]:
            return self.convert_assign_variable(op)
        handle, value = self.get_input_tensors(op)
        key = self._get_resource_key_for_handle(handle, "ASSIGN_VARIABLE")
        st = self._state(key)
        st["current"], st["assigned"] = self.get_tensor_expr(value), True
        return None

    # ------------------------------------------------------------ variable tensors (LSTM states)
    def variable_state(self, tw, shape) -> relax.Expr:
        """The current value of the variable tensor ``tw`` (an LSTM's output or cell state, which the
        runtimes keep from one invocation to the next): on first use the state before the invocation,
        initialised from the file (zeros; the zero point of a quantized tensor, as TFLite resets it)."""
        if not tw.tensor.IsVariable():
            return self.get_tensor_expr(tw)
        key = ("", tensor_name(tw))
        st = self._state(key)
        if st["current"] is None:
            dtype = self.get_tensor_type_str(tw.tensor.Type())
            data = tw.buffer.DataAsNumpy() if tw.buffer is not None and tw.buffer.DataLength() else None
            if data is not None:
                init = np.frombuffer(data, dtype).reshape(shape)
            else:
                zp = int(tw.tensor.Quantization().ZeroPoint(0)) if tw.qnn_params is not None and \
                    tw.tensor.Quantization().ZeroPointLength() else 0
                init = np.full(shape, zp, dtype)
            var = relax.Var(f"state_{_ident(key[1])}", relax.TensorType(list(shape), dtype))
            st.update(param=var, current=var, init=relax.const(np.ascontiguousarray(init), dtype))
        return st["current"]

    def assign_variable_state(self, tw, value) -> None:
        """Make ``value`` the current value of the variable tensor ``tw``."""
        if tw.tensor.IsVariable():
            st = self._state(("", tensor_name(tw)))
            st["current"], st["assigned"] = value, True

    def _state(self, key) -> dict:
        states = self.conversion_state["tvm_memsched_states"]
        return states.setdefault(key, {"param": None, "current": None, "init": None, "assigned": False})

    def state_updates(self) -> list:
        """``[(name, state before: relax.Var, state after: Expr, initial value: Expr)]`` for every variable
        subgraph 0 reads before assigning (the others carry nothing from one invocation to the next), in
        the order of their first reads."""
        out = []
        for key, st in self.conversion_state["tvm_memsched_states"].items():
            if st["param"] is not None:
                out.append((key_name(key), st["param"], st["current"], st["init"]))
        return out
