/* The worker protocol's result line (tunejob.h): a job's result as
** "R <fields>\n", eleven fields separated by tabs, and back; and the status
** names the line and the reports carry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tunejob.h"

static const char *const status_names[] = {
#define JOB_NAME(name, text) text,
    JOB_STATUS_MAP(JOB_NAME)
#undef JOB_NAME
};

const char *job_status_name(job_status s) {
  return (int)s >= 0 && (size_t)s < sizeof status_names / sizeof status_names[0] ? status_names[s] : "error";
}

int job_status_parse(const char *name) {
  for (size_t i = 0; i < sizeof status_names / sizeof status_names[0]; i++)
    if (!strcmp(status_names[i], name)) return (int)i;
  return -1;
}

/* s in dst (n bytes) with tabs and newlines as spaces, "-" for "", so that
** the field neither splits the line nor reads as absent. */
static const char *field(char *dst, size_t n, const char *s) {
  snprintf(dst, n, "%s", s[0] ? s : "-");
  for (char *p = dst; *p; p++)
    if (*p == '\t' || *p == '\n') *p = ' ';
  return dst;
}

int tunejob_encode(const job *j, char *buf, size_t n) {
  char cfg[sizeof j->config], dflt[sizeof j->dflt], fault[sizeof j->fault], at[sizeof j->timed_at];
  char msg[sizeof j->message];
  int len = snprintf(buf, n, "R %s\t%s\t%s\t%.4f\t%.4f\t%d\t%d\t%.3f\t%s\t%s\t%s\n", job_status_name(j->status),
                     field(cfg, sizeof cfg, j->config), field(dflt, sizeof dflt, j->dflt), j->time_us,
                     j->default_us, j->tried, j->rejected, j->secs, field(fault, sizeof fault, j->fault),
                     field(at, sizeof at, j->timed_at), j->message[0] ? field(msg, sizeof msg, j->message) : "");
  if (len < 0) return 0;
  if ((size_t)len >= n) len = (int)n - 1, buf[len - 1] = '\n'; /* cut, still one line */
  return len;
}

/* "-" is an empty field. */
static void take(char *dst, size_t n, const char *f) { snprintf(dst, n, "%s", strcmp(f, "-") ? f : ""); }

void tunejob_decode(job *j, const char *fields) {
  char buf[TUNEJOB_LINE_MAX];
  snprintf(buf, sizeof buf, "%s", fields);
  char *f[11] = {0};
  int n = 0;
  for (char *p = buf; n < 11; n++) {
    f[n] = p;
    char *t = strchr(p, '\t');
    if (!t) {
      n++;
      break;
    }
    *t = 0;
    p = t + 1;
  }
  int status = n == 11 ? job_status_parse(f[0]) : -1;
  if (status < 0) {
    j->status = JOB_ERROR;
    snprintf(j->message, sizeof j->message, "worker sent a malformed result");
    return;
  }
  j->status = (job_status)status;
  take(j->config, sizeof j->config, f[1]);
  take(j->dflt, sizeof j->dflt, f[2]);
  j->time_us = atof(f[3]);
  j->default_us = atof(f[4]);
  j->tried = atoi(f[5]);
  j->rejected = atoi(f[6]);
  j->secs = atof(f[7]);
  take(j->fault, sizeof j->fault, f[8]);
  take(j->timed_at, sizeof j->timed_at, f[9]);
  snprintf(j->message, sizeof j->message, "%s", f[10]);
}
