/* ktune tune: pre-warm the cache for a list of (spec, shape) calls, on
** synthetic inputs, in this process or in worker processes (one per GPU,
** restarted when a trial faults or hangs). */
#include <cJSON.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "shape.h"
#include "tunejob.h"

static const char help[] =
    "usage: ktune tune SPEC... (--shape SHAPE)... [--shapes FILE] [options]\n"
    "\n"
    "Tune each (spec, shape) on synthetic inputs and store the winners in the\n"
    "cache. Shapes that map to one tuning key are tuned once. Keys already\n"
    "cached are skipped (and counted) unless --force.\n"
    "\n"
    "  --shape SHAPE       a call: 'N=4096,D=2048,T=bf16,res=null,x@2' (see ktune key)\n"
    "  --shapes FILE       calls as JSON lines: {\"kernel\": \"layernorm_fwd\", \"N\": 4096,\n"
    "                      \"D\": 2048, \"T\": \"bf16\", \"res\": null}; \"kernel\" (optional)\n"
    "                      picks the spec; \"x@\": 2 offsets a pointer by bytes\n"
    "  --force             tune keys that are cached already (again)\n"
    "  --isolate           run trials in worker processes: a config that faults or\n"
    "                      hangs kills only its worker, is quarantined, and tuning\n"
    "                      goes on in a fresh worker\n"
    "  --trial-timeout S   with --isolate: a worker silent for S seconds (default 60;\n"
    "                      5 x S before its first trial, which includes compiling) is\n"
    "                      killed and its config quarantined as a hang\n"
    "  --devices LIST      GPUs to use: 0,1,... or all (default 0); jobs are spread\n"
    "                      over them, one worker process each\n"
    "  --strategy NAME     exhaustive, random or local (default: exhaustive up to 256\n"
    "                      candidates, else random with a 10 s budget)\n"
    "  --budget S          stop starting trials of a key after S seconds\n"
    "  --cache PATH        the cache file (default: $KTUNE_CACHE, else the user cache)\n"
    "  --json              one JSON object per key on stdout, then a summary object\n"
    "  --plain             plain lines even on a terminal (no progress bar)\n"
    "\n"
    "Without --isolate a config that faults ends the run, named and quarantined.\n"
    "exit codes: 0 every key tuned or cached, 1 a key failed, 2 usage\n";

typedef struct run {
  topts o;
  job *jobs;
  int njobs, cap;
  int tty;
  double t0;
  int current;           /* job shown by the progress line */
  long long compiles;    /* NVRTC compiles in this process, -1 with workers */
  char qevents[32][600]; /* quarantined during this run */
  int nq;
} run;

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void progress_line(run *r, const job *j, int done, int total, double best_us) {
  if (!r->tty || r->o.json || r->o.plain) return;
  double el = tunejob_now() - j->t_start;
  int width = 24, fill = total > 0 ? done * width / total : 0;
  char bar[32];
  for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
  bar[width] = 0;
  fprintf(stderr, "\r\033[K[%d/%d] %s %.60s [%s] %d/%d", (int)(j - r->jobs) + 1, r->njobs, r->o.names[j->spec],
          j->shape, bar, done, total);
  if (best_us > 0) fprintf(stderr, " best %.2f us", best_us);
  if (done > 0 && total > done) fprintf(stderr, " ~%.0f s left", el / done * (total - done));
  fflush(stderr);
}

static void report(run *r, const job *j) {
  if (r->tty && !r->o.json && !r->o.plain) fprintf(stderr, "\r\033[K");
  if (r->o.json) {
    printf("{\"kernel\": ");
    json_str(stdout, r->o.names[j->spec]);
    printf(", \"shape\": ");
    json_str(stdout, j->shape);
    printf(", \"key\": %s, \"status\": \"%s\"", j->key, j->status);
    if (j->same_as >= 0) printf(", \"same_key_as\": %d", j->same_as);
    if (j->config[0]) {
      printf(", \"config\": ");
      json_str(stdout, j->config);
      printf(", \"time_us\": %.3f", j->time_us);
    }
    if (j->dflt[0]) {
      printf(", \"default\": ");
      json_str(stdout, j->dflt);
      if (j->default_us > 0) printf(", \"default_us\": %.3f", j->default_us);
    }
    printf(", \"tried\": %d, \"rejected\": %d, \"seconds\": %.2f", j->tried, j->rejected, j->secs);
    if (j->message[0]) {
      printf(", \"message\": ");
      json_str(stdout, j->message);
    }
    printf("}\n");
  } else if (j->same_as >= 0) {
    printf("same    %s %s: the key of shape %d (%s)\n", r->o.names[j->spec], j->shape, j->same_as + 1,
           r->jobs[j->same_as].shape);
  } else if (j->config[0]) {
    printf("%-7s %s %s: %s %.2f us", j->status, r->o.names[j->spec], j->shape, j->config, j->time_us);
    if (j->default_us > 0) printf(" (default %.2f us, x%.2f)", j->default_us, j->default_us / j->time_us);
    printf(", %d tried, %d rejected, %.1f s\n", j->tried, j->rejected, j->secs);
  } else {
    printf("%-7s %s %s: %s\n", j->status, r->o.names[j->spec], j->shape, j->message);
  }
  fflush(stdout);
}

static void on_progress(void *user, const char *kernel, const char *key, int done, int total, double best_us) {
  run *r = user;
  (void)kernel, (void)key;
  if (r->current >= 0) progress_line(r, &r->jobs[r->current], done, total, best_us);
}

static int add_job(run *r, int spec, const char *shape) {
  if (r->njobs == r->cap) {
    int cap = r->cap ? 2 * r->cap : 16;
    job *nj = realloc(r->jobs, (size_t)cap * sizeof *nj);
    if (!nj) return -1;
    r->jobs = nj;
    r->cap = cap;
  }
  job *j = &r->jobs[r->njobs++];
  memset(j, 0, sizeof *j);
  j->spec = spec;
  j->same_as = -1;
  snprintf(j->shape, sizeof j->shape, "%s", shape);
  return 0;
}

/* A JSON line of a shapes file as a shape string; kernel gets "kernel". */
static int shape_from_json(const char *line, char *shape, size_t n, char *kernel, size_t kn, char *err,
                           size_t errlen);

static int load_shapes(run *r, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "ktune tune: %s: %s\n", path, strerror(errno));
    return -1;
  }
  char line[8192];
  int lineno = 0, rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '\n' || !*p || *p == '#') continue;
    char shape[1024], kernel[128], err[512];
    if (shape_from_json(p, shape, sizeof shape, kernel, sizeof kernel, err, sizeof err)) {
      fprintf(stderr, "ktune tune: %s:%d: %s\n", path, lineno, err);
      rc = -1;
      continue;
    }
    int matched = 0;
    for (int s = 0; s < r->o.nspecs; s++) {
      if (kernel[0] && strcmp(kernel, r->o.names[s])) continue;
      matched = 1;
      if (add_job(r, s, shape)) rc = -1;
    }
    if (!matched) {
      fprintf(stderr, "ktune tune: %s:%d: kernel \"%s\" is none of the specs given\n", path, lineno, kernel);
      rc = -1;
    }
  }
  fclose(f);
  if (!lineno) fprintf(stderr, "ktune tune: %s: no shapes\n", path);
  return lineno ? rc : -1;
}

static int shape_from_json(const char *line, char *shape, size_t n, char *kernel, size_t kn, char *err,
                           size_t errlen) {
  cJSON *j = cJSON_Parse(line);
  kernel[0] = shape[0] = 0;
  if (!j || !cJSON_IsObject(j)) {
    snprintf(err, errlen, "expected a JSON object per line");
    cJSON_Delete(j);
    return -1;
  }
  size_t used = 0;
  int rc = 0;
  for (const cJSON *it = j->child; it && !rc; it = it->next) {
    const char *name = it->string;
    size_t len = strlen(name);
    if (!strcmp(name, "kernel")) {
      if (!cJSON_IsString(it)) {
        snprintf(err, errlen, "\"kernel\" must be a string");
        rc = -1;
      } else {
        snprintf(kernel, kn, "%s", it->valuestring);
      }
      continue;
    }
    char item[256];
    if (len && name[len - 1] == '@') {
      if (!cJSON_IsNumber(it)) {
        snprintf(err, errlen, "\"%s\" must be a byte offset", name);
        rc = -1;
        break;
      }
      snprintf(item, sizeof item, "%.*s@%lld", (int)(len - 1), name, (long long)it->valuedouble);
    } else if (cJSON_IsNull(it)) {
      snprintf(item, sizeof item, "%s=null", name);
    } else if (cJSON_IsString(it)) {
      snprintf(item, sizeof item, "%s=%s", name, it->valuestring);
    } else if (cJSON_IsNumber(it)) {
      if (it->valuedouble == (double)(long long)it->valuedouble)
        snprintf(item, sizeof item, "%s=%lld", name, (long long)it->valuedouble);
      else
        snprintf(item, sizeof item, "%s=%.9g", name, it->valuedouble);
    } else {
      snprintf(err, errlen, "\"%s\": expected a number, a dtype string or null", name);
      rc = -1;
      break;
    }
    used += (size_t)snprintf(shape + used, used < n ? n - used : 0, "%s%s", used ? "," : "", item);
  }
  cJSON_Delete(j);
  if (!rc && used >= n) {
    snprintf(err, errlen, "shape too long");
    rc = -1;
  }
  return rc;
}

static int parse_devices(topts *o, const char *s) {
  if (!strcmp(s, "all")) {
    o->ndev = -1;
    return 0;
  }
  o->ndev = 0;
  while (*s) {
    char *end;
    long d = strtol(s, &end, 10);
    if (end == s || d < 0 || d > 63 || o->ndev == 64 || (*end && *end != ',')) return -1;
    o->devices[o->ndev++] = (int)d;
    s = *end ? end + 1 : end;
  }
  return o->ndev ? 0 : -1;
}

static void note_quarantine(run *r, const char *what) {
  if (r->nq < 32) snprintf(r->qevents[r->nq++], sizeof r->qevents[0], "%s", what);
}

/* The quarantine line of a job whose tuning faulted. */
static void note_fault(run *r, const job *j) {
  char what[800];
  if (j->fault[0])
    snprintf(what, sizeof what, "%s %s: %s: fault", r->o.names[j->spec], j->key, j->fault);
  else
    snprintf(what, sizeof what, "%s %s: fault: %s", r->o.names[j->spec], j->key, j->message);
  note_quarantine(r, what);
}

static int run_inprocess(run *r) {
  kt_options o;
  cli_options(&o, NULL, 0);
  o.device = r->o.ndev > 0 ? r->o.devices[0] : 0;
  o.cache_path = r->o.cache;
  o.progress = on_progress;
  o.progress_user = r;
  o.retune = r->o.force;
  o.strategy = r->o.strategy;
  o.budget_s = r->o.budget;
  o.mode = KT_MODE_TUNE;
  kt_runtime *rt;
  if (kt_runtime_open(&rt, &o)) {
    fprintf(stderr, "ktune tune: %s\n", kt_errmsg(rt));
    kt_runtime_close(rt);
    return -1;
  }
  kt_kernel *ks[256];
  for (int s = 0; s < r->o.nspecs; s++)
    if (kt_kernel_load(rt, r->o.specs[s], &ks[s])) {
      fprintf(stderr, "ktune tune: %s\n", kt_errmsg(rt));
      kt_runtime_close(rt);
      return -1;
    }
  int failed = 0;
  for (int i = 0; i < r->njobs; i++) {
    job *j = &r->jobs[i];
    if (j->same_as < 0) {
      r->current = i;
      j->t_start = tunejob_now();
      tunejob_run(rt, ks[j->spec], j, (uint64_t)i + 1);
      r->current = -1;
      if (!strcmp(j->status, "fault")) note_fault(r, j);
    }
    report(r, j);
    if (!strcmp(j->status, "fault")) {
      fprintf(stderr, "ktune tune: a config faulted; it is quarantined and the run stops (use --isolate to go on)\n");
      failed = 1;
      for (int k = i + 1; k < r->njobs; k++) snprintf(r->jobs[k].status, sizeof r->jobs[k].status, "not run");
      break;
    }
  }
  kt_stats st = {.size = sizeof st};
  kt_runtime_stats(rt, &st);
  r->compiles = (long long)st.compiles;
  kt_runtime_close(rt);
  return failed ? 1 : 0;
}

/* Workers: one process per device, fed job numbers on a pipe, answering
** with progress and result lines (tunejob.h). */
typedef struct worker {
  int device;
  pid_t pid;
  int to, from;
  int job;             /* running job, or -1 */
  int progressed;      /* a trial of the job finished */
  double last;         /* time of the last line */
  char buf[8192];
  size_t len;
} worker;

static int worker_start(run *r, worker *w) {
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
  w->pid = pid;
  w->to = down[1];
  w->from = up[0];
  w->job = -1;
  w->len = 0;
  w->last = tunejob_now();
  return 0;
}

static void requeue(run *r, worker *w, const char *why) {
  job *j = &r->jobs[w->job];
  if (++j->restarts >= 10) {
    snprintf(j->status, sizeof j->status, "error");
    snprintf(j->message, sizeof j->message, "gave up after %d worker restarts (last: %s)", j->restarts, why);
    report(r, j);
  } else {
    j->state = 0;
  }
  w->job = -1;
}

typedef struct claimctx {
  run *r;
  const char *reason;
} claimctx;

static void on_claim(void *user, const char *kernel, const char *key, const char *config) {
  claimctx *c = user;
  char what[600];
  snprintf(what, sizeof what, "%s %s: %s: %s", kernel, key, config, c->reason);
  note_quarantine(c->r, what);
}

/* The worker died (or was killed) in a trial: its config is quarantined
** with the reason, and its job goes back to the queue. */
static void worker_lost(run *r, worker *w, kt_runtime *meta, const char *reason) {
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
      fprintf(stderr, "ktune tune: %s\n", kt_errmsg(meta));
    requeue(r, w, why);
  }
  w->pid = 0;
}

static void handle_line(run *r, worker *w, char *line) {
  w->last = tunejob_now();
  if (w->job < 0) return;
  job *j = &r->jobs[w->job];
  if (line[0] == 'P') {
    int done, total;
    double best;
    if (sscanf(line, "P %d %d %lf", &done, &total, &best) == 3) {
      w->progressed = 1;
      if (r->o.ndev == 1 || r->njobs == 1) progress_line(r, j, done, total, best);
    }
  } else if (line[0] == 'R') {
    tunejob_decode(j, line + 2);
    if (!strcmp(j->status, "fault")) {
      /* The tuner quarantined the config; the worker exits (its context is
      ** gone) and the job goes on in a fresh one. */
      note_fault(r, j);
      requeue(r, w, "fault");
      return;
    }
    j->state = 2;
    report(r, j);
    w->job = -1;
  }
}

static int run_workers(run *r) {
  int ndev = r->o.ndev;
  if (ndev < 0) {
    /* "all": counting devices loads the driver, so ask a child. */
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
      int n = 0;
      kt_device_count(&n);
      ssize_t wr = write(fd[1], &n, sizeof n);
      _exit(wr == (ssize_t)sizeof n ? 0 : 1);
    }
    close(fd[1]);
    int n = 0;
    if (read(fd[0], &n, sizeof n) != (ssize_t)sizeof n) n = 0;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    if (n <= 0) {
      fprintf(stderr, "ktune tune: --devices all: no CUDA device found\n");
      return -1;
    }
    ndev = r->o.ndev = n > 64 ? 64 : n;
    for (int i = 0; i < ndev; i++) r->o.devices[i] = i;
  }
  /* A runtime without a device, for the quarantine rows of dead workers. */
  kt_options mo;
  cli_options(&mo, "sm_90", 1);
  mo.cache_path = r->o.cache;
  kt_runtime *meta = NULL;
  if (kt_runtime_open(&meta, &mo)) {
    kt_runtime_close(meta);
    meta = NULL;
  }
  r->o.jobs = r->jobs;
  worker w[64];
  memset(w, 0, sizeof w);
  for (int i = 0; i < ndev; i++) {
    w[i].device = r->o.devices[i];
    if (worker_start(r, &w[i])) {
      fprintf(stderr, "ktune tune: cannot start a worker: %s\n", strerror(errno));
      return -1;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  for (;;) {
    int pending = 0, running = 0;
    for (int i = 0; i < r->njobs; i++) {
      job *j = &r->jobs[i];
      if (j->same_as >= 0 || j->state == 2 || j->status[0] == 'e') continue;
      if (j->state == 0) pending++;
      else running++;
    }
    if (!pending && !running) break;
    for (int d = 0; d < ndev; d++) {
      if (!w[d].pid && worker_start(r, &w[d])) {
        fprintf(stderr, "ktune tune: cannot restart a worker: %s\n", strerror(errno));
        return -1;
      }
      if (w[d].job >= 0) continue;
      for (int i = 0; i < r->njobs; i++) {
        job *j = &r->jobs[i];
        if (j->same_as >= 0 || j->state != 0 || j->status[0] == 'e') continue;
        char cmd[32];
        int len = snprintf(cmd, sizeof cmd, "J %d\n", i);
        if (write(w[d].to, cmd, (size_t)len) != len) break;
        j->state = 1;
        j->t_start = tunejob_now();
        w[d].job = i;
        w[d].progressed = 0;
        w[d].last = tunejob_now();
        break;
      }
    }
    struct pollfd pf[64];
    for (int d = 0; d < ndev; d++) pf[d] = (struct pollfd){w[d].from, POLLIN, 0};
    poll(pf, (nfds_t)ndev, 200);
    for (int d = 0; d < ndev; d++) {
      if (pf[d].revents & (POLLIN | POLLHUP)) {
        ssize_t got = read(w[d].from, w[d].buf + w[d].len, sizeof w[d].buf - 1 - w[d].len);
        if (got <= 0) {
          worker_lost(r, &w[d], meta, NULL);
          continue;
        }
        w[d].len += (size_t)got;
        w[d].buf[w[d].len] = 0;
        char *nl;
        while ((nl = strchr(w[d].buf, '\n'))) {
          *nl = 0;
          handle_line(r, &w[d], w[d].buf);
          size_t rest = w[d].len - (size_t)(nl + 1 - w[d].buf);
          memmove(w[d].buf, nl + 1, rest + 1);
          w[d].len = rest;
        }
        if (w[d].len == sizeof w[d].buf - 1) w[d].len = 0;
      }
      double limit = w[d].progressed ? r->o.trial_timeout : 5 * r->o.trial_timeout;
      if (w[d].pid && w[d].job >= 0 && tunejob_now() - w[d].last > limit) {
        char why[128];
        snprintf(why, sizeof why, "hang: no progress for %.0f s; worker killed", limit);
        kill(w[d].pid, SIGKILL);
        worker_lost(r, &w[d], meta, why);
      }
    }
  }
  for (int d = 0; d < ndev; d++) {
    if (!w[d].pid) continue;
    if (write(w[d].to, "Q\n", 2) != 2) kill(w[d].pid, SIGKILL);
    close(w[d].to);
    close(w[d].from);
    waitpid(w[d].pid, NULL, 0);
  }
  kt_runtime_close(meta);
  return 0;
}

static void summary(run *r) {
  int tuned = 0, cached = 0, same = 0, failed = 0;
  for (int i = 0; i < r->njobs; i++) {
    const job *j = &r->jobs[i];
    if (j->same_as >= 0) same++;
    else if (!strcmp(j->status, "tuned")) tuned++;
    else if (!strcmp(j->status, "cached")) cached++;
    else failed++;
  }
  double secs = tunejob_now() - r->t0;
  if (r->o.json) {
    printf("{\"summary\": {\"tuned\": %d, \"cached\": %d, \"same_key\": %d, \"failed\": %d, \"seconds\": %.1f, ",
           tuned, cached, same, failed, secs);
    if (r->compiles >= 0) printf("\"compiles\": %lld, ", r->compiles);
    printf("\"quarantined\": [");
    for (int i = 0; i < r->nq; i++) {
      if (i) printf(", ");
      json_str(stdout, r->qevents[i]);
    }
    printf("]}}\n");
    return;
  }
  printf("\n| kernel | shape | status | config | µs | default µs | speed-up | tried / rejected |\n");
  printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n");
  for (int i = 0; i < r->njobs; i++) {
    const job *j = &r->jobs[i];
    if (j->same_as >= 0) {
      printf("| %s | %s | same key as shape %d | | | | | |\n", r->o.names[j->spec], j->shape, j->same_as + 1);
    } else if (j->config[0]) {
      printf("| %s | %s | %s | %s | %.2f | ", r->o.names[j->spec], j->shape, j->status, j->config, j->time_us);
      if (j->default_us > 0) printf("%.2f | %.2f | ", j->default_us, j->default_us / j->time_us);
      else printf("- | - | ");
      printf("%d / %d |\n", j->tried, j->rejected);
    } else {
      printf("| %s | %s | %s | | | | | |\n", r->o.names[j->spec], j->shape, j->status);
    }
  }
  printf("\n%d tuned, %d cached, %d with the key of an earlier shape, %d failed; %.1f s", tuned, cached, same, failed,
         secs);
  if (r->compiles >= 0) printf("; %lld variants compiled", r->compiles);
  printf("\n");
  if (r->nq) {
    printf("quarantined in this run:\n");
    for (int i = 0; i < r->nq; i++) printf("  %s\n", r->qevents[i]);
  }
}

int cmd_tune(int argc, char **argv) {
  run r;
  memset(&r, 0, sizeof r);
  r.o.trial_timeout = 60;
  r.compiles = -1;
  r.o.ndev = 1;
  r.current = -1;
  const char *shapes[256], *shapes_file = NULL;
  int nshapes = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int more = i + 1 < argc;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(help, stdout);
      return EXIT_OK;
    } else if (!strcmp(a, "--shape")) {
      if (!more) return cli_usage("tune", "--shape needs a value such as 'N=4096,D=2048,T=bf16'");
      if (nshapes == 256) return cli_usage("tune", "at most 256 --shape options");
      shapes[nshapes++] = argv[++i];
    } else if (!strcmp(a, "--shapes")) {
      if (!more) return cli_usage("tune", "--shapes needs a file");
      shapes_file = argv[++i];
    } else if (!strcmp(a, "--force")) {
      r.o.force = 1;
    } else if (!strcmp(a, "--isolate")) {
      r.o.isolate = 1;
    } else if (!strcmp(a, "--json")) {
      r.o.json = 1;
    } else if (!strcmp(a, "--plain")) {
      r.o.plain = 1;
    } else if (!strcmp(a, "--trial-timeout") || !strcmp(a, "--budget")) {
      char *end;
      double v = more ? strtod(argv[i + 1], &end) : 0;
      if (!more || end == argv[i + 1] || *end || !(v > 0))
        return cli_usage("tune", "%s needs a number of seconds > 0", a);
      i++;
      if (a[2] == 't') r.o.trial_timeout = v;
      else r.o.budget = v;
    } else if (!strcmp(a, "--strategy")) {
      const char *v = more ? argv[++i] : "";
      if (!strcmp(v, "exhaustive")) r.o.strategy = KT_STRATEGY_EXHAUSTIVE;
      else if (!strcmp(v, "random")) r.o.strategy = KT_STRATEGY_RANDOM;
      else if (!strcmp(v, "local")) r.o.strategy = KT_STRATEGY_LOCAL;
      else return cli_usage("tune", "--strategy must be exhaustive, random or local");
    } else if (!strcmp(a, "--devices")) {
      if (!more || parse_devices(&r.o, argv[i + 1]))
        return cli_usage("tune", "--devices takes a list such as 0,1 or all");
      i++;
    } else if (!strcmp(a, "--cache")) {
      if (!more) return cli_usage("tune", "--cache needs a path");
      r.o.cache = argv[++i];
    } else if (a[0] == '-') {
      return cli_usage("tune", "unknown option '%s'", a);
    } else if (r.o.nspecs == 256) {
      return cli_usage("tune", "at most 256 specs");
    } else {
      r.o.specs[r.o.nspecs++] = a;
    }
  }
  if (!r.o.nspecs) return cli_usage("tune", "no spec given");
  if (!nshapes && !shapes_file) return cli_usage("tune", "no shape given: use --shape or --shapes");
  if (r.o.json && r.o.plain) return cli_usage("tune", "--json and --plain exclude each other");
  /* Shapes are checked against the specs, and keys computed, before any
  ** GPU work, by a runtime without a device. */
  kt_options mo;
  cli_options(&mo, "sm_90", 1);
  mo.cache_path = r.o.cache;
  mo.no_cache = 1;
  kt_runtime *meta;
  if (kt_runtime_open(&meta, &mo)) {
    fprintf(stderr, "ktune tune: %s\n", kt_errmsg(meta));
    kt_runtime_close(meta);
    return EXIT_FAIL;
  }
  int rc = EXIT_OK;
  kt_kernel *ks[256];
  for (int s = 0; s < r.o.nspecs && rc == EXIT_OK; s++) {
    if (kt_kernel_load(meta, r.o.specs[s], &ks[s])) {
      fprintf(stderr, "ktune tune: %s\n", kt_errmsg(meta));
      rc = EXIT_FAIL;
    } else {
      snprintf(r.o.names[s], sizeof r.o.names[s], "%s", kt_kernel_name(ks[s]));
    }
  }
  for (int i = 0; i < nshapes && rc == EXIT_OK; i++)
    for (int s = 0; s < r.o.nspecs; s++)
      if (add_job(&r, s, shapes[i])) rc = EXIT_FAIL;
  if (rc == EXIT_OK && shapes_file && load_shapes(&r, shapes_file)) rc = EXIT_USAGE;
  for (int i = 0; i < r.njobs && rc == EXIT_OK; i++) {
    job *j = &r.jobs[i];
    kt_arg args[64];
    char err[600];
    if (shape_args(ks[j->spec], j->shape, args, err, sizeof err) ||
        (kt_kernel_key(ks[j->spec], args, kt_kernel_nparams(ks[j->spec]), j->key, sizeof j->key) &&
         snprintf(err, sizeof err, "%s", kt_errmsg(meta)))) {
      fprintf(stderr, "ktune tune: %s: %s\n", r.o.specs[j->spec], err);
      rc = EXIT_USAGE;
      break;
    }
    for (int p = 0; p < i; p++)
      if (r.jobs[p].spec == j->spec && r.jobs[p].same_as < 0 && !strcmp(r.jobs[p].key, j->key)) {
        j->same_as = p;
        break;
      }
  }
  kt_runtime_close(meta);
  if (rc != EXIT_OK) {
    free(r.jobs);
    return rc;
  }
  r.tty = isatty(2);
  r.t0 = tunejob_now();
  int st = r.o.isolate || r.o.ndev != 1 ? run_workers(&r) : run_inprocess(&r);
  if (st < 0) {
    free(r.jobs);
    return EXIT_FAIL;
  }
  summary(&r);
  for (int i = 0; i < r.njobs; i++)
    if (r.jobs[i].same_as < 0 && strcmp(r.jobs[i].status, "tuned") && strcmp(r.jobs[i].status, "cached")) st = 1;
  free(r.jobs);
  return st ? EXIT_FAIL : EXIT_OK;
}
