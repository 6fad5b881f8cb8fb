#include "call/alias.h"

#include <stdio.h>
#include <stdlib.h>

kt_status kt__extent_check(const kt__prog *p, int i, int64_t ext) {
  const kt__spec *s = p->spec;
  /* A size below 0 (D = -256) describes no buffer; a kernel indexing
  ** rows by it would reach before the pointer. */
  if (ext >= 0) return KT_OK;
  return kt__err(p->env->id, KT_ERR_ARGS, "%s: arg %d (%s): its extent, %s, is %lld elements: below 0", s->name, i,
                 s->params[i].name, s->params[i].extent.text, (long long)ext);
}

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
    if ((rc = kt__extent_check(p, i, ext))) return (kt_status)rc;
    uint64_t bytes, esize = (uint64_t)c->slots[q->esize_slot];
    /* No buffer runs past the end of the address space: the kernel's
    ** addresses would wrap round to others, and its writes with them. */
    if (__builtin_mul_overflow((uint64_t)ext, esize, &bytes) || bytes > UINT64_MAX - args[i].v.ptr)
      return kt__err(p->env->id, KT_ERR_ARGS,
                     "%s: arg %d (%s): its extent, %s, is %lld elements of %llu bytes: from 0x%llx they pass the end "
                     "of the address space",
                     s->name, i, q->name, q->extent.text, (long long)ext, (unsigned long long)esize,
                     (unsigned long long)args[i].v.ptr);
    r[*n] = (kt__range){.start = args[i].v.ptr, .end = args[i].v.ptr + bytes, .param = i,
                        .written = q->access != KT__IN, .consumed = q->access == KT__CONSUMED};
    (*n)++;
  }
  return KT_OK;
}

static uint64_t shared_bytes(const kt__range *a, const kt__range *b) {
  uint64_t lo = a->start > b->start ? a->start : b->start, hi = a->end < b->end ? a->end : b->end;
  return hi > lo ? hi - lo : 0;
}

/* Overlap is allowed only between two reads, or, for a spec that runs in
** place, between a written range and an identical one that is only read:
** anything partial makes the result depend on the order programs run. A
** consumed range may lose its bytes while the other is read: never. */
int kt__alias_partner(const kt__range *r, int n, int i, int inplace) {
  if (!r[i].written) return -1;
  for (int j = 0; j < n; j++) {
    if (j == i || !shared_bytes(&r[i], &r[j])) continue;
    int identical = r[i].start == r[j].start && r[i].end == r[j].end;
    if (!(inplace && identical && !r[j].written && !r[i].consumed)) return j;
  }
  return -1;
}

kt_status kt__alias_refuse(kt__prog *p, const kt__range *r, int n) {
  const kt__spec *s = p->spec;
  for (int i = 0; i < n; i++) {
    int j = kt__alias_partner(r, n, i, s->inplace);
    if (j < 0) continue;
    const kt__range *a = &r[i], *b = &r[j];
    const char *an = s->params[a->param].name, *bn = s->params[b->param].name;
    char where[160];
    if (a->start == b->start && a->end == b->end) snprintf(where, sizeof where, "all %llu bytes (the same range)",
                                                          (unsigned long long)(a->end - a->start));
    else if (a->start == b->start) snprintf(where, sizeof where, "%llu bytes (both start at the same byte)",
                                            (unsigned long long)shared_bytes(a, b));
    else snprintf(where, sizeof where, "%llu bytes (%s starts %llu bytes %s %s)", (unsigned long long)shared_bytes(a, b),
                  an, (unsigned long long)(a->start > b->start ? a->start - b->start : b->start - a->start),
                  a->start > b->start ? "after" : "before", bn);
    const char *why = b->written    ? "two written args cannot share bytes"
                      : a->consumed ? "a consumed arg is left undefined, so it cannot share bytes"
                      : s->inplace  ? "running in place needs identical ranges"
                                   : "this kernel cannot run in place";
    return kt__err(p->env->id, KT_ERR_ALIAS, "%s: %s (%s) overlaps %s%s in %s; %s", s->name, an,
                   a->consumed ? "consumed" : "written", bn, b->written ? " (written)" : "", where, why);
  }
  return KT_OK;
}

kt_status kt__call_alias(kt__prog *p, const kt__call *c, const kt_arg *args, kt__range *r, int *n) {
  kt_status st = kt__call_ranges(p, c, args, r, n);
  return st ? st : kt__alias_refuse(p, r, *n);
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
  int groups = 0, open = -1; /* open: the group ranges up to end belong to */
  uint64_t end = 0;
  for (int i = 0; i < n; i++) {
    kt__range *x = order[i];
    /* An empty range shares no byte: a group of its own, which neither
    ** ends the open group nor joins it. */
    if (x->start == x->end) {
      x->group = groups++;
      continue;
    }
    /* Overlap means sharing a byte: touching ranges stay apart. */
    if (open < 0 || x->start >= end) {
      open = groups++;
      end = x->end;
    } else if (x->end > end) {
      end = x->end;
    }
    x->group = open;
  }
  return groups;
}
