/* One (spec, shape) tuning of ktune tune, and the worker process that runs
** such jobs for the parent (tunepool.c) over a pair of pipes:
**   parent -> worker  "J <job>\n" (run it), "Q\n" (quit)
**   worker -> parent  "P <done> <total> <best_us>\n" after each trial,
**                     "R <fields>\n" with the result (tunejob_decode). */
#ifndef KT_TUNEJOB_H
#define KT_TUNEJOB_H

#include "ktune.h"
#include "shape.h"

/* What became of a job; the worker protocol carries the name. */
#define JOB_STATUS_MAP(X)                                                     \
  X(PENDING, "pending")      /* not run yet */                                \
  X(TUNED, "tuned")          /* tuned now */                                  \
  X(CACHED, "cached")        /* the cache had it */                           \
  X(UNSTABLE, "unstable")    /* the default does not reproduce: not tuned */  \
  X(REJECTED, "rejected")    /* every candidate rejected */                   \
  X(FAULT, "fault")          /* a candidate faulted: quarantined */           \
  X(ERROR, "error")          /* the job could not run (the message says) */   \
  X(NOT_RUN, "not run")      /* the run stopped before it */

typedef enum job_status {
#define JOB_ENUM(name, text) JOB_##name,
  JOB_STATUS_MAP(JOB_ENUM)
#undef JOB_ENUM
} job_status;

const char *job_status_name(job_status s);
/* The status named, or -1. */
int job_status_parse(const char *name);
/* Tuned and cached jobs are done; the others count as failed. */
static inline int job_ok(job_status s) { return s == JOB_TUNED || s == JOB_CACHED; }

typedef struct topts {
  const char *specs[256];
  char names[256][64];   /* kernel names of specs */
  int nspecs;
  int force, isolate, json, plain, no_prune;
  double trial_timeout, budget;
  kt_strategy strategy;
  int devices[64], ndev; /* ndev -1: all */
  const char *cache;
  struct job *jobs;      /* for workers: the parent's job list */
} topts;

typedef enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
  int spec;
  char shape[SHAPE_MAX];
  char key[KT_KEY_MAX];
  int same_as;           /* an earlier job with this spec and key, or -1 */
  job_state state;       /* with workers */
  int restarts;
  double t_start;
  /* the result */
  job_status status;
  char config[KT_CONFIG_MAX], dflt[KT_CONFIG_MAX]; /* canonical JSON */
  double time_us, default_us, secs; /* -1: not measured */
  int tried, rejected;
  char fault[KT_CONFIG_MAX]; /* the config that faulted, as JSON, or "" */
  char timed_at[256];    /* the report's timed_at (tune_at), or "" */
  char message[1024];
} job;

/* Seconds on a monotonic clock. */
double tunejob_now(void);
/* Tune one job on rt (kt_kernel_tune_shape: on inputs the tuning makes,
** at the spec's tune_at sizes where it gives them), or find it cached
** without touching the GPU, unless force; fills the result fields. */
void tunejob_run(kt_runtime *rt, kt_kernel *k, job *j, int force);
/* A worker's main: a runtime on device, jobs read from in, lines written
** to out. Returns the exit status (3 after a fault: the context is lost). */
int tunejob_worker(const topts *o, int device, int in, int out);
/* tuneline.c: j's result as the worker's "R <fields>\n" line in buf (n
** bytes; a line too long is cut, still ending in a newline); returns its
** length. tunejob_decode fills j's result from the fields after "R ", or
** marks it an error where they do not parse. */
/* A result line holds every text field of a job whole (config, default,
** fault, timed_at, message) and its numbers. */
#define TUNEJOB_LINE_MAX (3 * KT_CONFIG_MAX + 256 + 1024 + 256)
int tunejob_encode(const job *j, char *buf, size_t n);
void tunejob_decode(job *j, const char *fields);

#endif
