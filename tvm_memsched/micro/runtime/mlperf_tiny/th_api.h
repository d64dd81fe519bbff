/* th_api.h: the device side of the MLPerf Tiny benchmark for a model exported by tvm_memsched.
 *
 * Written for tvm_memsched after the public interface of MLPerf Tiny's runner (EEMBC EnergyRunner):
 * the th_* functions the submitter implements and the ee_* functions of the command protocol keep
 * the names of mlcommons/tiny's benchmark/api headers, so firmware written against that API finds
 * them; the code is our own.
 *
 * Files (tvm_memsched/micro/runtime/mlperf_tiny, copied next to a generated th_config.h/.c):
 *   ee_protocol.c   commands from the runner ('%'-terminated ASCII), the download buffer, the
 *                   inference loop with its two timestamps (ee_*)
 *   th_model.c      th_load_tensor, th_infer, th_results for the exported model (th_config.h)
 *   th_io.c         th_printf (a small formatter: no C library printf), th_timestamp
 *   th_main.c       main(): characters from the serial port into the protocol, commands run
 *   th_port_*.c     the board: serial port and a microsecond clock (th_port_cmsdk.c: the CMSDK APB
 *                   UART and SysTick of Arm's MPS2/MPS3 FPGA images and QEMU's models of them;
 *                   th_port_stdio.c: stdin/stdout of a host program, for tests)
 */
#ifndef TH_API_H_
#define TH_API_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- the submitter's API (MLPerf Tiny names) */
void th_load_tensor(void);        /* downloaded bytes -> the model's inputs (see th_config.h: conversions) */
void th_infer(void);              /* one inference */
void th_results(void);            /* m-results-[v0,v1,...] */
void th_timestamp(void);          /* m-lap-us-<microseconds> */
void th_timestamp_initialize(void);
void th_serialport_initialize(void);
void th_final_initialize(void);
void th_pre(void);
void th_post(void);
void th_command_ready(char volatile* command);
char th_getchar(void);
void th_printf(const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
int th_vprintf(const char* fmt, va_list ap);

/* ---------------------------------------------------------------- additions of this implementation */
/* 1 when th_load_tensor accepted the downloaded bytes (the right number of them) */
int th_tensor_ready(void);
/* value printing of th_results: fixed-point with `decimals` digits, or scientific with `digits`
 * significant digits (nan, inf and -inf as such) */
void th_print_fixed(double v, unsigned decimals);
void th_print_scientific(double v, unsigned digits);

/* the board port (th_port_*.c) */
void th_port_putchar(char c);             /* blocking */
void th_port_timer_start(void);           /* start the free-running clock */
uint64_t th_port_microseconds(void);      /* since th_port_timer_start */

/* how th_load_tensor turns downloaded bytes into an input of the model */
enum {
  TH_WIRE_COPY = 0,           /* the input's bytes as the model stores them */
  TH_WIRE_UINT8_TO_INT8 = 1,  /* uint8 pixels -> int8 (minus 128): MLPerf Tiny's image benchmarks */
  TH_WIRE_FLOAT_TO_INT8 = 2,  /* float32 values -> quantized int8 (round half away from zero, clamp) */
  TH_WIRE_FLOAT_TO_UINT8 = 3  /* float32 values -> quantized uint8 */
};

/* element types of the model's outputs */
enum {
  TH_TYPE_INT8 = 0, TH_TYPE_UINT8, TH_TYPE_INT16, TH_TYPE_UINT16, TH_TYPE_INT32, TH_TYPE_UINT32,
  TH_TYPE_INT64, TH_TYPE_UINT64, TH_TYPE_FLOAT32, TH_TYPE_FLOAT64, TH_TYPE_BOOL
};

typedef struct {
  uint32_t wire_offset;   /* where the input starts in the downloaded bytes */
  uint32_t wire_bytes;    /* its downloaded bytes */
  uint32_t stage_offset;  /* where its model bytes start in the staging buffer */
  uint32_t bytes;         /* the model's bytes */
  uint32_t count;         /* elements */
  uint8_t conversion;     /* TH_WIRE_* */
  float scale;            /* quantization (TH_WIRE_FLOAT_TO_*) */
  int32_t zero_point;
} th_input_desc_t;

typedef struct {
  uint32_t offset;        /* in the output buffer (model_run API) */
  uint32_t count;         /* elements */
  uint8_t type;           /* TH_TYPE_* */
  uint8_t quantized;      /* 1: printed as (q - zero_point) * scale */
  uint8_t decimals;       /* fixed-point digits of printed dequantized values */
  float scale;
  int32_t zero_point;
} th_output_desc_t;

#ifdef __cplusplus
}
#endif

#endif /* TH_API_H_ */
