/* The schema, made from the table descriptions of rows.h: created in a new
** file, and brought up to date in an older one by adding what it lacks, in
** one transaction. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cache/db.h"

/* Views for people (docs/cache.md). */
static const char views[] =
    "CREATE VIEW IF NOT EXISTS v_configs AS"
    "  SELECT kernel, device, key, config, round(time_us, 2) AS time_us, candidates, rejected,"
    "         CAST(strftime('%s', 'now') AS INTEGER) - updated_at AS age_s"
    "  FROM configs;"
    "CREATE VIEW IF NOT EXISTS v_trials AS"
    "  SELECT kernel, device, key, config, status, round(median_us, 2) AS median_us,"
    "         round(spread_us, 2) AS spread_us, registers, smem_bytes, spill_bytes, detail"
    "  FROM trials;";

/* meta's schema_version: a decimal number from 1 to INT_MAX, else -1. */
static int version_of(const char *text) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  return end == text || *end || errno || v < 1 || v > INT_MAX ? -1 : (int)v;
}

int kt__schema_read(sqlite3 *db, int *version, int *foreign) {
  *version = 0;
  *foreign = 0;
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db,
                              "SELECT (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'),"
                              " (SELECT count(*) FROM sqlite_master)",
                              -1, &st, NULL);
  if (rc) return rc;
  rc = kt__db_step(st);
  int has_meta = rc == SQLITE_ROW && sqlite3_column_int(st, 0), objects = rc == SQLITE_ROW ? sqlite3_column_int(st, 1) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_ROW) return rc;
  /* Another application's "meta" table has no schema_version row, or no
  ** such columns (SQLITE_ERROR): then the file is not ours. */
  if (has_meta) {
    rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE name = 'schema_version'", -1, &st, NULL);
    if (rc == SQLITE_OK) {
      rc = kt__db_step(st);
      int oom = 0;
      if (rc == SQLITE_ROW) *version = version_of(kt__db_text(st, 0, &oom));
      if (oom) rc = SQLITE_NOMEM;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE && rc != SQLITE_ERROR) return rc;
  }
  *foreign = objects > 0 && *version <= 0;
  return SQLITE_OK;
}

/* CREATE TABLE IF NOT EXISTS for t, with every column and its key. */
static int create_table(sqlite3 *db, const kt__table *t) {
  char q[4096];
  size_t u = (size_t)snprintf(q, sizeof q, "CREATE TABLE IF NOT EXISTS %s (", t->name);
  for (int i = 0; i < t->ncols && u < sizeof q; i++)
    u += (size_t)snprintf(q + u, sizeof q - u, "%s %s, ", t->cols[i].name, t->cols[i].decl);
  for (int i = 0; i < t->npk && u < sizeof q; i++)
    u += (size_t)snprintf(q + u, sizeof q - u, "%s%s", i ? ", " : "PRIMARY KEY (", t->cols[i].name);
  if (u < sizeof q) snprintf(q + u, sizeof q - u, "))%s", t->rowid ? "" : " WITHOUT ROWID");
  return sqlite3_exec(db, q, NULL, NULL, NULL);
}

/* The columns a table of a version-v file lacks. */
static int add_columns(sqlite3 *db, const kt__table *t, int v) {
  if (t->version > v) return SQLITE_OK; /* the table is new: created whole */
  for (int i = 0; i < t->ncols; i++) {
    if (t->cols[i].version <= v) continue;
    char q[512];
    snprintf(q, sizeof q, "ALTER TABLE %s ADD COLUMN %s %s", t->name, t->cols[i].name, t->cols[i].decl);
    int rc = sqlite3_exec(db, q, NULL, NULL, NULL);
    if (rc) return rc;
  }
  return SQLITE_OK;
}

static int upgrade(kt_store *s, int v) {
  int rc = SQLITE_OK;
  for (int i = 0; kt__tables[i] && !rc; i++) rc = add_columns(s->db, kt__tables[i], v);
  for (int i = 0; kt__tables[i] && !rc; i++) rc = create_table(s->db, kt__tables[i]);
  if (!rc) rc = sqlite3_exec(s->db, views, NULL, NULL, NULL);
  if (!rc) {
    char upd[160];
    snprintf(upd, sizeof upd, "INSERT OR REPLACE INTO meta VALUES ('schema_version', '%d')", KT__SCHEMA_VERSION);
    rc = sqlite3_exec(s->db, upd, NULL, NULL, NULL);
  }
  return rc;
}

/* Another process may be doing the same: the version is read again under
** the write lock. */
int kt__schema_ensure(kt_store *s, char *err, size_t errlen) {
  if (kt__db_exec(s->db, "BEGIN IMMEDIATE")) return kt__db_err(s, s->db, "BEGIN IMMEDIATE", err, errlen);
  int v, foreign, rc = kt__schema_read(s->db, &v, &foreign);
  if (!rc && v >= 1 && v < KT__SCHEMA_VERSION)
    kt__db_log(s, 2, "%s: migrating the cache from schema %d to %d", s->path, v, KT__SCHEMA_VERSION);
  if (!rc && v < KT__SCHEMA_VERSION) rc = upgrade(s, v);
  if (rc) {
    int st = kt__db_err(s, s->db, v ? "migrating the schema" : "creating the schema", err, errlen);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
  }
  if (kt__db_exec(s->db, "COMMIT")) {
    int st = kt__db_err(s, s->db, "COMMIT", err, errlen);
    sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
  }
  s->version = v < KT__SCHEMA_VERSION ? KT__SCHEMA_VERSION : v;
  return KT__C_OK;
}

/* Whether the object called t->name is a plain table: "" when it is, else
** why not; *exists is set when there is one. */
static int check_object(sqlite3 *db, const kt__table *t, int v, int *exists, char *why, size_t n) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "SELECT type, sql LIKE 'CREATE VIRTUAL%' FROM sqlite_master"
                              " WHERE name = ?1 COLLATE NOCASE AND type <> 'trigger'", -1, &st, NULL);
  if (rc) return rc;
  kt__db_bind_text(st, 1, t->name);
  rc = kt__db_step(st);
  *exists = rc == SQLITE_ROW;
  if (rc == SQLITE_ROW) {
    int oom = 0;
    const char *type = kt__db_text(st, 0, &oom);
    if (oom) rc = SQLITE_NOMEM;
    else if (strcmp(type, "table"))
      snprintf(why, n, "%s is a%s %s, not a table", t->name, *type == 'i' ? "n" : "", type);
    else if (sqlite3_column_int(st, 1)) snprintf(why, n, "%s is a virtual table", t->name);
    else if (t->version > v) snprintf(why, n, "it holds a table %s, which schema %d does not have", t->name, v);
  } else if (rc == SQLITE_DONE && t->version <= v) {
    snprintf(why, n, "it has no table %s", t->name);
  }
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The declared type of each column ktune reads (text and numbers compare
** by it), its collation, and whether it is in the primary key. */
static int check_columns(sqlite3 *db, const kt__table *t, int v, char *why, size_t n) {
  for (int i = 0; i < t->ncols && !*why; i++) {
    const kt__col *c = &t->cols[i];
    if (c->version > v) continue;
    const char *type, *coll;
    int notnull, pk, autoinc;
    int rc = sqlite3_table_column_metadata(db, "main", t->name, c->name, &type, &coll, &notnull, &pk, &autoinc);
    if (rc == SQLITE_NOMEM) return rc;
    size_t want = strcspn(c->decl, " ");
    if (rc) snprintf(why, n, "table %s has no column %s", t->name, c->name);
    else if (!type || strlen(type) != want || strncasecmp(type, c->decl, want))
      snprintf(why, n, "column %s.%s is %s, not %.*s", t->name, c->name, type && *type ? type : "untyped", (int)want,
               c->decl);
    else if (!coll || strcasecmp(coll, "BINARY"))
      snprintf(why, n, "column %s.%s compares as %s, not BINARY", t->name, c->name, coll ? coll : "?");
    else if (!pk != !(i < t->npk))
      snprintf(why, n, "column %s.%s is%s in the primary key", t->name, c->name, pk ? "" : " not");
  }
  return SQLITE_OK;
}

/* One unique key, the primary key, comparing bytes: a second one would
** have a REPLACE delete rows of other keys. */
static int check_keys(sqlite3 *db, const kt__table *t, char *why, size_t n) {
  sqlite3_stmt *st;
  int rc = sqlite3_prepare_v2(db, "SELECT l.name, l.origin, x.name, x.coll FROM pragma_index_list(?1) AS l,"
                              " pragma_index_xinfo(l.name) AS x WHERE l.\"unique\" AND x.key", -1, &st, NULL);
  if (rc) return rc;
  kt__db_bind_text(st, 1, t->name);
  while (!*why && (rc = kt__db_step(st)) == SQLITE_ROW) {
    int oom = 0;
    const char *index = kt__db_text(st, 0, &oom), *origin = kt__db_text(st, 1, &oom);
    const char *col = kt__db_text(st, 2, &oom), *coll = kt__db_text(st, 3, &oom);
    if (oom) rc = SQLITE_NOMEM;
    else if (strcmp(origin, "pk"))
      snprintf(why, n, "table %s has a unique key besides its primary key (%s)", t->name, index);
    else if (strcasecmp(coll, "BINARY"))
      snprintf(why, n, "the primary key of %s compares %s as %s, not BINARY", t->name, col, coll);
    if (oom) break;
  }
  sqlite3_finalize(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int kt__schema_check(sqlite3 *db, int version, char *why, size_t n) {
  int v = version < KT__SCHEMA_VERSION ? version : KT__SCHEMA_VERSION, rc = SQLITE_OK;
  why[0] = 0;
  for (int i = 0; kt__tables[i] && !rc && !*why; i++) {
    int exists = 0;
    rc = check_object(db, kt__tables[i], v, &exists, why, n);
    if (!rc && exists && !*why) rc = check_columns(db, kt__tables[i], v, why, n);
    if (!rc && exists && !*why) rc = check_keys(db, kt__tables[i], why, n);
  }
  return rc;
}
