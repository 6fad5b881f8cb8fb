#include "compare.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void kt__default_tolerance(kt_dtype t, double *atol, double *rtol) {
  switch (t) {
    case KT_F32: *atol = 1e-5; *rtol = 1e-4; break;
    case KT_F64: *atol = 1e-12; *rtol = 1e-10; break;
    case KT_F16: *atol = 1e-3; *rtol = 2e-3; break;
    case KT_BF16: *atol = 1e-2; *rtol = 1.6e-2; break;
    default: *atol = 0; *rtol = 0; break;
  }
}

static double half(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

double kt__decode(kt_dtype t, const void *buf, size_t i) {
  switch (t) {
    case KT_F32: { float f; memcpy(&f, (const char *)buf + 4 * i, 4); return f; }
    case KT_F64: { double d; memcpy(&d, (const char *)buf + 8 * i, 8); return d; }
    case KT_F16: { uint16_t h; memcpy(&h, (const char *)buf + 2 * i, 2); return half(h); }
    case KT_BF16: {
      uint16_t h;
      memcpy(&h, (const char *)buf + 2 * i, 2);
      uint32_t u = (uint32_t)h << 16;
      float f;
      memcpy(&f, &u, 4);
      return f;
    }
    case KT_I32: { int32_t v; memcpy(&v, (const char *)buf + 4 * i, 4); return v; }
    case KT_U32: { uint32_t v; memcpy(&v, (const char *)buf + 4 * i, 4); return v; }
    case KT_I64: { int64_t v; memcpy(&v, (const char *)buf + 8 * i, 8); return (double)v; }
    case KT_I16: { int16_t v; memcpy(&v, (const char *)buf + 2 * i, 2); return v; }
    case KT_U8: return ((const uint8_t *)buf)[i];
    case KT_I8: return ((const int8_t *)buf)[i];
    default: return 0;
  }
}

size_t kt__compare(kt_dtype t, const void *ref, const void *got, size_t n, double atol,
                   double rtol, char *why, size_t whylen) {
  size_t bad = 0;
  /* 64-bit integers are compared exactly, not through double. */
  int exact64 = t == KT_I64;
  for (size_t i = 0; i < n; i++) {
    int ok;
    double r = 0, g = 0;
    if (exact64) {
      ok = !memcmp((const char *)ref + 8 * i, (const char *)got + 8 * i, 8);
    } else {
      r = kt__decode(t, ref, i);
      g = kt__decode(t, got, i);
      if (isnan(r) || isnan(g)) ok = isnan(r) && isnan(g);
      else if (isinf(r) || isinf(g)) ok = r == g;
      else ok = fabs(g - r) <= atol + rtol * fabs(r);
    }
    if (!ok && !bad++ && why)
      snprintf(why, whylen, "element %zu: %.6g, reference %.6g (atol %g, rtol %g)", i, g, r, atol, rtol);
  }
  return bad;
}
