import numpy as np, sys
from tvm_memsched.tflite.builder import ModelBuilder, tfl
B, O = tfl.BuiltinOperator, tfl.BuiltinOptions
mb = ModelBuilder()
x = mb.tensor("x", [2, 3], np.float32)
ax = mb.tensor("axis", [1], np.int32, data=np.array([1], np.int32))
y = mb.tensor("y", [2, 1, 3], np.float32)
mb.op(B.EXPAND_DIMS, [x, ax], [y], O.ExpandDimsOptions, tfl.ExpandDimsOptionsT())
open(sys.argv[1], "wb").write(mb.finish([x], [y]))
