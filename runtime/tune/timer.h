/* Timing a call on the GPU: a private stream, CUDA events around repeated
** launches, an L2 flush before each repetition, the median and the spread. */
#ifndef KT_TIMER_H
#define KT_TIMER_H

#include "call/call.h"

/* A private stream, two events and an L2-flush buffer, made once and used
** for many measurements. */
typedef struct kt__timer kt__timer;
kt_status kt__timer_new(kt__prog *p, kt__timer **out);
void kt__timer_free(kt__timer *t);

typedef struct kt__benchopts {
  int min_reps;
  double min_ms, max_ms; /* of kernel time */
  double max_wall_ms;    /* of wall time, once min_reps are done: short
                            kernels spend most of it between repetitions */
  kt_stream after;       /* the private stream first waits for this one */
  kt_status (*prep)(void *user, kt_stream s); /* before each repetition,
                            outside the timed region (the tuner restores
                            in-place inputs there); may be NULL */
  void *user;
  kt__timer *timer;      /* NULL: one for this measurement */
  int max_burst;         /* > 1: kernels under 0.2 ms are timed as this many
                            back-to-back launches per repetition */
} kt__benchopts;

/* Median and spread of c's launch in microseconds. */
kt_status kt__bench(kt__prog *p, const kt__call *c, const kt_arg *args, const kt__benchopts *o,
                    double *median_us, double *spread_us);

#endif
