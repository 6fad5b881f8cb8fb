/* What processes tell each other through the cache: configs quarantined
** for a key (they faulted or hung, or a trial of them is under way), and
** who is tuning a key right now. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cache/db.h"

int kt__store_quarantine(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                         const char *config, const char *reason, char *err, size_t errlen) {
  int writable = kt__db_writable(s, err, errlen);
  if (writable) return writable;
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  sqlite3_stmt *q = kt__db_stmt(s, reason ? ST_Q_ADD : ST_Q_DEL, &st, err, errlen);
  if (q) {
    if (reason) {
      kt__qrow r = {.kernel = kernel, .spec_hash = spec_hash, .device = device, .key = key, .config = config,
                    .reason = reason, .since = kt__db_now(), .pid = (int64_t)getpid()};
      kt__row_bind(q, &kt__quarantine_table, &r, 1);
    } else {
      kt__db_bind_key(q, kernel, spec_hash, device, key);
      kt__db_bind_text(q, 5, config);
    }
    if (kt__db_step(q) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing quarantine", err, errlen);
    sqlite3_reset(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

int kt__store_is_quarantined(kt_store *s, const char *kernel, const char *spec_hash, const char *device,
                             const char *key, const char *config, int *yes, char *reason, size_t reasonlen, char *err,
                             size_t errlen) {
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  *yes = 0;
  sqlite3_stmt *q = kt__db_stmt(s, ST_Q_GET, &st, err, errlen);
  if (q) {
    kt__db_bind_key(q, kernel, spec_hash, device, key);
    kt__db_bind_text(q, 5, config);
    int rc = kt__db_step(q), oom = 0;
    *yes = rc == SQLITE_ROW;
    if (*yes && reason) snprintf(reason, reasonlen, "%s", kt__db_text(q, 0, &oom));
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
    if (oom) st = KT__C_NOMEM, snprintf(err, errlen, "%s: reading quarantine: out of memory", s->path);
    sqlite3_reset(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* A statement made for one use with its first four params bound to a key;
** NULL with *st set when it cannot be prepared. */
static sqlite3_stmt *keyed(kt_store *s, const char *q, const char *kernel, const char *spec_hash, const char *device,
                           const char *key, const char *what, int *st, char *err, size_t errlen) {
  sqlite3_stmt *p;
  if (sqlite3_prepare_v2(s->db, q, -1, &p, NULL)) {
    *st = kt__db_err(s, s->db, what, err, errlen);
    sqlite3_finalize(p);
    return NULL;
  }
  kt__db_bind_key(p, kernel, spec_hash, device, key);
  return p;
}

int kt__store_quarantined(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                          void (*fn)(void *user, const char *config, const char *reason), void *user, char *err,
                          size_t errlen) {
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  sqlite3_stmt *q = keyed(s, "SELECT config, reason FROM quarantine" KT__WHERE_KEY, kernel, spec_hash, device, key,
                          "reading quarantine", &st, err, errlen);
  if (q) {
    int rc, oom = 0;
    while (!oom && (rc = kt__db_step(q)) == SQLITE_ROW) {
      const char *config = kt__db_text(q, 0, &oom), *reason = kt__db_text(q, 1, &oom);
      if (!oom) fn(user, config, reason);
    }
    if (oom) st = KT__C_NOMEM, snprintf(err, errlen, "%s: reading quarantine: out of memory", s->path);
    else if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
    sqlite3_finalize(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* Reports each in-progress row of pid to fn, then gives them reason. */
static int claim(kt_store *s, long pid, const char *reason, void (*fn)(void *, const char *, const char *, const char *),
                 void *user, char *err, size_t errlen) {
  char inprog[64];
  snprintf(inprog, sizeof inprog, "in progress in pid %ld", pid);
  sqlite3_stmt *q = NULL, *u = NULL;
  int st = KT__C_OK;
  if (sqlite3_prepare_v2(s->db, "SELECT kernel, key, config FROM quarantine WHERE pid = ?1 AND reason = ?2", -1, &q,
                         NULL) ||
      sqlite3_prepare_v2(s->db, "UPDATE quarantine SET reason = ?3, since = ?4 WHERE pid = ?1 AND reason = ?2", -1, &u,
                         NULL)) {
    st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
  } else {
    sqlite3_bind_int64(q, 1, pid);
    kt__db_bind_text(q, 2, inprog);
    int rc, oom = 0;
    while (!oom && (rc = kt__db_step(q)) == SQLITE_ROW) {
      const char *k = kt__db_text(q, 0, &oom), *key = kt__db_text(q, 1, &oom), *cfg = kt__db_text(q, 2, &oom);
      if (fn && !oom) fn(user, k, key, cfg);
    }
    if (oom) st = KT__C_NOMEM, snprintf(err, errlen, "%s: reading quarantine: out of memory", s->path);
    else if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading quarantine", err, errlen);
    sqlite3_bind_int64(u, 1, pid);
    kt__db_bind_text(u, 2, inprog);
    kt__db_bind_text(u, 3, reason);
    sqlite3_bind_int64(u, 4, kt__db_now());
    if (!st && kt__db_step(u) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing quarantine", err, errlen);
  }
  sqlite3_finalize(q);
  sqlite3_finalize(u);
  return st;
}

int kt__store_quarantine_claim(kt_store *s, long pid, const char *reason,
                               void (*fn)(void *, const char *, const char *, const char *), void *user, char *err,
                               size_t errlen) {
  int writable = kt__db_writable(s, err, errlen);
  if (writable) return writable;
  pthread_mutex_lock(&s->lock);
  int st = claim(s, pid, reason, fn, user, err, errlen);
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* The leases this process holds, each with the store (a runtime's
** connection) that took it. A lease row names a host and a pid only, so
** without this every runtime of a process would take the keys another of
** its runtimes is tuning, tune them too and keep a winner of its own. */
typedef struct held {
  const kt_store *s; /* compared, never followed: it may be closed */
  char *id;          /* the file's identity and the key, \x1f between */
  struct held *next;
} held;
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static held *held_list;

static char *held_id(const kt_store *s, const kt__leaserow *r) {
  return sqlite3_mprintf("%llx:%llx\x1f%s\x1f%s\x1f%s\x1f%s", (unsigned long long)s->file.dev,
                         (unsigned long long)s->file.ino, r->kernel, r->spec_hash, r->device, r->key);
}

/* Under held_lock: where id's entry is linked (*result NULL: none). */
static held **held_at(const char *id) {
  held **pp = &held_list;
  while (*pp && strcmp((*pp)->id, id)) pp = &(*pp)->next;
  return pp;
}

/* Under held_lock: the entry at *pp unlinked and freed. */
static void held_drop(held **pp) {
  held *h = *pp;
  *pp = h->next;
  sqlite3_free(h->id);
  sqlite3_free(h);
}

/* Whether another store of this process holds the lease of id. */
static int held_by_other(const kt_store *s, const char *id) {
  pthread_mutex_lock(&held_lock);
  held *h = *held_at(id);
  int other = h && h->s != s;
  pthread_mutex_unlock(&held_lock);
  return other;
}

/* set: s holds id from now on; else s lets go of id, if it held it. id is
** the list's when set succeeds, else freed. */
static void held_mark(const kt_store *s, char *id, int set) {
  pthread_mutex_lock(&held_lock);
  held **pp = held_at(id), *h;
  if (*pp && (set || (*pp)->s == s)) held_drop(pp);
  if (set && (h = sqlite3_malloc(sizeof *h))) {
    *h = (held){.s = s, .id = id, .next = held_list};
    held_list = h;
    id = NULL;
  }
  pthread_mutex_unlock(&held_lock);
  sqlite3_free(id);
}

void kt__store_forget_leases(const kt_store *s) {
  pthread_mutex_lock(&held_lock);
  for (held **pp = &held_list; *pp;)
    if ((*pp)->s == s) held_drop(pp);
    else pp = &(*pp)->next;
  pthread_mutex_unlock(&held_lock);
}

/* Whether the lease row q points at leaves the key to (host, pid) and the
** store s: a lease of this process is another store's while it holds it. */
static int lease_free(sqlite3_stmt *q, const kt_store *s, const char *id, const char *host, long pid, long *holder,
                      int *oom) {
  const char *h = kt__db_text(q, 0, oom);
  long p = (long)sqlite3_column_int64(q, 1);
  int64_t exp = sqlite3_column_int64(q, 2);
  int same_host = h && !strcmp(h, host);
  int gone = same_host && p != pid && kill((pid_t)p, 0) && errno == ESRCH;
  int mine = same_host && p == pid && !(id && held_by_other(s, id));
  if (mine || gone || exp < kt__db_now()) return 1;
  *holder = p;
  return 0;
}

/* The lease row of r written: *taken. */
static int put_lease(kt_store *s, const kt__leaserow *r, int *taken, char *err, size_t errlen) {
  char cols[256], params[128], sql[512];
  sqlite3_stmt *q;
  int st = KT__C_OK;
  kt__row_columns(cols, sizeof cols, &kt__leases_table);
  kt__row_params(params, sizeof params, &kt__leases_table, 1);
  snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO leases (%s) VALUES (%s)", cols, params);
  if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL)) {
    sqlite3_finalize(q);
    return kt__db_err(s, s->db, "writing leases", err, errlen);
  }
  kt__row_bind(q, &kt__leases_table, r, 1);
  if (kt__db_step(q) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing leases", err, errlen);
  else *taken = 1;
  sqlite3_finalize(q);
  return st;
}

static int take_lease(kt_store *s, const kt__leaserow *r, int *taken, long *holder, char *err, size_t errlen) {
  int st = KT__C_OK, free_ = 1;
  sqlite3_stmt *q = keyed(s, "SELECT host, pid, expires_at FROM leases" KT__WHERE_KEY, r->kernel, r->spec_hash, r->device,
                          r->key, "reading leases", &st, err, errlen);
  if (!q) return st;
  char *id = held_id(s, r);
  int rc = kt__db_step(q), oom = 0;
  if (rc == SQLITE_ROW) free_ = lease_free(q, s, id, r->host, (long)r->pid, holder, &oom);
  else if (rc != SQLITE_DONE) st = kt__db_err(s, s->db, "reading leases", err, errlen);
  if (oom) st = KT__C_NOMEM, snprintf(err, errlen, "%s: reading leases: out of memory", s->path);
  sqlite3_finalize(q);
  if (st || !free_) {
    sqlite3_free(id);
    return st;
  }
  st = put_lease(s, r, taken, err, errlen);
  if (*taken && id && r->pid == (long)getpid()) held_mark(s, id, 1);
  else sqlite3_free(id);
  return st;
}

int kt__store_lease(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                    const char *host, long pid, int ttl_s, int *taken, long *holder, char *err, size_t errlen) {
  *taken = 0;
  *holder = 0;
  if (kt__db_writable(s, err, errlen)) {
    *taken = 1; /* nothing to coordinate through */
    return KT__C_OK;
  }
  kt__leaserow r = {.kernel = kernel, .spec_hash = spec_hash, .device = device, .key = key, .host = host,
                    .pid = pid, .expires_at = kt__db_now() + ttl_s};
  pthread_mutex_lock(&s->lock);
  int st = kt__db_begin(s, err, errlen);
  if (!st) st = take_lease(s, &r, taken, holder, err, errlen);
  st = kt__db_end(s, st, err, errlen);
  pthread_mutex_unlock(&s->lock);
  if (st) *taken = 0;
  return st;
}

int kt__store_lease_release(kt_store *s, const char *kernel, const char *spec_hash, const char *device,
                            const char *key, const char *host, long pid, char *err, size_t errlen) {
  if (s->readonly) return KT__C_OK;
  kt__leaserow r = {.kernel = kernel, .spec_hash = spec_hash, .device = device, .key = key};
  char *id = held_id(s, &r);
  if (id) held_mark(s, id, 0);
  if (kt__db_writable(s, err, errlen)) return KT__C_OK; /* the lease went with its file */
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  sqlite3_stmt *q = keyed(s, "DELETE FROM leases" KT__WHERE_KEY " AND host=?5 AND pid=?6", kernel, spec_hash, device, key,
                          "writing leases", &st, err, errlen);
  if (q) {
    kt__db_bind_text(q, 5, host);
    sqlite3_bind_int64(q, 6, pid);
    if (kt__db_step(q) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing leases", err, errlen);
    sqlite3_finalize(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}
