/* The tuner: the one entry by which dispatch has a key tuned. It lists the
** candidates, compiles them in parallel, validates each against the
** reference config on scratch copies of the written buffers, times the
** valid ones, and stores trials and the winner in the cache. It never
** launches on the caller's buffers and never calls back into dispatch. */
#ifndef KT_TUNER_H
#define KT_TUNER_H

#include <stdatomic.h>

#include "call/call.h"
#include "tune/search.h"

typedef struct kt__tuneopts {
  kt_strategy strategy;
  double budget_s;           /* > 0: no trial starts after this many seconds */
  int retune;                /* measure again what the cache says was measured */
  int no_prune;              /* compile and measure every candidate */
  kt_progress_fn progress;   /* after each trial, or NULL */
  void *progress_user;
  const atomic_int *cancel;  /* nonzero: stop before the next trial, store
                                nothing, return KT_ERR_CANCELLED; or NULL */
  int own_inputs;            /* the call's buffers are not to be read or
                                written (a background tuning, after the call
                                returned): where the call's own sizes are
                                timed, their inputs are made from "init" */
} kt__tuneopts;

typedef struct kt__tuner kt__tuner;

/* What a run came to, as data (ktune.h's kt_tune_report is made from it). */
typedef struct kt__tuneresult {
  kt_tune_outcome outcome; /* TUNED, TUNED_LOCAL, UNSTABLE or NO_VALID */
  int win;                 /* index of the winner among the candidates, or -1 */
  int tried, measured, rejected, unconfirmed;
  int pruned;              /* not compiled: predicted to lose */
  double default_us;       /* the reference's median, -1 when not measured */
} kt__tuneresult;

/* Begin a tuning of c's key (c bound, its config not set) for args: the
** candidates the constraints allow for this call, less those the cache
** says were measured for this key (unless retune) or are quarantined, the
** configs the kernel's other keys chose marked as seeds (cand.seed). key
** is the key's canonical JSON. Caller owns *out; free with kt__tuner_free(). */
kt_status kt__tuner_new(kt__prog *p, const kt__tuneopts *o, const kt__call *c, const kt_arg *args, const char *key,
                        kt__tuner **out);
/* How many candidates no earlier tuning of this key measured. */
int kt__tuner_pending(const kt__tuner *t);
/* Of them, how many the earlier tunings' measurements would not prune (all
** of them with no_prune): a key with a stored winner is tuned again only
** while one is left. A pruned candidate is never stored, so counting it
** would tune such a key again in every process. */
int kt__tuner_open(const kt__tuner *t);
/* Tune on a private stream ordered after caller: the reference config
** first, then the strategy's batches, the best few measured again; best
** gets the winner. KT_ERR_NO_CONFIG when every candidate was rejected,
** KT_ERR_DEVICE_FAULT naming a config that left the context unusable. */
kt_status kt__tuner_run(kt__tuner *t, kt_stream caller, const int64_t *reference, int64_t *best);
/* After kt__tuner_run: what it came to, and the candidates (*n of them,
** in config-space order) with their statuses. Borrowed from t. */
const kt__tuneresult *kt__tuner_result(const kt__tuner *t);
/* Where the run timed the key, as "N=16778 (the call's N=1)", or NULL where
** at the call's own sizes (no tune_at, or it fell back to them). */
const char *kt__tuner_timed_at(const kt__tuner *t);
const kt__cand *kt__tuner_candidates(const kt__tuner *t, int *n);
void kt__tuner_free(kt__tuner *t);

#endif
