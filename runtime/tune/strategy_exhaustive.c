/* Every candidate, in one batch so that all of them compile in parallel. */
#include "tune/search.h"

static int next(const kt__search *s, void *state, int *batch) {
  int *done = state, n = 0;
  if (*done) return 0;
  *done = 1;
  for (int i = 0; i < s->ncand; i++)
    if (s->cand[i].status == KT__PENDING) batch[n++] = i;
  return n;
}

const kt__strategy kt__strategy_exhaustive = {"exhaustive", 0, next};
