/* What every file of cache/ uses: errors, steps that outlast a busy
** database, binds, the clock and the log. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/db.h"

int64_t kt__db_now(void) { return (int64_t)time(NULL); }

void kt__db_log(const kt_store *s, int level, const char *fmt, ...) {
  if (!s->log.fn || level > s->log.level) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  s->log.fn(s->log.user, level, buf);
}

int kt__db_err_at(const char *path, sqlite3 *db, const char *what, char *err, size_t errlen) {
  int rc = db ? sqlite3_errcode(db) : SQLITE_ERROR;
  snprintf(err, errlen, "%s: %s: %s", path ? path : "cache", what, db ? sqlite3_errmsg(db) : "no database");
  return rc == SQLITE_NOMEM ? KT__C_NOMEM : KT__C_CACHE;
}

int kt__db_err(kt_store *s, sqlite3 *db, const char *what, char *err, size_t errlen) {
  return kt__db_err_at(s ? s->path : NULL, db, what, err, errlen);
}

int kt__db_readonly_err(const kt_store *s, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: the cache is read-only", s->path);
  return KT__C_READONLY;
}

/* A file removed since it was opened (rm, or mv elsewhere), or replaced
** (another file moved over its name), is written no more: rows would go
** where no one reads them again, or the name now holds a file this store
** never checked. One stat a write, which is rare (a tuning's results);
** said once. */
int kt__db_writable(kt_store *s, char *err, size_t errlen) {
  if (s->readonly) return kt__db_readonly_err(s, err, errlen);
  if (!atomic_load(&s->gone)) { /* once gone, no stat again */
    struct stat sb;
    if (s->file.real && !stat(s->file.real, &sb) && sb.st_dev == s->file.dev && sb.st_ino == s->file.ino)
      return KT__C_OK;
    if (!atomic_exchange(&s->gone, 1))
      kt__db_log(s, 1, "%s: removed or replaced since this process opened it: nothing more is written to it, "
                       "tunings stay in memory (a runtime opened anew uses the file there now)", s->path);
  }
  snprintf(err, errlen, "%s: removed or replaced since this process opened it; nothing more is written to it", s->path);
  return KT__C_READONLY;
}

int kt__db_step(sqlite3_stmt *st) {
  time_t start = time(NULL);
  for (;;) {
    int rc = sqlite3_step(st);
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || time(NULL) - start > KT__BUSY_DEADLINE_S) return rc;
    sqlite3_reset(st);
    usleep(1000);
  }
}

int kt__db_exec(sqlite3 *db, const char *sql) {
  time_t start = time(NULL);
  for (;;) {
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_BUSY || time(NULL) - start > KT__BUSY_DEADLINE_S) return rc;
    usleep(1000);
  }
}

int kt__db_harden(sqlite3 *db) {
  static const int off[] = {SQLITE_DBCONFIG_ENABLE_TRIGGER, SQLITE_DBCONFIG_ENABLE_VIEW,
                            SQLITE_DBCONFIG_TRUSTED_SCHEMA};
  int rc = sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, NULL);
  for (size_t i = 0; i < sizeof off / sizeof off[0] && !rc; i++) rc = sqlite3_db_config(db, off[i], 0, NULL);
  return rc;
}

void kt__db_bind_text(sqlite3_stmt *st, int i, const char *v) { sqlite3_bind_text(st, i, v ? v : "", -1, SQLITE_TRANSIENT); }

const char *kt__db_text(sqlite3_stmt *st, int col, int *oom) {
  const char *v = (const char *)sqlite3_column_text(st, col);
  if (!v && sqlite3_column_type(st, col) != SQLITE_NULL) *oom = 1;
  return v ? v : "";
}

double kt__db_time(sqlite3_stmt *st, int col) {
  int type = sqlite3_column_type(st, col);
  double t = sqlite3_column_double(st, col);
  return (type == SQLITE_FLOAT || type == SQLITE_INTEGER) && isfinite(t) && t >= 0 ? t : -1;
}

void kt__db_bind_key(sqlite3_stmt *st, const char *kernel, const char *spec_hash, const char *device, const char *key) {
  kt__db_bind_text(st, 1, kernel);
  kt__db_bind_text(st, 2, spec_hash);
  kt__db_bind_text(st, 3, device);
  kt__db_bind_text(st, 4, key);
}
