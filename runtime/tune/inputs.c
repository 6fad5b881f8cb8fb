#include "tune/inputs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static double uni(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return (double)(*s >> 11) / 9007199254740992.0;
}

/* permutation(n): n is a number or the value of a scalar param. */
static int permutation(const kt__prog *p, const kt__call *c, const kt__gen *g, kt_dtype dt, void *host, size_t n,
                       uint64_t *seed) {
  int i = kt__spec_param(p->spec, g->arg);
  int64_t m = i >= 0 ? (p->spec->params[i].type == KT__P_PTR ? 0 : c->slots[i]) : strtoll(g->arg, NULL, 10);
  if (m <= 0) m = 1;
  int64_t *perm = kt__malloc((size_t)m * sizeof *perm);
  if (!perm) return -1;
  for (int64_t k = 0; k < m; k++) perm[k] = k;
  for (int64_t k = m - 1; k > 0; k--) {
    int64_t j = (int64_t)(uni(seed) * (double)(k + 1)), t = perm[k];
    perm[k] = perm[j], perm[j] = t;
  }
  for (size_t k = 0; k < n; k++) kt_dtype_store(dt, host, k, (double)perm[k % (size_t)m]);
  kt__free(perm);
  return 0;
}

/* n values of param q into host; -1 when out of memory. */
static int fill(const kt__prog *p, const kt__call *c, const kt__param *q, kt_dtype dt, void *host, size_t n,
                uint64_t *seed) {
  int is_float = dt == KT_F32 || dt == KT_F16 || dt == KT_BF16 || dt == KT_F64;
  kt__gen g = q->gen;
  if (q->access == KT__OUT || (g.kind == KT__G_NONE && !is_float)) g.kind = KT__G_ZEROS;
  else if (g.kind == KT__G_NONE) g.kind = KT__G_RANDN;
  if (g.kind == KT__G_PERMUTATION) return permutation(p, c, &g, dt, host, n, seed);
  if (g.kind == KT__G_ZEROS) return memset(host, 0, n * kt_dtype_size(dt)), 0;
  for (size_t i = 0; i < n; i++) {
    double v = g.a, u1, u2;
    switch (g.kind) {
      case KT__G_RANDN:
        u1 = uni(seed), u2 = uni(seed);
        v = sqrt(-2 * log(u1 > 1e-300 ? u1 : 1e-300)) * cos(6.283185307179586 * u2);
        break;
      case KT__G_UNIFORM: v = g.a + (g.b - g.a) * uni(seed); break;
      case KT__G_ONES: v = 1; break;
      case KT__G_ARANGE: v = (double)i; break;
      case KT__G_MASK: v = uni(seed) < g.a; break;
      default: break;
    }
    kt_dtype_store(dt, host, i, v);
  }
  return 0;
}

/* One buffer: allocated at the caller's offset modulo 256, filled, copied. */
static kt_status make_one(kt__prog *p, const kt__call *c, const kt__range *r, uint64_t *seed, kt__inputs *in) {
  const kt__param *q = &p->spec->params[r->param];
  kt_dtype dt = q->tvar >= 0 ? c->tvals[q->tvar] : q->dtype;
  size_t bytes = r->end - r->start, esz = kt_dtype_size(dt), off = r->start % 256;
  char err[KT_ERRMAX];
  kt_status st = kt__dev_malloc(&in->alloc[r->param], off + bytes, err, sizeof err);
  if (st) return kt__err(p->env->id, st, "%s: inputs for %s: %s", p->spec->name, q->name, err);
  in->args[r->param].v.ptr = in->alloc[r->param] + off;
  void *host = kt__malloc(bytes ? bytes : 1);
  if (!host || fill(p, c, q, dt, host, esz ? bytes / esz : 0, seed)) {
    kt__free(host);
    return kt__err(p->env->id, KT_ERR_NOMEM, "%s: inputs for %s: out of memory", p->spec->name, q->name);
  }
  st = bytes ? kt__dev_htod(in->args[r->param].v.ptr, host, bytes, err, sizeof err) : KT_OK;
  kt__free(host);
  return st ? kt__err(p->env->id, st, "%s: inputs for %s: %s", p->spec->name, q->name, err) : KT_OK;
}

kt_status kt__inputs_make(kt__prog *p, const kt__call *c, const kt_arg *args, uint64_t seed, kt__inputs *in) {
  memset(in, 0, sizeof *in);
  in->n = p->spec->nparams;
  memcpy(in->args, args, (size_t)in->n * sizeof *args);
  kt__range r[KT_MAX_PARAMS];
  int n;
  kt_status st = kt__call_ranges(p, c, args, r, &n);
  seed = seed * 2654435761u + 88172645463325252ULL;
  for (int i = 0; i < n && !st; i++) {
    int same = -1;
    for (int j = 0; j < i && same < 0; j++)
      if (r[j].start == r[i].start && r[j].end == r[i].end) same = r[j].param;
    if (same >= 0) in->args[r[i].param].v.ptr = in->args[same].v.ptr;
    else st = make_one(p, c, &r[i], &seed, in);
  }
  return st;
}

void kt__inputs_free(kt__inputs *in) {
  for (int i = 0; i < KT_MAX_PARAMS; i++) kt__dev_free(in->alloc[i]);
  memset(in, 0, sizeof *in);
}
