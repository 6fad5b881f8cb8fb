/* The persistent config cache. This is the only part of ktune that knows
** SQL; the rest of the library sees these calls. A store is one user
** database (read-write, WAL, shared safely by processes on one machine)
** and, optionally, a read-only system database consulted after it.
** Every call is thread-safe (one mutex per store) and reports errors as
** "PATH: what failed: sqlite message". */
#ifndef KT_STORE_H
#define KT_STORE_H

#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "ktune.h"

#define KT_SCHEMA_VERSION 3

typedef struct kt_store kt_store;

typedef struct kt__cfgrow {
  const char *kernel, *spec_hash, *device, *key, *config;
  double time_us;
  int candidates, rejected;
  const char *nvrtc_version, *driver_version;
  int64_t created_at, updated_at; /* 0: now */
} kt__cfgrow;

typedef struct kt__trialrow {
  const char *kernel, *spec_hash, *device, *key, *config;
  const char *status; /* ok mismatch oob_write fault compile_error resources timeout */
  double median_us, spread_us;
  int registers, smem_bytes, spill_bytes;
  const char *detail;
} kt__trialrow;

typedef struct kt__binrow {
  const char *hash, *kernel, *spec_hash, *arch, *nvrtc_version, *constants;
  int registers, smem_bytes, spill_bytes;
  const void *cubin;
  size_t size;
} kt__binrow;

/* Where the cache lives: $KTUNE_CACHE, else $XDG_CACHE_HOME/ktune/ktune.db,
** else $HOME/.cache/ktune/ktune.db. */
void kt__store_default_path(char *out, size_t n);

/* Open (creating directories, the file and the schema as needed; migrating
** an older schema in one transaction; opening a newer one read-only).
** system_path may be NULL. Returns KT_OK or KT_ERR_CACHE (corrupt, not a
** database, a directory, cannot be created). */
kt_status kt__store_open(kt_store **out, const char *path, const char *system_path,
                         const kt__logger *log, char *err, size_t errlen);
void kt__store_close(kt_store *s);
const char *kt__store_path(const kt_store *s);
int kt__store_readonly(const kt_store *s);
/* Whether cubins may be loaded from the user database (not world-writable,
** owned by this user). */
int kt__store_binaries_trusted(const kt_store *s);

enum { KT__ADDED = 1, KT__KEPT = 2, KT__REPLACED = 3 };
/* Insert, or replace only if faster: the fastest measured config wins and
** a later equal-or-slower result never overwrites it. *outcome may be NULL. */
kt_status kt__store_put_config(kt_store *s, const kt__cfgrow *r, int *outcome, char *err,
                               size_t errlen);
/* The config for a key (user database, then system). KT_ERR_NOT_FOUND when
** neither has it. */
kt_status kt__store_get_config(kt_store *s, const char *kernel, const char *spec_hash,
                               const char *device, const char *key, char *config, size_t n,
                               double *time_us, char *err, size_t errlen);
kt_status kt__store_put_trial(kt_store *s, const kt__trialrow *r, char *err, size_t errlen);
/* Calls fn for each trial of a key; fn returns nonzero to stop. */
kt_status kt__store_trials(kt_store *s, const char *kernel, const char *spec_hash,
                           const char *device, const char *key,
                           int (*fn)(void *user, const kt__trialrow *r), void *user, char *err,
                           size_t errlen);
kt_status kt__store_put_binary(kt_store *s, const kt__binrow *r, char *err, size_t errlen);
/* A cubin by hash; caller frees *cubin with kt__free. KT_ERR_NOT_FOUND when
** absent, or when the database is not trusted for binaries. */
kt_status kt__store_get_binary(kt_store *s, const char *hash, void **cubin, size_t *size,
                               char *err, size_t errlen);
/* The lowered (mangled) entry name stored with a binary's constants;
** caller frees with kt__free. NULL when absent. */
char *kt__store_binary_lowered(kt_store *s, const char *hash);
/* Add (reason not NULL) or clear (reason NULL) a quarantine entry. */
kt_status kt__store_quarantine(kt_store *s, const char *kernel, const char *spec_hash,
                               const char *device, const char *key, const char *config,
                               const char *reason, char *err, size_t errlen);
kt_status kt__store_is_quarantined(kt_store *s, const char *kernel, const char *spec_hash,
                                   const char *device, const char *key, const char *config,
                                   int *yes, char *reason, size_t reasonlen, char *err,
                                   size_t errlen);

/* Rows "in progress in pid PID" (a trial that never finished) get reason
** instead; fn sees each (kernel, key, config). */
kt_status kt__store_quarantine_claim(kt_store *s, long pid, const char *reason,
                                     void (*fn)(void *, const char *, const char *, const char *), void *user,
                                     char *err, size_t errlen);
/* Call fn for each quarantined config of a key (one query). */
kt_status kt__store_quarantined(kt_store *s, const char *kernel, const char *spec_hash,
                               const char *device, const char *key,
                               void (*fn)(void *user, const char *config, const char *reason),
                               void *user, char *err, size_t errlen);

/* Take the tuning lease of a key for (host, pid) until now + ttl_s. *taken
** is 0 when another live holder has it (its pid in *holder). A lease that
** expired, or whose holder is a process of this host that is gone, is
** taken over. */
kt_status kt__store_lease(kt_store *s, const char *kernel, const char *spec_hash, const char *device,
                          const char *key, const char *host, long pid, int ttl_s, int *taken, long *holder,
                          char *err, size_t errlen);
kt_status kt__store_lease_release(kt_store *s, const char *kernel, const char *spec_hash,
                                  const char *device, const char *key, const char *host, long pid,
                                  char *err, size_t errlen);

/* transfer.c */
kt_status kt__store_list(kt_store *s, const char *kernel,
                         int (*fn)(void *user, const kt__cfgrow *r, int from_system), void *user,
                         char *err, size_t errlen);
kt_status kt__store_counts(kt_store *s, long counts[4] /* configs trials binaries quarantine */,
                           char *err, size_t errlen);
kt_status kt__store_export(kt_store *s, FILE *out, int with_binaries, char *err, size_t errlen);
/* counts: added, kept, replaced (configs), then binaries added. */
kt_status kt__store_import(kt_store *s, const char *name, const char *json, long counts[4],
                           char *err, size_t errlen);
/* Remove configs (and their trials and quarantine rows) of the named
** kernels whose spec hash differs from the one given, then binaries no
** config refers to. */
kt_status kt__store_gc(kt_store *s, const char *const *kernels, const char *const *hashes, int n,
                       long *configs_removed, long *binaries_removed, char *err, size_t errlen);

/* Test hooks. */
int kt__store_fs_is_network(long f_type);

#endif
