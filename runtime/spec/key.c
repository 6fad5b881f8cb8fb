#include "spec/key.h"

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
  size_t u = (size_t)snprintf(out, n, "{");
  for (int i = 0; i < kd->n && u < n; i++) {
    const kt__keyfield *f = &kd->f[i];
    const char *sep = i ? "," : "";
    if (f->kind == KT__KF_TYPE) {
      const char *tn = kt_dtype_name((kt_dtype)key[i]);
      u += (size_t)snprintf(out + u, n - u, "%s\"%s\":\"%s\"", sep, f->name, tn ? tn : "?");
    } else if (f->kind == KT__KF_F32) {
      uint32_t bits = (uint32_t)key[i];
      float x;
      memcpy(&x, &bits, 4);
      u += (size_t)snprintf(out + u, n - u, "%s\"%s\":%.9g", sep, f->name, (double)x);
    } else {
      u += (size_t)snprintf(out + u, n - u, "%s\"%s\":%lld", sep, f->name, (long long)key[i]);
    }
  }
  if (u < n) snprintf(out + u, n - u, "}");
}

void kt__config_json(const kt__spec *s, const int64_t *cfg, char *out, size_t n) {
  int order[64];
  for (int i = 0; i < s->ncfields; i++) order[i] = i;
  for (int i = 1; i < s->ncfields; i++)
    for (int j = i; j > 0 && strcmp(s->cfields[order[j - 1]].name, s->cfields[order[j]].name) > 0; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  size_t u = (size_t)snprintf(out, n, "{");
  for (int i = 0; i < s->ncfields && u < n; i++)
    u += (size_t)snprintf(out + u, n - u, "%s\"%s\":%lld", i ? "," : "", s->cfields[order[i]].name,
                          (long long)cfg[order[i]]);
  if (u < n) snprintf(out + u, n - u, "}");
}

int kt__config_from_json(const kt__spec *s, const char *json, int64_t *cfg) {
  int seen[64] = {0}, nseen = 0;
  const char *p = json;
  while (*p == ' ') p++;
  if (*p++ != '{') return -1;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (*p == '}') break;
    if (*p++ != '"') return -1;
    const char *name = p;
    while (*p && *p != '"') p++;
    if (*p != '"') return -1;
    int f = kt__spec_cfield(s, name, (size_t)(p - name));
    p++;
    while (*p == ' ') p++;
    if (f < 0 || seen[f] || *p++ != ':') return -1;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) return -1;
    p = end;
    int in = 0;
    for (int i = 0; i < s->cfields[f].n; i++) in |= s->cfields[f].values[i] == v;
    if (!in) return -1;
    cfg[f] = v;
    seen[f] = 1;
    nseen++;
  }
  return nseen == s->ncfields ? 0 : -1;
}
