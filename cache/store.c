#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cache/db.h"
#include "schema.h"

/* Long enough for a tuner that holds the write lock for one short
** transaction; each retry past it waits again. */
#define BUSY_TIMEOUT_MS 10000
#define BUSY_DEADLINE_S 120

int64_t kt__db_now(void) { return (int64_t)time(NULL); }

kt_status kt__db_err(kt_store *s, sqlite3 *db, const char *what, char *err, size_t errlen) {
  int rc = db ? sqlite3_errcode(db) : SQLITE_ERROR;
  snprintf(err, errlen, "%s: %s: %s", s && s->path ? s->path : "cache", what,
           db ? sqlite3_errmsg(db) : "no database");
  return rc == SQLITE_NOMEM ? KT_ERR_NOMEM : KT_ERR_CACHE;
}

int kt__db_step(sqlite3_stmt *st) {
  time_t start = time(NULL);
  for (;;) {
    int rc = sqlite3_step(st);
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || time(NULL) - start > BUSY_DEADLINE_S) return rc;
    sqlite3_reset(st);
    usleep(1000);
  }
}

int kt__db_exec(sqlite3 *db, const char *sql) {
  time_t start = time(NULL);
  for (;;) {
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_BUSY || time(NULL) - start > BUSY_DEADLINE_S) return rc;
    usleep(1000);
  }
}

void kt__db_bind_text(sqlite3_stmt *st, int i, const char *v) {
  sqlite3_bind_text(st, i, v ? v : "", -1, SQLITE_TRANSIENT);
}

/* BEGIN IMMEDIATE: a transaction that will write takes the write lock at
** its start (upgrading a read transaction would return BUSY at once). */
kt_status kt__db_begin(kt_store *s, char *err, size_t errlen) {
  sqlite3_stmt *b = s->st[ST_BEGIN];
  int rc = kt__db_step(b);
  sqlite3_reset(b);
  return rc == SQLITE_DONE ? KT_OK : kt__db_err(s, s->db, "BEGIN IMMEDIATE", err, errlen);
}

kt_status kt__db_end(kt_store *s, kt_status st, char *err, size_t errlen) {
  sqlite3_stmt *e = s->st[st ? ST_ROLLBACK : ST_COMMIT];
  int rc = kt__db_step(e);
  sqlite3_reset(e);
  if (!st && rc != SQLITE_DONE) {
    st = kt__db_err(s, s->db, "COMMIT", err, errlen);
    sqlite3_stmt *r = s->st[ST_ROLLBACK];
    kt__db_step(r);
    sqlite3_reset(r);
  }
  return st;
}

void kt__store_default_path(char *out, size_t n) {
  const char *e = getenv("KTUNE_CACHE");
  if (e && *e) {
    snprintf(out, n, "%s", e);
    return;
  }
  e = getenv("XDG_CACHE_HOME");
  if (e && *e) {
    snprintf(out, n, "%s/ktune/ktune.db", e);
    return;
  }
  e = getenv("HOME");
  snprintf(out, n, "%s/.cache/ktune/ktune.db", e && *e ? e : ".");
}

int kt__store_fs_is_network(long t) {
  switch ((unsigned long)t & 0xffffffffUL) {
    case 0x6969UL:      /* NFS */
    case 0x517bUL:      /* SMB */
    case 0xff534d42UL:  /* CIFS */
    case 0xfe534d42UL:  /* SMB2 */
    case 0x0bd00bd0UL:  /* Lustre */
    case 0x65735546UL:  /* FUSE */
    case 0x47504653UL:  /* GPFS */
    case 0x00c36400UL:  /* Ceph */
    case 0x6b414653UL:  /* AFS */
    case 0x013111a8UL:  /* IBRIX */
    case 0x19830326UL:  /* fhgfs / BeeGFS */
      return 1;
  }
  return 0;
}

/* mkdir -p of path's directory; an existing non-directory is an error. */
static int make_dir(const char *path, const char *dir, char *err, size_t errlen) {
  struct stat sb;
  if (!mkdir(dir, 0755)) return 0;
  int e = errno;
  if (e == EEXIST && !stat(dir, &sb)) {
    if (S_ISDIR(sb.st_mode)) return 0;
    e = ENOTDIR;
  }
  snprintf(err, errlen, "%s: cannot create directory %s: %s", path, dir, strerror(e));
  return -1;
}

static int make_parent(const char *path, char *err, size_t errlen) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0;
  *slash = 0;
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (make_dir(path, dir, err, errlen)) return -1;
    *p = '/';
  }
  return make_dir(path, dir, err, errlen);
}

static const char *const sql[ST_COUNT] = {
    [ST_GET_CONFIG] = "SELECT config, time_us FROM configs WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4",
    [ST_GET_CONFIG_SYS] = "SELECT config, time_us FROM configs WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4",
    [ST_TIME_OF] = "SELECT time_us FROM configs WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4",
    [ST_UPSERT_CONFIG] =
        "INSERT INTO configs (kernel, spec_hash, device, key, config, time_us, candidates, rejected,"
        " nvrtc_version, driver_version, created_at, updated_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
        " ON CONFLICT (kernel, spec_hash, device, key) DO UPDATE SET config=excluded.config,"
        " time_us=excluded.time_us, candidates=excluded.candidates, rejected=excluded.rejected,"
        " nvrtc_version=excluded.nvrtc_version, driver_version=excluded.driver_version,"
        " updated_at=excluded.updated_at WHERE excluded.time_us < configs.time_us",
    [ST_PUT_TRIAL] =
        "INSERT OR REPLACE INTO trials (kernel, spec_hash, device, key, config, status, median_us,"
        " spread_us, registers, smem_bytes, spill_bytes, detail, measured_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    [ST_TRIALS] =
        "SELECT config, status, median_us, spread_us, registers, smem_bytes, spill_bytes, detail"
        " FROM trials WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4"
        " ORDER BY median_us IS NULL, median_us",
    [ST_PUT_BINARY] =
        "INSERT OR IGNORE INTO binaries (hash, kernel, spec_hash, arch, nvrtc_version, constants,"
        " registers, smem_bytes, spill_bytes, size, cubin, created_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [ST_GET_BINARY] = "SELECT cubin FROM binaries WHERE hash=?1",
    [ST_Q_ADD] =
        "INSERT OR REPLACE INTO quarantine (kernel, spec_hash, device, key, config, reason, since, pid)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_Q_DEL] = "DELETE FROM quarantine WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4 AND config=?5",
    [ST_Q_GET] = "SELECT reason FROM quarantine WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4 AND config=?5",
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
};

/* Schema 2 lacked the leases table, which schema.sql creates. Version 1
** lacked candidate counts, spill bytes, binaries' spec hash, the
** quarantine table and the views; the statements of schema.sql create what
** is missing once the columns exist. */
static const char migrate_1_to_2[] =
    "ALTER TABLE configs ADD COLUMN candidates INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE configs ADD COLUMN rejected INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE trials ADD COLUMN spill_bytes INTEGER;"
    "ALTER TABLE binaries ADD COLUMN spec_hash TEXT NOT NULL DEFAULT '';";

static int read_version(sqlite3 *db, int *version) {
  sqlite3_stmt *st;
  *version = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE name='meta'", -1, &st, NULL);
  if (rc) return rc;
  rc = kt__db_step(st);
  int has_meta = rc == SQLITE_ROW;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return rc;
  if (!has_meta) return SQLITE_OK;
  rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE name='schema_version'", -1, &st, NULL);
  if (rc) return rc;
  rc = kt__db_step(st);
  if (rc == SQLITE_ROW) *version = atoi((const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Create or migrate the schema in one transaction; another process may be
** doing the same, so the version is read again under the write lock. */
static kt_status ensure_schema(kt_store *s, char *err, size_t errlen) {
  if (kt__db_exec(s->db, "BEGIN IMMEDIATE")) return kt__db_err(s, s->db, "BEGIN IMMEDIATE", err, errlen);
  int v, rc = read_version(s->db, &v);
  const char *what = "reading the schema version";
  if (!rc && v == 1) {
    what = "migrating schema 1 to 2";
    rc = sqlite3_exec(s->db, migrate_1_to_2, NULL, NULL, NULL);
  }
  if (!rc && v >= 1 && v < KT_SCHEMA_VERSION)
    kt__log(&s->log, KT_LOG_INFO, "%s: migrating the cache from schema %d to %d", s->path, v, KT_SCHEMA_VERSION);
  if (!rc && v < KT_SCHEMA_VERSION) {
    what = "creating the schema";
    rc = sqlite3_exec(s->db, kt__schema_sql, NULL, NULL, NULL);
  }
  if (!rc && v < KT_SCHEMA_VERSION) {
    char upd[160];
    snprintf(upd, sizeof upd, "INSERT OR REPLACE INTO meta VALUES ('schema_version', '%d')", KT_SCHEMA_VERSION);
    rc = sqlite3_exec(s->db, upd, NULL, NULL, NULL);
  }
  if (rc) {
    kt_status st = kt__db_err(s, s->db, what, err, errlen);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
  }
  if (kt__db_exec(s->db, "COMMIT")) return kt__db_err(s, s->db, "COMMIT", err, errlen);
  return KT_OK;
}

/* A damaged file is reported, never deleted or rewritten. */
static kt_status check_integrity(kt_store *s, sqlite3 *db, const char *path, char *err, size_t errlen) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL);
  if (!rc) {
    rc = kt__db_step(st);
    if (rc == SQLITE_ROW) {
      const char *r = (const char *)sqlite3_column_text(st, 0);
      if (r && strcmp(r, "ok")) {
        snprintf(err, errlen, "%s: the database is corrupt (%s); it is left as it is", path, r);
        sqlite3_finalize(st);
        return KT_ERR_CACHE;
      }
      rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
  }
  if (rc && rc != SQLITE_DONE) {
    snprintf(err, errlen, "%s: %s; the file is left as it is", path, sqlite3_errmsg(db));
    (void)s;
    return KT_ERR_CACHE;
  }
  return KT_OK;
}

static kt_status open_user(kt_store *s, const char *path, char *err, size_t errlen) {
  struct stat sb;
  if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
    snprintf(err, errlen, "%s: is a directory, not a cache file", path);
    return KT_ERR_CACHE;
  }
  if (make_parent(path, err, errlen)) return KT_ERR_CACHE;
  int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc) {
    int e = errno;
    snprintf(err, errlen, "%s: cannot open: %s%s%s", path, s->db ? sqlite3_errmsg(s->db) : "out of memory",
             e ? ": " : "", e ? strerror(e) : "");
    return KT_ERR_CACHE;
  }
  sqlite3_extended_result_codes(s->db, 0);
  sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
  kt_status st = check_integrity(s, s->db, path, err, errlen);
  if (st) return st;
  int v;
  if ((rc = read_version(s->db, &v))) {
    snprintf(err, errlen, "%s: %s; the file is left as it is", path, sqlite3_errmsg(s->db));
    return KT_ERR_CACHE;
  }
  s->readonly = sqlite3_db_readonly(s->db, "main") == 1;
  if (v > KT_SCHEMA_VERSION && !s->readonly) {
    /* Written by a newer ktune: read what we understand, change nothing. */
    sqlite3_close(s->db);
    s->db = NULL;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL)) {
      snprintf(err, errlen, "%s: cannot open read-only: %s", path, s->db ? sqlite3_errmsg(s->db) : "out of memory");
      return KT_ERR_CACHE;
    }
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    s->readonly = 1;
    kt__log(&s->log, KT_LOG_WARN,
            "%s: written by a newer ktune (schema %d, this one knows %d): opened read-only, nothing "
            "will be written to it",
            path, v, KT_SCHEMA_VERSION);
  } else if (s->readonly) {
    kt__log(&s->log, KT_LOG_WARN, "%s: not writable: opened read-only, tunings stay in memory", path);
  }
  if (!s->readonly) {
    if (kt__db_exec(s->db, "PRAGMA journal_mode=WAL") || kt__db_exec(s->db, "PRAGMA synchronous=NORMAL"))
      return kt__db_err(s, s->db, "enabling WAL", err, errlen);
    if (v < KT_SCHEMA_VERSION && (st = ensure_schema(s, err, errlen))) return st;
  } else if (v < KT_SCHEMA_VERSION && v != 1) {
    snprintf(err, errlen, "%s: read-only and without the ktune schema", path);
    return KT_ERR_CACHE;
  }
  /* Cubins from a file others may write would run their code on the GPU. */
  if (!stat(path, &sb)) {
    s->trusted = !(sb.st_mode & S_IWOTH) && sb.st_uid == geteuid();
    if (!s->trusted)
      kt__log(&s->log, KT_LOG_WARN,
              "%s: %s: compiled kernels will not be loaded from it (configs still are, after "
              "validation)",
              path, (sb.st_mode & S_IWOTH) ? "world-writable" : "owned by another user");
  }
  struct statfs fs;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  if (!statfs(slash ? (dir[0] ? dir : "/") : ".", &fs) && kt__store_fs_is_network((long)fs.f_type))
    kt__log(&s->log, KT_LOG_WARN,
            "%s: on a network filesystem, where SQLite's locking is unreliable: use one cache per host "
            "and move results with `ktune export`/`ktune import`, or a read-only KTUNE_SYSTEM_CACHE",
            path);
  return KT_OK;
}

static void open_system(kt_store *s, const char *path) {
  char err[KT_ERRMAX];
  if (sqlite3_open_v2(path, &s->sys, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) ||
      check_integrity(s, s->sys, path, err, sizeof err) ||
      sqlite3_prepare_v2(s->sys, sql[ST_GET_CONFIG_SYS], -1, &s->st[ST_GET_CONFIG_SYS], NULL)) {
    kt__log(&s->log, KT_LOG_WARN, "%s: system cache not used: %s", path,
            s->sys ? sqlite3_errmsg(s->sys) : "out of memory");
    sqlite3_close(s->sys);
    s->sys = NULL;
    return;
  }
  sqlite3_busy_timeout(s->sys, BUSY_TIMEOUT_MS);
}

kt_status kt__store_open(kt_store **out, const char *path, const char *system_path,
                         const kt__logger *log, char *err, size_t errlen) {
  *out = NULL;
  char def[PATH_MAX];
  if (!path || !*path) {
    kt__store_default_path(def, sizeof def);
    path = def;
  }
  kt_store *s = kt__calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "%s: out of memory", path);
    return KT_ERR_NOMEM;
  }
  if (log) s->log = *log;
  s->trusted = 1;
  /* Recursive: a listing's callback may query the store (ktune show reads
  ** each config's trials while the configs are being listed). */
  pthread_mutexattr_t ma;
  int merr = pthread_mutexattr_init(&ma) || pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE) ||
             pthread_mutex_init(&s->lock, &ma);
  pthread_mutexattr_destroy(&ma);
  if (merr || !(s->path = kt__strdup(path)) ||
      (system_path && *system_path && !(s->sys_path = kt__strdup(system_path)))) {
    kt__free(s->path);
    kt__free(s);
    snprintf(err, errlen, "%s: out of memory", path);
    return KT_ERR_NOMEM;
  }
  kt_status st = open_user(s, path, err, errlen);
  for (int i = 0; !st && i < ST_COUNT; i++) {
    if (i == ST_GET_CONFIG_SYS) continue;
    if (s->readonly && i != ST_GET_CONFIG && i != ST_TRIALS && i != ST_GET_BINARY && i != ST_Q_GET &&
        i != ST_TIME_OF)
      continue;
    if (sqlite3_prepare_v2(s->db, sql[i], -1, &s->st[i], NULL))
      st = kt__db_err(s, s->db, "preparing statements", err, errlen);
  }
  if (st) {
    kt__store_close(s);
    return st;
  }
  if (s->sys_path) open_system(s, s->sys_path);
  *out = s;
  return KT_OK;
}

void kt__store_close(kt_store *s) {
  if (!s) return;
  for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->st[i]);
  sqlite3_close(s->db);
  sqlite3_close(s->sys);
  pthread_mutex_destroy(&s->lock);
  kt__free(s->path);
  kt__free(s->sys_path);
  kt__free(s);
}

const char *kt__store_path(const kt_store *s) { return s ? s->path : ""; }
int kt__store_readonly(const kt_store *s) { return s ? s->readonly : 1; }
int kt__store_binaries_trusted(const kt_store *s) { return s && s->trusted; }

static void bind_key(sqlite3_stmt *st, const char *kernel, const char *spec_hash, const char *device,
                     const char *key) {
  kt__db_bind_text(st, 1, kernel);
  kt__db_bind_text(st, 2, spec_hash);
  kt__db_bind_text(st, 3, device);
  kt__db_bind_text(st, 4, key);
}

/* A statement made for one use, its first four params bound to a key;
** NULL with *st set (and err) when it cannot be prepared. */
static sqlite3_stmt *keyed(kt_store *s, const char *q, const char *kernel, const char *spec_hash,
                           const char *device, const char *key, const char *what, kt_status *st, char *err,
                           size_t errlen) {
  sqlite3_stmt *p;
  if (sqlite3_prepare_v2(s->db, q, -1, &p, NULL)) {
    *st = kt__db_err(s, s->db, what, err, errlen);
    return NULL;
  }
  bind_key(p, kernel, spec_hash, device, key);
  return p;
}

static kt_status readonly_err(kt_store *s, char *err, size_t errlen) {
  snprintf(err, errlen, "%s: the cache is read-only", s->path);
  return KT_ERR_READONLY;
}


kt_status kt__store_put_config(kt_store *s, const kt__cfgrow *r, int *outcome, char *err, size_t errlen) {
  if (s->readonly) return readonly_err(s, err, errlen);
  pthread_mutex_lock(&s->lock);
  kt_status st = kt__db_begin(s, err, errlen);
  int oc = KT__ADDED;
  if (!st) {
    sqlite3_stmt *t = s->st[ST_TIME_OF];
    bind_key(t, r->kernel, r->spec_hash, r->device, r->key);
    int rc = kt__db_step(t);
    if (rc == SQLITE_ROW) oc = r->time_us < sqlite3_column_double(t, 0) ? KT__REPLACED : KT__KEPT;
    else if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading configs", err, errlen);
    sqlite3_reset(t);
  }
  if (!st && oc != KT__KEPT) {
    sqlite3_stmt *u = s->st[ST_UPSERT_CONFIG];
    int64_t now = kt__db_now();
    bind_key(u, r->kernel, r->spec_hash, r->device, r->key);
    kt__db_bind_text(u, 5, r->config);
    sqlite3_bind_double(u, 6, r->time_us);
    sqlite3_bind_int(u, 7, r->candidates);
    sqlite3_bind_int(u, 8, r->rejected);
    kt__db_bind_text(u, 9, r->nvrtc_version);
    kt__db_bind_text(u, 10, r->driver_version);
    sqlite3_bind_int64(u, 11, r->created_at ? r->created_at : now);
    sqlite3_bind_int64(u, 12, r->updated_at ? r->updated_at : now);
    if (kt__db_step(u) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing configs", err, errlen);
    sqlite3_reset(u);
  }
  st = kt__db_end(s, st, err, errlen);
  pthread_mutex_unlock(&s->lock);
  if (!st && outcome) *outcome = oc;
  return st;
}

static kt_status get_config_from(kt_store *s, sqlite3 *db, sqlite3_stmt *q, const char *kernel,
                                 const char *spec_hash, const char *device, const char *key,
                                 char *config, size_t n, double *time_us, char *err, size_t errlen) {
  bind_key(q, kernel, spec_hash, device, key);
  int rc = kt__db_step(q);
  kt_status st = KT_ERR_NOT_FOUND;
  if (rc == SQLITE_ROW) {
    snprintf(config, n, "%s", (const char *)sqlite3_column_text(q, 0));
    if (time_us) *time_us = sqlite3_column_double(q, 1);
    st = KT_OK;
  } else if (rc != SQLITE_DONE) {
    st = kt__db_err(s, db, "reading configs", err, errlen);
  }
  sqlite3_reset(q);
  return st;
}

kt_status kt__store_get_config(kt_store *s, const char *kernel, const char *spec_hash,
                               const char *device, const char *key, char *config, size_t n,
                               double *time_us, char *err, size_t errlen) {
  pthread_mutex_lock(&s->lock);
  kt_status st = get_config_from(s, s->db, s->st[ST_GET_CONFIG], kernel, spec_hash, device, key,
                                 config, n, time_us, err, errlen);
  if (st == KT_ERR_NOT_FOUND && s->sys)
    st = get_config_from(s, s->sys, s->st[ST_GET_CONFIG_SYS], kernel, spec_hash, device, key, config,
                         n, time_us, err, errlen);
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_put_trial(kt_store *s, const kt__trialrow *r, char *err, size_t errlen) {
  if (s->readonly) return readonly_err(s, err, errlen);
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *t = s->st[ST_PUT_TRIAL];
  bind_key(t, r->kernel, r->spec_hash, r->device, r->key);
  kt__db_bind_text(t, 5, r->config);
  kt__db_bind_text(t, 6, r->status);
  if (r->median_us >= 0) sqlite3_bind_double(t, 7, r->median_us);
  else sqlite3_bind_null(t, 7);
  if (r->spread_us >= 0) sqlite3_bind_double(t, 8, r->spread_us);
  else sqlite3_bind_null(t, 8);
  sqlite3_bind_int(t, 9, r->registers);
  sqlite3_bind_int(t, 10, r->smem_bytes);
  sqlite3_bind_int(t, 11, r->spill_bytes);
  kt__db_bind_text(t, 12, r->detail);
  sqlite3_bind_int64(t, 13, kt__db_now());
  kt_status st = kt__db_step(t) == SQLITE_DONE ? KT_OK : kt__db_err(s, s->db, "writing trials", err, errlen);
  sqlite3_reset(t);
  sqlite3_clear_bindings(t);
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_trials(kt_store *s, const char *kernel, const char *spec_hash,
                           const char *device, const char *key,
                           int (*fn)(void *user, const kt__trialrow *r), void *user, char *err,
                           size_t errlen) {
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *q = s->st[ST_TRIALS];
  bind_key(q, kernel, spec_hash, device, key);
  int rc;
  kt_status st = KT_OK;
  while ((rc = kt__db_step(q)) == SQLITE_ROW) {
    kt__trialrow r = {kernel, spec_hash, device, key,
                      (const char *)sqlite3_column_text(q, 0), (const char *)sqlite3_column_text(q, 1),
                      sqlite3_column_type(q, 2) == SQLITE_NULL ? -1 : sqlite3_column_double(q, 2),
                      sqlite3_column_type(q, 3) == SQLITE_NULL ? -1 : sqlite3_column_double(q, 3),
                      sqlite3_column_int(q, 4), sqlite3_column_int(q, 5), sqlite3_column_int(q, 6),
                      (const char *)sqlite3_column_text(q, 7)};
    if (fn(user, &r)) break;
  }
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading trials", err, errlen);
  sqlite3_reset(q);
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_put_binary(kt_store *s, const kt__binrow *r, char *err, size_t errlen) {
  if (s->readonly) return readonly_err(s, err, errlen);
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *b = s->st[ST_PUT_BINARY];
  kt__db_bind_text(b, 1, r->hash);
  kt__db_bind_text(b, 2, r->kernel);
  kt__db_bind_text(b, 3, r->spec_hash);
  kt__db_bind_text(b, 4, r->arch);
  kt__db_bind_text(b, 5, r->nvrtc_version);
  kt__db_bind_text(b, 6, r->constants);
  sqlite3_bind_int(b, 7, r->registers);
  sqlite3_bind_int(b, 8, r->smem_bytes);
  sqlite3_bind_int(b, 9, r->spill_bytes);
  sqlite3_bind_int64(b, 10, (sqlite3_int64)r->size);
  sqlite3_bind_blob64(b, 11, r->cubin, r->size, SQLITE_STATIC);
  sqlite3_bind_int64(b, 12, kt__db_now());
  kt_status st = kt__db_step(b) == SQLITE_DONE ? KT_OK : kt__db_err(s, s->db, "writing binaries", err, errlen);
  sqlite3_reset(b);
  sqlite3_clear_bindings(b);
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_get_binary(kt_store *s, const char *hash, void **cubin, size_t *size, char *err,
                               size_t errlen) {
  *cubin = NULL;
  if (!s->trusted) return KT_ERR_NOT_FOUND;
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *q = s->st[ST_GET_BINARY];
  kt__db_bind_text(q, 1, hash);
  int rc = kt__db_step(q);
  kt_status st = KT_ERR_NOT_FOUND;
  if (rc == SQLITE_ROW) {
    int n = sqlite3_column_bytes(q, 0);
    const void *p = sqlite3_column_blob(q, 0);
    if (n > 0 && p && (*cubin = kt__malloc((size_t)n))) {
      memcpy(*cubin, p, (size_t)n);
      *size = (size_t)n;
      st = KT_OK;
    } else if (n > 0) {
      snprintf(err, errlen, "%s: out of memory", s->path);
      st = KT_ERR_NOMEM;
    }
  } else if (rc != SQLITE_DONE) {
    st = kt__db_err(s, s->db, "reading binaries", err, errlen);
  }
  sqlite3_reset(q);
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_quarantine(kt_store *s, const char *kernel, const char *spec_hash,
                               const char *device, const char *key, const char *config,
                               const char *reason, char *err, size_t errlen) {
  if (s->readonly) return readonly_err(s, err, errlen);
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *q = s->st[reason ? ST_Q_ADD : ST_Q_DEL];
  bind_key(q, kernel, spec_hash, device, key);
  kt__db_bind_text(q, 5, config);
  if (reason) {
    kt__db_bind_text(q, 6, reason);
    sqlite3_bind_int64(q, 7, kt__db_now());
    sqlite3_bind_int64(q, 8, (sqlite3_int64)getpid());
  }
  kt_status st = kt__db_step(q) == SQLITE_DONE ? KT_OK : kt__db_err(s, s->db, "writing quarantine", err, errlen);
  sqlite3_reset(q);
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_is_quarantined(kt_store *s, const char *kernel, const char *spec_hash,
                                   const char *device, const char *key, const char *config,
                                   int *yes, char *reason, size_t reasonlen, char *err,
                                   size_t errlen) {
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *q = s->st[ST_Q_GET];
  bind_key(q, kernel, spec_hash, device, key);
  kt__db_bind_text(q, 5, config);
  int rc = kt__db_step(q);
  kt_status st = KT_OK;
  *yes = rc == SQLITE_ROW;
  if (*yes && reason) snprintf(reason, reasonlen, "%s", (const char *)sqlite3_column_text(q, 0));
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
  sqlite3_reset(q);
  pthread_mutex_unlock(&s->lock);
  return st;
}

char *kt__store_binary_lowered(kt_store *s, const char *hash) {
  char *out = NULL;
  pthread_mutex_lock(&s->lock);
  sqlite3_stmt *q;
  if (!sqlite3_prepare_v2(s->db, "SELECT json_extract(constants, '$.lowered') FROM binaries WHERE hash=?1", -1, &q,
                          NULL)) {
    kt__db_bind_text(q, 1, hash);
    if (kt__db_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
      out = kt__strdup((const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
  }
  pthread_mutex_unlock(&s->lock);
  return out;
}

kt_status kt__store_quarantined(kt_store *s, const char *kernel, const char *spec_hash,
                               const char *device, const char *key,
                               void (*fn)(void *user, const char *config, const char *reason),
                               void *user, char *err, size_t errlen) {
  pthread_mutex_lock(&s->lock);
  kt_status st = KT_OK;
  sqlite3_stmt *q = keyed(s,
                          "SELECT config, reason FROM quarantine WHERE kernel=?1 AND spec_hash=?2 AND device=?3"
                          " AND key=?4",
                          kernel, spec_hash, device, key, "reading quarantine", &st, err, errlen);
  if (q) {
    int rc;
    while ((rc = kt__db_step(q)) == SQLITE_ROW)
      fn(user, (const char *)sqlite3_column_text(q, 0), (const char *)sqlite3_column_text(q, 1));
    if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
    sqlite3_finalize(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_lease(kt_store *s, const char *kernel, const char *spec_hash, const char *device,
                          const char *key, const char *host, long pid, int ttl_s, int *taken, long *holder,
                          char *err, size_t errlen) {
  *taken = 0;
  *holder = 0;
  if (s->readonly) {
    *taken = 1; /* nothing to coordinate through */
    return KT_OK;
  }
  pthread_mutex_lock(&s->lock);
  kt_status st = kt__db_begin(s, err, errlen);
  sqlite3_stmt *q = NULL;
  if (!st)
    q = keyed(s, "SELECT host, pid, expires_at FROM leases WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4",
              kernel, spec_hash, device, key, "reading leases", &st, err, errlen);
  int free_ = 1;
  if (q) {
    int rc = kt__db_step(q);
    if (rc == SQLITE_ROW) {
      const char *h = (const char *)sqlite3_column_text(q, 0);
      long p = (long)sqlite3_column_int64(q, 1);
      int64_t exp = sqlite3_column_int64(q, 2);
      int same_host = h && !strcmp(h, host);
      int gone = same_host && p != pid && kill((pid_t)p, 0) && errno == ESRCH;
      int mine = same_host && p == pid;
      free_ = mine || gone || exp < kt__db_now();
      if (!free_) *holder = p;
    } else if (rc != SQLITE_DONE) {
      st = kt__db_err(s, s->db, "reading leases", err, errlen);
    }
    sqlite3_finalize(q);
  }
  if (!st && free_ &&
      (q = keyed(s,
                 "INSERT OR REPLACE INTO leases (kernel, spec_hash, device, key, host, pid, expires_at)"
                 " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                 kernel, spec_hash, device, key, "writing leases", &st, err, errlen))) {
    kt__db_bind_text(q, 5, host);
    sqlite3_bind_int64(q, 6, pid);
    sqlite3_bind_int64(q, 7, kt__db_now() + ttl_s);
    if (kt__db_step(q) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing leases", err, errlen);
    else *taken = 1;
    sqlite3_finalize(q);
  }
  st = kt__db_end(s, st, err, errlen);
  pthread_mutex_unlock(&s->lock);
  if (st) *taken = 0;
  return st;
}

kt_status kt__store_lease_release(kt_store *s, const char *kernel, const char *spec_hash,
                                  const char *device, const char *key, const char *host, long pid,
                                  char *err, size_t errlen) {
  if (s->readonly) return KT_OK;
  pthread_mutex_lock(&s->lock);
  kt_status st = KT_OK;
  sqlite3_stmt *q = keyed(s,
                          "DELETE FROM leases WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key=?4 AND host=?5"
                          " AND pid=?6",
                          kernel, spec_hash, device, key, "writing leases", &st, err, errlen);
  if (q) {
    kt__db_bind_text(q, 5, host);
    sqlite3_bind_int64(q, 6, pid);
    if (kt__db_step(q) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing leases", err, errlen);
    sqlite3_finalize(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}
