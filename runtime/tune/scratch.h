/* Where a tuning runs its trials: scratch copies of every group of
** overlapping byte ranges that holds a written arg, between guard zones, a
** pristine copy to restore from before each trial, and the reference
** outputs each candidate is compared with. The caller's buffers are only
** ever read. */
#ifndef KT_SCRATCH_H
#define KT_SCRATCH_H

#include "call/alias.h"
#include "tune/devcompare.h"

typedef struct kt__group {
  uint64_t start, end;
  kt__dptr scratch, pristine;
  uint64_t off;   /* where start sits in scratch */
  int written, reads;
} kt__group;

typedef struct kt__scratch {
  kt__prog *p;
  const kt_arg *orig;              /* the caller's args, borrowed */
  kt_arg args[KT_MAX_PARAMS];      /* the same with written groups moved to scratch */
  kt__range r[KT_MAX_PARAMS];
  int nr;
  kt__group g[KT_MAX_PARAMS];
  int ng;
  kt_stream stream;                /* private; waits for the caller's first */
  void *ev;
  void *ref[KT_MAX_PARAMS];        /* the reference's written outputs, by param
                                      (host copies, when not compared on the device) */
  kt__dptr dref[KT_MAX_PARAMS];    /* the same on the device */
  kt__devcmp cmp;                  /* compares on the device when open */
  int on_device;
  void *host;                      /* staging for comparisons */
  size_t hostcap;
  char err[KT_ERRMAX];             /* the last device error */
} kt__scratch;

/* Ranges, groups, scratch and pristine copies for the call c (config not
** needed) of args, ordered after the caller's stream. On failure the
** message is in kt_errmsg() of p's runtime; free s in any case. */
kt_status kt__scratch_make(kt__scratch *s, kt__prog *p, const kt__call *c, const kt_arg *args, kt_stream caller,
                           const char *what);
void kt__scratch_free(kt__scratch *s);
/* Before every trial (a kt__benchopts prep): the scratch as the caller's
** buffers were, guard zones filled, outputs that read nothing poisoned. */
kt_status kt__scratch_restore(void *s, kt_stream stream);
/* Restore, launch c once on scratch and wait. The launch's own failure is
** in s->err. */
kt_status kt__scratch_run(kt__scratch *s, const kt__call *c);
/* Keep the outputs of the run just made as the reference. */
kt_status kt__scratch_keep_reference(kt__scratch *s);
/* Whether the guard zones are intact (*ok), else where it wrote in why. */
kt_status kt__scratch_guards(kt__scratch *s, int *ok, char *why, size_t wl);
/* Whether the outputs of the run just made match the reference within
** each output's tolerance (*ok), else the first difference in why. */
kt_status kt__scratch_compare(kt__scratch *s, int *ok, char *why, size_t wl);

#endif
