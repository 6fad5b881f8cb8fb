#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* shape_args() places pointer i at this base plus its @offset. */
#define FAKE_BASE 0x7f0000000000ULL
#define FAKE_STRIDE 0x10000000ULL

static double uni(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return (double)(*s >> 11) / 9007199254740992.0;
}

static uint16_t f_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static float bf16_to_f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
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

void synth_put(kt_dtype t, void *dst, size_t i, double v) {
  switch (t) {
    case KT_F32: ((float *)dst)[i] = (float)v; break;
    case KT_F64: ((double *)dst)[i] = v; break;
    case KT_BF16: ((uint16_t *)dst)[i] = f_to_bf16((float)v); break;
    case KT_F16: ((uint16_t *)dst)[i] = f_to_f16((float)v); break;
    case KT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
    case KT_I64: ((int64_t *)dst)[i] = (int64_t)v; break;
    case KT_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
    case KT_I8: ((int8_t *)dst)[i] = (int8_t)v; break;
    case KT_I16: ((int16_t *)dst)[i] = (int16_t)v; break;
    case KT_U32: ((uint32_t *)dst)[i] = (uint32_t)v; break;
    default: break;
  }
}

double synth_get(kt_dtype t, const void *src, size_t i) {
  switch (t) {
    case KT_F32: return ((const float *)src)[i];
    case KT_F64: return ((const double *)src)[i];
    case KT_BF16: return bf16_to_f(((const uint16_t *)src)[i]);
    case KT_F16: return f16_to_f(((const uint16_t *)src)[i]);
    case KT_I32: return ((const int32_t *)src)[i];
    case KT_I64: return (double)((const int64_t *)src)[i];
    case KT_U8: return ((const uint8_t *)src)[i];
    case KT_I8: return ((const int8_t *)src)[i];
    case KT_I16: return ((const int16_t *)src)[i];
    case KT_U32: return ((const uint32_t *)src)[i];
    default: return 0;
  }
}

/* The value of scalar param `name` in the call, for permutation(N). */
static int scalar(kt_kernel *k, const kt_arg *a, const char *name, size_t len, int64_t *v) {
  for (int i = 0; i < kt_kernel_nparams(k); i++) {
    kt_param_info p;
    kt_kernel_param(k, i, &p);
    if (strlen(p.name) != len || strncmp(p.name, name, len)) continue;
    if (a[i].kind == KT_ARG_I32) *v = a[i].v.i32;
    else if (a[i].kind == KT_ARG_I64) *v = a[i].v.i64;
    else return -1;
    return 0;
  }
  char *end;
  char buf[64];
  snprintf(buf, sizeof buf, "%.*s", (int)len, name);
  *v = strtoll(buf, &end, 10);
  return *end || end == buf ? -1 : 0;
}

static int fill(kt_kernel *k, const kt_arg *a, const kt_param_info *p, kt_dtype dt, void *host, size_t n,
                uint64_t *seed, char *err, size_t errlen) {
  const char *g = p->init;
  int is_float = dt == KT_F32 || dt == KT_F16 || dt == KT_BF16 || dt == KT_F64;
  if (!strcmp(p->access, "out")) g = "zeros";
  else if (!*g) g = is_float ? "randn" : "zeros";
  double lo = 0, hi = 1;
  const char *open = strchr(g, '(');
  size_t nlen = open ? (size_t)(open - g) : strlen(g);
  if (!strncmp(g, "uniform", nlen) && nlen == 7) {
    if (!open || sscanf(open, "(%lf,%lf)", &lo, &hi) != 2) goto bad;
    for (size_t i = 0; i < n; i++) synth_put(dt, host, i, lo + (hi - lo) * uni(seed));
  } else if (nlen == 5 && !strncmp(g, "randn", 5)) {
    for (size_t i = 0; i < n; i++) {
      double u1 = uni(seed), u2 = uni(seed);
      synth_put(dt, host, i, sqrt(-2 * log(u1 > 1e-300 ? u1 : 1e-300)) * cos(6.283185307179586 * u2));
    }
  } else if (nlen == 4 && !strncmp(g, "ones", 4)) {
    for (size_t i = 0; i < n; i++) synth_put(dt, host, i, 1);
  } else if (nlen == 5 && !strncmp(g, "zeros", 5)) {
    memset(host, 0, n * kt_dtype_size(dt));
  } else if (nlen == 6 && !strncmp(g, "arange", 6)) {
    for (size_t i = 0; i < n; i++) synth_put(dt, host, i, (double)i);
  } else if (nlen == 4 && !strncmp(g, "mask", 4)) {
    if (!open || sscanf(open, "(%lf)", &lo) != 1) goto bad;
    for (size_t i = 0; i < n; i++) synth_put(dt, host, i, uni(seed) < lo);
  } else if (nlen == 11 && !strncmp(g, "permutation", 11)) {
    const char *close = open ? strchr(open, ')') : NULL;
    int64_t m;
    if (!close || scalar(k, a, open + 1, (size_t)(close - open - 1), &m) || m <= 0) goto bad;
    int64_t *perm = malloc((size_t)m * sizeof *perm);
    if (!perm) {
      snprintf(err, errlen, "%s: out of host memory", p->name);
      return -1;
    }
    for (int64_t i = 0; i < m; i++) perm[i] = i;
    for (int64_t i = m - 1; i > 0; i--) {
      int64_t j = (int64_t)(uni(seed) * (double)(i + 1)), t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    for (size_t i = 0; i < n; i++) synth_put(dt, host, i, (double)perm[i % (size_t)m]);
    free(perm);
  } else if (g[0] == '-' || (g[0] >= '0' && g[0] <= '9')) {
    double v = strtod(g, NULL);
    for (size_t i = 0; i < n; i++) synth_put(dt, host, i, v);
  } else {
    goto bad;
  }
  return 0;
bad:
  snprintf(err, errlen,
           "%s: \"init\": \"%s\" is not a generator (randn, uniform(a,b), ones, arange, permutation(n), mask(p), or "
           "a number)",
           p->name, g);
  return -1;
}

int synth_make(synth *s, kt_runtime *rt, kt_kernel *k, const kt_arg *shape, uint64_t seed, char *err,
               size_t errlen) {
  memset(s, 0, sizeof *s);
  s->rt = rt;
  s->n = kt_kernel_nparams(k);
  memcpy(s->args, shape, (size_t)s->n * sizeof *shape);
  int64_t ext[64];
  if (kt_kernel_extents(k, shape, s->n, ext)) {
    snprintf(err, errlen, "%s", kt_errmsg(rt));
    return -1;
  }
  seed = seed * 2654435761u + 88172645463325252ULL;
  for (int i = 0; i < s->n; i++) {
    if (shape[i].kind != KT_ARG_PTR || !shape[i].v.ptr) continue;
    kt_param_info p;
    kt_kernel_param(k, i, &p);
    kt_dtype dt = shape[i].dtype;
    size_t esz = kt_dtype_size(dt), n = ext[i] > 0 ? (size_t)ext[i] : 0;
    size_t off = (size_t)((shape[i].v.ptr - FAKE_BASE) % FAKE_STRIDE);
    size_t bytes = off + n * esz;
    if (kt_device_alloc(rt, bytes ? bytes : 1, &s->alloc[i])) {
      snprintf(err, errlen, "%s: %zu bytes: %s", p.name, bytes, kt_errmsg(rt));
      return -1;
    }
    s->args[i].v.ptr = s->alloc[i] + off;
    void *host = malloc(n * esz > 0 ? n * esz : 1);
    if (!host) {
      snprintf(err, errlen, "%s: out of host memory", p.name);
      return -1;
    }
    int rc = fill(k, shape, &p, dt, host, n, &seed, err, errlen);
    if (!rc && n && kt_device_upload(rt, s->args[i].v.ptr, host, n * esz)) {
      snprintf(err, errlen, "%s: %s", p.name, kt_errmsg(rt));
      rc = -1;
    }
    free(host);
    if (rc) return -1;
  }
  return 0;
}

void synth_free(synth *s) {
  for (int i = 0; i < s->n; i++)
    if (s->alloc[i]) kt_device_free(s->rt, s->alloc[i]);
  memset(s->alloc, 0, sizeof s->alloc);
}
