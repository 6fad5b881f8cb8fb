/* The report kt_kernel_tune and kt_kernel_lookup return: built from the
** tuner when a call tunes (miss.c tells it), else from the cache's rows. */
#ifndef KT_REPORT_H
#define KT_REPORT_H

#include "dispatch/handles.h"

struct kt__report {
  kt_tune_report pub;        /* first: what the caller holds */
  int tuned;                 /* filled by a tuning of this call */
  int own_inputs;            /* kt_kernel_tune_shape: the call's pointers are
                                made up; the tuning makes its inputs */
  char key[KT_KEY_JSON_MAX], config[KT_CONFIG_JSON_MAX], dflt[KT_CONFIG_JSON_MAX];
  char at[256];              /* pub.timed_at's text */
  kt_candidate *cand;
  int ncand, cap;
  char **strings;            /* each candidate's config and detail */
  int nstrings;
};

/* A report of k with nothing in it yet; NULL when out of memory. */
kt__report *kt__report_new(kt_kernel *k);
/* What a tuning came to (t after kt__tuner_run; writable: whether the
** cache took its rows). */
void kt__report_tuning(kt__report *r, const kt__tuner *t, int writable);
/* Where a tuning of the bound call c of args would time it (tune_at); a
** tuning of the call (kt__report_tuning) then says where it did. */
void kt__report_timed_at(kt__report *r, kt_kernel *k, const kt__call *c, const kt_arg *args);
/* Not tuned by this call: the cache's row and trials for the key, when the
** config in use (r->config) is the stored one. known: the table had the
** key before. */
void kt__report_from_cache(kt_kernel *k, kt__report *r, int known);
/* The public report, its candidates and the seconds since t0 set. */
kt_tune_report *kt__report_done(kt__report *r, double t0);

#endif
