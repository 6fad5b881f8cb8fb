#include "tune/search.h"

/* Exhaustive search measures every candidate; beyond this many, the
** automatic choice samples them at random within a budget. */
#define AUTO_EXHAUSTIVE_MAX 256

static const struct {
  kt_strategy which;
  const kt__strategy *s;
} table[] = {
    {KT_STRATEGY_EXHAUSTIVE, &kt__strategy_exhaustive},
    {KT_STRATEGY_RANDOM, &kt__strategy_random},
    {KT_STRATEGY_LOCAL, &kt__strategy_local},
};

const kt__strategy *kt__strategy_for(kt_strategy which, int pending) {
  if (which == KT_STRATEGY_AUTO) which = pending <= AUTO_EXHAUSTIVE_MAX ? KT_STRATEGY_EXHAUSTIVE : KT_STRATEGY_RANDOM;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].which == which) return table[i].s;
  return NULL;
}
