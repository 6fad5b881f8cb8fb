#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "runtime.h"

/* Upper bounds on one measurement, whatever the options ask. */
#define MAX_REPS 5000
#define WARMUP 3

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

typedef struct timer {
  kt_stream s;
  void *ev[2];
  kt__dptr flush;
  size_t flush_bytes;
} timer;

static void timer_free(timer *t) {
  kt__dev_event_destroy(t->ev[0]);
  kt__dev_event_destroy(t->ev[1]);
  kt__dev_stream_destroy(t->s);
  kt__dev_free(t->flush);
}

/* Each repetition starts with L2 flushed, by writing a buffer of twice its
** size, so that a kernel is not timed on inputs the last repetition left
** in cache. */
kt_status kt__bench(kt_kernel *k, const kt__call *c, const kt_arg *args, const kt__benchopts *o,
                    double *median_us, double *spread_us) {
  kt_runtime *rt = k->rt;
  char err[KT_ERRMAX];
  timer t;
  memset(&t, 0, sizeof t);
  float *ms = NULL;
  kt_status st = kt__dev_use(rt->ctx, err, sizeof err);
  t.flush_bytes = (size_t)rt->dev.l2_bytes * 2;
  if (!st) st = kt__dev_stream_create(&t.s, err, sizeof err);
  if (!st) st = kt__dev_event_create(&t.ev[0], err, sizeof err);
  if (!st) st = kt__dev_event_create(&t.ev[1], err, sizeof err);
  if (!st && t.flush_bytes) st = kt__dev_malloc(&t.flush, t.flush_bytes, err, sizeof err);
  if (!st && !(ms = kt__malloc(MAX_REPS * sizeof *ms))) {
    snprintf(err, sizeof err, "out of memory");
    st = KT_ERR_NOMEM;
  }
  if (st) {
    timer_free(&t);
    kt__free(ms);
    return kt__err(rt->id, st, "%s: timing: %s", k->spec->name, err);
  }
  if (!st && o->after) {
    st = kt__dev_event_record(t.ev[0], o->after, err, sizeof err);
    if (!st) st = kt__dev_wait_event(t.s, t.ev[0], err, sizeof err);
    if (st) kt__err(rt->id, st, "%s: timing: %s", k->spec->name, err);
  }
  for (int i = 0; i < WARMUP && !st; i++) {
    if (o->prep) st = o->prep(o->user, t.s);
    if (!st) st = kt__call_launch(k, c, t.s, args);
  }
  int n = 0;
  double total = 0;
  while (!st && n < MAX_REPS && (n < o->min_reps || total < o->min_ms) && total < o->max_ms) {
    if (o->prep && (st = o->prep(o->user, t.s))) break;
    if (t.flush) st = kt__dev_memset8_async(t.flush, (uint8_t)n, t.flush_bytes, t.s, err, sizeof err);
    if (!st) st = kt__dev_event_record(t.ev[0], t.s, err, sizeof err);
    if (!st && (st = kt__call_launch(k, c, t.s, args))) break;
    if (!st) st = kt__dev_event_record(t.ev[1], t.s, err, sizeof err);
    if (!st) st = kt__dev_event_sync(t.ev[1], err, sizeof err);
    if (!st) st = kt__dev_elapsed(&ms[n], t.ev[0], t.ev[1], err, sizeof err);
    if (!st) total += ms[n++];
    else kt__err(rt->id, st, "%s: timing: %s", k->spec->name, err);
  }
  if (!st) {
    qsort(ms, (size_t)n, sizeof *ms, cmp_f);
    *median_us = (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2])) * 1e3;
    *spread_us = (ms[n - 1] - ms[0]) * 1e3;
  }
  if (!st) st = kt__dev_sync(t.s, err, sizeof err) ? kt__err(rt->id, KT_ERR_CUDA, "%s", err) : KT_OK;
  timer_free(&t);
  kt__free(ms);
  return st;
}

kt_status kt_kernel_time(kt_kernel *k, const kt_arg *args, int nargs, const char *config,
                         double *median_us, double *spread_us) {
  if (!k || !median_us || !spread_us) return KT_ERR_INVALID;
  kt__call c;
  int64_t cfg[64];
  kt_status st = kt__call_bind(k, args, nargs, &c);
  if (!st) st = config ? kt__call_forced(k, &c, config) : kt__call_plan(k, &c, NULL, args, cfg);
  if (!st && !k->rt->have_device)
    st = kt__err(k->rt->id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device",
                 k->spec->name);
  kt__benchopts o = {20, 100.0, 2000.0, NULL, NULL, NULL};
  return st ? st : kt__bench(k, &c, args, &o, median_us, spread_us);
}

/* For make bench: the function and dimensions kt_launch would use, so that
** the raw driver launch of the same work can be timed beside it. */
kt_status kt__bench_raw_fn(kt_kernel *k, const kt_arg *args, int nargs, void **fn,
                           uint32_t grid[3], uint32_t block[3]);
kt_status kt__bench_raw_fn(kt_kernel *k, const kt_arg *args, int nargs, void **fn,
                           uint32_t grid[3], uint32_t block[3]) {
  kt__call c;
  int64_t cfg[64];
  kt_status st = kt__call_bind(k, args, nargs, &c);
  if (!st) st = kt__call_plan(k, &c, NULL, args, cfg);
  if (!st) st = kt__variant_get(k, &c, fn);
  for (int i = 0; !st && i < 3; i++) {
    int64_t g, b;
    kt__expr_eval(&k->spec->grid[i], c.slots, &g);
    kt__expr_eval(&k->spec->block[i], c.slots, &b);
    grid[i] = (uint32_t)g;
    block[i] = (uint32_t)b;
  }
  return st;
}
