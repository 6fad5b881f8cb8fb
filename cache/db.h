/* Private to cache/: the store's connection and helpers. */
#ifndef KT_DB_H
#define KT_DB_H

#include <pthread.h>
#include <sqlite3.h>

#include "cache/store.h"

enum {
  ST_GET_CONFIG, ST_GET_CONFIG_SYS, ST_TIME_OF, ST_UPSERT_CONFIG, ST_PUT_TRIAL, ST_TRIALS,
  ST_PUT_BINARY, ST_GET_BINARY, ST_Q_ADD, ST_Q_DEL, ST_Q_GET, ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
  ST_COUNT
};

struct kt_store {
  pthread_mutex_t lock;
  sqlite3 *db, *sys;
  sqlite3_stmt *st[ST_COUNT];
  char *path, *sys_path;
  int readonly;
  int trusted;  /* binaries may be loaded */
  kt__logger log;
};

/* "PATH: what: sqlite's message"; returns KT_ERR_CACHE (or KT_ERR_NOMEM). */
kt_status kt__db_err(kt_store *s, sqlite3 *db, const char *what, char *err, size_t errlen);
/* Step a statement until it is done or has a row, waiting out SQLITE_BUSY
** beyond the busy timeout too (the cache must never fail with "database is
** locked"). */
int kt__db_step(sqlite3_stmt *st);
int kt__db_exec(sqlite3 *db, const char *sql);
kt_status kt__db_begin(kt_store *s, char *err, size_t errlen);
kt_status kt__db_end(kt_store *s, kt_status st, char *err, size_t errlen);
void kt__db_bind_text(sqlite3_stmt *st, int i, const char *v);
int64_t kt__db_now(void);

#endif
