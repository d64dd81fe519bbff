/* th_port_cmsdk.c: the MLPerf Tiny harness's serial port and clock on Arm's MPS2/MPS3 FPGA images
 * (and QEMU's mps2-an385/an386/an500/an505 and mps3-an547 machines).
 *
 * Serial: the CMSDK APB UART at TH_UART_BASE (UART0, QEMU's first serial port), polled, 8N1 at
 * TH_UART_BAUD from a TH_UART_CLOCK_HZ peripheral clock. Clock: SysTick on the processor clock
 * (TH_TIMER_HZ), 24-bit, its wraps counted in SysTick_Handler; under QEMU's -icount shift=0 a
 * microsecond is 1000 instructions. th_config.h sets the three for the export's board. */
#include "th_api.h"
#include "th_config.h"

#ifndef TH_UART_BASE
#error "TH_UART_BASE: this board has no CMSDK UART the harness knows; write a th_port_*.c for it"
#endif
#ifndef TH_UART_BAUD
#define TH_UART_BAUD 115200u
#endif

#define UART_REG(offset) (*(volatile uint32_t*)(uintptr_t)(TH_UART_BASE + (offset)))
#define UART_DATA UART_REG(0x000u)
#define UART_STATE UART_REG(0x004u) /* bit 0: transmit buffer full, bit 1: receive buffer full */
#define UART_CTRL UART_REG(0x008u)  /* bit 0: transmit enable, bit 1: receive enable */
#define UART_BAUDDIV UART_REG(0x010u)

#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)

void th_serialport_initialize(void) {
  uint32_t divider = TH_UART_CLOCK_HZ / TH_UART_BAUD;
  UART_BAUDDIV = divider < 16u ? 16u : divider; /* the UART's minimum */
  UART_CTRL = 3u;
}

char th_getchar(void) {
  while ((UART_STATE & 2u) == 0u) {
  }
  return (char)(UART_DATA & 0xFFu);
}

void th_port_putchar(char c) {
  while ((UART_STATE & 1u) != 0u) {
  }
  UART_DATA = (uint32_t)(unsigned char)c;
}

static volatile uint32_t g_wraps;

void SysTick_Handler(void);
void SysTick_Handler(void) { g_wraps++; }

void th_port_timer_start(void) {
  SYST_CSR = 0u;
  SYST_RVR = 0xFFFFFFu;
  SYST_CVR = 0u;
  g_wraps = 0u;
  SYST_CSR = 7u; /* enable, interrupt on wrap, processor clock */
  while (SYST_CVR == 0u) {
    /* the first tick loads the reload value */
  }
}

uint64_t th_port_microseconds(void) {
  uint32_t wraps, value;
  do {
    wraps = g_wraps;
    value = SYST_CVR;
  } while (wraps != g_wraps);
  uint64_t ticks = ((uint64_t)wraps << 24) + (0xFFFFFFu - (value & 0xFFFFFFu));
  return ticks * 1000000u / TH_TIMER_HZ;
}
