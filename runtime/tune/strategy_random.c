/* A random order seeded by the key (a rerun on the same cache tries the
** same order), in batches that compile in parallel, until the budget is
** spent. The configs other keys of the spec chose on this device (seeds)
** go first, the most chosen first: a key beside tuned ones (another
** dtype, another size bucket) starts where they ended, and a budget that
** runs out has measured them. */
#include "tune/search.h"

/* The position of pending candidate i in the seeded order: a hash of the
** seed and i, so the order needs no memory of its own. */
static uint64_t rank(uint64_t seed, int i) {
  uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/* Whether pending candidate i goes before j: seeds first, by their rank,
** then the seeded order. */
static int before(const kt__search *s, int i, int j) {
  int si = s->cand[i].seed, sj = s->cand[j].seed;
  if (si > 0 || sj > 0) return si > 0 && (sj <= 0 || si < sj);
  return rank(s->seed, i) < rank(s->seed, j);
}

static int next(const kt__search *s, void *state, int *batch) {
  (void)state;
  int n = 0;
  /* The batch: the pending candidates that go first. */
  while (n < s->batch) {
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

const kt__strategy kt__strategy_random = {"random", 10, next};
