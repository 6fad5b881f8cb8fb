#include "tune/evidence.h"

#include <stdio.h>

#include "base/alloc.h"

/* The candidates measured with one value, or with one pair of values. */
typedef struct cell {
  int n;
  double best; /* the fastest of them, microseconds */
} cell;

struct kt__evidence {
  const kt__spec *s;
  int at[KT_MAX_CFIELDS];                 /* field f's values: one[at[f] + i] */
  int pair_at[KT_MAX_CFIELDS][KT_MAX_CFIELDS]; /* f < g: pair[pair_at[f][g] + i * n_g + j] */
  cell *one, *pair;
  double best;                            /* the fastest measured; 0: none yet */
};

kt__evidence *kt__evidence_new(const kt__spec *s) {
  kt__evidence *e = kt__calloc(1, sizeof *e);
  if (!e) return NULL;
  e->s = s;
  int n1 = 0, n2 = 0;
  for (int f = 0; f < s->ncfields; f++) {
    e->at[f] = n1;
    n1 += s->cfields[f].n;
    for (int g = f + 1; g < s->ncfields; g++) {
      e->pair_at[f][g] = n2;
      n2 += s->cfields[f].n * s->cfields[g].n;
    }
  }
  e->one = kt__calloc((size_t)n1 + 1, sizeof *e->one);
  e->pair = kt__calloc((size_t)n2 + 1, sizeof *e->pair);
  if (!e->one || !e->pair) {
    kt__evidence_free(e);
    return NULL;
  }
  return e;
}

void kt__evidence_free(kt__evidence *e) {
  if (!e) return;
  kt__free(e->one);
  kt__free(e->pair);
  kt__free(e);
}

static cell *pair_cell(const kt__evidence *e, int f, int i, int g, int j) {
  if (f > g) return pair_cell(e, g, j, f, i);
  return &e->pair[e->pair_at[f][g] + i * e->s->cfields[g].n + j];
}

static void add(cell *c, double us) {
  if (!c->n++ || us < c->best) c->best = us;
}

/* vi[f]: the index of cfg[f] in field f's values, -1 where it has none. */
static void value_indices(const kt__spec *s, const int64_t *cfg, int *vi) {
  for (int f = 0; f < s->ncfields; f++) vi[f] = kt__cfield_value(&s->cfields[f], cfg[f]);
}

void kt__evidence_note(kt__evidence *e, const int64_t *cfg, double median_us) {
  const kt__spec *s = e->s;
  int vi[KT_MAX_CFIELDS];
  value_indices(s, cfg, vi);
  for (int f = 0; f < s->ncfields; f++) {
    if (vi[f] < 0) continue;
    add(&e->one[e->at[f] + vi[f]], median_us);
    for (int g = f + 1; g < s->ncfields; g++)
      if (vi[g] >= 0) add(pair_cell(e, f, vi[f], g, vi[g]), median_us);
  }
  if (e->best <= 0 || median_us < e->best) e->best = median_us;
}

/* Whether field f's value (index vi[f]) lost alone and beside every other
** value of the candidate. */
static int lost_beside_all(const kt__evidence *e, const int *vi, int f) {
  const kt__spec *s = e->s;
  const double bar = KT__PRUNE_MARGIN * e->best;
  const cell *c1 = &e->one[e->at[f] + vi[f]];
  if (c1->n < KT__PRUNE_MIN || c1->best < bar) return 0;
  for (int g = 0; g < s->ncfields; g++) {
    if (g == f) continue;
    if (vi[g] < 0) return 0;
    const cell *c = pair_cell(e, f, vi[f], g, vi[g]);
    if (c->n < KT__PRUNE_PAIR_MIN || c->best < bar) return 0;
  }
  return 1;
}

int kt__evidence_prunes(const kt__evidence *e, const int64_t *cfg, char *why, size_t n) {
  const kt__spec *s = e->s;
  if (e->best <= 0) return 0;
  int vi[KT_MAX_CFIELDS];
  value_indices(s, cfg, vi);
  for (int f = 0; f < s->ncfields; f++) {
    if (vi[f] < 0 || !lost_beside_all(e, vi, f)) continue;
    const cell *c1 = &e->one[e->at[f] + vi[f]];
    if (why)
      snprintf(why, n, "not compiled: the %d candidates measured with %s=%lld (at least %d beside each of its other "
               "values) took %.2f us at best, the best measured %.2f us", c1->n, s->cfields[f].name, (long long)cfg[f],
               KT__PRUNE_PAIR_MIN, c1->best, e->best);
    return 1;
  }
  return 0;
}
