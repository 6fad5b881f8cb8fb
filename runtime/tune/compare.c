#include "tune/compare.h"

#include "base/pool.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
      r = kt_dtype_load(t, ref, i);
      g = kt_dtype_load(t, got, i);
      if (isnan(r) || isnan(g)) ok = isnan(r) && isnan(g);
      else if (isinf(r) || isinf(g)) ok = r == g;
      else ok = fabs(g - r) <= atol + rtol * fabs(r);
    }
    if (!ok && !bad++ && why)
      snprintf(why, whylen, "element %zu: %.6g, reference %.6g (atol %g, rtol %g)", i, g, r, atol, rtol);
  }
  return bad;
}

typedef struct chunked {
  kt_dtype t;
  const void *ref, *got;
  size_t n, per;
  double atol, rtol;
  size_t bad[64];
  char why[64][300];
} chunked;

static void compare_chunk(void *user, int i) {
  chunked *c = user;
  size_t lo = (size_t)i * c->per, hi = lo + c->per < c->n ? lo + c->per : c->n;
  size_t esz = kt_dtype_size(c->t);
  if (lo >= hi) return;
  c->bad[i] = kt__compare(c->t, (const char *)c->ref + lo * esz, (const char *)c->got + lo * esz, hi - lo,
                          c->atol, c->rtol, c->why[i], sizeof c->why[i]);
  if (c->bad[i]) {
    /* Element numbers in the message count from the whole buffer. */
    char tmp[300];
    size_t at = 0;
    if (sscanf(c->why[i], "element %zu:", &at) == 1) {
      const char *rest = strchr(c->why[i], ':');
      snprintf(tmp, sizeof tmp, "element %zu%s", lo + at, rest ? rest : "");
      snprintf(c->why[i], sizeof c->why[i], "%s", tmp);
    }
  }
}

size_t kt__compare_parallel(kt_dtype t, const void *ref, const void *got, size_t n, double atol, double rtol,
                            char *why, size_t whylen) {
  /* Large outputs (hundreds of millions of elements) are split over the
  ** CPUs; small ones are not worth a thread. */
  if (n < (1u << 20)) return kt__compare(t, ref, got, n, atol, rtol, why, whylen);
  chunked *c = calloc(1, sizeof *c);
  if (!c) return kt__compare(t, ref, got, n, atol, rtol, why, whylen);
  int parts = kt__ncpus() < 64 ? kt__ncpus() : 64;
  *c = (chunked){.t = t, .ref = ref, .got = got, .n = n, .per = (n + (size_t)parts - 1) / (size_t)parts,
                 .atol = atol, .rtol = rtol};
  kt__parallel_for(parts, parts, compare_chunk, c);
  size_t bad = 0;
  for (int i = 0; i < parts; i++) {
    if (c->bad[i] && !bad && why) snprintf(why, whylen, "%s", c->why[i]);
    bad += c->bad[i];
  }
  free(c);
  return bad;
}
