/* One (spec, shape) tuning of ktune tune, and the worker process that runs
** such jobs for the parent (cmd_tune.c) over a pair of pipes:
**   parent -> worker  "J <job>\n" (run it), "Q\n" (quit)
**   worker -> parent  "P <done> <total> <best_us>\n" after each trial,
**                     "R <fields>\n" with the result (tunejob_decode). */
#ifndef KT_TUNEJOB_H
#define KT_TUNEJOB_H

#include "ktune.h"

typedef struct topts {
  const char *specs[256];
  char names[256][64];   /* kernel names of specs */
  int nspecs;
  int force, isolate, json, plain;
  double trial_timeout, budget;
  kt_strategy strategy;
  int devices[64], ndev; /* ndev -1: all */
  const char *cache;
  struct job *jobs;      /* for workers: the parent's job list */
} topts;

typedef struct job {
  int spec;
  char shape[1024];
  char key[1024];
  int same_as;           /* an earlier job with this spec and key, or -1 */
  int state;             /* 0 pending, 1 running, 2 done */
  int restarts;
  double t_start;
  /* the result */
  char status[16];       /* tuned, cached, fault, error, not run */
  char config[256], dflt[256];
  double time_us, default_us, secs;
  int tried, rejected;
  char fault[256];       /* the config that faulted, as JSON, or "" */
  char message[1024];
} job;

/* Seconds on a monotonic clock. */
double tunejob_now(void);
/* Tune (or find cached) one job on rt; fills the result fields. */
void tunejob_run(kt_runtime *rt, kt_kernel *k, job *j, uint64_t seed);
/* A worker's main: a runtime on device, jobs read from in, lines written
** to out. Returns the exit status (3 after a fault: the context is lost). */
int tunejob_worker(const topts *o, int device, int in, int out);
void tunejob_decode(job *j, const char *fields);

#endif
