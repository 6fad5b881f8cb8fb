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

static int by_name(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  size_t lx = strcspn(*x, "="), ly = strcspn(*y, "=");
  int c = strncmp(*x, *y, lx < ly ? lx : ly);
  return c ? c : (int)lx - (int)ly;
}

/* "VEC=4,BLOCK=128" as the cache writes configs: {"BLOCK":128,"VEC":4}
** (fields sorted by name). */
static void config_json(const char *cfg, char *out, size_t n) {
  char buf[512];
  const char *f[64];
  int nf = 0;
  snprintf(buf, sizeof buf, "%s", cfg);
  for (char *p = strtok(buf, ","); p && nf < 64; p = strtok(NULL, ",")) f[nf++] = p;
  qsort(f, (size_t)nf, sizeof f[0], by_name);
  size_t u = (size_t)snprintf(out, n, "{");
  for (int i = 0; i < nf && u < n; i++) {
    const char *eq = strchr(f[i], '=');
    if (!eq) continue;
    u += (size_t)snprintf(out + u, n - u, "%s\"%.*s\":%s", i ? "," : "", (int)(eq - f[i]), f[i], eq + 1);
  }
  if (u < n) snprintf(out + u, n - u, "}");
}

typedef struct findrow {
  kt_runtime *rt;
  job *j;
  const char *device;
  char dflt_json[300];
  int found;
} findrow;

static int on_trial(void *user, const kt_trial_row *t) {
  findrow *f = user;
  if (!strcmp(t->config, f->dflt_json) && !strcmp(t->status, "ok")) f->j->default_us = t->median_us;
  return 0;
}

static int on_row(void *user, const kt_cache_row *row) {
  findrow *f = user;
  if (row->from_system || strcmp(row->key, f->j->key) || strcmp(row->device, f->device)) return 0;
  f->found = 1;
  f->j->time_us = row->time_us;
  f->j->tried = row->candidates;
  f->j->rejected = row->rejected;
  kt_cache_trials(f->rt, row, on_trial, f);
  return 1;
}

void tunejob_run(kt_runtime *rt, kt_kernel *k, job *j, uint64_t seed) {
  double t0 = tunejob_now();
  kt_arg shape[64];
  char err[1024];
  kt_inputs *in = NULL;
  j->config[0] = j->dflt[0] = j->message[0] = 0;
  j->time_us = j->default_us = 0;
  j->tried = j->rejected = 0;
  snprintf(j->status, sizeof j->status, "error");
  int n = kt_kernel_nparams(k);
  if (shape_args(k, j->shape, shape, err, sizeof err) ||
      (kt_inputs_make(k, shape, n, seed, &in) && snprintf(err, sizeof err, "%s", kt_errmsg(rt)))) {
    snprintf(j->message, sizeof j->message, "%s", err);
    j->secs = tunejob_now() - t0;
    return;
  }
  kt_stats a = {.size = sizeof a}, b = {.size = sizeof b};
  kt_runtime_stats(rt, &a);
  kt_kernel_default_for(k, kt_inputs_args(in), n, j->dflt, sizeof j->dflt);
  kt_status st = kt_kernel_config_for(k, kt_inputs_args(in), n, j->config, sizeof j->config);
  kt_runtime_stats(rt, &b);
  kt_inputs_free(in);
  j->secs = tunejob_now() - t0;
  if (st) {
    snprintf(j->status, sizeof j->status, "%s", st == KT_ERR_DEVICE_FAULT ? "fault" : "error");
    snprintf(j->message, sizeof j->message, "%s: %s", kt_status_name(st), kt_errmsg(rt));
    j->config[0] = 0;
    return;
  }
  snprintf(j->status, sizeof j->status, "%s", b.tunings > a.tunings ? "tuned" : "cached");
  kt_runtime_info info;
  kt_runtime_get_info(rt, &info);
  findrow f = {rt, j, info.fingerprint, "", 0};
  config_json(j->dflt, f.dflt_json, sizeof f.dflt_json);
  kt_cache_list(rt, kt_kernel_name(k), on_row, &f);
  if (!f.found) snprintf(j->message, sizeof j->message, "no cache row (is the cache writable?)");
}

static void clean(char *s) {
  for (; *s; s++)
    if (*s == '\t' || *s == '\n') *s = ' ';
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
  opt.strategy = o->strategy;
  opt.budget_s = o->budget;
  opt.mode = KT_MODE_TUNE;
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
      snprintf(j->status, sizeof j->status, "error");
      snprintf(j->message, sizeof j->message, "device %d: %s", device, kt_errmsg(rt));
      j->config[0] = 0;
    } else {
      tunejob_run(rt, ks[j->spec], j, (uint64_t)idx + 1);
    }
    clean(j->message);
    char res[4096];
    int len = snprintf(res, sizeof res, "R %s\t%s\t%s\t%.4f\t%.4f\t%d\t%d\t%.3f\t%s\n", j->status,
                       j->config[0] ? j->config : "-", j->dflt[0] ? j->dflt : "-", j->time_us, j->default_us,
                       j->tried, j->rejected, j->secs, j->message);
    if (len >= (int)sizeof res) len = (int)sizeof res - 1, res[len - 1] = '\n';
    if (write(out, res, (size_t)len) != len) break;
    if (!strcmp(j->status, "fault")) {
      rc = 3;
      break;
    }
  }
  if (f) fclose(f);
  if (rc == 3) _exit(3); /* the context is unusable: do not tear it down */
  kt_runtime_close(rt);
  return rc;
}

void tunejob_decode(job *j, const char *fields) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", fields);
  char *f[9] = {0};
  int n = 0;
  for (char *p = buf; n < 9; n++) {
    f[n] = p;
    char *t = strchr(p, '\t');
    if (!t) {
      n++;
      break;
    }
    *t = 0;
    p = t + 1;
  }
  if (n < 9) {
    snprintf(j->status, sizeof j->status, "error");
    snprintf(j->message, sizeof j->message, "worker sent a malformed result");
    return;
  }
  snprintf(j->status, sizeof j->status, "%s", f[0]);
  snprintf(j->config, sizeof j->config, "%s", strcmp(f[1], "-") ? f[1] : "");
  snprintf(j->dflt, sizeof j->dflt, "%s", strcmp(f[2], "-") ? f[2] : "");
  j->time_us = atof(f[3]);
  j->default_us = atof(f[4]);
  j->tried = atoi(f[5]);
  j->rejected = atoi(f[6]);
  j->secs = atof(f[7]);
  snprintf(j->message, sizeof j->message, "%s", f[8]);
}
