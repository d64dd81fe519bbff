"""Which quantization scheme a ``.tflite`` file uses, from its tensor types and operators.

TFLite's converter writes five kinds of files, and runtimes take different subsets
(TFLite Micro refuses hybrid models; float16 weights need DEQUANTIZE):

==========================  ==================================================================
``full integer (int8)``     int8 activations and weights (``uint8``: the legacy scheme)
``int16x8``                 int16 activations, int8 weights
``dynamic-range (hybrid)``  int8 weights read directly by float operators (activations float)
``float16 weights``         float16 constants widened by DEQUANTIZE, float32 activations
``int8 weights``            int8 constants widened by DEQUANTIZE, float32 activations
``float32``                 no quantized tensors
==========================  ==================================================================

Example
-------
>>> from tvm_memsched import zoo
>>> from tvm_memsched.tflite.builder import load
>>> quantization_scheme(load(zoo.tflite("resnet", "int8"))), quantization_scheme(load(zoo.tflite("resnet")))
('full integer (int8)', 'float32')
"""

from __future__ import annotations

from .builder import opcode_name, type_name
from .reader import is_constant

__all__ = ["quantization_scheme", "SCHEMES"]

SCHEMES = ("full integer (int8)", "full integer (uint8)", "int16x8", "dynamic-range (hybrid)", "float16 weights",
           "int8 weights", "float32")

_COMPUTE = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV", "EMBEDDING_LOOKUP",
            "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "SVDF", "LSTM", "RNN",
            "UNIDIRECTIONAL_SEQUENCE_RNN", "CONV_3D"}


def quantization_scheme(model) -> str:
    """One of :data:`SCHEMES` for a ``ModelT`` (:func:`~tvm_memsched.tflite.builder.load`); see the module
    docstring."""
    act, weights, dequantized, hybrid = set(), set(), set(), False
    for sg in model.subgraphs or []:
        tensors = sg.tensors or []
        const = [is_constant(model, t) for t in tensors]
        for t, c in zip(tensors, const):
            if not t.isVariable:        # an int8 LSTM's int16 cell state does not make the model int16x8
                (weights if c else act).add(type_name(t.type))
        for op in sg.operators or []:
            name = opcode_name(model.operatorCodes[op.opcodeIndex])
            ins = [int(i) for i in (op.inputs if op.inputs is not None else []) if int(i) >= 0]
            if name == "DEQUANTIZE":
                dequantized |= {type_name(tensors[i].type) for i in ins if const[i]}
            elif name in _COMPUTE:
                in_types = {type_name(tensors[i].type) for i in ins}
                if "FLOAT32" in {type_name(tensors[i].type) for i in ins if not const[i]} and \
                        in_types & {"INT8", "UINT8"} and any(const[i] for i in ins):
                    hybrid = True
    if "INT16" in act and "INT8" in weights:
        return "int16x8"
    if hybrid:
        return "dynamic-range (hybrid)"
    if "INT8" in act and weights & {"INT8", "INT32"}:
        return "full integer (int8)"
    if "UINT8" in act and "UINT8" in weights:
        return "full integer (uint8)"
    if "FLOAT16" in dequantized:
        return "float16 weights"
    if dequantized & {"INT8", "UINT8"}:
        return "int8 weights"
    return "float32"
