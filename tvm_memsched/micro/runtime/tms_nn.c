/* tms_nn.c: tvm_memsched's integer microkernels (see tms_nn.h for what and why). */
#include <string.h>

#include "tms_nn.h"

#if !defined(TMS_NN_NO_DSP) && (defined(TMS_NN_EMULATE_DSP) || \
                                (defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP))
#define TMS_DSP 1
#else
#define TMS_DSP 0
#endif
#if TMS_DSP && !defined(TMS_NN_EMULATE_DSP)
#define TMS_ASM 1
#else
#define TMS_ASM 0
#endif
/* Helium (MVE integer, Cortex-M55/M85): the convolution and fully connected dot products as predicated
 * 16-lane int8 multiply-accumulate reductions (VMLADAVA) over the same packed layouts; the Cortex-M4
 * assembly of those two kernels is then not used (the depthwise, ADD and pooling kernels keep theirs). */
#if !defined(TMS_NN_NO_MVE) && defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 1)
#define TMS_MVE 1
#include <arm_mve.h>
#else
#define TMS_MVE 0
#endif
/* ARMv6-M (Cortex-M0/M0+/M1: Thumb-1, eight low registers, MULS 32x32->32 only, no 32x32->64 multiply):
 * the requantisation in 32-bit pieces (a 64-bit product is a libgcc call there) and, on the core itself,
 * the dot products in Thumb-1 assembly. TMS_NN_EMULATE_V6M: the same C on the host (tests). */
#if !TMS_DSP && !TMS_MVE && (defined(__ARM_ARCH_6M__) || defined(TMS_NN_EMULATE_V6M))
#define TMS_V6M 1
#else
#define TMS_V6M 0
#endif
#if TMS_V6M && defined(__ARM_ARCH_6M__) && !defined(TMS_NN_EMULATE_V6M)
#define TMS_V6M_ASM 1
#else
#define TMS_V6M_ASM 0
#endif

/* The specialised variants this build compiles. The export writes tms_nn_config.h next to this file with
 * the ones its model calls (output modes of the integer kernels, fused multiply-add or not in the float
 * kernels, the hybrid kernels' forms), so the others cost no flash; without it, or with TMS_NN_ALL_VARIANTS
 * defined (a firmware holding several models), every variant is compiled. */
#if defined(__has_include) && !defined(TMS_NN_ALL_VARIANTS)
#if __has_include("tms_nn_config.h")
#include "tms_nn_config.h"
#endif
#endif
#ifndef TMS_NN_MODE_EXACT
#define TMS_NN_MODE_EXACT 1
#endif
#ifndef TMS_NN_MODE_FULL
#define TMS_NN_MODE_FULL 1
#endif
#ifndef TMS_NN_MODE_CLAMP
#define TMS_NN_MODE_CLAMP 1
#endif
#ifndef TMS_NN_FMA_OFF
#define TMS_NN_FMA_OFF 1
#endif
#ifndef TMS_NN_FMA_ON
#define TMS_NN_FMA_ON 1
#endif
/* hybrid depthwise convolutions: taps quantized as read, inputs quantized once over themselves */
#ifndef TMS_NN_HDW_TAPS
#define TMS_NN_HDW_TAPS 1
#endif
#ifndef TMS_NN_HDW_ONCE
#define TMS_NN_HDW_ONCE 1
#endif
/* ... and channels left over after blocks of four */
#ifndef TMS_NN_HDW_REST
#define TMS_NN_HDW_REST 1
#endif
/* fully connected layers' weights in channel pairs (pack_weights), in the pair16 layout (TMS_PACK_PAIR16) */
#ifndef TMS_NN_FC_PAIRS
#define TMS_NN_FC_PAIRS 1
#endif
#ifndef TMS_NN_FC_PAIR16
#define TMS_NN_FC_PAIR16 1
#endif
/* hybrid operators' inputs quantized symmetrically, asymmetrically */
#ifndef TMS_NN_HYBRID_SYM
#define TMS_NN_HYBRID_SYM 1
#endif
#ifndef TMS_NN_HYBRID_ASYM
#define TMS_NN_HYBRID_ASYM 1
#endif
#if !(TMS_NN_MODE_EXACT || TMS_NN_MODE_FULL || TMS_NN_MODE_CLAMP) || !(TMS_NN_FMA_OFF || TMS_NN_FMA_ON) || \
    !(TMS_NN_HDW_TAPS || TMS_NN_HDW_ONCE) || !(TMS_NN_HYBRID_SYM || TMS_NN_HYBRID_ASYM) || \
    !(TMS_NN_FC_PAIRS || TMS_NN_FC_PAIR16)
#error "tms_nn_config.h leaves no output mode, no multiply-add, no hybrid depthwise variant, no quantization or no fully connected layout"
#endif

#define TMS_INLINE static inline __attribute__((always_inline))
/* drivers specialised per output mode by the compiler's constant propagation (a clone each), kept out
 * of line so their stack frames are not added up in their caller's */
#define TMS_DRIVER static __attribute__((noinline))
/* word access to int8 buffers that are 4-byte aligned (column buffers, packed weights) */
typedef int32_t __attribute__((may_alias, aligned(4))) tms_w32_t;
typedef int16_t __attribute__((may_alias, aligned(2))) tms_h16_t;

/* ------------------------------------------------------------------ instructions */
#if TMS_ASM
/* SXTB16 (bytes 0 and 2 sign-extended to halfwords), SXTB16 ROR #8 (bytes 1 and 3), SMLAD (dual
 * 16-bit multiply-accumulate), SMLABB/SMLATT (bottom/top halfword multiply-accumulate). */
TMS_INLINE int32_t sxtb16(int32_t v) {
  int32_t r;
  __asm__("sxtb16 %0, %1" : "=r"(r) : "r"(v));
  return r;
}
TMS_INLINE int32_t sxtb16_ror8(int32_t v) {
  int32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
  return r;
}
TMS_INLINE int32_t smlad(int32_t a, int32_t b, int32_t acc) {
  int32_t r;
  __asm__("smlad %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
  return r;
}
TMS_INLINE int32_t smlabb(int32_t a, int32_t b, int32_t acc) {
  int32_t r;
  __asm__("smlabb %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
  return r;
}
TMS_INLINE int32_t smlatt(int32_t a, int32_t b, int32_t acc) {
  int32_t r;
  __asm__("smlatt %0, %1, %2, %3" : "=r"(r) : "r"(a), "r"(b), "r"(acc));
  return r;
}
#elif TMS_DSP
/* portable definitions of the same instructions (host tests of the DSP path); adds wrap */
TMS_INLINE int32_t lo16(int32_t v) { return (int32_t)(int16_t)(uint16_t)((uint32_t)v & 0xffffu); }
TMS_INLINE int32_t hi16(int32_t v) { return (int32_t)(int16_t)(uint16_t)((uint32_t)v >> 16); }
TMS_INLINE int32_t pack16(int32_t lo, int32_t hi) {
  return (int32_t)(((uint32_t)(uint16_t)lo) | ((uint32_t)(uint16_t)hi << 16));
}
TMS_INLINE int32_t sxtb16(int32_t v) {
  return pack16((int8_t)(uint8_t)((uint32_t)v & 0xffu), (int8_t)(uint8_t)(((uint32_t)v >> 16) & 0xffu));
}
TMS_INLINE int32_t sxtb16_ror8(int32_t v) {
  return pack16((int8_t)(uint8_t)(((uint32_t)v >> 8) & 0xffu), (int8_t)(uint8_t)((uint32_t)v >> 24));
}
TMS_INLINE int32_t wadd(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
TMS_INLINE int32_t smlad(int32_t a, int32_t b, int32_t acc) {
  return wadd(acc, wadd(lo16(a) * lo16(b), hi16(a) * hi16(b)));
}
TMS_INLINE int32_t smlabb(int32_t a, int32_t b, int32_t acc) { return wadd(acc, lo16(a) * lo16(b)); }
TMS_INLINE int32_t smlatt(int32_t a, int32_t b, int32_t acc) { return wadd(acc, hi16(a) * hi16(b)); }
#endif

TMS_INLINE int32_t rd32(const int8_t* p) {
#if TMS_V6M
  /* four LDRB (GCC calls memcpy for the unaligned word on ARMv6-M) */
  const uint8_t* b = (const uint8_t*)p;
  return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
#else
  int32_t v;
  memcpy(&v, p, 4); /* one LDR where unaligned access is allowed (ARMv7-M), bytes elsewhere */
  return v;
#endif
}

/* ------------------------------------------------------------------ requantisation */
/* Channel shifts: info = e1 | left << 8 | right << 16 (e1 = right - 1 where right >= 1). */
#define TMS_LEFT(info) (((info) >> 8) & 0xff)
#define TMS_RIGHT(info) (((info) >> 16) & 0xff)

#if TMS_V6M
/* SRDHM without a 64-bit product (ARMv6-M): gemmlowp's nudge then truncation toward zero is, for either
 * sign of the product, floor((a m + 2^30) / 2^31). With a = ah 2^16 + al and m = mh 2^16 + ml (al, ml in
 * [0, 2^16), ah, mh signed) every partial product fits 32 bits. */

/* floor((a m + 2^30) / 2^31) for |a| < 2^30 and 0 <= m < 2^31 (the fast forms' domain), with signed low
 * halves (al, ml in [-2^15, 2^15): |ah| <= 2^14, 0 <= mh <= 2^15): 2 ah mh + floor((R + 2^14) / 2^15) where
 * R = ah ml + al mh + floor(al ml / 2^16), |R| < 2^29 + 2^30 + 2^15 fits a word; the rounding as
 * floor((floor(R / 2^14) + 1) / 2). Four MULS, no constants. */
TMS_INLINE int32_t srdhm_v6m(int32_t a, int32_t m) {
  const int32_t al = (int16_t)a, ml = (int16_t)m;
  const int32_t ah = (a - al) >> 16, mh = (int32_t)(((uint32_t)m - (uint32_t)ml) >> 16); /* m - ml <= 2^31 */
  const int32_t r = ah * ml + al * mh + ((al * ml) >> 16);
  return 2 * ah * mh + (((r >> 14) + 1) >> 1);
}

/* the same for any a and m, except a = m = INT32_MIN (whose 2^31 wraps): the product's two words with
 * carries, then bits 31..62 of it plus 2^30 */
TMS_INLINE int32_t srdhm_any_v6m(int32_t a, int32_t m) {
  const int32_t ah = a >> 16, mh = m >> 16;
  const uint32_t al = (uint32_t)a & 0xffffu, ml = (uint32_t)m & 0xffffu;
  const int32_t m1 = ah * (int32_t)ml, m2 = (int32_t)al * mh; /* |.| <= 2^15 (2^16 - 1) */
  uint32_t lo = al * ml, hi = (uint32_t)(ah * mh), t;
  t = (uint32_t)m1 << 16;
  lo += t;
  hi += (uint32_t)(m1 >> 16) + (lo < t);
  t = (uint32_t)m2 << 16;
  lo += t;
  hi += (uint32_t)(m2 >> 16) + (lo < t);
  lo += 0x40000000u;
  hi += lo < 0x40000000u;
  return (int32_t)((hi << 1) | (lo >> 31));
}
#endif

/* gemmlowp's SaturatingRoundingDoublingHighMul and RoundingDivideByPOT after a left shift:
 * TFLite's MultiplyByQuantizedMultiplier, exact for every input. */
static int32_t rq_exact(int32_t acc, int32_t mult, int32_t info) {
  int32_t ls = TMS_LEFT(info), rs = TMS_RIGHT(info);
  int32_t a = (int32_t)((uint32_t)acc << ls);
  int32_t x;
  if (a == INT32_MIN && mult == INT32_MIN) {
    x = INT32_MAX;
  } else {
#if TMS_V6M
    x = srdhm_any_v6m(a, mult);
#else
    int64_t ab = (int64_t)a * mult;
    int64_t nudge = ab >= 0 ? (1 << 30) : (1 - (1 << 30));
    x = (int32_t)((ab + nudge) / ((int64_t)1 << 31));
#endif
  }
  int32_t mask = (int32_t)((1u << rs) - 1u);
  int32_t rem = x & mask;
  int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> rs) + (rem > thr ? 1 : 0);
}

/* The same plus the output zero point, saturated to int8, for |acc| < 2^30, no left shift and a
 * right shift e >= 1 (the table header's TMS_RQ_FAST, proven at compile time):
 *  - SRDHM(acc, m) for m > 0 is floor((acc * m + 2^30) / 2^31) (gemmlowp's nudge for a negative
 *    product followed by truncation is the same floor) = floor((2 acc * m + 2^31) / 2^32), which is
 *    SMMULR(2 acc, m) as 2 acc fits in 32 bits;
 *  - rounding x / 2^e half away from zero is floor((floor((x - [x < 0]) / 2^(e-1)) + 1) / 2);
 *  - the zero point enters as 2 zp before the last halving (z21 = 2 zp + 1), and SSAT's shift does
 *    the halving and the saturation to int8 in one instruction. */
TMS_INLINE int32_t rq_fast(int32_t acc, int32_t mult, int32_t info, int32_t z21) {
#if TMS_ASM
  int32_t t;
  __asm__("lsl %0, %1, #1\n\t"
          "smmulr %0, %0, %2\n\t"
          "sub %0, %0, %0, lsr #31\n\t"
          "asr %0, %0, %3\n\t"
          "add %0, %0, %4\n\t"
          "ssat %0, #8, %0, asr #1"
          : "=&r"(t)
          : "r"(acc), "r"(mult), "r"(info), "r"(z21));
  return t;
#else
#if TMS_V6M
  int32_t x = srdhm_v6m(acc, mult);
#else
  int32_t x = (int32_t)(((int64_t)acc * 2 * mult + ((int64_t)1 << 31)) >> 32);
#endif
  x -= (int32_t)((uint32_t)x >> 31);
  x = ((x >> (info & 0xff)) + z21) >> 1;
#if TMS_V6M
  return (uint32_t)(x + 128) > 255u ? (x >> 31) ^ 127 : x; /* one compare and branch on the usual path */
#else
  return x < -128 ? -128 : (x > 127 ? 127 : x);
#endif
#endif
}

/* Output stage variants, chosen once per call: fast (above) or exact, with or without an activation
 * range narrower than int8. */
#define TMS_EXACT 0
#define TMS_FAST_FULL 1
#define TMS_FAST_CLAMP 2

typedef struct {
  int32_t zp, z21, lo, hi;
} tms_out_t;

TMS_INLINE int8_t out1(const int mode, const tms_chan_t* c, int32_t acc, const tms_out_t* o) {
  int32_t v;
  if (mode == TMS_EXACT) {
    v = rq_exact(acc, c->mult, c->shift) + o->zp;
  } else {
    v = rq_fast(acc, c->mult, c->shift, o->z21);
    if (mode == TMS_FAST_FULL) return (int8_t)v;
  }
  v = v < o->lo ? o->lo : v;
  return (int8_t)(v > o->hi ? o->hi : v);
}

/* The mode of a call, among the compiled ones (a full range clamps to nothing, and the fast forms are
 * only ever exact shortcuts). The export compiles the exact mode whenever a call's table lacks the fast
 * flag (tms_nn_config.h). */
static int out_mode(const tms_chan_t* tab, int32_t lo, int32_t hi) {
  int mode = !(tab[0].bias & TMS_RQ_FAST) ? TMS_EXACT : lo <= -128 && hi >= 127 ? TMS_FAST_FULL : TMS_FAST_CLAMP;
  if (mode == TMS_FAST_FULL && !TMS_NN_MODE_FULL) mode = TMS_FAST_CLAMP;
  if (mode == TMS_FAST_CLAMP && !TMS_NN_MODE_CLAMP) mode = TMS_EXACT;
  return mode;
}

static tms_out_t out_params(int32_t zp, int32_t lo, int32_t hi) {
  tms_out_t o = {zp, 2 * zp + 1, lo, hi};
  return o;
}

/* Out-of-line copies of an always-inline function ``fn_impl`` for each output mode (``fn(mode, ...)``
 * dispatches): specialised code, and stack frames that do not add up in the caller's. */
#define TMS_MODES(fn, PARAMS, ...)                                                           \
  TMS_DRIVER void fn##_m0 PARAMS { fn##_impl(TMS_EXACT, __VA_ARGS__); }                     \
  TMS_DRIVER void fn##_m1 PARAMS { fn##_impl(TMS_FAST_FULL, __VA_ARGS__); }                 \
  TMS_DRIVER void fn##_m2 PARAMS { fn##_impl(TMS_FAST_CLAMP, __VA_ARGS__); }                \
  static inline void fn(const int mode, TMS_UNPAREN PARAMS) {                                \
    if (TMS_NN_MODE_FULL && (mode == TMS_FAST_FULL || !(TMS_NN_MODE_CLAMP || TMS_NN_MODE_EXACT)))  \
      fn##_m1(__VA_ARGS__);                                                                  \
    else if (TMS_NN_MODE_CLAMP && (mode != TMS_EXACT || !TMS_NN_MODE_EXACT))                 \
      fn##_m2(__VA_ARGS__);                                                                  \
    else                                                                                     \
      fn##_m0(__VA_ARGS__);                                                                  \
  }
/* the same for a flag (a fused multiply-add, say): fn(flag, ...) */
#define TMS_FLAG(fn, PARAMS, ...)                                                            \
  TMS_DRIVER void fn##_f0 PARAMS { fn##_impl(0, __VA_ARGS__); }                             \
  TMS_DRIVER void fn##_f1 PARAMS { fn##_impl(1, __VA_ARGS__); }                             \
  static inline void fn(const int flag, TMS_UNPAREN PARAMS) {                                \
    if (TMS_NN_FMA_ON && (flag || !TMS_NN_FMA_OFF))                                          \
      fn##_f1(__VA_ARGS__);                                                                  \
    else                                                                                     \
      fn##_f0(__VA_ARGS__);                                                                  \
  }
#define TMS_UNPAREN(...) __VA_ARGS__
#define TMS_BY_MODE(mode, fn, ...) fn(mode, __VA_ARGS__)

/* ------------------------------------------------------------------ dot products */
#if TMS_V6M_ASM
/* Thumb-1 inner loops (GCC writes Thumb-1 inline assembly in the divided syntax: switched to unified and
 * back). MULS overwrites one of its operands and LDRSB takes only a register offset, so
 * the streams share one index register counting up to 0 (the bases point past their ends) and each
 * product reloads the operand it consumes; the accumulators live in r8-r11 (ADD reaches high registers).
 * TMS_V6M_SAVE / TMS_V6M_RESTORE: r4-r11 pushed and popped. Clang's assembler takes the unified syntax
 * only (and has no ".syntax divided" to go back to). */
#if defined(__clang__)
#define TMS_V6M_SYNTAX_BACK ""
#else
#define TMS_V6M_SYNTAX_BACK ".syntax divided\n\t"
#endif
#define TMS_V6M_SAVE                                                                      \
  ".syntax unified\n\t"                                                                     \
  "push {r4-r7, lr}\n\t"                                                                   \
  "mov r4, r8\n\t"                                                                          \
  "mov r5, r9\n\t"                                                                          \
  "mov r6, r10\n\t"                                                                         \
  "mov r7, r11\n\t"                                                                         \
  "push {r4-r7}\n\t"
#define TMS_V6M_RESTORE                                                                   \
  "pop {r4-r7}\n\t"                                                                         \
  "mov r8, r4\n\t"                                                                          \
  "mov r9, r5\n\t"                                                                          \
  "mov r10, r6\n\t"                                                                         \
  "mov r11, r7\n\t"                                                                         \
  "pop {r4-r7, pc}\n\t"                                                                      \
  TMS_V6M_SYNTAX_BACK
/* acc[0..3] (a00, a01, a10, a11) to r8-r11 and back, through r4 (acc in r3 at entry, then on the stack) */
#define TMS_V6M_ACC_IN(p)                                                                 \
  "ldr r4, [" p ", #0]\n\t"                                                                 \
  "mov r8, r4\n\t"                                                                          \
  "ldr r4, [" p ", #4]\n\t"                                                                 \
  "mov r9, r4\n\t"                                                                          \
  "ldr r4, [" p ", #8]\n\t"                                                                 \
  "mov r10, r4\n\t"                                                                         \
  "ldr r4, [" p ", #12]\n\t"                                                                \
  "mov r11, r4\n\t"
#define TMS_V6M_ACC_OUT(p)                                                                \
  "mov r4, r8\n\t"                                                                          \
  "str r4, [" p ", #0]\n\t"                                                                 \
  "mov r4, r9\n\t"                                                                          \
  "str r4, [" p ", #4]\n\t"                                                                 \
  "mov r4, r10\n\t"                                                                         \
  "str r4, [" p ", #8]\n\t"                                                                 \
  "mov r4, r11\n\t"                                                                         \
  "str r4, [" p ", #12]\n\t"
/* one element of dot_2x2: x0 = [r0, r4], x1 = [r1, r4], w0 = [r2, r4], w1 = [r3, r4] */
#define TMS_V6M_2X2(inc)                                                                  \
  "ldrsb r5, [r0, r4]\n\t"                                                                  \
  "ldrsb r6, [r2, r4]\n\t"                                                                  \
  "muls r5, r6\n\t"                                                                         \
  "add r8, r5\n\t"                                                                          \
  "ldrsb r5, [r1, r4]\n\t"                                                                  \
  "muls r6, r5\n\t"                                                                         \
  "add r10, r6\n\t"                                                                         \
  "ldrsb r6, [r3, r4]\n\t"                                                                  \
  "muls r5, r6\n\t"                                                                         \
  "add r11, r5\n\t"                                                                         \
  "ldrsb r5, [r0, r4]\n\t"                                                                  \
  "muls r5, r6\n\t"                                                                         \
  "add r9, r5\n\t"                                                                          \
  "adds r4, #" inc "\n\t"

/* dot_2x2 over n = 2 * K4 bytes (a multiple of 8, >= 8): 14 instructions per four MACs */
__attribute__((naked, noinline)) static void dot_2x2_v6m(const int8_t* col __attribute__((unused)),
                                                          const int8_t* w __attribute__((unused)),
                                                          int32_t n __attribute__((unused)),
                                                          int32_t* acc __attribute__((unused))) {
  __asm__ volatile(
      TMS_V6M_SAVE
      "push {r3}\n\t"
      TMS_V6M_ACC_IN("r3")
      "adds r0, r0, r2\n\t"         /* column end */
      "adds r1, r1, r2\n\t"         /* weights end */
      "negs r4, r2\n\t"             /* index: -n .. 0 */
      "mov r2, r1\n\t"
      "adds r3, r1, #4\n\t"
      "adds r1, r0, #4\n\t"
      "1:\n\t"
      TMS_V6M_2X2("1")
      TMS_V6M_2X2("1")
      TMS_V6M_2X2("1")
      TMS_V6M_2X2("5")
      "bne 1b\n\t"
      "pop {r3}\n\t"
      TMS_V6M_ACC_OUT("r3")
      TMS_V6M_RESTORE);
}

/* fc_row's dot products four channels (two pairs) at a time: 15 instructions per four MACs */
typedef struct {
  const int8_t* x;  /*  0: the input row (groups of four elements every xstep bytes) */
  const int8_t* w;  /*  4: packed weights of pair a */
  int32_t n;        /*  8: bytes of a pair's full groups (8 per group, >= 8) */
  int32_t pb;       /* 12: bytes from pair a to pair b (0: pair a twice) */
  int32_t xstep;    /* 16: 4 or 8 */
  int32_t acc[4];   /* 20: pair a's two channels, then pair b's */
} tms_v6m_fc_t;
/* one element: x = [r0, #b], the four weights at [r1..r4, r5] */
#define TMS_V6M_1X4(b, inc)                                                               \
  "ldrb r6, [r0, #" b "]\n\t"                                                               \
  "sxtb r6, r6\n\t"                                                                         \
  "ldrsb r7, [r1, r5]\n\t"                                                                  \
  "muls r7, r6\n\t"                                                                         \
  "add r8, r7\n\t"                                                                          \
  "ldrsb r7, [r2, r5]\n\t"                                                                  \
  "muls r7, r6\n\t"                                                                         \
  "add r9, r7\n\t"                                                                          \
  "ldrsb r7, [r3, r5]\n\t"                                                                  \
  "muls r7, r6\n\t"                                                                         \
  "add r10, r7\n\t"                                                                         \
  "ldrsb r7, [r4, r5]\n\t"                                                                  \
  "muls r7, r6\n\t"                                                                         \
  "add r11, r7\n\t"                                                                         \
  "adds r5, #" inc "\n\t"
__attribute__((naked, noinline)) static void dot_1x4_v6m(tms_v6m_fc_t* job __attribute__((unused))) {
  __asm__ volatile(
      TMS_V6M_SAVE
      "push {r0}\n\t"
      "movs r3, r0\n\t"
      "adds r3, #20\n\t"
      TMS_V6M_ACC_IN("r3")
      "ldr r5, [r0, #16]\n\t"
      "mov r12, r5\n\t"              /* xstep */
      "ldr r2, [r0, #8]\n\t"
      "ldr r1, [r0, #4]\n\t"
      "ldr r3, [r0, #12]\n\t"
      "adds r1, r1, r2\n\t"         /* pair a's end */
      "adds r3, r3, r1\n\t"         /* pair b's end */
      "negs r5, r2\n\t"             /* index: -n .. 0 */
      "ldr r0, [r0, #0]\n\t"
      "adds r2, r1, #4\n\t"
      "adds r4, r3, #4\n\t"
      "1:\n\t"
      TMS_V6M_1X4("0", "1")
      TMS_V6M_1X4("1", "1")
      TMS_V6M_1X4("2", "1")
      TMS_V6M_1X4("3", "5")
      "add r0, r12\n\t"             /* (sets no flags) */
      "bne 1b\n\t"
      "pop {r0}\n\t"
      "movs r3, r0\n\t"
      "adds r3, #20\n\t"
      TMS_V6M_ACC_OUT("r3")
      TMS_V6M_RESTORE);
}
#endif

/* Two columns interleaved every four elements (col: [K4/4][2][4]) against a channel pair
 * (w: [K4/4][2][4]), both 4-byte aligned; acc[2 * pixel + channel] += ... */
TMS_INLINE void dot_2x2(const int8_t* col, const int8_t* w, int32_t k4, int32_t* acc) {
  int32_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3];
  const tms_w32_t* c = (const tms_w32_t*)col;
  const tms_w32_t* wp = (const tms_w32_t*)w;
  const tms_w32_t* end = c + k4 / 2;
#if TMS_MVE
  /* 16 bytes = two groups of [pixel 0: 4][pixel 1: 4] against [channel 0: 4][channel 1: 4]: lanes 0-3 and 8-11
   * (predicate 0x0F0F) pair pixel 0 with channel 0; with the weights' words swapped in each half (VREV64.32)
   * pixel 0 with channel 1, with the column's swapped pixel 1 with either. The last 8 bytes of an odd group
   * count are predicated off (VCTP). (One predicate constant only: GCC 12 mis-encodes 0xF0F0.) */
  const int32_t n = 2 * k4;
  (void)end;
  for (int32_t i = 0; i < n; i += 16) {
    const mve_pred16_t tail = vctp8q((uint32_t)(n - i));
    const int8x16_t cv = vldrbq_z_s8(col + i, tail);
    const int8x16_t wv = vldrbq_z_s8(w + i, tail);
    const int8x16_t ws = vreinterpretq_s8_s32(vrev64q_s32(vreinterpretq_s32_s8(wv)));
    const int8x16_t cs = vreinterpretq_s8_s32(vrev64q_s32(vreinterpretq_s32_s8(cv)));
    a00 = vmladavaq_p_s8(a00, cv, wv, 0x0F0F);
    a01 = vmladavaq_p_s8(a01, cv, ws, 0x0F0F);
    a10 = vmladavaq_p_s8(a10, cs, wv, 0x0F0F);
    a11 = vmladavaq_p_s8(a11, cs, ws, 0x0F0F);
  }
  (void)c;
  (void)wp;
#elif TMS_DSP
  while (c < end) {
    int32_t x0 = c[0], x1 = c[1], wa = wp[0], wb = wp[1];
    c += 2;
    wp += 2;
    int32_t x0e = sxtb16(x0), x0o = sxtb16_ror8(x0);
    int32_t x1e = sxtb16(x1), x1o = sxtb16_ror8(x1);
    int32_t we = sxtb16(wa), wo = sxtb16_ror8(wa);
    a00 = smlad(x0e, we, a00);
    a00 = smlad(x0o, wo, a00);
    a10 = smlad(x1e, we, a10);
    a10 = smlad(x1o, wo, a10);
    we = sxtb16(wb);
    wo = sxtb16_ror8(wb);
    a01 = smlad(x0e, we, a01);
    a01 = smlad(x0o, wo, a01);
    a11 = smlad(x1e, we, a11);
    a11 = smlad(x1o, wo, a11);
  }
#elif TMS_V6M_ASM
  (void)end;
  (void)wp;
  dot_2x2_v6m(col, w, 2 * k4, acc);
  a00 = acc[0];
  a01 = acc[1];
  a10 = acc[2];
  a11 = acc[3];
#else
  const int8_t* cb = col;
  const int8_t* wb8 = w;
  const int8_t* eb = col + 2 * k4;
  (void)c;
  (void)wp;
  (void)end;
  while (cb < eb) {
    for (int b = 0; b < 4; ++b) {
      int32_t x0 = cb[b], x1 = cb[4 + b], wa = wb8[b], wb = wb8[4 + b];
      a00 += x0 * wa;
      a01 += x0 * wb;
      a10 += x1 * wa;
      a11 += x1 * wb;
    }
    cb += 8;
    wb8 += 8;
  }
#endif
  acc[0] = a00;
  acc[1] = a01;
  acc[2] = a10;
  acc[3] = a11;
}

/* One column of ``k`` elements at ``x`` (``xstep`` = 4: contiguous; 8: slot 0 of an interleaved
 * column) against a channel pair (w: [K4/4][2][4], aligned); acc[channel] += ... The last
 * ``k % 4`` elements are read one by one (only for xstep 4: interleaved columns are padded). */
TMS_INLINE void dot_1x2(const int8_t* x, int32_t xstep, const int8_t* w, int32_t k, int32_t* acc) {
  int32_t a0 = acc[0], a1 = acc[1];
  const tms_w32_t* wp = (const tms_w32_t*)w;
  int32_t groups = k >> 2;
#if TMS_MVE
  /* two groups (16 weight bytes: [channel 0: 4][channel 1: 4] twice) per step; the input's two groups are
   * gathered so each faces both channels: [x 0-3][x 0-3][x 4-7][x 4-7] (contiguous input) or read as they
   * lie (slot 0 of an interleaved column: [x][other pixel]), channel 1 then through the swapped weights */
  const int32_t nw = 8 * groups;
  if (xstep == 4) {
    const uint8x16_t offs = {0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7, 0, 0, 0, 0};   /* lanes 4-7, 12-15 unused */
    for (int32_t i = 0; i < nw; i += 16) {
      const mve_pred16_t tail = vctp8q((uint32_t)(nw - i));
      const int8x16_t xv = vldrbq_gather_offset_z_s8(x + i / 2, offs, tail);
      const int8x16_t wv = vldrbq_z_s8((const int8_t*)wp + i, tail);
      const int8x16_t ws = vreinterpretq_s8_s32(vrev64q_s32(vreinterpretq_s32_s8(wv)));
      a0 = vmladavaq_p_s8(a0, xv, wv, 0x0F0F);
      a1 = vmladavaq_p_s8(a1, xv, ws, 0x0F0F);
    }
  } else {
    for (int32_t i = 0; i < nw; i += 16) {
      const mve_pred16_t tail = vctp8q((uint32_t)(nw - i));
      const int8x16_t xv = vldrbq_z_s8(x + i, tail);
      const int8x16_t wv = vldrbq_z_s8((const int8_t*)wp + i, tail);
      const int8x16_t ws = vreinterpretq_s8_s32(vrev64q_s32(vreinterpretq_s32_s8(wv)));
      a0 = vmladavaq_p_s8(a0, xv, wv, 0x0F0F);
      a1 = vmladavaq_p_s8(a1, xv, ws, 0x0F0F);
    }
  }
  x += xstep * groups;
  wp += 2 * groups;
#elif TMS_DSP
  for (; groups > 0; --groups) {
    int32_t xv = rd32(x), wa = wp[0], wb = wp[1];
    x += xstep;
    wp += 2;
    int32_t xe = sxtb16(xv), xo = sxtb16_ror8(xv);
    a0 = smlad(xe, sxtb16(wa), a0);
    a0 = smlad(xo, sxtb16_ror8(wa), a0);
    a1 = smlad(xe, sxtb16(wb), a1);
    a1 = smlad(xo, sxtb16_ror8(wb), a1);
  }
#else
  for (; groups > 0; --groups) {
    const int8_t* wb8 = (const int8_t*)wp;
    for (int b = 0; b < 4; ++b) {
      a0 += x[b] * wb8[b];
      a1 += x[b] * wb8[4 + b];
    }
    x += xstep;
    wp += 2;
  }
#endif
  const int8_t* wt = (const int8_t*)wp;
  for (int b = 0; b < (k & 3); ++b) {
    a0 += x[b] * wt[b];
    a1 += x[b] * wt[4 + b];
  }
  acc[0] = a0;
  acc[1] = a1;
}

/* ------------------------------------------------------------------ column buffers */
/* Copy n bytes of one pixel's window into logical positions [k, k + n) of column slot j
 * (interleaved every four bytes: slot j at byte 4j of each 8-byte group). */
static void col_put(int8_t* col, int j, int32_t k, const int8_t* src, int32_t n) {
  if (((k | n) & 3) == 0) {
    tms_w32_t* d = (tms_w32_t*)(col + 2 * k + 4 * j);
#if TMS_V6M
    if (((uintptr_t)src & 3) == 0) { /* word loads where the row is aligned (no unaligned LDR on ARMv6-M) */
      const tms_w32_t* s4 = (const tms_w32_t*)src;
      for (int32_t i = 0; i < n; i += 4, d += 2) *d = *s4++;
      return;
    }
#endif
    for (int32_t i = 0; i < n; i += 4, d += 2) *d = rd32(src + i);
    return;
  }
  for (int32_t i = 0; i < n; ++i, ++k) col[((k >> 2) << 3) + 4 * j + (k & 3)] = src[i];
}

static void col_fill(int8_t* col, int j, int32_t k, int8_t v, int32_t n) {
  if (((k | n) & 3) == 0) {
    tms_w32_t* d = (tms_w32_t*)(col + 2 * k + 4 * j);
    int32_t v4 = (int32_t)((uint32_t)(uint8_t)v * 0x01010101u);
    for (int32_t i = 0; i < n; i += 4, d += 2) *d = v4;
    return;
  }
  for (int32_t i = 0; i < n; ++i, ++k) col[((k >> 2) << 3) + 4 * j + (k & 3)] = v;
}

/* Window of output pixel (oy, ox) into column slot j: rows of kw * in_c bytes where the window
 * lies inside the image, the input zero point elsewhere. */
static void im2col(const tms_conv_t* p, const int8_t* x, int32_t oy, int32_t ox, int8_t* col, int j) {
  const int32_t c = p->in_c, rowlen = p->kw * c;
  int32_t k = 0;
  int32_t iy0 = oy * p->sh - p->pad_t, ix0 = ox * p->sw - p->pad_l;
  int dense = p->dw == 1 && ix0 >= 0 && ix0 + p->kw <= p->in_w;
  for (int32_t ky = 0; ky < p->kh; ++ky, k += rowlen) {
    int32_t iy = iy0 + ky * p->dh;
    if (iy < 0 || iy >= p->in_h) {
      col_fill(col, j, k, p->in_zp, rowlen);
      continue;
    }
    const int8_t* row = x + ((int32_t)iy * p->in_w) * c;
    if (dense) {
      col_put(col, j, k, row + ix0 * c, rowlen);
      continue;
    }
    for (int32_t kx = 0; kx < p->kw; ++kx) {
      int32_t ix = ix0 + kx * p->dw;
      if (ix < 0 || ix >= p->in_w)
        col_fill(col, j, k + kx * c, p->in_zp, c);
      else
        col_put(col, j, k + kx * c, row + ix * c, c);
    }
  }
}

/* the kernels over the Helium layouts (TMS_PACK_HELIUM): exported for cores with MVE only, so compiled
 * there and on the host (their plain C, tested against TFLite's arithmetic), not into other firmware */
#if TMS_MVE || defined(__ARM_FEATURE_MVE) || !defined(__arm__)
#include "tms_nn_helium.inc"
#endif

/* ------------------------------------------------------------------ CONV_2D */
#if TMS_ASM
/* The fast requantisation of conv_two for all channel pairs of two pixels, hand-scheduled for
 * ARMv7E-M: the 2 x 2 dot product keeps fourteen registers busy (four accumulators, four loaded
 * words, three widened halves, two pointers, a counter), which GCC cannot allocate without spilling
 * around every channel pair. Loop state lives in a small stack frame. Outputs are packed two per
 * halfword (y0[c..c+1], y1[c..c+1]); an activation range narrower than int8 is applied to all four at
 * once with SSUB8/SEL. Same arithmetic as rq_fast. */
/* Assembly text shared by the hand-scheduled loops below. TMS_ASM_RQ: requantise the accumulator in
 * register ``acc`` as rq_fast does (multiplier in r7, shifts in r8, 2 zp + 1 in r12), leaving the int8
 * value sign-extended in ``acc``. TMS_ASM_CLAMP4: clamp the four int8 lanes of ``v`` to the lanes of
 * ``lo`` and ``hi`` (``t`` is clobbered). */
#define TMS_ASM_RQ(acc)                                                                   \
  "lsl " acc ", " acc ", #1\n\t"                                                          \
  "smmulr " acc ", " acc ", r7\n\t"                                                       \
  "sub " acc ", " acc ", " acc ", lsr #31\n\t"                                             \
  "asr " acc ", " acc ", r8\n\t"                                                          \
  "add " acc ", " acc ", r12\n\t"                                                         \
  "ssat " acc ", #8, " acc ", asr #1\n\t"
#define TMS_ASM_CLAMP4(v, lo, hi, t)                                                      \
  "ssub8 " t ", " v ", " lo "\n\t"                                                        \
  "sel " v ", " v ", " lo "\n\t"                                                          \
  "ssub8 " t ", " hi ", " v "\n\t"                                                        \
  "sel " v ", " v ", " hi "\n\t"
/* The channel-pair loop around a 2 x 2 dot product, shared by conv_pairs_m4 and conv16_pairs_m4 (a
 * tms_job_t in r0). TMS_ASM_PAIRS_ENTER: the stack frame ([sp]: job, pairs left, ch, y0), r1 = the weights,
 * then at label 1 (each channel pair) the four accumulators r3-r6 set to the two channels' biases and r8 = job;
 * the dot product follows, its own loop at label 2 ending in ``bne 2b``. TMS_ASM_PAIRS_EXIT: requantise the
 * four sums, clamp if the job asks, store y0[c..c+1] and y1[c..c+1], next pair (``bne 1b``), return. */
#define TMS_ASM_PAIRS_ENTER                                                               \
  "push {r4-r11, lr}\n\t"                                                                 \
  "sub sp, sp, #16\n\t"                                                                   \
  "str r0, [sp, #0]\n\t"            /* job */                                             \
  "ldr r1, [r0, #24]\n\t"                                                                 \
  "str r1, [sp, #4]\n\t"            /* pairs left */                                      \
  "ldr r1, [r0, #8]\n\t"                                                                  \
  "str r1, [sp, #8]\n\t"            /* ch */                                              \
  "ldr r1, [r0, #12]\n\t"                                                                 \
  "str r1, [sp, #12]\n\t"           /* y0 */                                              \
  "ldr r1, [r0, #4]\n\t"            /* w: advances through the pairs */                   \
  "1:\n\t"                                                                                \
  "ldr r7, [sp, #8]\n\t"                                                                  \
  "ldr r3, [r7, #0]\n\t"            /* acc p0c0 = bias c0 */                              \
  "ldr r4, [r7, #12]\n\t"           /* acc p0c1 = bias c1 */                              \
  "mov r5, r3\n\t"                  /* acc p1c0 */                                        \
  "mov r6, r4\n\t"                  /* acc p1c1 */                                        \
  "ldr r8, [sp, #0]\n\t"
#define TMS_ASM_PAIRS_EXIT                                                                \
  "ldr r0, [sp, #0]\n\t"                                                                  \
  "ldr r2, [sp, #8]\n\t"            /* ch */                                              \
  "ldr r12, [r0, #28]\n\t"          /* z21 */                                             \
  "ldrd r7, r8, [r2, #4]\n\t"       /* channel 0: mult, shifts */                         \
  TMS_ASM_RQ("r3")                                                                        \
  TMS_ASM_RQ("r5")                                                                        \
  "ldrd r7, r8, [r2, #16]\n\t"      /* channel 1 */                                       \
  TMS_ASM_RQ("r4")                                                                        \
  TMS_ASM_RQ("r6")                                                                        \
  "bfi r3, r4, #8, #8\n\t"          /* y0[c], y0[c+1] */                                  \
  "bfi r5, r6, #8, #8\n\t"          /* y1[c], y1[c+1] */                                  \
  "ldr r7, [r0, #40]\n\t"                                                                 \
  "cbz r7, 3f\n\t"                                                                        \
  "pkhbt r3, r3, r5, lsl #16\n\t"   /* four bytes: clamp them at once */                  \
  "ldrd r7, r8, [r0, #32]\n\t"                                                            \
  TMS_ASM_CLAMP4("r3", "r7", "r8", "r9")                                                  \
  "lsr r5, r3, #16\n\t"                                                                   \
  "3:\n\t"                                                                                \
  "ldr lr, [sp, #12]\n\t"           /* y0 */                                              \
  "ldr r11, [r0, #16]\n\t"                                                                \
  "strh r3, [lr]\n\t"                                                                     \
  "strh r5, [lr, r11]\n\t"                                                                \
  "add lr, lr, #2\n\t"                                                                    \
  "str lr, [sp, #12]\n\t"                                                                 \
  "add r2, r2, #24\n\t"                                                                   \
  "str r2, [sp, #8]\n\t"                                                                  \
  "ldr r2, [sp, #4]\n\t"                                                                  \
  "subs r2, r2, #1\n\t"                                                                   \
  "str r2, [sp, #4]\n\t"                                                                  \
  "bne 1b\n\t"                                                                            \
  "add sp, sp, #16\n\t"                                                                   \
  "pop {r4-r11, pc}\n\t"

typedef struct {
  const int8_t* col;     /*  0: the two interleaved columns */
  const int8_t* w;       /*  4: packed weights of the first pair */
  const tms_chan_t* ch;  /*  8: channel entries of the first pair */
  int8_t* y0;            /* 12: first output of pixel 0 (pixel 1 at y0 + y1off) */
  int32_t y1off;         /* 16 */
  int32_t kiters;        /* 20: K4 / 4 >= 1 */
  int32_t pairs;         /* 24: channel pairs >= 1 */
  int32_t z21;           /* 28: 2 zp + 1 */
  int32_t lo4, hi4;      /* 32, 36: activation bounds in every byte */
  int32_t clamp;         /* 40: apply them */
  int32_t odd;           /* 44: conv16_pairs_m4: an odd group count (kiters is then (groups + 1) / 2) */
} tms_job_t;

__attribute__((naked, noinline, unused)) static void conv_pairs_m4(const tms_job_t* job __attribute__((unused))) {
  __asm__ volatile(
      TMS_ASM_PAIRS_ENTER
      "ldr r0, [r8, #0]\n\t"          /* col */
      "ldr r2, [r8, #20]\n\t"         /* k iterations */
      "2:\n\t"
      "ldrd r7, r8, [r0], #8\n\t"     /* x0 x1 */
      "ldrd r9, r10, [r1], #8\n\t"    /* wa wb */
      "sxtb16 r11, r7\n\t"
      "sxtb16 r12, r9\n\t"
      "smlad r3, r11, r12, r3\n\t"
      "sxtb16 lr, r8\n\t"
      "smlad r5, lr, r12, r5\n\t"
      "sxtb16 r12, r10\n\t"
      "smlad r4, r11, r12, r4\n\t"
      "smlad r6, lr, r12, r6\n\t"
      "sxtb16 r7, r7, ror #8\n\t"
      "sxtb16 r8, r8, ror #8\n\t"
      "sxtb16 r9, r9, ror #8\n\t"
      "sxtb16 r10, r10, ror #8\n\t"
      "smlad r3, r7, r9, r3\n\t"
      "smlad r5, r8, r9, r5\n\t"
      "smlad r4, r7, r10, r4\n\t"
      "smlad r6, r8, r10, r6\n\t"
      "subs r2, r2, #1\n\t"
      "bne 2b\n\t"
      TMS_ASM_PAIRS_EXIT);
}
#endif

/* All output channels of the two pixels in column slots 0 and 1; y0 / y1 their outputs. */
TMS_INLINE void conv_two_impl(const int mode, const int8_t* col, const int8_t* w, const tms_chan_t* ch, int32_t K4,
                         int32_t oc, int8_t* y0, int8_t* y1, const tms_out_t* o) {
  const tms_chan_t* end = ch + (oc & ~1);
  for (; ch < end; ch += 2, w += 2 * K4, y0 += 2, y1 += 2) {
    int32_t acc[4] = {ch[0].bias, ch[1].bias, ch[0].bias, ch[1].bias};
    dot_2x2(col, w, K4, acc);
    y0[0] = out1(mode, ch, acc[0], o);
    y1[0] = out1(mode, ch, acc[2], o);
    y0[1] = out1(mode, ch + 1, acc[1], o);
    y1[1] = out1(mode, ch + 1, acc[3], o);
  }
  if (oc & 1) { /* the last channel's pair partner is zero weights (output dropped) */
    int32_t acc[4] = {ch[0].bias, 0, ch[0].bias, 0};
    dot_2x2(col, w, K4, acc);
    y0[0] = out1(mode, ch, acc[0], o);
    y1[0] = out1(mode, ch, acc[2], o);
  }
}
TMS_MODES(conv_two, (const int8_t* col, const int8_t* w, const tms_chan_t* ch, int32_t K4, int32_t oc, int8_t* y0, int8_t* y1, const tms_out_t* o), col, w, ch, K4, oc, y0, y1, o)



/* All ``n`` output channels of one input row of ``K`` elements at ``x`` (``xstep`` 4: contiguous, as a
 * fully connected layer's; 8: slot 0 of an interleaved convolution column, K a multiple of 4), weights
 * in channel pairs of K4 = K rounded up to 4 elements. */
TMS_INLINE void fc_row_impl(const int mode, const int8_t* x, int32_t xstep, const int8_t* w, const tms_chan_t* ch,
                            int32_t K, int32_t n, int8_t* y, const tms_out_t* o) {
  const int32_t K4 = (K + 3) & ~3;
#if TMS_V6M_ASM
  if (K >= 4) { /* four channels per pass (the last pair alone: read twice); k % 4 elements in C */
    const int32_t g = K >> 2;
    const int8_t* xt = x + xstep * g;
    tms_v6m_fc_t job = {x, w, 8 * g, 2 * K4, xstep, {0, 0, 0, 0}};
    for (int32_t c = 0; c < n; c += 4, w += 4 * K4) {
      const int n1 = c + 1 < n, n2 = c + 2 < n, n3 = c + 3 < n;
      job.w = w;
      job.pb = n2 ? 2 * K4 : 0;
      job.acc[0] = ch[c].bias;
      job.acc[1] = n1 ? ch[c + 1].bias : 0;
      job.acc[2] = n2 ? ch[c + 2].bias : 0;
      job.acc[3] = n3 ? ch[c + 3].bias : 0;
      dot_1x4_v6m(&job);
      const int8_t* wt = w + 8 * g;
      for (int b = 0; b < (K & 3); ++b) {
        job.acc[0] += xt[b] * wt[b];
        job.acc[1] += xt[b] * wt[4 + b];
        job.acc[2] += xt[b] * wt[job.pb + b];
        job.acc[3] += xt[b] * wt[job.pb + 4 + b];
      }
      y[c] = out1(mode, ch + c, job.acc[0], o);
      if (n1) y[c + 1] = out1(mode, ch + c + 1, job.acc[1], o);
      if (n2) y[c + 2] = out1(mode, ch + c + 2, job.acc[2], o);
      if (n3) y[c + 3] = out1(mode, ch + c + 3, job.acc[3], o);
    }
    return;
  }
#endif
  for (int32_t c = 0; c < n; c += 2, w += 2 * K4) {
    int n1 = c + 1 < n;
    int32_t acc[2] = {ch[c].bias, n1 ? ch[c + 1].bias : 0};
    dot_1x2(x, xstep, w, K, acc);
    y[c] = out1(mode, ch + c, acc[0], o);
    if (n1) y[c + 1] = out1(mode, ch + c + 1, acc[1], o);
  }
}
TMS_MODES(fc_row, (const int8_t* x, int32_t xstep, const int8_t* w, const tms_chan_t* ch, int32_t K, int32_t n, int8_t* y, const tms_out_t* o), x, xstep, w, ch, K, n, y, o)

void tms_conv_s8(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                 int8_t* col) {
  const int32_t K = p->kh * p->kw * p->in_c, K4 = (K + 3) & ~3, oc = p->out_c;
  const int32_t npix = p->out_h * p->out_w;
  const tms_out_t o = out_params(p->out_zp, p->act_min, p->act_max);
  const int mode = out_mode(tab, p->act_min, p->act_max);
  /* the padding of each slot's last group (K..K4) meets zero weights; give it a value */
  for (int32_t k = K; k < K4; ++k) col[((k >> 2) << 3) + (k & 3)] = col[((k >> 2) << 3) + 4 + (k & 3)] = 0;
#if TMS_ASM && !TMS_MVE
  const int32_t even = oc & ~1;      /* channel pairs in assembly, an odd last channel in C */
  tms_job_t job = {col, w, tab + 1, y, oc, K4 / 4, oc / 2, o.z21, (int32_t)((uint32_t)(uint8_t)o.lo * 0x01010101u),
                   (int32_t)((uint32_t)(uint8_t)o.hi * 0x01010101u), mode == TMS_FAST_CLAMP, 0};
  const int by_asm = mode != TMS_EXACT && even > 0;
#endif
  for (int32_t b = 0; b < p->batch; ++b) {
    const int8_t* xb = x + (int32_t)b * p->in_h * p->in_w * p->in_c;
    int8_t* yb = y + (int32_t)b * npix * oc;
    int32_t oy = 0, ox = 0;
    for (int32_t pix = 0; pix < npix; pix += 2) {
      int two = pix + 1 < npix;
      /* every read of both windows happens before any write of their outputs */
      im2col(p, xb, oy, ox, col, 0);
      if (++ox == p->out_w) ox = 0, ++oy;
      if (two) {
        im2col(p, xb, oy, ox, col, 1);
        if (++ox == p->out_w) ox = 0, ++oy;
      }
      int8_t* y0 = yb + pix * oc;
#if TMS_ASM && !TMS_MVE
      if (two && by_asm) {
        job.y0 = y0;
        conv_pairs_m4(&job);
        if (oc & 1) conv_two(mode, col, w + even * K4, tab + 1 + even, K4, 1, y0 + even, y0 + oc + even, &o);
        continue;
      }
#endif
      if (two)
        TMS_BY_MODE(mode, conv_two, col, w, tab + 1, K4, oc, y0, y0 + oc, &o);
      else
        TMS_BY_MODE(mode, fc_row, col, 8, w, tab + 1, K4, oc, y0, &o);
    }
  }
}

/* ------------------------------------------------------------------ CONV_2D, column widened to int16 */
/* tms_conv_s8_wide (cores with the DSP extension, no Helium): as tms_conv_s8, but each pair of windows is
 * gathered widened to int16 (im2col16: per group of four elements, [pixel 0: SXTB16, SXTB16 ROR #8][pixel 1:
 * the same]), so the channel loop only widens weights: one LDM for both pixels' group, and each weight word
 * feeds both pixels (16 instructions per 16 multiply-accumulates instead of 20, 15 with two groups per pass).
 * Elsewhere it is tms_conv_s8 (the buffer is larger than that needs). */
#if TMS_DSP && !TMS_MVE
/* n bytes of one pixel's window into logical positions [k, k + n) of widened column slot j: element k at
 * group k / 4, word 2 j + (k & 1), half (k & 2) / 2 (SXTB16's order) */
static void col16_put(int8_t* col, int j, int32_t k, const int8_t* src, int32_t n) {
  if (((k | n) & 3) == 0) {
    tms_w32_t* d = (tms_w32_t*)(col + 4 * k + 8 * j);
    for (int32_t i = 0; i < n; i += 4, d += 4) {
      const int32_t v = rd32(src + i);
      d[0] = sxtb16(v);
      d[1] = sxtb16_ror8(v);
    }
    return;
  }
  for (int32_t i = 0; i < n; ++i, ++k)
    *(tms_h16_t*)(col + 16 * (k >> 2) + 8 * j + 4 * (k & 1) + (k & 2)) = src[i];
}

static void col16_fill(int8_t* col, int j, int32_t k, int8_t v, int32_t n) {
  if (((k | n) & 3) == 0) {
    tms_w32_t* d = (tms_w32_t*)(col + 4 * k + 8 * j);
    const int32_t v2 = (int32_t)((uint32_t)(uint16_t)(int16_t)v * 0x00010001u);
    for (int32_t i = 0; i < n; i += 4, d += 4) d[0] = d[1] = v2;
    return;
  }
  for (int32_t i = 0; i < n; ++i, ++k) *(tms_h16_t*)(col + 16 * (k >> 2) + 8 * j + 4 * (k & 1) + (k & 2)) = v;
}

/* im2col into widened column slot j */
static void im2col16(const tms_conv_t* p, const int8_t* x, int32_t oy, int32_t ox, int8_t* col, int j) {
  const int32_t c = p->in_c, rowlen = p->kw * c;
  int32_t k = 0;
  int32_t iy0 = oy * p->sh - p->pad_t, ix0 = ox * p->sw - p->pad_l;
  int dense = p->dw == 1 && ix0 >= 0 && ix0 + p->kw <= p->in_w;
  for (int32_t ky = 0; ky < p->kh; ++ky, k += rowlen) {
    int32_t iy = iy0 + ky * p->dh;
    if (iy < 0 || iy >= p->in_h) {
      col16_fill(col, j, k, p->in_zp, rowlen);
      continue;
    }
    const int8_t* row = x + ((int32_t)iy * p->in_w) * c;
    if (dense) {
      col16_put(col, j, k, row + ix0 * c, rowlen);
      continue;
    }
    for (int32_t kx = 0; kx < p->kw; ++kx) {
      int32_t ix = ix0 + kx * p->dw;
      if (ix < 0 || ix >= p->in_w)
        col16_fill(col, j, k + kx * c, p->in_zp, c);
      else
        col16_put(col, j, k + kx * c, row + ix * c, c);
    }
  }
}

/* the widened pair of columns (groups of [p0 even, p0 odd, p1 even, p1 odd]) against a channel pair
 * (w: [groups][2][4]); acc[2 * pixel + channel] += ... */
TMS_INLINE void dot16_2x2(const int8_t* col, const int8_t* w, int32_t groups, int32_t* acc) {
  int32_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3];
  const tms_w32_t* c = (const tms_w32_t*)col;
  const tms_w32_t* wp = (const tms_w32_t*)w;
  for (; groups > 0; --groups, c += 4, wp += 2) {
    int32_t we = sxtb16(wp[0]), wo = sxtb16_ror8(wp[0]);
    a00 = smlad(c[0], we, a00);
    a00 = smlad(c[1], wo, a00);
    a10 = smlad(c[2], we, a10);
    a10 = smlad(c[3], wo, a10);
    we = sxtb16(wp[1]);
    wo = sxtb16_ror8(wp[1]);
    a01 = smlad(c[0], we, a01);
    a01 = smlad(c[1], wo, a01);
    a11 = smlad(c[2], we, a11);
    a11 = smlad(c[3], wo, a11);
  }
  acc[0] = a00;
  acc[1] = a01;
  acc[2] = a10;
  acc[3] = a11;
}

TMS_INLINE void conv16_two_impl(const int mode, const int8_t* col, const int8_t* w, const tms_chan_t* ch,
                                int32_t K4, int32_t oc, int8_t* y0, int8_t* y1, const tms_out_t* o) {
  const tms_chan_t* end = ch + (oc & ~1);
  for (; ch < end; ch += 2, w += 2 * K4, y0 += 2, y1 += 2) {
    int32_t acc[4] = {ch[0].bias, ch[1].bias, ch[0].bias, ch[1].bias};
    dot16_2x2(col, w, K4 >> 2, acc);
    y0[0] = out1(mode, ch, acc[0], o);
    y1[0] = out1(mode, ch, acc[2], o);
    y0[1] = out1(mode, ch + 1, acc[1], o);
    y1[1] = out1(mode, ch + 1, acc[3], o);
  }
  if (oc & 1) { /* the partner of the last channel: zero weights */
    int32_t acc[4] = {ch[0].bias, 0, ch[0].bias, 0};
    dot16_2x2(col, w, K4 >> 2, acc);
    y0[0] = out1(mode, ch, acc[0], o);
    y1[0] = out1(mode, ch, acc[2], o);
  }
}
TMS_MODES(conv16_two, (const int8_t* col, const int8_t* w, const tms_chan_t* ch, int32_t K4, int32_t oc, int8_t* y0, int8_t* y1, const tms_out_t* o), col, w, ch, K4, oc, y0, y1, o)

#if TMS_ASM
/* conv_pairs_m4 over the widened column: two groups per pass (an odd count enters at the second). */
__attribute__((naked, noinline, unused)) static void conv16_pairs_m4(const tms_job_t* job __attribute__((unused))) {
  __asm__ volatile(
      TMS_ASM_PAIRS_ENTER
      "ldr r0, [r8, #0]\n\t"          /* widened column */
      "ldr r2, [r8, #20]\n\t"         /* passes: (groups + 1) / 2 */
      "ldr r7, [r8, #44]\n\t"         /* an odd group count */
      "cbnz r7, 5f\n\t"
      "2:\n\t"
      "ldm r0!, {r7, r8, r9, r10}\n\t" /* p0 (x0, x2), p0 (x1, x3), p1 ..., p1 ... */
      "ldrd r11, r12, [r1], #8\n\t"   /* wa wb */
      "sxtb16 lr, r11\n\t"
      "smlad r3, r7, lr, r3\n\t"
      "smlad r5, r9, lr, r5\n\t"
      "sxtb16 r11, r11, ror #8\n\t"
      "smlad r3, r8, r11, r3\n\t"
      "smlad r5, r10, r11, r5\n\t"
      "sxtb16 lr, r12\n\t"
      "smlad r4, r7, lr, r4\n\t"
      "smlad r6, r9, lr, r6\n\t"
      "sxtb16 r12, r12, ror #8\n\t"
      "smlad r4, r8, r12, r4\n\t"
      "smlad r6, r10, r12, r6\n\t"
      "5:\n\t"
      "ldm r0!, {r7, r8, r9, r10}\n\t"
      "ldrd r11, r12, [r1], #8\n\t"
      "sxtb16 lr, r11\n\t"
      "smlad r3, r7, lr, r3\n\t"
      "smlad r5, r9, lr, r5\n\t"
      "sxtb16 r11, r11, ror #8\n\t"
      "smlad r3, r8, r11, r3\n\t"
      "smlad r5, r10, r11, r5\n\t"
      "sxtb16 lr, r12\n\t"
      "smlad r4, r7, lr, r4\n\t"
      "smlad r6, r9, lr, r6\n\t"
      "sxtb16 r12, r12, ror #8\n\t"
      "smlad r4, r8, r12, r4\n\t"
      "smlad r6, r10, r12, r6\n\t"
      "subs r2, r2, #1\n\t"
      "bne 2b\n\t"
      TMS_ASM_PAIRS_EXIT);
}
#endif
#endif

void tms_conv_s8_wide(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                      int8_t* col) {
#if TMS_DSP && !TMS_MVE
  const int32_t K = p->kh * p->kw * p->in_c, K4 = (K + 3) & ~3, oc = p->out_c;
  const int32_t npix = p->out_h * p->out_w;
  const tms_out_t o = out_params(p->out_zp, p->act_min, p->act_max);
  const int mode = out_mode(tab, p->act_min, p->act_max);
  int8_t* col8 = col + 2 * K4;     /* a last pixel alone: its int8 window */
  /* the widened padding (K..K4) meets zero weights: give it a value */
  for (int32_t k = K; k < K4; ++k)
    for (int j = 0; j < 2; ++j) *(tms_h16_t*)(col + 16 * (k >> 2) + 8 * j + 4 * (k & 1) + (k & 2)) = 0;
#if TMS_ASM
  const int32_t even = oc & ~1;
  const int32_t groups = K4 >> 2;
  tms_job_t job = {col, w, tab + 1, y, oc, (groups + 1) >> 1, oc / 2, o.z21,
                   (int32_t)((uint32_t)(uint8_t)o.lo * 0x01010101u), (int32_t)((uint32_t)(uint8_t)o.hi * 0x01010101u),
                   mode == TMS_FAST_CLAMP, groups & 1};
  const int by_asm = mode != TMS_EXACT && even > 0;
#endif
  for (int32_t b = 0; b < p->batch; ++b) {
    const int8_t* xb = x + (int32_t)b * p->in_h * p->in_w * p->in_c;
    int8_t* yb = y + (int32_t)b * npix * oc;
    int32_t oy = 0, ox = 0;
    for (int32_t pix = 0; pix < npix; pix += 2) {
      int8_t* y0 = yb + pix * oc;
      if (pix + 1 == npix) { /* a last pixel alone: its int8 window, padding zeroed as tms_conv_s8 does */
        im2col(p, xb, oy, ox, col8, 0);
        for (int32_t k = K; k < K4; ++k) col8[((k >> 2) << 3) + (k & 3)] = 0;
        TMS_BY_MODE(mode, fc_row, col8, 8, w, tab + 1, K4, oc, y0, &o);
        break;
      }
      im2col16(p, xb, oy, ox, col, 0);
      if (++ox == p->out_w) ox = 0, ++oy;
      im2col16(p, xb, oy, ox, col, 1);
      if (++ox == p->out_w) ox = 0, ++oy;
#if TMS_ASM
      if (by_asm) {
        job.y0 = y0;
        conv16_pairs_m4(&job);
        if (oc & 1) conv16_two(mode, col, w + even * K4, tab + 1 + even, K4, 1, y0 + even, y0 + oc + even, &o);
        continue;
      }
#endif
      TMS_BY_MODE(mode, conv16_two, col, w, tab + 1, K4, oc, y0, y0 + oc, &o);
    }
  }
#else
  tms_conv_s8(p, x, w, tab, y, col);
#endif
}

/* ------------------------------------------------------------------ FULLY_CONNECTED */
#if TMS_ASM
/* fc_row with the fast requantisation, four output channels at a time (two packed pairs), hand-
 * scheduled for ARMv7E-M: every input word widened once feeds four channels; outputs packed into one
 * word (clamped at once with SSUB8/SEL when the activation range is narrower than int8). */
typedef struct {
  const int8_t* x;       /*  0: the input row (K multiple of 4) */
  const int8_t* w;       /*  4: packed weights of pair 0 */
  const tms_chan_t* ch;  /*  8 */
  int8_t* y;             /* 12 */
  int32_t kiters;        /* 16: K / 4 >= 1 */
  int32_t groups;        /* 20: output channels / 4 >= 1 */
  int32_t z21;           /* 24 */
  int32_t lo4, hi4;      /* 28, 32 */
  int32_t clamp;         /* 36 */
  int32_t extra;         /* 40: fc_groups_m4: 2 * K (the second pair's offset); fc16_blocks_m4: K / 4 odd */
} tms_fcjob_t;

__attribute__((naked, noinline, unused)) static void fc_groups_m4(const tms_fcjob_t* job __attribute__((unused))) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "sub sp, sp, #16\n\t"
      "str r0, [sp, #0]\n\t"
      "ldr r1, [r0, #20]\n\t"
      "str r1, [sp, #4]\n\t"          /* groups left */
      "ldr r1, [r0, #8]\n\t"
      "str r1, [sp, #8]\n\t"          /* ch */
      "ldr r1, [r0, #12]\n\t"
      "str r1, [sp, #12]\n\t"         /* y */
      "ldr r1, [r0, #4]\n\t"          /* weights of the group's first pair */
      "1:\n\t"
      "ldr r12, [sp, #0]\n\t"
      "ldr r7, [r12, #40]\n\t"
      "add r2, r1, r7\n\t"            /* second pair */
      "ldr r7, [sp, #8]\n\t"
      "ldr r3, [r7, #0]\n\t"
      "ldr r4, [r7, #12]\n\t"
      "ldr r5, [r7, #24]\n\t"
      "ldr r6, [r7, #36]\n\t"
      "ldr r0, [r12, #0]\n\t"         /* x */
      "ldr lr, [r12, #16]\n\t"        /* k iterations */
      "2:\n\t"
      "ldr r7, [r0], #4\n\t"
      "ldrd r8, r9, [r1], #8\n\t"
      "sxtb16 r10, r7\n\t"
      "sxtb16 r7, r7, ror #8\n\t"
      "sxtb16 r11, r8\n\t"
      "sxtb16 r8, r8, ror #8\n\t"
      "smlad r3, r10, r11, r3\n\t"
      "smlad r3, r7, r8, r3\n\t"
      "sxtb16 r11, r9\n\t"
      "sxtb16 r9, r9, ror #8\n\t"
      "smlad r4, r10, r11, r4\n\t"
      "smlad r4, r7, r9, r4\n\t"
      "ldrd r8, r9, [r2], #8\n\t"
      "sxtb16 r11, r8\n\t"
      "sxtb16 r8, r8, ror #8\n\t"
      "smlad r5, r10, r11, r5\n\t"
      "smlad r5, r7, r8, r5\n\t"
      "sxtb16 r11, r9\n\t"
      "sxtb16 r9, r9, ror #8\n\t"
      "smlad r6, r10, r11, r6\n\t"
      "smlad r6, r7, r9, r6\n\t"
      "subs lr, lr, #1\n\t"
      "bne 2b\n\t"
      "mov r1, r2\n\t"                /* the next group starts after the second pair */
      "ldr r0, [sp, #8]\n\t"          /* ch */
      "ldr lr, [sp, #0]\n\t"
      "ldr r12, [lr, #24]\n\t"        /* z21 */
      "ldrd r7, r8, [r0, #4]\n\t"
      TMS_ASM_RQ("r3")
      "ldrd r7, r8, [r0, #16]\n\t"
      TMS_ASM_RQ("r4")
      "ldrd r7, r8, [r0, #28]\n\t"
      TMS_ASM_RQ("r5")
      "ldrd r7, r8, [r0, #40]\n\t"
      TMS_ASM_RQ("r6")
      "bfi r3, r4, #8, #8\n\t"
      "bfi r3, r5, #16, #8\n\t"
      "bfi r3, r6, #24, #8\n\t"
      "ldr r7, [lr, #36]\n\t"
      "cbz r7, 3f\n\t"
      "ldrd r7, r8, [lr, #28]\n\t"
      TMS_ASM_CLAMP4("r3", "r7", "r8", "r9")
      "3:\n\t"
      "ldr r7, [sp, #12]\n\t"
      "str r3, [r7], #4\n\t"
      "str r7, [sp, #12]\n\t"
      "add r0, r0, #48\n\t"
      "str r0, [sp, #8]\n\t"
      "ldr r7, [sp, #4]\n\t"
      "subs r7, r7, #1\n\t"
      "str r7, [sp, #4]\n\t"
      "bne 1b\n\t"
      "add sp, sp, #16\n\t"
      "pop {r4-r11, pc}\n\t");
}
#endif


/* ------------------------------------------------------------------ FULLY_CONNECTED, paired channels */
/* Weights in the pair16 layout (the table's TMS_PACK_PAIR16; tvm_memsched.micro.nn.pack_pair16, exported for
 * cores with the DSP extension): output channels c, c + 1 share int16 h = w[c][k] + 256 w[c + 1][k] per
 * input (both int8, so h's low byte is w[c][k] and its bytes are as many as the two channels' weights); per
 * group of four inputs the words [h(k), h(k + 2)] and [h(k + 1), h(k + 3)], which face the input word's
 * SXTB16 and SXTB16 ROR #8 halves; two pairs interleaved per group, [n/4][K4/4][2][2] words. One SMLAD of a
 * word sums w[c] x + 256 w[c + 1] x over two inputs, one more after SXTB16 (the low bytes) w[c] x alone:
 * their difference, shifted right by 8, is channel c + 1's sum, exact where |sum of w[c + 1] x| < 2^23
 * (the export packs so only then). Three instructions per four multiply-accumulates instead of four. */
TMS_INLINE int32_t pair16_low(int32_t h) { return (int8_t)(uint8_t)((uint32_t)h & 0xffu); }

/* one channel pair's sums over K inputs at x (s0, s1: their biases in, sums out); w: the pair's words of the
 * first group (the next group's 16 bytes on) */
TMS_INLINE void fc16_pair(const int8_t* x, const int8_t* w, int32_t K, int32_t* s0, int32_t* s1) {
  const tms_w32_t* wp = (const tms_w32_t*)w;
  int32_t a = *s0, b = *s1, rest = K;
#if TMS_DSP
  int32_t ab = a;
  for (int32_t g = K >> 2; g > 0; --g, x += 4, wp += 4) {
    const int32_t xv = rd32(x), xe = sxtb16(xv), xo = sxtb16_ror8(xv);
    a = smlad(sxtb16(wp[0]), xe, a);
    ab = smlad(wp[0], xe, ab);
    a = smlad(sxtb16(wp[1]), xo, a);
    ab = smlad(wp[1], xo, ab);
  }
  b += (int32_t)((uint32_t)ab - (uint32_t)a) >> 8;
  rest = K & 3;                        /* the last group's first K % 4 inputs, one by one */
#endif
  for (int32_t i = 0; i < rest; ++i) {
    const int p = i & 3;
    const int32_t h = ((const tms_h16_t*)(wp + 4 * (i >> 2) + (p & 1)))[p >> 1], lo = pair16_low(h);
    a += lo * x[i];
    b += ((h - lo) >> 8) * x[i];
  }
  *s0 = a;
  *s1 = b;
}

TMS_INLINE void fc16_row_impl(const int mode, const int8_t* x, const int8_t* w, const tms_chan_t* ch, int32_t K,
                              int32_t n, int8_t* y, const tms_out_t* o) {
  const int32_t K4 = (K + 3) & ~3;
  for (int32_t c = 0; c < n; c += 2) {   /* pair c / 2: block c / 4, its second pair 8 bytes on */
    const int n1 = c + 1 < n;
    int32_t s0 = ch[c].bias, s1 = n1 ? ch[c + 1].bias : 0;
    fc16_pair(x, w + (c >> 2) * 4 * K4 + (c & 2) * 4, K, &s0, &s1);
    y[c] = out1(mode, ch + c, s0, o);
    if (n1) y[c + 1] = out1(mode, ch + c + 1, s1, o);
  }
}
TMS_MODES(fc16_row, (const int8_t* x, const int8_t* w, const tms_chan_t* ch, int32_t K, int32_t n, int8_t* y, const tms_out_t* o), x, w, ch, K, n, y, o)

#if TMS_ASM
/* fc16_row with the fast requantisation for whole blocks of four channels, K a multiple of 4, two groups of
 * inputs per pass (an odd count enters at the second): every input word widened once feeds four channels, one
 * LDM a block's group of weights; 17 instructions per 16 multiply-accumulates. */

#define TMS_ASM_FC16_GROUP                                                                \
  "ldr r7, [r0], #4\n\t"                                                                  \
  "sxtb16 r8, r7, ror #8\n\t"     /* x1, x3 */                                            \
  "sxtb16 r7, r7\n\t"             /* x0, x2 */                                            \
  "ldm r1!, {r9, r10, r11, r12}\n\t"                                                      \
  "sxtb16 lr, r9\n\t"                                                                     \
  "smlad r3, lr, r7, r3\n\t"                                                              \
  "smlad r4, r9, r7, r4\n\t"                                                              \
  "sxtb16 lr, r10\n\t"                                                                    \
  "smlad r3, lr, r8, r3\n\t"                                                              \
  "smlad r4, r10, r8, r4\n\t"                                                             \
  "sxtb16 lr, r11\n\t"                                                                    \
  "smlad r5, lr, r7, r5\n\t"                                                              \
  "smlad r6, r11, r7, r6\n\t"                                                             \
  "sxtb16 lr, r12\n\t"                                                                    \
  "smlad r5, lr, r8, r5\n\t"                                                              \
  "smlad r6, r12, r8, r6\n\t"

__attribute__((naked, noinline, unused)) static void fc16_blocks_m4(const tms_fcjob_t* job __attribute__((unused))) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "sub sp, sp, #16\n\t"
      "str r0, [sp, #0]\n\t"
      "ldr r1, [r0, #20]\n\t"
      "str r1, [sp, #4]\n\t"          /* blocks left */
      "ldr r1, [r0, #8]\n\t"
      "str r1, [sp, #8]\n\t"          /* ch */
      "ldr r1, [r0, #12]\n\t"
      "str r1, [sp, #12]\n\t"         /* y */
      "ldr r1, [r0, #4]\n\t"          /* weights: advance through the blocks */
      "1:\n\t"
      "ldr r12, [sp, #0]\n\t"
      "ldr r7, [sp, #8]\n\t"
      "ldr r3, [r7, #0]\n\t"          /* channel 0: bias */
      "mov r4, r3\n\t"                /* channel 0 + 256 channel 1 */
      "ldr r5, [r7, #24]\n\t"         /* channel 2 */
      "mov r6, r5\n\t"                /* channel 2 + 256 channel 3 */
      "ldr r0, [r12, #0]\n\t"         /* x */
      "ldr r2, [r12, #16]\n\t"        /* passes */
      "ldr r7, [r12, #40]\n\t"
      "cbnz r7, 5f\n\t"
      "2:\n\t"
      TMS_ASM_FC16_GROUP
      "5:\n\t"
      TMS_ASM_FC16_GROUP
      "subs r2, r2, #1\n\t"
      "bne 2b\n\t"
      "ldr lr, [sp, #0]\n\t"
      "ldr r0, [sp, #8]\n\t"          /* ch */
      "sub r4, r4, r3\n\t"            /* 256 x channel 1's sum */
      "ldr r7, [r0, #12]\n\t"
      "add r4, r7, r4, asr #8\n\t"
      "sub r6, r6, r5\n\t"
      "ldr r7, [r0, #36]\n\t"
      "add r6, r7, r6, asr #8\n\t"
      "ldr r12, [lr, #24]\n\t"        /* z21 */
      "ldrd r7, r8, [r0, #4]\n\t"
      TMS_ASM_RQ("r3")
      "ldrd r7, r8, [r0, #16]\n\t"
      TMS_ASM_RQ("r4")
      "ldrd r7, r8, [r0, #28]\n\t"
      TMS_ASM_RQ("r5")
      "ldrd r7, r8, [r0, #40]\n\t"
      TMS_ASM_RQ("r6")
      "bfi r3, r4, #8, #8\n\t"
      "bfi r3, r5, #16, #8\n\t"
      "bfi r3, r6, #24, #8\n\t"
      "ldr r7, [lr, #36]\n\t"
      "cbz r7, 3f\n\t"
      "ldrd r7, r8, [lr, #28]\n\t"
      TMS_ASM_CLAMP4("r3", "r7", "r8", "r9")
      "3:\n\t"
      "ldr r7, [sp, #12]\n\t"
      "str r3, [r7], #4\n\t"
      "str r7, [sp, #12]\n\t"
      "add r0, r0, #48\n\t"
      "str r0, [sp, #8]\n\t"
      "ldr r7, [sp, #4]\n\t"
      "subs r7, r7, #1\n\t"
      "str r7, [sp, #4]\n\t"
      "bne 1b\n\t"
      "add sp, sp, #16\n\t"
      "pop {r4-r11, pc}\n\t");
}
#endif

void tms_fc_s8(const tms_fc_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y) {
  const int32_t K = p->in_n, n = p->out_n;
  const tms_out_t o = out_params(p->out_zp, p->act_min, p->act_max);
  const int mode = out_mode(tab, p->act_min, p->act_max);
  /* the layout of the weights, among the compiled ones */
  const int pair16 = TMS_NN_FC_PAIR16 && (!TMS_NN_FC_PAIRS || (tab[0].bias & TMS_PACK_PAIR16) != 0);
#if TMS_ASM && !TMS_MVE
  if (mode != TMS_EXACT && (K & 3) == 0 && K > 0 && n >= 4) {   /* groups of four channels in assembly, the rest in C */
    const int32_t n4 = n & ~3;
    tms_fcjob_t job = {x, w, tab + 1, y, pair16 ? ((K >> 2) + 1) >> 1 : K / 4, n / 4, o.z21,
                       (int32_t)((uint32_t)(uint8_t)o.lo * 0x01010101u), (int32_t)((uint32_t)(uint8_t)o.hi * 0x01010101u),
                       mode == TMS_FAST_CLAMP, pair16 ? (K >> 2) & 1 : 2 * K};
    for (int32_t r = 0; r < p->rows; ++r, x += K, y += n) {
      job.x = x;
      job.y = y;
      if (pair16) {
        fc16_blocks_m4(&job);
        if (n4 < n) fc16_row(mode, x, w + n4 * K, tab + 1 + n4, K, n - n4, y + n4, &o);
      } else {
        fc_groups_m4(&job);
        if (n4 < n) fc_row(mode, x, 4, w + n4 * K, tab + 1 + n4, K, n - n4, y + n4, &o);
      }
    }
    return;
  }
#endif
  for (int32_t r = 0; r < p->rows; ++r, x += K, y += n) {
    if (pair16)
      TMS_BY_MODE(mode, fc16_row, x, w, tab + 1, K, n, y, &o);
    else
      TMS_BY_MODE(mode, fc_row, x, 4, w, tab + 1, K, n, y, &o);
  }
}

/* ------------------------------------------------------------------ DEPTHWISE_CONV_2D */
/* Weights are packed per block of four channels: tap pairs (t, t + 1) as two words, channels
 * (0, 1) then (2, 3), each word holding [w_t[c], w_t[c + 1], w_t+1[c], w_t+1[c + 1]] (so SXTB16 gives
 * one channel's two taps), and an odd last tap as one word [w_t[0..3]]: 4 * taps bytes per block,
 * zero beyond C. The input side pairs two taps' words with PKHBT/PKHTB: one SMLAD per channel does
 * two taps. */
#if TMS_DSP
TMS_INLINE int32_t pkhbt16(int32_t lo, int32_t hi) { /* low half of lo, low half of hi << 16 */
#if TMS_ASM
  int32_t r;
  __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
  return r;
#else
  return (int32_t)(((uint32_t)lo & 0xffffu) | ((uint32_t)hi << 16));
#endif
}
TMS_INLINE int32_t pkhtb16(int32_t hi, int32_t lo) { /* high half of hi, high half of lo >> 16 */
#if TMS_ASM
  int32_t r;
  __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(hi), "r"(lo));
  return r;
#else
  return (int32_t)(((uint32_t)hi & 0xffff0000u) | ((uint32_t)lo >> 16));
#endif
}
#endif

#if TMS_V6M_ASM
/* dw_block4 in Thumb-1 assembly: per tap pair, the two taps' offsets (LDM), the block's two weight words
 * (LDM) whose bytes are sign-extended by shifts, the inputs by LDRB + SXTB (no word loads: a pixel's
 * channels need not be aligned); accumulators in r8-r11, the window origin in r12, the end of the tap
 * pairs' offsets in lr; ``taps`` the fifth argument (on the stack). 50 instructions per 8 MACs. */
#define TMS_V6M_DW(xo, wsh, acc)                                                     \
  "ldrb r5, [" xo "]\n\t"                                                                   \
  "sxtb r5, r5\n\t"                                                                         \
  wsh                                                                                     \
  "muls r0, r5\n\t"                                                                         \
  "add " acc ", r0\n\t"
#define TMS_V6M_B0(w) "sxtb r0, " w "\n\t"
#define TMS_V6M_B1(w) "lsls r0, " w ", #16\n\tasrs r0, r0, #24\n\t"
#define TMS_V6M_B2(w) "lsls r0, " w ", #8\n\tasrs r0, r0, #24\n\t"
#define TMS_V6M_B3(w) "asrs r0, " w ", #24\n\t"
__attribute__((naked, noinline)) static void dw_block4_v6m(const int8_t* x __attribute__((unused)),
                                                            const int32_t* toff __attribute__((unused)),
                                                            const int8_t* wb __attribute__((unused)),
                                                            int32_t* acc __attribute__((unused)),
                                                            int32_t taps __attribute__((unused))) {
  __asm__ volatile(
      TMS_V6M_SAVE
      "push {r3}\n\t"
      TMS_V6M_ACC_IN("r3")
      "mov r12, r0\n\t"
      "ldr r4, [sp, #40]\n\t"      /* taps */
      "lsrs r5, r4, #1\n\t"
      "lsls r5, r5, #3\n\t"
      "adds r5, r5, r1\n\t"
      "mov lr, r5\n\t"              /* offsets of the tap pairs end here */
      "cmp r1, r5\n\t"
      "beq 2f\n\t"
      "1:\n\t"
      "ldm r1!, {r3, r4}\n\t"
      "add r3, r12\n\t"
      "add r4, r12\n\t"
      "ldm r2!, {r6, r7}\n\t"
      TMS_V6M_DW("r3, #0", TMS_V6M_B0("r6"), "r8")
      TMS_V6M_DW("r4, #0", TMS_V6M_B2("r6"), "r8")
      TMS_V6M_DW("r3, #1", TMS_V6M_B1("r6"), "r9")
      TMS_V6M_DW("r4, #1", TMS_V6M_B3("r6"), "r9")
      TMS_V6M_DW("r3, #2", TMS_V6M_B0("r7"), "r10")
      TMS_V6M_DW("r4, #2", TMS_V6M_B2("r7"), "r10")
      TMS_V6M_DW("r3, #3", TMS_V6M_B1("r7"), "r11")
      TMS_V6M_DW("r4, #3", TMS_V6M_B3("r7"), "r11")
      "cmp r1, lr\n\t"
      "bne 1b\n\t"
      "2:\n\t"
      "ldr r4, [sp, #40]\n\t"
      "lsrs r4, r4, #1\n\t"
      "bcc 3f\n\t"                  /* an odd last tap: one word [c0..c3] */
      "ldr r3, [r1]\n\t"
      "add r3, r12\n\t"
      "ldr r6, [r2]\n\t"
      TMS_V6M_DW("r3, #0", TMS_V6M_B0("r6"), "r8")
      TMS_V6M_DW("r3, #1", TMS_V6M_B1("r6"), "r9")
      TMS_V6M_DW("r3, #2", TMS_V6M_B2("r6"), "r10")
      TMS_V6M_DW("r3, #3", TMS_V6M_B3("r6"), "r11")
      "3:\n\t"
      "pop {r3}\n\t"
      TMS_V6M_ACC_OUT("r3")
      TMS_V6M_RESTORE);
}
/* the tap offsets of a gathered window (tap t at 4 t) */
static const int32_t tms_v6m_linear[TMS_DW_MAX_TAPS] = {
    0,   4,   8,   12,  16,  20,  24,  28,  32,  36,  40,  44,  48,  52,  56,  60,  64,  68,  72,  76,  80,  84,
    88,  92,  96,  100, 104, 108, 112, 116, 120, 124, 128, 132, 136, 140, 144, 148, 152, 156, 160, 164, 168, 172,
    176, 180, 184, 188, 192, 196, 200, 204, 208, 212, 216, 220, 224, 228, 232, 236, 240, 244, 248, 252};
#endif

/* Four channels of one output pixel over ``taps`` taps: tap t's input word at x + off(t), where
 * off(t) = toff[t], or 4 t when ``linear`` (a gathered window). */
TMS_INLINE void dw_block4(const int linear, const int8_t* x, const int32_t* toff, const int8_t* wb, int32_t taps,
                          int32_t* acc) {
  int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
  const tms_w32_t* wp = (const tms_w32_t*)wb;
  int32_t t = 0;
#if TMS_DSP
  for (; t + 1 < taps; t += 2, wp += 2) {
    int32_t x0 = rd32(x + (linear ? 4 * t : toff[t])), x1 = rd32(x + (linear ? 4 * t + 4 : toff[t + 1]));
    int32_t wa = wp[0], wb2 = wp[1];
    int32_t p01 = pkhbt16(x0, x1), p23 = pkhtb16(x1, x0);
    a0 = smlad(sxtb16(p01), sxtb16(wa), a0);
    a1 = smlad(sxtb16_ror8(p01), sxtb16_ror8(wa), a1);
    a2 = smlad(sxtb16(p23), sxtb16(wb2), a2);
    a3 = smlad(sxtb16_ror8(p23), sxtb16_ror8(wb2), a3);
  }
  if (t < taps) {
    int32_t xv = rd32(x + (linear ? 4 * t : toff[t])), wv = wp[0];
    int32_t xe = sxtb16(xv), xo = sxtb16_ror8(xv), we = sxtb16(wv), wo = sxtb16_ror8(wv);
    a0 = smlabb(xe, we, a0);
    a2 = smlatt(xe, we, a2);
    a1 = smlabb(xo, wo, a1);
    a3 = smlatt(xo, wo, a3);
  }
#elif TMS_V6M_ASM
  (void)wp;
  (void)t;
  dw_block4_v6m(x, linear ? tms_v6m_linear : toff, wb, acc, taps);
  a0 = acc[0];
  a1 = acc[1];
  a2 = acc[2];
  a3 = acc[3];
#else
  const int8_t* w8 = wb;
  for (; t + 1 < taps; t += 2, w8 += 8) {
    const int8_t* p0 = x + (linear ? 4 * t : toff[t]);
    const int8_t* p1 = x + (linear ? 4 * t + 4 : toff[t + 1]);
    a0 += p0[0] * w8[0] + p1[0] * w8[2];
    a1 += p0[1] * w8[1] + p1[1] * w8[3];
    a2 += p0[2] * w8[4] + p1[2] * w8[6];
    a3 += p0[3] * w8[5] + p1[3] * w8[7];
  }
  if (t < taps) {
    const int8_t* p0 = x + (linear ? 4 * t : toff[t]);
    a0 += p0[0] * w8[0];
    a1 += p0[1] * w8[1];
    a2 += p0[2] * w8[2];
    a3 += p0[3] * w8[3];
  }
  (void)wp;
#endif
  acc[0] = a0;
  acc[1] = a1;
  acc[2] = a2;
  acc[3] = a3;
}

#if TMS_ASM
/* dw_pixel's interior path with the fast requantisation, hand-scheduled for ARMv7E-M: every
 * four-channel block of one output pixel, two taps per SMLAD (PKHBT/PKHTB pair the taps' words), the
 * four outputs packed into one word (clamped at once with SSUB8/SEL when the activation range is
 * narrower than int8). Same arithmetic as dw_block4 + rq_fast. */
typedef struct {
  const int8_t* xw;      /*  0: window origin of the first pixel, channel 0 */
  const int32_t* toff;   /*  4: tap offsets */
  const int8_t* w;       /*  8: packed weights of block 0 */
  const tms_chan_t* ch;  /* 12: channel entries of block 0 */
  int8_t* y;             /* 16: output of the first pixel, channel 0 */
  int32_t pairs;         /* 20: taps / 2 */
  int32_t odd;           /* 24: taps % 2 */
  int32_t blocks;        /* 28: C / 4 >= 1 */
  int32_t z21;           /* 32 */
  int32_t lo4, hi4;      /* 36, 40 */
  int32_t clamp;         /* 44 */
  int32_t pixels;        /* 48: pixels of the row to compute >= 1 */
  int32_t xstep;         /* 52: bytes from one pixel's window to the next (stride x C) */
  int32_t ystep;         /* 56: C */
} tms_dwjob_t;

/* channels per assembly call of a border pixel (a row of the input zero point that long on the stack) */
#define TMS_DW_ZP_MAX 64

__attribute__((naked, noinline)) static void dw_row_m4(const tms_dwjob_t* job __attribute__((unused))) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "sub sp, sp, #24\n\t"
      "str r0, [sp, #0]\n\t"          /* job */
      "ldr r1, [r0, #48]\n\t"
      "str r1, [sp, #16]\n\t"         /* pixels left */
      "ldr r1, [r0, #0]\n\t"
      "str r1, [sp, #20]\n\t"         /* window origin of this pixel */
      "ldr r1, [r0, #16]\n\t"
      "str r1, [sp, #12]\n\t"         /* y of this pixel's block */
      "6:\n\t"                        /* next pixel */
      "ldr r8, [sp, #0]\n\t"
      "ldr r1, [r8, #28]\n\t"
      "str r1, [sp, #4]\n\t"          /* blocks left */
      "ldr r1, [r8, #12]\n\t"
      "str r1, [sp, #8]\n\t"          /* ch */
      "ldr r2, [r8, #8]\n\t"          /* w: advances through the blocks */
      "ldr r0, [sp, #20]\n\t"         /* xw of block 0 */
      "1:\n\t"
      "ldr r7, [sp, #8]\n\t"
      "ldr r3, [r7, #0]\n\t"
      "ldr r4, [r7, #12]\n\t"
      "ldr r5, [r7, #24]\n\t"
      "ldr r6, [r7, #36]\n\t"
      "ldr r8, [sp, #0]\n\t"
      "ldr r1, [r8, #4]\n\t"          /* toff */
      "ldr lr, [r8, #20]\n\t"         /* pairs */
      "cmp lr, #0\n\t"
      "beq 4f\n\t"
      "2:\n\t"
      "ldrd r7, r8, [r1], #8\n\t"     /* offsets of taps t, t + 1 */
      "ldr r7, [r0, r7]\n\t"
      "ldr r8, [r0, r8]\n\t"
      "ldrd r9, r10, [r2], #8\n\t"    /* weights: channels (0, 1), (2, 3) of both taps */
      "pkhbt r11, r7, r8, lsl #16\n\t"
      "pkhtb r12, r8, r7, asr #16\n\t"
      "sxtb16 r7, r11\n\t"
      "sxtb16 r8, r9\n\t"
      "smlad r3, r7, r8, r3\n\t"
      "sxtb16 r11, r11, ror #8\n\t"
      "sxtb16 r9, r9, ror #8\n\t"
      "smlad r4, r11, r9, r4\n\t"
      "sxtb16 r7, r12\n\t"
      "sxtb16 r8, r10\n\t"
      "smlad r5, r7, r8, r5\n\t"
      "sxtb16 r12, r12, ror #8\n\t"
      "sxtb16 r10, r10, ror #8\n\t"
      "smlad r6, r12, r10, r6\n\t"
      "subs lr, lr, #1\n\t"
      "bne 2b\n\t"
      "4:\n\t"
      "ldr r8, [sp, #0]\n\t"
      "ldr r7, [r8, #24]\n\t"
      "cbz r7, 5f\n\t"                /* an odd last tap: one word per side */
      "ldr r7, [r1]\n\t"
      "ldr r7, [r0, r7]\n\t"
      "ldr r9, [r2], #4\n\t"
      "sxtb16 r8, r7\n\t"
      "sxtb16 r10, r9\n\t"
      "smlabb r3, r8, r10, r3\n\t"
      "smlatt r5, r8, r10, r5\n\t"
      "sxtb16 r7, r7, ror #8\n\t"
      "sxtb16 r9, r9, ror #8\n\t"
      "smlabb r4, r7, r9, r4\n\t"
      "smlatt r6, r7, r9, r6\n\t"
      "5:\n\t"
      "ldr r1, [sp, #8]\n\t"          /* ch */
      "ldr lr, [sp, #0]\n\t"
      "ldr r12, [lr, #32]\n\t"        /* z21 */
      "ldrd r7, r8, [r1, #4]\n\t"
      TMS_ASM_RQ("r3")
      "ldrd r7, r8, [r1, #16]\n\t"
      TMS_ASM_RQ("r4")
      "ldrd r7, r8, [r1, #28]\n\t"
      TMS_ASM_RQ("r5")
      "ldrd r7, r8, [r1, #40]\n\t"
      TMS_ASM_RQ("r6")
      "bfi r3, r4, #8, #8\n\t"
      "bfi r3, r5, #16, #8\n\t"
      "bfi r3, r6, #24, #8\n\t"
      "ldr r7, [lr, #44]\n\t"
      "cbz r7, 3f\n\t"
      "ldrd r7, r8, [lr, #36]\n\t"
      TMS_ASM_CLAMP4("r3", "r7", "r8", "r9")
      "3:\n\t"
      "ldr r7, [sp, #12]\n\t"
      "str r3, [r7], #4\n\t"
      "str r7, [sp, #12]\n\t"
      "add r1, r1, #48\n\t"
      "str r1, [sp, #8]\n\t"
      "add r0, r0, #4\n\t"
      "ldr r7, [sp, #4]\n\t"
      "subs r7, r7, #1\n\t"
      "str r7, [sp, #4]\n\t"
      "bne 1b\n\t"
      "ldr lr, [sp, #0]\n\t"          /* next pixel: window and output */
      "ldr r7, [sp, #20]\n\t"
      "ldr r8, [lr, #52]\n\t"
      "add r7, r7, r8\n\t"
      "str r7, [sp, #20]\n\t"
      "ldr r7, [sp, #12]\n\t"
      "ldr r8, [lr, #56]\n\t"
      "ldr r9, [lr, #28]\n\t"
      "sub r7, r7, r9, lsl #2\n\t"    /* back to channel 0 of this pixel */
      "add r7, r7, r8\n\t"
      "str r7, [sp, #12]\n\t"
      "ldr r7, [sp, #16]\n\t"
      "subs r7, r7, #1\n\t"
      "str r7, [sp, #16]\n\t"
      "bne 6b\n\t"
      "add sp, sp, #24\n\t"
      "pop {r4-r11, pc}\n\t");
}
#endif

/* Weight of tap t, channel j (< 4) in a packed block (the tail channels' scalar path). */
static int32_t dw_weight(const int8_t* wb, int32_t taps, int32_t t, int32_t j) {
  if (t == taps - 1 && (taps & 1)) return wb[4 * t + j];
  return wb[8 * (t >> 1) + 4 * (j >> 1) + (j & 1) + 2 * (t & 1)];
}

/* One output pixel. ``valid`` (NULL: every tap is inside the image) says which taps are; taps
 * outside read the input zero point, through a gathered window ``win`` of the block's taps. */
TMS_INLINE void dw_pixel_impl(const int mode, const tms_conv_t* p, const int8_t* xw, const int8_t* w,
                         const tms_chan_t* ch, const int32_t* toff, const uint8_t* valid, tms_w32_t* win, int8_t* y,
                         const tms_out_t* o) {
  const int32_t C = p->in_c, c4 = C & ~3, taps = p->kh * p->kw;
  const int32_t zp4 = (int32_t)((uint32_t)(uint8_t)p->in_zp * 0x01010101u);
  int32_t c = 0;
  const int8_t* wb = w;
  /* channels in blocks of four: reads of a block's taps precede its writes */
  for (; c < c4; c += 4, wb += 4 * taps) {
    int32_t acc[4] = {ch[c].bias, ch[c + 1].bias, ch[c + 2].bias, ch[c + 3].bias};
    if (valid == NULL) {
      dw_block4(0, xw + c, toff, wb, taps, acc);
    } else {
      for (int32_t t = 0; t < taps; ++t) win[t] = valid[t] ? rd32(xw + toff[t] + c) : zp4;
      dw_block4(1, (const int8_t*)win, toff, wb, taps, acc);
    }
    y[c] = out1(mode, ch + c, acc[0], o);
    y[c + 1] = out1(mode, ch + c + 1, acc[1], o);
    y[c + 2] = out1(mode, ch + c + 2, acc[2], o);
    y[c + 3] = out1(mode, ch + c + 3, acc[3], o);
  }
  for (; c < C; ++c) {
    int32_t acc = ch[c].bias;
    for (int32_t t = 0; t < taps; ++t)
      acc += (valid == NULL || valid[t] ? xw[toff[t] + c] : p->in_zp) * dw_weight(wb, taps, t, c - c4);
    y[c] = out1(mode, ch + c, acc, o);
  }
}
TMS_MODES(dw_pixel, (const tms_conv_t* p, const int8_t* xw, const int8_t* w, const tms_chan_t* ch, const int32_t* toff, const uint8_t* valid, tms_w32_t* win, int8_t* y, const tms_out_t* o), p, xw, w, ch, toff, valid, win, y, o)


void tms_dwconv_s8(const tms_conv_t* p, const int8_t* x, const int8_t* w, const tms_chan_t* tab, int8_t* y,
                   void* scratch) {
  const int32_t C = p->in_c, taps = p->kh * p->kw;
  const tms_out_t o = out_params(p->out_zp, p->act_min, p->act_max);
  const int mode = out_mode(tab, p->act_min, p->act_max);
  const int32_t span_h = (p->kh - 1) * p->dh, span_w = (p->kw - 1) * p->dw;
  int32_t* toff = (int32_t*)scratch;                 /* the tap offsets, a border pixel's window and */
  tms_w32_t* win = (tms_w32_t*)(toff + taps);        /* which of its taps are inside the image */
  uint8_t* valid = (uint8_t*)(win + taps);
  for (int32_t ky = 0, t = 0; ky < p->kh; ++ky)
    for (int32_t kx = 0; kx < p->kw; ++kx, ++t) toff[t] = ((ky * p->dh) * p->in_w + kx * p->dw) * C;
#if TMS_ASM
  /* border pixels in assembly too: a tap outside the image reads a row of the input zero point, its
   * offset in ``win`` pointing there from the pixel's window origin */
  int32_t zrow[TMS_DW_ZP_MAX / 4];
  const int border_asm = mode != TMS_EXACT && (C & 3) == 0 && C > 0;
  if (border_asm)
    for (int32_t i = 0; i < TMS_DW_ZP_MAX / 4; ++i) zrow[i] = (int32_t)((uint32_t)(uint8_t)p->in_zp * 0x01010101u);
#endif
  for (int32_t b = 0; b < p->batch; ++b) {
    const int8_t* xb = x + (int32_t)b * p->in_h * p->in_w * C;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
      int32_t iy0 = oy * p->sh - p->pad_t;
      int rows_in = iy0 >= 0 && iy0 + span_h < p->in_h;
#if TMS_ASM
      int32_t in_lo = p->out_w, in_hi = p->out_w;    /* pixels [in_lo, in_hi) run as one row in assembly */
      if (rows_in && mode != TMS_EXACT && (C & 3) == 0 && C > 0) {
        in_lo = (p->pad_l + p->sw - 1) / p->sw;
        in_hi = p->in_w - 1 - span_w + p->pad_l >= 0 ? (p->in_w - 1 - span_w + p->pad_l) / p->sw + 1 : 0;
        in_hi = in_hi > p->out_w ? p->out_w : in_hi;
        if (in_lo >= in_hi) in_lo = in_hi = p->out_w;
      }
#endif
      for (int32_t ox = 0; ox < p->out_w; ++ox, y += C) {
        int32_t ix0 = ox * p->sw - p->pad_l;
#if TMS_ASM
        if (ox == in_lo) {
          const tms_dwjob_t job = {xb + ((intptr_t)iy0 * p->in_w + ix0) * C, toff, w, tab + 1, y, taps / 2, taps & 1,
                                   C / 4, o.z21, (int32_t)((uint32_t)(uint8_t)o.lo * 0x01010101u),
                                   (int32_t)((uint32_t)(uint8_t)o.hi * 0x01010101u), mode == TMS_FAST_CLAMP,
                                   in_hi - in_lo, p->sw * C, C};
          dw_row_m4(&job);
          y += (in_hi - in_lo - 1) * C;
          ox = in_hi - 1;
          continue;
        }
#endif
        const uint8_t* vp = NULL;
        if (!(rows_in && ix0 >= 0 && ix0 + span_w < p->in_w)) {
          for (int32_t ky = 0, t = 0; ky < p->kh; ++ky)
            for (int32_t kx = 0; kx < p->kw; ++kx, ++t) {
              int32_t iy = iy0 + ky * p->dh, ix = ix0 + kx * p->dw;
              valid[t] = iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w;
            }
          vp = valid;
        }
        /* window origin (may lie outside the image: only valid taps are read through it) */
        const int8_t* xw = xb + ((intptr_t)iy0 * p->in_w + ix0) * C;
#if TMS_ASM
        if (border_asm) {
          /* chunks of at most TMS_DW_ZP_MAX channels, each from its own window origin (and so its own
           * offset of the zero row) */
          tms_dwjob_t job = {xw, vp != NULL ? (const int32_t*)win : toff, w, tab + 1, y, taps / 2, taps & 1, 0,
                             o.z21, (int32_t)((uint32_t)(uint8_t)o.lo * 0x01010101u),
                             (int32_t)((uint32_t)(uint8_t)o.hi * 0x01010101u), mode == TMS_FAST_CLAMP, 1, 0, C};
          for (int32_t c = 0; c < C; c += TMS_DW_ZP_MAX) {
            const int32_t n = C - c < TMS_DW_ZP_MAX ? C - c : TMS_DW_ZP_MAX;
            if (vp != NULL) {
              const int32_t zoff = (int32_t)((intptr_t)zrow - (intptr_t)job.xw);
              for (int32_t t = 0; t < taps; ++t) win[t] = valid[t] ? toff[t] : zoff;
            }
            job.blocks = n / 4;
            dw_row_m4(&job);
            job.xw += n;
            job.w += n * taps;
            job.ch += n;
            job.y += n;
          }
          continue;
        }
#endif
        dw_pixel(mode, p, xw, w, tab + 1, toff, vp, win, y, &o);
      }
    }
  }
}

/* ------------------------------------------------------------------ ADD, tables */
/* rounding division of an input stage: (x * 2^left) rescaled by mult / 2^right, no zero point, no
 * saturation (fast form valid for |x * 2^left| < 2^30 and right >= 1, as proven at compile time). */
TMS_INLINE int32_t rescale_fast(int32_t xl, int32_t mult, int32_t info) {
#if TMS_ASM
  int32_t t;
  __asm__("lsl %0, %1, #1\n\t"
          "smmulr %0, %0, %2\n\t"
          "sub %0, %0, %0, lsr #31\n\t"
          "asr %0, %0, %3\n\t"
          "add %0, %0, #1\n\t"
          "asr %0, %0, #1"
          : "=&r"(t)
          : "r"(xl), "r"(mult), "r"(info));
  return t;
#else
#if TMS_V6M
  int32_t x = srdhm_v6m(xl, mult);
#else
  int32_t x = (int32_t)(((int64_t)xl * 2 * mult + ((int64_t)1 << 31)) >> 32);
#endif
  x -= (int32_t)((uint32_t)x >> 31);
  return ((x >> (info & 0xff)) + 1) >> 1;
#endif
}

/* SRDHM(xl, mult) alone (an input stage whose right shift is 0), for |xl| < 2^30 */
TMS_INLINE int32_t srdhm_fast(int32_t xl, int32_t mult) {
#if TMS_ASM
  int32_t t;
  __asm__("lsl %0, %1, #1\n\t"
          "smmulr %0, %0, %2"
          : "=&r"(t)
          : "r"(xl), "r"(mult));
  return t;
#elif TMS_V6M
  return srdhm_v6m(xl, mult);
#else
  return (int32_t)(((int64_t)xl * 2 * mult + ((int64_t)1 << 31)) >> 32);
#endif
}

TMS_INLINE void add_fast_impl(const int a_whole, const int b_whole, const tms_add_t* p, const int8_t* a,
                         const int8_t* b, int8_t* y) {
  const int32_t ao = p->a_off, bo = p->b_off, ls = p->left_shift;
  const int32_t lo = p->act_min, hi = p->act_max, am = p->a_mult, ai = p->a_shift, bm = p->b_mult,
                bi = p->b_shift, om = p->out_mult, oi = p->out_shift, z21 = 2 * p->out_zp + 1;
  const int8_t* end = a + p->n;
  while (a < end) {
    int32_t xa = (*a++ + ao) << ls, xb = (*b++ + bo) << ls;
    int32_t sa = a_whole ? srdhm_fast(xa, am) : rescale_fast(xa, am, ai);
    int32_t sb = b_whole ? srdhm_fast(xb, bm) : rescale_fast(xb, bm, bi);
    int32_t v = rq_fast(sa + sb, om, oi, z21);
    *y++ = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
  }
}
TMS_DRIVER void add_fast_00(const tms_add_t* p, const int8_t* a, const int8_t* b, int8_t* y) { add_fast_impl(0, 0, p, a, b, y); }
TMS_DRIVER void add_fast_01(const tms_add_t* p, const int8_t* a, const int8_t* b, int8_t* y) { add_fast_impl(0, 1, p, a, b, y); }
TMS_DRIVER void add_fast_10(const tms_add_t* p, const int8_t* a, const int8_t* b, int8_t* y) { add_fast_impl(1, 0, p, a, b, y); }
TMS_DRIVER void add_fast_11(const tms_add_t* p, const int8_t* a, const int8_t* b, int8_t* y) { add_fast_impl(1, 1, p, a, b, y); }

#if TMS_ASM && !TMS_MVE   /* (the M55 adds with Helium) */
/* add_fast_impl for the usual TFLite ADD, hand-scheduled for ARMv7E-M: left shift 20, the output's full
 * int8 range, and one input ("w") with multiplier 2^30 and right shift 0 (the input of the larger scale:
 * real multiplier 1/2), whose stage SRDHM((w + wo) 2^20, 2^30) is exactly (w + wo) 2^19 (an even product
 * halved). rq_fast's doubled sum is then 2 s_n + (w + wo) 2^20, where 2 s_n = ((u >> e) + 1) & ~1 for the
 * other input's rescale_fast (u its SMMULR, less one if negative); (wo 2^20 is even, so it joins the + 1
 * before the & ~1). Two elements per iteration; constants loaded by one LDM. */
typedef struct {
  const int8_t* w;       /*  0: the input of multiplier 2^30 */
  const int8_t* n;       /*  4: the other input */
  int8_t* y;             /*  8 */
  int32_t pairs;         /* 12: elements / 2 >= 1 */
  int32_t no21;          /* 16: n's offset << 21 */
  int32_t nm, ni;        /* 20, 24: n's multiplier and shifts (e = the low byte) */
  int32_t c1;            /* 28: 1 + (w's offset << 20) */
  int32_t om, oi;        /* 32, 36: the output's multiplier and shifts */
  int32_t z21;           /* 40: 2 zp + 1 */
} tms_addjob_t;

#define TMS_ASM_ADD1                                                                      \
  "ldrsb r12, [r2], #1\n\t"                                                               \
  "ldrsb lr, [r1], #1\n\t"                                                                \
  "add r12, r5, r12, lsl #21\n\t"                                                         \
  "smmulr r12, r12, r6\n\t"                                                               \
  "sub r12, r12, r12, lsr #31\n\t"                                                        \
  "asr r12, r12, r7\n\t"                                                                  \
  "add r12, r12, r8\n\t"                                                                  \
  "bic r12, r12, #1\n\t"                                                                  \
  "add r12, r12, lr, lsl #20\n\t"                                                         \
  "smmulr r12, r12, r9\n\t"                                                               \
  "sub r12, r12, r12, lsr #31\n\t"                                                        \
  "asr r12, r12, r10\n\t"                                                                 \
  "add r12, r12, r11\n\t"                                                                 \
  "ssat r12, #8, r12, asr #1\n\t"                                                         \
  "strb r12, [r3], #1\n\t"

__attribute__((naked, noinline)) static void add_pairs_m4(const tms_addjob_t* job __attribute__((unused))) {
  __asm__ volatile(
      "push {r4-r11, lr}\n\t"
      "ldm r0, {r1-r11}\n\t"
      "1:\n\t"
      TMS_ASM_ADD1
      TMS_ASM_ADD1
      "subs r4, r4, #1\n\t"
      "bne 1b\n\t"
      "pop {r4-r11, pc}\n\t");
}
#endif

void tms_add_s8(const tms_add_t* p, const int8_t* a, const int8_t* b, int8_t* y) {
#if TMS_MVE
  hl_add(p, a, b, y);   /* four lanes at a time, exact in every case (tms_nn_helium.inc) */
  return;
#elif TMS_ASM
  if ((p->flags & (TMS_RQ_FAST | TMS_ADD_SUB)) == TMS_RQ_FAST && p->left_shift == 20 && p->act_min <= -128 &&
      p->act_max >= 127 && p->n >= 2) {
    const int aw = p->a_mult == (1 << 30) && TMS_RIGHT(p->a_shift) == 0;
    const int bw = p->b_mult == (1 << 30) && TMS_RIGHT(p->b_shift) == 0;
    if (aw != bw) { /* the other input's right shift is >= 1 (rescale_fast's form) */
      const tms_addjob_t job = {aw ? a : b, aw ? b : a, y, (int32_t)(p->n / 2),
                                (int32_t)((uint32_t)(aw ? p->b_off : p->a_off) << 21), aw ? p->b_mult : p->a_mult,
                                aw ? p->b_shift : p->a_shift,
                                (int32_t)(1u + ((uint32_t)(aw ? p->a_off : p->b_off) << 20)), p->out_mult,
                                p->out_shift, 2 * p->out_zp + 1};
      add_pairs_m4(&job);
      if (p->n & 1) { /* the last element in C */
        tms_add_t last = *p;
        const uint32_t i = p->n - 1;
        last.n = 1;
        tms_add_s8(&last, a + i, b + i, y + i);
      }
      return;
    }
  }
#endif
  if ((p->flags & (TMS_RQ_FAST | TMS_ADD_SUB)) == TMS_RQ_FAST) { /* an input stage with right shift 0: SRDHM alone */
    int aw = TMS_RIGHT(p->a_shift) == 0, bw = TMS_RIGHT(p->b_shift) == 0;
    if (aw && bw)
      add_fast_11(p, a, b, y);
    else if (aw)
      add_fast_10(p, a, b, y);
    else if (bw)
      add_fast_01(p, a, b, y);
    else
      add_fast_00(p, a, b, y);
    return;
  }
  const int32_t ao = p->a_off, bo = p->b_off, ls = p->left_shift, sub = p->flags & TMS_ADD_SUB;
  const int32_t lo = p->act_min, hi = p->act_max, zp = p->out_zp;
  for (uint32_t i = 0; i < p->n; ++i) {
    int32_t sa = rq_exact((a[i] + ao) * (1 << ls), p->a_mult, p->a_shift);
    int32_t sb = rq_exact((b[i] + bo) * (1 << ls), p->b_mult, p->b_shift);
    int32_t v = rq_exact((int32_t)((uint32_t)sa + (uint32_t)(sub ? -sb : sb)), p->out_mult, p->out_shift) + zp;
    y[i] = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
  }
}

void tms_lut_s8(uint32_t n, const int8_t* x, const int8_t* table, int8_t* y) {
  const int8_t* t = table + 128;
  uint32_t i = 0;
  for (; i + 4 <= n; i += 4) { /* four reads before four writes (same index: in place is safe) */
    int32_t v0 = t[x[i]], v1 = t[x[i + 1]], v2 = t[x[i + 2]], v3 = t[x[i + 3]];
    y[i] = (int8_t)v0;
    y[i + 1] = (int8_t)v1;
    y[i + 2] = (int8_t)v2;
    y[i + 3] = (int8_t)v3;
  }
  for (; i < n; ++i) y[i] = t[x[i]];
}

/* ------------------------------------------------------------------ pooling */
#if TMS_DSP
/* per-byte signed max(a, b) (take_max) or min(a, b) of four int8 lanes; take_max is a constant at every call */
TMS_INLINE int32_t pick8x4(int32_t a, int32_t b, int take_max) {
#if TMS_ASM
  int32_t r, t;
  if (take_max)
    __asm__("ssub8 %1, %2, %3\n\tsel %0, %2, %3" : "=r"(r), "=&r"(t) : "r"(a), "r"(b));
  else
    __asm__("ssub8 %1, %3, %2\n\tsel %0, %2, %3" : "=r"(r), "=&r"(t) : "r"(a), "r"(b));
  return r;
#else
  int32_t r = 0;
  for (int k = 0; k < 32; k += 8) {
    int32_t x = (int8_t)((uint32_t)a >> k), z = (int8_t)((uint32_t)b >> k);
    r |= (int32_t)((uint32_t)(uint8_t)((x > z) == (take_max != 0) ? x : z) << k);
  }
  return r;
#endif
}
#endif

void tms_maxpool_s8(const tms_pool_t* p, const int8_t* x, int8_t* y) {
  const int32_t C = p->c;
#if TMS_DSP
  const int32_t c4 = C & ~3;
  const int32_t lo4 = (int32_t)((uint32_t)(uint8_t)p->act_min * 0x01010101u);
  const int32_t hi4 = (int32_t)((uint32_t)(uint8_t)p->act_max * 0x01010101u);
#endif
  for (int32_t b = 0; b < p->batch; ++b) {
    const int8_t* xb = x + (int32_t)b * p->in_h * p->in_w * C;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
      int32_t iy0 = oy * p->sh - p->pad_t;
      int32_t y0 = iy0 < 0 ? 0 : iy0, y1 = iy0 + p->kh > p->in_h ? p->in_h : iy0 + p->kh;
      for (int32_t ox = 0; ox < p->out_w; ++ox, y += C) {
        int32_t ix0 = ox * p->sw - p->pad_l;
        int32_t x0 = ix0 < 0 ? 0 : ix0, x1 = ix0 + p->kw > p->in_w ? p->in_w : ix0 + p->kw;
        int32_t c = 0;
#if TMS_DSP
        for (; c < c4; c += 4) { /* four channels per SSUB8/SEL; reads of the block precede its write */
          int32_t m = (int32_t)0x80808080u;
          for (int32_t iy = y0; iy < y1; ++iy) {
            const int8_t* row = xb + ((int32_t)iy * p->in_w) * C + c;
            for (int32_t ix = x0; ix < x1; ++ix) m = pick8x4(rd32(row + ix * C), m, 1);
          }
          m = pick8x4(pick8x4(m, lo4, 1), hi4, 0);
          memcpy(y + c, &m, 4);
        }
#endif
        for (; c < C; ++c) {
          int32_t m = -128;
          for (int32_t iy = y0; iy < y1; ++iy)
            for (int32_t ix = x0; ix < x1; ++ix) {
              int32_t v = xb[((int32_t)iy * p->in_w + ix) * C + c];
              m = v > m ? v : m;
            }
          y[c] = (int8_t)(m < p->act_min ? p->act_min : (m > p->act_max ? p->act_max : m));
        }
      }
    }
  }
}

void tms_avgpool_s8(const tms_pool_t* p, const int8_t* x, int8_t* y) {
  const int32_t C = p->c;
  for (int32_t b = 0; b < p->batch; ++b) {
    const int8_t* xb = x + (int32_t)b * p->in_h * p->in_w * C;
    for (int32_t oy = 0; oy < p->out_h; ++oy) {
      int32_t iy0 = oy * p->sh - p->pad_t;
      int32_t y0 = iy0 < 0 ? 0 : iy0, y1 = iy0 + p->kh > p->in_h ? p->in_h : iy0 + p->kh;
      for (int32_t ox = 0; ox < p->out_w; ++ox, y += C) {
        int32_t ix0 = ox * p->sw - p->pad_l;
        int32_t x0 = ix0 < 0 ? 0 : ix0, x1 = ix0 + p->kw > p->in_w ? p->in_w : ix0 + p->kw;
        int32_t count = (y1 - y0) * (x1 - x0);
        for (int32_t c = 0; c < C; ++c) {
          int32_t s = 0;
          for (int32_t iy = y0; iy < y1; ++iy)
            for (int32_t ix = x0; ix < x1; ++ix) s += xb[((int32_t)iy * p->in_w + ix) * C + c];
          int32_t half = count / 2;
          int32_t avg = s > 0 ? (s + half) / count : (s - half) / count;
          y[c] = (int8_t)(avg < p->act_min ? p->act_min : (avg > p->act_max ? p->act_max : avg));
        }
      }
    }
  }
}

/* ------------------------------------------------------------------ float32 */
/* a * b + c, fused (one rounding) when ``fused`` and the core has FMA; otherwise rounded twice, as
 * TVM's kernels and TFLite's reference kernels compute in ISO C (no contraction). */
TMS_INLINE float madd(const int fused, float a, float b, float c) {
#if defined(__ARM_FEATURE_FMA) || defined(__FP_FAST_FMAF)
  if (fused) return __builtin_fmaf(a, b, c);
#else
  (void)fused;
#endif
  return c + a * b;
}

static int overlaps(const void* a, uint32_t an, const void* b, uint32_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bn && y < x + an;
}

/* The taps of one kernel row that lie inside the image: kx in [*k0, *k1) (a contiguous run of
 * (k1 - k0) * C floats of input and of weights when the dilation is 1). */
TMS_INLINE int row_taps(const tms_convf_t* p, int inside, int32_t iy, int32_t ix0, int32_t* k0, int32_t* k1) {
  if (inside) {
    *k0 = 0;
    *k1 = p->kw;
    return 1;
  }
  if (iy < 0 || iy >= p->in_h) return 0;
  int32_t a = 0, b = p->kw;
  while (a < b && ix0 + a * p->dw < 0) ++a;
  while (b > a && ix0 + (b - 1) * p->dw >= p->in_w) --b;
  *k0 = a;
  *k1 = b;
  return b > a;
}

/* IEEE half-precision bits -> float, exactly: weights kept float16 in flash are widened as they are read
 * (VCVTB on cores whose FPU has it: every single-precision M-profile FPU). */
TMS_INLINE float tms_half(uint16_t h) {
#if defined(__ARM_FP) && (__ARM_FP & 4) && defined(__thumb2__)
  float f;
  __asm__("vmov %0, %1\n\tvcvtb.f32.f16 %0, %0" : "=t"(f) : "r"((uint32_t)h));
  return f;
#else
  const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  union { uint32_t u; float f; } v;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    v.f = (float)m * 5.9604644775390625e-08f;
    return s ? -v.f : v.f;
  }
  v.u = s | ((e == 31u ? 255u : e + 112u) << 23) | (m << 13);
  return v.f;
#endif
}

/* ------------------------------------------------------------------ dynamic-range quantization */
/* Whether a hybrid call with this flag (TMS_F_ASYM, or tms_quant_params_f32's asymmetric) quantizes its input
 * asymmetrically: constant in a build whose calls all do, or none do (tms_nn_config.h) */
#define TMS_HYBRID_ASYM(flag) (TMS_NN_HYBRID_ASYM && (!TMS_NN_HYBRID_SYM || (flag)))

/* LiteRT's AsymmetricQuantizeFloats finds the zero point in double precision. This FPU has single precision
 * only, and the compiler's soft-float double routines take 2.9 KB of flash, so the few double operations it
 * needs are done here exactly, in integers (tests/native/double_emulation.c checks each against the double
 * operation): a double is m * 2^e with m in [2^52, 2^53), rounded to nearest, ties to even, at every step as
 * the double operation rounds; sums and differences in fixed point. Every value involved is normal: the
 * quotients lie between 2^-300 and 2^9. */
__attribute__((noinline)) static uint64_t dbl_of(float f, int32_t* e) {  /* |f| = m * 2^e; f finite, nonzero */
  union {
    float f;
    uint32_t u;
  } v = {f};
  uint32_t man = v.u & 0x7fffffu;
  const uint32_t ex = (v.u >> 23) & 0xffu;
  if (ex) man |= 0x800000u;
  const int s = __builtin_clz(man) - 8;  /* a subnormal's bits moved up to 24 */
  *e = (ex ? (int32_t)ex - 150 : -149) - s - 29;
  return (uint64_t)(man << s) << 29;
}

/* a / b rounded to 53 bits, by long division, for a and b in [2^52, 2^53): the quotient's m; its exponent
 * is added to *e */
__attribute__((noinline)) static uint64_t dbl_div(uint64_t a, uint64_t b, int32_t* e) {
  uint64_t q = 0;
  *e -= 52;
  if (a < b) a <<= 1, --*e;
  for (int i = 0; i < 53; ++i) {
    q <<= 1;
    if (a >= b) a -= b, q |= 1u;
    a <<= 1;                             /* a < 2 b < 2^54 */
  }
  if (a > b || (a == b && (q & 1u))) {   /* twice the remainder against the divisor: above half, or a tie */
    if (++q >> 53) q >>= 1, ++*e;
  }
  return q;
}

/* |f| / (m * 2^e) in fixed point, units of 2^-55: floor(quotient * 2^55), exact for quotients from 2^-2 up
 * to 2^9 */
__attribute__((noinline)) static uint64_t quotient_fx(float f, uint64_t m, int32_t e) {
  int32_t s;
  const uint64_t a = dbl_of(f, &s);
  s -= e;
  const uint64_t q = dbl_div(a, m, &s);
  s += 55;
  return s >= 0 ? q << s : (s > -64 ? q >> -s : 0);
}

/* A fixed-point sum or difference rounded to 53 significant bits, as the double operation rounds it. Values
 * under 2^-2 (where 53 bits reach below the unit) come only from differences of close numbers, which are
 * exact (Sterbenz), and are returned as they are. */
__attribute__((noinline)) static uint64_t fx_round53(uint64_t x) {
  if (x >> 53 == 0) return x;
  const int k = 63 - __builtin_clzll(x) - 52;
  const uint64_t low = x & ((1ull << k) - 1u), half = 1ull << (k - 1);
  x -= low;
  if (low > half || (low == half && ((x >> k) & 1u))) x += 1ull << k;
  return x;
}

/* LiteRT's zero point for the range [fmin, fmax] (fmin <= 0 <= fmax, not both 0), as
 * AsymmetricQuantizeFloats finds it in double precision:
 *   scale = (fmax - fmin) / 255;  lo = fmin / scale;  hi = fmax / scale;
 *   zp = 128 + |lo| < 127 + |hi| ? -128 - lo : 127 - hi, clamped to [-128, 127] and rounded half away.
 * |lo| and |hi| are exact in fixed point from 2^-2 up. Below, the bits they lose change no zero point: with
 * |lo| < 2^-2 the sums compared are about 128 and 382, and -128 - lo rounds to -128 however it is rounded
 * (the same for |hi| < 2^-2: 127 - hi rounds to 127).
 * An infinite range (whose scale is infinite, so every input quantizes to the zero point) gives 127, as in
 * double precision when the range's ends are finite. */
__attribute__((noinline)) static int32_t asymmetric_zero_point(float fmin, float fmax) {
  static const uint64_t c127 = 127ull << 55, c128 = 128ull << 55;
  if (!(fmax - fmin <= __FLT_MAX__)) return 127;
  int32_t e;
  uint64_t m = dbl_of(fmax - fmin, &e);
  e += 45;
  m = dbl_div(m, 255ull << 45, &e);                               /* scale = m * 2^e */
  const uint64_t lo = fmin < 0.0f ? quotient_fx(fmin, m, e) : 0;   /* |lo| */
  const uint64_t hi = fmax > 0.0f ? quotient_fx(fmax, m, e) : 0;
  /* the zero point a - b: -128 - lo = |lo| - 128, or 127 - hi */
  const int from_lo = fx_round53(c128 + lo) < fx_round53(c127 + hi);
  const uint64_t a = from_lo ? lo : c127, b = from_lo ? c128 : hi;
  const int negative = a < b;
  const uint64_t zp = fx_round53(negative ? b - a : a - b);
  if (zp >= (negative ? c128 : c127)) return negative ? -128 : 127;
  const int32_t r = (int32_t)(zp >> 55) + (int32_t)((zp >> 54) & 1u);    /* rounded half away from zero */
  return negative ? -r : r;
}

void tms_quant_params_f32(uint32_t batches, uint32_t len, int32_t asymmetric, const float* x, float* y) {
  for (uint32_t b = 0; b < batches; ++b, x += len, y += 3) {
    float mn = __builtin_inff(), mx = -__builtin_inff();
    for (uint32_t i = 0; i < len; ++i) {
      mn = x[i] < mn ? x[i] : mn;
      mx = x[i] > mx ? x[i] : mx;
    }
    if (TMS_HYBRID_ASYM(asymmetric)) { /* LiteRT's AsymmetricQuantizeFloats: the range widened to 0 */
      const float fmin = mn < 0.0f ? mn : 0.0f, fmax = mx > 0.0f ? mx : 0.0f;
      if (fmax - fmin == 0.0f) {
        y[0] = 1.0f, y[1] = 0.0f, y[2] = 0.0f;
        continue;
      }
      /* (float)((double)span / 255.0) is span / 255.0f: a double quotient rounded to float is the float
       * quotient (53 >= 2 * 24 + 1 bits) */
      const float s32 = (fmax - fmin) / 255.0f;
      y[0] = s32, y[1] = 1.0f / s32, y[2] = (float)asymmetric_zero_point(fmin, fmax);
    } else { /* SymmetricQuantizeFloats: max|x| / 127 */
      const float amn = mn < 0.0f ? -mn : mn, amx = mx < 0.0f ? -mx : mx;
      const float rng = amn > amx ? amn : amx;
      if (rng == 0.0f) {
        y[0] = 1.0f, y[1] = 0.0f, y[2] = 0.0f;
        continue;
      }
      y[0] = rng / 127.0f, y[1] = 127.0f / rng, y[2] = 0.0f;
    }
  }
}

/* ------------------------------------------------------------------ dynamic-range (hybrid) operators */
/* One value quantized with its batch's inverse scale and zero point, as LiteRT quantizes a hybrid operator's
 * input: q = clip(zp + round(v * inv), lo, 127) with lo -128 (asymmetric) or -127, rounded half away from zero
 * before the zero point is added (tvm_memsched.relax.frontends.tflite_hybrid._quantized). In integers: with
 * t = trunc(s), s - t and its double are exact, so t + trunc(2 (s - t)) is s rounded half away from zero;
 * |s| <= 255 (v lies in the batch's range), and the float sums of the TIR kernel are exact integers too. */
TMS_INLINE int32_t quant1(float v, float inv, int32_t zp, int32_t lo) {
  const float s = v * inv;
  const int32_t t = (int32_t)s;
  int32_t q = zp + t + (int32_t)(2.0f * (s - (float)t));
  q = q < 127 ? q : 127;
  return q > lo ? q : lo;
}

typedef float __attribute__((may_alias)) tms_f32a_t;   /* the table's floats, beside its int32 sums */
typedef int32_t __attribute__((may_alias)) tms_i32a_t;

/* The int32 sum of (q - zp) * w scaled back to float as LiteRT's builtin kernels do
 * (tvm_memsched.relax.frontends.tflite_hybrid._rescale); tab: C weight scales, then C biases. */
TMS_INLINE float hybrid_out(const uint8_t flags, float lo, float hi, const tms_f32a_t* tab, int32_t C, int32_t c,
                            int32_t acc, float sx) {
  float v = (float)acc;
  const float ws = tab[c];
  v = (flags & TMS_F_WFIRST) ? (v * ws) * sx : v * (ws * sx);
  if (flags & TMS_F_BIAS) v = v + tab[C + c];
  if ((flags & TMS_F_LO) && v < lo) v = lo;
  if ((flags & TMS_F_HI) && v > hi) v = hi;
  return v;
}

/* One image's parameters as integers: zero point and the lowest q */
typedef struct {
  float sx, inv;
  int32_t zp, lo;
} tms_hq_t;

static tms_hq_t hq_of(const float* qp, int asym) {
  tms_hq_t h = {qp[0], qp[1], (int32_t)qp[2], asym ? -128 : -127};
  return h;
}

/* Window of output pixel (oy, ox) of float image xb, quantized, into column slot j: the padding as the zero
 * point (so q * w summed over the window minus zp times the weights' sum is (q - zp) * w inside the image) */
TMS_INLINE void im2col_q(const tms_convf_t* p, const float* xb, int32_t oy, int32_t ox, int8_t* col, int j,
                         const tms_hq_t* h) {
  const int32_t C = p->in_c;
  const float inv = h->inv;
  const int32_t zp = h->zp, lo = h->lo;
  int32_t k = 0;
  const int32_t iy0 = oy * p->sh - p->pad_t, ix0 = ox * p->sw - p->pad_l;
  for (int32_t ky = 0; ky < p->kh; ++ky) {
    const int32_t iy = iy0 + ky * p->dh;
    for (int32_t kx = 0; kx < p->kw; ++kx) {
      const int32_t ix = ix0 + kx * p->dw;
      const float* src = xb + ((int32_t)iy * p->in_w + ix) * C;
      if (iy < 0 || iy >= p->in_h || ix < 0 || ix >= p->in_w) {
        for (int32_t c = 0; c < C; ++c, ++k) col[((k >> 2) << 3) + 4 * j + (k & 3)] = (int8_t)zp;
      } else if ((k & 3) == 0) {            /* whole groups of four */
        int32_t c = 0;
        for (; c + 4 <= C; c += 4, k += 4) {
          int8_t* d = col + (k << 1) + 4 * j;
          d[0] = (int8_t)quant1(src[c], inv, zp, lo);
          d[1] = (int8_t)quant1(src[c + 1], inv, zp, lo);
          d[2] = (int8_t)quant1(src[c + 2], inv, zp, lo);
          d[3] = (int8_t)quant1(src[c + 3], inv, zp, lo);
        }
        for (; c < C; ++c, ++k) col[((k >> 2) << 3) + 4 * j + (k & 3)] = (int8_t)quant1(src[c], inv, zp, lo);
      } else {
        for (int32_t c = 0; c < C; ++c, ++k)
          col[((k >> 2) << 3) + 4 * j + (k & 3)] = (int8_t)quant1(src[c], inv, zp, lo);
      }
    }
  }
}

/* Each of the OC rows' sum of weights, from weights packed as pack_weights packs them (pairs of rows, groups of
 * four, both padded with zeros), into sums (OC rounded up to even): the zero point's share zp * sum(w) of a sum
 * of q * w. Computed per call where a table of them (4 bytes of flash per channel) is not given. */
static void weight_sums(const int8_t* w, int32_t OC, int32_t K4, int32_t* sums) {
  for (int32_t c = 0; c < OC; c += 2) {
    int32_t s0 = 0, s1 = 0;
    for (int32_t k = 0; k < K4; k += 4, w += 8) {
#if TMS_DSP
      const int32_t v0 = *(const tms_w32_t*)w, v1 = *(const tms_w32_t*)(w + 4);
      s0 = smlad(sxtb16(v0), 0x00010001, smlad(sxtb16_ror8(v0), 0x00010001, s0));
      s1 = smlad(sxtb16(v1), 0x00010001, smlad(sxtb16_ror8(v1), 0x00010001, s1));
#else
      s0 += w[0] + w[1] + w[2] + w[3];
      s1 += w[4] + w[5] + w[6] + w[7];
#endif
    }
    sums[c] = s0, sums[c + 1] = s1;
  }
}

void tms_hconv_f32(const tms_convf_t* p, const float* x, const int8_t* w, const void* tab, float* y,
                   const float* qp, int8_t* col) {
  const uint8_t fl = p->flags;      /* the output stage in registers: stores to y could alias *p */
  const float flo = p->lo, fhi = p->hi;
  const int32_t K = p->kh * p->kw * p->in_c, K4 = (K + 3) & ~3, OC = p->out_c;
  const int32_t npix = p->out_h * p->out_w, in_len = p->in_h * p->in_w * p->in_c;
  const int asym = TMS_HYBRID_ASYM(p->flags & TMS_F_ASYM);
  /* each output channel's sum of weights, for an asymmetric zero point: in the table after the biases
   * (TMS_F_SUMS), else computed once per call after the two windows (a symmetric zero point is 0) */
  const tms_i32a_t* sums = (const tms_i32a_t*)tab + 2 * OC;
  if (asym && !(p->flags & TMS_F_SUMS)) {
    int32_t* s = (int32_t*)(uintptr_t)(col + 2 * K4);
    weight_sums(w, OC, K4, s);
    sums = s;
  }
  for (int32_t k = K; k < K4; ++k) col[((k >> 2) << 3) + (k & 3)] = col[((k >> 2) << 3) + 4 + (k & 3)] = 0;
  for (int32_t b = 0; b < p->batch; ++b) {
    const float* xb = x + (int32_t)b * in_len;
    float* yb = y + (int32_t)b * npix * OC;
    const tms_hq_t h = hq_of(qp + 3 * b, asym);
    int32_t oy = 0, ox = 0;
    for (int32_t pix = 0; pix < npix; pix += 2) {
      const int two = pix + 1 < npix;
      for (int j = 0; j <= two; ++j) {   /* both windows are read before any output of theirs is written */
        im2col_q(p, xb, oy, ox, col, j, &h);
        if (++ox == p->out_w) ox = 0, ++oy;
      }
      float* y0 = yb + pix * OC;
      const int8_t* wp = w;
      for (int32_t c = 0; c < OC; c += 2, wp += 2 * K4) {
        int32_t acc[4] = {0, 0, 0, 0};
        const int n1 = c + 1 < OC;          /* an odd last channel's partner: zero weights */
        if (two)
          dot_2x2(col, wp, K4, acc);
        else
          dot_1x2(col, 8, wp, K4, acc);
        const int32_t z0 = asym ? h.zp * sums[c] : 0, z1 = asym && n1 ? h.zp * sums[c + 1] : 0;
        y0[c] = hybrid_out(fl, flo, fhi, tab, OC, c, acc[0] - z0, h.sx);
        if (n1) y0[c + 1] = hybrid_out(fl, flo, fhi, tab, OC, c + 1, acc[1] - z1, h.sx);
        if (two) {
          y0[OC + c] = hybrid_out(fl, flo, fhi, tab, OC, c, acc[2] - z0, h.sx);
          if (n1) y0[OC + c + 1] = hybrid_out(fl, flo, fhi, tab, OC, c + 1, acc[3] - z1, h.sx);
        }
      }
    }
  }
}

/* One output pixel of a depthwise convolution: channels in blocks of four (each block's taps read before
 * its outputs are written), the taps inside the image [ky0, ky1) x [kx0, kx1); each tap's q - zp quantized
 * as it is read, or (``done``) read as the int32 the input was overwritten with. */
TMS_INLINE int32_t hdw_tap(const int done, const float* xr, int32_t k, const tms_hq_t* h) {
  return done ? ((const tms_i32a_t*)xr)[k] : quant1(xr[k], h->inv, h->zp, h->lo) - h->zp;
}

TMS_INLINE void hdw_pixel(const int done, const tms_convf_t* p, const float* xb, const int8_t* w, const void* tab,
                          float* y, int32_t iy0, int32_t ix0, int32_t ky0, int32_t ky1, int32_t kx0, int32_t kx1,
                          const tms_hq_t* h) {
  const uint8_t fl = p->flags;      /* the output stage in registers: stores to y could alias *p */
  const float flo = p->lo, fhi = p->hi;
  const int32_t C = p->in_c, rowstep = p->in_w * C, tapstep = p->dw * C;
  int32_t c = 0;
  for (; c + 4 <= C; c += 4) {
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int32_t ky = ky0; ky < ky1; ++ky) {
      const float* xr = xb + (iy0 + ky * p->dh) * rowstep + (ix0 + kx0 * p->dw) * C + c;
      const int8_t* wr = w + (ky * p->kw + kx0) * C + c;
      for (int32_t kx = kx0; kx < kx1; ++kx, xr += tapstep, wr += C) {
        a0 += hdw_tap(done, xr, 0, h) * wr[0];
        a1 += hdw_tap(done, xr, 1, h) * wr[1];
        a2 += hdw_tap(done, xr, 2, h) * wr[2];
        a3 += hdw_tap(done, xr, 3, h) * wr[3];
      }
    }
    y[c] = hybrid_out(fl, flo, fhi, tab, C, c, a0, h->sx);
    y[c + 1] = hybrid_out(fl, flo, fhi, tab, C, c + 1, a1, h->sx);
    y[c + 2] = hybrid_out(fl, flo, fhi, tab, C, c + 2, a2, h->sx);
    y[c + 3] = hybrid_out(fl, flo, fhi, tab, C, c + 3, a3, h->sx);
  }
  for (; TMS_NN_HDW_REST && c < C; ++c) {
    int32_t a = 0;
    for (int32_t ky = ky0; ky < ky1; ++ky) {
      const float* xr = xb + (iy0 + ky * p->dh) * rowstep + (ix0 + kx0 * p->dw) * C + c;
      const int8_t* wr = w + (ky * p->kw + kx0) * C + c;
      for (int32_t kx = kx0; kx < kx1; ++kx, xr += tapstep, wr += C) a += hdw_tap(done, xr, 0, h) * wr[0];
    }
    y[c] = hybrid_out(fl, flo, fhi, tab, C, c, a, h->sx);
  }
}

TMS_INLINE void hdw_image(const int done, const tms_convf_t* p, const float* xb, const int8_t* w, const void* tab,
                          float* y, const tms_hq_t* h) {
  const int32_t C = p->in_c;
  for (int32_t oy = 0; oy < p->out_h; ++oy) {
    const int32_t iy0 = oy * p->sh - p->pad_t;
    int32_t ky0 = 0, ky1 = p->kh;
    while (ky0 < ky1 && iy0 + ky0 * p->dh < 0) ++ky0;
    while (ky1 > ky0 && iy0 + (ky1 - 1) * p->dh >= p->in_h) --ky1;
    for (int32_t ox = 0; ox < p->out_w; ++ox, y += C) {
      const int32_t ix0 = ox * p->sw - p->pad_l;
      int32_t kx0 = 0, kx1 = p->kw;
      while (kx0 < kx1 && ix0 + kx0 * p->dw < 0) ++kx0;
      while (kx1 > kx0 && ix0 + (kx1 - 1) * p->dw >= p->in_w) --kx1;
      hdw_pixel(done, p, xb, w, tab, y, iy0, ix0, ky0, ky1, kx0, kx1, h);
    }
  }
}

void tms_hdwconv_f32(const tms_convf_t* p, const float* x, const int8_t* w, const void* tab, float* y,
                     const float* qp, int32_t consume) {
  const int32_t in_len = p->in_h * p->in_w * p->in_c, out_len = p->out_h * p->out_w * p->out_c;
  const int asym = TMS_HYBRID_ASYM(p->flags & TMS_F_ASYM);
  for (int32_t b = 0; b < p->batch; ++b) {
    const float* xb = x + (int32_t)b * in_len;
    const tms_hq_t h = hq_of(qp + 3 * b, asym);
    /* a build whose calls all may overwrite their input (tms_nn_config.h) has no tap-by-tap variant, one
     * whose calls never may none of the other */
    if (TMS_NN_HDW_ONCE && (consume || !TMS_NN_HDW_TAPS)) {
      tms_i32a_t* xi = (tms_i32a_t*)(uintptr_t)xb;   /* each value quantized once, over itself */
      for (int32_t i = 0; i < in_len; ++i) xi[i] = quant1(xb[i], h.inv, h.zp, h.lo) - h.zp;
      hdw_image(1, p, xb, w, tab, y + (int32_t)b * out_len, &h);
    } else {
      hdw_image(0, p, xb, w, tab, y + (int32_t)b * out_len, &h);
    }
  }
}

/* The float kernels, once per weight type (tms_nn_float.inc): float32 weights (tms_conv_f32, ...), and
 * float16 weights and biases (tms_conv_f32h, ...). */
#define TMS_CAT_(a, b) a##b
#define TMS_CAT(a, b) TMS_CAT_(a, b)
#define TMS_N(name) TMS_CAT(name, TMS_FSUF)
#define TMS_NI(name) TMS_CAT(TMS_N(name), _impl)
#define TMS_FLAG_N(fn, ...) TMS_FLAG(fn, __VA_ARGS__)

#define TMS_WT float
#define TMS_W(v) (v)
#define TMS_BT float
#define TMS_B(v) (v)
#define TMS_FSUF
#include "tms_nn_float.inc"
#undef TMS_WT
#undef TMS_W
#undef TMS_BT
#undef TMS_B
#undef TMS_FSUF

#define TMS_WT uint16_t
#define TMS_W(v) tms_half(v)
#define TMS_BT uint16_t
#define TMS_B(v) tms_half(v)
#define TMS_FSUF h
#include "tms_nn_float.inc"
#undef TMS_WT
#undef TMS_W
#undef TMS_BT
#undef TMS_B
#undef TMS_FSUF
