/* Local search: from the reference config (or the best measured so far) to
** the best config at most one step away in each field, until none is
** better. Several fields move at once, since constraints often tie one
** field to another (ITEMS to BLOCK and VEC) and a move of one alone is
** refused. Where the climb stalls, one batch of candidates in the seeded
** order (kt__search_sample) is measured, and the climb goes on from the
** best config measured, if that is better than where it stalled; it ends
** at the first batch that finds nothing better. Constraints can leave the
** default config a few valid neighbours, every one far slower than
** configs that differ from it by several steps in several fields: on
** layernorm_bwd at D = 4096 the climb ended after 3 candidates, all on
** the streaming path, at 4 to 5 times the exhaustive best. */
#include <string.h>

#include "tune/search.h"

typedef struct state {
  int cur;     /* the config moved from, + 1 (0: not chosen yet) */
  int started;
  int sampled; /* a batch was measured since cur last moved */
} state;

/* Whether a and b differ, each field by at most one step of its list. */
static int neighbours(const kt__spec *s, const int64_t *a, const int64_t *b) {
  int diff = 0;
  for (int f = 0; f < s->ncfields; f++) {
    if (a[f] == b[f]) continue;
    int d = kt__cfield_value(&s->cfields[f], a[f]) - kt__cfield_value(&s->cfields[f], b[f]);
    if (d != 1 && d != -1) return 0;
    diff++;
  }
  return diff > 0;
}

/* Whether candidate i was measured and is faster than j (or j failed). */
static int better(const kt__search *s, int i, int j) {
  return kt__cand_ok(&s->cand[i]) && (!kt__cand_ok(&s->cand[j]) || s->cand[i].median < s->cand[j].median);
}

/* The start: the reference config, else the best measured, else the first
** pending. */
static int start(const kt__search *s) {
  int cur = -1;
  for (int i = 0; i < s->ncand; i++)
    if (!memcmp(s->cand[i].cfg, s->fallback, (size_t)s->spec->ncfields * sizeof *s->fallback)) cur = i;
  for (int i = 0; i < s->ncand; i++)
    if (cur < 0 || better(s, i, cur)) cur = i;
  for (int i = 0; i < s->ncand && cur < 0; i++)
    if (s->cand[i].status == KT__PENDING) cur = i;
  return cur;
}

/* The best candidate measured, cur where none is better. */
static int best_from(const kt__search *s, int cur) {
  int best = cur;
  for (int i = 0; i < s->ncand; i++)
    if (better(s, i, best)) best = i;
  return best;
}

static int next(const kt__search *s, void *st, int *batch) {
  state *w = st;
  if (!w->started) {
    w->started = 1;
    w->cur = start(s) + 1;
    if (w->cur && s->cand[w->cur - 1].status == KT__PENDING) {
      batch[0] = w->cur - 1;
      return 1;
    }
  }
  for (int cur = w->cur - 1; cur >= 0;) {
    int m = 0;
    for (int i = 0; i < s->ncand; i++)
      if (s->cand[i].status == KT__PENDING && neighbours(s->spec, s->cand[i].cfg, s->cand[cur].cfg)) batch[m++] = i;
    if (m) return m;
    /* Every neighbour is decided. cur is the best measured until its
    ** neighbours or a batch find better (it starts as the best, and moves
    ** only to the best): move to that, a neighbour or a batch's; else
    ** measure a batch, once for each place the climb stalls. */
    int best = best_from(s, cur);
    if (best == cur) {
      if (w->sampled) break;
      w->sampled = 1;
      return kt__search_sample(s, batch, s->batch);
    }
    cur = best;
    w->cur = cur + 1;
    w->sampled = 0;
  }
  return 0;
}

const kt__strategy kt__strategy_local = {"local", 0, next};
