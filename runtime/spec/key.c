#include "spec/key.h"

#include "cache/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name(const void *a, const void *b) {
  return strcmp(((const kt__keyfield *)a)->name, ((const kt__keyfield *)b)->name);
}

int kt__key_define(const kt__spec *s, kt__keydef *kd) {
  kd->n = 0;
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    int kind;
    if (p->type == KT__P_PTR) kind = KT__KF_PTR;
    else if (p->key == KT__KEY_IGNORE) continue;
    else if (p->type == KT__P_F32) kind = KT__KF_F32;
    else kind = p->key == KT__KEY_POW2 ? KT__KF_POW2 : KT__KF_SCALAR;
    if (kd->n == KT_MAX_KEY) return -1;
    kd->f[kd->n++] = (kt__keyfield){kind, i, p->name};
  }
  for (int t = 0; t < s->ntypes; t++) {
    if (kd->n == KT_MAX_KEY) return -1;
    kd->f[kd->n++] = (kt__keyfield){KT__KF_TYPE, t, s->types[t].name};
  }
  for (int d = 0; d < s->nderived; d++) {
    if (s->derived[d].uses_config) continue;
    if (kd->n == KT_MAX_KEY) return -1;
    kd->f[kd->n++] = (kt__keyfield){KT__KF_DERIVED, d, s->derived[d].name};
  }
  qsort(kd->f, (size_t)kd->n, sizeof kd->f[0], by_name);
  return 0;
}

void kt__key_vector(const kt__keydef *kd, const kt__spec *s, const int64_t *slots,
                    const kt_dtype *tvals, int64_t *key) {
  for (int i = 0; i < kd->n; i++) {
    const kt__keyfield *f = &kd->f[i];
    switch (f->kind) {
      case KT__KF_SCALAR:
      case KT__KF_F32: key[i] = slots[f->index]; break;
      case KT__KF_POW2: {
        int64_t v = slots[f->index], b = 1;
        while (b < v && b < ((int64_t)1 << 62)) b <<= 1;
        key[i] = v <= 0 ? v : b;
        break;
      }
      case KT__KF_PTR:
        key[i] = slots[f->index] ? slots[s->params[f->index].align_slot] : 0;
        break;
      case KT__KF_TYPE: key[i] = tvals[f->index]; break;
      default: key[i] = slots[s->derived[f->index].slot]; break;
    }
  }
}

void kt__key_json(const kt__keydef *kd, const int64_t *key, char *out, size_t n) {
  kt__kv v[KT_MAX_KEY];
  for (int i = 0; i < kd->n; i++) {
    const kt__keyfield *f = &kd->f[i];
    v[i] = (kt__kv){.name = f->name, .kind = KT__V_INT, .i = key[i]};
    if (f->kind == KT__KF_TYPE) {
      const char *tn = kt_dtype_name((kt_dtype)key[i]);
      v[i].kind = KT__V_STR;
      v[i].s = tn ? tn : "?";
    } else if (f->kind == KT__KF_F32) {
      uint32_t bits = (uint32_t)key[i];
      v[i].kind = KT__V_F32;
      memcpy(&v[i].f, &bits, 4);
    }
  }
  if (kt__codec_write(v, kd->n, out, n) && n) out[0] = 0;
}

void kt__config_json(const kt__spec *s, const int64_t *cfg, char *out, size_t n) {
  kt__kv v[KT_MAX_CFIELDS];
  for (int i = 0; i < s->ncfields; i++) v[i] = (kt__kv){.name = s->cfields[i].name, .kind = KT__V_INT, .i = cfg[i]};
  if (kt__codec_write(v, s->ncfields, out, n) && n) out[0] = 0;
}

int kt__config_from_json(const kt__spec *s, const char *json, int64_t *cfg) {
  kt__kv v[KT_MAX_CFIELDS + 1];
  char buf[KT_CONFIG_JSON_MAX], why[128];
  int seen[KT_MAX_CFIELDS] = {0};
  int n = kt__codec_read(json, v, KT_MAX_CFIELDS + 1, buf, sizeof buf, why, sizeof why);
  if (n != s->ncfields) return -1;
  for (int i = 0; i < n; i++) {
    int f = kt__spec_cfield(s, v[i].name, strlen(v[i].name)), in = 0;
    if (f < 0 || seen[f] || v[i].kind != KT__V_INT) return -1;
    for (int k = 0; k < s->cfields[f].n; k++) in |= s->cfields[f].values[k] == v[i].i;
    if (!in) return -1;
    cfg[f] = v[i].i;
    seen[f] = 1;
  }
  return 0;
}
