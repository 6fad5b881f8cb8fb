/* One tuning: candidates, their compiles and resources, trials on scratch,
** the re-measure of the best few, and what is stored. */
#include "tune/tuner.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/pool.h"
#include "cache/store.h"
#include "device/nvrtc.h"
#include "spec/key.h"
#include "tune/confirm.h"
#include "tune/evidence.h"
#include "tune/inputs.h"
#include "tune/scratch.h"
#include "tune/search.h"
#include "tune/timer.h"
#include "tune/tuneat.h"

#define MAX_CANDIDATES 4096
#define SEEDS 8 /* other keys' configs the random search tries first, of
                   the 4 * SEEDS most chosen (some may not suit the call) */
#define REMEASURE 3
#define BURST 8 /* launches per repetition of a short kernel (kt__bench) */

struct kt__tuner {
  kt__prog *p;
  kt__env *env;
  kt__tuneopts o;
  const kt_arg *orig;
  kt__call base;
  kt__call call;          /* the caller's call: base, unless at moves it */
  kt__tuneat at;          /* where the key is timed (tune/tuneat.h) */
  kt__inputs own;         /* o.own_inputs: the call's inputs, made */
  kt__scratch sc;
  kt__timer *timer;
  kt__cand *cand;
  int ncand;
  int nseed;              /* candidates that are seeds (cand.seed) */
  int spill_free;         /* candidates seen that do not spill */
  int done, planned;      /* trials run, and to run (for progress) */
  double best_us;         /* best median so far */
  double t_start, budget_ms;
  kt__tuneresult res;
  kt__call ref;           /* the base call with the reference config */
  /* Read by the compiling threads (skip), written by the tuning thread. */
  pthread_mutex_t lock;
  kt__evidence *ev;       /* what the measured candidates say (pruning) */
  int *order;             /* the batch being built: candidate of each call */
  atomic_int stop;        /* nonzero: the batch's build compiles nothing more */
  char nvrtc_tag[32];     /* "NVRTC 13.0: ", which begins the detail of a
                             refusal stored; "" where NVRTC does not load */
  char key[KT_KEY_JSON_MAX];
};

/* The configs valid for the call, and where the key is timed elsewhere,
** there too. */
static void candidate_list(kt__tuner *t) {
  const kt__spec *s = t->p->spec;
  int idx[KT_MAX_CFIELDS] = {0};
  do {
    kt__cand *cd = &t->cand[t->ncand];
    kt__call caller;
    cd->status = KT__PENDING;
    kt__spec_config_at(s, idx, cd->cfg);
    if (kt__call_valid(t->p, &t->base, cd->cfg, &cd->c) &&
        (!t->at.on || kt__call_valid(t->p, &t->call, cd->cfg, &caller))) {
      kt__config_json(s, cd->cfg, cd->json, sizeof cd->json);
      if (++t->ncand == MAX_CANDIDATES) return;
    }
  } while (kt__spec_config_next(s, idx));
}

/* Rejections that judge the code a compiler made: another NVRTC may make
** other code (take the source, use fewer registers, not miscompile). */
static int compiler_verdict(int status) {
  return status == KT_TRIAL_COMPILE_ERROR || status == KT_TRIAL_RESOURCES || status == KT_TRIAL_MISMATCH ||
         status == KT_TRIAL_OOB_WRITE;
}

/* Whether a stored detail names this process's NVRTC, as store_trial
** writes a compiler verdict's. */
static int tagged_here(const kt__tuner *t, const char *detail) {
  return t->nvrtc_tag[0] && !strncmp(detail, t->nvrtc_tag, strlen(t->nvrtc_tag));
}

/* A stored trial settles its candidate, unless the row is damaged or
** stale: a status this version does not know or never stores ("pruned");
** an "ok" whose time is no time (NULL, text, zero, negative, not
** finite), which would win every tuning of the key and skew the pruning's
** evidence; or a compiler's verdict that another NVRTC gave (its detail
** does not begin with this one's tag). Such a candidate is measured
** again, its row written anew. */
static int on_prior(void *user, const kt__trialrow *r) {
  kt__tuner *t = user;
  kt_trial_status ts;
  if (kt_trial_status_parse(r->status, &ts) || ts == KT_TRIAL_PRUNED) return 0;
  if (ts == KT_TRIAL_OK && !(r->median_us > 0 && isfinite(r->median_us))) return 0;
  if (compiler_verdict(ts) && !tagged_here(t, r->detail)) return 0;
  for (int i = 0; i < t->ncand; i++) {
    kt__cand *cd = &t->cand[i];
    if (cd->status != KT__PENDING || strcmp(cd->json, r->config)) continue;
    cd->prior = 1;
    cd->status = (int)ts;
    cd->median = r->median_us;
    cd->spread = r->spread_us;
  }
  return 0;
}

static void on_quarantined(void *user, const char *config, const char *reason) {
  kt__tuner *t = user;
  for (int i = 0; i < t->ncand; i++) {
    kt__cand *cd = &t->cand[i];
    /* Whatever a trial row says (its fault, as a rule): a quarantined
    ** config is never run. */
    if (cd->quarantined || strcmp(cd->json, config)) continue;
    cd->status = KT_TRIAL_FAULT;
    cd->prior = 1;
    cd->quarantined = 1;
    kt__log(&t->env->log, KT_LOG_INFO, "%s %s: skipping quarantined config %s (%s)", t->p->spec->name, t->key, config,
            reason);
  }
}

/* A config another key of the spec chose on this device, a seed of the
** search where it is a pending candidate of this call (the rows' configs
** are distinct, so no candidate is marked twice). */
static void on_seed(void *user, const char *config) {
  kt__tuner *t = user;
  for (int i = 0; i < t->ncand && t->nseed < SEEDS; i++) {
    kt__cand *cd = &t->cand[i];
    if (cd->status != KT__PENDING || strcmp(cd->json, config)) continue;
    cd->seed = ++t->nseed;
    return;
  }
}

/* Nothing left to measure and nothing usable measured: every row of the
** key is a rejection. A key must never become a dead end, so the
** rejections are measured again, but not the configs quarantined for it
** (a "fault" trial whose quarantine row is gone is measured again too). */
static void retry_rejected(kt__tuner *t) {
  int ok = 0, again = 0;
  for (int i = 0; i < t->ncand; i++) ok |= kt__cand_ok(&t->cand[i]) || t->cand[i].status == KT__PENDING;
  if (ok) return;
  for (int i = 0; i < t->ncand; i++) {
    kt__cand *cd = &t->cand[i];
    if (!cd->prior || cd->quarantined) continue;
    cd->prior = 0;
    cd->status = KT__PENDING;
    again++;
  }
  if (again)
    kt__log(&t->env->log, KT_LOG_WARN,
            "%s %s: the cache holds no usable config for this key, only %d rejected trials; measuring them again",
            t->p->spec->name, t->key, again);
}

/* The evidence, and room for a batch's order; 0, or -1 when out of memory
** (t->cand is the caller's to free). */
static int evidence_init(kt__tuner *t, const kt__spec *s) {
  if (!(t->ev = kt__evidence_new(s)) || !(t->order = kt__calloc(MAX_CANDIDATES + 1, sizeof *t->order)) ||
      pthread_mutex_init(&t->lock, NULL)) {
    kt__evidence_free(t->ev);
    kt__free(t->order);
    return -1;
  }
  atomic_init(&t->stop, 0);
  return 0;
}

/* A candidate measured (now or by an earlier tuning) is evidence. */
static void evidence_note(kt__tuner *t, const kt__cand *cd) {
  if (!kt__cand_ok(cd)) return;
  pthread_mutex_lock(&t->lock);
  kt__evidence_note(t->ev, cd->cfg, cd->median);
  pthread_mutex_unlock(&t->lock);
}

/* The compiler a refusal came from, named in its stored detail: a
** verdict on compiled code (compiler_verdict) is that NVRTC's only. */
static void nvrtc_tag(kt__tuner *t) {
  char err[KT_ERRMAX], name[32];
  if (!kt__nvrtc_load(t->env->cuda_home, err, sizeof err) && !kt__nvrtc_name(name, sizeof name))
    snprintf(t->nvrtc_tag, sizeof t->nvrtc_tag, "%s: ", name);
}

kt_status kt__tuner_new(kt__prog *p, const kt__tuneopts *o, const kt__call *c, const kt_arg *args, const char *key,
                        kt__tuner **out) {
  kt__env *env = p->env;
  *out = NULL;
  kt__tuner *t = kt__calloc(1, sizeof *t);
  if (!t || !(t->cand = kt__calloc(MAX_CANDIDATES, sizeof *t->cand)) || evidence_init(t, p->spec)) {
    if (t) kt__free(t->cand);
    kt__free(t);
    return kt__err(env->id, KT_ERR_NOMEM, "%s: out of memory", p->spec->name);
  }
  t->p = p;
  t->env = env;
  t->o = *o;
  t->orig = args;
  t->base = t->call = *c;
  kt__tuneat_plan(p, c, args, key, &t->at);
  if (t->at.on) t->base = t->at.c;
  t->res = (kt__tuneresult){.outcome = KT_TUNE_NO_VALID, .win = -1, .default_us = -1};
  snprintf(t->key, sizeof t->key, "%s", key);
  nvrtc_tag(t);
  candidate_list(t);
  if (env->store) {
    char err[KT_ERRMAX];
    if (!o->retune)
      kt__store_trials(env->store, p->spec->name, p->spec_hash, env->fingerprint, key, on_prior, t, err, sizeof err);
    kt__store_quarantined(env->store, p->spec->name, p->spec_hash, env->fingerprint, key, on_quarantined, t, err,
                          sizeof err);
  }
  retry_rejected(t);
  if (env->store) {
    char err[KT_ERRMAX];
    if (kt__store_winners(env->store, p->spec->name, p->spec_hash, env->fingerprint, key, 4 * SEEDS, on_seed, t, err,
                          sizeof err))
      kt__log(&env->log, KT_LOG_WARN, "%s %s: no seeds from the cache: %s", p->spec->name, key, err);
  }
  for (int i = 0; i < t->ncand; i++) evidence_note(t, &t->cand[i]);
  *out = t;
  return KT_OK;
}

int kt__tuner_pending(const kt__tuner *t) {
  int n = 0;
  for (int i = 0; i < t->ncand; i++) n += t->cand[i].status == KT__PENDING;
  return n;
}

int kt__tuner_open(const kt__tuner *t) {
  char why[sizeof t->cand[0].detail];
  int n = 0;
  for (int i = 0; i < t->ncand; i++) {
    const kt__cand *cd = &t->cand[i];
    n += cd->status == KT__PENDING && (t->o.no_prune || !kt__evidence_prunes(t->ev, cd->cfg, why, sizeof why));
  }
  return n;
}

void kt__tuner_free(kt__tuner *t) {
  if (!t) return;
  kt__timer_free(t->timer);
  kt__scratch_free(&t->sc);
  kt__tuneat_free(&t->at);
  kt__inputs_free(&t->own);
  pthread_mutex_destroy(&t->lock);
  kt__evidence_free(t->ev);
  kt__free(t->order);
  kt__free(t->cand);
  kt__free(t);
}

static int writable(const kt__tuner *t) { return t->env->store && !kt__store_readonly(t->env->store); }

static void store_trial(kt__tuner *t, const kt__cand *cd) {
  if (!writable(t) || cd->prior || !kt__cand_keepable(cd)) return;
  int ok = cd->status == KT_TRIAL_OK;
  /* A compiler's verdict names the compiler (a compile_error's detail
  ** does already), for on_prior. */
  char tagged[sizeof t->nvrtc_tag + sizeof cd->detail];
  snprintf(tagged, sizeof tagged, "%s%s", compiler_verdict(cd->status) && !tagged_here(t, cd->detail) ? t->nvrtc_tag : "",
           cd->detail);
  kt__trialrow tr = {.kernel = t->p->spec->name, .spec_hash = t->p->spec_hash, .device = t->env->fingerprint,
                     .key = t->key, .config = cd->json, .status = kt_trial_status_name((kt_trial_status)cd->status),
                     .median_us = ok ? cd->median : -1, .spread_us = ok ? cd->spread : -1,
                     .registers = cd->attrs.regs, .smem_bytes = cd->attrs.static_smem,
                     .spill_bytes = cd->attrs.local_bytes, .detail = tagged};
  char err[KT_ERRMAX];
  if (kt__store_put_trial(t->env->store, &tr, err, sizeof err)) kt__log(&t->env->log, KT_LOG_WARN, "%s", err);
}

static void quarantine(kt__tuner *t, const kt__cand *cd, const char *reason) {
  char err[KT_ERRMAX];
  if (writable(t) && kt__store_quarantine(t->env->store, t->p->spec->name, t->p->spec_hash, t->env->fingerprint, t->key,
                                          cd->json, reason, err, sizeof err))
    kt__log(&t->env->log, KT_LOG_WARN, "%s", err);
}

/* Resources after compilation: threads, shared memory, occupancy. */
static int fits(kt__tuner *t, kt__cand *cd) {
  const kt__spec *s = t->p->spec;
  int64_t threads = 1, b;
  for (int i = 0; i < 3; i++)
    if (!kt__expr_eval(&s->block[i], cd->c.slots, &b)) threads *= b;
  int64_t smem = cd->c.slots[s->smem_slot];
  if (threads > cd->attrs.max_threads) {
    snprintf(cd->detail, sizeof cd->detail, "block of %lld threads, the kernel allows %d (%d registers)",
             (long long)threads, cd->attrs.max_threads, cd->attrs.regs);
    return 0;
  }
  if (smem + cd->attrs.static_smem > t->env->dev.smem_per_block_optin) {
    snprintf(cd->detail, sizeof cd->detail, "%lld bytes of shared memory, the device has %d", (long long)smem,
             t->env->dev.smem_per_block_optin);
    return 0;
  }
  int blocks = 0;
  void *fn;
  char err[KT_ERRMAX];
  if (!kt__variant_get(t->p, &cd->c, &fn) &&
      !kt__dev_occupancy(fn, (int)threads, (size_t)smem, &blocks, err, sizeof err) && blocks == 0) {
    snprintf(cd->detail, sizeof cd->detail, "no block fits on a multiprocessor");
    return 0;
  }
  return 1;
}

/* What can be known without compiling: a block larger than the device
** allows, or more dynamic shared memory than it has. Such a candidate is
** refused before it costs a compile; returns how many were. */
static int prune(kt__tuner *t, const int *idx, int n) {
  const kt__spec *s = t->p->spec;
  const kt__devinfo *dev = &t->env->dev;
  int pruned = 0;
  for (int j = 0; j < n; j++) {
    kt__cand *cd = &t->cand[idx[j]];
    int64_t threads = 1, b, smem = cd->c.slots[s->smem_slot];
    for (int i = 0; i < 3; i++)
      if (!kt__expr_eval(&s->block[i], cd->c.slots, &b)) threads *= b;
    if (dev->max_threads_per_block > 0 && threads > dev->max_threads_per_block)
      snprintf(cd->detail, sizeof cd->detail, "block of %lld threads, the device allows %d (not compiled)",
               (long long)threads, dev->max_threads_per_block);
    else if (smem > dev->smem_per_block_optin)
      snprintf(cd->detail, sizeof cd->detail, "%lld bytes of shared memory, the device has %d (not compiled)",
               (long long)smem, dev->smem_per_block_optin);
    else
      continue;
    cd->status = KT_TRIAL_RESOURCES;
    pruned++;
  }
  if (pruned)
    kt__log(&t->env->log, KT_LOG_INFO, "%s %s: %d of %d candidates refused before compiling (too large a block or "
            "too much shared memory)", s->name, t->key, pruned, n);
  return pruned;
}

/* Asked by a compiling thread just before it compiles the batch's call i:
** whether to give it back uncompiled, because the batch is abandoned or
** because the measurements so far predict it to lose (tune/evidence.h:
** VEC=1 for a 16-bit type, say).
** Sets the candidate's pruned and detail: the tuning thread reads them
** only after the build has given the variant back. */
static int skip(void *user, int i) {
  kt__tuner *t = user;
  if (atomic_load(&t->stop)) return 1;
  if (t->o.no_prune || t->order[i] < 0) return 0;
  kt__cand *cd = &t->cand[t->order[i]];
  pthread_mutex_lock(&t->lock);
  cd->pruned = kt__evidence_prunes(t->ev, cd->cfg, cd->detail, sizeof cd->detail);
  pthread_mutex_unlock(&t->lock);
  return cd->pruned;
}

/* Start compiling the listed candidates in the background, in the order
** they are tried, after ref (when given) alone: the tuning thread tries
** each as soon as it is built. What cannot fit the device is refused
** first. NULL when nothing is left to compile or out of memory. */
static kt__build *build_start(kt__tuner *t, const int *idx, int n, const kt__call *ref) {
  prune(t, idx, n);
  kt__call *calls = kt__calloc((size_t)n + 1, sizeof *calls);
  if (!calls) return NULL;
  int m = 0;
  if (ref) {
    t->order[m] = -1;
    calls[m++] = *ref;
  }
  for (int j = 0; j < n; j++) {
    if (t->cand[idx[j]].status != KT__PENDING) continue;
    t->order[m] = idx[j];
    calls[m++] = t->cand[idx[j]].c;
  }
  atomic_store(&t->stop, 0);
  kt__buildopts o = {.lead = ref ? 1 : 0, .skip = skip, .user = t};
  kt__build *b = kt__variant_build_start(t->p, calls, m, kt__ncpus(), &o);
  kt__free(calls);
  return b;
}

/* A candidate once the build is done with it: pruned, refused (compile
** error, too large, spills while one that does not spill exists), or
** ready to try. */
static void settle(kt__tuner *t, kt__cand *cd) {
  void *fn;
  if (!kt__variant_settled(t->p, &cd->c) && cd->pruned) {
    cd->status = KT_TRIAL_PRUNED;
    return;
  }
  if ((cd->compiled = kt__variant_info(t->p, &cd->c, &fn, &cd->attrs))) {
    cd->status = KT_TRIAL_COMPILE_ERROR;
    cd->transient = !kt__variant_refused(t->p, &cd->c);
    snprintf(cd->detail, sizeof cd->detail, "%s%s", cd->transient ? "" : t->nvrtc_tag, kt__errmsg(t->env->id));
  } else if (!fits(t, cd)) {
    cd->status = KT_TRIAL_RESOURCES;
  } else if (!cd->attrs.local_bytes) {
    t->spill_free++;
  } else if (t->spill_free) {
    cd->status = KT_TRIAL_RESOURCES;
    snprintf(cd->detail, sizeof cd->detail, "spills %d bytes per thread to local memory", cd->attrs.local_bytes);
  }
}

/* A candidate that spills is refused once one that does not spill has
** been seen, also when it was tried before that one was built. */
static void refuse_spills(kt__tuner *t, const int *idx, int n) {
  for (int j = 0; j < n && t->spill_free; j++) {
    kt__cand *cd = &t->cand[idx[j]];
    if (!kt__cand_ok(cd) || cd->prior || !cd->attrs.local_bytes) continue;
    cd->status = KT_TRIAL_RESOURCES;
    snprintf(cd->detail, sizeof cd->detail, "spills %d bytes per thread to local memory", cd->attrs.local_bytes);
  }
}

/* A fault (error: the driver's words): the config is quarantined with the
** error, and the context is unusable, so the tuning ends here. */
static kt_status faulted(kt__tuner *t, kt__cand *cd, const char *error) {
  char reason[160], e[KT_ERRMAX];
  snprintf(e, sizeof e, "%s", error);
  snprintf(reason, sizeof reason, "fault: %.140s", e);
  quarantine(t, cd, reason);
  cd->status = KT_TRIAL_FAULT;
  cd->unconfirmed = 0;
  snprintf(cd->detail, sizeof cd->detail, "%s", e);
  store_trial(t, cd);
  return kt__err(t->env->id, KT_ERR_DEVICE_FAULT,
                 "%s %s: config %s faulted (%s); it is quarantined for this key and the CUDA context is unusable: "
                 "restart the process",
                 t->p->spec->name, t->key, cd->json, e);
}

/* Validate a candidate that ran: guard zones, then outputs. */
static kt_status validate(kt__tuner *t, kt__cand *cd) {
  char why[600];
  int ok;
  kt_status st = kt__scratch_guards(&t->sc, &ok, why, sizeof why);
  if (!st && !ok) {
    cd->status = KT_TRIAL_OOB_WRITE;
    snprintf(cd->detail, sizeof cd->detail, "%s", why);
    return KT_OK;
  }
  if (!st) st = kt__scratch_compare(&t->sc, &ok, why, sizeof why);
  if (!st && !ok) {
    cd->status = KT_TRIAL_MISMATCH;
    snprintf(cd->detail, sizeof cd->detail, "%s", why);
  }
  return st ? kt__err(t->env->id, st, "%s %s: tuning: %s", t->p->spec->name, t->key, t->sc.err) : KT_OK;
}

/* A valid candidate's time: a short measurement, refined later for the
** best few. */
static void time_it(kt__tuner *t, kt__cand *cd) {
  kt__benchopts quick = {10, 2.0, 200.0, 30.0, NULL, kt__scratch_restore, &t->sc, t->timer, BURST};
  if (kt__bench(t->p, &cd->c, t->sc.args, &quick, &cd->median, &cd->spread)) {
    cd->status = KT_TRIAL_RESOURCES;
    snprintf(cd->detail, sizeof cd->detail, "timing: %s", kt__errmsg(t->env->id));
    return;
  }
  cd->status = KT_TRIAL_OK;
  if (t->best_us <= 0 || cd->median < t->best_us) t->best_us = cd->median;
}

/* One candidate on scratch: launched, checked against the reference, then
** timed. Only a fault (the context is lost) ends the tuning. */
static kt_status trial(kt__tuner *t, kt__cand *cd) {
  /* Recorded before the trial and cleared after: a process that dies in
  ** it leaves the culprit quarantined for the next one. */
  char reason[160];
  snprintf(reason, sizeof reason, "in progress in pid %d", (int)getpid());
  quarantine(t, cd, reason);
  atomic_fetch_add_explicit(&t->env->n.trials, 1, memory_order_relaxed);
  kt_status st = kt__scratch_run(&t->sc, &cd->c);
  if (st == KT_ERR_DEVICE_FAULT) return faulted(t, cd, t->sc.err);
  if (st) {
    cd->status = KT_TRIAL_RESOURCES;
    snprintf(cd->detail, sizeof cd->detail, "launch: %s", t->sc.err);
  } else if ((st = validate(t, cd))) {
    return st;
  } else if (cd->status == KT__PENDING) {
    time_it(t, cd);
  }
  quarantine(t, cd, NULL);
  t->done++;
  if (t->o.progress) {
    kt__callback_enter(KT__CB_LOCKED);
    t->o.progress(t->o.progress_user, t->p->spec->name, t->key, t->done, t->planned, t->best_us);
    kt__callback_leave(KT__CB_LOCKED);
  }
  return KT_OK;
}

static int cancelled(const kt__tuner *t) { return t->o.cancel && atomic_load(t->o.cancel); }

static int over_budget(const kt__tuner *t) {
  return cancelled(t) || (t->budget_ms > 0 && kt__now_ms() - t->t_start > t->budget_ms);
}

/* The reference config on scratch: its outputs are what every candidate
** must reproduce, and it must stay inside its buffers. */
static kt_status reference_run(kt__tuner *t, kt_stream caller) {
  const char *name = t->p->spec->name;
  kt__call ref = t->ref;
  kt_status st;
  void *fn;
  char what[1100], why[600];
  int ok;
  snprintf(what, sizeof what, "%s: tuning", t->key);
  if ((st = kt__variant_get(t->p, &ref, &fn)) ||
      (st = kt__scratch_make(&t->sc, t->p, &t->base, t->orig, caller, what)) || (st = kt__timer_new(t->p, &t->timer)))
    return st;
  if ((st = kt__scratch_run(&t->sc, &ref)) || (st = kt__scratch_keep_reference(&t->sc)))
    return kt__err(t->env->id, st, "%s %s: the default config failed on scratch: %s", name, t->key, t->sc.err);
  if ((st = kt__scratch_guards(&t->sc, &ok, why, sizeof why)))
    return kt__err(t->env->id, st, "%s %s: tuning: %s", name, t->key, t->sc.err);
  if (!ok) return kt__err(t->env->id, KT_ERR_CONSTRAINT, "%s %s: the default config %s", name, t->key, why);
  /* Candidates are judged against the reference, so it must reproduce. */
  if ((st = kt__scratch_run(&t->sc, &ref)) || (st = kt__scratch_compare(&t->sc, &ok, why, sizeof why)))
    return kt__err(t->env->id, st, "%s %s: the default config failed on scratch: %s", name, t->key, t->sc.err);
  if (!ok)
    kt__log(&t->env->log, KT_LOG_WARN,
            "%s %s: the default config gave different results in two runs on the same inputs (%s): nothing can be "
            "judged against it, so nothing is tuned or stored; the default config is used",
            name, t->key, why);
  if (!ok) t->res.outcome = KT_TUNE_UNSTABLE;
  return KT_OK;
}

/* Try the listed candidates in order as the build b delivers them, while
** the budget lasts; then wait for b to end. */
static kt_status try_list(kt__tuner *t, const int *idx, int n, kt__build *b) {
  kt_status st = KT_OK;
  for (int j = 0; j < n && !st; j++) {
    kt__cand *cd = &t->cand[idx[j]];
    if (cd->status != KT__PENDING) continue;
    if (over_budget(t)) break;
    settle(t, cd);
    if (cd->status != KT__PENDING) continue;
    if (!(st = trial(t, cd))) evidence_note(t, cd);
  }
  atomic_store(&t->stop, 1); /* what is left of the build is not needed */
  kt__variant_build_wait(b);
  refuse_spills(t, idx, n);
  return st;
}

/* The reference on scratch, then the strategy's batches. The first
** batch compiles while the reference runs, the reference's variant
** first. */
static kt_status search(kt__tuner *t, const kt__strategy *strat, kt_stream caller, const int64_t *reference) {
  int *idx = kt__calloc((size_t)t->ncand + 1, sizeof *idx);
  if (!idx) return kt__err(t->env->id, KT_ERR_NOMEM, "%s: out of memory", t->p->spec->name);
  kt__search s = {t->p->spec, t->cand, t->ncand, reference, XXH3_64bits(t->key, strlen(t->key)), 2 * kt__ncpus()};
  _Alignas(8) unsigned char state[KT__STRATEGY_STATE] = {0};
  int n = strat->next(&s, state, idx);
  kt__build *b = build_start(t, idx, n > 0 ? n : 0, &t->ref);
  kt_status st = reference_run(t, caller);
  t->t_start = kt__now_ms();
  while (!st && t->res.outcome != KT_TUNE_UNSTABLE && n > 0) {
    st = try_list(t, idx, n, b);
    b = NULL;
    n = st || over_budget(t) ? 0 : strat->next(&s, state, idx);
    if (n > 0) b = build_start(t, idx, n, NULL);
  }
  atomic_store(&t->stop, 1);
  kt__variant_build_wait(b);
  kt__free(idx);
  return st;
}

/* The best few are measured again, longer, before one is chosen. */
static void remeasure(kt__tuner *t) {
  kt__benchopts careful = {30, 20.0, 500.0, 150.0, NULL, kt__scratch_restore, &t->sc, t->timer, BURST};
  for (int round = 0; round < REMEASURE; round++) {
    int pick = -1;
    for (int i = 0; i < t->ncand; i++) {
      kt__cand *cd = &t->cand[i];
      if (kt__cand_ok(cd) && !cd->prior && !cd->remeasured && (pick < 0 || cd->median < t->cand[pick].median))
        pick = i;
    }
    if (pick < 0) break;
    kt__cand *cd = &t->cand[pick];
    double m, sp;
    if (!kt__bench(t->p, &cd->c, t->sc.args, &careful, &m, &sp)) {
      cd->median = m;
      cd->spread = sp;
    }
    cd->remeasured = 1;
  }
}

/* The winner among the candidates decided, with the counts of the log
** line and the configs row; every trial of this tuning is stored. */
static void pick(kt__tuner *t, const int64_t *reference) {
  kt__tuneresult *y = &t->res;
  const kt__spec *s = t->p->spec;
  for (int i = 0; i < t->ncand; i++) {
    kt__cand *cd = &t->cand[i];
    y->pruned += cd->status == KT_TRIAL_PRUNED;
    if (cd->status == KT__PENDING || cd->status == KT_TRIAL_PRUNED || (cd->prior && !kt__cand_ok(cd))) continue;
    y->tried++;
    y->measured += !cd->prior;
    y->unconfirmed += cd->unconfirmed;
    if (!kt__cand_ok(cd)) y->rejected++;
    else if (y->win < 0 || cd->median < t->cand[y->win].median) y->win = i;
    if (kt__cand_ok(cd) && !memcmp(cd->cfg, reference, (size_t)s->ncfields * sizeof *reference))
      y->default_us = cd->median;
    store_trial(t, cd);
  }
  y->outcome = y->win < 0 ? KT_TUNE_NO_VALID : y->unconfirmed ? KT_TUNE_TUNED_LOCAL : KT_TUNE_TUNED;
}

/* The key's stored config where the spec's space no longer holds it (a
** candidate taken out of a list leaves the spec hash as it was), into
** json; NULL where there is none or it is in the space. No process would
** use it again, and no slower winner would ever replace it. */
static const char *stale_config(const kt__tuner *t, char *json, size_t n) {
  char err[KT_ERRMAX];
  int64_t cfg[KT_MAX_CFIELDS];
  const kt__prog *p = t->p;
  if (kt__store_get_config(t->env->store, p->spec->name, p->spec_hash, t->env->fingerprint, t->key, json, n, NULL,
                           err, sizeof err))
    return NULL;
  return *json && kt__config_from_json(p->spec, json, cfg) ? json : NULL;
}

static void store_winner(kt__tuner *t, const kt__cand *w, const kt__tuneresult *y) {
  if (!writable(t)) return;
  char nv[16], drv[16], err[KT_ERRMAX], stale[KT_CONFIG_JSON_MAX];
  snprintf(nv, sizeof nv, "%d", kt__nvrtc_version());
  snprintf(drv, sizeof drv, "%d", t->env->dev.driver_version);
  kt__cfgrow row = {.kernel = t->p->spec->name, .spec_hash = t->p->spec_hash, .device = t->env->fingerprint,
                    .key = t->key, .config = w->json, .time_us = w->median, .candidates = y->tried,
                    .rejected = y->rejected, .nvrtc_version = nv, .driver_version = drv};
  if (kt__store_replace_config(t->env->store, &row, stale_config(t, stale, sizeof stale), NULL, err, sizeof err))
    kt__log(&t->env->log, KT_LOG_WARN, "%s", err);
}

/* The key timed at the caller's call after all: each candidate's call made
** from it again (every candidate is valid there too). */
static void at_caller(kt__tuner *t) {
  kt__tuneat_free(&t->at);
  t->at.on = 0;
  t->base = t->call;
  for (int i = 0; i < t->ncand; i++) kt__call_valid(t->p, &t->base, t->cand[i].cfg, &t->cand[i].c);
}

/* Where the key is timed at other sizes: their inputs, made now (a tuning
** that finds nothing to measure makes none). Where they cannot be made, or
** the reference does not hold there, the caller's call is timed. */
static void at_inputs(kt__tuner *t, const int64_t *reference) {
  if (!t->at.on) return;
  kt__call ref;
  const char *why;
  if (!kt__call_valid(t->p, &t->base, reference, &ref)) {
    why = "the reference config is not valid there";
  } else if (kt__call_empty_grid(t->p, &ref) >= 0) {
    why = "the reference config launches no program there";
  } else if (kt__tuneat_inputs(t->p, XXH3_64bits(t->key, strlen(t->key)), &t->at)) {
    why = kt__errmsg(t->env->id);
  } else {
    t->orig = t->at.args;
    return;
  }
  kt__log(&t->env->log, KT_LOG_WARN, "%s %s: not timed at %s: %s; timed at the call's sizes", t->p->spec->name,
          t->key, t->at.what, why);
  at_caller(t);
}

/* Where the call's own sizes are timed and its buffers are not to be
** touched (o.own_inputs), inputs made for them; made only here, so a key
** timed at its tune_at sizes never makes inputs as large as the call's. */
static kt_status own_inputs(kt__tuner *t) {
  if (t->at.on || !t->o.own_inputs) return KT_OK;
  kt_status st = kt__inputs_make(t->p, &t->call, t->orig, XXH3_64bits(t->key, strlen(t->key)), &t->own);
  if (st) return st;
  t->orig = t->own.args;
  kt__log(&t->env->log, KT_LOG_INFO, "%s %s: timed on inputs made from \"init\" at the call's sizes",
          t->p->spec->name, t->key);
  return KT_OK;
}

kt_status kt__tuner_run(kt__tuner *t, kt_stream caller, const int64_t *reference, int64_t *best) {
  const kt__spec *s = t->p->spec;
  kt_status st;
  double t0 = kt__now_ms();
  at_inputs(t, reference);
  if ((st = own_inputs(t))) return st;
  int pending = kt__tuner_pending(t);
  const kt__strategy *strat = kt__strategy_for(t->o.strategy, pending);
  if (!strat) return kt__err(t->env->id, KT_ERR_INVALID, "%s: strategy %d is unknown", s->name, (int)t->o.strategy);
  t->budget_ms = t->o.budget_s > 0 ? t->o.budget_s * 1000 : strat->default_budget_s * 1000.0;
  t->planned = pending;
  t->ref = t->base;
  /* Launches of no program take no time under any config: a winner picked
  ** from them would be noise, stored for every size the key leaves out. */
  if ((st = kt__call_config(t->p, &t->ref, reference)) || (st = kt__call_timeable(t->p, &t->ref, t->key, 1)) ||
      (st = search(t, strat, caller, reference)))
    return st;
  if (t->res.outcome == KT_TUNE_UNSTABLE) {
    memcpy(best, reference, (size_t)s->ncfields * sizeof *best);
    return KT_OK;
  }
  double t_ref = t->t_start;
  if (cancelled(t)) return kt__err(t->env->id, KT_ERR_CANCELLED, "%s %s: tuning cancelled", s->name, t->key);
  double t_trials = kt__now_ms();
  remeasure(t);
  int bad;
  /* Rejections on inputs the tuner made are the key's already: those at
  ** the tune_at sizes, and its own at the call's (the confirmation would
  ** make the same inputs again, from the same seed). */
  const int made = t->at.on || t->o.own_inputs;
  if (!made && kt__confirm_rejections(t->p, &t->base, t->orig, reference, caller, t->key, t->cand, t->ncand, &bad))
    return faulted(t, &t->cand[bad], t->cand[bad].detail);
  pick(t, reference);
  const kt__tuneresult *y = &t->res;
  if (y->win < 0) return kt__err(t->env->id, KT_ERR_NO_CONFIG, "%s %s: every candidate was rejected", s->name, t->key);
  const kt__cand *w = &t->cand[y->win];
  memcpy(best, w->cfg, (size_t)s->ncfields * sizeof *best);
  double t_end = kt__now_ms();
  kt__log(&t->env->log, KT_LOG_INFO,
          "tuned %s %s%s%s: %s at %.2f us (default %.2f us), %d tried (%d measured now), %d rejected, %d not "
          "compiled (predicted to lose); %.0f ms: reference %.0f, trials and their compiles %.0f, re-measure %.0f",
          s->name, t->key, t->at.on ? " at " : "", t->at.on ? t->at.what : "", w->json, w->median, y->default_us,
          y->tried, y->measured, y->rejected, y->pruned, t_end - t0, t_ref - t0, t_trials - t_ref, t_end - t_trials);
  if (y->unconfirmed)
    kt__log(&t->env->log, KT_LOG_WARN,
            "%s %s: %d configs were rejected on this call's data but not on synthetic inputs: their rejections and "
            "the winner are this process's only, not stored",
            s->name, t->key, y->unconfirmed);
  else
    store_winner(t, w, y);
  return KT_OK;
}

const kt__tuneresult *kt__tuner_result(const kt__tuner *t) { return &t->res; }

const char *kt__tuner_timed_at(const kt__tuner *t) { return t->at.on ? t->at.what : NULL; }

const kt__cand *kt__tuner_candidates(const kt__tuner *t, int *n) {
  *n = t->ncand;
  return t->cand;
}
