#include "base/error.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cache/text.h"

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

void kt__as_utf8(char *msg, size_t n, int cut) {
  size_t len = strlen(msg), i = len;
  while (cut && i > 0 && len - i < 3 && ((unsigned char)msg[i - 1] & 0xc0) == 0x80) i--;
  if (cut && i > 0) {
    unsigned c = (unsigned char)msg[i - 1];
    size_t whole = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (len - (i - 1) < whole) msg[i - 1] = 0;
  }
  if (kt__text_utf8(msg)) return;
  char fixed[KT_ERRMAX];
  kt__text_visible(msg, 0, fixed, n < sizeof fixed ? n : sizeof fixed);
  memcpy(msg, fixed, strlen(fixed) + 1);
}

kt_status kt__err(uint64_t id, kt_status s, const char *fmt, ...) {
  slot *sl = find(id, 1);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(sl->msg, sizeof sl->msg, fmt, ap);
  va_end(ap);
  kt__as_utf8(sl->msg, sizeof sl->msg, n >= (int)sizeof sl->msg);
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

void kt__log_stderr(void *user, kt_log_level level, const char *msg) {
  char vis[4 * KT_ERRMAX + 1];
  (void)user;
  kt__text_visible(msg, KT__TEXT_CONTROLS, vis, sizeof vis);
  fprintf(stderr, "ktune: %s: %s\n",
          level >= KT_LOG_ERROR && level <= KT_LOG_DEBUG ? level_names[level]
                                                         : "log",
          vis);
}

_Static_assert((int)KT_TEXT_CONTROLS == (int)KT__TEXT_CONTROLS && (int)KT_TEXT_JSON == (int)KT__TEXT_JSON,
               "one set of flags");

size_t kt_text_visible(const char *s, unsigned flags, char *buf, size_t n) {
  return kt__text_visible(s, flags, buf, n);
}

int kt__log_level_from_env(void) {
  const char *e = getenv("KTUNE_LOG");
  if (!e || !*e) return KT_LOG_WARN;
  for (int i = 0; i < 4; i++)
    if (strcasecmp(e, level_names[i]) == 0) return i;
  return -1;
}

static _Thread_local int callback_depth[2];

void kt__callback_enter(int kind) { callback_depth[kind]++; }
void kt__callback_leave(int kind) { callback_depth[kind]--; }
int kt__in_callback(int kind) {
  return callback_depth[KT__CB_LOCKED] > 0 || (kind == KT__CB_ROWS && callback_depth[KT__CB_ROWS] > 0);
}

void kt__log(const kt__logger *lg, kt_log_level level, const char *fmt, ...) {
  if (!lg || !lg->fn || (int)level > lg->level) return;
  char buf[KT_ERRMAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  kt__as_utf8(buf, sizeof buf, n >= (int)sizeof buf);
  kt__callback_enter(KT__CB_LOCKED);
  lg->fn(lg->user, level, buf);
  kt__callback_leave(KT__CB_LOCKED);
}

char *kt__fmt(char *dst, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, n, fmt, ap);
  va_end(ap);
  return dst;
}
