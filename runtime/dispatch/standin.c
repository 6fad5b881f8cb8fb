/* Async mode's stand-in: the config a miss launches at once while its key
** is tuned in the background. The cached winner of the nearest key of the
** same spec on this device: every key field equal (dtypes, alignments,
** flags, derived constants) except the integer size fields, nearest by the
** sum of |log2| of their ratios; it must satisfy the constraints for this
** call. Else the fallback. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cache/codec.h"
#include "cache/store.h"
#include "dispatch/handles.h"
#include "spec/key.h"

typedef struct nearest {
  kt_kernel *k;
  const kt__call *c;
  const int64_t *key;
  double best;
  int64_t cfg[KT_MAX_CFIELDS];
  char from[1024];
} nearest;

static double size_distance(int64_t a, int64_t b) {
  if (a == b) return 0;
  if (a <= 0 || b <= 0) return 64;
  return fabs(log2((double)a) - log2((double)b));
}

/* Field f of the key against the row's value v: its distance, or -1 when
** they must be equal and are not. */
static double field_distance(const kt__keyfield *f, int64_t mine, const kt__kv *v) {
  if (f->kind == KT__KF_TYPE) return v->kind == KT__V_STR && !strcmp(kt_dtype_name((kt_dtype)mine), v->s) ? 0 : -1;
  if (f->kind == KT__KF_F32) {
    float m;
    memcpy(&m, &mine, sizeof m);
    return v->kind == KT__V_F32 ? (v->f == m ? 0 : -1) : (v->kind == KT__V_INT && (float)v->i == m ? 0 : -1);
  }
  if (v->kind != KT__V_INT) return -1;
  if (f->kind == KT__KF_SCALAR || f->kind == KT__KF_POW2) return size_distance(mine, v->i);
  return mine == v->i ? 0 : -1;
}

/* The distance from the call's key to a stored key, or -1. */
static double distance(const kt__keydef *kd, const int64_t *key, const char *json) {
  kt__kv v[KT__KV_MAX];
  char buf[KT_KEY_JSON_MAX], why[128];
  int n = kt__codec_read(json, v, KT__KV_MAX, buf, sizeof buf, why, sizeof why);
  if (n != kd->n) return -1;
  double d = 0;
  for (int i = 0; i < kd->n; i++) {
    int j = 0;
    while (j < n && strcmp(v[j].name, kd->f[i].name)) j++;
    double fd = j < n ? field_distance(&kd->f[i], key[i], &v[j]) : -1;
    if (fd < 0) return -1;
    d += fd;
  }
  return d;
}

static int on_row(void *user, const kt__cfgrow *r, int from_system) {
  nearest *ne = user;
  const kt__prog *p = &ne->k->p;
  const kt__env *env = &ne->k->rt->env;
  (void)from_system;
  if (strcmp(r->spec_hash, p->spec_hash) || strcmp(r->device, env->fingerprint)) return 0;
  double d = distance(&p->keydef, ne->key, r->key);
  int64_t cfg[KT_MAX_CFIELDS];
  if (d < 0 || (ne->best >= 0 && d >= ne->best) || !kt__call_config_valid(&ne->k->p, ne->c, r->config, cfg))
    return 0;
  ne->best = d;
  memcpy(ne->cfg, cfg, sizeof cfg);
  snprintf(ne->from, sizeof ne->from, "%s", r->key);
  return 0;
}

int kt__standin(kt_kernel *k, const kt__call *c, const int64_t *key, const int64_t *fallback, int64_t *cfg,
                char *from, size_t n) {
  nearest ne = {.k = k, .c = c, .key = key, .best = -1};
  char err[KT_ERRMAX];
  const kt__env *env = &k->rt->env;
  if (env->store && kt__store_list(env->store, k->p.spec->name, on_row, &ne, err, sizeof err))
    kt__log(&env->log, KT_LOG_WARN, "%s", err);
  if (ne.best < 0) {
    memcpy(cfg, fallback, (size_t)k->p.spec->ncfields * sizeof *cfg);
    snprintf(from, n, "the default");
    return 0;
  }
  memcpy(cfg, ne.cfg, (size_t)k->p.spec->ncfields * sizeof *cfg);
  snprintf(from, n, "the winner of %s", ne.from);
  return 1;
}
