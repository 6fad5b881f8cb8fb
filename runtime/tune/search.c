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

/* The position of candidate i in the seeded order: a hash of the seed and
** i, so the order needs no memory of its own. */
static uint64_t rank(uint64_t seed, int i) {
  uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Whether candidate i goes before j: seeds first, by their rank, then the
** seeded order. */
static int before(const kt__search *s, int i, int j) {
  int si = s->cand[i].seed, sj = s->cand[j].seed;
  if (si > 0 || sj > 0) return si > 0 && (sj <= 0 || si < sj);
  return rank(s->seed, i) < rank(s->seed, j);
}

int kt__search_sample(const kt__search *s, int *batch, int max) {
  int n = 0;
  while (n < max) {
    int best = -1;
    for (int i = 0; i < s->ncand; i++) {
      if (s->cand[i].status != KT__PENDING) continue;
      int taken = 0;
      for (int j = 0; j < n && !taken; j++) taken = batch[j] == i;
      if (!taken && (best < 0 || before(s, i, best))) best = i;
    }
    if (best < 0) break;
    batch[n++] = best;
  }
  return n;
}

const kt__strategy *kt__strategy_for(kt_strategy which, int pending) {
  if (which == KT_STRATEGY_AUTO) which = pending <= AUTO_EXHAUSTIVE_MAX ? KT_STRATEGY_EXHAUSTIVE : KT_STRATEGY_RANDOM;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].which == which) return table[i].s;
  return NULL;
}
