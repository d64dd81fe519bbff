# a .tflite whose input has shape_signature [-1, -1] (openWakeWord's melspectrogram.tflite; LiteRT users call
# resize_tensor_input, the package resizes it to [1, 1760]); --input-shape is refused for .tflite
import sys, numpy as np
from tvm_memsched.tflite.builder import ModelBuilder, tfl
B = tfl.BuiltinOperator
mb = ModelBuilder()
x = mb.tensor("x", [1, 1], np.float32)
y = mb.tensor("y", [1, 1], np.float32)
for i in (x, y):
    mb.tensors[i].shapeSignature = [-1, -1]
mb.op(B.RELU, [x], [y])
open(sys.argv[1], "wb").write(mb.finish([x], [y]))
