/* th_model.c: the submitter's side of MLPerf Tiny for a model exported by tvm_memsched.
 *
 * th_config.h (generated with the harness) names the model's entry points and describes its inputs
 * and outputs. The runner downloads the inputs' bytes one input after the other (th_input_descs:
 * where each starts and how it becomes the model's bytes: copied as stored, uint8 pixels made int8,
 * or float32 values quantized). th_load_tensor converts them once into a staging buffer (the
 * download buffer itself when nothing is converted); every th_infer runs the model on them:
 *
 *  - a model with its inputs and outputs in the arena (TH_IO_IN_ARENA): the staged inputs are copied
 *    into the arena and <model>_invoke() runs; the copy is part of each timed inference (the arena's
 *    input bytes may be overwritten by the model, which writes outputs over inputs that died);
 *  - else <model>_run(inputs, outputs) reads the staged inputs in place and writes static output
 *    buffers.
 *
 * th_results prints every output element, in order, in one m-results-[...] line: quantized integers
 * dequantized, (q - zero_point) * scale as a float, with enough decimals to tell each step apart (at
 * least the reference submissions' 3); float outputs with 9 significant digits (float32 exactly);
 * other integers as integers. With TH_RESULTS_MSE (the anomaly-detection benchmark, ad01) it prints
 * one value instead: the mean squared difference between output 0, dequantized, and the downloaded
 * float32 input. */
#include <string.h>

#include "ee_protocol.h"
#include "th_api.h"
#include "th_config.h"

#if TH_STAGE_IN_DB
#define STAGE (ee_buffer_data())
#else
static _Alignas(16) uint8_t g_stage[TH_STAGE_BYTES];
#define STAGE (g_stage)
#endif

#if TH_IO_IN_ARENA
#define OUTPUT_DATA(k) ((const uint8_t*)TH_MODEL_OUTPUT(k))
#else
static _Alignas(16) uint8_t g_output_buffer[TH_OUTPUT_BUFFER_BYTES];
static const void* g_inputs[TH_NUM_INPUTS];
static void* g_outputs[TH_NUM_OUTPUTS];
#define OUTPUT_DATA(k) ((const uint8_t*)g_outputs[k])
#endif

static int g_ready;  /* th_load_tensor accepted the download */
static int g_ran;    /* an inference has run since */
static int g_status; /* its return value: 0, or the 1-based kernel call that failed */

int th_tensor_ready(void) { return g_ready; }

void th_final_initialize(void) {
#if !TH_IO_IN_ARENA
  for (int k = 0; k < TH_NUM_OUTPUTS; ++k) g_outputs[k] = g_output_buffer + th_output_descs[k].offset;
#endif
}

void th_pre(void) {}
void th_post(void) {}

/* round(value / scale) + zero_point, halves away from zero, clamped to [lo, hi] (MLPerf Tiny's
 * QuantizeFloatToInt8, without libm) */
static int32_t quantize(float value, float scale, int32_t zero_point, int32_t lo, int32_t hi) {
  float t = value / scale;
  if (t != t) return zero_point < lo ? lo : zero_point > hi ? hi : zero_point;
  if (t > 1.0e9f) return hi;
  if (t < -1.0e9f) return lo;
  double d = (double)t;
  long long r = d >= 0.0 ? (long long)(d + 0.5) : -(long long)(-d + 0.5);
  r += zero_point;
  return r < lo ? lo : r > hi ? hi : (int32_t)r;
}

void th_load_tensor(void) {
  g_ready = 0;
  g_ran = 0;
  if (ee_buffer_loaded() != (size_t)MAX_DB_INPUT_SIZE) {
    th_printf("e-[Input db has %lu bytes, the model takes %lu]\r\n", (unsigned long)ee_buffer_loaded(),
              (unsigned long)MAX_DB_INPUT_SIZE);
    return;
  }
  const uint8_t* wire = ee_buffer_data();
  for (int i = 0; i < TH_NUM_INPUTS; ++i) {
    const th_input_desc_t* d = &th_input_descs[i];
    const uint8_t* src = wire + d->wire_offset;
    uint8_t* dst = STAGE + d->stage_offset;
    switch (d->conversion) {
      case TH_WIRE_UINT8_TO_INT8:
        for (uint32_t e = 0; e < d->count; ++e) dst[e] = (uint8_t)(src[e] ^ 0x80u); /* u - 128, two's complement */
        break;
      case TH_WIRE_FLOAT_TO_INT8:
      case TH_WIRE_FLOAT_TO_UINT8: {
        int32_t lo = d->conversion == TH_WIRE_FLOAT_TO_INT8 ? -128 : 0;
        int32_t hi = d->conversion == TH_WIRE_FLOAT_TO_INT8 ? 127 : 255;
        for (uint32_t e = 0; e < d->count; ++e) {
          float v;
          memcpy(&v, src + 4u * e, sizeof(v));
          dst[e] = (uint8_t)quantize(v, d->scale, d->zero_point, lo, hi);
        }
        break;
      }
      default:
        if (dst != src) memcpy(dst, src, d->bytes);
        break;
    }
#if !TH_IO_IN_ARENA
    g_inputs[i] = dst;
#endif
  }
  g_ready = 1;
}

void th_infer(void) {
  if (!g_ready) return;
#if TH_IO_IN_ARENA
  for (int i = 0; i < TH_NUM_INPUTS; ++i) {
    memcpy(TH_MODEL_INPUT(i), STAGE + th_input_descs[i].stage_offset, th_input_descs[i].bytes);
  }
  g_status = TH_MODEL_INVOKE();
#else
  g_status = TH_MODEL_RUN(g_inputs, g_outputs);
#endif
  g_ran = 1;
}

/* element i of an integer output (not uint64 beyond int64's range) */
static long long integer_at(const th_output_desc_t* d, const uint8_t* p, uint32_t i) {
  switch (d->type) {
    case TH_TYPE_INT8: return (int8_t)p[i];
    case TH_TYPE_INT16: { int16_t v; memcpy(&v, p + 2u * i, 2u); return v; }
    case TH_TYPE_UINT16: { uint16_t v; memcpy(&v, p + 2u * i, 2u); return v; }
    case TH_TYPE_INT32: { int32_t v; memcpy(&v, p + 4u * i, 4u); return v; }
    case TH_TYPE_UINT32: { uint32_t v; memcpy(&v, p + 4u * i, 4u); return v; }
    case TH_TYPE_INT64:
    case TH_TYPE_UINT64: { int64_t v; memcpy(&v, p + 8u * i, 8u); return v; }
    default: return p[i]; /* uint8, bool */
  }
}

/* element i of an output as a double: dequantized, or its value */
static double output_value(const th_output_desc_t* d, const uint8_t* p, uint32_t i) {
  if (d->type == TH_TYPE_FLOAT32) {
    float v;
    memcpy(&v, p + 4u * i, 4u);
    return (double)v;
  }
  if (d->type == TH_TYPE_FLOAT64) {
    double v;
    memcpy(&v, p + 8u * i, 8u);
    return v;
  }
  long long q = integer_at(d, p, i);
  if (d->quantized) return (double)((float)(q - d->zero_point) * d->scale); /* in float, as TFLite */
  return (double)q;
}

#if !TH_RESULTS_MSE
static void print_output_element(const th_output_desc_t* d, const uint8_t* p, uint32_t i) {
  if (d->type == TH_TYPE_FLOAT32 || d->type == TH_TYPE_FLOAT64) {
    th_print_scientific(output_value(d, p, i), d->type == TH_TYPE_FLOAT32 ? 9u : 17u);
  } else if (d->quantized) {
    th_print_fixed(output_value(d, p, i), d->decimals);
  } else if (d->type == TH_TYPE_UINT64) {
    th_printf("%llu", (unsigned long long)integer_at(d, p, i));
  } else {
    th_printf("%lld", integer_at(d, p, i));
  }
}
#endif

void th_results(void) {
  if (!g_ran) {
    th_printf("e-[results: no inference since the input was loaded]\r\n");
    return;
  }
  if (g_status != 0) {
    th_printf("e-[%s failed in kernel call %d: %s]\r\n", TH_MODEL_NAME, g_status, TH_MODEL_LAST_ERROR());
    return;
  }
  th_printf("m-results-[");
#if TH_RESULTS_MSE
  {
    const th_output_desc_t* d = &th_output_descs[0];
    const uint8_t* x = ee_buffer_data() + th_input_descs[0].wire_offset;
    float sum = 0.0f;
    for (uint32_t i = 0; i < d->count; ++i) {
      float xi;
      memcpy(&xi, x + 4u * i, sizeof(xi));
      float diff = (float)output_value(d, OUTPUT_DATA(0), i) - xi;
      sum += diff * diff;
    }
    th_print_fixed((double)(sum / (float)d->count), TH_MSE_DECIMALS);
  }
#else
  for (int k = 0; k < TH_NUM_OUTPUTS; ++k) {
    const th_output_desc_t* d = &th_output_descs[k];
    for (uint32_t i = 0; i < d->count; ++i) {
      if (k > 0 || i > 0) th_port_putchar(',');
      print_output_element(d, OUTPUT_DATA(k), i);
    }
  }
#endif
  th_printf("]\r\n");
}
