/* What kt_kernel_tune and kt_kernel_lookup return (kt_tune_report), made
** from the tuner when a call tuned, else from the cache's rows. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "cache/store.h"
#include "dispatch/report.h"
#include "spec/key.h"
#include "tune/tuneat.h"



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
  const char *at = kt__tuner_timed_at(t);
  snprintf(r->at, sizeof r->at, "%s", at ? at : "");
  r->pub.timed_at = at ? r->at : NULL;
  if (room(r, n)) return;
  for (int i = 0; i < n; i++) {
    if (cd[i].status == KT__PENDING) continue;
    int pruned = cd[i].status == KT_TRIAL_PRUNED; /* neither run nor stored */
    int stored = writable && !pruned && (cd[i].prior || kt__cand_keepable(&cd[i]));
    add(r, cd[i].json, (kt_trial_status)cd[i].status, cd[i].median, cd[i].spread, cd[i].detail,
        !cd[i].prior && !pruned, cd[i].quarantined, stored);
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

void kt__report_from_cache(kt_kernel *k, kt__report *r, int known) {
  const kt__env *env = &k->rt->env;
  const kt__prog *p = &k->p;
  char json[KT_CONFIG_JSON_MAX], err[KT_ERRMAX];
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

void kt__report_timed_at(kt__report *r, kt_kernel *k, const kt__call *c, const kt_arg *args) {
  r->pub.timed_at = kt__tuneat_moves(&k->p, c, args, r->at, sizeof r->at) ? r->at : NULL;
}

kt__report *kt__report_new(kt_kernel *k) {
  kt__report *r = kt__calloc(1, sizeof *r);
  if (!r) return NULL;
  r->pub = (kt_tune_report){.kernel = k->p.spec->name, .key = r->key, .config = r->config,
                            .default_config = r->dflt, .time_us = -1, .default_us = -1};
  return r;
}

kt_tune_report *kt__report_done(kt__report *r, double t0) {
  r->pub.ncandidates = r->ncand;
  r->pub.candidates = r->cand;
  r->pub.seconds = (kt__now_ms() - t0) / 1e3;
  return &r->pub;
}

