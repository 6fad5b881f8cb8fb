/* A random order seeded by the key (a rerun on the same cache tries the
** same order), in batches that compile in parallel, until the budget is
** spent. The configs other keys of the spec chose on this device (seeds)
** go first, the most chosen first: a key beside tuned ones (another
** dtype, another size bucket) starts where they ended, and a budget that
** runs out has measured them. */
#include "tune/search.h"

static int next(const kt__search *s, void *state, int *batch) {
  (void)state;
  return kt__search_sample(s, batch, s->batch);
}

const kt__strategy kt__strategy_random = {"random", 10, next};
