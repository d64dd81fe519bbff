"""Tutorial: a ``.tflite`` for TFLite Micro with less arena, and a Coral Edge TPU pipeline (``tvm_memsched.tflite``).

Run it with ``python tutorials/tflite_coral.py [OUT_DIR]`` (default: a temporary
directory). It needs the ``[tflite]`` extra (LiteRT, tflite-micro) and OR-Tools. It

1. reads an int8 DenseNet-like ``.tflite`` (concatenations keep many tensors
   alive) with the flatbuffer object API of the wheels, no TensorFlow;
2. reorders its operators and adds an offline memory plan, then measures the
   smallest arena TFLite Micro accepts for the original and the new file and
   checks that LiteRT gives bit-identical outputs;
3. splits HRNet-W18-small-v1 (int8, 149 operators, 4 MB of weights) over four
   pipelined Coral Edge TPUs: the exact segmentation (DP over cut positions, then
   CP-SAT over all orders) and the learned RESPECT-style segmenter, side by side;
4. writes the learned segmentation as four segment files plus a manifest and
   checks that the chained segments give the whole model's outputs.
"""

import os
import sys
import tempfile
import time

from tvm_memsched import tflite, zoo
from tvm_memsched.tflite.coral import coral_export, segment
from tvm_memsched.tflite.coral import segment_learned

out_root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="tflite_coral_")
os.makedirs(out_root, exist_ok=True)

# 1. An int8 model as a .tflite file (the zoo builds it; any .tflite path works the same way).
src = os.path.join(out_root, "densenet_like_int8.tflite")
with open(src, "wb") as f:
    f.write(zoo.tflite("densenet_like", "int8"))
tg = tflite.read_tflite(src)
print(f"{tg.graph.name}: {tg.graph.num_ops} operators, {tg.graph.num_tensors} activation tensors")

# 2. Reorder + offline plan; measure TFLite Micro's arena for both files and check LiteRT equality.
res = tflite.optimize_tflite(tg, offline_plan=True, measure=True, verify=True, time_limit=5)
dst = os.path.join(out_root, "densenet_like_int8_opt.tflite")
with open(dst, "wb") as f:
    f.write(res.output)
print(res.table())
arena_in, arena_out = res.measured["in"]["min_arena"], res.measured["out_plan"]["min_arena"]
print(f"TFLite Micro arena: {arena_in:,} -> {arena_out:,} bytes ({100 * (1 - arena_out / arena_in):.1f}% less)")
print("LiteRT outputs:", "bit-identical" if all(v["identical"] for v in res.litert.values()) else "DIFFERENT")
print(f"wrote {dst}\n")

# 3. Four Edge TPUs: exact vs learned segmentation of the same graph under the same cost model.
hr = zoo.graph("hrnet_w18_small_v1", "int8")
one = segment(hr, 1)
t = time.perf_counter()
exact = segment(hr, 4, free_order=True, time_limit=30)
t_exact = time.perf_counter() - t
t = time.perf_counter()
learned = segment_learned(hr, 4)
t_learned = time.perf_counter() - t
print(f"{hr.name}: one Edge TPU {one.bottleneck_ms:.3f} ms per inference "
      f"(parameters stream from the host: {one.figures[0].stream_ms:.3f} ms)")
for s, secs in ((exact, t_exact), (learned, t_learned)):
    stages = ", ".join(f"{f.ops} ops {f.time_ms:.3f} ms" for f in s.figures)
    proof = "proven optimal" if s.optimal else f"lower bound {s.lower_bound_ms:.3f} ms"
    print(f"  {s.method:8s} bottleneck {s.bottleneck_ms:.3f} ms ({one.bottleneck_ms / s.bottleneck_ms:.1f}x one TPU; "
          f"{proof}) in {secs:.2f} s: {stages}")
print(f"  learned / exact: {learned.bottleneck_ms / exact.bottleneck_ms:.3f}\n")

# 4. Segment files for the learned split (coral_export also schedules the model for memory first), and a
#    LiteRT check that the four segments chained by tensor name give the whole model's outputs.
out = os.path.join(out_root, "hrnet_coral")
man, seg = coral_export(tflite.read_tflite(zoo.tflite("hrnet_w18_small_v1", "int8"), name="hrnet"), 4, out,
                        segmenter="learned")
for s in man["segments"]:
    print(f"  {s['file']}: {s['ops']} ops, inputs {[t['name'] for t in s['inputs']]}")
print("chained segments vs whole model:", "bit-identical" if man["validation"]["identical"] else "DIFFERENT")
print("compile each for its Edge TPU with:", man["edgetpu_compiler"][0], "...")
