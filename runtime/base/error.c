#include "base/error.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A thread using more runtimes than this at once loses the oldest message;
** messages live in thread-local storage so that the launch path never
** allocates or locks to report an error. */
#define SLOTS 4

typedef struct {
  uint64_t id;
  char msg[KT_ERRMAX];
} slot;

static _Thread_local slot slots[SLOTS];
static _Thread_local unsigned next_slot;
static atomic_uint_fast64_t last_id;

uint64_t kt__err_new_id(void) { return atomic_fetch_add(&last_id, 1) + 1; }

static slot *find(uint64_t id, int create) {
  for (int i = 0; i < SLOTS; i++)
    if (slots[i].id == id && (id != 0 || slots[i].msg[0])) return &slots[i];
  if (!create) return NULL;
  slot *s = &slots[next_slot++ % SLOTS];
  s->id = id;
  s->msg[0] = 0;
  return s;
}

kt_status kt__err(uint64_t id, kt_status s, const char *fmt, ...) {
  slot *sl = find(id, 1);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sl->msg, sizeof sl->msg, fmt, ap);
  va_end(ap);
  return s;
}

const char *kt__errmsg(uint64_t id) {
  slot *s = find(id, 0);
  return s ? s->msg : "";
}

void kt__err_clear(uint64_t id) {
  slot *s = find(id, 0);
  if (s) s->msg[0] = 0;
}

static const char *level_names[] = {"error", "warn", "info", "debug"};

/* msg with its control bytes as \xNN: a line of the log stays one line,
** and text from a file it quotes (a path, a cached config) cannot move a
** terminal's cursor. */
static const char *visible(const char *msg, char *buf, size_t n) {
  size_t u = 0;
  for (const unsigned char *p = (const unsigned char *)msg; *p && u + 9 <= n; p++) {
    /* C0 and DEL, and C1 in UTF-8 (U+0080 to U+009F: U+009B starts an
    ** escape sequence in some terminals). */
    int c = *p < 0x20 || *p == 0x7f ? 1 : p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f ? 2 : 0;
    for (int i = 0; i < c; i++) u += (size_t)snprintf(buf + u, n - u, "\\x%02x", p[i]);
    if (c) p += c - 1;
    else buf[u++] = (char)*p;
  }
  buf[u] = 0;
  return buf;
}

void kt__log_stderr(void *user, kt_log_level level, const char *msg) {
  char vis[4 * KT_ERRMAX + 1];
  (void)user;
  fprintf(stderr, "ktune: %s: %s\n",
          level >= KT_LOG_ERROR && level <= KT_LOG_DEBUG ? level_names[level]
                                                         : "log",
          visible(msg, vis, sizeof vis));
}

int kt__log_level_from_env(void) {
  const char *e = getenv("KTUNE_LOG");
  if (!e || !*e) return KT_LOG_WARN;
  for (int i = 0; i < 4; i++)
    if (strcasecmp(e, level_names[i]) == 0) return i;
  return -1;
}

void kt__log(const kt__logger *lg, kt_log_level level, const char *fmt, ...) {
  if (!lg || !lg->fn || (int)level > lg->level) return;
  char buf[KT_ERRMAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  lg->fn(lg->user, level, buf);
}

char *kt__fmt(char *dst, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, n, fmt, ap);
  va_end(ap);
  return dst;
}
