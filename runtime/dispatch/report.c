/* kt_kernel_tune: a call's key settled as kt_launch would settle it, and
** what happened said as data (kt_tune_report): from the tuner when this
** call tuned, else from the cache's rows for the key. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "cache/store.h"
#include "dispatch/runtime.h"
#include "spec/key.h"


struct kt__report {
  kt_tune_report pub;        /* first: what the caller holds */
  int tuned;                 /* filled by a tuning of this call */
  char key[1024], config[512], dflt[512];
  kt_candidate *cand;
  int ncand, cap;
  char **strings;            /* each candidate's config and detail */
  int nstrings;
};

void kt_tune_report_free(kt_tune_report *pub) {
  kt__report *r = (kt__report *)pub;
  if (!r) return;
  for (int i = 0; i < r->nstrings; i++) kt__free(r->strings[i]);
  kt__free(r->strings);
  kt__free(r->cand);
  kt__free(r);
}

static const char *keep(kt__report *r, const char *s) {
  char *c = kt__strdup(s ? s : "");
  if (c) r->strings[r->nstrings++] = c;
  return c ? c : "";
}

/* Room for n candidates (and their two strings each). */
static int room(kt__report *r, int n) {
  if (!(r->cand = kt__calloc((size_t)(n ? n : 1), sizeof *r->cand))) return -1;
  if (!(r->strings = kt__calloc((size_t)(2 * n + 1), sizeof *r->strings))) return -1;
  r->cap = n;
  return 0;
}

static void add(kt__report *r, const char *config, kt_trial_status status, double median, double spread,
                const char *detail, int measured, int quarantined, int stored) {
  if (r->ncand == r->cap) return;
  int ok = status == KT_TRIAL_OK;
  r->cand[r->ncand++] = (kt_candidate){.config = keep(r, config), .status = status, .measured = measured,
                                       .quarantined = quarantined, .stored = stored,
                                       .median_us = ok ? median : -1, .spread_us = ok ? spread : -1,
                                       .detail = keep(r, ok ? "" : detail)};
  r->pub.tried++;
  r->pub.rejected += !ok;
}

void kt__report_tuning(kt__report *r, const kt__tuner *t, int writable) {
  int n;
  const kt__cand *cd = kt__tuner_candidates(t, &n);
  const kt__tuneresult *res = kt__tuner_result(t);
  r->tuned = 1;
  r->pub.outcome = res->outcome;
  r->pub.default_us = res->default_us;
  r->pub.time_us = res->win >= 0 ? cd[res->win].median : -1;
  if (room(r, n)) return;
  for (int i = 0; i < n; i++) {
    if (cd[i].status == KT__PENDING) continue;
    int stored = writable && (cd[i].prior || !cd[i].unconfirmed);
    add(r, cd[i].json, (kt_trial_status)cd[i].status, cd[i].median, cd[i].spread, cd[i].detail, !cd[i].prior,
        cd[i].quarantined, stored);
  }
}

static int on_trial(void *user, const kt__trialrow *t) {
  kt__report *r = user;
  kt_trial_status ts;
  if (!kt_trial_status_parse(t->status, &ts))
    add(r, t->config, ts, t->median_us, t->spread_us, t->detail, 0, 0, 1);
  return 0;
}

static int count_trial(void *user, const kt__trialrow *t) {
  (void)t;
  (*(int *)user)++;
  return 0;
}

/* Not tuned by this call: the cache's row and trials for the key, when the
** config in use is the stored one. known: the table had the key before. */
static void from_cache(kt_kernel *k, kt__report *r, int known) {
  const kt__env *env = &k->rt->env;
  const kt__prog *p = &k->p;
  char json[512], err[KT_ERRMAX];
  double time_us = -1;
  int n = 0;
  r->pub.outcome = known ? KT_TUNE_KNOWN : KT_TUNE_NOT_TUNED;
  if (!env->store || kt__store_get_config(env->store, p->spec->name, p->spec_hash, env->fingerprint, r->key, json,
                                          sizeof json, &time_us, err, sizeof err) ||
      strcmp(json, r->config))
    return;
  r->pub.outcome = KT_TUNE_CACHED;
  r->pub.time_us = time_us;
  kt__store_trials(env->store, p->spec->name, p->spec_hash, env->fingerprint, r->key, count_trial, &n, err,
                   sizeof err);
  if (room(r, n)) return;
  kt__store_trials(env->store, p->spec->name, p->spec_hash, env->fingerprint, r->key, on_trial, r, err, sizeof err);
  for (int i = 0; i < r->ncand; i++)
    if (!strcmp(r->cand[i].config, r->dflt)) r->pub.default_us = r->cand[i].median_us;
}

/* Bind and check the call, then its key and default as the report names
** them; *known: the table has the key already. */
static kt_status prepare(kt_kernel *k, const kt_arg *args, int nargs, kt__call *c, kt__report *r, int *known) {
  int64_t key[KT_MAX_KEY], dflt[KT_MAX_CFIELDS];
  kt__range rg[KT_MAX_PARAMS];
  int nr;
  kt_status st;
  if ((st = kt__call_bind(&k->p, args, nargs, c)) || (st = kt__call_alias(&k->p, c, args, rg, &nr)) ||
      (st = kt__call_key(&k->p, c, key)))
    return st;
  kt__key_json(&k->p.keydef, key, r->key, sizeof r->key);
  *known = kt__tuned_find(k, key, kt__key_hash(k, key)) != NULL;
  kt__call probe = *c;
  if ((st = kt__call_fallback(&k->p, &probe, dflt))) return st;
  kt__config_json(k->p.spec, dflt, r->dflt, sizeof r->dflt);
  return KT_OK;
}

static kt__report *report_new(kt_kernel *k) {
  kt__report *r = kt__calloc(1, sizeof *r);
  if (!r) return NULL;
  r->pub = (kt_tune_report){.kernel = k->p.spec->name, .key = r->key, .config = r->config,
                            .default_config = r->dflt, .time_us = -1, .default_us = -1};
  return r;
}

static kt_tune_report *report_done(kt__report *r, double t0) {
  r->pub.ncandidates = r->ncand;
  r->pub.candidates = r->cand;
  r->pub.seconds = (kt__now_ms() - t0) / 1e3;
  return &r->pub;
}

/* The config the table or the cache has for the bound call c, into
** r->config; the default when neither has one. */
static void known_config(kt_kernel *k, kt__call *c, kt__report *r) {
  int64_t key[KT_MAX_KEY], cfg[KT_MAX_CFIELDS];
  const kt__env *env = &k->rt->env;
  char json[512], err[KT_ERRMAX];
  snprintf(r->config, sizeof r->config, "%s", r->dflt);
  if (kt__call_key(&k->p, c, key)) return;
  const kt__tuned *t = kt__tuned_find(k, key, kt__key_hash(k, key));
  if (t) {
    kt__config_json(k->p.spec, kt__tuned_choice(t)->cfg, r->config, sizeof r->config);
  } else if (env->store && k->rt->mode != KT_MODE_OFF &&
             !kt__store_get_config(env->store, k->p.spec->name, k->p.spec_hash, env->fingerprint, r->key, json,
                                   sizeof json, NULL, err, sizeof err) &&
             kt__config_valid(k, c, json, cfg)) {
    kt__config_json(k->p.spec, cfg, r->config, sizeof r->config);
  }
}

kt_status kt_kernel_lookup(kt_kernel *k, const kt_arg *args, int nargs, kt_tune_report **out) {
  if (!out) return KT_ERR_INVALID;
  *out = NULL;
  if (!k) return KT_ERR_INVALID;
  double t0 = kt__now_ms();
  kt__report *r = report_new(k);
  if (!r) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  kt__call c;
  int known = 0;
  kt_status st = prepare(k, args, nargs, &c, r, &known);
  if (st) {
    kt_tune_report_free(&r->pub);
    return st;
  }
  known_config(k, &c, r);
  from_cache(k, r, known);
  *out = report_done(r, t0);
  return KT_OK;
}

kt_status kt_kernel_tune(kt_kernel *k, const kt_arg *args, int nargs, kt_tune_report **out) {
  if (!out) return KT_ERR_INVALID;
  *out = NULL;
  if (!k) return KT_ERR_INVALID;
  double t0 = kt__now_ms();
  kt__report *r = report_new(k);
  if (!r) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  kt__call c;
  int64_t cfg[KT_MAX_CFIELDS];
  const kt__choice *hit = NULL;
  int known = 0;
  kt_status st = prepare(k, args, nargs, &c, r, &known);
  if (!st) st = kt__call_plan(k, &c, NULL, args, cfg, &hit, r);
  if (st && !(st == KT_ERR_DEVICE_FAULT && r->tuned)) {
    kt_tune_report_free(&r->pub);
    return st;
  }
  if (!st) kt__config_json(k->p.spec, cfg, r->config, sizeof r->config);
  if (!r->tuned) from_cache(k, r, known);
  *out = report_done(r, t0);
  return st;
}
