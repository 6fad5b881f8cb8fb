#include "tune/inputs.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/pool.h"

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

/* Values are made in chunks of CHUNK elements, each from a seed of its own
** (the buffer's and the chunk's index), so that they do not depend on how
** many threads make them: every host makes the same inputs for a key. */
#define CHUNK ((size_t)1 << 18)

typedef struct fillctx {
  kt__gen g;
  kt_dtype dt;
  void *host;
  size_t n, chunk;
  uint64_t seed;
} fillctx;

/* splitmix64: a chunk's xorshift state from the buffer's seed; never 0. */
static uint64_t chunk_seed(uint64_t seed, uint64_t c) {
  uint64_t z = seed + (c + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return z ? z : 1;
}

static void fill_chunk(void *user, int c) {
  const fillctx *f = user;
  size_t lo = (size_t)c * f->chunk, hi = lo + f->chunk < f->n ? lo + f->chunk : f->n;
  uint64_t s = chunk_seed(f->seed, (uint64_t)c);
  double spare = 0;
  for (size_t i = lo; i < hi; i++) {
    double v = f->g.a, u1, u2, r;
    switch (f->g.kind) {
      case KT__G_RANDN:
        /* Box-Muller gives two values a pair of draws: cos, then sin. */
        if ((i - lo) & 1) {
          v = spare;
          break;
        }
        u1 = uni(&s), u2 = uni(&s);
        r = sqrt(-2 * log(u1 > 1e-300 ? u1 : 1e-300));
        v = r * cos(6.283185307179586 * u2);
        spare = r * sin(6.283185307179586 * u2);
        break;
      case KT__G_UNIFORM: v = f->g.a + (f->g.b - f->g.a) * uni(&s); break;
      case KT__G_ONES: v = 1; break;
      case KT__G_ARANGE: v = (double)i; break;
      case KT__G_MASK: v = uni(&s) < f->g.a; break;
      default: break;
    }
    kt_dtype_store(f->dt, f->host, i, v);
  }
}

int kt__inputs_fill(const kt__prog *p, const kt__call *c, const kt__param *q, kt_dtype dt, void *host, size_t n,
                    uint64_t seed, int nthreads) {
  int is_float = dt == KT_F32 || dt == KT_F16 || dt == KT_BF16 || dt == KT_F64;
  kt__gen g = q->gen;
  if (q->access == KT__OUT || (g.kind == KT__G_NONE && !is_float)) g.kind = KT__G_ZEROS;
  else if (g.kind == KT__G_NONE) g.kind = KT__G_RANDN;
  if (g.kind == KT__G_PERMUTATION) return permutation(p, c, &g, dt, host, n, &seed);
  if (g.kind == KT__G_ZEROS) return memset(host, 0, n * kt_dtype_size(dt)), 0;
  fillctx f = {.g = g, .dt = dt, .host = host, .n = n, .chunk = CHUNK, .seed = seed};
  /* Past 2^31 chunks (2^49 elements), longer chunks: still one per index. */
  while (n / f.chunk >= (size_t)INT_MAX) f.chunk *= 2;
  int chunks = (int)((n + f.chunk - 1) / f.chunk);
  kt__parallel_for(chunks, nthreads > 0 ? nthreads : 1, fill_chunk, &f);
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
  uint64_t mine = *seed;
  uni(seed); /* the next buffer's seed */
  if (!host || kt__inputs_fill(p, c, q, dt, host, esz ? bytes / esz : 0, mine, kt__ncpus())) {
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
