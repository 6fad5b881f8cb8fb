/* The tables of the config cache, each described once. From these lists
** follow the schema (schema.c), the row structs below, and every bind and
** read of a whole row (rows.c). A column carries the schema version that
** added it, so an older file is brought up to date by adding it. Table and
** column names are fixed: people and scripts rely on them (docs/cache.md).
**
** A new column is one line here (with the next schema version), the code
** that fills it, and its line in docs/cache.md. */
#ifndef KT_ROWS_H
#define KT_ROWS_H

#include <stddef.h>
#include <stdint.h>

#define KT__SCHEMA_VERSION 4

/* Column kinds and their C types: STR const char *, INT int64_t, REAL
** double, OPT double stored as NULL when < 0 (read back as -1), BLOB
** const void * whose length is the row's size field. */

/* X(name, kind, declaration, version) */
#define KT__META_COLS(X)                \
  X(name, STR, "TEXT NOT NULL", 1)      \
  X(value, STR, "TEXT NOT NULL", 1)

/* The winning config per (kernel, spec hash, device, key). key and config
** are canonical JSON (cache/codec.h): json_extract(key, '$.D') works. */
#define KT__CONFIGS_COLS(X)                                     \
  X(kernel, STR, "TEXT NOT NULL", 1)                            \
  X(spec_hash, STR, "TEXT NOT NULL", 1)                         \
  X(device, STR, "TEXT NOT NULL", 1)                            \
  X(key, STR, "TEXT NOT NULL", 1)                               \
  X(config, STR, "TEXT NOT NULL", 1)                            \
  X(time_us, REAL, "REAL NOT NULL", 1)                          \
  X(candidates, INT, "INTEGER NOT NULL DEFAULT 0", 2)           \
  X(rejected, INT, "INTEGER NOT NULL DEFAULT 0", 2)             \
  X(nvrtc_version, STR, "TEXT NOT NULL DEFAULT ''", 1)          \
  X(driver_version, STR, "TEXT NOT NULL DEFAULT ''", 1)         \
  X(created_at, INT, "INTEGER NOT NULL", 1)                     \
  X(updated_at, INT, "INTEGER NOT NULL", 1)

/* The trial statuses, as ktune.h's KT_TRIAL_MAP names them (a test holds
** the two lists together). */
#define KT__TRIAL_STATUSES \
  "'ok', 'mismatch', 'oob_write', 'fault', 'compile_error', 'resources', 'timeout'"

/* Every candidate measured for a key, kept per (key, config) so that a
** config added to a space later is the only one measured next time. */
#define KT__TRIALS_COLS(X)                                                     \
  X(kernel, STR, "TEXT NOT NULL", 1)                                           \
  X(spec_hash, STR, "TEXT NOT NULL", 1)                                        \
  X(device, STR, "TEXT NOT NULL", 1)                                           \
  X(key, STR, "TEXT NOT NULL", 1)                                              \
  X(config, STR, "TEXT NOT NULL", 1)                                           \
  X(status, STR, "TEXT NOT NULL CHECK (status IN (" KT__TRIAL_STATUSES "))", 1) \
  X(median_us, OPT, "REAL", 1)                                                 \
  X(spread_us, OPT, "REAL", 1)                                                 \
  X(registers, INT, "INTEGER", 1)                                              \
  X(smem_bytes, INT, "INTEGER", 1)                                             \
  X(spill_bytes, INT, "INTEGER", 2)                                            \
  X(detail, STR, "TEXT NOT NULL DEFAULT ''", 1)                                \
  X(measured_at, INT, "INTEGER NOT NULL", 1)

/* Compiled cubins, keyed by a hash of (source, compile-time constants,
** options, architecture, NVRTC ABI). digest is the XXH128 of the cubin,
** checked with size before a cubin is loaded. */
#define KT__BINARIES_COLS(X)                                 \
  X(hash, STR, "TEXT NOT NULL", 1)                           \
  X(kernel, STR, "TEXT NOT NULL", 1)                         \
  X(spec_hash, STR, "TEXT NOT NULL DEFAULT ''", 2)           \
  X(arch, STR, "TEXT NOT NULL", 1)                           \
  X(nvrtc_version, STR, "TEXT NOT NULL", 1)                  \
  X(constants, STR, "TEXT NOT NULL", 1)                      \
  X(registers, INT, "INTEGER", 1)                            \
  X(smem_bytes, INT, "INTEGER", 1)                           \
  X(spill_bytes, INT, "INTEGER", 1)                          \
  X(size, INT, "INTEGER NOT NULL", 1)                        \
  X(cubin, BLOB, "BLOB NOT NULL", 1)                         \
  X(created_at, INT, "INTEGER NOT NULL", 1)                  \
  X(digest, STR, "TEXT NOT NULL DEFAULT ''", 4)

/* Configs that faulted or hung: no process tries them again for that key. */
#define KT__QUARANTINE_COLS(X)                    \
  X(kernel, STR, "TEXT NOT NULL", 2)              \
  X(spec_hash, STR, "TEXT NOT NULL", 2)           \
  X(device, STR, "TEXT NOT NULL", 2)              \
  X(key, STR, "TEXT NOT NULL", 2)                 \
  X(config, STR, "TEXT NOT NULL", 2)              \
  X(reason, STR, "TEXT NOT NULL", 2)              \
  X(since, INT, "INTEGER NOT NULL", 2)            \
  X(pid, INT, "INTEGER NOT NULL DEFAULT 0", 2)

/* Who is tuning a key right now, so that two processes do not tune the
** same key at the same moment. */
#define KT__LEASES_COLS(X)                 \
  X(kernel, STR, "TEXT NOT NULL", 3)       \
  X(spec_hash, STR, "TEXT NOT NULL", 3)    \
  X(device, STR, "TEXT NOT NULL", 3)       \
  X(key, STR, "TEXT NOT NULL", 3)          \
  X(host, STR, "TEXT NOT NULL", 3)         \
  X(pid, INT, "INTEGER NOT NULL", 3)       \
  X(expires_at, INT, "INTEGER NOT NULL", 3)

#define KT__CTYPE_STR const char *
#define KT__CTYPE_INT int64_t
#define KT__CTYPE_REAL double
#define KT__CTYPE_OPT double
#define KT__CTYPE_BLOB const void *
#define KT__ROW_FIELD(name, kind, decl, ver) KT__CTYPE_##kind name;

/* Rows as the cache reads and writes them. Strings are borrowed: a row
** passed to a callback is valid until it returns. Times of 0 mean "now". */
typedef struct kt__metarow { KT__META_COLS(KT__ROW_FIELD) } kt__metarow;
typedef struct kt__cfgrow { KT__CONFIGS_COLS(KT__ROW_FIELD) } kt__cfgrow;
typedef struct kt__trialrow { KT__TRIALS_COLS(KT__ROW_FIELD) } kt__trialrow;
typedef struct kt__binrow { KT__BINARIES_COLS(KT__ROW_FIELD) } kt__binrow;
typedef struct kt__qrow { KT__QUARANTINE_COLS(KT__ROW_FIELD) } kt__qrow;
typedef struct kt__leaserow { KT__LEASES_COLS(KT__ROW_FIELD) } kt__leaserow;

enum { KT__K_STR, KT__K_INT, KT__K_REAL, KT__K_OPT, KT__K_BLOB };

typedef struct kt__col {
  const char *name;
  int kind;             /* KT__K_* */
  size_t off;           /* of the field in the row struct */
  const char *decl;     /* its declaration in CREATE TABLE */
  int version;          /* the schema version that added it */
} kt__col;

typedef struct kt__table {
  const char *name;
  const kt__col *cols;
  int ncols;
  int version;          /* the schema version that added the table */
  int npk;              /* its primary key: the first npk columns */
  int rowid;            /* 0: WITHOUT ROWID */
  size_t blob_len;      /* offset of the size field of a BLOB column */
} kt__table;

extern const kt__table kt__meta_table, kt__configs_table, kt__trials_table, kt__binaries_table,
    kt__quarantine_table, kt__leases_table;
/* All of them, for the schema; NULL-terminated. */
extern const kt__table *const kt__tables[];

#endif
