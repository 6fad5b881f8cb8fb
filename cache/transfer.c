#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cache/db.h"

kt_status kt__store_list(kt_store *s, const char *kernel,
                         int (*fn)(void *user, const kt__cfgrow *r, int from_system), void *user,
                         char *err, size_t errlen) {
  static const char q[] =
      "SELECT kernel, spec_hash, device, key, config, time_us, candidates, rejected, nvrtc_version,"
      " driver_version, created_at, updated_at FROM configs WHERE ?1 IS NULL OR kernel = ?1"
      " ORDER BY kernel, device, key";
  static const char q1[] =
      "SELECT kernel, spec_hash, device, key, config, time_us, 0, 0, nvrtc_version, driver_version,"
      " created_at, updated_at FROM configs WHERE ?1 IS NULL OR kernel = ?1 ORDER BY kernel, device, key";
  kt_status st = KT_OK;
  pthread_mutex_lock(&s->lock);
  sqlite3 *dbs[2] = {s->db, s->sys};
  for (int d = 0; d < 2 && !st; d++) {
    if (!dbs[d]) continue;
    sqlite3_stmt *p;
    /* A system cache of schema 1 has no candidate counts. */
    if (sqlite3_prepare_v2(dbs[d], q, -1, &p, NULL) && sqlite3_prepare_v2(dbs[d], q1, -1, &p, NULL)) {
      st = kt__db_err(s, dbs[d], "listing configs", err, errlen);
      break;
    }
    if (kernel) sqlite3_bind_text(p, 1, kernel, -1, SQLITE_TRANSIENT);
    int rc;
    while ((rc = kt__db_step(p)) == SQLITE_ROW) {
      kt__cfgrow r = {(const char *)sqlite3_column_text(p, 0), (const char *)sqlite3_column_text(p, 1),
                      (const char *)sqlite3_column_text(p, 2), (const char *)sqlite3_column_text(p, 3),
                      (const char *)sqlite3_column_text(p, 4), sqlite3_column_double(p, 5),
                      sqlite3_column_int(p, 6), sqlite3_column_int(p, 7),
                      (const char *)sqlite3_column_text(p, 8), (const char *)sqlite3_column_text(p, 9),
                      sqlite3_column_int64(p, 10), sqlite3_column_int64(p, 11)};
      if (fn(user, &r, d == 1)) break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) st = kt__db_err(s, dbs[d], "listing configs", err, errlen);
    sqlite3_finalize(p);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_counts(kt_store *s, long counts[4], char *err, size_t errlen) {
  static const char *const tables[4] = {"configs", "trials", "binaries", "quarantine"};
  kt_status st = KT_OK;
  pthread_mutex_lock(&s->lock);
  for (int i = 0; i < 4 && !st; i++) {
    char q[64];
    sqlite3_stmt *p;
    snprintf(q, sizeof q, "SELECT count(*) FROM %s", tables[i]);
    if (sqlite3_prepare_v2(s->db, q, -1, &p, NULL) || kt__db_step(p) != SQLITE_ROW)
      st = kt__db_err(s, s->db, "counting rows", err, errlen);
    else
      counts[i] = (long)sqlite3_column_int64(p, 0);
    sqlite3_finalize(p);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_quarantine_claim(kt_store *s, long pid, const char *reason,
                                     void (*fn)(void *, const char *, const char *, const char *), void *user,
                                     char *err, size_t errlen) {
  if (s->readonly) {
    snprintf(err, errlen, "the cache is read-only");
    return KT_ERR_READONLY;
  }
  char inprog[64];
  snprintf(inprog, sizeof inprog, "in progress in pid %ld", pid);
  kt_status st = KT_OK;
  sqlite3_stmt *q = NULL, *u = NULL;
  pthread_mutex_lock(&s->lock);
  if (sqlite3_prepare_v2(s->db, "SELECT kernel, key, config FROM quarantine WHERE pid = ?1 AND reason = ?2", -1, &q,
                         NULL) ||
      sqlite3_prepare_v2(s->db, "UPDATE quarantine SET reason = ?3, since = ?4 WHERE pid = ?1 AND reason = ?2", -1,
                         &u, NULL)) {
    st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
  } else {
    sqlite3_bind_int64(q, 1, pid);
    kt__db_bind_text(q, 2, inprog);
    int rc;
    while ((rc = kt__db_step(q)) == SQLITE_ROW)
      if (fn)
        fn(user, (const char *)sqlite3_column_text(q, 0), (const char *)sqlite3_column_text(q, 1),
           (const char *)sqlite3_column_text(q, 2));
    if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
    sqlite3_bind_int64(u, 1, pid);
    kt__db_bind_text(u, 2, inprog);
    kt__db_bind_text(u, 3, reason);
    sqlite3_bind_int64(u, 4, kt__db_now());
    if (!st && kt__db_step(u) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing quarantine", err, errlen);
  }
  sqlite3_finalize(q);
  sqlite3_finalize(u);
  pthread_mutex_unlock(&s->lock);
  return st;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void fn_base64(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  const unsigned char *in = sqlite3_value_blob(argv[0]);
  size_t n = (size_t)sqlite3_value_bytes(argv[0]);
  char *out = kt__malloc((n + 2) / 3 * 4 + 1);
  if (!out) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
    out[o++] = b64[v >> 18 & 63];
    out[o++] = b64[v >> 12 & 63];
    out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? b64[v & 63] : '=';
  }
  sqlite3_result_text(ctx, out, (int)o, kt__free);
}

static int b64_val(int c) {
  const char *p = c ? strchr(b64, c) : NULL;
  return p ? (int)(p - b64) : -1;
}

static void fn_unbase64(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  const unsigned char *in = sqlite3_value_text(argv[0]);
  size_t n = (size_t)sqlite3_value_bytes(argv[0]);
  if (!in || n % 4) {
    sqlite3_result_error(ctx, "cubin: not base64", -1);
    return;
  }
  unsigned char *out = kt__malloc(n / 4 * 3 + 1);
  if (!out) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    int a = b64_val(in[i]), b = b64_val(in[i + 1]), c = in[i + 2] == '=' ? 0 : b64_val(in[i + 2]),
        d = in[i + 3] == '=' ? 0 : b64_val(in[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0 || (in[i + 2] == '=' && in[i + 3] != '=')) {
      kt__free(out);
      sqlite3_result_error(ctx, "cubin: not base64", -1);
      return;
    }
    uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
    out[o++] = (unsigned char)(v >> 16);
    if (in[i + 2] != '=') out[o++] = (unsigned char)(v >> 8);
    if (in[i + 3] != '=') out[o++] = (unsigned char)v;
  }
  sqlite3_result_blob(ctx, out, (int)o, kt__free);
}

static kt_status register_funcs(kt_store *s, char *err, size_t errlen) {
  if (sqlite3_create_function(s->db, "kt_base64", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, fn_base64, NULL, NULL) ||
      sqlite3_create_function(s->db, "kt_unbase64", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL, fn_unbase64, NULL, NULL))
    return kt__db_err(s, s->db, "registering functions", err, errlen);
  return KT_OK;
}

/* Rows as canonical JSON objects, one per line, inside a top-level object
** that names the format, so that `ktune import` can tell it from other
** JSON. */
kt_status kt__store_export(kt_store *s, FILE *out, int with_binaries, char *err, size_t errlen) {
  static const char qc[] =
      "SELECT json_object('kernel', kernel, 'spec_hash', spec_hash, 'device', device, 'key', json(key),"
      " 'config', json(config), 'time_us', time_us, 'candidates', candidates, 'rejected', rejected,"
      " 'nvrtc_version', nvrtc_version, 'driver_version', driver_version, 'created_at', created_at,"
      " 'updated_at', updated_at) FROM configs ORDER BY kernel, spec_hash, device, key";
  static const char qb[] =
      "SELECT json_object('hash', hash, 'kernel', kernel, 'spec_hash', spec_hash, 'arch', arch,"
      " 'nvrtc_version', nvrtc_version, 'constants', json(constants), 'registers', registers,"
      " 'smem_bytes', smem_bytes, 'spill_bytes', spill_bytes, 'size', size, 'cubin', kt_base64(cubin),"
      " 'created_at', created_at) FROM binaries ORDER BY hash";
  pthread_mutex_lock(&s->lock);
  kt_status st = register_funcs(s, err, errlen);
  fprintf(out, "{\"format\": \"ktune-cache\", \"version\": 1,\n \"configs\": [");
  for (int part = 0; part < (with_binaries ? 2 : 1) && !st; part++) {
    if (part) fprintf(out, "],\n \"binaries\": [");
    sqlite3_stmt *p;
    if (sqlite3_prepare_v2(s->db, part ? qb : qc, -1, &p, NULL)) {
      st = kt__db_err(s, s->db, "exporting", err, errlen);
      break;
    }
    int rc, n = 0;
    while ((rc = kt__db_step(p)) == SQLITE_ROW)
      fprintf(out, "%s\n  %s", n++ ? "," : "", (const char *)sqlite3_column_text(p, 0));
    if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "exporting", err, errlen);
    sqlite3_finalize(p);
  }
  fprintf(out, "]}\n");
  if (!st && (fflush(out) || ferror(out))) {
    snprintf(err, errlen, "export: write failed");
    st = KT_ERR_IO;
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* Each config of the file goes through the same fastest-wins rule as a
** tuning; binaries are added when their hash is new. */
kt_status kt__store_import(kt_store *s, const char *name, const char *json, long counts[4], char *err,
                           size_t errlen) {
  static const char qf[] = "SELECT json_extract(?1, '$.format'), json_extract(?1, '$.version')";
  static const char qc[] =
      "SELECT key, json_extract(value, '$.kernel'), json_extract(value, '$.spec_hash'),"
      " json_extract(value, '$.device'), json(json_extract(value, '$.key')),"
      " json(json_extract(value, '$.config')), json_extract(value, '$.time_us'),"
      " coalesce(json_extract(value, '$.candidates'), 0), coalesce(json_extract(value, '$.rejected'), 0),"
      " coalesce(json_extract(value, '$.nvrtc_version'), ''), coalesce(json_extract(value, '$.driver_version'), ''),"
      " coalesce(json_extract(value, '$.created_at'), 0), coalesce(json_extract(value, '$.updated_at'), 0)"
      " FROM json_each(?1, '$.configs')";
  static const char qb[] =
      "INSERT OR IGNORE INTO binaries (hash, kernel, spec_hash, arch, nvrtc_version, constants, registers,"
      " smem_bytes, spill_bytes, size, cubin, created_at)"
      " SELECT json_extract(value, '$.hash'), json_extract(value, '$.kernel'),"
      " coalesce(json_extract(value, '$.spec_hash'), ''), json_extract(value, '$.arch'),"
      " json_extract(value, '$.nvrtc_version'), json(json_extract(value, '$.constants')),"
      " json_extract(value, '$.registers'), json_extract(value, '$.smem_bytes'),"
      " json_extract(value, '$.spill_bytes'), json_extract(value, '$.size'),"
      " kt_unbase64(json_extract(value, '$.cubin')), coalesce(json_extract(value, '$.created_at'), 0)"
      " FROM json_each(?1, '$.binaries')";
  memset(counts, 0, 4 * sizeof *counts);
  if (s->readonly) {
    snprintf(err, errlen, "%s: the cache is read-only", s->path);
    return KT_ERR_READONLY;
  }
  sqlite3_stmt *p = NULL;
  kt_status st = KT_OK;
  pthread_mutex_lock(&s->lock);
  if ((st = register_funcs(s, err, errlen))) goto out;
  if (sqlite3_prepare_v2(s->db, qf, -1, &p, NULL)) {
    st = kt__db_err(s, s->db, "import", err, errlen);
    goto out;
  }
  sqlite3_bind_text(p, 1, json, -1, SQLITE_STATIC);
  int rc = kt__db_step(p);
  if (rc != SQLITE_ROW) {
    snprintf(err, errlen, "%s: not JSON: %s", name, sqlite3_errmsg(s->db));
    st = KT_ERR_INVALID;
    goto out;
  }
  const char *fmt = (const char *)sqlite3_column_text(p, 0);
  if (!fmt || strcmp(fmt, "ktune-cache") || sqlite3_column_int(p, 1) != 1) {
    snprintf(err, errlen, "%s: not a ktune cache export (expected \"format\": \"ktune-cache\", \"version\": 1)", name);
    st = KT_ERR_INVALID;
    goto out;
  }
  sqlite3_finalize(p);
  p = NULL;
  /* Rows are read first, then merged one by one (each its own short write
  ** transaction, as tuners do), so a large file never holds the lock long. */
  if (sqlite3_prepare_v2(s->db, qc, -1, &p, NULL)) {
    st = kt__db_err(s, s->db, "import", err, errlen);
    goto out;
  }
  sqlite3_bind_text(p, 1, json, -1, SQLITE_STATIC);
  /* Text columns copied before the next step: kernel, spec_hash, device,
  ** key, config, nvrtc_version, driver_version. */
  static const int text_cols[7] = {1, 2, 3, 4, 5, 9, 10};
  typedef struct row {
    char *f[7];
    kt__cfgrow r;
  } row;
  row *rows = NULL;
  size_t n = 0, cap = 0;
  while (!st && (rc = kt__db_step(p)) == SQLITE_ROW) {
    for (int c = 1; c <= 6 && !st; c++)
      if (sqlite3_column_type(p, c) == SQLITE_NULL) {
        static const char *names[] = {"", "kernel", "spec_hash", "device", "key", "config", "time_us"};
        snprintf(err, errlen, "%s: configs[%d]: missing \"%s\"", name, sqlite3_column_int(p, 0), names[c]);
        st = KT_ERR_INVALID;
      }
    if (!st && n == cap) {
      cap = cap ? cap * 2 : 64;
      row *nr = kt__realloc(rows, cap * sizeof *rows);
      if (nr) rows = nr;
      else st = KT_ERR_NOMEM;
    }
    if (st) break;
    row *w = &rows[n++];
    memset(w, 0, sizeof *w);
    for (int c = 0; c < 7; c++) {
      const char *t = (const char *)sqlite3_column_text(p, text_cols[c]);
      if (!(w->f[c] = kt__strdup(t ? t : ""))) st = KT_ERR_NOMEM;
    }
    w->r = (kt__cfgrow){w->f[0], w->f[1], w->f[2], w->f[3], w->f[4], sqlite3_column_double(p, 6),
                        sqlite3_column_int(p, 7), sqlite3_column_int(p, 8), w->f[5], w->f[6],
                        sqlite3_column_int64(p, 11), sqlite3_column_int64(p, 12)};
  }
  if (st == KT_ERR_NOMEM) snprintf(err, errlen, "%s: out of memory", name);
  if (!st && rc != SQLITE_DONE) {
    snprintf(err, errlen, "%s: %s", name, sqlite3_errmsg(s->db));
    st = KT_ERR_INVALID;
  }
  sqlite3_finalize(p);
  p = NULL;
  pthread_mutex_unlock(&s->lock);
  for (size_t i = 0; i < n && !st; i++) {
    int oc;
    if (!(st = kt__store_put_config(s, &rows[i].r, &oc, err, errlen))) counts[oc - 1]++;
  }
  for (size_t i = 0; i < n; i++)
    for (int c = 0; c < 7; c++) kt__free(rows[i].f[c]);
  kt__free(rows);
  pthread_mutex_lock(&s->lock);
  if (st) goto out;
  if ((st = kt__db_begin(s, err, errlen))) goto out;
  if (sqlite3_prepare_v2(s->db, qb, -1, &p, NULL)) {
    st = kt__db_end(s, kt__db_err(s, s->db, "importing binaries", err, errlen), err, errlen);
    goto out;
  }
  sqlite3_bind_text(p, 1, json, -1, SQLITE_STATIC);
  if (kt__db_step(p) != SQLITE_DONE) {
    snprintf(err, errlen, "%s: binaries: %s", name, sqlite3_errmsg(s->db));
    st = KT_ERR_INVALID;
  } else {
    counts[3] = sqlite3_changes(s->db);
  }
  st = kt__db_end(s, st, err, errlen);
out:
  sqlite3_finalize(p);
  pthread_mutex_unlock(&s->lock);
  return st;
}

kt_status kt__store_gc(kt_store *s, const char *const *kernels, const char *const *hashes, int n,
                       long *configs_removed, long *binaries_removed, char *err, size_t errlen) {
  static const char *const del[] = {
      "DELETE FROM configs WHERE kernel = ?1 AND spec_hash != ?2",
      "DELETE FROM trials WHERE kernel = ?1 AND spec_hash != ?2",
      "DELETE FROM quarantine WHERE kernel = ?1 AND spec_hash != ?2",
  };
  *configs_removed = *binaries_removed = 0;
  if (s->readonly) {
    snprintf(err, errlen, "%s: the cache is read-only", s->path);
    return KT_ERR_READONLY;
  }
  pthread_mutex_lock(&s->lock);
  kt_status st = kt__db_begin(s, err, errlen);
  for (int i = 0; i < n && !st; i++)
    for (int d = 0; d < 3 && !st; d++) {
      sqlite3_stmt *p;
      if (sqlite3_prepare_v2(s->db, del[d], -1, &p, NULL)) {
        st = kt__db_err(s, s->db, "gc", err, errlen);
        break;
      }
      sqlite3_bind_text(p, 1, kernels[i], -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(p, 2, hashes[i], -1, SQLITE_TRANSIENT);
      if (kt__db_step(p) != SQLITE_DONE) st = kt__db_err(s, s->db, "gc", err, errlen);
      else if (d == 0) *configs_removed += sqlite3_changes(s->db);
      sqlite3_finalize(p);
    }
  if (!st) {
    if (kt__db_exec(s->db, "DELETE FROM binaries WHERE NOT EXISTS (SELECT 1 FROM configs c WHERE"
                           " c.kernel = binaries.kernel AND c.spec_hash = binaries.spec_hash)"))
      st = kt__db_err(s, s->db, "gc", err, errlen);
    else
      *binaries_removed = sqlite3_changes(s->db);
  }
  st = kt__db_end(s, st, err, errlen);
  pthread_mutex_unlock(&s->lock);
  return st;
}
