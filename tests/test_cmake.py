"""Drop-in deployment (tvm_memsched.micro.cmake): the exported model as a CMake library and a Make fragment,
built with GCC and Clang, from C11 and C++17, with strict warnings, one or several models per firmware, run in
QEMU with the same outputs as ``micro --run``."""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from tvm_memsched import micro, zoo
from tvm_memsched.core.errors import MemschedError
from tvm_memsched.micro.cmake import clang_cflags, clang_triple, parse_example_output
from tvm_memsched.micro.inputs import default_inputs as example_inputs
from tvm_memsched.relax.frontends.frontend import from_tflite_bytes

STRICT = ["-Wall", "-Wextra", "-Wpedantic", "-Werror"]


def _sh(cmd, cwd=None, ok=True, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _qemu(exp, elf):
    out = _sh(["qemu-system-arm", "-M", exp.board.emulator, "-nographic", "-monitor", "none", "-semihosting",
               "-kernel", str(elf)], timeout=300)
    return out.stdout


def _cmake_build(src, build, toolchain, *defs):
    _sh(["cmake", "-S", str(src), "-B", str(build), f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
         "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *defs])
    _sh(["cmake", "--build", str(build), "-j", "2"])


@pytest.fixture(scope="module")
def kws(tmp_path_factory):
    """The int8 keyword-spotting model exported for the Cortex-M4F board, and its outputs from ``micro --run``."""
    mod = from_tflite_bytes(zoo.tflite("ds_cnn", "int8"))
    exp = micro.export(mod, "mps2-an386", str(tmp_path_factory.mktemp("kws")), name="kws")
    res = micro.run_qemu(exp, example_inputs(exp))
    assert res.ok, res.summary()
    return exp, res.outputs


def test_cmake_library_builds_with_gcc_and_clang_in_c_and_cxx17_and_runs_like_micro_run(kws, tmp_path):
    """The example firmware built through the library target with arm-none-eabi-gcc and with Clang + ld.lld,
    everything compiled with -Wall -Wextra -Wpedantic -Werror (-std=c11; the C++ example -std=c++17), prints
    the same bytes as the test program of ``micro --run`` on the same input, from all four builds."""
    exp, want = kws
    ex = exp.files["example"]
    for tc in ("gcc", "clang"):
        build = tmp_path / tc
        _cmake_build(ex, build, os.path.join(ex, f"toolchain-{tc}.cmake"), "-DTMS_STRICT=ON", "-DTMS_EXAMPLE_CXX=ON")
        commands = {os.path.basename(c["file"]): c["command"]
                    for c in json.loads((build / "compile_commands.json").read_text())}
        assert {"kws.c", "kws_kernels.c", "kws_params.c", "tms_nn.c", "tvm_memsched_rt.c", "main.cpp"} <= set(commands)
        for fname, cmd in commands.items():
            assert "-mcpu=cortex-m4" in cmd and "-Werror" in cmd and "-Wpedantic" in cmd, cmd
            assert ("-std=c++17" if fname.endswith(".cpp") else "-std=c11") in cmd, cmd
            assert (tc == "clang") == ("--target=thumbv7em-none-eabihf" in cmd), cmd
        for target in ("kws_example", "kws_example_cxx"):
            got = parse_example_output(exp, _qemu(exp, build / f"{target}.elf"))
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w), (tc, target)


def test_generated_sources_compile_strictly_with_both_compilers(kws, tmp_path):
    """Every C file of the export and the C++17 example compile warning-free under the strict flags with GCC
    and Clang, without the CMake files (what a Makefile or an IDE project does)."""
    exp, _ = kws
    board = exp.board
    sources = [os.path.join(exp.out_dir, f) for f in os.listdir(exp.out_dir) if f.endswith(".c")]
    inc = ["-I", exp.out_dir, "-I", os.path.join(exp.out_dir, "include")]
    assert len(sources) >= 5
    for cc, extra in (("arm-none-eabi-gcc", board.cflags()),
                      ("clang", [f"--target={clang_triple(board)}", "--sysroot=/usr/lib/arm-none-eabi",
                                 *clang_cflags(board)])):
        for src in sources:
            _sh([cc, *extra, "-O2", "-std=c11", *STRICT, *inc, "-c", src, "-o",
                 str(tmp_path / "x.o")])
    cxx = exp.files["example_main_cxx"]
    _sh(["arm-none-eabi-g++", *board.cflags(), "-O2", "-std=c++17", *STRICT, "-fno-exceptions", "-fno-rtti",
         *inc, "-c", cxx, "-o", str(tmp_path / "main.o")])


def test_make_fragment_builds_the_same_firmware(kws, tmp_path):
    """``include DIR/sources.mk`` in a plain Makefile (the README's snippet) builds the example; same outputs."""
    exp, want = kws
    ex = exp.files["example"]
    makefile = tmp_path / "Makefile"
    makefile.write_text(
        f"include {exp.out_dir}/sources.mk\n"
        "CC = arm-none-eabi-gcc\n"
        f"CPU = {' '.join(exp.board.cflags())}\n"
        "CFLAGS = $(CPU) $(kws_INCLUDES) $(kws_CFLAGS) -Wall -Wextra -Wpedantic -Werror\n"
        f"SRCS = {ex}/main.c {ex}/example_input.c {ex}/startup.c $(kws_SRCS) $(TVM_MEMSCHED_RUNTIME_SRCS)\n"
        f"fw.elf: $(SRCS)\n"
        f"\t$(CC) $(CFLAGS) $^ --specs=rdimon.specs -T {ex}/{exp.board.emulator}.ld -Wl,--gc-sections "
        "$(kws_LDLIBS) -o $@\n")
    _sh(["make", "-C", str(tmp_path)])
    got = parse_example_output(exp, _qemu(exp, tmp_path / "fw.elf"))
    assert all(np.array_equal(g, w) for g, w in zip(got, want))


def _two_model_project(tmp_path, a, b):
    """A firmware adding two exported libraries side by side; main prints both models' outputs on zeros."""
    proj = tmp_path / "proj"
    proj.mkdir()
    lines = ['#include <stdio.h>', '#include <stdint.h>']
    for e in (a, b):
        lines.append(f'#include "{e.name}.h"')
    body = []
    for e in (a, b):
        n, N = e.name, e.name.upper()
        lines += [f"static uint8_t {n}_in{i}[{N}_INPUT_{i}_BYTES] __attribute__((aligned(16)));"
                  for i in range(len(e.program.inputs))]
        lines += [f"static uint8_t {n}_out{k}[{N}_OUTPUT_{k}_BYTES] __attribute__((aligned(16)));"
                  for k in range(len(e.program.outputs))]
        ins = ", ".join(f"{n}_in{i}" for i in range(len(e.program.inputs)))
        outs = ", ".join(f"{n}_out{k}" for k in range(len(e.program.outputs)))
        body += [f"  {{ const void* in[] = {{{ins}}}; void* out[] = {{{outs}}};",
                 f"    if ({n}_run(in, out) != 0) {{ printf(\"error %s\\n\", {n}_last_error()); return 1; }}",
                 f"    printf(\"model {n}\\n\");"]
        for k in range(len(e.program.outputs)):
            body += [f"    printf(\"output {k}\\n\");",
                     f"    for (unsigned i = 0; i < {N}_OUTPUT_{k}_BYTES; ++i) printf(\"%02x%s\", {n}_out{k}[i], "
                     f"i % 32u == 31u || i + 1u == {N}_OUTPUT_{k}_BYTES ? \"\\n\" : \"\");"]
        body.append("  }")
    (proj / "main.c").write_text("\n".join(lines + ["int main(void) {", *body, "  return 0;", "}", ""]))
    shutil.copy(os.path.join(a.files["example"], "startup.c"), proj / "startup.c")
    ld = os.path.join(a.files["example"], f"{a.board.emulator}.ld")
    (proj / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(two C)\n"
        f"add_subdirectory({a.out_dir} {a.name})\nadd_subdirectory({b.out_dir} {b.name})\n"
        "add_executable(two main.c startup.c)\n"
        f"target_link_libraries(two PRIVATE {a.name} {b.name})\n"
        f"target_link_options(two PRIVATE -T{ld} -Wl,--gc-sections)\n")
    return proj


def _split_models(stdout):
    parts = re.split(r"^model (\w+)$", stdout, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.slow
def test_two_models_in_one_firmware_share_the_runtime(kws, tmp_path):
    """An int8 model and a float model (different microkernel variants) added to one firmware: the runtime
    is compiled once with every variant, both models run as each does alone."""
    a, _ = kws
    mod = from_tflite_bytes(zoo.tflite("fc_autoencoder", "float32"))
    b = micro.export(mod, "mps2-an386", str(tmp_path / "ae"), name="ae")
    assert open(os.path.join(a.out_dir, "tms_nn_config.h")).read() != \
        open(os.path.join(b.out_dir, "tms_nn_config.h")).read()
    proj = _two_model_project(tmp_path, a, b)
    build = tmp_path / "build"
    _cmake_build(proj, build, os.path.join(a.files["example"], "toolchain-gcc.cmake"))
    rt_flags = (build / a.name / "CMakeFiles" / "tvm_memsched_runtime.dir" / "flags.make").read_text()
    assert "TMS_NN_ALL_VARIANTS" in rt_flags
    printed = _split_models(_qemu(a, build / "two"))
    for e in (a, b):
        zeros = [np.zeros(s, d) for _, s, d in e.program.inputs]
        alone = micro.run_qemu(e, zeros)
        assert alone.ok, alone.summary()
        got = parse_example_output(e, printed[e.name])
        for g, w in zip(got, alone.outputs):
            assert np.array_equal(g, w), e.name


def test_models_from_different_versions_are_refused_by_name(kws, tmp_path):
    """Two exports whose runtime files differ (as from two tvm_memsched versions) cannot share the runtime:
    configuring names the file instead of failing at link time or mixing them silently."""
    a, _ = kws
    b_dir = tmp_path / "other"
    shutil.copytree(a.out_dir, b_dir, ignore=shutil.ignore_patterns("example", "run", "build"))
    text = (b_dir / "CMakeLists.txt").read_text().replace("kws", "kws2")
    (b_dir / "CMakeLists.txt").write_text(text)
    with open(b_dir / "tms_nn.c", "a") as f:
        f.write("/* another version */\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "main.c").write_text("int main(void) { return 0; }\n")
    (proj / "CMakeLists.txt").write_text(
        f"cmake_minimum_required(VERSION 3.13)\nproject(p C)\nadd_subdirectory({a.out_dir} a)\n"
        f"add_subdirectory({b_dir} b)\nadd_executable(p main.c)\ntarget_link_libraries(p kws kws2)\n")
    proc = _sh(["cmake", "-S", str(proj), "-B", str(tmp_path / "build"),
                f"-DCMAKE_TOOLCHAIN_FILE={a.files['example']}/toolchain-gcc.cmake"], ok=False)
    assert proc.returncode != 0
    message = " ".join(proc.stderr.split())          # CMake wraps its messages
    assert "tms_nn.c differs from" in message and "different tvm_memsched versions" in message


def test_example_output_parser_names_what_is_missing(kws):
    exp, want = kws
    full = "invocation 0\noutput 0\n" + want[0].tobytes().hex() + "\ndone\n"
    assert np.array_equal(parse_example_output(exp, full)[0], want[0])
    with pytest.raises(MemschedError, match="printed 0 bytes of output 0"):
        parse_example_output(exp, "invocation 0\ndone\n")
    with pytest.raises(MemschedError, match="the example failed: kernel 3"):
        parse_example_output(exp, "error kernel 3\n")


@pytest.mark.parametrize("board,triple", [("mps3-an547", "thumbv8.1m.main-none-eabihf"),
                                          ("mps2-an505", "thumbv8m.main-none-eabihf"),
                                          ("mps2-an385-m0plus", "thumbv6m-none-eabi"),
                                          ("mps2-an385", "thumbv7m-none-eabi")])
def test_clang_triples(board, triple):
    assert clang_triple(micro.get_board(board)) == triple


@pytest.mark.slow
@pytest.mark.parametrize("board", ["mps3-an547", "mps2-an505", "mps2-an385-m0plus"])
def test_example_on_the_new_cores_with_both_compilers(board, tmp_path):
    """Cortex-M55 (Helium intrinsics), M33 and M0+ (ARMv6-M): the example builds strictly with GCC and Clang and
    prints what ``micro --run`` computed."""
    mod = from_tflite_bytes(zoo.tflite("ds_cnn", "int8"))
    exp = micro.export(mod, board, str(tmp_path / "m"), name="kws")
    res = micro.run_qemu(exp, example_inputs(exp))
    assert res.ok, res.summary()
    for tc in ("gcc", "clang"):
        ex = exp.files["example"]
        _cmake_build(ex, tmp_path / tc, os.path.join(ex, f"toolchain-{tc}.cmake"), "-DTMS_STRICT=ON")
        got = parse_example_output(exp, _qemu(exp, tmp_path / tc / "kws_example.elf"))
        assert all(np.array_equal(g, w) for g, w in zip(got, res.outputs)), tc


def test_example_of_a_tensorflow_converted_file(tmp_path):
    """A .tflite written by TensorFlow's TFLiteConverter (int8 CONV_2D, tests/data/coverage): the example firmware
    built through the library with Clang prints what ``micro --run`` computed."""
    path = os.path.join(os.path.dirname(__file__), "data", "coverage", "conv_2d.int8.tflite")
    with open(path, "rb") as f:
        mod = from_tflite_bytes(f.read())
    exp = micro.export(mod, "mps2-an386", str(tmp_path / "m"), name="conv")
    res = micro.run_qemu(exp, example_inputs(exp))
    assert res.ok, res.summary()
    ex = exp.files["example"]
    _cmake_build(ex, tmp_path / "b", os.path.join(ex, "toolchain-clang.cmake"), "-DTMS_STRICT=ON")
    got = parse_example_output(exp, _qemu(exp, tmp_path / "b" / "conv_example.elf"))
    assert len(got) == len(res.outputs) and all(np.array_equal(g, w) for g, w in zip(got, res.outputs))
