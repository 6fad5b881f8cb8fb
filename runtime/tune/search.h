/* The candidates of one tuning and the strategies that choose which to try.
** A strategy proposes the next batch from the results so far; the tuner
** compiles a batch in parallel and runs its trials, then asks again.
** Adding a strategy is one file defining a kt__strategy, and a row of the
** table in search.c. */
#ifndef KT_SEARCH_H
#define KT_SEARCH_H

#include "device/driver.h"
#include "spec/key.h"
#include "spec/spec.h"

/* A candidate's state: KT_TRIAL_* once decided, or pending. */
#define KT__PENDING (-1)

typedef struct kt__cand {
  int64_t cfg[KT_MAX_CFIELDS];
  char json[KT_CONFIG_JSON_MAX]; /* canonical config JSON */
  kt__call c;              /* the call with this config set */
  int status;              /* KT_TRIAL_*, or KT__PENDING */
  int prior;               /* decided by an earlier tuning (cache trials),
                              or quarantined: not run again */
  int quarantined;         /* it faulted or hung for this key before */
  int remeasured;
  int unconfirmed;         /* rejected on the caller's data but not on the
                              tuner's own inputs: reported, never stored */
  int transient;           /* refused for a cause of this process, not of
                              the config (its compile failed, but not in
                              NVRTC's verdict on the source): reported,
                              never stored */
  int pruned;              /* given back uncompiled by the build (skip) */
  int seed;                /* k > 0: the k-th most chosen config of the
                              spec's other keys on this device (tried
                              first by the random search) */
  kt_status compiled;
  kt__funcattrs attrs;
  double median, spread;   /* microseconds, when status is ok */
  char detail[1024];       /* why it was rejected */
} kt__cand;

/* What a strategy sees: the candidates with their results so far. */
typedef struct kt__search {
  const kt__spec *spec;
  kt__cand *cand;
  int ncand;
  const int64_t *fallback; /* the reference config */
  uint64_t seed;           /* from the key, so a rerun tries the same order */
  int batch;               /* a good batch size: what compiles in parallel */
} kt__search;

/* Room for a strategy's own state, zeroed before its first call. */
#define KT__STRATEGY_STATE 64

typedef struct kt__strategy {
  const char *name;        /* "exhaustive", as ktune tune --strategy names it */
  int default_budget_s;    /* used when the caller gives no budget; 0: none */
  /* Write the indexes of the next pending candidates to try into batch (at
  ** most s->ncand); returns how many, 0 when the search is over. */
  int (*next)(const kt__search *s, void *state, int *batch);
} kt__strategy;

extern const kt__strategy kt__strategy_exhaustive, kt__strategy_random, kt__strategy_local;

/* The strategy for a kt_strategy (AUTO: by the number of pending
** candidates); NULL for an unknown code. */
const kt__strategy *kt__strategy_for(kt_strategy which, int pending);

/* Up to max pending candidates into batch, the first in the seeded order:
** the seeds (other keys' configs, the most chosen first), then an order
** fixed by s->seed; returns how many. */
int kt__search_sample(const kt__search *s, int *batch, int max);

static inline int kt__cand_ok(const kt__cand *cd) { return cd->status == KT_TRIAL_OK; }
/* Whether the cache may keep cd's result: not a rejection only the
** caller's data caused, nor a failure of this process. */
static inline int kt__cand_keepable(const kt__cand *cd) { return !cd->unconfirmed && !cd->transient; }

#endif
