/* Element types: names, sizes, and host conversions of their values. */
#include <stdint.h>
#include <string.h>

#include "ktune.h"

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    [KT_F32] = {"f32", 4}, [KT_F16] = {"f16", 2}, [KT_BF16] = {"bf16", 2},
    [KT_F64] = {"f64", 8}, [KT_I32] = {"i32", 4}, [KT_I64] = {"i64", 8},
    [KT_U8] = {"u8", 1},   [KT_I8] = {"i8", 1},   [KT_I16] = {"i16", 2},
    [KT_U32] = {"u32", 4},
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *kt_dtype_name(kt_dtype t) {
  return (int)t > 0 && (int)t < NDTYPES ? dtypes[t].name : NULL;
}

size_t kt_dtype_size(kt_dtype t) {
  return (int)t > 0 && (int)t < NDTYPES ? dtypes[t].size : 0;
}

kt_status kt_dtype_parse(const char *name, kt_dtype *out) {
  if (!name || !out) return KT_ERR_INVALID;
  for (int i = 1; i < NDTYPES; i++)
    if (strcmp(dtypes[i].name, name) == 0) {
      *out = (kt_dtype)i;
      return KT_OK;
    }
  return KT_ERR_INVALID;
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

/* Through memcpy: host arrays need not be aligned for their dtype. */
#define PUT(type, x)                                \
  do {                                              \
    type x_ = (type)(x);                            \
    memcpy((char *)dst + i * sizeof x_, &x_, sizeof x_); \
  } while (0)
#define GET(type)                                   \
  do {                                              \
    type x_;                                        \
    memcpy(&x_, (const char *)src + i * sizeof x_, sizeof x_); \
    return (double)x_;                              \
  } while (0)

void kt_dtype_store(kt_dtype t, void *dst, size_t i, double v) {
  switch (t) {
    case KT_F32: PUT(float, v); break;
    case KT_F64: PUT(double, v); break;
    case KT_BF16: PUT(uint16_t, f_to_bf16((float)v)); break;
    case KT_F16: PUT(uint16_t, f_to_f16((float)v)); break;
    case KT_I32: PUT(int32_t, v); break;
    case KT_I64: PUT(int64_t, v); break;
    case KT_U8: PUT(uint8_t, v); break;
    case KT_I8: PUT(int8_t, v); break;
    case KT_I16: PUT(int16_t, v); break;
    case KT_U32: PUT(uint32_t, v); break;
    default: break;
  }
}

double kt_dtype_load(kt_dtype t, const void *src, size_t i) {
  uint16_t h;
  switch (t) {
    case KT_F32: GET(float);
    case KT_F64: GET(double);
    case KT_BF16:
      memcpy(&h, (const char *)src + 2 * i, 2);
      return bf16_to_f(h);
    case KT_F16:
      memcpy(&h, (const char *)src + 2 * i, 2);
      return f16_to_f(h);
    case KT_I32: GET(int32_t);
    case KT_I64: GET(int64_t);
    case KT_U8: GET(uint8_t);
    case KT_I8: GET(int8_t);
    case KT_I16: GET(int16_t);
    case KT_U32: GET(uint32_t);
    default: return 0;
  }
}
