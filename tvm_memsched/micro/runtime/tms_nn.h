/* tms_nn.h: tvm_memsched's integer microkernels for Cortex-M (and any C99 target).
 *
 * Why a small hand-written library instead of TIR schedules: TVM 0.27 has no Cortex-M
 * tensorisation left (microTVM and its SMLAD intrinsics went with Relay), and its C code
 * generator keeps reduction accumulators in workspace buffers. The kernels here compute exactly
 * what tvm_memsched's integer TIR kernels compute (TFLite's reference kernels, bit for bit), with
 *   - int32 accumulators in registers;
 *   - the input zero point folded into a per-channel bias at compile time
 *     (bias' = bias - zp_in * sum(weights)); padding is read as zp_in, so it still adds nothing;
 *   - register blocking: 2 output pixels x 2 output channels per inner loop, so every loaded
 *     input word feeds two channels and every weight word two pixels;
 *   - on cores with the DSP extension (__ARM_FEATURE_DSP: Cortex-M4/M7/M33/M55) four int8 products
 *     per pair of SMLAD instructions, operands widened with SXTB16; plain C elsewhere (Cortex-M0+/M3,
 *     the host). TMS_NN_EMULATE_DSP compiles the DSP path with portable C for the instructions, so
 *     the host can test it; TMS_NN_NO_DSP forces the plain path;
 *   - on cores with Helium (__ARM_FEATURE_MVE: Cortex-M55/M85) the convolution and fully connected dot
 *     products as predicated 16-lane int8 reductions (VMLADAVA, 16 products per instruction), tails
 *     predicated with VCTP; TMS_NN_NO_MVE forces the DSP path. An export for such a core packs its
 *     convolutions, depthwise convolutions and fully connected layers in the Helium layouts instead and
 *     calls their own entry points (tms_nn_helium.inc: K-contiguous weights, four pixels per weight load,
 *     lane-parallel depthwise, vector requantisation; plain C where built without MVE); ADD runs four lanes
 *     at a time.
 * Weights come packed by tvm_memsched.micro.nn (same bytes, another order, rows padded to four):
 * channel pairs interleaved every four reduction elements, [OC/2][K/4][2][4]; depthwise weights
 * as four-channel blocks of every tap, [C/4][taps][4]. Each convolution
 * call gathers two output pixels' input windows into a small column buffer laid out the same way
 * ([K/4][2][4], its workspace, planned in the arena like any other) before it writes any output,
 * which keeps every in-place overlap tvm_memsched proved on the TIR kernel safe here too. On cores with the
 * DSP extension and no Helium the export calls tms_conv_s8_wide (the pair of windows gathered widened to int16)
 * and packs fully connected weights that fit it in the pair16 layout (TMS_PACK_PAIR16).
 *
 * Requantisation is TFLite's MultiplyByQuantizedMultiplier (gemmlowp double rounding). A channel
 * table (tms_chan_t) holds the folded bias, the multiplier and the shifts; its first entry is a
 * header whose flags say whether the fast epilogue is exact for this call (proven at compile time
 * from the weights: |accumulator| < 2^30, no left shift, right shift >= 1).
 */
#ifndef TMS_NN_H_
#define TMS_NN_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* one output channel: folded bias, Q0.31 multiplier, shifts (right - 1 | left << 8 | right << 16) */
typedef struct {
  int32_t bias;
  int32_t mult;
  int32_t shift;
} tms_chan_t;

/* header entry (table[0]): flags */
#define TMS_RQ_FAST 1
/* the call's weights and table are in the Helium layouts (tms_nn_helium.inc: written for cores with MVE) */
#define TMS_PACK_HELIUM 4
/* a fully connected layer's weights in the pair16 layout (two channels' int8 weights as one int16 per input:
 * tvm_memsched.micro.nn.pack_pair16; written for cores with the DSP extension, computed by any build) */
#define TMS_PACK_PAIR16 8

typedef struct {
  uint16_t batch, in_h, in_w, in_c, out_h, out_w, out_c;
  uint8_t kh, kw, sh, sw, dh, dw;
  int16_t pad_t, pad_l;
  int8_t in_zp, out_zp, act_min, act_max;
} tms_conv_t;

typedef struct {
  uint16_t rows, in_n, out_n;
  int8_t in_zp, out_zp, act_min, act_max;
} tms_fc_t;

typedef struct {
  uint16_t batch, in_h, in_w, c, out_h, out_w;
  uint8_t kh, kw, sh, sw;
  int16_t pad_t, pad_l;
  int8_t act_min, act_max;
} tms_pool_t;

typedef struct {
  uint32_t n;              /* elements (a and b have the output's shape) */
  int32_t a_off, b_off;    /* minus the inputs' zero points */
  int32_t left_shift;      /* TFLite's 20 */
  int32_t a_mult, a_shift, b_mult, b_shift, out_mult, out_shift; /* shifts as in tms_chan_t */
  int8_t out_zp, act_min, act_max;
  uint8_t flags;           /* TMS_RQ_FAST: all three rescalings proven exact in the fast form; TMS_ADD_SUB */
} tms_add_t;

#define TMS_ADD_SUB 2

/* most taps (kh * kw) tms_dwconv_s8 takes, and the bytes of scratch it needs (4-byte aligned) */
#define TMS_DW_MAX_TAPS 64
#define TMS_DW_SCRATCH_BYTES(taps) (9u * (unsigned)(taps))

/* float32 kernels: NHWC, weights OHWI (depthwise 1HWC, dense (N, K)), optional per-channel bias and a
 * residual of the output's shape added before the activation range [lo, hi]. Each output is summed
 * over (kernel row, kernel column, input channel) like TVM's NHWC kernels and TFLite's reference
 * kernels; with TMS_F_FMA the products are fused (VFMA on FPU cores: faster, last-bit differences),
 * without it the floats are theirs. */
#define TMS_F_BIAS 1
#define TMS_F_RESIDUAL 2
#define TMS_F_LO 4
#define TMS_F_HI 8
#define TMS_F_FMA 16

typedef struct {
  uint16_t batch, in_h, in_w, in_c, out_h, out_w, out_c;
  uint8_t kh, kw, sh, sw, dh, dw;
  int16_t pad_t, pad_l;
  uint8_t flags;
  float lo, hi;
} tms_convf_t;

typedef struct {
  uint16_t rows, in_n, out_n;
  uint8_t flags;
  float lo, hi;
} tms_fcf_t;

void tms_conv_f32(const tms_convf_t* p, const float* x, const float* w, const float* bias, const float* res,
                  float* y);
void tms_dwconv_f32(const tms_convf_t* p, const float* x, const float* w, const float* bias, const float* res,
                    float* y);
void tms_fc_f32(const tms_fcf_t* p, const float* x, const float* w, const float* bias, const float* res, float* y);
/* the same with weights and biases kept IEEE float16 (bits), widened exactly as they are read */
void tms_conv_f32h(const tms_convf_t* p, const float* x, const uint16_t* w, const uint16_t* bias, const float* res,
                   float* y);
void tms_dwconv_f32h(const tms_convf_t* p, const float* x, const uint16_t* w, const uint16_t* bias,
                     const float* res, float* y);
void tms_fc_f32h(const tms_fcf_t* p, const float* x, const uint16_t* w, const uint16_t* bias, const float* res,
                 float* y);
/* dynamic-range quantization of each of `batches` batches of `len` floats, as LiteRT quantizes a hybrid
 * operator's input: y[3b] = scale, y[3b + 1] = its float inverse, y[3b + 2] = zero point (see
 * tvm_memsched.relax.frontends.tflite_hybrid.quantization_params, which this computes bit for bit) */
void tms_quant_params_f32(uint32_t batches, uint32_t len, int32_t asymmetric, const float* x, float* y);
/* dynamic-range quantized ("hybrid") operators, as LiteRT's builtin kernels compute them: each batch of the
 * float32 input quantized on the fly with its parameters qp (tms_quant_params_f32 first, with TMS_F_ASYM:
 * asymmetric, else symmetric), int8 weights packed as the integer kernels' (the depthwise one's: kh * kw * C
 * as in the file), the int32 sums of (q - zp) * w scaled back to float32: (sum * weight scale) * input scale
 * with TMS_F_WFIRST, else sum * (weight scale * input scale), plus the bias (TMS_F_BIAS), clamped (TMS_F_LO,
 * TMS_F_HI). tab (4-byte aligned): C weight scales, C biases, then (TMS_F_SUMS; not the depthwise one) each
 * output channel's sum of weights, int32. col (4-byte aligned): the two quantized windows (TMS_CONV_COL_BYTES),
 * then, with TMS_F_ASYM and without TMS_F_SUMS, C int32 (C rounded up to even) for the sums, computed per call
 * (a symmetric zero point, 0, needs no sums). A fully connected
 * layer is a 1 x 1 convolution of 1 x 1 images, one batch per row (each row quantized with its own
 * parameters). */
#define TMS_F_WFIRST 32
#define TMS_F_ASYM 64
#define TMS_F_SUMS 128
void tms_hconv_f32(const tms_convf_t* p, const float* x, const int8_t* w, const void* tab, float* y,
                   const float* qp, int8_t* col);
/* consume != 0: the caller never reads x again (the export proves it), so each value is quantized once, over
 * itself, before the taps read it (else every tap quantizes what it reads) */
void tms_hdwconv_f32(const tms_convf_t* p, const float* x, const int8_t* w, const void* tab, float* y,
                     const float* qp, int32_t consume);

/* bytes of column buffer tms_conv_s8 needs */
#define TMS_CONV_COL_BYTES(kh, kw, in_c) (2u * ((((unsigned)(kh) * (kw) * (in_c)) + 3u) & ~3u))
/* the same for the Helium layouts (TMS_PACK_HELIUM): four windows, each rounded up to 16 bytes; a depthwise
 * convolution's scratch then (instead of TMS_DW_SCRATCH_BYTES): two offsets per tap, C rounded up to 16 bytes */
#define TMS_HL_CONV_COL_BYTES(kh, kw, in_c) (4u * ((((unsigned)(kh) * (kw) * (in_c)) + 15u) & ~15u))
#define TMS_HL_DW_SCRATCH_BYTES(taps, c) (8u * (unsigned)(taps) + (((unsigned)(c) + 15u) & ~15u))

/* CONV_2D (groups 1), NHWC, packed weights; col: TMS_CONV_COL_BYTES bytes, 4-byte aligned. */
void tms_conv_s8(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                 int8_t* col);
/* The same with each pair of windows widened to int16 once (cores with the DSP extension and no Helium; on
 * others it is tms_conv_s8); col: TMS_CONV_WIDE_COL_BYTES bytes, 4-byte aligned. */
#define TMS_CONV_WIDE_COL_BYTES(kh, kw, in_c) (2u * TMS_CONV_COL_BYTES(kh, kw, in_c))
void tms_conv_s8_wide(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                      int8_t* col);
/* DEPTHWISE_CONV_2D with depth multiplier 1, NHWC, weights packed per four-channel block (pairs of taps);
 * scratch: TMS_DW_SCRATCH_BYTES(kh * kw) bytes, 4-byte aligned. */
void tms_dwconv_s8(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                   void* scratch);
/* FULLY_CONNECTED: rows x in_n -> rows x out_n, packed weights (weight zero point 0). */
void tms_fc_s8(const tms_fc_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y);
/* The same three over the Helium layouts (tvm_memsched.micro.nn.pack_helium, helium_table: TMS_PACK_HELIUM),
 * written for cores with MVE (plain C elsewhere); col: TMS_HL_CONV_COL_BYTES, scratch: TMS_HL_DW_SCRATCH_BYTES
 * bytes, 4-byte aligned. */
void tms_conv_s8_helium(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                        int8_t* col);
void tms_dwconv_s8_helium(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                          void* scratch);
void tms_fc_s8_helium(const tms_fc_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y);
/* ADD / SUB of two int8 tensors of the same shape (TFLite's AddFunc: both inputs rescaled after a left
 * shift, summed, rescaled to the output). */
void tms_add_s8(const tms_add_t* p, const int8_t* a, const int8_t* b, int8_t* y);
/* y[i] = table[x[i] + 128]: any int8 -> int8 element-wise operator TFLite computes through a table. */
void tms_lut_s8(uint32_t n, const int8_t* x, const int8_t* table, int8_t* y);
/* MAX_POOL_2D over the valid part of each window, clamped to the activation range. */
void tms_maxpool_s8(const tms_pool_t* p, const int8_t* x, int8_t* y);
/* AVERAGE_POOL_2D: sum of the valid part of the window / its size, rounded half away from zero. */
void tms_avgpool_s8(const tms_pool_t* p, const int8_t* x, int8_t* y);

#ifdef __cplusplus
}
#endif

#endif /* TMS_NN_H_ */
