#include <string.h>

#include "ktune.h"

const char *kt_status_name(kt_status s) {
  switch (s) {
#define KT__NAME(name, code, text) \
  case KT_##name:                  \
    return "KT_" #name;
    KT_STATUS_MAP(KT__NAME)
#undef KT__NAME
  }
  return "KT_UNKNOWN";
}

const char *kt_status_str(kt_status s) {
  switch (s) {
#define KT__STR(name, code, text) \
  case KT_##name:                 \
    return text;
    KT_STATUS_MAP(KT__STR)
#undef KT__STR
  }
  return "unknown status";
}

const char *kt_trial_status_name(kt_trial_status s) {
  switch (s) {
#define KT__TNAME(name, code, text) \
  case KT_TRIAL_##name:             \
    return text;
    KT_TRIAL_MAP(KT__TNAME)
#undef KT__TNAME
  }
  return NULL;
}

kt_status kt_trial_status_parse(const char *name, kt_trial_status *out) {
  if (!name || !out) return KT_ERR_INVALID;
#define KT__TPARSE(nm, code, text) \
  if (!strcmp(name, text)) {       \
    *out = KT_TRIAL_##nm;          \
    return KT_OK;                  \
  }
  KT_TRIAL_MAP(KT__TPARSE)
#undef KT__TPARSE
  return KT_ERR_INVALID;
}

const char *kt_libversion(void) { return KT_VERSION_STRING; }
int kt_libversion_number(void) { return KT_VERSION_NUMBER; }

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
