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
