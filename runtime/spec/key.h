/* Tuning keys. A key holds what decides which config is fastest and never
** what the spec marks "ignore" (a token count, say): calls that differ only
** there share one tuning. Fields: scalar params by policy (exact value or
** power-of-two bucket), each pointer's alignment class (0 when null), each
** type variable's dtype, and each derived constant that does not depend on
** the config. The kernel, its spec hash and the device go beside the key
** in the cache row. */
#ifndef KT_KEY_H
#define KT_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "cache/codec.h"
#include "spec/spec.h"

#define KT_MAX_KEY 96

/* Bytes that hold any key's or config's canonical JSON (or a config's
** NAME=VALUE form), NUL included. */
#define KT_KEY_JSON_MAX KT__JSON_MAX(KT_MAX_KEY)
#define KT_CONFIG_JSON_MAX KT__JSON_MAX(KT_MAX_CFIELDS)
_Static_assert(KT_KEY_JSON_MAX == KT_KEY_MAX && KT_CONFIG_JSON_MAX == KT_CONFIG_MAX && KT__NAME_MAX == KT_NAME_MAX,
               "ktune.h states the bounds");
_Static_assert(KT_CONFIG_JSON_MAX == KT__CONFIG_JSON_MAX, "the cache gives way to a config no reader takes");

enum { KT__KF_SCALAR, KT__KF_F32, KT__KF_POW2, KT__KF_PTR, KT__KF_TYPE, KT__KF_DERIVED };

typedef struct kt__keyfield {
  int kind;
  int index;  /* param, type variable or derived constant */
  const char *name;
} kt__keyfield;

typedef struct kt__keydef {
  kt__keyfield f[KT_MAX_KEY];  /* sorted by name: the canonical order */
  int n;
} kt__keydef;

/* Build the key layout of a spec; -1 when it would exceed KT_MAX_KEY. */
int kt__key_define(const kt__spec *s, kt__keydef *kd);
/* The key of a call whose slots hold bound params and evaluated
** param-only derived constants; tvals are its type variables. */
void kt__key_vector(const kt__keydef *kd, const kt__spec *s, const int64_t *slots,
                    const kt_dtype *tvals, int64_t *key);
/* Canonical JSON (cache/codec.h): {"D":256,"T":"bf16","res":0,"x":16}; ""
** when it does not fit in n. */
void kt__key_json(const kt__keydef *kd, const int64_t *key, char *out, size_t n);
/* Parse a config row's JSON ({"BLOCK":128,"VEC":4}) into spec order.
** Returns 0, or -1 when a field is missing, unknown, repeated, or holds a
** value outside the spec's space. */
int kt__config_from_json(const kt__spec *s, const char *json, int64_t *cfg);
/* cfg as canonical JSON, fields sorted by name ("" when it does not fit). */
void kt__config_json(const kt__spec *s, const int64_t *cfg, char *out, size_t n);

#endif
