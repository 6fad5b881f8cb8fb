/* Configs and trials: what tunings found, per key. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cache/codec.h"
#include "cache/db.h"

/* Whether the stored row at t gives way to r: r is faster; the row is
** damaged (its time is no time: text, negative, not finite, which nothing
** would ever beat; or its config is no config, which no reader would
** use); or its config is the stale one the caller found outside the
** spec's space. */
static int gives_way(sqlite3_stmt *t, const kt__cfgrow *r, const char *stale, int *oom) {
  double was = kt__db_time(t, 0);
  const char *config = kt__db_text(t, 1, oom);
  char canon[KT__CONFIG_JSON_MAX], why[128];
  if (*oom) return 0;
  if (was < 0) return 1;
  /* A reader takes a config's text whole or not at all (get_config_from). */
  if (strlen(config) >= sizeof canon || kt__codec_canon(config, 1, canon, sizeof canon, why, sizeof why)) return 1;
  return r->time_us < was || (stale && !strcmp(config, stale));
}

int kt__configs_merge(kt_store *s, const kt__cfgrow *r, const char *stale, int *outcome, char *err, size_t errlen) {
  int st = KT__C_OK, oom = 0;
  sqlite3_stmt *t = kt__db_stmt(s, ST_TIME_OF, &st, err, errlen), *u;
  if (!t) return st;
  kt__db_bind_key(t, r->kernel, r->spec_hash, r->device, r->key);
  int rc = kt__db_step(t), oc = KT__ADDED;
  if (rc == SQLITE_ROW) oc = gives_way(t, r, stale, &oom) ? KT__REPLACED : KT__KEPT;
  else if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading configs", err, errlen);
  if (oom) st = (snprintf(err, errlen, "%s: reading configs: out of memory", s->path), KT__C_NOMEM);
  sqlite3_reset(t);
  if (!st && oc != KT__KEPT && (u = kt__db_stmt(s, ST_PUT_CONFIG, &st, err, errlen))) {
    kt__cfgrow w = *r;
    int64_t now = kt__db_now();
    if (!w.created_at) w.created_at = now;
    if (!w.updated_at) w.updated_at = now;
    kt__row_bind(u, &kt__configs_table, &w, 1);
    if (kt__db_step(u) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing configs", err, errlen);
    sqlite3_reset(u);
  }
  if (!st && outcome) *outcome = oc;
  return st;
}

int kt__store_replace_config(kt_store *s, const kt__cfgrow *r, const char *stale, int *outcome, char *err,
                             size_t errlen) {
  int writable = kt__db_writable(s, err, errlen);
  if (writable) return writable;
  if (!(r->time_us >= 0) || !isfinite(r->time_us)) {
    snprintf(err, errlen, "%s: configs: time_us %g is not a finite number >= 0", s->path, r->time_us);
    return KT__C_INVALID;
  }
  pthread_mutex_lock(&s->lock);
  int st = kt__db_begin(s, err, errlen);
  if (!st) st = kt__configs_merge(s, r, stale, outcome, err, errlen);
  st = kt__db_end(s, st, err, errlen);
  pthread_mutex_unlock(&s->lock);
  return st;
}

int kt__store_put_config(kt_store *s, const kt__cfgrow *r, int *outcome, char *err, size_t errlen) {
  return kt__store_replace_config(s, r, NULL, outcome, err, errlen);
}

static int get_config_from(kt_store *s, sqlite3 *db, sqlite3_stmt *q, const char *const *k, char *config, size_t n,
                           double *time_us, char *err, size_t errlen) {
  kt__db_bind_key(q, k[0], k[1], k[2], k[3]);
  int rc = kt__db_step(q), st = KT__C_NOT_FOUND, oom = 0;
  if (rc == SQLITE_ROW) {
    /* A text longer than config's room is not a config ktune wrote: "",
    ** which no config parses from, rather than a cut one. */
    const char *text = kt__db_text(q, 0, &oom);
    snprintf(config, n, "%s", strlen(text) < n ? text : "");
    if (time_us) *time_us = kt__db_time(q, 1);
    st = oom ? (snprintf(err, errlen, "%s: reading configs: out of memory", s->path), KT__C_NOMEM) : KT__C_OK;
  } else if (rc != SQLITE_DONE) {
    st = kt__db_err(s, db, "reading configs", err, errlen);
  }
  sqlite3_reset(q);
  return st;
}

int kt__store_get_config(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                         char *config, size_t n, double *time_us, char *err, size_t errlen) {
  const char *k[4] = {kernel, spec_hash, device, key};
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  sqlite3_stmt *q = kt__db_stmt(s, ST_GET_CONFIG, &st, err, errlen);
  if (q) st = get_config_from(s, s->db, q, k, config, n, time_us, err, errlen);
  if (st == KT__C_NOT_FOUND && s->sys_get) st = get_config_from(s, s->sys, s->sys_get, k, config, n, time_us, err, errlen);
  pthread_mutex_unlock(&s->lock);
  return st;
}

int kt__store_put_trial(kt_store *s, const kt__trialrow *r, char *err, size_t errlen) {
  int writable = kt__db_writable(s, err, errlen);
  if (writable) return writable;
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  sqlite3_stmt *t = kt__db_stmt(s, ST_PUT_TRIAL, &st, err, errlen);
  if (t) {
    kt__trialrow w = *r;
    if (!w.measured_at) w.measured_at = kt__db_now();
    kt__row_bind(t, &kt__trials_table, &w, 1);
    if (kt__db_step(t) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing trials", err, errlen);
    sqlite3_reset(t);
    sqlite3_clear_bindings(t);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

int kt__store_trials(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                     int (*fn)(void *user, const kt__trialrow *r), void *user, char *err, size_t errlen) {
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK, rc = SQLITE_DONE;
  sqlite3_stmt *q = kt__db_stmt(s, ST_TRIALS, &st, err, errlen);
  if (q) {
    kt__db_bind_key(q, kernel, spec_hash, device, key);
    while ((rc = kt__db_step(q)) == SQLITE_ROW) {
      kt__trialrow r;
      if ((st = kt__row_read(q, &kt__trials_table, &r, 0))) {
        snprintf(err, errlen, "%s: reading trials: out of memory", s->path);
        break;
      }
      if (fn(user, &r)) break;
    }
    if (!st && rc != SQLITE_ROW && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading trials", err, errlen);
    sqlite3_reset(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

int kt__store_winners(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                      int limit, void (*fn)(void *user, const char *config), void *user, char *err, size_t errlen) {
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK, rc = SQLITE_DONE, oom = 0;
  sqlite3_stmt *q = kt__db_stmt(s, ST_WINNERS, &st, err, errlen);
  if (q) {
    kt__db_bind_key(q, kernel, spec_hash, device, key);
    sqlite3_bind_int(q, 5, limit);
    while ((rc = kt__db_step(q)) == SQLITE_ROW) {
      const char *config = kt__db_text(q, 0, &oom);
      if (oom) {
        st = (snprintf(err, errlen, "%s: reading configs: out of memory", s->path), KT__C_NOMEM);
        break;
      }
      fn(user, config);
    }
    if (!st && rc != SQLITE_ROW && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading configs", err, errlen);
    sqlite3_reset(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}
