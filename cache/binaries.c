/* Compiled cubins. Each carries its size and XXH128 digest, checked against
** the blob before it is handed out, so that no damaged or altered blob is
** ever loaded. */
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache/db.h"

void kt__store_digest(const void *p, size_t n, char out[33]) {
  XXH128_hash_t h = XXH3_128bits(p, n);
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

int kt__store_put_binary(kt_store *s, const kt__binrow *r, char *err, size_t errlen) {
  int writable = kt__db_writable(s, err, errlen);
  if (writable) return writable;
  char digest[33];
  kt__store_digest(r->cubin, (size_t)r->size, digest);
  kt__binrow w = *r;
  w.digest = digest;
  w.created_at = kt__db_now();
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  sqlite3_stmt *b = kt__db_stmt(s, ST_PUT_BINARY, &st, err, errlen);
  if (b) {
    kt__row_bind(b, &kt__binaries_table, &w, 1);
    if (kt__db_step(b) != SQLITE_DONE) st = kt__db_err(s, s->db, "writing binaries", err, errlen);
    sqlite3_reset(b);
    sqlite3_clear_bindings(b);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}

int kt__binary_intact(const kt__binrow *r, int bytes) {
  char digest[33];
  if (!r->cubin || bytes != r->size || strlen(r->digest) != 32) return 0;
  kt__store_digest(r->cubin, (size_t)bytes, digest);
  return !strcmp(digest, r->digest);
}

int kt__store_get_binary(kt_store *s, const char *hash, void (*fn)(void *user, const kt__binrow *r), void *user,
                         char *err, size_t errlen) {
  if (!s->trusted) return KT__C_NOT_FOUND;
  pthread_mutex_lock(&s->lock);
  int st = KT__C_OK;
  sqlite3_stmt *q = kt__db_stmt(s, ST_GET_BINARY, &st, err, errlen);
  if (q) {
    kt__db_bind_text(q, 1, hash);
    int rc = kt__db_step(q);
    st = KT__C_NOT_FOUND;
    if (rc == SQLITE_ROW) {
      kt__binrow r;
      int oom = kt__row_read(q, &kt__binaries_table, &r, 0);
      int bytes = sqlite3_column_bytes(q, kt__row_col(&kt__binaries_table, "cubin"));
      if (oom) {
        snprintf(err, errlen, "%s: reading binaries: out of memory", s->path);
        st = KT__C_NOMEM;
      } else if (kt__binary_intact(&r, bytes)) {
        fn(user, &r);
        st = KT__C_OK;
      } else {
        snprintf(err, errlen, "%s: binaries row %s (%s): the cubin does not match its size and digest", s->path, hash,
                 r.kernel);
        st = KT__C_INVALID;
      }
    } else if (rc != SQLITE_DONE) {
      st = kt__db_err(s, s->db, "reading binaries", err, errlen);
    }
    sqlite3_reset(q);
  }
  pthread_mutex_unlock(&s->lock);
  return st;
}
