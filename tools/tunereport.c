/* What ktune tune says: a progress line on a terminal, a line (or a JSON
** object) per job, and the summary. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tunerun.h"

void run_progress_line(tune_run *r, const job *j, int done, int total, double best_us) {
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

void run_on_progress(void *user, const char *kernel, const char *key, int done, int total, double best_us) {
  tune_run *r = user;
  (void)kernel, (void)key;
  if (r->current >= 0) run_progress_line(r, &r->jobs[r->current], done, total, best_us);
}

static cJSON *json_of(const tune_run *r, const job *j) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "kernel", r->o.names[j->spec]);
  cJSON_AddStringToObject(o, "shape", j->shape);
  cJSON_AddItemToObject(o, "key", cJSON_Parse(j->key));
  cJSON_AddStringToObject(o, "status", j->same_as >= 0 ? "same_key" : job_status_name(j->status));
  cJSON_AddItemToObject(o, "same_key_as", j->same_as >= 0 ? cJSON_CreateNumber(j->same_as) : cJSON_CreateNull());
  cJSON *cfg = j->config[0] ? cJSON_Parse(j->config) : NULL, *dflt = j->dflt[0] ? cJSON_Parse(j->dflt) : NULL;
  cJSON_AddItemToObject(o, "config", cfg ? cfg : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "time_us", cli_json_num(j->time_us));
  cJSON_AddItemToObject(o, "default", dflt ? dflt : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "default_us", cli_json_num(j->default_us));
  cJSON_AddNumberToObject(o, "tried", j->tried);
  cJSON_AddNumberToObject(o, "rejected", j->rejected);
  cJSON_AddNumberToObject(o, "seconds", j->secs);
  cJSON_AddItemToObject(o, "timed_at", j->timed_at[0] ? cJSON_CreateString(j->timed_at) : cJSON_CreateNull());
  cJSON_AddItemToObject(o, "message", j->message[0] ? cJSON_CreateString(j->message) : cJSON_CreateNull());
  return o;
}

void run_report(tune_run *r, const job *j) {
  if (r->tty && !r->o.json && !r->o.plain) fprintf(stderr, "\r\033[K");
  const char *name = r->o.names[j->spec];
  if (r->o.json) {
    cli_print_json(json_of(r, j));
  } else if (j->same_as >= 0) {
    printf("same    %s %s: the key of shape %d (%s)\n", name, j->shape, j->same_as + 1, r->jobs[j->same_as].shape);
  } else if (j->config[0] && job_ok(j->status)) {
    printf("%-7s %s %s: %s", job_status_name(j->status), name, j->shape, j->config);
    if (j->time_us > 0) printf(" %.2f us", j->time_us);
    if (j->default_us > 0 && j->time_us > 0)
      printf(" (default %.2f us, x%.2f)", j->default_us, j->default_us / j->time_us);
    printf(", %d tried, %d rejected, %.1f s", j->tried, j->rejected, j->secs);
    if (j->timed_at[0]) printf("; timed at %s", j->timed_at);
    printf("\n");
  } else {
    printf("%-7s %s %s: %s\n", job_status_name(j->status), name, j->shape, j->message);
  }
  fflush(stdout);
}

void run_note_quarantine(tune_run *r, const char *what) {
  if (r->nq < 32) snprintf(r->qevents[r->nq++], sizeof r->qevents[0], "%s", what);
}

void run_note_fault(tune_run *r, const job *j) {
  char what[1200];
  if (j->fault[0]) snprintf(what, sizeof what, "%s %s: %s: fault", r->o.names[j->spec], j->key, j->fault);
  else snprintf(what, sizeof what, "%s %s: fault: %s", r->o.names[j->spec], j->key, j->message);
  run_note_quarantine(r, what);
}

static void table(const tune_run *r) {
  printf("\n| kernel | shape | status | config | µs | default µs | speed-up | tried / rejected |\n");
  printf("| --- | --- | --- | --- | ---: | ---: | ---: | ---: |\n");
  for (int i = 0; i < r->njobs; i++) {
    const job *j = &r->jobs[i];
    const char *name = r->o.names[j->spec];
    if (j->same_as >= 0) {
      printf("| %s | %s | same key as shape %d | | | | | |\n", name, j->shape, j->same_as + 1);
    } else if (j->config[0] && job_ok(j->status)) {
      printf("| %s | %s | %s | %s | ", name, j->shape, job_status_name(j->status), j->config);
      printf(j->time_us > 0 ? "%.2f | " : "- | ", j->time_us);
      if (j->default_us > 0 && j->time_us > 0) printf("%.2f | %.2f | ", j->default_us, j->default_us / j->time_us);
      else printf("- | - | ");
      printf("%d / %d |\n", j->tried, j->rejected);
    } else {
      printf("| %s | %s | %s | | | | | |\n", name, j->shape, job_status_name(j->status));
    }
  }
}

int run_summary(tune_run *r) {
  int n[4] = {0}; /* tuned, cached, same key, failed */
  for (int i = 0; i < r->njobs; i++) {
    const job *j = &r->jobs[i];
    n[j->same_as >= 0 ? 2 : j->status == JOB_TUNED ? 0 : j->status == JOB_CACHED ? 1 : 3]++;
  }
  double secs = tunejob_now() - r->t0;
  if (r->o.json) {
    cJSON *o = cJSON_CreateObject(), *s = cJSON_AddObjectToObject(o, "summary");
    static const char *names[4] = {"tuned", "cached", "same_key", "failed"};
    for (int i = 0; i < 4; i++) cJSON_AddNumberToObject(s, names[i], n[i]);
    cJSON_AddNumberToObject(s, "seconds", secs);
    cJSON_AddItemToObject(s, "compiles", r->compiles >= 0 ? cJSON_CreateNumber((double)r->compiles) : cJSON_CreateNull());
    cJSON *q = cJSON_AddArrayToObject(s, "quarantined");
    for (int i = 0; i < r->nq; i++) cJSON_AddItemToArray(q, cJSON_CreateString(r->qevents[i]));
    cli_print_json(o);
    return n[3];
  }
  table(r);
  printf("\n%d tuned, %d cached, %d with the key of an earlier shape, %d failed; %.1f s", n[0], n[1], n[2], n[3], secs);
  if (r->compiles >= 0) printf("; %lld variants compiled", r->compiles);
  printf("\n");
  if (r->nq) {
    printf("quarantined in this run:\n");
    for (int i = 0; i < r->nq; i++) printf("  %s\n", r->qevents[i]);
  }
  return n[3];
}
