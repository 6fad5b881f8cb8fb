#include "call/alias.h"

#include <stdlib.h>

kt_status kt__call_ranges(kt__prog *p, const kt__call *c, const kt_arg *args, kt__range *r, int *n) {
  const kt__spec *s = p->spec;
  *n = 0;
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *q = &s->params[i];
    if (q->type != KT__P_PTR || !args[i].v.ptr) continue;
    int64_t ext;
    int rc = kt__expr_eval(&q->extent, c->slots, &ext);
    if (rc)
      return kt__err(p->env->id, KT_ERR_EVAL, "%s: params[%d] (%s).extent: %s in \"%s\"", s->name, i, q->name,
                     kt__eval_strerror(rc), q->extent.text);
    if (ext < 0) ext = 0;
    uint64_t bytes = (uint64_t)ext * (uint64_t)c->slots[q->esize_slot];
    r[*n] = (kt__range){args[i].v.ptr, args[i].v.ptr + bytes, i, q->access != KT__IN, 0};
    (*n)++;
  }
  return KT_OK;
}

int kt__range_overlapping(const kt__range *r, int n, int i) {
  for (int j = 0; j < n; j++)
    if (i != j && r[i].start < r[j].end && r[j].start < r[i].end && r[i].end > r[i].start && r[j].end > r[j].start)
      return j;
  return -1;
}

kt_status kt__call_alias(kt__prog *p, const kt__call *c, const kt_arg *args) {
  if (p->spec->inplace) return KT_OK;
  kt__range r[KT_MAX_PARAMS];
  int n;
  kt_status st = kt__call_ranges(p, c, args, r, &n);
  if (st) return st;
  for (int i = 0; i < n; i++) {
    int j = r[i].written ? kt__range_overlapping(r, n, i) : -1;
    if (j >= 0)
      return kt__err(p->env->id, KT_ERR_ALIAS, "%s: %s (written) overlaps %s; this kernel cannot run in place",
                     p->spec->name, p->spec->params[r[i].param].name, p->spec->params[r[j].param].name);
  }
  return KT_OK;
}

static int by_start(const void *a, const void *b) {
  const kt__range *x = *(const kt__range *const *)a, *y = *(const kt__range *const *)b;
  return (x->start > y->start) - (x->start < y->start);
}

int kt__alias_group(kt__range *r, int n) {
  kt__range *order[64];
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) order[i] = &r[i];
  qsort(order, (size_t)n, sizeof order[0], by_start);
  int groups = 0;
  uint64_t end = 0;
  for (int i = 0; i < n; i++) {
    kt__range *x = order[i];
    /* Overlap means sharing a byte: touching ranges stay apart. */
    if (i == 0 || x->start >= end || x->start == x->end) {
      x->group = groups++;
      end = x->end;
    } else {
      x->group = groups - 1;
      if (x->end > end) end = x->end;
    }
  }
  return groups;
}
