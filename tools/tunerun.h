/* A run of ktune tune: its options, its jobs, and what it reports
** (tunereport.c: text, JSON, progress) and how it runs them (tunepool.c:
** in this process, or one worker process per GPU). */
#ifndef KT_TUNERUN_H
#define KT_TUNERUN_H

#include "tunejob.h"

typedef struct tune_run {
  topts o;
  job *jobs;
  int njobs, cap;
  int tty;
  double t0;
  int current;           /* job shown by the progress line */
  long long compiles;    /* NVRTC compiles in this process, -1 with workers */
  char qevents[32][600]; /* quarantined during this tune_run */
  int nq;
} tune_run;

/* tunereport.c */
void run_progress_line(tune_run *r, const job *j, int done, int total, double best_us);
void run_on_progress(void *user, const char *kernel, const char *key, int done, int total, double best_us);
void run_report(tune_run *r, const job *j);
void run_note_quarantine(tune_run *r, const char *what);
void run_note_fault(tune_run *r, const job *j);
/* The table (or the JSON summary) after the run; returns how many jobs
** failed. */
int run_summary(tune_run *r);

/* tunepool.c: 0 when every job ran (failed jobs included), -1 when the run
** could not go on, 1 when a fault stopped it. */
int run_inprocess(tune_run *r);
int run_workers(tune_run *r);

#endif
