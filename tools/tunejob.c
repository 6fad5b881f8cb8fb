#include "tunejob.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "shape.h"

double tunejob_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The config that faulted, from the report, for the quarantine summary. */
static void faulted(const kt_tune_report *r, job *j) {
  for (int i = 0; r && i < r->ncandidates; i++)
    if (r->candidates[i].status == KT_TRIAL_FAULT && r->candidates[i].measured)
      snprintf(j->fault, sizeof j->fault, "%s", r->candidates[i].config);
}

/* The job status of an outcome. */
static job_status outcome_status(kt_tune_outcome o) {
  static const job_status st[] = {[KT_TUNE_CACHED] = JOB_CACHED,     [KT_TUNE_KNOWN] = JOB_CACHED,
                                  [KT_TUNE_TUNED] = JOB_TUNED,       [KT_TUNE_TUNED_LOCAL] = JOB_TUNED,
                                  [KT_TUNE_UNSTABLE] = JOB_UNSTABLE, [KT_TUNE_NO_VALID] = JOB_REJECTED,
                                  [KT_TUNE_NOT_TUNED] = JOB_ERROR};
  return (int)o >= 0 && (size_t)o < sizeof st / sizeof st[0] ? st[o] : JOB_ERROR;
}

/* The job's result fields from a report of its key. */
static void from_report(const kt_tune_report *r, job *j) {
  static const char *why[] = {[KT_TUNE_TUNED_LOCAL] = "some rejections happened only on these inputs: not stored",
                              [KT_TUNE_UNSTABLE] = "the default config does not reproduce its own results: not tuned",
                              [KT_TUNE_NO_VALID] = "every candidate was rejected: the default is used",
                              [KT_TUNE_NOT_TUNED] = "not tuned"};
  j->status = outcome_status(r->outcome);
  snprintf(j->config, sizeof j->config, "%s", r->config);
  snprintf(j->dflt, sizeof j->dflt, "%s", r->default_config);
  j->time_us = r->time_us;
  j->default_us = r->default_us;
  j->tried = r->tried;
  j->rejected = r->rejected;
  snprintf(j->timed_at, sizeof j->timed_at, "%s", r->timed_at ? r->timed_at : "");
  if ((size_t)r->outcome < sizeof why / sizeof why[0] && why[r->outcome])
    snprintf(j->message, sizeof j->message, "%s", why[r->outcome]);
  else if (r->outcome == KT_TUNE_TUNED && r->time_us < 0)
    snprintf(j->message, sizeof j->message, "no cache row (is the cache writable?)");
}

/* A key the cache has needs no inputs, no GPU work and no tuning. */
static int cached(kt_kernel *k, const kt_arg *shape, job *j) {
  kt_tune_report *r = NULL;
  int hit = !kt_kernel_lookup(k, shape, kt_kernel_nparams(k), &r) && r->outcome == KT_TUNE_CACHED;
  if (hit) from_report(r, j);
  kt_tune_report_free(r);
  return hit;
}

void tunejob_run(kt_runtime *rt, kt_kernel *k, job *j, int force) {
  double t0 = tunejob_now();
  kt_arg shape[64];
  char err[1024];
  kt_tune_report *rep = NULL;
  j->config[0] = j->dflt[0] = j->message[0] = j->fault[0] = j->timed_at[0] = 0;
  j->time_us = j->default_us = -1;
  j->tried = j->rejected = 0;
  j->status = JOB_ERROR;
  int n = kt_kernel_nparams(k);
  if (shape_args(k, j->shape, shape, err, sizeof err)) {
    snprintf(j->message, sizeof j->message, "%s", err);
  } else if (!force && cached(k, shape, j)) {
    /* done: nothing made, nothing launched */
  } else {
    /* The tuning makes what it times: at the spec's tune_at sizes where it
    ** gives them, never buffers as large as a long call's. */
    kt_status st = kt_kernel_tune_shape(k, shape, n, &rep);
    if (st) {
      j->status = st == KT_ERR_DEVICE_FAULT ? JOB_FAULT : JOB_ERROR;
      snprintf(j->message, sizeof j->message, "%s", cli_errmsg(rt));
      faulted(rep, j);
    } else {
      from_report(rep, j);
    }
  }
  kt_tune_report_free(rep);
  j->secs = tunejob_now() - t0;
}

static int out_fd = -1;

static void worker_progress(void *user, const char *kernel, const char *key, int done, int total, double best_us) {
  (void)user, (void)kernel, (void)key;
  char line[128];
  int len = snprintf(line, sizeof line, "P %d %d %.4f\n", done, total, best_us);
  if (write(out_fd, line, (size_t)len) != len) _exit(1);
}

int tunejob_worker(const topts *o, int device, int in, int out) {
  out_fd = out;
  kt_options opt;
  cli_options(&opt, NULL, 0);
  opt.device = device;
  opt.cache_path = o->cache;
  opt.progress = worker_progress;
  opt.retune = o->force;
  opt.no_prune = o->no_prune;
  opt.strategy = o->strategy;
  opt.budget_s = o->budget;
  opt.mode = KT_MODE_TUNE;
  opt.cache_required = 1;
  kt_runtime *rt;
  kt_status st = kt_runtime_open(&rt, &opt);
  kt_kernel *ks[256] = {0};
  for (int s = 0; !st && s < o->nspecs; s++) st = kt_kernel_load(rt, o->specs[s], &ks[s]);
  FILE *f = fdopen(in, "r");
  char line[64];
  int rc = 0;
  while (f && fgets(line, sizeof line, f)) {
    int idx;
    if (line[0] == 'Q' || sscanf(line, "J %d", &idx) != 1) break;
    job *j = &o->jobs[idx];
    if (st) {
      j->status = JOB_ERROR;
      snprintf(j->message, sizeof j->message, "device %d: %s", device, cli_errmsg(rt));
      j->config[0] = j->timed_at[0] = 0;
    } else {
      tunejob_run(rt, ks[j->spec], j, o->force);
    }
    char res[TUNEJOB_LINE_MAX];
    int len = tunejob_encode(j, res, sizeof res);
    if (write(out, res, (size_t)len) != len) break;
    if (j->status == JOB_FAULT) {
      rc = 3;
      break;
    }
  }
  if (f) fclose(f);
  if (rc == 3) _exit(3); /* the context is unusable: do not tear it down */
  kt_runtime_close(rt);
  return rc;
}
