/* th_main.c: the device under test's main loop for MLPerf Tiny's runner.
 *
 * Characters are read from the serial port (th_getchar, polled) into the protocol; a complete
 * command is run here, outside any interrupt. A port that receives in a UART interrupt calls
 * ee_serial_callback from it instead and keeps only the dispatch part of this loop.
 *
 * TH_EXIT_COMMAND (emulation only: tvm_memsched's QEMU driver): the command "exit" leaves main with
 * status 0, which the semihosting C library passes to the emulator as its exit status. */
#include <string.h>

#include "ee_protocol.h"
#include "th_api.h"

static char volatile* volatile g_pending; /* a complete command, set by th_command_ready */

void th_command_ready(char volatile* command) { g_pending = command; }

int main(void) {
  ee_benchmark_initialize();
  for (;;) {
    ee_serial_callback(th_getchar());
    if (g_pending != NULL) {
      char* command = (char*)g_pending;
      g_pending = NULL;
#ifdef TH_EXIT_COMMAND
      if (strcmp(command, "exit") == 0) {
        th_printf("m-exit\r\n");
        return 0;
      }
#endif
      ee_serial_command_parser_callback(command);
    }
  }
}
