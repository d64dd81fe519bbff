"""Microcontroller export (tvm_memsched.micro): C generation, host and QEMU Cortex-M runs, bad input."""

import dataclasses
import filecmp
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from tvm import relax

from tvm_memsched import micro
from tvm_memsched.app.cli import main as cli_main
from tvm_memsched.core.errors import MemschedError, UnsupportedError
from tvm_memsched.micro.kernels import workspace_need, workspace_requests
from tvm_memsched.micro.toolchain import ToolchainError
from tvm_memsched.relax.testing import branchy_module, random_module, weight

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ models
def nas_cell(channels=8, size=24, branches=4, seed=0):
    """Parallel 3x3 branches emitted level by level, concat, 1x1, pool (TVM's order is wasteful)."""
    rng = np.random.default_rng(seed)
    c = channels
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, c, size, size], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            wide = [bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, weight(rng, 2 * c, c, 3, 3), padding=(1, 1))))
                    for _ in range(branches)]
            outs = [bb.emit(relax.op.nn.conv2d(h, weight(rng, c, 2 * c, 1, 1))) for h in wide]
            cat = bb.emit(relax.op.concat(outs, axis=1))
            y = bb.emit(relax.op.nn.conv2d(cat, weight(rng, c, branches * c, 1, 1)))
            y = bb.emit(relax.op.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2)))
            y = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(y)
    return bb.finalize()


def views_and_aliases():
    """Reshape views, an output returned twice and an input returned as an output."""
    rng = np.random.default_rng(1)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 4, 8, 8], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            flat = bb.emit(relax.op.reshape(x, (1, 256)))
            a = bb.emit(relax.op.nn.relu(x))
            b = bb.emit(relax.op.nn.conv2d(a, weight(rng, 4, 4, 3, 3), padding=(1, 1)))
            c = bb.emit(relax.op.add(relax.op.reshape(b, (1, 256)), flat))
            f = bb.emit(relax.op.reshape(c, (4, 64)))
            out = bb.emit_output(relax.Tuple([f, f, x, relax.op.sigmoid(flat)]))
        bb.emit_func_output(out)
    return bb.finalize()


def mixed_dtypes():
    """int8 input, int32 arithmetic, float32, float64 and bool outputs (and fabs, which needs a C lowering)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2, 32], "int8"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.multiply(relax.op.astype(x, "int32"), relax.const(np.int32(3))))
            y = bb.emit(relax.op.add(y, relax.const(np.arange(32, dtype="int32"))))
            f = bb.emit(relax.op.multiply(relax.op.astype(y, "float32"), relax.const(np.float32(0.5))))
            m = bb.emit(relax.op.greater(y, relax.const(np.int32(0))))
            e = relax.op.exp(relax.op.negative(relax.op.abs(f)))
            out = bb.emit_output(relax.Tuple([y, e, m, relax.op.sqrt(relax.op.astype(e, "float64"))]))
        bb.emit_func_output(out)
    return bb.finalize()


def no_kernels():
    """main returns its input and a constant: no kernel, no arena, two copies."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([2, 3], "float32"))
    with bb.function("main", [x]):
        bb.emit_func_output(relax.Tuple([x, relax.const(np.arange(4, dtype="float32").reshape(2, 2))]))
    return bb.finalize()


def params_as_inputs():
    mod, weights = random_module(seed=5, n_ops=10, params_as_inputs=True)
    return mod, weights


# ----------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def irregular(tmp_path_factory):
    """A random irregular network exported for the Cortex-M4F QEMU machine, with TVM's plan for comparison."""
    return micro.export(random_module(seed=3, n_ops=14), "mps2-an386", str(tmp_path_factory.mktemp("irregular")),
                        compare_default=True)


# ------------------------------------------------------------------- boards
def test_boards():
    an386 = micro.get_board("mps2-an386")
    assert an386.core == "Cortex-M4F" and an386.qemu_machine == "mps2-an386" and an386.sram_bytes == 4 << 20
    assert micro.get_board("mps2-an385").fpu is None and "-mfloat-abi=soft" in micro.get_board("mps2-an385").cflags()
    assert micro.get_board("mps2-an500").cpu == "cortex-m7"
    f746 = micro.get_board("nucleo_f746zg")
    assert f746.sram_bytes == 320 * 1024 and f746.qemu_machine is None and f746.emulator == "mps2-an500"
    assert micro.get_board("sparkfun_edge").sram_bytes == 384 * 1024
    assert micro.get_board("nrf52840dk").sram_bytes == 256 * 1024
    assert micro.get_board("rpi_pico").runnable and micro.get_board("rpi_pico").emulator == "mps2-an385"
    an547, an505 = micro.get_board("mps3-an547"), micro.get_board("mps2-an505")
    assert an547.core == "Cortex-M55" and an547.mve and an547.dsp and an547.machine.vector_origin == 0
    assert an547.machine.instructions_per_tick == (125, 4) and an505.machine.instructions_per_tick == (50, 1)
    assert an505.core == "Cortex-M33" and an505.dsp and not an505.mve and an505.machine.code_origin == 0x10000000
    m0 = micro.get_board("mps2-an385-m0plus")
    assert m0.cpu == "cortex-m0plus" and not m0.dsp and m0.fpu is None and m0.emulator == "mps2-an385"
    assert micro.get_board("nrf5340dk").emulator == "mps2-an505" and micro.get_board("alif_e7_hp").mve
    assert micro.get_board("mps2_an386") is an386  # spelling variants
    table = micro.boards_table()
    assert all(name in table for name in micro.board_names())


def test_unknown_board_lists_known_ones(tmp_path):
    with pytest.raises(UnsupportedError, match="known boards: mps2-an385, mps2-an386, mps2-an500, .*sparkfun_edge"):
        micro.get_board("arduino_uno")
    with pytest.raises(UnsupportedError, match="unknown board 'nope'"):
        micro.export(branchy_module(branches=2), "nope", str(tmp_path))


# --------------------------------------------------------- kernel workspace
def test_workspace_requests_are_replayed_lifo():
    src = ("TVM_DLL int32_t __tvm_ffi_m_a(void* self_handle, void* args, int32_t num_args, void* result) {\n"
           "  p = ((float*)TVMBackendAllocWorkspace(1, dev_id, (uint64_t)1004ULL, 2, 32));\n"
           "  if (TVMBackendFreeWorkspace(1, dev_id, p) != 0) { return -1; }\n"
           "  q = ((float*)TVMBackendAllocWorkspace(1, dev_id, (uint64_t)2000ULL, 2, 32));\n"
           "  r = ((float*)TVMBackendAllocWorkspace(1, dev_id, (uint64_t)12ULL, 2, 32));\n"
           "  TVMBackendFreeWorkspace(1, dev_id, r); TVMBackendFreeWorkspace(1, dev_id, q);\n  return 0;\n}\n")
    ev = workspace_requests(src)["m_a"]
    assert workspace_need(ev, align=8) == 2012 and workspace_need(ev, align=64) == 2060
    with pytest.raises(UnsupportedError, match="non-constant size"):
        workspace_requests(src.replace("(uint64_t)12ULL", "(uint64_t)n"))


# --------------------------------------------------------------- host mode
@pytest.mark.parametrize("make", [views_and_aliases, mixed_dtypes, no_kernels, lambda: branchy_module(branches=3),
                                  lambda: random_module(seed=11, n_ops=16), lambda: random_module(seed=7, n_ops=9)],
                         ids=["views", "dtypes", "no-kernels", "branchy", "random11", "random7"])
def test_host_run_matches_tvm(make, tmp_path):
    exp = micro.export(make(), "mps2-an386", str(tmp_path), measure=False)
    r = micro.run_host(exp)
    assert r.ok, r.summary()
    assert r.warnings == ""  # -Wall -Wextra clean
    assert r.workspace_high_water <= exp.workspace_bytes
    assert len(r.outputs) == len(exp.program.outputs)


def test_host_run_of_a_scalar_input(tmp_path):
    """A rank-0 input (Silero VAD's sample rate) keeps its shape [] from the random inputs to the C program
    (was: made one-dimensional on the way, and refused)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([4], "float32"))
    k = relax.Var("k", relax.TensorType([], "float32"))
    with bb.function("main", [x, k]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.multiply(x, k))
        bb.emit_func_output(y)
    exp = micro.export(bb.get(), "mps2-an386", str(tmp_path), measure=False)
    r = micro.run_host(exp)
    assert r.ok, r.summary()


def test_host_run_of_a_clamp_to_infinity(tmp_path):
    """A float clamp with an open end (a fused activation's range up to infinity, openWakeWord's mel
    spectrogram): TVM's C output prints it ``inff``, which is no C; the export compiles it as ``INFINITY``."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([8], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.clip(relax.op.exp(x), 1e-10, float("inf")))
        bb.emit_func_output(y)
    exp = micro.export(bb.get(), "mps2-an386", str(tmp_path), measure=False)
    assert "inff" not in open(exp.files["kernels"]).read()
    r = micro.run_host(exp)
    assert r.ok, r.summary()


def test_float32_constants_reach_the_c_kernels_exactly(tmp_path):
    """TVM prints a float32 immediate with 7 significant digits; 0.0176254269 (a quantization scale) needs 9
    to come back as the same float32. The export writes it exactly: the host program's quotients are numpy's,
    bit for bit, on inputs whose quotients lie a hair from .5 (where a 1-ulp error in the scale flips a round)."""
    scale = np.float32(0.01762542687356472)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([64], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.divide(x, relax.const(float(scale), "float32")))
        bb.emit_func_output(y)
    exp = micro.export(bb.get(), "mps2-an386", str(tmp_path), measure=False)
    text = open(exp.files["kernels"]).read()
    assert "1.762543e-02f" not in text and "1.76254269e-02f" in text
    xs = (np.arange(64, dtype=np.float32) + np.float32(0.5)) * scale
    r = micro.run_host(exp, [xs])
    assert r.outputs[0].tobytes() == (xs / scale).astype(np.float32).tobytes()


def test_stack_estimate_counts_each_kernel_once_on_its_deepest_chain():
    """``model_run -> model_invoke -> kernel``: a kernel ``model_invoke`` calls directly is on the chain once
    (it was added again on top); a call through the kernel table counts as the deepest kernel; a kernel the
    graph never shows being called is still counted."""
    from types import SimpleNamespace

    from tvm_memsched.micro.firmware import LEAF_STACK_ALLOWANCE as LEAF, stack_estimate

    calls = [SimpleNamespace(kernel=0), SimpleNamespace(kernel=1)]
    exp = SimpleNamespace(name="model", program=SimpleNamespace(
        calls=calls, kernels=SimpleNamespace(symbols=["model_a", "model_b"])))
    frames = {"model_run": (16, "static"), "model_invoke": (24, "static"), "__tvm_ffi_model_a": (48, "static"),
              "__tvm_ffi_model_b": (200, "static")}
    direct = {"model_run": {"model_invoke"}, "model_invoke": {"__tvm_ffi_model_a", "__tvm_ffi_model_b"},
              "__tvm_ffi_model_a": {"floorf"}}
    assert stack_estimate(exp, {}, (frames, direct)) == 16 + 24 + 200
    table = {"model_run": {"model_invoke"}, "model_invoke": {"__indirect_call"}, "__tvm_ffi_model_a": {"floorf"}}
    assert stack_estimate(exp, {}, (frames, table)) == 16 + 24 + max(48 + LEAF, 200)
    unseen = {"model_run": {"model_invoke"}, "__tvm_ffi_model_a": {"floorf"}}
    assert stack_estimate(exp, {}, (frames, unseen)) == 16 + 24 + max(48 + LEAF, 200)


def test_host_run_with_weights_as_inputs(tmp_path):
    mod, weights = params_as_inputs()
    exp = micro.export(mod, "mps2-an386", str(tmp_path), measure=False)
    shape = [int(v) for v in mod["main"].params[0].ty.shape.values]
    inputs = [np.random.default_rng(2).standard_normal(shape).astype("float32")] + list(weights)
    r = micro.run_host(exp, inputs)
    assert r.ok, r.summary()
    assert "MODEL_NUM_INPUTS %d" % len(inputs) in open(exp.files["header"]).read()


def test_generated_c_layout(irregular):
    exp = irregular
    src = open(exp.files["source"]).read()
    hdr = open(exp.files["header"]).read()
    assert "int model_run(const void* const* inputs, void* const* outputs);" in hdr
    assert f"#define MODEL_ARENA_BYTES {exp.arena_bytes}u" in hdr
    assert re.search(r"static uint8_t model_arena\[MODEL_ARENA_BYTES", src)
    assert "malloc" not in src and "malloc" not in open(exp.files["kernels"]).read()
    # kernels are called in the scheduled order (a table in flash), each with its planned workspace region
    calls = re.findall(r"\{__tvm_ffi_model_(\w+), \w+, \d+u, (\d+)u, (\d+)u\}, /\* call \d+", src)
    calls = [(off, size, k) for k, off, size in calls]
    assert [k for _, _, k in calls] == [c.kernel for c in exp.program.calls]
    assert all(int(off) + int(size) <= exp.arena_bytes for off, size, _ in calls)
    # every arena tensor lies inside the arena; constants are const arrays in flash
    for off in re.findall(r"\.data = model_arena \+ (\d+)", src):
        assert int(off) < exp.arena_bytes
    params = open(exp.files["params"]).read()
    assert params.count("const float model_param_") == len(exp.program.params)
    assert os.path.exists(os.path.join(exp.out_dir, "include", "tvm", "ffi", "c_api.h"))
    assert exp.ours.arena_bytes == exp.arena_bytes and exp.default.arena_bytes > exp.arena_bytes


def test_export_is_deterministic(tmp_path):
    mod = random_module(seed=3, n_ops=14)
    a = micro.export(mod, "mps2-an386", str(tmp_path / "a"), measure=False)
    b = micro.export(mod, "mps2-an386", str(tmp_path / "b"), measure=False)
    for kind in ("header", "source", "params", "kernels"):
        assert filecmp.cmp(a.files[kind], b.files[kind], shallow=False), kind


def test_workspace_overflow_fails_cleanly(tmp_path):
    """The runtime refuses a workspace request that does not fit the planned region (no silent overwrite)."""
    irregular = micro.export(random_module(seed=3, n_ops=14), "mps2-an386", str(tmp_path / "ws"), measure=False,
                             shrink_workspace=False)  # TVM's kernels: they ask for workspace
    out = tmp_path / "tampered"
    shutil.copytree(irregular.out_dir, out)
    src = (out / "model.c").read_text()
    # a call-table entry {kernel, args, n, workspace offset, workspace bytes} that asks for workspace
    m = re.search(r"\{__tvm_ffi_\w+, \w+, \d+u, (\d+)u, ([1-9]\d*)u\}, /\* call (\d+):", src)
    (out / "model.c").write_text(src.replace(m.group(0), m.group(0).replace(f", {m.group(2)}u}}", ", 8u}", 1), 1))
    call = int(m.group(3))
    exp = dataclasses.replace(irregular, out_dir=str(out),
                              files={k: str(out / os.path.basename(v)) for k, v in irregular.files.items()})
    with pytest.raises(MemschedError, match=rf"failed in kernel call {call}: workspace request of \d+ bytes "
                                            r"does not fit: 0 of the 8 bytes planned"):
        micro.run_host(exp, check=False)


# ------------------------------------------------------------------ QEMU runs
@pytest.mark.slow
def test_qemu_cortex_m4f_irregular(irregular):
    exp = irregular
    assert exp.measured and exp.flash_bytes > exp.params_bytes and exp.stack_bytes > 0
    r = micro.run_qemu(exp)
    assert r.ok and r.mode == "qemu mps2-an386", r.summary()
    assert r.warnings == ""
    assert r.instructions > 100_000
    assert 0 < r.stack_used <= exp.stack_bytes <= r.stack_reserved
    assert r.workspace_high_water <= exp.workspace_bytes


@pytest.mark.slow
@pytest.mark.parametrize("board", ["mps2-an385", "mps2-an500"])
def test_qemu_cortex_m3_and_m7(board, tmp_path):
    exp = micro.export(random_module(seed=4, n_ops=8), board, str(tmp_path))
    r = micro.run_qemu(exp)
    assert r.ok and r.mode == f"qemu {board}", r.summary()
    assert r.instructions > 0


@pytest.mark.slow
def test_zoo_network_default_does_not_fit_ours_runs(tmp_path):
    """DARTS V2 (CIFAR, tiny) on an STM32L4R5 (640 KB): TVM's plan needs too much RAM, ours fits and runs."""
    from tvm_memsched import zoo

    mod = zoo.load("darts_v2_cifar_tiny")
    exp = micro.export(mod, "nucleo_l4r5zi", str(tmp_path / "ours"), compare_default=True)
    board = exp.board
    assert exp.fits and exp.ram_bytes <= board.sram_bytes
    assert exp.default_fits is False
    assert exp.ram_bytes_with_arena(exp.default.arena_bytes) > board.sram_bytes
    assert "does not fit" in exp.summary() and "fits" in exp.summary()
    r = micro.run_qemu(exp)  # the Cortex-M4F machine with the RAM cut to 640 KB
    assert r.ok and r.mode == "qemu mps2-an386 as nucleo_l4r5zi", r.summary()
    # TVM's default plan exported the same way: refused with the numbers, and it does not link either
    with pytest.raises(micro.DoesNotFitError, match=r"needs [\d,]+ B of RAM \(arena [\d,]+ B .*has 655,360 B") as e:
        micro.export(mod, board, str(tmp_path / "tvm"), planner="tvm")
    tvm_exp = e.value.result
    assert tvm_exp.arena_bytes == exp.default.arena_bytes and os.path.exists(tvm_exp.files["source"])
    with pytest.raises(micro.DoesNotFitError, match=r"does not link for nucleo_l4r5zi.*region RAM overflowed"):
        micro.run_qemu(tvm_exp)


def test_tvm_default_plan_runs_where_it_fits(tmp_path):
    exp = micro.export(nas_cell(size=16), "mps2-an386", str(tmp_path), planner="tvm", measure=False)
    assert exp.planner == "tvm" and exp.workspace_bytes > 0
    assert micro.run_host(exp).ok


def test_shrink_workspace_shrinks_workspace(tmp_path):
    plain = micro.export(nas_cell(size=16), "mps2-an386", str(tmp_path / "a"), measure=False, shrink_workspace=False)
    inlined = micro.export(nas_cell(size=16), "mps2-an386", str(tmp_path / "b"), measure=False,
                           shrink_workspace=False, inline_padding=True)
    shrunk = micro.export(nas_cell(size=16), "mps2-an386", str(tmp_path / "c"), measure=False, compare_default=True)
    assert inlined.workspace_bytes < plain.workspace_bytes and inlined.arena_bytes < plain.arena_bytes
    assert shrunk.workspace_bytes < inlined.workspace_bytes and shrunk.arena_bytes <= inlined.arena_bytes
    assert shrunk.tvm_kernels_workspace_bytes == plain.workspace_bytes and shrunk.shrunk_kernels
    assert "(ShrinkWorkspace); largest workspace" in shrunk.summary()
    assert micro.run_host(inlined).ok and micro.run_host(shrunk).ok


# ----------------------------------------------------------------- bad input
def test_too_large_for_board(tmp_path):
    with pytest.raises(micro.DoesNotFitError) as e:
        micro.export(nas_cell(size=32), "nucleo_f401re", str(tmp_path), measure=False)
    msg = str(e.value)
    assert re.search(r"needs [\d,]+ B of RAM \(arena [\d,]+ B \+ runtime \d+ B \+ stack \d+ B \+ I/O buffers "
                     r"[\d,]+ B\) but nucleo_f401re has 98,304 B of SRAM \(over by [\d,]+ B\)", msg), msg
    assert e.value.result.arena_bytes > 98_304


def test_unsupported_dtype_shape_and_op(tmp_path):
    def model(dtype="float32", shape=(1, 4, 8, 8), packed=False):
        bb = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(list(shape), dtype))
        with bb.function("main", [x]):
            with bb.dataflow():
                a = bb.emit(relax.op.nn.relu(x))
                if packed:
                    a = bb.emit(relax.call_dps_packed("my_dsp_kernel", [a], relax.TensorType(list(shape), dtype)))
                o = bb.emit_output(relax.op.add(a, a))
            bb.emit_func_output(o)
        return bb.finalize()

    import tvm

    with pytest.raises(UnsupportedError, match="dtype float16; the C export supports float32"):
        micro.export(model("float16"), "mps2-an386", str(tmp_path), measure=False)
    with pytest.raises(UnsupportedError, match="dynamic or unknown shape"):
        micro.export(model(shape=(1, tvm.tirx.Var("n", "int64"), 8, 8)), "mps2-an386", str(tmp_path), measure=False)
    with pytest.raises(UnsupportedError, match="packed function 'my_dsp_kernel'; the C export only calls TIR"):
        micro.export(model(packed=True), "mps2-an386", str(tmp_path), measure=False)


def test_missing_toolchain_names_debian_packages(tmp_path, monkeypatch):
    exp = micro.export(branchy_module(branches=2), "mps2-an386", str(tmp_path), measure=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(ToolchainError, match="arm-none-eabi-gcc' not found.*apt-get install gcc-arm-none-eabi "
                                             "libnewlib-arm-none-eabi"):
        micro.export(branchy_module(branches=2), "mps2-an386", str(tmp_path / "again"))
    with pytest.raises(ToolchainError, match="qemu-system-arm' not found.*apt-get install qemu-system-arm"):
        micro.run_qemu(exp)


def test_board_without_qemu(tmp_path):
    from tvm_memsched.micro.boards import Board

    riscv_like = Board("my_board", "a board no QEMU machine runs", "Cortex-M0+", "cortex-m0plus", None,
                       64 * 1024, 256 * 1024)
    exp = micro.export(branchy_module(branches=2), riscv_like, str(tmp_path))
    assert exp.measured and exp.fits  # builds and fits, but no QEMU machine runs it
    with pytest.raises(UnsupportedError, match="my_board .* has no QEMU machine; run it with run_host"):
        micro.run_qemu(exp)


def test_linker_scripts_follow_each_machine_s_memory_map(tmp_path):
    """The vector table where each core takes it from (AN547: the ITCM at 0, apart from the code in QSPI
    flash; AN505: the Secure alias of SSRAM1), data in the machine's RAM."""
    from tvm_memsched.micro.firmware import linker_script

    text = open(linker_script(str(tmp_path / "a.ld"), 1 << 20, 1 << 20, 1024, micro.get_board("mps3-an547"))).read()
    assert "VEC  (rx)  : ORIGIN = 0x00000000" in text and "ORIGIN = 0x38000000, LENGTH = 1048576" in text
    assert "RAM  (rwx) : ORIGIN = 0x31000000" in text and "} > VEC" in text
    text = open(linker_script(str(tmp_path / "b.ld"), 1 << 20, 1 << 20, 1024, micro.get_board("mps2-an505"))).read()
    assert "VEC  (rx)" not in text and "ORIGIN = 0x10000000" in text and "ORIGIN = 0x38000000" in text


@pytest.mark.slow
@pytest.mark.parametrize("board,names", [
    ("mps3-an547", ("conv_2d.int8.tflite", "fully_connected.int8.tflite")),       # both Helium dot products
    ("mps2-an505", ("conv_2d.int8.tflite",)),
    ("mps2-an385-m0plus", ("conv_2d.int8.tflite", "fully_connected.float32.tflite"))])   # plain C, soft float
def test_new_cores_run_int8_and_float_models_bit_identical_to_tflite_micro(board, names, tmp_path, capsys):
    """Cortex-M55 (Helium: the convolution's and dense layer's dot products as predicated 16-lane
    reductions), Cortex-M33 (DSP) and Cortex-M0+ (ARMv6-M, soft float, unaligned accesses trapped): the
    microkernel library's int8 convolution and dense layer run bit for bit as TFLite Micro runs them, the
    float dense layer within TFLM's float rounding; instruction counts follow each machine's SysTick clock."""
    folder = os.path.join(os.path.dirname(__file__), "data", "coverage")
    for name in names:   # the command in this process (tests/test_frontends.py, test_unroll.py run it in its own)
        code = cli_main(["micro", os.path.join(folder, name), "-b", board, "--run", "--kernels", "fast", "--out",
                         str(tmp_path / name), "-q"])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        assert "vs TFLite Micro: bit-identical (ok)" in out or (
            "float32" in name and "vs TFLite Micro: max abs diff" in out and "(ok)" in out)
        macs = re.search(r"([\d,]+) instructions \(([\d.]+) per multiply-accumulate", out)
        # at most 16 multiply-accumulates per instruction (Helium's widest): a smaller count would be wrong
        assert macs and int(macs.group(1).replace(",", "")) > 0 and float(macs.group(2)) >= 1 / 16


# ----------------------------------------------------------------------- CLI
@pytest.mark.slow
def test_cli_micro_runs_a_tflite_if_as_both_branches(tmp_path, capsys):
    """A .tflite IF on a computed condition (openWakeWord's head, as onnx-tf writes an ONNX If) runs on the
    board as both branches and a select, outputs equal TFLite Micro's (which runs the IF)."""
    path = os.path.join(os.path.dirname(__file__), "data", "coverage", "if.int8.tflite")
    assert cli_main(["micro", path, "--board", "mps2-an386", "--out", str(tmp_path / "if"), "--run"]) == 0
    out = capsys.readouterr().out
    assert "branches       1 run-time If run as both branches and a select" in out
    assert re.search(r"vs TFLite Micro: .*\(ok\)", out), out


@pytest.mark.slow
def test_cli_micro(tmp_path, capsys):
    assert cli_main(["micro", "--list-boards"]) == 0
    assert "nucleo_f746zg" in capsys.readouterr().out
    assert cli_main(["micro", "zoo:resnet", "--board", "no_such_board", "--out", str(tmp_path)]) == 2
    assert "known boards: mps2-an385" in capsys.readouterr().err
    report = tmp_path / "r.json"
    code = cli_main(["micro", "zoo:randwire_tiny", "--board", "nucleo_f746zg", "--out", str(tmp_path / "rw"),
                     "--compare-default", "--run", "--host", "--json", str(report), "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "TVM default" in out and "tvm_memsched" in out and "host: 1 output(s)" in out
    assert "(ok)" in out
    assert (tmp_path / "rw" / "model.c").exists() and '"ok": true' in report.read_text()
    # ours fits the 96 KiB board; TVM's plan does not: exit code 2 with the numbers
    assert cli_main(["micro", "zoo:randwire_tiny", "--board", "nucleo_f401re", "--out", str(tmp_path / "fits"),
                     "--no-measure", "-q"]) == 0
    capsys.readouterr()
    code = cli_main(["micro", "zoo:randwire_tiny", "--board", "nucleo_f401re", "--out", str(tmp_path / "big"),
                     "--no-measure", "--planner", "tvm", "-q"])
    assert code == 2 and "has 98,304 B of SRAM" in capsys.readouterr().err


# ------------------------------------------------------------------ tutorial
@pytest.mark.slow
def test_micro_tutorial(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tutorials", "micro_walkthrough.py"), str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "TVM default" in p.stdout and "does not fit" in p.stdout
    assert "qemu mps2-an386 as nrf52840dk" in p.stdout and "(ok)" in p.stdout
    assert "region RAM overflowed" in p.stdout


# ----------------------------------------------------- inputs and outputs in the arena
def test_inputs_and_outputs_live_in_the_arena(tmp_path):
    """By default the inputs and outputs are planned in the arena (as TFLite Micro does): no caller buffers
    counted, never a larger arena than planning them apart, both C entry points give TVM's outputs."""
    mod = branchy_module(branches=3, channels=4, size=8)
    exp = micro.export(mod, "mps2-an386", str(tmp_path / "a"), measure=False)
    apart = micro.export(mod, "mps2-an386", str(tmp_path / "b"), measure=False, io_in_arena=False)
    assert exp.program.io_in_arena and exp.io_bytes == 0 and not apart.program.io_in_arena
    assert exp.arena_bytes <= apart.arena_bytes + apart.io_bytes
    assert exp.ram_bytes < apart.ram_bytes
    header = open(exp.files["header"]).read()
    assert "int model_invoke(void);" in header and "void* model_input(int i);" in header
    zero_copy, copying = micro.run_host(exp), micro.run_host(exp, api="run")
    assert zero_copy.ok and copying.ok and copying.warnings == ""
    assert all(np.array_equal(a, b) for a, b in zip(zero_copy.outputs, copying.outputs))
    with pytest.raises(MemschedError, match="no zero-copy API"):
        micro.run_host(apart, api="zero-copy")


def test_nan_outputs_agree_with_the_runtimes_nan():
    """TensorFlow's converter's float LOG on negative inputs is NaN in every runtime: equal NaN is agreement
    (was 'max abs error 0 (MISMATCH)'), NaN against a number is not."""
    from tvm_memsched.micro.sidebyside import check_against_tflite
    from tvm_memsched.tflite.builder import load
    from tvm_memsched.tflite.verify import litert_run_sequence

    with open(os.path.join(os.path.dirname(__file__), "data", "coverage", "log.float32.tflite"), "rb") as f:
        buf = f.read()
    sg = load(buf).subgraphs[0]
    shape = [int(d) for d in sg.tensors[sg.inputs[0]].shape]
    x = np.linspace(-2, 2, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    ref = [np.asarray(v) for v in litert_run_sequence(buf, [[x]], reference_kernels=True)[0].values()]
    assert np.isnan(ref[0]).any()
    chk = check_against_tflite(buf, [x], ref)
    assert chk["ok"] and chk["tflm"]["max_abs_diff"] < 1e-5
    wrong = [np.nan_to_num(ref[0], nan=0.0)]
    assert not check_against_tflite(buf, [x], wrong)["ok"]
