/* The miss path: a key the in-memory table does not have. The cache is
** asked first; then, when the mode allows and the stream is not capturing,
** the candidates are compiled in parallel, validated against the default
** config on scratch copies of every written buffer, and timed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "call/alias.h"
#include "base/alloc.h"
#include "tune/compare.h"
#include "base/pool.h"
#include "device/nvrtc.h"
#include "dispatch/runtime.h"
#include "cache/store.h"

/* Guard zones around each scratch group: a write up to this far past a
** buffer is caught. A multiple of 256, so scratch keeps each pointer's
** alignment class. */
#define GUARD 65536
#define GUARD_BYTE 0xA5
#define POISON_BYTE 0xFF
#define MAX_CANDIDATES 4096
#define REMEASURE 3
#define BURST 8 /* launches per repetition of a short kernel (kt__bench) */

void kt__tuned_free(void *entry) { kt__free(entry); }

typedef struct keyref {
  const int64_t *v;
  int n;
} keyref;

static int same_key(const void *entry, const void *key) {
  const kt__tuned *e = entry;
  const keyref *r = key;
  return e->nkey == r->n && !memcmp(e->key, r->v, (size_t)r->n * sizeof *r->v);
}

const kt__tuned *kt__tuned_find(const kt_kernel *k, const int64_t *key, uint64_t h) {
  keyref r = {key, k->keydef.n};
  return kt__lfmap_find(&k->tuned, h, same_key, &r);
}

/* Byte ranges of the non-null pointer args; returns their number. */
static kt_status call_ranges(kt_kernel *k, const kt__call *c, const kt_arg *args, kt__range *r,
                             int *n) {
  const kt__spec *s = k->spec;
  *n = 0;
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    if (p->type != KT__P_PTR || !args[i].v.ptr) continue;
    int64_t ext;
    int rc = kt__expr_eval(&p->extent, c->slots, &ext);
    if (rc)
      return kt__err(k->rt->id, KT_ERR_EVAL, "%s: params[%d] (%s).extent: %s in \"%s\"", s->name, i, p->name,
                     kt__eval_strerror(rc), p->extent.text);
    if (ext < 0) ext = 0;
    uint64_t bytes = (uint64_t)ext * (uint64_t)c->slots[p->esize_slot];
    r[*n] = (kt__range){args[i].v.ptr, args[i].v.ptr + bytes, i, p->access != KT__IN, 0};
    (*n)++;
  }
  return KT_OK;
}

/* Index into r of an arg that r[i] overlaps, or -1. */
static int overlapping(const kt__range *r, int n, int i) {
  for (int j = 0; j < n; j++)
    if (i != j && r[i].start < r[j].end && r[j].start < r[i].end && r[i].end > r[i].start && r[j].end > r[j].start)
      return j;
  return -1;
}

kt_status kt__call_alias(kt_kernel *k, const kt__call *c, const kt_arg *args) {
  if (k->spec->inplace) return KT_OK;
  kt__range r[KT_MAX_PARAMS];
  int n;
  kt_status st = call_ranges(k, c, args, r, &n);
  if (st) return st;
  for (int i = 0; i < n; i++) {
    int j = r[i].written ? overlapping(r, n, i) : -1;
    if (j >= 0)
      return kt__err(k->rt->id, KT_ERR_ALIAS, "%s: %s (written) overlaps %s; this kernel cannot run in place",
                     k->spec->name, k->spec->params[r[i].param].name, k->spec->params[r[j].param].name);
  }
  return KT_OK;
}

/* The call of a kernel that cannot run in place, with each written arg that
** overlaps another redirected to a stream-ordered temporary, launched, and
** the temporaries copied into the caller's outputs, all on the caller's
** stream. An inout arg's temporary starts as a copy of it. */
kt_status kt__launch_staged(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs) {
  kt_runtime *rt = k->rt;
  kt__call c;
  kt_status st = kt__call_bind(k, args, nargs, &c);
  if (st) return st;
  if (!rt->have_device)
    return kt__err(rt->id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device", k->spec->name);
  kt__range r[KT_MAX_PARAMS];
  int n;
  if ((st = call_ranges(k, &c, args, r, &n))) return st;
  kt_arg staged[KT_MAX_PARAMS];
  kt__dptr tmp[KT_MAX_PARAMS] = {0};
  memcpy(staged, args, (size_t)nargs * sizeof *args);
  char err[KT_ERRMAX];
  if ((st = kt__dev_use(rt->ctx, err, sizeof err))) return kt__err(rt->id, st, "%s: %s", k->spec->name, err);
  for (int i = 0; i < n && !st; i++) {
    if (!r[i].written || overlapping(r, n, i) < 0) continue;
    size_t bytes = r[i].end - r[i].start;
    st = kt__dev_malloc_async(&tmp[i], bytes + 256, stream, err, sizeof err);
    /* The same alignment class as the caller's pointer. */
    kt__dptr p = tmp[i] + r[i].start % 256;
    if (!st && k->spec->params[r[i].param].access == KT__INOUT)
      st = kt__dev_dtod_async(p, r[i].start, bytes, stream, err, sizeof err);
    staged[r[i].param].v.ptr = p;
  }
  if (st) st = kt__err(rt->id, st, "%s: staging: %s", k->spec->name, err);
  else st = kt_launch(k, stream, staged, nargs);
  for (int i = 0; i < n; i++) {
    if (!tmp[i]) continue;
    if (!st && kt__dev_dtod_async(r[i].start, staged[r[i].param].v.ptr, r[i].end - r[i].start, stream, err,
                                  sizeof err))
      st = kt__err(rt->id, KT_ERR_CUDA, "%s: staging: %s", k->spec->name, err);
    kt__dev_free_async(tmp[i], stream, err, sizeof err);
  }
  return st;
}

typedef struct group {
  uint64_t start, end;
  kt__dptr scratch, pristine;
  uint64_t off;   /* where start sits in scratch */
  int written, reads;
} group;

typedef struct candidate {
  int64_t cfg[64];
  char json[256];
  kt__call c;
  kt_status compiled;
  const char *status;   /* trial status, NULL while pending */
  char detail[1024];
  double median, spread;
  kt__funcattrs attrs;
  int prior;            /* measured by an earlier run */
  int remeasured;
} candidate;

typedef struct tuner {
  kt_kernel *k;
  kt_runtime *rt;
  const kt__spec *s;
  const kt_arg *orig;
  kt_arg args[KT_MAX_PARAMS];
  kt__range r[KT_MAX_PARAMS];
  int nr;
  group g[KT_MAX_PARAMS];
  int ng;
  int grp_of[KT_MAX_PARAMS]; /* param -> group, -1 when not in scratch */
  kt_stream stream;
  void *ev;
  kt__timer *timer;
  void *ref[KT_MAX_PARAMS];
  void *host;
  size_t hostcap;
  candidate *cand;
  int ncand;
  int spill_free;         /* candidates seen that do not spill */
  int done, planned;      /* trials run, and to run (for progress) */
  double best_us;         /* best median so far */
  double t_start, budget_ms;
  char key[1024];
  char err[KT_ERRMAX];
} tuner;

static kt_status dev(tuner *t, kt_status st) {
  return st ? kt__err(t->rt->id, st, "%s %s: tuning: %s", t->s->name, t->key, t->err) : KT_OK;
}

/* Scratch: one allocation per group of overlapping ranges holding a written
** arg, mirroring the group's layout between guard zones; a pristine copy of
** the caller's bytes to restore from. Inputs that alias nothing written are
** read in place. The caller's buffers are only ever read. */
static kt_status scratch_make(tuner *t, kt_stream caller) {
  t->ng = kt__alias_group(t->r, t->nr);
  for (int i = 0; i < KT_MAX_PARAMS; i++) t->grp_of[i] = -1;
  for (int i = 0; i < t->ng; i++) t->g[i] = (group){UINT64_MAX, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < t->nr; i++) {
    group *g = &t->g[t->r[i].group];
    if (t->r[i].start < g->start) g->start = t->r[i].start;
    if (t->r[i].end > g->end) g->end = t->r[i].end;
    g->written |= t->r[i].written;
    g->reads |= t->s->params[t->r[i].param].access != KT__OUT;
  }
  kt_status st = kt__dev_stream_create(&t->stream, t->err, sizeof t->err);
  if (!st) st = kt__dev_event_create(&t->ev, t->err, sizeof t->err);
  if (!st) st = kt__dev_event_record(t->ev, caller, t->err, sizeof t->err);
  if (!st) st = kt__dev_wait_event(t->stream, t->ev, t->err, sizeof t->err);
  for (int i = 0; i < t->ng && !st; i++) {
    group *g = &t->g[i];
    if (!g->written) continue;
    size_t span = g->end - g->start;
    g->off = GUARD + g->start % 256;
    st = kt__dev_malloc(&g->scratch, g->off + span + GUARD, t->err, sizeof t->err);
    if (!st) st = kt__dev_malloc(&g->pristine, span, t->err, sizeof t->err);
    if (!st) st = kt__dev_dtod_async(g->pristine, g->start, span, t->stream, t->err, sizeof t->err);
  }
  for (int i = 0; i < t->s->nparams; i++) t->args[i] = t->orig[i];
  for (int i = 0; i < t->nr && !st; i++) {
    group *g = &t->g[t->r[i].group];
    if (!g->written) continue;
    t->args[t->r[i].param].v.ptr = g->scratch + g->off + (t->r[i].start - g->start);
    t->grp_of[t->r[i].param] = t->r[i].group;
  }
  if (!st) st = kt__dev_sync(t->stream, t->err, sizeof t->err);
  return dev(t, st);
}

static void scratch_free(tuner *t) {
  kt__timer_free(t->timer);
  for (int i = 0; i < t->ng; i++) {
    kt__dev_free(t->g[i].scratch);
    kt__dev_free(t->g[i].pristine);
  }
  kt__dev_event_destroy(t->ev);
  kt__dev_stream_destroy(t->stream);
  for (int i = 0; i < KT_MAX_PARAMS; i++) kt__free(t->ref[i]);
  kt__free(t->host);
}

/* Before every trial: the scratch as the caller's buffers were, guard zones
** filled, outputs that read nothing poisoned so an unwritten element shows. */
static kt_status restore(void *user, kt_stream s) {
  tuner *t = user;
  kt_status st = KT_OK;
  for (int i = 0; i < t->ng && !st; i++) {
    group *g = &t->g[i];
    if (!g->written) continue;
    size_t span = g->end - g->start;
    st = kt__dev_dtod_async(g->scratch + g->off, g->pristine, span, s, t->err, sizeof t->err);
    if (!st) st = kt__dev_memset8_async(g->scratch, GUARD_BYTE, g->off, s, t->err, sizeof t->err);
    if (!st) st = kt__dev_memset8_async(g->scratch + g->off + span, GUARD_BYTE, GUARD, s, t->err, sizeof t->err);
  }
  for (int i = 0; i < t->nr && !st; i++) {
    const kt__range *r = &t->r[i];
    if (t->s->params[r->param].access != KT__OUT || t->g[r->group].reads) continue;
    st = kt__dev_memset8_async(t->args[r->param].v.ptr, POISON_BYTE, r->end - r->start, s, t->err, sizeof t->err);
  }
  return st;
}

static kt_status host_room(tuner *t, size_t n) {
  if (n <= t->hostcap) return KT_OK;
  void *p = kt__realloc(t->host, n);
  if (!p) {
    snprintf(t->err, sizeof t->err, "out of memory");
    return KT_ERR_NOMEM;
  }
  t->host = p;
  t->hostcap = n;
  return KT_OK;
}

/* Guard zones intact? */
static kt_status guards_ok(tuner *t, int *ok, char *why, size_t wl) {
  *ok = 1;
  for (int i = 0; i < t->ng; i++) {
    group *g = &t->g[i];
    if (!g->written) continue;
    size_t span = g->end - g->start;
    kt_status st = host_room(t, g->off);
    if (!st) st = kt__dev_dtoh(t->host, g->scratch, g->off, t->err, sizeof t->err);
    for (size_t b = 0; !st && b < g->off; b++)
      if (((unsigned char *)t->host)[b] != GUARD_BYTE) {
        snprintf(why, wl, "wrote %zu bytes before its buffer", g->off - b);
        *ok = 0;
        return KT_OK;
      }
    if (!st) st = kt__dev_dtoh(t->host, g->scratch + g->off + span, GUARD, t->err, sizeof t->err);
    for (size_t b = GUARD; !st && b-- > 0;)
      if (((unsigned char *)t->host)[b] != GUARD_BYTE) {
        snprintf(why, wl, "wrote %zu bytes past the end of its buffer", b + 1);
        *ok = 0;
        return KT_OK;
      }
    if (st) return st;
  }
  return KT_OK;
}

/* Run one config once on scratch and wait. */
static kt_status run_once(tuner *t, const kt__call *c) {
  kt_status st = restore(t, t->stream);
  if (!st) st = kt__call_launch(t->k, c, t->stream, t->args);
  else return dev(t, st);
  if (st) {
    snprintf(t->err, sizeof t->err, "%s", kt__errmsg(t->rt->id));
    return st;
  }
  return kt__dev_sync(t->stream, t->err, sizeof t->err);
}

static kt_status save_reference(tuner *t) {
  for (int i = 0; i < t->nr; i++) {
    const kt__range *r = &t->r[i];
    if (!r->written) continue;
    size_t n = r->end - r->start;
    if (!(t->ref[r->param] = kt__malloc(n ? n : 1))) {
      snprintf(t->err, sizeof t->err, "out of memory");
      return KT_ERR_NOMEM;
    }
    kt_status st = kt__dev_dtoh(t->ref[r->param], t->args[r->param].v.ptr, n, t->err, sizeof t->err);
    if (st) return st;
  }
  return KT_OK;
}

static kt_status outputs_match(tuner *t, int *ok, char *why, size_t wl) {
  *ok = 1;
  for (int i = 0; i < t->nr; i++) {
    const kt__range *r = &t->r[i];
    if (!r->written) continue;
    const kt__param *p = &t->s->params[r->param];
    size_t n = r->end - r->start;
    kt_status st = host_room(t, n);
    if (!st) st = kt__dev_dtoh(t->host, t->args[r->param].v.ptr, n, t->err, sizeof t->err);
    if (st) return st;
    kt_dtype dt = t->orig[r->param].dtype;
    double atol = p->atol, rtol = p->rtol, da, dr;
    kt__default_tolerance(dt, &da, &dr);
    if (atol < 0) atol = da;
    if (rtol < 0) rtol = dr;
    size_t esz = kt_dtype_size(dt);
    char w[300];
    size_t bad = kt__compare_parallel(dt, t->ref[r->param], t->host, esz ? n / esz : 0, atol, rtol, w, sizeof w);
    if (bad) {
      snprintf(why, wl, "%s: %zu elements differ from the default config's; first %s", p->name, bad, w);
      *ok = 0;
      return KT_OK;
    }
  }
  return KT_OK;
}

static void candidate_list(tuner *t, const kt__call *base) {
  const kt__spec *s = t->s;
  int idx[64] = {0};
  do {
    candidate *cd = &t->cand[t->ncand];
    cd->c = *base;
    kt__spec_config_at(s, idx, cd->cfg);
    int bad;
    if (!kt__call_config(t->k, &cd->c, cd->cfg) && !kt__call_check(t->k, &cd->c, &bad) && bad < 0) {
      kt__config_json(s, cd->cfg, cd->json, sizeof cd->json);
      if (++t->ncand == MAX_CANDIDATES) return;
    }
  } while (kt__spec_config_next(s, idx));
}

static int on_prior(void *user, const kt__trialrow *r) {
  tuner *t = user;
  for (int i = 0; i < t->ncand; i++) {
    candidate *cd = &t->cand[i];
    if (cd->status || strcmp(cd->json, r->config)) continue;
    cd->prior = 1;
    cd->status = !strcmp(r->status, "ok") ? "ok" : "prior";
    cd->median = r->median_us;
    cd->spread = r->spread_us;
  }
  return 0;
}

static void on_quarantined(void *user, const char *config, const char *reason) {
  tuner *t = user;
  for (int i = 0; i < t->ncand; i++) {
    candidate *cd = &t->cand[i];
    if (cd->status || strcmp(cd->json, config)) continue;
    cd->status = "prior";
    cd->prior = 1;
    kt__log(&t->rt->log, KT_LOG_INFO, "%s %s: skipping quarantined config %s (%s)", t->s->name, t->key, config,
            reason);
  }
}

static void compile_one(void *user, int i) {
  tuner *t = user;
  candidate *cd = &t->cand[i];
  if (cd->status) return;
  void *fn;
  cd->compiled = kt__variant_info(t->k, &cd->c, &fn, &cd->attrs);
  if (cd->compiled) snprintf(cd->detail, sizeof cd->detail, "%s", kt__errmsg(t->rt->id));
}

static void store_trial(tuner *t, const candidate *cd) {
  if (!t->rt->store || kt__store_readonly(t->rt->store) || cd->prior) return;
  kt__trialrow tr = {t->s->name, t->k->spec_hash, t->rt->fingerprint, t->key, cd->json, cd->status,
                     cd->median, cd->spread, cd->attrs.regs, cd->attrs.static_smem, cd->attrs.local_bytes,
                     cd->detail};
  char err[KT_ERRMAX];
  if (kt__store_put_trial(t->rt->store, &tr, err, sizeof err))
    kt__log(&t->rt->log, KT_LOG_WARN, "%s", err);
}

static void quarantine(tuner *t, const candidate *cd, const char *reason) {
  char err[KT_ERRMAX];
  if (t->rt->store && !kt__store_readonly(t->rt->store) &&
      kt__store_quarantine(t->rt->store, t->s->name, t->k->spec_hash, t->rt->fingerprint, t->key, cd->json,
                           reason, err, sizeof err))
    kt__log(&t->rt->log, KT_LOG_WARN, "%s", err);
}

/* Resources after compilation: threads, shared memory, occupancy, spills. */
static int fits(tuner *t, candidate *cd) {
  const kt__spec *s = t->s;
  int64_t threads = 1, b;
  for (int i = 0; i < 3; i++)
    if (!kt__expr_eval(&s->block[i], cd->c.slots, &b)) threads *= b;
  int64_t smem = cd->c.slots[s->smem_slot];
  if (threads > cd->attrs.max_threads) {
    snprintf(cd->detail, sizeof cd->detail, "block of %lld threads, the kernel allows %d (%d registers)",
             (long long)threads, cd->attrs.max_threads, cd->attrs.regs);
    return 0;
  }
  if (smem + cd->attrs.static_smem > t->rt->dev.smem_per_block_optin) {
    snprintf(cd->detail, sizeof cd->detail, "%lld bytes of shared memory, the device has %d", (long long)smem,
             t->rt->dev.smem_per_block_optin);
    return 0;
  }
  int blocks = 0;
  void *fn;
  char err[KT_ERRMAX];
  if (!kt__variant_get(t->k, &cd->c, &fn) &&
      !kt__dev_occupancy(fn, (int)threads, (size_t)smem, &blocks, err, sizeof err) && blocks == 0) {
    snprintf(cd->detail, sizeof cd->detail, "no block fits on a multiprocessor");
    return 0;
  }
  return 1;
}

/* Tune: fills best with the winner; returns KT_ERR_DEVICE_FAULT naming the
** config that left the context unusable. */
typedef struct batch {
  tuner *t;
  const int *idx;
} batch;

static void compile_batch_one(void *user, int i) {
  batch *b = user;
  compile_one(b->t, b->idx[i]);
}

/* Compile the listed candidates in parallel and refuse those the device
** cannot run; a candidate that spills is refused once one that does not
** spill has been seen. */
static void prepare(tuner *t, const int *idx, int n) {
  batch b = {t, idx};
  kt__parallel_for(n, kt__ncpus(), compile_batch_one, &b);
  for (int j = 0; j < n; j++) {
    candidate *cd = &t->cand[idx[j]];
    if (cd->status) continue;
    if (cd->compiled) {
      cd->status = "compile_error";
    } else if (!fits(t, cd)) {
      cd->status = "resources";
    } else if (!cd->attrs.local_bytes) {
      t->spill_free++;
    }
  }
  for (int j = 0; j < n && t->spill_free; j++) {
    candidate *cd = &t->cand[idx[j]];
    if (cd->status || !cd->attrs.local_bytes) continue;
    cd->status = "resources";
    snprintf(cd->detail, sizeof cd->detail, "spills %d bytes per thread to local memory", cd->attrs.local_bytes);
  }
}

/* One candidate on scratch: launched, its guard zones and outputs checked
** against the reference, then timed. Only a fault (the context is lost)
** ends the tuning. */
static kt_status trial(tuner *t, candidate *cd) {
  kt_runtime *rt = t->rt;
  const kt__spec *s = t->s;
  kt__benchopts quick = {10, 2.0, 200.0, 30.0, NULL, restore, t, t->timer, BURST};
  char why[600];
  int ok;
  /* Recorded before the trial and cleared after: a process that dies in
  ** it leaves the culprit quarantined for the next one. */
  char reason[160];
  snprintf(reason, sizeof reason, "in progress in pid %d", (int)getpid());
  quarantine(t, cd, reason);
  atomic_fetch_add_explicit(&rt->n_trial, 1, memory_order_relaxed);
  kt_status st = run_once(t, &cd->c);
  if (st == KT_ERR_DEVICE_FAULT) {
    snprintf(reason, sizeof reason, "fault: %.140s", t->err);
    quarantine(t, cd, reason);
    cd->status = "fault";
    snprintf(cd->detail, sizeof cd->detail, "%s", t->err);
    store_trial(t, cd);
    return kt__err(rt->id, KT_ERR_DEVICE_FAULT,
                   "%s %s: config %s faulted (%s); it is quarantined for this key and the CUDA context is "
                   "unusable: restart the process",
                   s->name, t->key, cd->json, t->err);
  }
  if (st) {
    cd->status = "resources";
    snprintf(cd->detail, sizeof cd->detail, "launch: %s", t->err);
  } else if ((st = guards_ok(t, &ok, why, sizeof why))) {
    return dev(t, st);
  } else if (!ok) {
    cd->status = "oob_write";
    snprintf(cd->detail, sizeof cd->detail, "%s", why);
  } else if ((st = outputs_match(t, &ok, why, sizeof why))) {
    return dev(t, st);
  } else if (!ok) {
    cd->status = "mismatch";
    snprintf(cd->detail, sizeof cd->detail, "%s", why);
  } else if ((st = kt__bench(t->k, &cd->c, t->args, &quick, &cd->median, &cd->spread))) {
    cd->status = "resources";
    snprintf(cd->detail, sizeof cd->detail, "timing: %s", kt__errmsg(rt->id));
  } else {
    cd->status = "ok";
    if (t->best_us <= 0 || cd->median < t->best_us) t->best_us = cd->median;
  }
  quarantine(t, cd, NULL);
  t->done++;
  if (rt->progress) rt->progress(rt->progress_user, s->name, t->key, t->done, t->planned, t->best_us);
  return KT_OK;
}

static int over_budget(const tuner *t) {
  return t->budget_ms > 0 && kt__now_ms() - t->t_start > t->budget_ms;
}

/* Prepare and try the listed candidates that are still pending, in order,
** while the budget lasts. idx[0..n) is reordered in place. */
static kt_status try_list(tuner *t, int *idx, int n) {
  int m = 0;
  for (int j = 0; j < n; j++)
    if (!t->cand[idx[j]].status) idx[m++] = idx[j];
  prepare(t, idx, m);
  for (int j = 0; j < m; j++) {
    candidate *cd = &t->cand[idx[j]];
    if (cd->status) continue;
    if (over_budget(t)) return KT_OK;
    kt_status st = trial(t, cd);
    if (st) return st;
  }
  return KT_OK;
}

static int field_index(const kt__cfield *f, int64_t v) {
  for (int i = 0; i < f->n; i++)
    if (f->values[i] == v) return i;
  return -1;
}

/* Whether a and b differ, each field by at most one step of its list:
** several fields may move at once, since constraints often tie one field
** to another (ITEMS to BLOCK and VEC) and a move of one alone is refused. */
static int neighbours(const kt__spec *s, const int64_t *a, const int64_t *b) {
  int diff = 0;
  for (int f = 0; f < s->ncfields; f++) {
    if (a[f] == b[f]) continue;
    int d = field_index(&s->cfields[f], a[f]) - field_index(&s->cfields[f], b[f]);
    if (d != 1 && d != -1) return 0;
    diff++;
  }
  return diff > 0;
}

static int is_ok(const candidate *cd) { return cd->status && !strcmp(cd->status, "ok"); }

static kt_status search(tuner *t, kt_strategy strategy, const int64_t *fallback) {
  const kt__spec *s = t->s;
  int *idx = kt__calloc((size_t)t->ncand + 1, sizeof *idx);
  if (!idx) return kt__err(t->rt->id, KT_ERR_NOMEM, "%s: out of memory", s->name);
  int n = 0;
  for (int i = 0; i < t->ncand; i++)
    if (!t->cand[i].status) idx[n++] = i;
  t->planned = n;
  kt_status st = KT_OK;
  if (strategy == KT_STRATEGY_EXHAUSTIVE) {
    st = try_list(t, idx, n);
  } else if (strategy == KT_STRATEGY_RANDOM) {
    /* Seeded by the key, so a rerun tries the same order. */
    uint64_t r = XXH3_64bits(t->key, strlen(t->key)) | 1;
    for (int i = n - 1; i > 0; i--) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      int j = (int)(r % (uint64_t)(i + 1)), tmp = idx[i];
      idx[i] = idx[j], idx[j] = tmp;
    }
    /* In batches, so that each batch compiles in parallel. */
    int step = 2 * kt__ncpus();
    for (int at = 0; at < n && !st && !over_budget(t); at += step)
      st = try_list(t, idx + at, n - at < step ? n - at : step);
  } else {
    /* Local search from the default config (or the earlier best). */
    int cur = -1;
    for (int i = 0; i < t->ncand; i++)
      if (!memcmp(t->cand[i].cfg, fallback, (size_t)s->ncfields * sizeof *fallback)) cur = i;
    for (int i = 0; i < t->ncand; i++)
      if (is_ok(&t->cand[i]) && (cur < 0 || !is_ok(&t->cand[cur]) || t->cand[i].median < t->cand[cur].median))
        cur = i;
    if (cur < 0 && n) cur = idx[0];
    if (cur >= 0 && !t->cand[cur].status) {
      idx[0] = cur;
      st = try_list(t, idx, 1);
    }
    while (!st && cur >= 0 && !over_budget(t)) {
      int m = 0;
      for (int i = 0; i < t->ncand; i++)
        if (!t->cand[i].status && neighbours(s, t->cand[i].cfg, t->cand[cur].cfg)) idx[m++] = i;
      if (m && (st = try_list(t, idx, m))) break;
      int next = cur;
      for (int i = 0; i < t->ncand; i++)
        if (is_ok(&t->cand[i]) && neighbours(s, t->cand[i].cfg, t->cand[cur].cfg) &&
            (!is_ok(&t->cand[next]) || t->cand[i].median < t->cand[next].median))
          next = i;
      if (next == cur) break;
      cur = next;
    }
  }
  kt__free(idx);
  return st;
}

static kt_status tune(tuner *t, kt__call *base, kt_stream caller, int64_t *best, const int64_t *fallback) {
  kt_runtime *rt = t->rt;
  const kt__spec *s = t->s;
  kt_status st;
  double t0 = kt__now_ms();
  int pending = 0;
  for (int i = 0; i < t->ncand; i++) pending += !t->cand[i].status;
  kt_strategy strategy = rt->strategy;
  if (strategy == KT_STRATEGY_AUTO) strategy = pending <= 256 ? KT_STRATEGY_EXHAUSTIVE : KT_STRATEGY_RANDOM;
  t->budget_ms = rt->budget_s > 0 ? rt->budget_s * 1000 : strategy == KT_STRATEGY_RANDOM ? 10000 : 0;
  /* The reference first: the default config (or the fallback when a
  ** constraint refuses the default for this call). */
  kt__call ref = *base;
  if ((st = kt__call_config(t->k, &ref, fallback))) return st;
  void *fn;
  if ((st = kt__variant_get(t->k, &ref, &fn))) return st;
  double t_compiled = kt__now_ms();
  if ((st = call_ranges(t->k, base, t->orig, t->r, &t->nr))) return st;
  if ((st = scratch_make(t, caller))) return st;
  if ((st = kt__timer_new(t->k, &t->timer))) return st;
  char why[600];
  int ok;
  if ((st = run_once(t, &ref)) || (st = save_reference(t)))
    return kt__err(rt->id, st, "%s %s: the default config failed on scratch: %s", s->name, t->key, t->err);
  if ((st = guards_ok(t, &ok, why, sizeof why))) return dev(t, st);
  if (!ok)
    return kt__err(rt->id, KT_ERR_CONSTRAINT, "%s %s: the default config %s", s->name, t->key, why);
  double t_ref = kt__now_ms();
  t->t_start = t_ref;
  if ((st = search(t, strategy, fallback))) return st;
  /* The best few are measured again, longer, before one is chosen. */
  double t_trials = kt__now_ms();
  kt__benchopts careful = {30, 20.0, 500.0, 150.0, NULL, restore, t, t->timer, BURST};
  for (int round = 0; round < REMEASURE; round++) {
    int pick = -1;
    for (int i = 0; i < t->ncand; i++) {
      candidate *cd = &t->cand[i];
      if (cd->status && !strcmp(cd->status, "ok") && !cd->prior && !cd->remeasured &&
          (pick < 0 || cd->median < t->cand[pick].median))
        pick = i;
    }
    if (pick < 0) break;
    candidate *cd = &t->cand[pick];
    double m, sp;
    if (!kt__bench(t->k, &cd->c, t->args, &careful, &m, &sp)) {
      cd->median = m;
      cd->spread = sp;
    }
    cd->remeasured = 1;
  }
  int win = -1, tried = 0, rejected = 0, measured = 0;
  for (int i = 0; i < t->ncand; i++) {
    candidate *cd = &t->cand[i];
    if (!cd->status || !strcmp(cd->status, "prior")) continue;
    tried++;
    measured += !cd->prior;
    if (strcmp(cd->status, "ok")) {
      rejected++;
    } else if (win < 0 || cd->median < t->cand[win].median) {
      win = i;
    }
    store_trial(t, cd);
  }
  if (win < 0)
    return kt__err(rt->id, KT_ERR_NO_CONFIG, "%s %s: every candidate was rejected", s->name, t->key);
  memcpy(best, t->cand[win].cfg, (size_t)s->ncfields * sizeof *best);
  double dflt = -1;
  for (int i = 0; i < t->ncand; i++)
    if (!memcmp(t->cand[i].cfg, fallback, (size_t)s->ncfields * sizeof *fallback) && t->cand[i].status &&
        !strcmp(t->cand[i].status, "ok"))
      dflt = t->cand[i].median;
  double t_end = kt__now_ms();
  kt__log(&rt->log, KT_LOG_INFO,
          "tuned %s %s: %s at %.2f us (default %.2f us), %d tried (%d measured now), %d rejected; %.0f ms: default "
          "compiled %.0f, reference %.0f, trials and their compiles %.0f, re-measure %.0f",
          s->name, t->key, t->cand[win].json, t->cand[win].median, dflt, tried, measured, rejected, t_end - t0,
          t_compiled - t0, t_ref - t_compiled, t_trials - t_ref, t_end - t_trials);
  if (rt->store && !kt__store_readonly(rt->store)) {
    char nv[16], drv[16], err[KT_ERRMAX];
    snprintf(nv, sizeof nv, "%d", kt__nvrtc_version());
    snprintf(drv, sizeof drv, "%d", rt->dev.driver_version);
    kt__cfgrow row = {s->name, t->k->spec_hash, rt->fingerprint, t->key, t->cand[win].json, t->cand[win].median,
                      tried, rejected, nv, drv, 0, 0};
    if (kt__store_put_config(rt->store, &row, NULL, err, sizeof err)) kt__log(&rt->log, KT_LOG_WARN, "%s", err);
  }
  return KT_OK;
}

/* A config read from the cache, parsed into cfg: it must lie in the space
** and satisfy every constraint for this call (rows may come from another
** version or another machine). */
static int stored_valid(kt_kernel *k, const kt__call *c, const char *json, int64_t *cfg) {
  int bad = 0;
  kt__call probe = *c;
  return !kt__config_from_json(k->spec, json, cfg) && !kt__call_config(k, &probe, cfg) &&
         !kt__call_check(k, &probe, &bad) && bad < 0;
}

/* A lease outlives any reasonable tuning; a longer one may be taken over,
** which costs a second tuning, never a wrong row (the faster one wins). */
#define LEASE_S 600
#define LEASE_POLL_US 50000

/* Take the key's lease, or wait while another process holds it. Returns 1
** when the holder stored a config meanwhile (then in stored), else 0 with
** the lease ours (*held) or, after LEASE_S, without it. */
static int lease_or_wait(tuner *t, kt__call *c, int64_t *stored, int *held, char *host, size_t hostlen) {
  kt_runtime *rt = t->rt;
  const kt__spec *s = t->s;
  char err[KT_ERRMAX], json[512];
  *held = 0;
  if (gethostname(host, hostlen)) snprintf(host, hostlen, "localhost");
  double deadline = kt__now_ms() + LEASE_S * 1e3;
  int said = 0;
  for (;;) {
    int taken = 0;
    long holder = 0;
    if (kt__store_lease(rt->store, s->name, t->k->spec_hash, rt->fingerprint, t->key, host, (long)getpid(), LEASE_S,
                        &taken, &holder, err, sizeof err)) {
      kt__log(&rt->log, KT_LOG_WARN, "%s", err);
      return 0;
    }
    if (taken) {
      *held = 1;
      return 0;
    }
    if (!said++)
      kt__log(&rt->log, KT_LOG_INFO, "%s %s: process %ld is tuning this key; waiting for its result", s->name, t->key,
              holder);
    usleep(LEASE_POLL_US);
    if (!kt__store_get_config(rt->store, s->name, t->k->spec_hash, rt->fingerprint, t->key, json, sizeof json, NULL,
                              err, sizeof err) &&
        stored_valid(t->k, c, json, stored))
      return 1;
    if (kt__now_ms() > deadline) {
      kt__log(&rt->log, KT_LOG_WARN, "%s %s: process %ld has held the tuning lease for %d s; tuning here too",
              s->name, t->key, holder, LEASE_S);
      return 0;
    }
  }
}

static kt_status insert(kt_kernel *k, const kt__call *c, const int64_t *key, uint64_t h, const int64_t *cfg,
                        const kt__tuned **out) {
  kt__tuned *e = kt__calloc(1, sizeof *e);
  if (!e) return kt__err(k->rt->id, KT_ERR_NOMEM, "%s: out of memory", k->spec->name);
  e->hash = h;
  e->nkey = k->keydef.n;
  memcpy(e->key, key, (size_t)e->nkey * sizeof *key);
  memcpy(e->cfg, cfg, (size_t)k->spec->ncfields * sizeof *cfg);
  /* The launch right after needs this variant anyway; a failure to make it
  ** is reported by that launch. */
  kt__call v = *c;
  if (k->rt->have_device && !kt__call_config(k, &v, cfg) && !kt__variant_get(k, &v, &e->fn))
    kt__variant_vals(k, &v, e->vals);
  else
    e->fn = NULL;
  if (kt__lfmap_insert(&k->tuned, e)) {
    kt__free(e);
    return kt__err(k->rt->id, KT_ERR_NOMEM, "%s: out of memory", k->spec->name);
  }
  *out = e;
  return KT_OK;
}

kt_status kt__tune_miss(kt_kernel *k, kt__call *c, const int64_t *key, uint64_t h, kt_stream stream,
                        const kt_arg *args, const kt__tuned **out, int64_t *cfg) {
  kt_runtime *rt = k->rt;
  const kt__spec *s = k->spec;
  *out = NULL;
  atomic_fetch_add_explicit(&rt->n_miss, 1, memory_order_relaxed);
  int64_t fallback[64];
  kt_status st = kt__call_fallback(k, c, fallback);
  if (st) return st;
  if (rt->miss_runs_default) {
    if (pthread_mutex_trylock(&k->tune_lock)) {
      /* Another thread is tuning: run the default now, look again later. */
      atomic_fetch_add_explicit(&rt->n_fallback, 1, memory_order_relaxed);
      memcpy(cfg, fallback, (size_t)s->ncfields * sizeof *cfg);
      return KT_OK;
    }
  } else {
    pthread_mutex_lock(&k->tune_lock);
  }
  /* Single flight: whoever tuned this key while we waited left it here. */
  if ((*out = kt__tuned_find(k, key, h))) {
    pthread_mutex_unlock(&k->tune_lock);
    return KT_OK;
  }
  tuner *t = kt__calloc(1, sizeof *t);
  if (!t) {
    pthread_mutex_unlock(&k->tune_lock);
    return kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", s->name);
  }
  t->k = k;
  t->rt = rt;
  t->s = s;
  t->orig = args;
  kt__key_json(&k->keydef, key, t->key, sizeof t->key);
  int capturing = 0;
  char err[KT_ERRMAX];
  /* A thread's first call may arrive here before anything made the
  ** runtime's context current in it. */
  if (rt->have_device && (st = kt__dev_use(rt->ctx, err, sizeof err))) {
    kt__free(t);
    pthread_mutex_unlock(&k->tune_lock);
    return kt__err(rt->id, st, "%s: %s", s->name, err);
  }
  if (rt->have_device && kt__dev_is_capturing(stream, &capturing, err, sizeof err)) capturing = 0;
  int64_t stored[64];
  int have_stored = 0;
  if (rt->store) {
    char json[512];
    st = kt__store_get_config(rt->store, s->name, k->spec_hash, rt->fingerprint, t->key, json, sizeof json, NULL,
                              err, sizeof err);
    if (!st && rt->retune && rt->mode == KT_MODE_TUNE) {
      kt__log(&rt->log, KT_LOG_INFO, "%s %s: cached config %s is tuned again (retune)", s->name, t->key, json);
    } else if (!st) {
      have_stored = stored_valid(k, c, json, stored);
      if (!have_stored)
        kt__log(&rt->log, KT_LOG_WARN, "%s %s: cached config %s is not in the spec's space or violates a constraint; ignored", s->name,
                t->key, json);
    } else if (st != KT_ERR_NOT_FOUND) {
      kt__log(&rt->log, KT_LOG_WARN, "%s", err);
    }
    st = KT_OK;
  }
  int may_tune = rt->mode == KT_MODE_TUNE && !capturing && rt->have_device;
  int held = 0;
  char host[256] = "";
  int new_candidates = 0;
  if (may_tune && (t->cand = kt__calloc(MAX_CANDIDATES, sizeof *t->cand))) {
    candidate_list(t, c);
    if (rt->store) {
      if (!rt->retune)
        kt__store_trials(rt->store, s->name, k->spec_hash, rt->fingerprint, t->key, on_prior, t, err, sizeof err);
      kt__store_quarantined(rt->store, s->name, k->spec_hash, rt->fingerprint, t->key, on_quarantined, t, err,
                            sizeof err);
    }
    for (int i = 0; i < t->ncand; i++) new_candidates += !t->cand[i].status;
  } else if (may_tune) {
    st = kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", s->name);
  }
  if (have_stored) atomic_fetch_add_explicit(&rt->n_cache_load, 1, memory_order_relaxed);
  if (!st && have_stored && !new_candidates) {
    st = insert(k, c, key, h, stored, out);
  } else if (!st && !may_tune) {
    if (!have_stored) atomic_fetch_add_explicit(&rt->n_fallback, 1, memory_order_relaxed);
    memcpy(cfg, have_stored ? stored : fallback, (size_t)s->ncfields * sizeof *cfg);
    if (capturing) {
      /* Never tune inside a capture: the graph would record the trials. */
      if (!atomic_exchange(&k->logged_capture, 1))
        kt__log(&rt->log, KT_LOG_WARN,
                "%s %s: stream is capturing; %s config used without tuning (tune before capture to avoid this)",
                s->name, t->key, have_stored ? "the cached" : "the default");
    } else {
      if (!have_stored && rt->mode == KT_MODE_CACHE_ONLY && !atomic_exchange(&k->logged_cache_only, 1))
        kt__log(&rt->log, KT_LOG_INFO, "%s %s: not in the cache; cache-only mode uses the default config", s->name,
                t->key);
      st = insert(k, c, key, h, cfg, out);
    }
  } else if (!st && rt->store && lease_or_wait(t, c, stored, &held, host, sizeof host)) {
    st = insert(k, c, key, h, stored, out);
  } else if (!st) {
    int64_t best[64];
    double t0 = kt__now_ms();
    st = tune(t, c, stream, best, fallback);
    atomic_fetch_add_explicit(&rt->n_tune, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rt->tune_us, (uint_fast64_t)((kt__now_ms() - t0) * 1000), memory_order_relaxed);
    if (st == KT_ERR_NOMEM) {
      /* Scratch copies did not fit beside the caller's data: the call still
      ** runs, with the default config, and the key is tuned another time. */
      kt__log(&rt->log, KT_LOG_WARN, "%s %s: not enough memory to tune (%s); the default config is used",
              s->name, t->key, kt__errmsg(rt->id));
      memcpy(cfg, fallback, (size_t)s->ncfields * sizeof *cfg);
      atomic_fetch_add_explicit(&rt->n_fallback, 1, memory_order_relaxed);
      st = KT_OK;
      goto done;
    }
    if (!st) st = insert(k, c, key, h, best, out);
  }
done:
  if (held && kt__store_lease_release(rt->store, s->name, k->spec_hash, rt->fingerprint, t->key, host, (long)getpid(),
                                      err, sizeof err))
    kt__log(&rt->log, KT_LOG_WARN, "%s", err);
  if (t->ng || t->stream) scratch_free(t);
  kt__free(t->cand);
  kt__free(t);
  pthread_mutex_unlock(&k->tune_lock);
  return st;
}

int kt__test_tuned_count(const kt_kernel *k);
int kt__test_tuned_count(const kt_kernel *k) { return (int)k->tuned.count; }
