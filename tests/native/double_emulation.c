/* tms_nn.c finds LiteRT's asymmetric zero point with integers (asymmetric_zero_point), emulating each double
 * operation of AsymmetricQuantizeFloats. This harness checks every one of them (the scale, |lo| and |hi|,
 * the two sums compared, both candidate zero points) and the result against the double computation, on
 * ranges of every kind: any bits, simple ratios, zero points near halves (the ends moved by a few ulps),
 * symmetric, one-sided, subnormal, small fractions and exact multiples of powers of two.
 * Built for the host by tests/test_micro_nn.py: `double_emulation [N]` prints the counts and exits 1 on any
 * mismatch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tms_nn.c"

static long checked, wrong_zp, wrong_step;

/* AsymmetricQuantizeFloats' zero point, in double precision (and the candidates it compares) */
static int32_t reference(float fmin, float fmax, double* lo, double* hi, double* a, double* b, double* z_lo,
                         double* z_hi) {
  const double span = (double)(fmax - fmin);
  const double scale = span / 255.0;
  *lo = (double)fmin / scale, *hi = (double)fmax / scale;
  *a = 128.0 + fabs(*lo), *b = 127.0 + fabs(*hi), *z_lo = -128.0 - *lo, *z_hi = 127.0 - *hi;
  const double zpd = *a < *b ? *z_lo : *z_hi;
  if (zpd <= -128.0) return -128;
  if (zpd >= 127.0) return 127;
  const double t = (double)(int32_t)zpd, f = zpd - t;
  return (int32_t)(t + (f >= 0.5 ? 1.0 : (f <= -0.5 ? -1.0 : 0.0)));
}

static double fx_double(uint64_t x, int negative) { return (negative ? -1.0 : 1.0) * ldexp((double)x, -55); }

static void check(float fmin, float fmax) {
  if (!(fmin <= 0.0f) || !(fmax >= 0.0f) || fmax - fmin == 0.0f || !isfinite(fmax - fmin)) return;
  ++checked;
  double lo_ref, hi_ref, a, b, z_lo, z_hi;
  const int32_t want = reference(fmin, fmax, &lo_ref, &hi_ref, &a, &b, &z_lo, &z_hi);
  if (asymmetric_zero_point(fmin, fmax) != want && wrong_zp++ < 10)
    printf("zero point of [%a, %a]: %d, double precision %d\n", fmin, fmax, asymmetric_zero_point(fmin, fmax),
           want);
  /* the steps, as asymmetric_zero_point takes them; |lo| and |hi| are exact from 2^-2 up (below, what they
   * lose changes no zero point, which the check above covers) */
  int32_t e;
  uint64_t m = dbl_of(fmax - fmin, &e);
  e += 45;
  m = dbl_div(m, 255ull << 45, &e);
  const uint64_t lo = fmin < 0.0f ? quotient_fx(fmin, m, e) : 0, hi = fmax > 0.0f ? quotient_fx(fmax, m, e) : 0;
  const uint64_t c127 = 127ull << 55, c128 = 128ull << 55;
  int same = ldexp((double)m, e) == (double)(fmax - fmin) / 255.0;
  if (lo_ref == 0.0 || fabs(lo_ref) >= 0.25) {
    same &= fx_double(lo, 0) == fabs(lo_ref) && fx_double(fx_round53(c128 + lo), 0) == a;
    same &= fx_double(fx_round53(lo < c128 ? c128 - lo : lo - c128), lo < c128) == z_lo;
  }
  if (hi_ref == 0.0 || fabs(hi_ref) >= 0.25) {
    same &= fx_double(hi, 0) == fabs(hi_ref) && fx_double(fx_round53(c127 + hi), 0) == b;
    same &= fx_double(fx_round53(hi > c127 ? hi - c127 : c127 - hi), hi > c127) == z_hi;
  }
  if (!same && wrong_step++ < 10)
    printf("steps of [%a, %a] differ from double precision: scale %a, |lo| %a, |hi| %a\n", fmin, fmax,
           ldexp((double)m, e), fx_double(lo, 0), fx_double(hi, 0));
}

static uint64_t state = 88172645463325252ull;
static uint32_t next(void) {
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  return (uint32_t)state;
}

static float bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static float nudge(float f, int32_t ulps) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return bits(u + (uint32_t)ulps);
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 2000000;
  for (long i = 0; i < n; ++i) {
    const uint32_t u = next(), v = next();
    switch (i % 8) {
      case 0: check(-bits(u & 0x7f7fffffu), bits(v & 0x7f7fffffu)); break;                 /* any bits */
      case 1: {                                                                             /* ratios */
        const float hi = bits((v & 0x7fffffu) | 0x3f800000u);
        check(-hi * (float)((u % 1000) / 999.0), hi);
        break;
      }
      case 2: {       /* zero points near halves: min = -(k + 0.5) / 255 * span, both ends a few ulps off */
        const float span = bits((v & 0x7fffffu) | ((100u + (v >> 25)) << 23));
        const float lo = -(float)(((double)(u % 256) + 0.5) / 255.0 * span);
        check(nudge(lo, (int32_t)((u >> 8) % 5) - 2), nudge(span + lo, (int32_t)((u >> 12) % 5) - 2));
        break;
      }
      case 3: check(-bits(v & 0x7f7fffffu), bits(v & 0x7f7fffffu)); break;                 /* symmetric */
      case 4: check(0.0f, bits(v & 0x7f7fffffu)); break;
      case 5: check(-bits(v & 0x7f7fffffu), 0.0f); break;
      case 6: check(-bits(u & 0xffffffu), bits(v & 0xffffffu)); break;                     /* subnormal */
      default:
        check(-(float)(u % 1024) / (float)(1 + (u >> 20) % 64), (float)(v % 1024) / (float)(1 + (v >> 20) % 64));
    }
  }
  for (int k = 0; k < 256; ++k) {
    for (int e = -140; e < 127; e += 3) {                    /* exact multiples and halves of powers of two */
      check(-ldexpf((float)k, e), ldexpf((float)(255 - k), e));
      check(-ldexpf((float)k + 0.5f, e), ldexpf(254.5f - (float)k, e));
    }
  }
  printf("checked %ld ranges: %ld zero points and %ld steps differ from double precision\n", checked, wrong_zp,
         wrong_step);
  return wrong_zp || wrong_step;
}
