"""The board database: core, memory sizes, compiler flags and (where one exists) a QEMU machine.

Two kinds of boards:

* **QEMU machines**: ARM's MPS2/MPS3 FPGA images as QEMU 7.2 emulates them
  (:data:`MACHINES`: where code, data and the vector table go, and how many
  instructions a SysTick tick is under ``-icount shift=0``). ``mps2-an385`` /
  ``an386`` / ``an500`` (Cortex-M3 / M4F / M7): code in the 4 MiB ZBT SSRAM1 at
  address 0 (the "flash"), data, arena and stack in the 4 MiB ZBT SSRAM2&3 at
  ``0x20000000`` (the "SRAM"). ``mps2-an505`` (Cortex-M33, booted Secure): code
  in SSRAM1's Secure alias ``0x10000000``, where QEMU takes the vector table
  from, data in SSRAM2&3 at ``0x38000000``. ``mps3-an547`` (Cortex-M55 with
  Helium): the vector table in the ITCM at 0, code in the 8 MiB QSPI flash at
  ``0x38000000``, data in the 4 MiB ISRAM at ``0x31000000``. ``mps2-an385-m0plus``
  is a Cortex-M0+: ARMv6-M code (no DSP, no FPU, no 32x32->64 multiply, unaligned
  accesses trapped as an M0+ traps them) run on the AN385's Cortex-M3, which
  executes the same instructions: instruction counts are the v6-M code's, cycles
  are not modelled.
* **Real boards**, for fit checks (does the model's RAM and flash fit?). Their
  sizes are the datasheet numbers of the one contiguous SRAM block the arena can
  live in. A real board whose core QEMU emulates names that machine as its
  ``qemu_stand_in``: :func:`tvm_memsched.micro.run_qemu` then runs the build on
  the stand-in with the linker script's RAM and flash cut to the real board's
  sizes, so a model that does not fit the real board does not link there either.

Example
-------
>>> b = get_board("mps2-an386")
>>> b.core, b.sram_bytes, b.qemu_machine
('Cortex-M4F', 4194304, 'mps2-an386')
>>> get_board("sparkfun_edge").qemu_stand_in
'mps2-an386'
>>> get_board("mps2-an385").dsp, get_board("mps2-an386").dsp
(False, True)
>>> get_board("nucleo_f746zg").cflags()
['-mcpu=cortex-m7', '-mthumb', '-mfloat-abi=hard', '-mfpu=fpv5-sp-d16']
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import UnsupportedError

__all__ = ["Board", "BOARDS", "Machine", "MACHINES", "get_board", "board_names", "boards_table"]

KiB = 1024
MiB = 1024 * 1024


@dataclass(frozen=True)
class Machine:
    """A QEMU machine's memory map as the firmware uses it, and its SysTick clock: a tick is
    ``instructions_per_tick[0] / instructions_per_tick[1]`` instructions under ``-icount shift=0``
    (1 ns per instruction; the MPS2 images clock SysTick at 25 MHz, the AN505 at 20, the AN547 at 32).
    ``vector_origin`` is where the core takes its vector table from when that is not the start of the
    code region. ``uart_base`` is UART0's address (a CMSDK APB UART, wired to QEMU's first serial port), as
    the firmware addresses it: the Secure alias on the Secure-booted AN505 and AN547 (QEMU 7.2 answers at
    both aliases there; probed with a firmware echoing through each)."""

    name: str
    code_origin: int
    code_bytes: int
    ram_origin: int
    ram_bytes: int
    vector_origin: int | None = None
    instructions_per_tick: tuple[int, int] = (40, 1)
    uart_base: int | None = None


_MPS2 = dict(code_origin=0x00000000, code_bytes=4 * MiB, ram_origin=0x20000000, ram_bytes=4 * MiB,
             uart_base=0x40004000)

#: the QEMU machines builds run on, by name
MACHINES: dict[str, Machine] = {m.name: m for m in [
    Machine("mps2-an385", **_MPS2),
    Machine("mps2-an386", **_MPS2),
    Machine("mps2-an500", **_MPS2),
    # Secure state: SSRAM1's Secure alias (QEMU's initial Secure VTOR), SSRAM2&3's Secure alias
    Machine("mps2-an505", code_origin=0x10000000, code_bytes=4 * MiB, ram_origin=0x38000000, ram_bytes=4 * MiB,
            instructions_per_tick=(50, 1), uart_base=0x50200000),
    # vectors in the ITCM at 0 (VTOR resets to 0), code in the QSPI flash (read-only), data in ISRAM0+1
    Machine("mps3-an547", code_origin=0x38000000, code_bytes=8 * MiB, ram_origin=0x31000000, ram_bytes=4 * MiB,
            vector_origin=0x00000000, instructions_per_tick=(125, 4), uart_base=0x59303000),
]}


@dataclass(frozen=True)
class Board:
    """One microcontroller board (or QEMU machine).

    ``cpu`` is GCC's ``-mcpu`` value (also TVM's ``mcpu``); ``fpu`` GCC's ``-mfpu``
    (None: soft float). ``sram_bytes`` is the largest contiguous SRAM block, the
    budget for the arena, the I/O buffers and the stack; ``flash_bytes`` the
    budget for code and constants.
    """

    name: str
    description: str
    core: str
    cpu: str
    fpu: str | None
    sram_bytes: int
    flash_bytes: int
    qemu_machine: str | None = None
    qemu_stand_in: str | None = None

    @property
    def dsp(self) -> bool:
        """Whether the core has the DSP extension (SMLAD, SXTB16, ...: ARMv7E-M and ARMv8-M Mainline with DSP):
        the microkernel library's dual 16-bit multiply-accumulate path; plain C elsewhere."""
        return self.cpu in _DSP_CPUS

    @property
    def runnable(self) -> bool:
        """Whether :func:`~tvm_memsched.micro.run_qemu` can run builds for this board."""
        return self.emulator is not None

    @property
    def emulator(self) -> str | None:
        """The QEMU machine that runs builds for this board (itself or its stand-in)."""
        return self.qemu_machine or self.qemu_stand_in

    @property
    def machine(self) -> Machine:
        """The memory map builds for this board are linked for: its QEMU machine's (a board without one
        is linked as for an MPS2 machine, for size measurements)."""
        return MACHINES.get(self.emulator or "", MACHINES["mps2-an385"])

    @property
    def mve(self) -> bool:
        """Whether the core has the M-profile Vector Extension (Helium: Cortex-M55, Cortex-M85)."""
        return self.cpu in ("cortex-m55", "cortex-m85")

    def cflags(self) -> list[str]:
        """The GCC code-generation flags for this board's core."""
        flags = [f"-mcpu={self.cpu}", "-mthumb"]
        if self.fpu:
            flags += ["-mfloat-abi=hard", f"-mfpu={self.fpu}"]
        else:
            flags += ["-mfloat-abi=soft"]
        return flags

    def tvm_target(self) -> dict:
        """TVM's C target for this board (``mcpu`` only changes target keys, not the C)."""
        return {"kind": "c", "mcpu": self.cpu}

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "core": self.core, "cpu": self.cpu,
                "fpu": self.fpu, "dsp": self.dsp, "sram_bytes": self.sram_bytes, "flash_bytes": self.flash_bytes,
                "qemu_machine": self.qemu_machine, "qemu_stand_in": self.qemu_stand_in}


#: GCC -mcpu values whose cores have the DSP extension (the compiler then defines __ARM_FEATURE_DSP)
_DSP_CPUS = frozenset({"cortex-m4", "cortex-m7", "cortex-m33", "cortex-m35p", "cortex-m55", "cortex-m85"})

_LIST = [
    # QEMU machines (MACHINES has their memory maps)
    Board("mps2-an385", "QEMU MPS2 AN385 (ARM Cortex-M3 FPGA image)", "Cortex-M3", "cortex-m3", None,
          4 * MiB, 4 * MiB, qemu_machine="mps2-an385"),
    Board("mps2-an386", "QEMU MPS2 AN386 (ARM Cortex-M4 FPGA image, single-precision FPU)", "Cortex-M4F",
          "cortex-m4", "fpv4-sp-d16", 4 * MiB, 4 * MiB, qemu_machine="mps2-an386"),
    Board("mps2-an500", "QEMU MPS2 AN500 (ARM Cortex-M7 FPGA image, double-precision FPU)", "Cortex-M7",
          "cortex-m7", "fpv5-d16", 4 * MiB, 4 * MiB, qemu_machine="mps2-an500"),
    Board("mps2-an505", "QEMU MPS2 AN505 (Arm Cortex-M33 FPGA image: DSP, single-precision FPU; runs Secure)",
          "Cortex-M33", "cortex-m33", "fpv5-sp-d16", 4 * MiB, 4 * MiB, qemu_machine="mps2-an505"),
    Board("mps3-an547", "QEMU MPS3 AN547 (Arm Cortex-M55 FPGA image: Helium MVE-I/MVE-F, FPU): 4 MiB ISRAM, "
          "8 MiB QSPI flash", "Cortex-M55", "cortex-m55", "auto", 4 * MiB, 8 * MiB, qemu_machine="mps3-an547"),
    Board("mps2-an385-m0plus", "Cortex-M0+ (ARMv6-M code, soft float) on QEMU's MPS2 AN385: the Cortex-M3 runs "
          "the same instructions (instruction counts are the v6-M code's; cycles are not modelled)",
          "Cortex-M0+", "cortex-m0plus", None, 4 * MiB, 4 * MiB, qemu_stand_in="mps2-an385"),
    # Real boards (fit checks; runs on the QEMU machine with the same core and the board's memory sizes)
    Board("nucleo_f746zg", "ST Nucleo-144 STM32F746ZG: 320 KB SRAM (DTCM+SRAM1+SRAM2), 1 MB flash",
          "Cortex-M7", "cortex-m7", "fpv5-sp-d16", 320 * KiB, 1 * MiB, qemu_stand_in="mps2-an500"),
    Board("stm32f746g_disco", "ST 32F746G-DISCO (STM32F746NG): 320 KB SRAM, 1 MB flash",
          "Cortex-M7", "cortex-m7", "fpv5-sp-d16", 320 * KiB, 1 * MiB, qemu_stand_in="mps2-an500"),
    Board("sparkfun_edge", "SparkFun Edge (Ambiq Apollo3 Blue): 384 KB SRAM, 1 MB flash",
          "Cortex-M4F", "cortex-m4", "fpv4-sp-d16", 384 * KiB, 1 * MiB, qemu_stand_in="mps2-an386"),
    Board("nrf52840dk", "Nordic nRF52840 DK (nRF52840; also Arduino Nano 33 BLE): 256 KB RAM, 1 MB flash",
          "Cortex-M4F", "cortex-m4", "fpv4-sp-d16", 256 * KiB, 1 * MiB, qemu_stand_in="mps2-an386"),
    Board("nucleo_l4r5zi", "ST Nucleo-144 STM32L4R5ZI: 640 KB SRAM (SRAM1+2+3), 2 MB flash",
          "Cortex-M4F", "cortex-m4", "fpv4-sp-d16", 640 * KiB, 2 * MiB, qemu_stand_in="mps2-an386"),
    Board("nucleo_f446re", "ST Nucleo-64 STM32F446RE: 128 KB SRAM, 512 KB flash",
          "Cortex-M4F", "cortex-m4", "fpv4-sp-d16", 128 * KiB, 512 * KiB, qemu_stand_in="mps2-an386"),
    Board("nucleo_f401re", "ST Nucleo-64 STM32F401RE: 96 KB SRAM, 512 KB flash",
          "Cortex-M4F", "cortex-m4", "fpv4-sp-d16", 96 * KiB, 512 * KiB, qemu_stand_in="mps2-an386"),
    Board("nrf5340dk", "Nordic nRF5340 DK (nRF5340 application core, Cortex-M33 with DSP and FPU): 512 KB RAM, "
          "1 MB flash", "Cortex-M33", "cortex-m33", "fpv5-sp-d16", 512 * KiB, 1 * MiB, qemu_stand_in="mps2-an505"),
    Board("b_u585i_iot02a", "ST B-U585I-IOT02A (STM32U585AI, Cortex-M33 with DSP and FPU): 768 KB SRAM "
          "(SRAM1+2+3, contiguous), 2 MB flash", "Cortex-M33", "cortex-m33", "fpv5-sp-d16", 768 * KiB, 2 * MiB,
          qemu_stand_in="mps2-an505"),
    Board("alif_e7_hp", "Alif Ensemble E7 AppKit, high-performance core (Cortex-M55 with Helium): its 1 MB DTCM "
          "for data, 256 KB ITCM + MRAM for code (fit: 1 MB RAM, 5.5 MB MRAM)", "Cortex-M55", "cortex-m55",
          "auto", 1 * MiB, 5632 * KiB, qemu_stand_in="mps3-an547"),
    Board("rpi_pico", "Raspberry Pi Pico (RP2040, Cortex-M0+ core, no FPU): 264 KB SRAM, 2 MB flash",
          "Cortex-M0+", "cortex-m0plus", None, 264 * KiB, 2 * MiB, qemu_stand_in="mps2-an385"),
]

#: every known board by name
BOARDS: dict[str, Board] = {b.name: b for b in _LIST}


def board_names() -> list[str]:
    """The known board names, QEMU machines first."""
    return [b.name for b in _LIST]


def get_board(board) -> Board:
    """A :class:`Board` by name (a Board is returned as is).

    Raises :class:`UnsupportedError` listing the known boards for an unknown name.
    """
    if isinstance(board, Board):
        return board
    b = BOARDS.get(str(board)) or BOARDS.get(str(board).lower().replace("_", "-")) \
        or BOARDS.get(str(board).lower().replace("-", "_"))
    if b is None:
        raise UnsupportedError(f"unknown board '{board}'; known boards: {', '.join(board_names())}")
    return b


def boards_table() -> str:
    """A text table of the known boards (name, core, SRAM, flash, QEMU)."""
    rows = [("board", "core", "DSP", "SRAM", "flash", "QEMU")]
    for b in _LIST:
        qemu = b.qemu_machine or (f"stand-in {b.qemu_stand_in}" if b.qemu_stand_in else "-")
        rows.append((b.name, b.core, "yes" if b.dsp else "no", f"{b.sram_bytes // KiB} KiB",
                     f"{b.flash_bytes // KiB} KiB", qemu))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
