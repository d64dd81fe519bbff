# DEQUANTIZE of a float16 tensor that is computed, not a constant (MediaPipe's sparse BlazeFace: DENSIFY of
# sparse float16 weights -> DEQUANTIZE -> CONV_2D); here the float16 tensor is the model's input
import sys, numpy as np
from tvm_memsched.tflite.builder import ModelBuilder, tfl
B = tfl.BuiltinOperator
mb = ModelBuilder()
x = mb.tensor("x", [2, 3], np.float16)
y = mb.tensor("y", [2, 3], np.float32)
mb.op(B.DEQUANTIZE, [x], [y])
open(sys.argv[1], "wb").write(mb.finish([x], [y]))
