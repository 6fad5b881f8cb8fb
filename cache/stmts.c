/* The statements the cache keeps prepared, made from the table
** descriptions, and its transactions. */
#include <stdio.h>
#include <string.h>

#include "cache/db.h"

/* The text of statement id, for a user database of schema s->version. */
static void stmt_sql(const kt_store *s, int id, char *q, size_t n) {
  static const char *const fixed[ST_COUNT] = {
      [ST_GET_CONFIG] = "SELECT config, time_us FROM configs" KT__WHERE_KEY,
      [ST_TIME_OF] = "SELECT time_us, config FROM configs" KT__WHERE_KEY,
      [ST_Q_DEL] = "DELETE FROM quarantine" KT__WHERE_KEY " AND config=?5",
      [ST_Q_GET] = "SELECT reason FROM quarantine" KT__WHERE_KEY " AND config=?5",
      /* The configs other keys of a kernel chose, the most chosen first. */
      [ST_WINNERS] = "SELECT config FROM configs WHERE kernel=?1 AND spec_hash=?2 AND device=?3 AND key<>?4"
                     " GROUP BY config ORDER BY count(*) DESC, config LIMIT ?5",
      [ST_BEGIN] = "BEGIN IMMEDIATE",
      [ST_COMMIT] = "COMMIT",
      [ST_ROLLBACK] = "ROLLBACK",
  };
  static const struct {
    int id;
    const kt__table *t;
    const char *head, *tail;
  } rows[] = {
      {ST_PUT_CONFIG, &kt__configs_table, "INSERT INTO", NULL},
      {ST_PUT_TRIAL, &kt__trials_table, "INSERT OR REPLACE INTO", ""},
      /* A fresh compile replaces a row that failed its check. */
      {ST_PUT_BINARY, &kt__binaries_table, "INSERT OR REPLACE INTO", ""},
      {ST_Q_ADD, &kt__quarantine_table, "INSERT OR REPLACE INTO", ""},
  };
  char cols[1024], params[512];
  if (fixed[id]) {
    snprintf(q, n, "%s", fixed[id]);
  } else if (id == ST_TRIALS || id == ST_GET_BINARY) {
    const kt__table *t = id == ST_TRIALS ? &kt__trials_table : &kt__binaries_table;
    kt__row_select(cols, sizeof cols, t, s->version);
    snprintf(q, n, "SELECT %s FROM %s%s", cols, t->name,
             id == ST_TRIALS ? KT__WHERE_KEY " ORDER BY median_us IS NULL, median_us" : " WHERE hash=?1");
  } else {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
      if (rows[i].id != id) continue;
      kt__row_columns(cols, sizeof cols, rows[i].t);
      kt__row_params(params, sizeof params, rows[i].t, 1);
      int u = snprintf(q, n, "%s %s (%s) VALUES (%s)", rows[i].head, rows[i].t->name, cols, params);
      /* The stored row updated in place, created_at kept: whether it gives
      ** way was decided in the same transaction (kt__configs_merge). */
      if (!rows[i].tail && u > 0 && (size_t)u < n) {
        const kt__table *t = rows[i].t;
        size_t w = (size_t)u;
        for (int c = 0; c < t->npk && w < n; c++)
          w += (size_t)snprintf(q + w, n - w, "%s%s", c ? ", " : " ON CONFLICT (", t->cols[c].name);
        if (w < n) w += (size_t)snprintf(q + w, n - w, ") DO UPDATE SET");
        /* Every column after the key's, but created_at. */
        for (int c = t->npk, first = 1; c < t->ncols && w < n; c++)
          if (strcmp(t->cols[c].name, "created_at")) {
            w += (size_t)snprintf(q + w, n - w, "%s %s=excluded.%s", first ? "" : ",", t->cols[c].name, t->cols[c].name);
            first = 0;
          }
      }
    }
  }
}

sqlite3_stmt *kt__db_stmt(kt_store *s, int id, int *st, char *err, size_t errlen) {
  if (s->st[id]) return s->st[id];
  char q[4096];
  stmt_sql(s, id, q, sizeof q);
  if (sqlite3_prepare_v2(s->db, q, -1, &s->st[id], NULL) != SQLITE_OK) {
    *st = kt__db_err(s, s->db, "preparing a statement", err, errlen);
    sqlite3_finalize(s->st[id]);
    s->st[id] = NULL;
  }
  return s->st[id];
}

/* Run one of the fixed statements that return no row. */
static int run(kt_store *s, int id, const char *what, char *err, size_t errlen) {
  int st = KT__C_OK;
  sqlite3_stmt *q = kt__db_stmt(s, id, &st, err, errlen);
  if (!q) return st;
  int rc = kt__db_step(q);
  sqlite3_reset(q);
  return rc == SQLITE_DONE ? KT__C_OK : kt__db_err(s, s->db, what, err, errlen);
}

/* BEGIN IMMEDIATE: a transaction that will write takes the write lock at
** its start (upgrading a read transaction would return BUSY at once). */
int kt__db_begin(kt_store *s, char *err, size_t errlen) { return run(s, ST_BEGIN, "BEGIN IMMEDIATE", err, errlen); }

int kt__db_end(kt_store *s, int st, char *err, size_t errlen) {
  if (st) {
    char ignored[256];
    run(s, ST_ROLLBACK, "ROLLBACK", ignored, sizeof ignored);
    return st;
  }
  if ((st = run(s, ST_COMMIT, "COMMIT", err, errlen))) {
    char ignored[256];
    run(s, ST_ROLLBACK, "ROLLBACK", ignored, sizeof ignored);
  }
  return st;
}
