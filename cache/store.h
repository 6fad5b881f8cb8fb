/* The persistent config cache. This is the only part of ktune that knows
** SQL, and it depends on nothing else of ktune: the runtime sees these
** calls. A store is one user database (read-write, WAL, shared safely by
** processes on one machine) and, optionally, a read-only system database
** consulted after it. Every call is thread-safe (one mutex per store) and
** reports errors as "PATH: what failed: sqlite message". */
#ifndef KT_STORE_H
#define KT_STORE_H

#include <stdint.h>
#include <stdio.h>

#include "cache/rows.h"

/* Results of cache calls. They are the values of the kt_status codes of
** the same names (ktune.h), which never change, so the runtime passes them
** on as they are (dispatch checks that they agree). */
enum {
  KT__C_OK = 0,
  KT__C_INVALID = 1,    /* a file or row that is not what it should be */
  KT__C_NOMEM = 2,
  KT__C_IO = 3,
  KT__C_CACHE = 15,     /* SQLite failed: corrupt, locked past the deadline, I/O */
  KT__C_NOT_FOUND = 16,
  KT__C_READONLY = 17
};

/* Where the cache's warnings go: level as kt_log_level (0 error .. 3
** debug); messages above level are dropped. msg is borrowed. */
typedef struct kt__clog {
  void (*fn)(void *user, int level, const char *msg);
  void *user;
  int level;
} kt__clog;

typedef struct kt_store kt_store;

typedef struct kt__store_opts {
  const char *path;         /* NULL: kt__store_default_path() */
  const char *system_path;  /* a read-only cache consulted after it, or NULL */
  int readonly;             /* open an existing file for reading only: it
                               is never created, changed or converted */
  int must_write;           /* without readonly: a file that would be opened
                               read-only (not writable, a foreign side
                               file, a newer schema) is refused instead */
  kt__clog log;
} kt__store_opts;

/* Where the cache lives: $KTUNE_CACHE, else $XDG_CACHE_HOME/ktune/ktune.db
** (an absolute one), else HOME/.cache/ktune/ktune.db, HOME from $HOME or
** the password database (an absolute one). Returns 0, or -1 with why in
** err when there is none or it would not fit in n bytes whole. */
int kt__store_default_path(char *out, size_t n, char *err, size_t errlen);

/* Open the user cache (creating directories, the file and the schema as
** needed, migrating an older schema in one transaction), and the system
** cache when one is named. A file ktune cannot trust, a newer schema, or a
** read-only file or directory is opened read-only. Returns KT__C_OK,
** KT__C_NOMEM, or KT__C_CACHE (corrupt, not a database, not a ktune cache,
** a directory, cannot be created; with readonly: missing; with must_write:
** one that would be read-only). */
int kt__store_open(kt_store **out, const kt__store_opts *o, char *err, size_t errlen);
void kt__store_close(kt_store *s);
const char *kt__store_path(const kt_store *s);
/* Whether path names one of the store's databases, the user's or the
** system's (through any link, from any working directory), or a file
** SQLite keeps beside one (-wal, -shm, -journal; made yet or not): a file
** written there would replace a cache. */
int kt__store_is_own_file(const kt_store *s, const char *path);
int kt__store_readonly(const kt_store *s);
/* Whether cubins may be loaded from the user database: the file and its
** -wal and -shm are owned by this user and not world-writable. */
int kt__store_binaries_trusted(const kt_store *s);

/* configs.c */
enum { KT__ADDED = 1, KT__KEPT = 2, KT__REPLACED = 3 };
/* Insert, or replace only if faster: the fastest measured config wins and
** a later equal-or-slower result never overwrites it. A stored row that is
** damaged (its time not a finite number >= 0, or its config no config the
** codec reads) gives way to any result.
** time_us must be a finite number >= 0. *outcome may be NULL. */
int kt__store_put_config(kt_store *s, const kt__cfgrow *r, int *outcome, char *err, size_t errlen);
/* The same, and the stored row gives way too where its config is still
** stale (stale may be NULL): one the caller found outside the spec's
** space, which no process would use again and no slower result would
** ever replace. Compared in the write's transaction, so a config another
** process stored meanwhile is kept unless r is faster. */
int kt__store_replace_config(kt_store *s, const kt__cfgrow *r, const char *stale, int *outcome, char *err,
                             size_t errlen);
/* The config for a key (user database, then system). KT__C_NOT_FOUND when
** neither has it. */
int kt__store_get_config(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                         char *config, size_t n, double *time_us, char *err, size_t errlen);
/* The configs stored for other keys than key of kernel, spec_hash and
** device, the one most keys chose first (ties in the configs' order), at
** most limit: fn gets each (borrowed). The user database only. */
int kt__store_winners(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                      int limit, void (*fn)(void *user, const char *config), void *user, char *err, size_t errlen);
int kt__store_put_trial(kt_store *s, const kt__trialrow *r, char *err, size_t errlen);
/* Calls fn for each trial of a key, fastest first; fn returns nonzero to
** stop. */
int kt__store_trials(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                     int (*fn)(void *user, const kt__trialrow *r), void *user, char *err, size_t errlen);

/* binaries.c */
/* Store a cubin (r->cubin, r->size bytes) unless its hash is stored; the
** digest and the time are computed here, whatever r says. */
int kt__store_put_binary(kt_store *s, const kt__binrow *r, char *err, size_t errlen);
/* Call fn with the row of a cubin by hash, once its size and digest are
** checked against the blob; the row is borrowed until fn returns.
** KT__C_NOT_FOUND when absent or when the database is not trusted for
** binaries; KT__C_INVALID (the message names the row) when the blob fails
** its check: it must not be loaded. */
int kt__store_get_binary(kt_store *s, const char *hash, void (*fn)(void *user, const kt__binrow *r), void *user,
                         char *err, size_t errlen);
/* The XXH128 of n bytes as 32 hex digits (the digest column). */
void kt__store_digest(const void *p, size_t n, char out[33]);

/* leases.c: what processes tell each other through the cache. */
/* Add (reason not NULL) or clear (reason NULL) a quarantine entry. */
int kt__store_quarantine(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                         const char *config, const char *reason, char *err, size_t errlen);
int kt__store_is_quarantined(kt_store *s, const char *kernel, const char *spec_hash, const char *device,
                             const char *key, const char *config, int *yes, char *reason, size_t reasonlen, char *err,
                             size_t errlen);
/* Call fn for each quarantined config of a key (one query). */
int kt__store_quarantined(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                          void (*fn)(void *user, const char *config, const char *reason), void *user, char *err,
                          size_t errlen);
/* Rows "in progress in pid PID" (a trial that never finished) get reason
** instead; fn sees each (kernel, key, config). */
int kt__store_quarantine_claim(kt_store *s, long pid, const char *reason,
                               void (*fn)(void *, const char *, const char *, const char *), void *user, char *err,
                               size_t errlen);
/* Take the tuning lease of a key for (host, pid) and the store s until now
** + ttl_s. *taken is 0 when another live holder has it (its pid in
** *holder), or another store of this process does. A lease that expired,
** or whose holder is a process of this host that is gone, is taken over. */
int kt__store_lease(kt_store *s, const char *kernel, const char *spec_hash, const char *device, const char *key,
                    const char *host, long pid, int ttl_s, int *taken, long *holder, char *err, size_t errlen);
int kt__store_lease_release(kt_store *s, const char *kernel, const char *spec_hash, const char *device,
                            const char *key, const char *host, long pid, char *err, size_t errlen);
/* A lease this process holds is the store's that took it: another store of
** the process (another runtime) is refused it as another process would be.
** Closing a store forgets its leases here (their rows stay, as a crash's
** would). */
void kt__store_forget_leases(const kt_store *s);

/* transfer.c: the cache as people and other machines see it. */
int kt__store_list(kt_store *s, const char *kernel, int (*fn)(void *user, const kt__cfgrow *r, int from_system),
                   void *user, char *err, size_t errlen);
int kt__store_counts(kt_store *s, long counts[4] /* configs trials binaries quarantine */, char *err, size_t errlen);
/* Write every configs row (and binaries, base64, when with_binaries) as
** JSON, one row per line. */
int kt__store_export(kt_store *s, FILE *out, int with_binaries, char *err, size_t errlen);
/* Merge an export, all or nothing, in one transaction: every row is
** validated and its key and config made canonical; a config replaces the
** stored one only when faster. Binaries are checked, and added only
** with_binaries. counts: configs added, kept, replaced, binaries added,
** binaries left out. KT__C_INVALID names the file, the row and what is
** wrong. */
int kt__store_import(kt_store *s, const char *name, const char *json, int with_binaries, long counts[5], char *err,
                     size_t errlen);
/* Remove configs (and their trials and quarantine rows) of the named
** kernels whose spec hash differs from the one given, then binaries that
** neither a config nor a named kernel's current spec hash refers to. */
int kt__store_gc(kt_store *s, const char *const *kernels, const char *const *hashes, int n, long *configs_removed,
                 long *binaries_removed, char *err, size_t errlen);

/* Test hooks. */
int kt__store_fs_is_network(long f_type);

#endif
