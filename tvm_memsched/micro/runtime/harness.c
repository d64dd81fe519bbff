/* Test program for an exported model (host or Cortex-M under QEMU semihosting).
 *
 * harness_data.h/.c (generated next to this file) name the model's run function and hold fixed
 * inputs for HARNESS_INVOCATIONS invocations. For each, the program copies the inputs into RAM
 * buffers (as an application would; into the model's arena when its inputs and outputs live there,
 * HARNESS_IO_IN_ARENA: then it calls the model's invoke function), runs the model and prints every output as hex bytes, so the
 * host can compare them bit for bit with the reference (a stateful model carries its state from
 * one invocation to the next; HARNESS_INIT, when defined, initialises it first). On Cortex-M it also prints the instructions model_run executed (SysTick; exact with
 * QEMU's "-icount shift=0", where one instruction takes 1 ns of virtual time and SysTick ticks at
 * 25 MHz) and the stack it used (the stack reserve is painted before the run), for the first
 * invocation. main's return value is the exit status: 0 = ran, 1 = model_run failed. */
#define _POSIX_C_SOURCE 200809L /* write() under -std=c11 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "harness_data.h"

#ifdef HARNESS_IO_IN_ARENA /* inputs and outputs in the model's arena: the zero-copy entry points */
#define HARNESS_CALL() HARNESS_INVOKE()
#define HARNESS_IN_BUF(i) HARNESS_INPUT(i)
#define HARNESS_OUT_BUF(i) HARNESS_OUTPUT(i)
#else
#define HARNESS_CALL() HARNESS_RUN(harness_inputs, harness_outputs)
#define HARNESS_IN_BUF(i) harness_input_buffers[i]
#define HARNESS_OUT_BUF(i) harness_outputs[i]
#endif

static void put(const char* s) {
  size_t n = strlen(s);
  while (n > 0) {
    ssize_t k = write(1, s, n);
    if (k <= 0) return;
    s += k;
    n -= (size_t)k;
  }
}

static void put_uint(const char* label, uint64_t v) {
  char buf[32];
  size_t k = sizeof(buf) - 1;
  buf[k] = '\0';
  buf[--k] = '\n';
  do {
    buf[--k] = (char)('0' + (int)(v % 10u));
    v /= 10u;
  } while (v != 0u && k > 0u);
  put(label);
  put(buf + k);
}

static void put_hex(const uint8_t* p, size_t n) {
  static const char digits[] = "0123456789abcdef";
  char line[2 * 32 + 2];
  size_t i = 0;
  while (i < n) {
    size_t k = 0;
    for (size_t j = 0; j < 32 && i < n; ++j, ++i) {
      line[k++] = digits[p[i] >> 4];
      line[k++] = digits[p[i] & 15u];
    }
    line[k++] = '\n';
    line[k] = '\0';
    put(line);
  }
}

#if defined(__arm__)
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)
#define STACK_PAINT 0xA5u

static volatile uint32_t g_systick_wraps;
void SysTick_Handler(void) { g_systick_wraps++; }

static void systick_start(void) {
  SYST_CSR = 0u;
  SYST_RVR = 0xFFFFFFu;
  SYST_CVR = 0u;
  g_systick_wraps = 0u;
  SYST_CSR = 7u; /* enable, interrupt on wrap, processor clock */
  while (SYST_CVR == 0u) {
    /* the first tick loads the reload value */
  }
}

static uint64_t systick_ticks(void) {
  uint32_t wraps, value;
  do {
    wraps = g_systick_wraps;
    value = SYST_CVR;
  } while (wraps != g_systick_wraps);
  return ((uint64_t)wraps << 24) + (0xFFFFFFu - value);
}

extern char __stack_limit;

/* Fill the unused stack reserve below this frame with a pattern. */
static void __attribute__((noinline)) paint_stack(void) {
  volatile uint8_t* p = (volatile uint8_t*)&__stack_limit;
  volatile uint8_t* end = (volatile uint8_t*)__builtin_frame_address(0) - 64;
  while (p < end) *p++ = STACK_PAINT;
}

/* Lowest address below which the pattern is intact. */
static uintptr_t stack_low_water(void) {
  const volatile uint8_t* p = (const volatile uint8_t*)&__stack_limit;
  while (*p == STACK_PAINT) ++p;
  return (uintptr_t)p;
}
#endif

#if defined(__arm__)
/* instructions per SysTick tick under QEMU's -icount shift=0 (1 ns per instruction): 40 at the MPS2
 * images' 25 MHz; the build passes its machine's (50 on the AN505's 20 MHz, 125/4 on the AN547's 32 MHz) */
#ifndef HARNESS_TICK_INSTRUCTIONS
#define HARNESS_TICK_INSTRUCTIONS 40u
#endif
#ifndef HARNESS_TICK_DIVISOR
#define HARNESS_TICK_DIVISOR 1u
#endif
#define TICKS_TO_INSTRUCTIONS(t) ((uint64_t)(t) * HARNESS_TICK_INSTRUCTIONS / HARNESS_TICK_DIVISOR)
#endif

#if defined(__arm__) && defined(TVM_MEMSCHED_PROFILE)
/* Instructions of each kernel call of the first invocation (SysTick, 40 per tick under -icount shift=0;
 * the hook's own few instructions are included). */
#define HARNESS_MAX_PROFILE 4096
static uint64_t g_profile[HARNESS_MAX_PROFILE];
static uint64_t g_profile_t0;
static int g_profiling;
void tvm_memsched_profile_call(int k, int end) {
  if (!g_profiling || k < 0 || k >= HARNESS_MAX_PROFILE) return;
  if (!end) {
    g_profile_t0 = systick_ticks();
  } else {
    g_profile[k] += systick_ticks() - g_profile_t0;
  }
}
#endif

static int __attribute__((noinline)) run_model(int report) {
  if (!report) return HARNESS_CALL();
#if defined(__arm__)
  paint_stack();
  uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
  systick_start();
  uint64_t t0 = systick_ticks();
#ifdef TVM_MEMSCHED_PROFILE
  g_profiling = 1;
#endif
#endif
  int rc = HARNESS_CALL();
#if defined(__arm__)
  uint64_t ticks = systick_ticks() - t0;
#ifdef TVM_MEMSCHED_PROFILE
  g_profiling = 0;
  for (int k = 0; k < HARNESS_MAX_PROFILE; ++k) {
    if (g_profile[k] == 0u) continue;
    put_uint("profile_call ", (uint64_t)k);
    put_uint("profile_instructions ", TICKS_TO_INSTRUCTIONS(g_profile[k]));
  }
#endif
  SYST_CSR = 0u;
  uintptr_t low = stack_low_water();
  put_uint("instructions ", TICKS_TO_INSTRUCTIONS(ticks));
  put_uint("stack_used ", frame > low ? (uint64_t)(frame - low) : 0u);
#endif
  return rc;
}

int main(void) {
  put("tvm_memsched harness\n");
#ifdef HARNESS_INIT
  HARNESS_INIT();
#endif
  for (int j = 0; j < HARNESS_INVOCATIONS; ++j) {
    for (int i = 0; i < HARNESS_NUM_INPUTS; ++i) {
      memcpy(HARNESS_IN_BUF(i), harness_input_data[j * HARNESS_NUM_INPUTS + i], harness_input_bytes[i]);
    }
    int rc = run_model(j == 0);
    if (j == 0) put_uint("workspace_high_water ", (uint64_t)tvm_memsched_workspace_high_water());
    if (rc != 0) {
      put_uint("error_call ", (uint64_t)rc);
      put("error ");
      put(tvm_memsched_last_error());
      put("\n");
      return 1;
    }
    put_uint("invocation ", (uint64_t)j);
    for (int i = 0; i < HARNESS_NUM_OUTPUTS; ++i) {
      put_uint("output ", (uint64_t)i);
      put_hex((const uint8_t*)HARNESS_OUT_BUF(i), harness_output_bytes[i]);
    }
  }
  put("done\n");
  return 0;
}
