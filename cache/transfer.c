/* The cache as people and other machines see it: listings, counts, export,
** import and gc. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/text.h"
#include "cache/codec.h"
#include "cache/db.h"

int kt__store_list(kt_store *s, const char *kernel, int (*fn)(void *user, const kt__cfgrow *r, int from_system),
                   void *user, char *err, size_t errlen) {
  int st = KT__C_OK;
  pthread_mutex_lock(&s->lock);
  sqlite3 *dbs[2] = {s->db, s->sys};
  const int versions[2] = {s->version, s->sys_version};
  for (int d = 0; d < 2 && !st; d++) {
    if (!dbs[d]) continue;
    char cols[1024], q[1200];
    kt__row_select(cols, sizeof cols, &kt__configs_table, versions[d]);
    snprintf(q, sizeof q, "SELECT %s FROM configs WHERE ?1 IS NULL OR kernel = ?1 ORDER BY kernel, device, key", cols);
    sqlite3_stmt *p;
    if (sqlite3_prepare_v2(dbs[d], q, -1, &p, NULL)) {
      st = kt__db_err(s, dbs[d], "listing configs", err, errlen);
      sqlite3_finalize(p);
      break;
    }
    if (kernel) sqlite3_bind_text(p, 1, kernel, -1, SQLITE_TRANSIENT);
    int rc, tcol = kt__row_col(&kt__configs_table, "time_us");
    while ((rc = kt__db_step(p)) == SQLITE_ROW) {
      kt__cfgrow r;
      if ((st = kt__row_read(p, &kt__configs_table, &r, 0))) {
        snprintf(err, errlen, "%s: listing configs: out of memory", s->path);
        break;
      }
      r.time_us = kt__db_time(p, tcol);
      if (fn(user, &r, d == 1)) break;
    }
    if (!st && rc != SQLITE_ROW && rc != SQLITE_DONE) st = kt__db_err(s, dbs[d], "listing configs", err, errlen);
    sqlite3_finalize(p);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

int kt__store_counts(kt_store *s, long counts[4], char *err, size_t errlen) {
  static const char *const tables[4] = {"configs", "trials", "binaries", "quarantine"};
  int st = KT__C_OK;
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

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const unsigned char *in, size_t n) {
  char *out = sqlite3_malloc64((n + 2) / 3 * 4 + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
    out[o++] = b64[v >> 18 & 63];
    out[o++] = b64[v >> 12 & 63];
    out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? b64[v & 63] : '=';
  }
  out[o] = 0;
  return out;
}

static int b64_val(int c) {
  const char *p = c ? strchr(b64, c) : NULL;
  return p ? (int)(p - b64) : -1;
}

/* Decode base64 text; NULL when it is not base64 (or out of memory, *oom). */
static unsigned char *unbase64(const char *in, size_t *n, int *oom) {
  size_t len = strlen(in), o = 0;
  *oom = 0;
  if (len % 4) return NULL;
  unsigned char *out = sqlite3_malloc64(len / 4 * 3 + 1);
  if (!out) return *oom = 1, NULL;
  for (size_t i = 0; i < len; i += 4) {
    int pad2 = in[i + 2] == '=', pad3 = in[i + 3] == '=';
    int a = b64_val(in[i]), b = b64_val(in[i + 1]), c = pad2 ? 0 : b64_val(in[i + 2]), d = pad3 ? 0 : b64_val(in[i + 3]);
    if (a < 0 || b < 0 || c < 0 || d < 0 || (pad2 && !pad3) || ((pad2 || pad3) && i + 4 != len)) {
      sqlite3_free(out);
      return NULL;
    }
    uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
    out[o++] = (unsigned char)(v >> 16);
    if (!pad2) out[o++] = (unsigned char)(v >> 8);
    if (!pad3) out[o++] = (unsigned char)v;
  }
  *n = o;
  return out;
}

/* Add item to o as name, or free it: cJSON takes it only on success. */
static int add(cJSON *o, const char *name, cJSON *item) {
  if (item && cJSON_AddItemToObject(o, name, item)) return 1;
  cJSON_Delete(item);
  return 0;
}

typedef struct outrow {
  cJSON *o;
  int ok;
} outrow;

static void put_str(outrow *w, const char *name, const char *v) { w->ok = w->ok && add(w->o, name, cJSON_CreateString(v)); }
static void put_num(outrow *w, const char *name, double v) { w->ok = w->ok && add(w->o, name, cJSON_CreateNumber(v)); }
static void put_raw(outrow *w, const char *name, const char *v) { w->ok = w->ok && add(w->o, name, cJSON_CreateRaw(v)); }

/* How a column travels in an export, from its kind in rows.h: text,
** integers and numbers as themselves; keys, configs and constants as
** canonical JSON objects; the cubin as base64. A column added to a table
** travels with it, with nothing written here. */
enum { F_TEXT, F_INT, F_NUM, F_OBJ, F_B64 };

static int field_type(const kt__col *c) {
  if (!strcmp(c->name, "key") || !strcmp(c->name, "config") || !strcmp(c->name, "constants")) return F_OBJ;
  return c->kind == KT__K_STR ? F_TEXT : c->kind == KT__K_INT ? F_INT : c->kind == KT__K_BLOB ? F_B64 : F_NUM;
}

/* An import must have it: declared NOT NULL without a default; times of
** rows (..._at) are made now when missing. */
static int field_required(const kt__col *c) {
  size_t n = strlen(c->name);
  return strstr(c->decl, "NOT NULL") && !strstr(c->decl, "DEFAULT") && !(n > 3 && !strcmp(c->name + n - 3, "_at"));
}

/* A row of t as a JSON object; objects (canonical) and the base64 cubin
** are the caller's, in the row's own fields and b64. */
static cJSON *row_json(const kt__table *t, const void *row, const char *b64) {
  outrow w = {cJSON_CreateObject(), 1};
  w.ok = w.o != NULL;
  for (int i = 0; i < t->ncols && w.ok; i++) {
    const kt__col *c = &t->cols[i];
    const char *at = (const char *)row + c->off;
    switch (field_type(c)) {
      case F_TEXT: put_str(&w, c->name, *(const char *const *)at); break;
      case F_OBJ: put_raw(&w, c->name, *(const char *const *)at); break;
      case F_INT: put_num(&w, c->name, (double)*(const int64_t *)at); break;
      case F_B64: put_str(&w, c->name, b64); break;
      default: put_num(&w, c->name, *(const double *)at); break;
    }
  }
  if (!w.ok) cJSON_Delete(w.o);
  return w.ok ? w.o : NULL;
}

/* Print one row (consumed) on its own line after sep. */
static int emit(FILE *out, cJSON *row, const char *sep) {
  char *text = row ? cJSON_PrintUnformatted(row) : NULL;
  cJSON_Delete(row);
  if (!text) return KT__C_NOMEM;
  fprintf(out, "%s\n  %s", sep, text);
  cJSON_free(text);
  return KT__C_OK;
}

/* Why s is no name, hash, version or device ktune writes: a control
** character (printed, it would move a terminal's cursor) or bytes that are
** not UTF-8 (no JSON holds them). NULL when it is fine. */
static const char *text_fault(const char *s) {
  return kt__text_clean(s) ? NULL : kt__text_utf8(s) ? "holds a control character" : "is not UTF-8";
}

/* Whether a text column of row (a row of t) is at fault: a row ktune did
** not write, which an import would refuse. */
static int row_text_fault(const kt__table *t, const void *row) {
  for (int k = 0; k < t->ncols; k++)
    if (field_type(&t->cols[k]) == F_TEXT && text_fault(*(const char *const *)((const char *)row + t->cols[k].off)))
      return 1;
  return 0;
}

static int export_configs(kt_store *s, FILE *out, char *err, size_t errlen) {
  char cols[1024], q[1200];
  kt__row_select(cols, sizeof cols, &kt__configs_table, s->version);
  snprintf(q, sizeof q, "SELECT %s FROM configs ORDER BY kernel, spec_hash, device, key", cols);
  sqlite3_stmt *p;
  if (sqlite3_prepare_v2(s->db, q, -1, &p, NULL)) {
    sqlite3_finalize(p);
    return kt__db_err(s, s->db, "exporting", err, errlen);
  }
  int rc, n = 0, skipped = 0, st = KT__C_OK, tcol = kt__row_col(&kt__configs_table, "time_us");
  while (!st && (rc = kt__db_step(p)) == SQLITE_ROW) {
    kt__cfgrow r;
    char key[KT__JSON_MAX(KT__KV_MAX)], cfg[KT__CONFIG_JSON_MAX], why[256];
    if ((st = kt__row_read(p, &kt__configs_table, &r, 0))) break;
    /* A row another program wrote that no lookup could match, or whose
    ** time is no time: text reads as 0, which no tuning would ever beat. */
    if (kt__codec_canon(r.key, 0, key, sizeof key, why, sizeof why) ||
        kt__codec_canon(r.config, 1, cfg, sizeof cfg, why, sizeof why) || kt__db_time(p, tcol) < 0 ||
        row_text_fault(&kt__configs_table, &r)) {
      skipped++;
      continue;
    }
    r.key = key;
    r.config = cfg;
    st = emit(out, row_json(&kt__configs_table, &r, NULL), n++ ? "," : "");
  }
  if (!st && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "exporting", err, errlen);
  if (skipped)
    kt__db_log(s, 1, "%s: %d configs rows are not canonical or hold no time, and are not exported", s->path, skipped);
  if (st == KT__C_NOMEM) snprintf(err, errlen, "%s: exporting: out of memory", s->path);
  sqlite3_finalize(p);
  return st;
}

/* Binaries whose blob fails its check, or that lack the entry's lowered
** name (no runtime could load them), are left out and counted: another
** machine must never receive a damaged cubin. */
static int export_binaries(kt_store *s, FILE *out, char *err, size_t errlen) {
  char cols[1024], q[1200];
  kt__row_select(cols, sizeof cols, &kt__binaries_table, s->version);
  snprintf(q, sizeof q, "SELECT %s FROM binaries ORDER BY hash", cols);
  sqlite3_stmt *p;
  if (sqlite3_prepare_v2(s->db, q, -1, &p, NULL)) {
    sqlite3_finalize(p);
    return kt__db_err(s, s->db, "exporting", err, errlen);
  }
  int rc, n = 0, skipped = 0, st = KT__C_OK, blob = kt__row_col(&kt__binaries_table, "cubin");
  while (!st && (rc = kt__db_step(p)) == SQLITE_ROW) {
    kt__binrow r;
    char constants[4096], why[256];
    if ((st = kt__row_read(p, &kt__binaries_table, &r, 0))) break;
    if (!kt__binary_intact(&r, sqlite3_column_bytes(p, blob)) ||
        kt__codec_canon(r.constants, 0, constants, sizeof constants, why, sizeof why) ||
        !strstr(constants, "\"lowered\":\"") || row_text_fault(&kt__binaries_table, &r)) {
      skipped++;
      continue;
    }
    char *text = base64(r.cubin, (size_t)r.size);
    r.constants = constants;
    st = text ? emit(out, row_json(&kt__binaries_table, &r, text), n++ ? "," : "") : KT__C_NOMEM;
    sqlite3_free(text);
  }
  if (!st && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "exporting", err, errlen);
  if (st == KT__C_NOMEM) snprintf(err, errlen, "%s: exporting: out of memory", s->path);
  sqlite3_finalize(p);
  if (skipped)
    kt__db_log(s, 1, "%s: %d binaries fail their checks (size, digest, lowered name, text) and are not exported",
               s->path, skipped);
  return st;
}

int kt__store_export(kt_store *s, FILE *out, int with_binaries, char *err, size_t errlen) {
  pthread_mutex_lock(&s->lock);
  fprintf(out, "{\"format\": \"ktune-cache\", \"version\": 1,\n \"configs\": [");
  int st = export_configs(s, out, err, errlen);
  if (!st && with_binaries) {
    fprintf(out, "],\n \"binaries\": [");
    st = export_binaries(s, out, err, errlen);
  }
  fprintf(out, "]}\n");
  if (!st && (fflush(out) || ferror(out))) {
    snprintf(err, errlen, "cannot write: %s", errno ? strerror(errno) : "write error");
    st = KT__C_IO;
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* The fields of an export's rows: the table's columns, each of the type
** field_type() says. Unknown fields are ignored, so that a newer ktune's
** export with more columns still imports. */
#define NFIELDS 32

/* One row of an export, its fields read by one statement. */
typedef struct inrow {
  const kt__table *t;
  sqlite3_stmt *q;         /* json_type and json_extract of each field */
  const char *text[NFIELDS];
  int64_t i[NFIELDS];
  double d[NFIELDS];
  int present[NFIELDS];
} inrow;

static int row_query(kt_store *s, const kt__table *t, sqlite3_stmt **q) {
  char sql[8192];
  size_t u = (size_t)snprintf(sql, sizeof sql, "SELECT ");
  for (int k = 0; k < t->ncols && k < NFIELDS; k++)
    u += (size_t)snprintf(sql + u, sizeof sql - u, "%sjson_type(?1, '$.%s'), json_extract(?1, '$.%s')", k ? ", " : "",
                          t->cols[k].name, t->cols[k].name);
  return sqlite3_prepare_v2(s->db, sql, -1, q, NULL);
}

/* The fields read, into a row of the table (strings borrowed from r). */
static void row_from_fields(const inrow *r, void *row) {
  for (int k = 0; k < r->t->ncols && k < NFIELDS; k++) {
    const kt__col *c = &r->t->cols[k];
    char *at = (char *)row + c->off;
    switch (c->kind) {
      case KT__K_STR: *(const char **)at = r->text[k]; break;
      case KT__K_INT: *(int64_t *)at = r->i[k]; break;
      case KT__K_REAL: *(double *)at = r->d[k]; break;
      case KT__K_OPT: *(double *)at = r->present[k] ? r->d[k] : -1; break;
      default: break; /* the blob: decoded by the caller */
    }
  }
}

/* Read and check the fields of the row json: KT__C_OK, KT__C_INVALID with
** why, or KT__C_NOMEM. */
static int read_row(inrow *r, const char *json, char *why, size_t wl) {
  static const char *const want[] = {"text", "an integer >= 0", "a finite number >= 0", "an object", "text"};
  sqlite3_reset(r->q);
  sqlite3_bind_text(r->q, 1, json, -1, SQLITE_STATIC);
  int rc = kt__db_step(r->q), oom = 0;
  if (rc == SQLITE_NOMEM) return KT__C_NOMEM;
  if (rc != SQLITE_ROW) return snprintf(why, wl, "not JSON"), KT__C_INVALID;
  for (int k = 0; k < r->t->ncols && k < NFIELDS; k++) {
    const kt__col *c = &r->t->cols[k];
    const char *type = kt__db_text(r->q, 2 * k, &oom);
    int at = 2 * k + 1, t = field_type(c);
    if (oom) return KT__C_NOMEM;
    r->present[k] = *type && strcmp(type, "null");
    if (!r->present[k]) {
      if (field_required(c)) return snprintf(why, wl, "missing \"%s\"", c->name), KT__C_INVALID;
      r->text[k] = "";
      r->i[k] = 0;
      r->d[k] = 0;
      continue;
    }
    r->text[k] = kt__db_text(r->q, at, &oom);
    if (oom) return KT__C_NOMEM;
    r->i[k] = sqlite3_column_int64(r->q, at);
    r->d[k] = sqlite3_column_double(r->q, at);
    int ok = t == F_TEXT || t == F_B64 ? !strcmp(type, "text")
             : t == F_OBJ  ? !strcmp(type, "object")
             : t == F_INT  ? !strcmp(type, "integer") && r->i[k] >= 0
                           : (!strcmp(type, "integer") || !strcmp(type, "real")) && r->d[k] >= 0 && isfinite(r->d[k]);
    if (!ok) return snprintf(why, wl, "\"%s\" must be %s", c->name, want[t]), KT__C_INVALID;
    const char *fault = t == F_TEXT ? text_fault(r->text[k]) : NULL;
    if (fault) return snprintf(why, wl, "\"%s\" %s", c->name, fault), KT__C_INVALID;
  }
  return KT__C_OK;
}

static int hex(const char *s, size_t min, size_t max) {
  size_t n = strspn(s, "0123456789abcdef");
  return !s[n] && n >= min && n <= max;
}

/* A configs row of an export merged under the fastest-wins rule, its key
** and config made canonical first. */
static int import_config(kt_store *s, inrow *r, long *counts, char *why, size_t wl, char *err, size_t errlen) {
  char key[KT__JSON_MAX(KT__KV_MAX)], cfg[KT__CONFIG_JSON_MAX], w[256];
  kt__cfgrow row;
  row_from_fields(r, &row);
  if (kt__codec_canon(row.key, 0, key, sizeof key, w, sizeof w)) return snprintf(why, wl, "key: %s", w), KT__C_INVALID;
  if (kt__codec_canon(row.config, 1, cfg, sizeof cfg, w, sizeof w))
    return snprintf(why, wl, "config: %s", w), KT__C_INVALID;
  row.key = key;
  row.config = cfg;
  int oc, st = kt__configs_merge(s, &row, NULL, &oc, err, errlen);
  if (!st) counts[oc - 1]++;
  return st;
}

/* A binaries row of an export, checked, then added when its hash is new and
** ins is given (NULL: counted as left out), once its blob matches its size
** (and digest, when the row has one). */
static int import_binary(kt_store *s, sqlite3_stmt *ins, inrow *r, long *counts, char *why, size_t wl, char *err,
                         size_t errlen) {
  char constants[4096], w[256];
  kt__binrow row;
  row_from_fields(r, &row);
  int blob = kt__row_col(&kt__binaries_table, "cubin"), dig = kt__row_col(&kt__binaries_table, "digest");
  if (!hex(row.hash, 1, 64)) return snprintf(why, wl, "\"hash\" must be hex digits"), KT__C_INVALID;
  if (kt__codec_canon(row.constants, 0, constants, sizeof constants, w, sizeof w) || !strstr(constants, "\"lowered\":\""))
    return snprintf(why, wl, "\"constants\" must hold the entry's \"lowered\" name"), KT__C_INVALID;
  int oom;
  size_t n = 0;
  unsigned char *cubin = unbase64(r->text[blob], &n, &oom);
  if (!cubin)
    return oom ? (snprintf(err, errlen, "%s: importing: out of memory", s->path), KT__C_NOMEM)
               : (snprintf(why, wl, "\"cubin\" is not base64"), KT__C_INVALID);
  row.constants = constants;
  row.cubin = cubin;
  char digest[33];
  kt__store_digest(cubin, n, digest);
  int st = KT__C_OK;
  if ((int64_t)n != row.size) st = KT__C_INVALID, snprintf(why, wl, "the cubin has %zu bytes, \"size\" says %lld", n, (long long)row.size);
  else if (r->present[dig] && strcmp(r->text[dig], digest))
    st = KT__C_INVALID, snprintf(why, wl, "the cubin does not match its digest");
  if (!st && !ins) {
    counts[4]++;
  } else if (!st) {
    row.digest = digest;
    if (!row.created_at) row.created_at = kt__db_now();
    sqlite3_reset(ins);
    kt__row_bind(ins, &kt__binaries_table, &row, 1);
    if (kt__db_step(ins) != SQLITE_DONE) st = kt__db_err(s, s->db, "importing binaries", err, errlen);
    else counts[3] += sqlite3_changes(s->db);
    sqlite3_reset(ins);
    sqlite3_clear_bindings(ins);
  }
  sqlite3_free(cubin);
  return st;
}

/* The file's header: valid JSON, the export format, arrays of rows. */
static int check_header(kt_store *s, const char *name, const char *json, char *err, size_t errlen) {
  sqlite3_stmt *p;
  if (sqlite3_prepare_v2(s->db,
                         "SELECT json_valid(?1), json_extract(?1, '$.format'), json_extract(?1, '$.version'),"
                         " json_type(?1, '$.configs'), json_type(?1, '$.binaries')",
                         -1, &p, NULL)) {
    sqlite3_finalize(p);
    return kt__db_err(s, s->db, "import", err, errlen);
  }
  sqlite3_bind_text(p, 1, json, -1, SQLITE_STATIC);
  int rc = kt__db_step(p), st = KT__C_INVALID, oom = 0;
  const char *fmt = rc == SQLITE_ROW ? kt__db_text(p, 1, &oom) : "";
  const char *cfgs = rc == SQLITE_ROW ? kt__db_text(p, 3, &oom) : "";
  const char *bins = rc == SQLITE_ROW && sqlite3_column_type(p, 4) != SQLITE_NULL ? kt__db_text(p, 4, &oom) : NULL;
  if (rc == SQLITE_NOMEM || oom) st = KT__C_NOMEM, snprintf(err, errlen, "%s: import: out of memory", s->path);
  else if (rc != SQLITE_ROW || !sqlite3_column_int(p, 0)) snprintf(err, errlen, "%s: not JSON: malformed JSON", name);
  else if (strcmp(fmt, "ktune-cache") || sqlite3_column_int(p, 2) != 1)
    snprintf(err, errlen, "%s: not a ktune cache export (expected \"format\": \"ktune-cache\", \"version\": 1)", name);
  else if (strcmp(cfgs, "array") || (bins && strcmp(bins, "array")))
    snprintf(err, errlen, "%s: \"configs\" (and \"binaries\", when present) must be arrays of rows", name);
  else st = KT__C_OK;
  sqlite3_finalize(p);
  return st;
}

/* Every row of one array of the export, through fn; binaries: 0 (configs),
** 1 (binaries, checked and left out) or 2 (binaries, added). */
static int import_rows(kt_store *s, const char *name, const char *json, int binaries, long *counts, char *err,
                       size_t errlen) {
  inrow r = {.t = binaries ? &kt__binaries_table : &kt__configs_table};
  sqlite3_stmt *each = NULL, *ins = NULL;
  char cols[1024], params[512], sql[2048], why[512] = "";
  kt__row_columns(cols, sizeof cols, &kt__binaries_table);
  kt__row_params(params, sizeof params, &kt__binaries_table, 1);
  snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO binaries (%s) VALUES (%s)", cols, params);
  if (row_query(s, r.t, &r.q) ||
      sqlite3_prepare_v2(s->db, binaries ? "SELECT key, type, value FROM json_each(?1, '$.binaries')"
                                         : "SELECT key, type, value FROM json_each(?1, '$.configs')",
                         -1, &each, NULL) ||
      (binaries == 2 && sqlite3_prepare_v2(s->db, sql, -1, &ins, NULL))) {
    int st = kt__db_err(s, s->db, "import", err, errlen);
    sqlite3_finalize(r.q);
    sqlite3_finalize(each);
    sqlite3_finalize(ins);
    return st;
  }
  sqlite3_bind_text(each, 1, json, -1, SQLITE_STATIC);
  int rc, st = KT__C_OK;
  long at = -1;
  while (!st && (rc = kt__db_step(each)) == SQLITE_ROW) {
    int oom = 0;
    at = (long)sqlite3_column_int64(each, 0);
    const char *type = kt__db_text(each, 1, &oom), *row = kt__db_text(each, 2, &oom);
    if (oom) st = KT__C_NOMEM;
    else if (strcmp(type, "object")) st = KT__C_INVALID, snprintf(why, sizeof why, "expected an object");
    else st = read_row(&r, row, why, sizeof why);
    if (!st) st = binaries ? import_binary(s, ins, &r, counts, why, sizeof why, err, errlen)
                           : import_config(s, &r, counts, why, sizeof why, err, errlen);
  }
  if (st == KT__C_INVALID && why[0])
    snprintf(err, errlen, "%s: %s[%ld]: %s", name, binaries ? "binaries" : "configs", at, why);
  else if (st == KT__C_NOMEM)
    snprintf(err, errlen, "%s: importing: out of memory", name);
  else if (!st && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "import", err, errlen);
  sqlite3_finalize(r.q);
  sqlite3_finalize(each);
  sqlite3_finalize(ins);
  return st;
}

int kt__store_import(kt_store *s, const char *name, const char *json, int with_binaries, long counts[5], char *err,
                     size_t errlen) {
  memset(counts, 0, 5 * sizeof *counts);
  int writable = kt__db_writable(s, err, errlen);
  if (writable) return writable;
  pthread_mutex_lock(&s->lock);
  int st = check_header(s, name, json, err, errlen);
  if (!st) st = kt__db_begin(s, err, errlen);
  if (!st) {
    st = import_rows(s, name, json, 0, counts, err, errlen);
    if (!st) st = import_rows(s, name, json, with_binaries ? 2 : 1, counts, err, errlen);
    st = kt__db_end(s, st, err, errlen);
  }
  if (st) memset(counts, 0, 5 * sizeof *counts);
  pthread_mutex_unlock(&s->lock);
  return st;
}

static int exec_bound(kt_store *s, const char *sql, const char *a, const char *b, long *changes, char *err,
                      size_t errlen) {
  sqlite3_stmt *p;
  int st = KT__C_OK;
  if (sqlite3_prepare_v2(s->db, sql, -1, &p, NULL)) {
    st = kt__db_err(s, s->db, "gc", err, errlen);
  } else {
    if (a) kt__db_bind_text(p, 1, a);
    if (b) kt__db_bind_text(p, 2, b);
    if (kt__db_step(p) != SQLITE_DONE) st = kt__db_err(s, s->db, "gc", err, errlen);
    else if (changes) *changes += sqlite3_changes(s->db);
  }
  sqlite3_finalize(p);
  return st;
}

/* The named kernels' current (kernel, spec hash) pairs, in a temporary
** table: a name given with two specs (two copies of a spec file) keeps the
** rows of both. */
static int gc_current(kt_store *s, const char *const *kernels, const char *const *hashes, int n, char *err,
                      size_t errlen) {
  int st = exec_bound(s, "CREATE TEMP TABLE IF NOT EXISTS kt_current (kernel TEXT, spec_hash TEXT)", NULL, NULL, NULL,
                      err, errlen);
  if (!st) st = exec_bound(s, "DELETE FROM temp.kt_current", NULL, NULL, NULL, err, errlen);
  for (int i = 0; i < n && !st; i++)
    st = exec_bound(s, "INSERT INTO temp.kt_current VALUES (?1, ?2)", kernels[i], hashes[i], NULL, err, errlen);
  return st;
}

int kt__store_gc(kt_store *s, const char *const *kernels, const char *const *hashes, int n, long *configs_removed,
                 long *binaries_removed, char *err, size_t errlen) {
  /* Rows of a named kernel whose spec is none of its current ones; then
  ** binaries no config refers to, unless of a current spec (ktune
  ** compile's cubins stay until their spec changes). */
  static const char *const tables[] = {"configs", "trials", "quarantine"};
  static const char stale[] = "DELETE FROM %s WHERE kernel IN (SELECT kernel FROM temp.kt_current) AND NOT EXISTS"
                              " (SELECT 1 FROM temp.kt_current k WHERE k.kernel = %s.kernel AND"
                              " k.spec_hash = %s.spec_hash)";
  static const char unused[] =
      "DELETE FROM binaries WHERE NOT EXISTS (SELECT 1 FROM configs c WHERE c.kernel = binaries.kernel AND"
      " c.spec_hash = binaries.spec_hash) AND NOT EXISTS (SELECT 1 FROM temp.kt_current k WHERE"
      " k.kernel = binaries.kernel AND k.spec_hash = binaries.spec_hash)";
  char q[sizeof stale + 64];
  *configs_removed = *binaries_removed = 0;
  int writable = kt__db_writable(s, err, errlen);
  if (writable) return writable;
  pthread_mutex_lock(&s->lock);
  int st = kt__db_begin(s, err, errlen);
  if (!st) st = gc_current(s, kernels, hashes, n, err, errlen);
  for (int t = 0; t < 3 && !st; t++) {
    snprintf(q, sizeof q, stale, tables[t], tables[t], tables[t]);
    st = exec_bound(s, q, NULL, NULL, t == 0 ? configs_removed : NULL, err, errlen);
  }
  if (!st) st = exec_bound(s, unused, NULL, NULL, binaries_removed, err, errlen);
  st = kt__db_end(s, st, err, errlen);
  if (st) *configs_removed = *binaries_removed = 0;
  pthread_mutex_unlock(&s->lock);
  return st;
}
