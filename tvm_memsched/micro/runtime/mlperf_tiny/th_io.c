/* th_io.c: output and timestamps of the MLPerf Tiny harness.
 *
 * th_printf is a small formatter of its own, so the firmware needs no C library printf (newlib-nano's
 * has no floats without -u _printf_float; the full one costs tens of KiB): conversions %d %i %u %x %X
 * %c %s %% and %f / %.Nf, flags '0' and '-', a width, length modifiers l, ll and z. Characters go to
 * the board port's th_port_putchar. Values of th_results are printed by th_print_fixed (fixed-point,
 * rounded half away from zero) and th_print_scientific, with doubles and integers only (no libm).
 *
 * th_timestamp prints the port's microsecond clock (performance mode); in energy mode
 * (EE_CFG_ENERGY_MODE=1) it calls th_port_timestamp_pin(), which the port must provide. */
#include <limits.h>
#include <string.h>

#include "ee_protocol.h"
#include "th_api.h"

#if EE_CFG_ENERGY_MODE == 1
void th_port_timestamp_pin(void); /* the port pulls the timestamp pin low, then releases it */
#endif

static unsigned long g_written; /* characters of the current th_vprintf */

static void emit(char c) {
  th_port_putchar(c);
  ++g_written;
}

static void put_string(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i) emit(s[i]);
}

static void put_padded(const char* s, size_t n, unsigned width, int left, char pad) {
  size_t fill = width > n ? width - n : 0u;
  if (!left) {
    /* zero padding goes after a sign */
    if (pad == '0' && n > 0u && (s[0] == '-' || s[0] == '+')) {
      emit(s[0]);
      ++s;
      --n;
    }
    for (size_t i = 0; i < fill; ++i) emit(pad);
  }
  put_string(s, n);
  if (left) {
    for (size_t i = 0; i < fill; ++i) emit(' ');
  }
}

/* Digits of v in `base` at the end of buf[0..size); returns the first character's index. */
static size_t format_unsigned(char* buf, size_t size, unsigned long long v, unsigned base, int upper) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  size_t k = size;
  do {
    buf[--k] = digits[v % base];
    v /= base;
  } while (v != 0u && k > 1u);
  return k;
}

static void put_unsigned(unsigned long long v, unsigned min_digits) {
  char buf[24];
  size_t k = format_unsigned(buf, sizeof(buf), v, 10u, 0);
  for (size_t n = sizeof(buf) - k; n < min_digits; ++n) emit('0');
  put_string(buf + k, sizeof(buf) - k);
}

static int put_special(double v) {
  if (v != v) {
    put_string("nan", 3u);
    return 1;
  }
  if (v > 1.7976931348623157e308 || v < -1.7976931348623157e308) {
    put_string(v < 0.0 ? "-inf" : "inf", v < 0.0 ? 4u : 3u);
    return 1;
  }
  return 0;
}

void th_print_scientific(double v, unsigned digits) {
  if (put_special(v)) return;
  if (digits < 1u) digits = 1u;
  if (digits > 17u) digits = 17u;
  if (v < 0.0) {
    emit('-');
    v = -v;
  }
  int exponent = 0;
  if (v != 0.0) {
    while (v >= 10.0) {
      v /= 10.0;
      ++exponent;
    }
    while (v < 1.0) {
      v *= 10.0;
      --exponent;
    }
  }
  unsigned long long scale = 1u;
  for (unsigned i = 1u; i < digits; ++i) scale *= 10u;
  unsigned long long m = (unsigned long long)(v * (double)scale + 0.5);
  if (m >= scale * 10u) { /* rounded up to the next power of ten */
    m /= 10u;
    ++exponent;
  }
  put_unsigned(m / scale, 1u);
  if (digits > 1u) {
    emit('.');
    put_unsigned(m % scale, digits - 1u);
  }
  emit('e');
  emit(exponent < 0 ? '-' : '+');
  put_unsigned((unsigned long long)(exponent < 0 ? -exponent : exponent), 2u);
}

void th_print_fixed(double v, unsigned decimals) {
  if (put_special(v)) return;
  if (decimals > 9u) decimals = 9u;
  unsigned long long scale = 1u;
  for (unsigned i = 0; i < decimals; ++i) scale *= 10u;
  double a = v < 0.0 ? -v : v;
  if (a * (double)scale >= 9.0e18) { /* beyond 64-bit fixed point */
    th_print_scientific(v, 9u);
    return;
  }
  unsigned long long m = (unsigned long long)(a * (double)scale + 0.5);
  if (v < 0.0) emit('-');
  put_unsigned(m / scale, 1u);
  if (decimals > 0u) {
    emit('.');
    put_unsigned(m % scale, decimals);
  }
}

int th_vprintf(const char* fmt, va_list ap) {
  g_written = 0u;
  for (const char* p = fmt; *p != '\0'; ++p) {
    if (*p != '%') {
      emit(*p);
      continue;
    }
    ++p;
    int left = 0;
    char pad = ' ';
    for (; *p == '-' || *p == '0'; ++p) {
      if (*p == '-') left = 1;
      else pad = '0';
    }
    unsigned width = 0u;
    for (; *p >= '0' && *p <= '9'; ++p) width = width * 10u + (unsigned)(*p - '0');
    int precision = -1;
    if (*p == '.') {
      precision = 0;
      for (++p; *p >= '0' && *p <= '9'; ++p) precision = precision * 10 + (*p - '0');
    }
    int length = 0; /* 1: l, 2: ll, 3: z */
    if (*p == 'l') {
      length = 1;
      if (p[1] == 'l') {
        length = 2;
        ++p;
      }
      ++p;
    } else if (*p == 'z') {
      length = 3;
      ++p;
    }
    char buf[24];
    size_t k;
    switch (*p) {
      case 'd':
      case 'i': {
        long long v = length == 2 ? va_arg(ap, long long)
                      : length == 1 ? (long long)va_arg(ap, long)
                      : length == 3 ? (long long)va_arg(ap, size_t)
                                    : (long long)va_arg(ap, int);
        unsigned long long u = v < 0 ? 0u - (unsigned long long)v : (unsigned long long)v;
        k = format_unsigned(buf, sizeof(buf), u, 10u, 0);
        if (v < 0) buf[--k] = '-';
        put_padded(buf + k, sizeof(buf) - k, width, left, pad);
        break;
      }
      case 'u':
      case 'x':
      case 'X': {
        unsigned long long v = length == 2 ? va_arg(ap, unsigned long long)
                               : length == 1 ? (unsigned long long)va_arg(ap, unsigned long)
                               : length == 3 ? (unsigned long long)va_arg(ap, size_t)
                                             : (unsigned long long)va_arg(ap, unsigned);
        k = format_unsigned(buf, sizeof(buf), v, *p == 'u' ? 10u : 16u, *p == 'X');
        put_padded(buf + k, sizeof(buf) - k, width, left, pad);
        break;
      }
      case 'c':
        buf[0] = (char)va_arg(ap, int);
        put_padded(buf, 1u, width, left, ' ');
        break;
      case 's': {
        const char* s = va_arg(ap, const char*);
        if (s == NULL) s = "(null)";
        put_padded(s, strlen(s), width, left, ' ');
        break;
      }
      case 'f':
        th_print_fixed(va_arg(ap, double), precision < 0 ? 6u : (unsigned)precision);
        break;
      case '%':
        emit('%');
        break;
      case '\0':
        return (int)g_written;
      default: /* not supported: shown as written */
        emit('%');
        emit(*p);
        break;
    }
  }
  return (int)g_written;
}

void th_printf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)th_vprintf(fmt, ap);
  va_end(ap);
}

void th_timestamp(void) {
#if EE_CFG_ENERGY_MODE == 1
  th_port_timestamp_pin();
#else
  th_printf(EE_MSG_TIMESTAMP, (unsigned long)(th_port_microseconds() & ULONG_MAX));
#endif
}

void th_timestamp_initialize(void) {
  th_port_timer_start();
  th_printf(EE_MSG_TIMESTAMP_MODE);
  th_timestamp();
}
