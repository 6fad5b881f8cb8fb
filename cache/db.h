/* Private to cache/: the store's connection, its statements and helpers. */
#ifndef KT_DB_H
#define KT_DB_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "cache/store.h"

/* Long enough for a tuner that holds the write lock for one short
** transaction; each retry past it waits again, up to the deadline. */
#define KT__BUSY_TIMEOUT_MS 10000
#define KT__BUSY_DEADLINE_S 120

/* The condition of statements on one key's rows. */
#define KT__WHERE_KEY " WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4"

/* Statements prepared on first use and kept. */
enum {
  ST_GET_CONFIG, ST_TIME_OF, ST_PUT_CONFIG, ST_PUT_TRIAL, ST_TRIALS, ST_PUT_BINARY, ST_GET_BINARY, ST_Q_ADD,
  ST_Q_DEL, ST_Q_GET, ST_WINNERS, ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
  ST_COUNT
};

/* A database file as opened, which neither a change of working directory
** nor another name moves: its real path (links followed: SQLite keeps its
** -wal, -shm and -journal beside it), device and inode. real NULL: none. */
typedef struct kt__fileid {
  char *real;
  dev_t dev;
  ino_t ino;
} kt__fileid;

struct kt_store {
  pthread_mutex_t lock;    /* recursive: a listing's callback may query */
  sqlite3 *db, *sys;
  sqlite3_stmt *st[ST_COUNT];
  sqlite3_stmt *sys_get;   /* ST_GET_CONFIG on the system database */
  char *path, *sys_path;
  kt__fileid file, sys_file; /* the databases as opened */
  int version;             /* of the user database's schema */
  int sys_version;         /* of the system database's */
  int readonly;
  atomic_int gone;         /* the file was removed or replaced since it was
                              opened: written no more (kt__db_writable) */
  int trusted;             /* binaries may be loaded */
  kt__clog log;
};

/* "PATH: what: sqlite's message"; returns KT__C_NOMEM when SQLite ran out
** of memory, else KT__C_CACHE. */
int kt__db_err(kt_store *s, sqlite3 *db, const char *what, char *err, size_t errlen);
/* The same for the file at path (the system cache's, say). */
int kt__db_err_at(const char *path, sqlite3 *db, const char *what, char *err, size_t errlen);
/* Step a statement until it is done or has a row, waiting out SQLITE_BUSY
** beyond the busy timeout too (the cache must never fail with "database is
** locked"). */
int kt__db_step(sqlite3_stmt *st);
int kt__db_exec(sqlite3 *db, const char *sql);
/* A connection that runs none of the file's own code: no triggers, no
** views, no functions with side effects from its schema, no writes to the
** schema itself (SQLite's advice for files that may be hostile). */
int kt__db_harden(sqlite3 *db);
/* The statement id of the user database, prepared on first use; NULL with
** the error in err. */
sqlite3_stmt *kt__db_stmt(kt_store *s, int id, int *st, char *err, size_t errlen);
/* BEGIN IMMEDIATE, and COMMIT (st KT__C_OK) or ROLLBACK; _end returns st,
** or the error of a failed COMMIT. */
int kt__db_begin(kt_store *s, char *err, size_t errlen);
int kt__db_end(kt_store *s, int st, char *err, size_t errlen);
void kt__db_bind_text(sqlite3_stmt *st, int i, const char *v);
/* A column's text ("" for NULL); *oom set when SQLite could not make it. */
const char *kt__db_text(sqlite3_stmt *st, int col, int *oom);
/* A column's time in microseconds, or -1 where it holds none: NULL, text
** (which SQLite reads as 0, a time no tuning would ever beat), a negative
** or a non-finite number. */
double kt__db_time(sqlite3_stmt *st, int col);
void kt__db_bind_key(sqlite3_stmt *st, const char *kernel, const char *spec_hash, const char *device, const char *key);
int64_t kt__db_now(void);
void kt__db_log(const kt_store *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int kt__db_readonly_err(const kt_store *s, char *err, size_t errlen);
/* KT__C_OK where the store may write: not read-only, and its file still
** where it was opened; else KT__C_READONLY with why in err. */
int kt__db_writable(kt_store *s, char *err, size_t errlen);

/* configs.c: within a transaction, how a config compares with the stored
** one (KT__ADDED, KT__KEPT, KT__REPLACED), and the row written when it is
** new, faster, or the stored one is stale (kt__store_replace_config) or
** damaged. */
int kt__configs_merge(kt_store *s, const kt__cfgrow *r, const char *stale, int *outcome, char *err, size_t errlen);

/* binaries.c: whether a row's blob (bytes long) is the one its size and
** digest describe. */
int kt__binary_intact(const kt__binrow *r, int bytes);

/* rows.c */
void kt__row_bind(sqlite3_stmt *st, const kt__table *t, const void *row, int first);
/* KT__C_OK, or KT__C_NOMEM when SQLite could not make a value's text. */
int kt__row_read(sqlite3_stmt *st, const kt__table *t, void *row, int first);
void kt__row_columns(char *buf, size_t n, const kt__table *t);
/* The columns to select from a file of schema version: newer ones as NULL. */
void kt__row_select(char *buf, size_t n, const kt__table *t, int version);
void kt__row_params(char *buf, size_t n, const kt__table *t, int first);
/* The index of a column by name, or -1. */
int kt__row_col(const kt__table *t, const char *name);

/* schema.c */
/* The schema version recorded in meta (0 when there is no meta table, -1
** when its schema_version is not a number from 1 to INT_MAX); *foreign is
** set when the file holds tables but no ktune version. */
int kt__schema_read(sqlite3 *db, int *version, int *foreign);
/* Create or migrate the schema in one transaction. */
int kt__schema_ensure(kt_store *s, char *err, size_t errlen);
/* Whether the tables of a file of that schema version are the ones rows.h
** declares (plain tables; columns of the same declared types, comparing
** bytes; the same primary keys and no other unique key): why is "" when
** they are, else says what differs. Returns a SQLite error code. */
int kt__schema_check(sqlite3 *db, int version, char *why, size_t n);

#endif
