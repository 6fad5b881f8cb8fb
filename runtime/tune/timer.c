#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "tune/timer.h"

/* Upper bounds on one measurement, whatever the options ask. */
#define MAX_REPS 5000
#define WARMUP 3
/* Kernels shorter than this are timed in bursts (see kt__bench). */
#define BURST_BELOW_MS 0.2

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

struct kt__timer {
  kt_stream s;
  void *ev[2];
  kt__dptr flush;
  size_t flush_bytes;
  float *ms;
};

void kt__timer_free(kt__timer *t) {
  if (!t) return;
  kt__dev_event_destroy(t->ev[0]);
  kt__dev_event_destroy(t->ev[1]);
  kt__dev_stream_destroy(t->s);
  kt__dev_free(t->flush);
  kt__free(t->ms);
  kt__free(t);
}

kt_status kt__timer_new(kt__prog *p, kt__timer **out) {
  kt__env *env = p->env;
  char err[KT_ERRMAX];
  kt__timer *t = kt__calloc(1, sizeof *t);
  if (!t || !(t->ms = kt__malloc(MAX_REPS * sizeof *t->ms))) {
    kt__free(t);
    return kt__err(env->id, KT_ERR_NOMEM, "%s: timing: out of memory", p->spec->name);
  }
  /* Each repetition starts with L2 flushed, by writing a buffer of twice
  ** its size, so that a kernel is not timed on inputs the last repetition
  ** left in cache. */
  t->flush_bytes = (size_t)env->dev.l2_bytes * 2;
  kt_status st = kt__dev_use(env->ctx, err, sizeof err);
  if (!st) st = kt__dev_stream_create(&t->s, err, sizeof err);
  if (!st) st = kt__dev_event_create(&t->ev[0], err, sizeof err);
  if (!st) st = kt__dev_event_create(&t->ev[1], err, sizeof err);
  if (!st && t->flush_bytes) st = kt__dev_malloc(&t->flush, t->flush_bytes, err, sizeof err);
  if (st) {
    kt__timer_free(t);
    return kt__err(env->id, st, "%s: timing: %s", p->spec->name, err);
  }
  *out = t;
  return KT_OK;
}

kt_status kt__bench(kt__prog *p, const kt__call *c, const kt_arg *args, const kt__benchopts *o,
                    double *median_us, double *spread_us) {
  kt__env *env = p->env;
  char err[KT_ERRMAX];
  kt__timer *t = o->timer;
  kt_status st = t ? KT_OK : kt__timer_new(p, &t);
  if (st) return st;
  float *ms = t->ms;
  void *fn = NULL;
  if ((st = kt__variant_get(p, c, &fn))) {
    if (!o->timer) kt__timer_free(t);
    return st;
  }
  if (o->after) {
    st = kt__dev_event_record(t->ev[0], o->after, err, sizeof err);
    if (!st) st = kt__dev_wait_event(t->s, t->ev[0], err, sizeof err);
    if (st) kt__err(env->id, st, "%s: timing: %s", p->spec->name, err);
  }
  for (int i = 0; i < WARMUP && !st; i++) {
    if (o->prep) st = o->prep(o->user, t->s);
    if (!st) st = kt__call_launch(p, c, fn, t->s, args, NULL);
  }
  /* A kernel in a model starts right after another kernel, not after an
  ** event. A short one is therefore timed as a burst of back-to-back
  ** launches, the first on a flushed L2, so that what back-to-back launches
  ** hide (the launch itself, the next grid starting while one drains) counts
  ** for each config as it will in use: a config that wins alone can lose in
  ** a stream. The first repetition, a single launch, decides. */
  int n = 0, burst = 1;
  double total = 0, wall0 = kt__now_ms();
  while (!st && n < MAX_REPS && (n < o->min_reps || (total < o->min_ms && kt__now_ms() - wall0 < o->max_wall_ms)) &&
         total < o->max_ms) {
    if (o->prep && (st = o->prep(o->user, t->s))) break;
    if (t->flush) st = kt__dev_memset8_async(t->flush, (uint8_t)n, t->flush_bytes, t->s, err, sizeof err);
    if (!st) st = kt__dev_event_record(t->ev[0], t->s, err, sizeof err);
    for (int b = 0; b < burst && !st; b++) st = kt__call_launch(p, c, fn, t->s, args, NULL);
    if (st) break; /* kt__call_launch said why */
    st = kt__dev_event_record(t->ev[1], t->s, err, sizeof err);
    if (!st) st = kt__dev_event_sync(t->ev[1], err, sizeof err);
    if (!st) st = kt__dev_elapsed(&ms[n], t->ev[0], t->ev[1], err, sizeof err);
    if (st) {
      kt__err(env->id, st, "%s: timing: %s", p->spec->name, err);
      break;
    }
    total += ms[n];
    ms[n] /= (float)burst;
    if (n == 0 && burst == 1 && o->max_burst > 1 && ms[0] < BURST_BELOW_MS) {
      burst = o->max_burst;
      total = 0;
      continue;
    }
    n++;
  }
  if (!st) {
    qsort(ms, (size_t)n, sizeof *ms, cmp_f);
    *median_us = (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2])) * 1e3;
    *spread_us = (ms[n - 1] - ms[0]) * 1e3;
  }
  if (!st && kt__dev_sync(t->s, err, sizeof err)) st = kt__err(env->id, KT_ERR_CUDA, "%s", err);
  if (!o->timer) kt__timer_free(t);
  return st;
}

