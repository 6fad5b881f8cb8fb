#include "gpu_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

kt_runtime *g_open(void) {
  kt_options o;
  kt_options_init(&o);
  o.log_level = KT_LOG_WARN;
  return g_open_with(&o);
}

kt_runtime *g_open_mode(kt_mode mode) {
  kt_options o;
  kt_options_init(&o);
  o.log_level = KT_LOG_WARN;
  o.mode = mode;
  return g_open_with(&o);
}

kt_runtime *g_open_with(const kt_options *o) {
  kt_runtime *rt = NULL;
  kt_status st = kt_runtime_open(&rt, o);
  if (st == KT_OK) return rt;
  char why[2300];
  snprintf(why, sizeof why, "no GPU: %s", kt_errmsg(rt));
  kt_runtime_close(rt);
  if (st == KT_ERR_NO_DRIVER || st == KT_ERR_NO_DEVICE) {
    t_skip(why);
  } else {
    t_fail(__FILE__, __LINE__, "kt_runtime_open: %s: %s", kt_status_name(st), why);
  }
  return NULL;
}

int g_load_kernels(kt_runtime *rt, ...) {
  va_list ap;
  va_start(ap, rt);
  int rc = 0;
  for (const char *spec; !rc && (spec = va_arg(ap, const char *));) {
    kt_kernel **k = va_arg(ap, kt_kernel **);
    if (kt_kernel_load(rt, spec, k)) {
      t_fail(__FILE__, __LINE__, "load %s: %s", spec, kt_errmsg(rt));
      rc = -1;
    }
  }
  va_end(ap);
  return rc;
}

double g_uniform(uint64_t *s, double lo, double hi) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * ((double)(*s >> 11) / 9007199254740992.0);
}

void g_store(kt_dtype t, void *dst, const double *src, size_t n) {
  for (size_t i = 0; i < n; i++) kt_dtype_store(t, dst, i, src[i]);
}

double g_load(kt_dtype t, const void *src, size_t i) { return kt_dtype_load(t, src, i); }

#define G_PAD 64 /* elements past the end, poisoned, to catch writes */

int g_buf_make(g_buf *b, kt_runtime *rt, kt_dtype dt, size_t n, int offset) {
  memset(b, 0, sizeof *b);
  b->rt = rt;
  b->dt = dt;
  b->n = n;
  b->esz = kt_dtype_size(dt);
  b->bytes = (n + (size_t)offset + G_PAD) * b->esz;
  b->h = calloc(n ? n : 1, sizeof *b->h);
  b->stage = malloc(b->bytes);
  if (!b->h || !b->stage || kt_device_alloc(rt, b->bytes, &b->alloc)) return -1;
  b->ptr = b->alloc + (uint64_t)offset * b->esz;
  return 0;
}

void g_buf_rand(g_buf *b, uint64_t *seed, double lo, double hi) {
  for (size_t i = 0; i < b->n; i++) b->h[i] = g_uniform(seed, lo, hi);
  g_buf_round(b);
}

void g_round(kt_dtype t, void *stage, double *h, size_t n) {
  g_store(t, stage, h, n);
  for (size_t i = 0; i < n; i++) h[i] = g_load(t, stage, i);
}

void g_buf_round(g_buf *b) { g_round(b->dt, b->stage, b->h, b->n); }

int g_buf_upload(g_buf *b) {
  if (kt_device_fill(b->rt, b->alloc, 0xff, b->bytes)) return -1;
  g_store(b->dt, b->stage, b->h, b->n);
  return b->n ? (int)kt_device_upload(b->rt, b->ptr, b->stage, b->n * b->esz) : 0;
}

int g_buf_poison(g_buf *b) { return (int)kt_device_fill(b->rt, b->alloc, 0xff, b->bytes); }

long g_buf_check(g_buf *b, const double *ref, size_t n, double atol, double rtol, const char *what,
                 char *msg, size_t msglen) {
  size_t off = (size_t)(b->ptr - b->alloc);
  if (kt_device_download(b->rt, b->stage, b->alloc, b->bytes)) {
    snprintf(msg, msglen, "%s: download: %s", what, kt_errmsg(b->rt));
    return -1;
  }
  const unsigned char *raw = b->stage;
  long bad = 0;
  for (size_t i = 0; i < off; i++)
    if (raw[i] != 0xff) {
      snprintf(msg, msglen, "%s: byte %zu before the buffer was written", what, off - i);
      return 1;
    }
  for (size_t i = 0; i < n; i++) {
    double y = g_load(b->dt, raw + off, i), r = ref[i];
    if (!(fabs(y - r) <= atol + rtol * fabs(r)) && !bad++)
      snprintf(msg, msglen, "%s[%zu] = %.7g, reference %.7g (atol %g, rtol %g)", what, i, y, r, atol, rtol);
  }
  if (bad) return bad;
  for (size_t i = off + n * b->esz; i < b->bytes; i++)
    if (raw[i] != 0xff) {
      snprintf(msg, msglen, "%s: byte %zu past the end was written", what, i - off - n * b->esz);
      return 1;
    }
  return 0;
}

void g_buf_free(g_buf *b) {
  if (b->alloc) kt_device_free(b->rt, b->alloc);
  free(b->h);
  free(b->stage);
  memset(b, 0, sizeof *b);
}

void g_norm_ref(const double *x, const double *w, const double *b, int rows, int D, int rms, double eps, double *y) {
  for (int r = 0; r < rows; r++) {
    const double *xr = x + (size_t)r * D;
    double m = 0, v = 0;
    if (!rms) {
      for (int i = 0; i < D; i++) m += xr[i];
      m /= D;
    }
    for (int i = 0; i < D; i++) v += (xr[i] - m) * (xr[i] - m);
    double rs = 1 / sqrt(v / D + eps);
    for (int i = 0; i < D; i++) y[(size_t)r * D + i] = (xr[i] - m) * rs * w[i] + (b ? b[i] : 0);
  }
}
