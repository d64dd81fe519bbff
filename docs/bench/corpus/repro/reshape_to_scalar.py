# RESHAPE to a scalar: the new-shape input is an empty int32 constant of shape [0] (BirdNET's tf.signal.frame:
# 'model/MEL_SPEC1/stft/frame/Reshape/shape_1'); its buffer holds no bytes
import sys, numpy as np
from tvm_memsched.tflite.builder import ModelBuilder, tfl
B, O = tfl.BuiltinOperator, tfl.BuiltinOptions
mb = ModelBuilder()
x = mb.tensor("x", [1], np.float32)
s = mb.tensor("shape", [0], np.int32, data=np.zeros(0, np.int32))
y = mb.tensor("y", [], np.float32)
o = tfl.ReshapeOptionsT()
o.newShape = []
mb.op(B.RESHAPE, [x, s], [y], O.ReshapeOptions, o)
open(sys.argv[1], "wb").write(mb.finish([x], [y]))
