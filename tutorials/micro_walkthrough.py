"""Tutorial: a neural network on a microcontroller, in one static arena (``tvm_memsched.micro``).

Run it with ``python tutorials/micro_walkthrough.py [OUT_DIR]`` (default: a
temporary directory). It needs the Debian packages ``gcc-arm-none-eabi``,
``libnewlib-arm-none-eabi`` and ``qemu-system-arm``. It

1. builds a small NAS-like cell: four parallel convolution branches joined by a
   concatenation, written level by level as NAS code emits its cells;
2. picks a board from the board table: the nRF52840 DK, 256 KB of SRAM;
3. exports the model as C with tvm_memsched's order and arena plan, and compares
   with TVM's default order and planner: ours fits the board, TVM's does not;
4. shows the generated interface (``model.h``) and the start of ``model_run``;
5. runs the C on the host (a fast check) and on QEMU's Cortex-M4F machine with
   the RAM cut to the nRF52840's 256 KB, and checks the outputs against TVM;
6. exports TVM's default plan the same way and shows that it does not link in
   256 KB;
7. exports an int8 ``.tflite`` file (the zoo's DARTS V2 CIFAR network, full
   integer): TFLite's integer kernels, inputs and outputs in the arena, RAM side
   by side with TFLite Micro's smallest arena for the same file, and a QEMU run
   checked bit for bit against TFLite Micro.
"""

import os
import sys
import tempfile

import numpy as np
from tvm import relax

from tvm_memsched import micro

out_root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="micro_walkthrough_")

# 1. A NAS-like cell: x -> 4 x (conv3x3 -> relu) -> 4 x conv1x1 -> concat -> conv1x1 -> maxpool -> relu.
#    All wide 3x3 outputs are emitted first (level by level), the order TVM keeps.
rng = np.random.default_rng(0)
C, H, BRANCHES = 8, 24, 4


def weight(*shape):
    return relax.const((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype("float32"))


bb = relax.BlockBuilder()
x = relax.Var("x", relax.TensorType([1, C, H, H], "float32"))
with bb.function("main", [x]):
    with bb.dataflow():
        wide = [bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, weight(2 * C, C, 3, 3), padding=(1, 1))))
                for _ in range(BRANCHES)]
        branches = [bb.emit(relax.op.nn.conv2d(h, weight(C, 2 * C, 1, 1))) for h in wide]
        cat = bb.emit(relax.op.concat(branches, axis=1))
        y = bb.emit(relax.op.nn.conv2d(cat, weight(C, BRANCHES * C, 1, 1)))
        y = bb.emit(relax.op.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2)))
        y = bb.emit_output(relax.op.nn.relu(y))
    bb.emit_func_output(y)
mod = bb.finalize()

# 2. The boards: QEMU machines (they run the firmware) and real boards (fit checks; those whose core
#    QEMU emulates run on that machine with their own RAM and flash sizes).
print(micro.boards_table())
board = micro.get_board("nrf52840dk")
print(f"\ntarget: {board.description}; runs in QEMU as {board.qemu_stand_in}\n")

# 3. Export: our pipeline (kernels scheduled without full-size temporaries, memory-aware order + one
#    arena holding every tensor and every kernel's workspace), TVM's C code generator for the kernels,
#    flash/stack measured with arm-none-eabi-gcc.
exp = micro.export(mod, board, os.path.join(out_root, "ours"), compare_default=True)
print(exp.summary())
assert exp.fits and not exp.default_fits
print("\nfiles:", ", ".join(sorted(os.path.basename(p) for p in exp.files.values())))

# 4. The C interface: the inputs and outputs live in the arena (write at model_input(i), call
#    model_invoke(), read at model_output(k)); model_run copies from and to the caller's buffers.
#    The kernel calls are a table in flash, each with the workspace region planned for it.
with open(exp.files["header"]) as f:
    lines = [line for line in f if line.startswith(("#define MODEL_", "int model_", "void* model_",
                                                    "const void* model_")) and "MODEL_H_" not in line]
print("\n" + "".join(lines))
with open(exp.files["source"]) as f:
    src = f.read()
start = src.index("static const model_call_t model_calls")
print("\n".join(src[start:].splitlines()[:4]) + "\n  ...\n")

# 5. Run: host build (fast), then the Cortex-M4F firmware in QEMU with the nRF52840's 256 KB of RAM.
host = micro.run_host(exp)
print(host.summary())
qemu = micro.run_qemu(exp)
print(qemu.summary())
assert host.ok and qemu.ok
print(f"outputs match TVM's (max abs error {qemu.max_abs_err:.2g})")

# 6. TVM's default plan, exported the same way (its storages back to back plus one workspace region):
#    it does not fit the board, and the firmware does not link in 256 KB.
try:
    micro.export(mod, board, os.path.join(out_root, "tvm_default"), planner="tvm")
except micro.DoesNotFitError as e:
    print(f"\nTVM default plan: {e}")
    try:
        micro.run_qemu(e.result)
    except micro.DoesNotFitError as link_error:
        print(f"QEMU firmware with TVM's plan: {link_error}")

# 7. An int8 .tflite file: TFLite's integer kernels (IntegerLowering: int8 weights, int32 accumulation,
#    TFLite's requantization), next to TFLite Micro's smallest arena for the same file, run in QEMU and
#    compared with TFLite Micro's outputs on the same input: bit-identical.
from tvm_memsched import zoo  # noqa: E402
from tvm_memsched.micro.sidebyside import check_against_tflite, side_by_side, tflm_reference  # noqa: E402
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes  # noqa: E402

buf = zoo.tflite("darts_v2_cifar_tiny", "int8")
q = micro.export(from_tflite_bytes(buf), board, os.path.join(out_root, "int8"))
print("\n" + q.summary())
run = micro.run_qemu(q)
tflm = tflm_reference(buf)
print(side_by_side(board.name, tflm, None, {"ram": q.ram_bytes, "flash": q.flash_bytes,
                                            "instructions": run.instructions}))
check = check_against_tflite(buf, micro.default_inputs(q), run.outputs)
print(f"QEMU vs TFLite Micro: {'bit-identical' if check['tflm']['identical'] else check['tflm']}")
assert run.ok and check["ok"] and q.ram_bytes < tflm["min_arena"]
print(f"\ndone; the C projects are in {out_root}")
