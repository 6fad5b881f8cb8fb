/* The last error message per (runtime, thread), and the log sink. */
#ifndef KT_ERROR_H
#define KT_ERROR_H

#include <stdarg.h>
#include <stdint.h>

#include "ktune.h"

/* Bound on one error message; longer ones are cut. */
#define KT_ERRMAX 2048

/* Record a message for runtime id (0: no runtime) in the calling thread and
** return s, so that callers can write `return kt__err(id, s, ...)`. */
kt_status kt__err(uint64_t id, kt_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *kt__errmsg(uint64_t id);
void kt__err_clear(uint64_t id);

/* A fresh runtime id; ids are never reused within a process. */
uint64_t kt__err_new_id(void);

typedef struct kt__logger {
  kt_log_fn fn;
  void *user;
  int level;
} kt__logger;

/* msg (a buffer of n bytes) as well-formed UTF-8, which an embedder may
** decode as such (Python does): a character that cut (msg was cut to fit)
** ends is dropped, and a malformed byte quoted from a file becomes \xNN.
** kt__err and kt__log apply it to every message. */
void kt__as_utf8(char *msg, size_t n, int cut);

/* Default sink: one line to stderr, "ktune: warn: ...". */
void kt__log_stderr(void *user, kt_log_level level, const char *msg);
/* The level named by $KTUNE_LOG, warn when unset, -1 for another value. */
int kt__log_level_from_env(void);
void kt__log(const kt__logger *lg, kt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The embedder's callbacks run inside the runtime's calls, marked by kind
** around each call of one. KT__CB_LOCKED (log, progress, a coordinator's
** publish and fetch) run while the runtime may hold its locks: calls that
** take them refuse a thread inside one, where they would deadlock.
** KT__CB_ROWS (rows of a listing, lint, a compile's report) run inside a
** call that still uses what kt_runtime_close frees: that refuses a thread
** inside a callback of either kind. */
enum { KT__CB_ROWS = 0, KT__CB_LOCKED = 1 };
void kt__callback_enter(int kind);
void kt__callback_leave(int kind);
/* Inside a callback of kind KT__CB_LOCKED; or, for KT__CB_ROWS, of any. */
int kt__in_callback(int kind);

/* snprintf that never overflows and returns dst; for building messages. */
char *kt__fmt(char *dst, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
