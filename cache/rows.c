/* The table descriptions of rows.h, and whole rows bound to and read from
** statements through them. */
#include <stdio.h>
#include <string.h>

#include "cache/db.h"

#define COL(rowtype, name, kind, decl, ver) {#name, KT__K_##kind, offsetof(rowtype, name), decl, ver},

#define META_COL(name, kind, decl, ver) COL(kt__metarow, name, kind, decl, ver)
#define CONFIGS_COL(name, kind, decl, ver) COL(kt__cfgrow, name, kind, decl, ver)
#define TRIALS_COL(name, kind, decl, ver) COL(kt__trialrow, name, kind, decl, ver)
#define BINARIES_COL(name, kind, decl, ver) COL(kt__binrow, name, kind, decl, ver)
#define QUARANTINE_COL(name, kind, decl, ver) COL(kt__qrow, name, kind, decl, ver)
#define LEASES_COL(name, kind, decl, ver) COL(kt__leaserow, name, kind, decl, ver)

static const kt__col meta_cols[] = {KT__META_COLS(META_COL)};
static const kt__col configs_cols[] = {KT__CONFIGS_COLS(CONFIGS_COL)};
static const kt__col trials_cols[] = {KT__TRIALS_COLS(TRIALS_COL)};
static const kt__col binaries_cols[] = {KT__BINARIES_COLS(BINARIES_COL)};
static const kt__col quarantine_cols[] = {KT__QUARANTINE_COLS(QUARANTINE_COL)};
static const kt__col leases_cols[] = {KT__LEASES_COLS(LEASES_COL)};

#define N(a) ((int)(sizeof a / sizeof a[0]))
#define NO_BLOB ((size_t)-1)

/* name, columns, count, version, primary key columns, rowid, blob size */
const kt__table kt__meta_table = {"meta", meta_cols, N(meta_cols), 1, 1, 0, NO_BLOB};
const kt__table kt__configs_table = {"configs", configs_cols, N(configs_cols), 1, 4, 0, NO_BLOB};
const kt__table kt__trials_table = {"trials", trials_cols, N(trials_cols), 1, 5, 0, NO_BLOB};
const kt__table kt__binaries_table = {"binaries", binaries_cols, N(binaries_cols), 1, 1, 1, offsetof(kt__binrow, size)};
const kt__table kt__quarantine_table = {"quarantine", quarantine_cols, N(quarantine_cols), 2, 5, 0, NO_BLOB};
const kt__table kt__leases_table = {"leases", leases_cols, N(leases_cols), 3, 4, 0, NO_BLOB};

const kt__table *const kt__tables[] = {&kt__meta_table,       &kt__configs_table,    &kt__trials_table,
                                       &kt__binaries_table,   &kt__quarantine_table, &kt__leases_table,
                                       NULL};

void kt__row_bind(sqlite3_stmt *st, const kt__table *t, const void *row, int first) {
  const char *base = row;
  for (int i = 0; i < t->ncols; i++) {
    const kt__col *c = &t->cols[i];
    const void *f = base + c->off;
    int at = first + i;
    switch (c->kind) {
      case KT__K_STR: kt__db_bind_text(st, at, *(const char *const *)f); break;
      case KT__K_INT: sqlite3_bind_int64(st, at, *(const int64_t *)f); break;
      case KT__K_REAL: sqlite3_bind_double(st, at, *(const double *)f); break;
      case KT__K_OPT:
        if (*(const double *)f >= 0) sqlite3_bind_double(st, at, *(const double *)f);
        else sqlite3_bind_null(st, at);
        break;
      default:
        sqlite3_bind_blob64(st, at, *(const void *const *)f, (sqlite3_uint64) * (const int64_t *)(base + t->blob_len),
                            SQLITE_STATIC);
        break;
    }
  }
}

int kt__row_read(sqlite3_stmt *st, const kt__table *t, void *row, int first) {
  char *base = row;
  for (int i = 0; i < t->ncols; i++) {
    const kt__col *c = &t->cols[i];
    void *f = base + c->off;
    int at = first + i;
    switch (c->kind) {
      case KT__K_STR: {
        const char *v = (const char *)sqlite3_column_text(st, at);
        /* NULL for a value that is not NULL: SQLite ran out of memory. */
        if (!v && sqlite3_column_type(st, at) != SQLITE_NULL) return KT__C_NOMEM;
        *(const char **)f = v ? v : "";
        break;
      }
      case KT__K_INT: *(int64_t *)f = sqlite3_column_int64(st, at); break;
      case KT__K_REAL: *(double *)f = sqlite3_column_double(st, at); break;
      case KT__K_OPT:
        *(double *)f = sqlite3_column_type(st, at) == SQLITE_NULL ? -1 : sqlite3_column_double(st, at);
        break;
      default:
        *(const void **)f = sqlite3_column_blob(st, at);
        if (!*(const void **)f && sqlite3_column_type(st, at) != SQLITE_NULL && sqlite3_column_bytes(st, at))
          return KT__C_NOMEM;
        break;
    }
  }
  return KT__C_OK;
}

/* "kernel, spec_hash, ..." (params 0) or "?1, ?2, ..." (params: first);
** with version > 0, a column newer than it reads as NULL. */
static void list(char *buf, size_t n, const kt__table *t, int params, int version) {
  size_t u = 0;
  buf[0] = 0;
  for (int i = 0; i < t->ncols && u < n; i++) {
    const char *sep = i ? ", " : "";
    if (params) u += (size_t)snprintf(buf + u, n - u, "%s?%d", sep, params + i);
    else if (version && t->cols[i].version > version) u += (size_t)snprintf(buf + u, n - u, "%sNULL", sep);
    else u += (size_t)snprintf(buf + u, n - u, "%s%s", sep, t->cols[i].name);
  }
}

void kt__row_columns(char *buf, size_t n, const kt__table *t) { list(buf, n, t, 0, 0); }

void kt__row_select(char *buf, size_t n, const kt__table *t, int version) { list(buf, n, t, 0, version); }

void kt__row_params(char *buf, size_t n, const kt__table *t, int first) { list(buf, n, t, first, 0); }

int kt__row_col(const kt__table *t, const char *name) {
  for (int i = 0; i < t->ncols; i++)
    if (!strcmp(t->cols[i].name, name)) return i;
  return -1;
}
