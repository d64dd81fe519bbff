"""MLPerf Tiny harness (tvm_memsched.micro.mlperf_tiny): the runner's serial protocol driven against the firmware
in QEMU and on the host, results against LiteRT / TFLite Micro, malformed commands, the C formatter."""

import os
import re
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from tvm_memsched import micro, zoo
from tvm_memsched.app.cli import main as cli_main
from tvm_memsched.core.errors import MemschedError, UnsupportedError
from tvm_memsched.micro import mlperf_tiny as mt
from tvm_memsched.micro.boards import MACHINES, Board, get_board
from tvm_memsched.micro.firmware import runtime_file
from tvm_memsched.micro.run import default_inputs, litert_reference
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes
from tvm_memsched.relax.testing import branchy_module

HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="needs arm-none-eabi-gcc and qemu-system-arm")


def export_zoo(name, out, board="mps2-an386"):
    buf = zoo.tflite(name, "int8")
    return micro.export(from_tflite_bytes(buf, name), board, str(out), measure=False), buf


def answers_are_framed(tr):
    """Every answer holds exactly one m-ready, at its end, and the firmware exited normally."""
    assert tr.returncode == 0 and len(tr.answers) == len(tr.commands)
    for a in tr.answers:
        assert a.endswith("m-ready\r\n") and a.count("m-ready") == 1, a


def dequantized(q, scale, zero_point):
    return (np.asarray(q).reshape(-1).astype(np.int64) - zero_point) * scale


# ------------------------------------------------------------------ the protocol, host build
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A small float model: the protocol does not care what the model computes."""
    return micro.export(branchy_module(branches=2, channels=2, size=4), "mps2-an386",
                        str(tmp_path_factory.mktemp("tiny")), measure=False)


BAD = ["bogus", "db", "db load", "db load 0", "db load -3", "db load 99999999999", "db load {n1}", "db 0011",
       "db load {n}", "db zz", "db 0", "db 0g11", "x" * 200, "db print 99999 1", "infer 0", "infer 1 -2", "results",
       "db print"]


@pytest.fixture(scope="module")
def session(tiny):
    """Malformed commands, then the runner's session, then 'db print 8 0', on the host build."""
    spec = mt.harness_spec(tiny)
    x = default_inputs(tiny)
    bad = [c.format(n=spec.wire_bytes, n1=spec.wire_bytes + 1) for c in BAD]
    tr = mt.run_harness_host(tiny, bad + mt.runner_commands(spec.wire(x)) + ["db print 8 0"])
    return tr, spec, x, micro.run_host(tiny, x).outputs


def test_malformed_commands_get_errors_and_change_nothing(session):
    tr, spec, x, ref = session
    answers_are_framed(tr)
    n = spec.wire_bytes
    first = {}
    for c, a in zip(tr.commands, tr.answers):
        first.setdefault(c, a)
    assert "e-[Unknown command: bogus]" in first["bogus"]
    for c in ["db", "db load", "db load 0", "db load -3", "db load 99999999999", "db 0g11", "db zz", "db 0",
              "x" * 200, "db print 99999 1", "infer 0", "infer 1 -2", "results"]:
        assert first[c].startswith("e-["), (c, first[c])
    assert f"exceed the input buffer of {n} bytes" in first[f"db load {n + 1}"]
    assert "no 'db load N'" in first["db 0011"]          # the oversized load armed nothing
    assert first[f"db load {n}"].startswith(f"m-[Expecting {n} bytes]")
    assert first["db print"] == "m-ready\r\n"           # the bad chunks stored no byte
    # the good session after all of it: the outputs of the export's own run
    check = mt.compare_results(spec, tr.results(as_text=True)[-1], ref, spec.wire(x))
    assert check.ok and check.items == sum(y.count for y in spec.outputs)
    assert tr.answer("db print 8 0").startswith("m-buffer-" + "-".join(f"{b:02x}" for b in spec.wire(x)[:8]))


def test_results_of_a_wrong_model_are_caught(session):
    """compare_results fails when the outputs are not the ones printed (one value changed, one missing)."""
    tr, spec, x, ref = session
    printed = tr.results(as_text=True)[-1]
    assert mt.compare_results(spec, printed, ref, spec.wire(x)).ok
    wrong = [r.copy() for r in ref]
    wrong[0].reshape(-1)[3] += 0.01
    check = mt.compare_results(spec, printed, wrong, spec.wire(x))
    assert not check.ok and check.mismatches[0][0] == 3
    assert not mt.compare_results(spec, printed[:-1], ref, spec.wire(x)).ok


def test_hostile_model_version_is_escaped(tiny, tmp_path):
    """A model version with quotes, a newline, brackets and a trigraph compiles (escaped) and is reported
    protocol-safe."""
    version = 'v"1]\n??/%[x'
    tr = mt.run_harness_host(tiny, ["profile"], model_version=version, harness_dir=str(tmp_path / "h"))
    answers_are_framed(tr)
    assert 'm-model-[v"1__??/__x]' in tr.answer("profile")
    header = open(tmp_path / "h" / "th_config.h").read()
    assert '"v\\"1__\\?\\?/__x"' in header


def test_board_without_qemu_is_refused(tiny):
    board = Board("no_qemu", "a board QEMU cannot run", "Cortex-M4F", "cortex-m4", "fpv4-sp-d16", 1 << 20, 1 << 20)
    with pytest.raises(UnsupportedError, match="no QEMU machine"):
        mt.run_harness_qemu(tiny, ["name"], board=board)


def test_cli_errors_exit_2(tmp_path):
    assert cli_main(["micro", "zoo:ds_cnn:int8", "-b", "mps2-an386", "--harness", "mlperf-tiny", "--run"]) == 2
    with pytest.raises(SystemExit) as e:
        cli_main(["micro", "zoo:ds_cnn:int8", "-b", "mps2-an386", "--out", str(tmp_path), "--harness", "tiny"])
    assert e.value.code == 2


STRICT = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]


@needs_arm
def test_harness_c_is_strict_c11_for_gcc_and_clang(tiny, tmp_path):
    """Every configuration's branches (inputs and outputs in the arena or not, MSE result, converted inputs,
    several outputs) compile warning-free with -Wpedantic -Werror: arm-none-eabi-gcc, and Clang for
    thumbv7em when installed."""
    base = mt.harness_spec(tiny)
    x, y = base.inputs[0], base.outputs[0]
    specs = {
        "arena": base,
        "run": mt.HarnessSpec("model", "v", None, [x, x], [y, mt.OutputSpec((3,), "int64"),
                                                          mt.OutputSpec((2,), "uint8", 0.5, 3)], False),
        "mse": mt.HarnessSpec("model", "ad01", "ad01", [mt.InputSpec("x", (8,), "int8", "float-to-int8", 0.1, 2)],
                              [mt.OutputSpec((8,), "int8", 0.2, -1)], True, mse=True),
        "pixels": mt.HarnessSpec("model", "ic01", "ic01", [mt.InputSpec("x", (8,), "int8", "uint8-to-int8")],
                                 [mt.OutputSpec((8,), "bool")], False),
    }
    board = get_board("mps2-an386")
    compilers = [["arm-none-eabi-gcc", *board.cflags()]]
    if shutil.which("clang"):
        compilers.append(["clang", "--target=thumbv7em-none-eabihf", "-mcpu=cortex-m4", "-mfloat-abi=hard",
                          "-mfpu=fpv4-sp-d16", "--sysroot=/usr/lib/arm-none-eabi", "-isystem",
                          "/usr/lib/arm-none-eabi/include"])
    for kind, spec in specs.items():
        d = tmp_path / kind
        d.mkdir()
        for f in mt.HARNESS_FILES:
            shutil.copy(runtime_file(os.path.join("mlperf_tiny", f)), d / f)
        header, source = mt.config_files(spec, board)
        (d / "th_config.h").write_text(header)
        (d / "th_config.c").write_text(source)
        for cc in compilers:
            for f in ["ee_protocol.c", "th_model.c", "th_io.c", "th_main.c", "th_config.c", "th_port_cmsdk.c"]:
                p = subprocess.run([*cc, *STRICT, "-I", str(d), "-I", tiny.out_dir, "-c", str(d / f), "-o",
                                    str(d / "x.o")], capture_output=True, text=True)
                assert p.returncode == 0 and not p.stderr.strip(), (kind, cc[0], f, p.stderr)


# ------------------------------------------------------------------ the C formatter against its Python mirror
def test_c_formatter_matches_python(tmp_path):
    values = [0.0, -0.0625, 0.0625, 0.5, 1.0005, -1.0005, 2.506853, 123456.789, -0.0004, 0.00049999, 1e-9, 7.25,
              0.1 + 0.2, 255 * 0.00468572043, -128 * 0.0265576616, 3e9]
    calls = [(v, d) for v in values for d in (0, 3, 6, 9)]
    src = ['#include <stdio.h>', '#include "th_api.h"', "void th_port_putchar(char c) { putchar(c); }",
           "void th_port_timer_start(void) {}", "uint64_t th_port_microseconds(void) { return 0u; }",
           "int main(void) {"]
    src += [f"  th_print_fixed({v.hex()}, {d}u); putchar('\\n');" for v, d in calls]
    src += ['  th_printf("%02x|%lu|%-5s|%5d|%lld|%X|%c|%%|%s|%.2f\\n", 10u, 4294967295ul, "ab", -42, -9000000000ll, '
            '0xbeefu, (int)\'z\', "end", -1.005);', "  return 0;", "}"]
    (tmp_path / "main.c").write_text("\n".join(src))
    (tmp_path / "th_config.h").write_text('#include "th_api.h"\n#define MAX_DB_INPUT_SIZE 1u\n')
    d = os.path.dirname(runtime_file("mlperf_tiny/th_io.c"))
    exe = tmp_path / "fmt"
    cc = shutil.which("gcc") or shutil.which("cc")
    p = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-I", str(tmp_path), "-I", d,
                        os.path.join(d, "th_io.c"), str(tmp_path / "main.c"), "-o", str(exe)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines[:-1] == [mt.format_fixed(v, d) for v, d in calls]
    assert lines[-1] == "0a|4294967295|ab   |  -42|-9000000000|BEEF|z|%|end|" + mt.format_fixed(-1.005, 2)
    assert mt.format_fixed(0.0005, 3) == "0.001" and mt.format_fixed(-0.0004, 3) == "-0.000"


def test_wire_conversions_round_trip():
    """What the runner sends for each benchmark, and the device's conversion of it back (the Python mirror)."""
    program = SimpleNamespace(inputs=[("x", (1, 8), "int8")], outputs=[((1, 8), "int8")], io_in_arena=True)
    exp = SimpleNamespace(name="m", program=program)
    x = np.array([[-128, -1, 0, 1, 5, 60, 126, 127]], np.int8)
    ic = mt.harness_spec(exp, benchmark="ic01")
    assert ic.inputs[0].conversion == "uint8-to-int8" and ic.wire(x) == bytes((x.view(np.uint8) ^ 0x80).tobytes())
    assert list(ic.wire(x)) == [int(v) + 128 for v in x.reshape(-1)]
    plain = mt.harness_spec(exp)
    assert plain.wire(x) == x.tobytes() and plain.model_version == "m"
    with pytest.raises(UnsupportedError, match="needs the input's scale"):
        mt.harness_spec(exp, benchmark="ad01")
    spec = mt.HarnessSpec("m", "ad01", "ad01", [mt.InputSpec("x", (1, 8), "int8", "float-to-int8", 0.0265576616, -3)],
                          [mt.OutputSpec((1, 8), "int8", 0.0036668, -15)], True, mse=True)
    wire = spec.wire(x)
    assert len(wire) == 32 and np.array_equal(spec.model_inputs(wire)[0], x)
    floats = np.frombuffer(wire, "<f4")
    assert floats[0] == np.float32(-125) * np.float32(0.0265576616)
    # quantization rounds halves away from zero (not to even) and clamps; NaN is the zero point
    quarter = mt.HarnessSpec("m", "ad01", "ad01", [mt.InputSpec("x", (1, 8), "int8", "float-to-int8", 0.25, -3)],
                             spec.outputs, True, mse=True)
    halves = np.array([0.5, -0.5, 1.5, -2.5, 1e6, -1e6, np.nan, 0.49999997], np.float32) * np.float32(0.25)
    back = quarter.model_inputs(halves.astype("<f4").tobytes())[0].reshape(-1)
    assert back.tolist() == [1 - 3, -1 - 3, 2 - 3, -3 - 3, 127, -128, -3, 0 - 3]
    with pytest.raises(UnsupportedError, match="uint8 pixels"):
        mt.harness_spec(SimpleNamespace(name="f", program=SimpleNamespace(
            inputs=[("x", (4,), "float32")], outputs=[((4,), "float32")], io_in_arena=True)), benchmark="vww01")


# ------------------------------------------------------------------ QEMU: the runner's session
@needs_arm
def test_ds_cnn_runner_session_in_qemu_matches_litert(tmp_path):
    """The runner's commands over the AN386's UART0: ds_cnn's m-results are LiteRT's reference kernels'
    outputs (int8, dequantized as the reference submission does), timestamps scale with the inferences, and
    malformed commands in between are answered with errors."""
    exp, buf = export_zoo("ds_cnn", tmp_path)
    x = default_inputs(exp)
    ref = litert_reference(buf, [x])[0]
    spec = mt.harness_spec(exp, buf, "kws01")
    wire = spec.wire(x)
    commands = ["db load 999999", "db 00", "nonsense"] + mt.runner_commands(wire) + ["infer 3 1", "results"]
    tr = mt.run_harness_qemu(exp, commands, tflite=buf, benchmark="kws01")
    answers_are_framed(tr)
    assert tr.text.startswith("m-timestamp-mode-performance\r\nm-lap-us-")
    assert "m-init-done\r\nm-ready\r\n" in tr.text
    assert tr.answer("name") == "m-name-dut-[tvm_memsched]\r\nm-ready\r\n"
    assert "m-profile-[ULPMark for tinyML Firmware V0.0.1]\r\nm-model-[kws01]" in tr.answer("profile")
    assert [e for e in tr.errors()] == ["e-[db load: 999999 bytes exceed the input buffer of 490 bytes]",
                                        "e-[db: no 'db load N' before the data]", "e-[Unknown command: nonsense]"]
    assert tr.answer("db load 490").startswith("m-[Expecting 490 bytes]")
    assert sum("m-load-done" in a for a in tr.answers) == 1
    infer = tr.answer("infer 1 0")
    assert re.search(r"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-1\r\nm-lap-us-\d+\r\nm-lap-us-\d+\r\n"
                     r"m-infer-done\r\nm-results-\[[^\]]+\]\r\nm-ready\r\n$", infer), infer
    results = tr.results(as_text=True)
    assert len(results) == 4 and all(r == results[0] for r in results)   # infer 1, results, infer 3, results
    check = mt.compare_results(spec, results[0], ref, wire)
    assert check.ok and check.items == 12, check
    scale, zp = spec.outputs[0].scale, spec.outputs[0].zero_point
    assert np.allclose([float(v) for v in results[0]], dequantized(ref[0], scale, zp), atol=5e-4, rtol=0)
    assert spec.outputs[0].decimals == 3 and all(len(v.split(".")[1]) == 3 for v in results[0])
    one = mt.parse_laps(infer)
    three = mt.parse_laps(tr.answer("infer 3 1"))
    t1, t3 = one[1] - one[0], three[1] - three[0]
    assert 2_000 < t1 < 20_000                       # microseconds: ~5.5M instructions under -icount shift=0
    assert abs(t3 - 3 * t1) <= 0.002 * t3 + 10, (t1, t3)   # the same instructions each time


@needs_arm
@pytest.mark.slow
@pytest.mark.parametrize("name,benchmark", [("mobilenet_v1_025", "vww01"), ("resnet8", "ic01"),
                                            ("fc_autoencoder", None)])
def test_mlperf_tiny_models_in_qemu(tmp_path, name, benchmark):
    """The other MLPerf-Tiny-class zoo models: m-results equal LiteRT's reference kernels' outputs (the
    autoencoder's fully connected layers rescale in double in LiteRT, in integers in TFLite Micro and here: its
    results equal TFLite Micro's, and LiteRT's within one quantization step)."""
    exp, buf = export_zoo(name, tmp_path)
    x = default_inputs(exp)
    tr = mt.run_harness_qemu(exp, inputs=x, tflite=buf, benchmark=benchmark)
    answers_are_framed(tr)
    spec = tr.spec
    wire = spec.wire(x)
    if benchmark in ("vww01", "ic01"):
        assert spec.inputs[0].conversion == "uint8-to-int8" and wire == bytes(int(v) + 128 for v in x[0].reshape(-1))
    printed = tr.results(as_text=True)[-1]
    lite = litert_reference(buf, [x])[0]
    y = spec.outputs[0]
    got = np.array([float(v) for v in printed])
    if name == "fc_autoencoder":
        from tvm_memsched.tflite.verify import tflm_run

        assert mt.compare_results(spec, printed, tflm_run(buf, {"x": x[0]}), wire).ok
        assert np.max(np.abs(got - dequantized(lite[0], y.scale, y.zero_point))) <= y.scale + 10.0 ** -y.decimals
    else:
        assert mt.compare_results(spec, printed, lite, wire).ok
        assert np.allclose(got, dequantized(lite[0], y.scale, y.zero_point), atol=0.5 * 10.0 ** -y.decimals)
    assert tr.infer_microseconds > 0 and not tr.errors()


@needs_arm
@pytest.mark.slow
def test_anomaly_detection_score_in_qemu(tmp_path):
    """ad01: the runner sends float32 values, the device quantizes them and prints the mean squared error of
    the dequantized output against them: the score of TFLite Micro's outputs for the same int8 inputs."""
    from tvm_memsched.tflite.verify import tflm_run

    exp, buf = export_zoo("fc_autoencoder", tmp_path)
    x = default_inputs(exp)
    tr = mt.run_harness_qemu(exp, inputs=x, tflite=buf, benchmark="ad01")
    answers_are_framed(tr)
    spec = tr.spec
    wire = spec.wire(x)
    assert len(wire) == 640 * 4 and tr.answer("db load 2560").startswith("m-[Expecting 2560 bytes]")
    [score] = tr.results()[-1]
    ref = tflm_run(buf, {"x": x[0]})
    assert mt.compare_results(spec, tr.results(as_text=True)[-1], ref, wire).ok
    y = dequantized(ref[0], spec.outputs[0].scale, spec.outputs[0].zero_point)
    xf = np.frombuffer(wire, "<f4").astype(np.float64)
    assert score == pytest.approx(np.mean((y - xf) ** 2), rel=1e-4, abs=1e-6) and score > 0


@needs_arm
@pytest.mark.slow
@pytest.mark.parametrize("board", ["mps2-an385", "mps2-an500", "mps2-an505", "mps3-an547", "mps2-an385-m0plus"])
def test_uart_of_every_qemu_machine(tmp_path, board):
    """UART0's address and SysTick's clock of each machine (the Secure aliases on the AN505 and AN547): the
    session runs and its float results are those of the export's own QEMU run (the same code: the FMA kernels of
    the M7/M33/M55 differ from a host build in last bits)."""
    exp = micro.export(branchy_module(branches=2, channels=2, size=4), board, str(tmp_path), measure=False)
    x = default_inputs(exp)
    tr = mt.run_harness_qemu(exp, inputs=x)
    answers_are_framed(tr)
    ref = micro.run_qemu(exp, x).outputs
    assert mt.compare_results(tr.spec, tr.results(as_text=True)[-1], ref, tr.spec.wire(x), rtol=1e-8).ok
    header = open(os.path.join(exp.out_dir, "mlperf_tiny", "th_config.h")).read()
    b = get_board(board)
    assert (f"TH_UART_BASE 0x{MACHINES[b.emulator].uart_base:08x}u" in header) == (b.qemu_machine is not None)


@needs_arm
@pytest.mark.slow
def test_cli_harness_run_and_readme_build(tmp_path):
    out = tmp_path / "m"
    assert cli_main(["micro", "zoo:resnet8:int8", "-b", "mps2-an386", "--out", str(out), "--harness",
                     "mlperf-tiny:ic01", "--run", "--no-compare-tflm", "--no-measure"]) == 0
    import json

    rep = json.load(open(out / "model_report.json"))["mlperf_tiny"]
    assert rep["ok"] and rep["litert_identical"] and rep["benchmark"] == "ic01" and rep["input_bytes"] == 3072
    assert rep["errors"] == [] and rep["infer_us"] > 1000
    readme = (out / "mlperf_tiny" / "README.md").read_text()
    assert "db load 3072" in readme and "uint8-to-int8" in readme
    block = readme.split("```sh\n")[1].split("```")[0]
    build = "\n".join(line for line in block.splitlines() if not line.startswith("qemu-system-arm"))
    p = subprocess.run(["sh", "-c", build.replace("-o dut.elf", "-Wall -Wextra -o dut.elf")], cwd=str(out),
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (out / "mlperf_tiny" / "dut.elf").stat().st_size > 0


def test_a_device_that_stops_answering_is_an_error(tiny):
    """A device that stops answering is an error naming the command, not a hang ('exit' ends the program)."""
    with pytest.raises(MemschedError, match="gave no m-ready for 'exit'"):
        mt.run_harness_host(tiny, ["name", "exit", "name"], timeout=20)
