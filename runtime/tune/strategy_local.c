/* Local search: from the reference config (or the best measured so far) to
** the best config at most one step away in each field, until none is
** better. Several fields move at once, since constraints often tie one
** field to another (ITEMS to BLOCK and VEC) and a move of one alone is
** refused. */
#include <string.h>

#include "tune/search.h"

typedef struct state {
  int cur;      /* the config moved from, + 1 (0: not chosen yet) */
  int started;
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

/* The start: the reference config, else the best measured, else the first
** pending. */
static int start(const kt__search *s) {
  int cur = -1;
  for (int i = 0; i < s->ncand; i++)
    if (!memcmp(s->cand[i].cfg, s->fallback, (size_t)s->spec->ncfields * sizeof *s->fallback)) cur = i;
  for (int i = 0; i < s->ncand; i++)
    if (kt__cand_ok(&s->cand[i]) && (cur < 0 || !kt__cand_ok(&s->cand[cur]) || s->cand[i].median < s->cand[cur].median))
      cur = i;
  for (int i = 0; i < s->ncand && cur < 0; i++)
    if (s->cand[i].status == KT__PENDING) cur = i;
  return cur;
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
    /* Every neighbour is decided: move to the best of them, if better. */
    int best = cur;
    for (int i = 0; i < s->ncand; i++)
      if (kt__cand_ok(&s->cand[i]) && neighbours(s->spec, s->cand[i].cfg, s->cand[cur].cfg) &&
          (!kt__cand_ok(&s->cand[best]) || s->cand[i].median < s->cand[best].median))
        best = i;
    if (best == cur) break;
    cur = best;
    w->cur = cur + 1;
  }
  return 0;
}

const kt__strategy kt__strategy_local = {"local", 0, next};
