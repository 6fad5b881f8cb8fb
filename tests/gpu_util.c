#include "gpu_util.h"

#include <stdio.h>
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

void g_store(kt_dtype t, void *dst, const double *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t == KT_F32) ((float *)dst)[i] = (float)src[i];
    else ((uint16_t *)dst)[i] = g_f_to_bf16((float)src[i]);
  }
}

double g_load(kt_dtype t, const void *src, size_t i) {
  return t == KT_F32 ? ((const float *)src)[i] : g_bf16_to_f(((const uint16_t *)src)[i]);
}
