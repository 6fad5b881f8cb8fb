/* How ktune tune runs its jobs: in this process (a fault ends the run), or
** in one worker process per GPU, fed job numbers on a pipe: a worker that
** faults, crashes or hangs is replaced, and what it was running is
** quarantined with the reason. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "tunerun.h"

int run_inprocess(tune_run *r) {
  kt_options o;
  cli_options(&o, NULL, 0);
  o.device = r->o.ndev > 0 ? r->o.devices[0] : 0;
  o.cache_path = r->o.cache;
  o.progress = run_on_progress;
  o.progress_user = r;
  o.retune = r->o.force;
  o.no_prune = r->o.no_prune;
  o.strategy = r->o.strategy;
  o.budget_s = r->o.budget;
  o.mode = KT_MODE_TUNE;
  o.cache_required = 1; /* winners that cannot be stored are a tuning lost */
  kt_runtime *rt;
  kt_kernel *ks[256];
  int st = kt_runtime_open(&rt, &o) ? -1 : 0;
  for (int s = 0; !st && s < r->o.nspecs; s++) st = kt_kernel_load(rt, r->o.specs[s], &ks[s]) ? -1 : 0;
  if (st) {
    cli_fail("tune", "%s", cli_errmsg(rt));
    kt_runtime_close(rt);
    return -1;
  }
  for (int i = 0; i < r->njobs && !st; i++) {
    job *j = &r->jobs[i];
    if (j->same_as < 0) {
      r->current = i;
      j->t_start = tunejob_now();
      tunejob_run(rt, ks[j->spec], j, r->o.force);
      r->current = -1;
      if (j->status == JOB_FAULT) run_note_fault(r, j);
    }
    run_report(r, j);
    if (j->status == JOB_FAULT) {
      cli_fail("tune", "a config faulted; it is quarantined and the run stops (use --isolate to go on)");
      for (int k = i + 1; k < r->njobs; k++) r->jobs[k].status = JOB_NOT_RUN;
      st = 1;
    }
  }
  kt_stats stats = {.size = sizeof stats};
  kt_runtime_stats(rt, &stats);
  r->compiles = (long long)stats.compiles;
  kt_runtime_close(rt);
  return st;
}

typedef struct worker {
  int device;
  pid_t pid;
  int to, from;
  int job;             /* running job, or -1 */
  int progressed;      /* a trial of the job finished */
  double last;         /* time of the last line */
  char buf[TUNEJOB_LINE_MAX + 1024]; /* a result line, and progress lines */
  size_t len;
} worker;

static int worker_start(tune_run *r, worker *w) {
  int down[2], up[2];
  if (pipe(down) || pipe(up)) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    signal(SIGPIPE, SIG_DFL);
    _exit(tunejob_worker(&r->o, w->device, down[0], up[1]));
  }
  close(down[0]);
  close(up[1]);
  *w = (worker){.device = w->device, .pid = pid, .to = down[1], .from = up[0], .job = -1, .last = tunejob_now()};
  return 0;
}

static void requeue(tune_run *r, worker *w, const char *why) {
  job *j = &r->jobs[w->job];
  if (++j->restarts >= 10) {
    j->status = JOB_ERROR;
    j->state = JOB_DONE;
    snprintf(j->message, sizeof j->message, "gave up after %d worker restarts (last: %s)", j->restarts, why);
    run_report(r, j);
  } else {
    j->state = JOB_QUEUED;
  }
  w->job = -1;
}

typedef struct claimctx {
  tune_run *r;
  const char *reason;
} claimctx;

static void on_claim(void *user, const char *kernel, const char *key, const char *config) {
  claimctx *c = user;
  char what[600];
  snprintf(what, sizeof what, "%s %s: %s: %s", kernel, key, config, c->reason);
  run_note_quarantine(c->r, what);
}

/* The worker died (or was killed) in a trial: its config is quarantined
** with the reason, and its job goes back to the queue. */
static void worker_lost(tune_run *r, worker *w, kt_runtime *meta, const char *reason) {
  close(w->to);
  close(w->from);
  int status = 0;
  waitpid(w->pid, &status, 0);
  if (w->job >= 0) {
    char why[200];
    if (reason) snprintf(why, sizeof why, "%s", reason);
    else if (WIFSIGNALED(status)) snprintf(why, sizeof why, "crashed: signal %d", WTERMSIG(status));
    else snprintf(why, sizeof why, "worker exited with status %d", WEXITSTATUS(status));
    claimctx c = {r, why};
    if (meta && kt_cache_quarantine_claim(meta, (long)w->pid, why, on_claim, &c))
      cli_fail("tune", "%s", cli_errmsg(meta));
    requeue(r, w, why);
  }
  w->pid = 0;
}

static void handle_line(tune_run *r, worker *w, char *line) {
  w->last = tunejob_now();
  if (w->job < 0) return;
  job *j = &r->jobs[w->job];
  int done, total;
  double best;
  if (line[0] == 'P' && sscanf(line, "P %d %d %lf", &done, &total, &best) == 3) {
    w->progressed = 1;
    if (r->o.ndev == 1 || r->njobs == 1) run_progress_line(r, j, done, total, best);
  } else if (line[0] == 'R') {
    tunejob_decode(j, line + 2);
    if (j->status == JOB_FAULT) {
      /* The tuner quarantined the config; the worker exits (its context is
      ** gone) and the job goes on in a fresh one. */
      run_note_fault(r, j);
      requeue(r, w, "fault");
      return;
    }
    j->state = JOB_DONE;
    run_report(r, j);
    w->job = -1;
  }
}

/* --devices all: counting devices loads the driver, so a child counts. */
static int count_devices(tune_run *r) {
  int fd[2], n = 0;
  if (pipe(fd)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    kt_device_count(&n);
    _exit(write(fd[1], &n, sizeof n) == (ssize_t)sizeof n ? 0 : 1);
  }
  close(fd[1]);
  if (pid < 0 || read(fd[0], &n, sizeof n) != (ssize_t)sizeof n) n = 0;
  close(fd[0]);
  if (pid > 0) waitpid(pid, NULL, 0);
  if (n <= 0) {
    cli_fail("tune", "--devices all: no CUDA device found");
    return -1;
  }
  r->o.ndev = n > 64 ? 64 : n;
  for (int i = 0; i < r->o.ndev; i++) r->o.devices[i] = i;
  return 0;
}

/* Whether any job is still queued or running. */
static int jobs_left(const tune_run *r) {
  for (int i = 0; i < r->njobs; i++)
    if (r->jobs[i].same_as < 0 && r->jobs[i].state != JOB_DONE) return 1;
  return 0;
}

/* Give an idle worker the next queued job. */
static void assign(tune_run *r, worker *w) {
  for (int i = 0; i < r->njobs && w->job < 0; i++) {
    job *j = &r->jobs[i];
    if (j->same_as >= 0 || j->state != JOB_QUEUED) continue;
    char cmd[32];
    int len = snprintf(cmd, sizeof cmd, "J %d\n", i);
    if (write(w->to, cmd, (size_t)len) != len) return;
    j->state = JOB_RUNNING;
    j->t_start = w->last = tunejob_now();
    w->job = i;
    w->progressed = 0;
  }
}

/* What a worker has written, line by line; a closed pipe is a lost worker. */
static void drain(tune_run *r, worker *w, kt_runtime *meta) {
  ssize_t got = read(w->from, w->buf + w->len, sizeof w->buf - 1 - w->len);
  if (got <= 0) {
    worker_lost(r, w, meta, NULL);
    return;
  }
  w->len += (size_t)got;
  w->buf[w->len] = 0;
  char *nl;
  while ((nl = strchr(w->buf, '\n'))) {
    *nl = 0;
    handle_line(r, w, w->buf);
    size_t rest = w->len - (size_t)(nl + 1 - w->buf);
    memmove(w->buf, nl + 1, rest + 1);
    w->len = rest;
  }
  if (w->len == sizeof w->buf - 1) w->len = 0;
}

/* A worker silent past the trial timeout (five times that before its
** first trial, which includes compiling) hangs: killed, quarantined. */
static void check_hang(tune_run *r, worker *w, kt_runtime *meta) {
  double limit = w->progressed ? r->o.trial_timeout : 5 * r->o.trial_timeout;
  if (!w->pid || w->job < 0 || tunejob_now() - w->last <= limit) return;
  char why[128];
  snprintf(why, sizeof why, "hang: no progress for %.0f s; worker killed", limit);
  kill(w->pid, SIGKILL);
  worker_lost(r, w, meta, why);
}

static int serve(tune_run *r, worker *w, int ndev, kt_runtime *meta) {
  while (jobs_left(r)) {
    for (int d = 0; d < ndev; d++) {
      if (!w[d].pid && worker_start(r, &w[d])) {
        cli_fail("tune", "cannot restart a worker: %s", strerror(errno));
        return -1;
      }
      if (w[d].job < 0) assign(r, &w[d]);
    }
    struct pollfd pf[64];
    for (int d = 0; d < ndev; d++) pf[d] = (struct pollfd){w[d].from, POLLIN, 0};
    poll(pf, (nfds_t)ndev, 200);
    for (int d = 0; d < ndev; d++) {
      if (pf[d].revents & (POLLIN | POLLHUP)) drain(r, &w[d], meta);
      check_hang(r, &w[d], meta);
    }
  }
  return 0;
}

int run_workers(tune_run *r) {
  if (r->o.ndev < 0 && count_devices(r)) return -1;
  int ndev = r->o.ndev;
  /* A runtime without a device, for the quarantine rows of dead workers;
  ** a cache it cannot open, the workers cannot either: said once, before
  ** any of them starts. */
  kt_options mo;
  cli_options(&mo, "sm_90", 1);
  mo.cache_path = r->o.cache;
  mo.cache_required = 1;
  kt_runtime *meta = NULL;
  kt_status ms = kt_runtime_open(&meta, &mo);
  if (ms == KT_ERR_CACHE) {
    cli_fail("tune", "%s", cli_errmsg(meta));
    kt_runtime_close(meta);
    return -1;
  }
  if (ms) {
    kt_runtime_close(meta);
    meta = NULL;
  }
  r->o.jobs = r->jobs;
  worker w[64];
  memset(w, 0, sizeof w);
  signal(SIGPIPE, SIG_IGN);
  int st = 0;
  for (int i = 0; i < ndev && !st; i++) {
    w[i].device = r->o.devices[i];
    if (worker_start(r, &w[i])) {
      cli_fail("tune", "cannot start a worker: %s", strerror(errno));
      st = -1;
    }
  }
  if (!st) st = serve(r, w, ndev, meta);
  for (int d = 0; d < ndev; d++) {
    if (!w[d].pid) continue;
    if (write(w[d].to, "Q\n", 2) != 2) kill(w[d].pid, SIGKILL);
    close(w[d].to);
    close(w[d].from);
    waitpid(w[d].pid, NULL, 0);
  }
  kt_runtime_close(meta);
  return st;
}
