/* ee_protocol.h: the command protocol of MLPerf Tiny's runner (EEMBC EnergyRunner), device side.
 *
 * The runner sends ASCII commands ending in '%' over the serial port; the device answers with lines
 * ending in "\r\n" and finishes every answer with "m-ready". Lines starting "m-" are messages,
 * "e-[...]" errors. Commands:
 *
 *   name                 m-name-dut-[<vendor>]
 *   profile              m-profile-[<firmware version>], m-model-[<model version>]
 *   help                 the command list
 *   timestamp            m-lap-us-<microseconds>
 *   db load N            m-[Expecting N bytes]: the next N downloaded bytes are the model's input
 *   db HEXBYTES          two hex digits per byte, appended; m-load-done when N bytes have arrived
 *   db print [N [OFF]]   m-buffer-xx-xx-... (8 bytes a line): the downloaded bytes
 *   infer N [W]          W warm-up inferences (default 10), then N timed ones between two timestamps:
 *                        m-warmup-start-W, m-warmup-done, m-infer-start-N, m-lap-us-T0, m-lap-us-T1,
 *                        m-infer-done, m-results-[...]
 *   results              m-results-[...] of the last inference
 *
 * Malformed commands (unknown names, missing or bad numbers, N beyond the buffer, bad or odd hex,
 * data without 'db load', commands longer than EE_CMD_SIZE characters) are answered with an
 * "e-[...]" line and change nothing. '\r' and '\n' between commands are ignored.
 */
#ifndef EE_PROTOCOL_H_
#define EE_PROTOCOL_H_

#include <stddef.h>
#include <stdint.h>

#include "th_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* wire protocol strings: the runner matches them */
#define EE_MONITOR_VERSION "2.2.0"
#define EE_FW_VERSION "ULPMark for tinyML Firmware V0.0.1"
#define EE_DEVICE_NAME "dut"
#define EE_CMD_TERMINATOR '%'
#define EE_MSG_READY "m-ready\r\n"
#define EE_MSG_INIT_DONE "m-init-done\r\n"
#define EE_MSG_NAME "m-name-%s-[%s]\r\n"
#define EE_MSG_TIMESTAMP "m-lap-us-%lu\r\n"
#ifndef EE_CFG_ENERGY_MODE
#define EE_CFG_ENERGY_MODE 0
#endif
#if EE_CFG_ENERGY_MODE == 1
#define EE_MSG_TIMESTAMP_MODE "m-timestamp-mode-energy\r\n"
#else
#define EE_MSG_TIMESTAMP_MODE "m-timestamp-mode-performance\r\n"
#endif

/* longest command accepted (the runner's 'db' chunks fit) */
#ifndef EE_CMD_SIZE
#define EE_CMD_SIZE 80u
#endif
/* warm-up inferences of 'infer N' without W */
#ifndef EE_DEFAULT_WARMUP
#define EE_DEFAULT_WARMUP 10u
#endif

typedef enum { EE_ARG_CLAIMED, EE_ARG_UNCLAIMED } arg_claimed_t;

void ee_benchmark_initialize(void);                   /* port, clock, model; m-init-done, m-ready */
void ee_serial_callback(char c);                      /* one received character */
void ee_serial_command_parser_callback(char* command);/* one complete command (after th_command_ready) */
arg_claimed_t ee_profile_parse(char* command);        /* the benchmark's commands (help, profile, db, infer, results) */
arg_claimed_t ee_buffer_parse(char* command);         /* db ... */
void ee_infer(size_t n, size_t n_warmup);
long ee_hexdec(const char* hex);                      /* -1: not hex */
size_t ee_get_buffer(uint8_t* buffer, size_t max_len);/* copies the downloaded bytes; returns how many */

/* additions: the download buffer in place (16-byte aligned) and how much of 'db load N' has arrived */
uint8_t* ee_buffer_data(void);
size_t ee_buffer_loaded(void);
size_t ee_buffer_expected(void);

#ifdef __cplusplus
}
#endif

#endif /* EE_PROTOCOL_H_ */
