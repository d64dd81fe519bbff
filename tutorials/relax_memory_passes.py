"""Tutorial: memory-aware reordering and arena planning in a TVM Relax pipeline.

Run it with ``python tutorials/relax_memory_passes.py``. It

1. builds a small branching network (four parallel convolution branches joined
   by a concatenation, the pattern where the operator order decides the peak),
   written level by level as NAS code often emits its cells;
2. puts ``MemoryAwareReorder`` and ``ArenaPlanMemory`` into a
   ``tvm.transform.Sequential`` made of TVM's own CPU passes;
3. compiles, runs the model on the Relax VM and checks the output against TVM's
   default build;
4. prints the memory comparison with TVM's default pipeline.
"""

import numpy as np
import tvm
from tvm import relax

from tvm_memsched import PipelineOptions, compare
from tvm_memsched.transform import ArenaPlanMemory, MemoryAwareReorder

# 1. A branching network: x -> 4 x (conv3x3 -> relu -> conv1x1) -> concat -> conv1x1,
#    emitted level by level: all the wide 3x3 outputs first, then all the 1x1 convs.
rng = np.random.default_rng(0)
C, H = 16, 32


def weight(*shape):
    return relax.const((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype("float32"))


bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType([1, C, H, H], "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        wide = [bb.emit(relax.op.nn.conv2d(x, weight(2 * C, C, 3, 3), padding=(1, 1))) for _ in range(4)]
        wide = [bb.emit(relax.op.nn.relu(h)) for h in wide]
        branches = [bb.emit(relax.op.nn.conv2d(h, weight(C, 2 * C, 1, 1))) for h in wide]
        cat = bb.emit(relax.op.concat(branches, axis=1))
        y = bb.emit_output(relax.op.nn.conv2d(cat, weight(C, 4 * C, 1, 1)))
    bb.emit_func_output(y)
mod = bb.finalize()

# 2. TVM's CPU pipeline with our passes: the reorder after FuseTIR (FuseOps re-orders
#    bindings, so a reorder that must reach the planner runs after it) and the arena
#    planner in place of StaticPlanBlockMemory.
target = tvm.target.Target({"kind": "llvm"})
T = relax.transform
reorder = MemoryAwareReorder(method="auto", time_limit=5)
arena = ArenaPlanMemory(alignment=64)
passes = tvm.transform.Sequential([
    relax.backend.DispatchSampling(), relax.backend.DispatchSortScan(),
    T.LegalizeOps(), T.AnnotateTIROpPattern(), T.FoldConstant(), T.FuseOps(), T.FuseTIR(),
    T.RewriteDataflowReshape(),
    reorder,                                   # <- tvm_memsched
    T.ToNonDataflow(), T.RemovePurityChecking(), T.CallTIRRewrite(),
    arena,                                     # <- tvm_memsched, replaces StaticPlanBlockMemory
    T.LowerAllocTensor(), T.KillAfterLastUse(), T.LowerRuntimeBuiltin(), T.ComputePrimValue(),
    T.VMShapeLower(), T.AttachGlobalSymbol(),
])

# 3. Build, run, check against TVM's default build
with target:
    ex = tvm.compile(mod, target, relax_pipeline=passes)
data = rng.standard_normal((1, C, H, H)).astype("float32")
ours = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
default_ex = tvm.compile(mod, target, relax_pipeline=relax.get_default_pipeline(target))
ref = relax.VirtualMachine(default_ex, tvm.cpu())["main"](tvm.runtime.tensor(data)).numpy()
np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
print(f"outputs match TVM's default build (max abs diff {np.abs(ours - ref).max():.2g})")

for rep in reorder.report:
    print(f"reorder {rep.function} block {rep.block}: {rep.ops} bindings, peak {rep.peak_before} -> "
          f"{rep.peak_after} bytes ({rep.status}, {'proven optimal' if rep.optimal else 'not proven'})")
for plan in arena.report:
    print(f"arena {plan.function}: {plan.total_bytes} bytes for {plan.buffers} tensors "
          f"(live-peak bound {sum(plan.lower_bound_bytes.values())}, {plan.method})")

# 4. The same comparison in one call (tvm_memsched.pipeline / tvm_memsched.build do steps 2-3). Every option
#    of our pipeline is a field of PipelineOptions (the same names as the command's flags: time_limit is
#    --time-limit); pipeline(target, opts), build(mod, target, opts) and micro.export(..., opts) take it too.
opts = PipelineOptions(method="auto", time_limit=5)
print()
print(compare(mod, target, opts, name="branchy").summary())
