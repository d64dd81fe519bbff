/* Cortex-M start-up for QEMU's MPS2/MPS3 machines (mps2-an385 / an386 / an500 / an505, mps3-an547)
 * with newlib's rdimon (semihosting) C library.
 *
 * The vector table sits where the machine's core fetches the initial stack pointer and the reset
 * vector (the linker script places it: address 0, or 0x10000000 on the Secure-booted AN505). Reset_Handler enables the FPU when the build uses one (a
 * Cortex-M4F/M7 faults on the first floating-point instruction otherwise) and enters newlib's
 * _start (rdimon-crt0: zeroes .bss, opens the semihosting console, runs constructors, calls
 * main and passes main's return value to the host, so it becomes QEMU's exit status).
 * .data needs no copy loop: the linker script gives it its run address in RAM and QEMU's ELF
 * loader writes it there. A fault ends the run with a semihosting "run-time error" exit (QEMU
 * exits with status 1) instead of hanging. */
#include <stdint.h>

extern uint32_t __stack_top; /* linker script */
extern void _start(void);    /* newlib rdimon-crt0 */

static void semihosting_fail_exit(void) {
  /* SYS_EXIT (0x18) with ADP_Stopped_RunTimeErrorUnknown (0x20023) */
  register uint32_t r0 __asm__("r0") = 0x18u;
  register uint32_t r1 __asm__("r1") = 0x20023u;
  __asm__ volatile("bkpt 0xab" : : "r"(r0), "r"(r1) : "memory");
  for (;;) {
  }
}

void Default_Handler(void) { semihosting_fail_exit(); }
void HardFault_Handler(void) { semihosting_fail_exit(); }
void SysTick_Handler(void) __attribute__((weak, alias("Default_Handler")));

/* rdimon-crt0 asks the host for SYS_HEAPINFO and moves the stack pointer to the stack base QEMU
 * returns (the top of the 16 MiB PSRAM, not our RAM), then calls the weak hook _stack_init with
 * an empty stack. Overriding the hook puts the stack back at the top of the linker script's RAM
 * and sets librdimon's heap limit to the bottom of the stack reserve. */
__attribute__((naked)) void _stack_init(void) {
  __asm__ volatile(
      "ldr r3, =__stack_top   \n\t"
      "mov sp, r3             \n\t"
      "ldr r3, =__heap_limit  \n\t"
      "ldr r2, =__stack_limit \n\t"
      "str r2, [r3]           \n\t"
      "bx lr                  \n\t");
}

void Reset_Handler(void) {
#if defined(__ARM_ARCH_6M__)
  /* CCR (0xE000ED14) UNALIGN_TRP: an unaligned access faults, as it does on a Cortex-M0+ (the ARMv6-M code
   * runs on a Cortex-M3 stand-in, which would otherwise carry it out) */
  *(volatile uint32_t*)0xE000ED14u |= (1u << 3);
#endif
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
  /* CPACR (0xE000ED88): full access to coprocessors CP10 and CP11 (the FPU, and Helium's MVE on v8.1-M) */
  *(volatile uint32_t*)0xE000ED88u |= (0xFu << 20);
  __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
  _start();
  for (;;) {
  }
}

typedef void (*vector_t)(void);
#define VECTORS_8 \
  Default_Handler, Default_Handler, Default_Handler, Default_Handler, Default_Handler, Default_Handler, \
      Default_Handler, Default_Handler

__attribute__((section(".isr_vector"), used)) const vector_t g_vectors[16 + 32] = {
    (vector_t)(uintptr_t)&__stack_top, /* initial main stack pointer */
    Reset_Handler,                     /* reset */
    Default_Handler,                   /* NMI */
    HardFault_Handler,                 /* HardFault */
    HardFault_Handler,                 /* MemManage */
    HardFault_Handler,                 /* BusFault */
    HardFault_Handler,                 /* UsageFault */
    HardFault_Handler,                 /* SecureFault (ARMv8-M; reserved before) */
    0,
    0,
    0,
    Default_Handler, /* SVCall */
    Default_Handler, /* DebugMon */
    0,
    Default_Handler, /* PendSV */
    SysTick_Handler, /* SysTick */
    /* external interrupts 0-31 */
    VECTORS_8, VECTORS_8, VECTORS_8, VECTORS_8,
};
