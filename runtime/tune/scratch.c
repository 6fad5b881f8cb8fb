#include "tune/scratch.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "tune/compare.h"

/* Guard zones around each scratch group: a write up to this far past a
** buffer is caught. A multiple of 256, so scratch keeps each pointer's
** alignment class. */
#define GUARD 65536
#define GUARD_BYTE 0xA5
#define POISON_BYTE 0xFF

static kt_status dev(kt__scratch *s, kt_status st, const char *what) {
  return st ? kt__err(s->p->env->id, st, "%s: %s: %s", s->p->spec->name, what, s->err) : KT_OK;
}

/* Each group's extent, and whether it is written and read. */
static void group_ranges(kt__scratch *s) {
  s->ng = kt__alias_group(s->r, s->nr);
  for (int i = 0; i < s->ng; i++) s->g[i] = (kt__group){.start = UINT64_MAX};
  for (int i = 0; i < s->nr; i++) {
    kt__group *g = &s->g[s->r[i].group];
    if (s->r[i].start < g->start) g->start = s->r[i].start;
    if (s->r[i].end > g->end) g->end = s->r[i].end;
    g->written |= s->r[i].written;
    g->reads |= KT__READS(s->p->spec->params[s->r[i].param].access);
  }
}

/* One allocation per written group mirroring its layout between guard
** zones, and a pristine copy of the caller's bytes. */
static kt_status alloc_groups(kt__scratch *s) {
  kt_status st = KT_OK;
  for (int i = 0; i < s->ng && !st; i++) {
    kt__group *g = &s->g[i];
    if (!g->written) continue;
    size_t span = g->end - g->start;
    g->off = GUARD + g->start % 256;
    st = kt__dev_malloc(&g->scratch, g->off + span + GUARD, s->err, sizeof s->err);
    if (!st) st = kt__dev_malloc(&g->pristine, span, s->err, sizeof s->err);
    if (!st) st = kt__dev_dtod_async(g->pristine, g->start, span, s->stream, s->err, sizeof s->err);
  }
  return st;
}

kt_status kt__scratch_make(kt__scratch *s, kt__prog *p, const kt__call *c, const kt_arg *args, kt_stream caller,
                           const char *what) {
  memset(s, 0, sizeof *s);
  s->p = p;
  s->orig = args;
  kt_status st = kt__call_ranges(p, c, args, s->r, &s->nr);
  if (st) return st;
  group_ranges(s);
  st = kt__dev_stream_create(&s->stream, s->err, sizeof s->err);
  if (!st) st = kt__dev_event_create(&s->ev, s->err, sizeof s->err);
  if (!st) st = kt__dev_event_record(s->ev, caller, s->err, sizeof s->err);
  if (!st) st = kt__dev_wait_event(s->stream, s->ev, s->err, sizeof s->err);
  if (!st) st = alloc_groups(s);
  for (int i = 0; i < p->spec->nparams; i++) s->args[i] = args[i];
  for (int i = 0; i < s->nr && !st; i++) {
    kt__group *g = &s->g[s->r[i].group];
    if (g->written) s->args[s->r[i].param].v.ptr = g->scratch + g->off + (s->r[i].start - g->start);
  }
  if (!st) st = kt__dev_sync(s->stream, s->err, sizeof s->err);
  /* Without the device comparison, outputs are compared on the host. */
  char why[KT_ERRMAX];
  if (!st && !(s->on_device = !kt__devcmp_open(&s->cmp, p->env, why, sizeof why)))
    kt__log(&p->env->log, KT_LOG_INFO, "%s: outputs are compared on the host: %s", p->spec->name, why);
  return dev(s, st, what);
}

void kt__scratch_free(kt__scratch *s) {
  for (int i = 0; i < s->ng; i++) {
    kt__dev_free(s->g[i].scratch);
    kt__dev_free(s->g[i].pristine);
  }
  kt__dev_event_destroy(s->ev);
  kt__dev_stream_destroy(s->stream);
  for (int i = 0; i < KT_MAX_PARAMS; i++) {
    kt__free(s->ref[i]);
    kt__dev_free(s->dref[i]);
  }
  kt__devcmp_close(&s->cmp);
  kt__free(s->host);
  memset(s, 0, sizeof *s);
}

kt_status kt__scratch_restore(void *user, kt_stream stream) {
  kt__scratch *s = user;
  kt_status st = KT_OK;
  for (int i = 0; i < s->ng && !st; i++) {
    kt__group *g = &s->g[i];
    if (!g->written) continue;
    size_t span = g->end - g->start;
    st = kt__dev_dtod_async(g->scratch + g->off, g->pristine, span, stream, s->err, sizeof s->err);
    if (!st) st = kt__dev_memset8_async(g->scratch, GUARD_BYTE, g->off, stream, s->err, sizeof s->err);
    if (!st) st = kt__dev_memset8_async(g->scratch + g->off + span, GUARD_BYTE, GUARD, stream, s->err, sizeof s->err);
  }
  for (int i = 0; i < s->nr && !st; i++) {
    const kt__range *r = &s->r[i];
    if (s->p->spec->params[r->param].access != KT__OUT || s->g[r->group].reads) continue;
    st = kt__dev_memset8_async(s->args[r->param].v.ptr, POISON_BYTE, r->end - r->start, stream, s->err,
                               sizeof s->err);
  }
  return st;
}

static kt_status host_room(kt__scratch *s, size_t n) {
  if (n <= s->hostcap) return KT_OK;
  void *q = kt__realloc(s->host, n);
  if (!q) {
    snprintf(s->err, sizeof s->err, "out of memory");
    return KT_ERR_NOMEM;
  }
  s->host = q;
  s->hostcap = n;
  return KT_OK;
}

kt_status kt__scratch_guards(kt__scratch *s, int *ok, char *why, size_t wl) {
  *ok = 1;
  for (int i = 0; i < s->ng; i++) {
    kt__group *g = &s->g[i];
    if (!g->written) continue;
    size_t span = g->end - g->start;
    const unsigned char *h;
    kt_status st = host_room(s, g->off > GUARD ? g->off : GUARD);
    if (!st) st = kt__dev_dtoh(s->host, g->scratch, g->off, s->err, sizeof s->err);
    for (size_t b = 0, n = g->off; !st && b < n; b++)
      if ((h = s->host)[b] != GUARD_BYTE) {
        snprintf(why, wl, "wrote %zu bytes before its buffer", g->off - b);
        *ok = 0;
        return KT_OK;
      }
    if (!st) st = kt__dev_dtoh(s->host, g->scratch + g->off + span, GUARD, s->err, sizeof s->err);
    for (size_t b = GUARD; !st && b-- > 0;)
      if ((h = s->host)[b] != GUARD_BYTE) {
        snprintf(why, wl, "wrote %zu bytes past the end of its buffer", b + 1);
        *ok = 0;
        return KT_OK;
      }
    if (st) return st;
  }
  return KT_OK;
}

kt_status kt__scratch_run(kt__scratch *s, const kt__call *c) {
  kt_status st = kt__scratch_restore(s, s->stream);
  if (st) return st;
  if ((st = kt__call_launch(s->p, c, NULL, s->stream, s->args, NULL))) {
    snprintf(s->err, sizeof s->err, "%s", kt__errmsg(s->p->env->id));
    return st;
  }
  return kt__dev_sync(s->stream, s->err, sizeof s->err);
}

kt_status kt__scratch_keep_reference(kt__scratch *s) {
  for (int i = 0; i < s->nr; i++) {
    const kt__range *r = &s->r[i];
    if (!KT__COMPARED(s->p->spec->params[r->param].access)) continue;
    size_t n = r->end - r->start;
    if (s->on_device) {
      kt__dptr *d = &s->dref[r->param];
      kt_status st = kt__dev_malloc(d, n ? n : 1, s->err, sizeof s->err);
      if (!st) st = kt__dev_dtod_async(*d, s->args[r->param].v.ptr, n, s->stream, s->err, sizeof s->err);
      if (!st) st = kt__dev_sync(s->stream, s->err, sizeof s->err);
      if (st) return st;
      continue;
    }
    if (!(s->ref[r->param] = kt__malloc(n ? n : 1))) {
      snprintf(s->err, sizeof s->err, "out of memory");
      return KT_ERR_NOMEM;
    }
    kt_status st = kt__dev_dtoh(s->ref[r->param], s->args[r->param].v.ptr, n, s->err, sizeof s->err);
    if (st) return st;
  }
  return KT_OK;
}

/* On the device: the counts, then the first element that differs. */
static kt_status compare_on_device(kt__scratch *s, const kt__range *r, kt_dtype dt, double atol, double rtol,
                                   size_t *bad, char *w, size_t wl) {
  size_t esz = kt_dtype_size(dt), n = esz ? (r->end - r->start) / esz : 0;
  uint64_t count, first;
  kt__dptr got = s->args[r->param].v.ptr;
  kt_status st = kt__devcmp_run(&s->cmp, s->p->env, dt, s->dref[r->param], got, n, atol, rtol, s->stream, &count,
                                &first, s->err, sizeof s->err);
  *bad = (size_t)count;
  if (st || !count) return st;
  unsigned char a[8], b[8];
  if ((st = kt__dev_dtoh(a, s->dref[r->param] + first * esz, esz, s->err, sizeof s->err)) ||
      (st = kt__dev_dtoh(b, got + first * esz, esz, s->err, sizeof s->err)))
    return st;
  snprintf(w, wl, "element %llu: %.6g, reference %.6g (atol %g, rtol %g)", (unsigned long long)first,
           kt_dtype_load(dt, b, 0), kt_dtype_load(dt, a, 0), atol, rtol);
  return KT_OK;
}

kt_status kt__scratch_compare(kt__scratch *s, int *ok, char *why, size_t wl) {
  *ok = 1;
  for (int i = 0; i < s->nr; i++) {
    const kt__range *r = &s->r[i];
    const kt__param *q = &s->p->spec->params[r->param];
    if (!KT__COMPARED(q->access)) continue; /* consumed: undefined after the run */
    size_t n = r->end - r->start;
    kt_dtype dt = s->orig[r->param].dtype;
    double atol = q->atol, rtol = q->rtol, da, dr;
    kt__default_tolerance(dt, &da, &dr);
    if (atol < 0) atol = da;
    if (rtol < 0) rtol = dr;
    size_t esz = kt_dtype_size(dt), bad = 0;
    char w[300];
    kt_status st = KT_OK;
    if (s->on_device) {
      st = compare_on_device(s, r, dt, atol, rtol, &bad, w, sizeof w);
    } else {
      st = host_room(s, n);
      if (!st) st = kt__dev_dtoh(s->host, s->args[r->param].v.ptr, n, s->err, sizeof s->err);
      if (!st) bad = kt__compare_parallel(dt, s->ref[r->param], s->host, esz ? n / esz : 0, atol, rtol, w, sizeof w);
    }
    if (st) return st;
    if (bad) {
      snprintf(why, wl, "%s: %zu elements differ from the default config's; first %s", q->name, bad, w);
      *ok = 0;
      return KT_OK;
    }
  }
  return KT_OK;
}
