#include "gpu_util.h"

#include <math.h>
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

float g_bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t g_f_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

double g_uniform(uint64_t *s, double lo, double hi) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * ((double)(*s >> 11) / 9007199254740992.0);
}

static uint16_t f_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (a < 0x38800000u) { /* subnormal half: scale, round to nearest even */
    float m;
    memcpy(&m, &a, 4);
    double q = (double)m * 16777216.0; /* units of 2^-24 */
    double r = q - (double)(uint32_t)q;
    uint32_t n = (uint32_t)q;
    if (r > 0.5 || (r == 0.5 && (n & 1))) n++;
    return (uint16_t)(sign | n);
  }
  uint32_t e = ((a >> 23) - 112) << 10, m = (a >> 13) & 0x3ffu, rest = a & 0x1fffu;
  uint32_t h = e | m;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static float f16_to_f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float v = (float)m / 16777216.0f;
    return sign ? -v : v;
  }
  uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void g_store(kt_dtype t, void *dst, const double *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    switch (t) {
      case KT_F32: ((float *)dst)[i] = (float)src[i]; break;
      case KT_F16: ((uint16_t *)dst)[i] = f_to_f16((float)src[i]); break;
      case KT_I32: ((int32_t *)dst)[i] = (int32_t)src[i]; break;
      case KT_U8: ((uint8_t *)dst)[i] = (uint8_t)src[i]; break;
      default: ((uint16_t *)dst)[i] = g_f_to_bf16((float)src[i]); break;
    }
  }
}

double g_load(kt_dtype t, const void *src, size_t i) {
  switch (t) {
    case KT_F32: return ((const float *)src)[i];
    case KT_F16: return f16_to_f(((const uint16_t *)src)[i]);
    case KT_I32: return ((const int32_t *)src)[i];
    case KT_U8: return ((const uint8_t *)src)[i];
    default: return g_bf16_to_f(((const uint16_t *)src)[i]);
  }
}

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

void g_buf_round(g_buf *b) {
  g_store(b->dt, b->stage, b->h, b->n);
  for (size_t i = 0; i < b->n; i++) b->h[i] = g_load(b->dt, b->stage, i);
}

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
