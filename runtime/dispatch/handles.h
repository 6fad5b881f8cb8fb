/* The public handles and what dispatch keeps beside the layers below: the
** tuned table of each kernel (key -> config, read without a lock), the miss
** policy, staging of aliased calls, and per-thread launch plans. */
#ifndef KT_HANDLES_H
#define KT_HANDLES_H

#include <pthread.h>
#include <stdatomic.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "call/alias.h"
#include "tune/tuner.h"

struct kt_runtime;

/* KT_ERR_INVALID for a public call given a NULL handle, a NULL pointer it
** needs or a value out of range, said as "fn: why" where kt_errmsg() finds
** it: on rt, or (rt NULL) on kt_errmsg(NULL). */
kt_status kt__misuse(const struct kt_runtime *rt, const char *fn, const char *why);
/* KT_ERR_INVALID naming fn where this thread is inside a callback of kind
** (base/error.h says why); KT_OK otherwise. */
kt_status kt__reentry(const struct kt_runtime *rt, const char *fn, int kind);
/* text into the caller's buf (n bytes), whole, or "" and KT_ERR_INVALID
** saying how many bytes the what ("key", "config") needs: never a cut one. */
kt_status kt__copy_out(const struct kt_runtime *rt, const char *fn, const char *what, const char *text, char *buf,
                       size_t n);
/* A struct that starts with its size (kt_stats, kt_runtime_info,
** kt_param_info) filled from this library's version of it (all, known
** bytes) as far as the caller's version holds; its size then says how far. */
void kt__copy_sized(void *out, const void *all, size_t known);

struct kt_runtime {
  kt__env env;            /* first: what the layers below see */
  kt_mode mode;
  int stage_aliased, miss_runs_default, no_pdl;
  kt__tuneopts tune;
  char *cache_path, *system_cache_path;
  int no_cache;
  char cache_error[KT_ERRMAX]; /* why no cache is used, when none is */
  char cache_file[4096];  /* the user cache's path as asked for, or "" */
  pthread_mutex_t lock;   /* kernels, async */
  kt_kernel **kernels;
  int nkernels, capkernels;
  atomic_int closing;     /* kt_runtime_close or kt_runtime_stop_tuning has
                             begun: tunings stop, no tuner starts */
  size_t async_copy_limit;
  struct kt__async *async; /* async mode's background tuner, once started */
  kt_coordinator coord;   /* size > 1: ranks agree on tunings (coord.c) */
  char *record_path;      /* where missed keys are recorded, or NULL */
};

struct kt_kernel {
  kt__prog p;             /* first: what the layers below see */
  kt_runtime *rt;
  uint64_t uid;           /* never reused in a process: names the kernel in
                             per-thread launch plans */
  unsigned char *hit_checks; /* per constraint: must be checked on a hit */
  kt__lfmap tuned;        /* key -> kt__tuned, read without a lock */
  pthread_mutex_t tune_lock; /* one miss at a time: cache lookups, tuning */
  atomic_int logged_capture, logged_cache_only;
  atomic_uint_fast64_t n_launch, n_hit;
  atomic_uint gen;        /* bumped when a choice is replaced: per-thread
                             plans made before are stale */
  struct kt__choice *retired; /* replaced choices (under tune_lock) */
};

/* What calls of one key launch: a config, and the variant of the call that
** chose it (a later call whose template values are the same, nearly always,
** skips the variant table). */
typedef struct kt__choice {
  int64_t cfg[KT_MAX_CFIELDS];
  int64_t vals[KT_MAX_TARGS];
  void *fn;
  int standin;            /* async mode: used until the key's tuning ends */
  struct kt__choice *retired; /* replaced choices, kept until the kernel is
                                 freed: a reader may still hold one */
} kt__choice;

/* The table's entry for one key. Its choice is replaced at most by the
** background tuner (async mode), atomically: a reader loads it once. */
typedef struct kt__tuned {
  uint64_t hash;          /* first: the lfmap's convention */
  int nkey;
  int64_t key[KT_MAX_KEY];
  _Atomic(kt__choice *) now;
  kt__choice first;       /* where the first choice lives */
} kt__tuned;

/* kernel.c: free a kernel and everything made for it. Accepts NULL. */
void kt__kernel_free(kt_kernel *k);

/* The runtime a kernel's misuse is said on (NULL for a NULL kernel). */
static inline const kt_runtime *kt__rt_of(const kt_kernel *k) { return k ? k->rt : NULL; }

/* table.c: the hash of a key vector, as the table files it. */
static inline uint64_t kt__key_hash(const kt_kernel *k, const int64_t *key) {
  return XXH3_64bits(key, (size_t)k->p.keydef.n * sizeof key[0]);
}
/* The entry for a key, without a lock; NULL when absent. */
const kt__tuned *kt__tuned_find(const kt_kernel *k, const int64_t *key, uint64_t h);
/* Add an entry for key (the caller holds tune_lock); c is the call that
** missed, used to resolve the variant the next launch needs. standin: the
** choice is async mode's stand-in. */
kt_status kt__tuned_insert(kt_kernel *k, const kt__call *c, const int64_t *key, uint64_t h, const int64_t *cfg,
                           int standin, const kt__tuned **out);
/* Replace e's choice with cfg (the caller holds tune_lock): launches from
** now on use it, and plans made before are dropped. */
kt_status kt__tuned_replace(kt_kernel *k, const kt__tuned *e, const kt__call *c, const int64_t *cfg);
/* e's choice now. */
static inline const kt__choice *kt__tuned_choice(const kt__tuned *e) {
  return atomic_load_explicit(&((kt__tuned *)e)->now, memory_order_acquire);
}
void kt__tuned_free(void *entry);

typedef struct kt__report kt__report; /* report.h */

/* miss.c: the config for c's key when the table has none: from the cache,
** by tuning, or the fallback, as the mode and the stream allow. Serialised
** per kernel. *out is the entry made (valid until the kernel is freed), or
** NULL when cfg holds a config for this call only. A tuning is told to rep
** (NULL: nobody asked). */
kt_status kt__miss(kt_kernel *k, kt__call *c, const int64_t *key, uint64_t h, kt_stream stream, const kt_arg *args,
                   const kt__tuned **out, int64_t *cfg, kt__report *rep);

/* cached.c: the config row the cache has for key (canonical JSON), as
** kt__store_get_config returns it (the runtime must have a cache). */
kt_status kt__cached_json(kt_kernel *k, const char *key, char *json, size_t n, char *err, size_t errlen);
/* The same when it is valid for c (in the spec's space and within its
** constraints): 1 with cfg, else 0 (no cache, no row, or a row that does
** not fit). */
int kt__cached_config(kt_kernel *k, const kt__call *c, const char *key, int64_t *cfg);

/* standin.c: async mode's stand-in for c's key: the cached winner of the
** nearest key of the spec (1), else the fallback (0); from says which. */
int kt__standin(kt_kernel *k, const kt__call *c, const int64_t *key, const int64_t *fallback, int64_t *cfg,
                char *from, size_t n);

/* async.c: queue background work on entry's key (json) for the call c of
** args: a tuning (its inputs copied on stream now), one whose winner is
** then published to the other ranks (the key's owner), or the wait for the
** owner's config (the others). kt_runtime_wait_tuning waits for it;
** kt__async_stop (kt_runtime_close) cancels what is left. */
typedef enum kt__job_role { KT__JOB_TUNE, KT__JOB_TUNE_PUBLISH, KT__JOB_FOLLOW } kt__job_role;
kt_status kt__async_submit(kt_kernel *k, const kt__call *c, const char *json, const kt__tuned *entry, kt_stream stream,
                           const kt_arg *args, kt__job_role role);
uint64_t kt__async_pending(kt_runtime *rt);
void kt__async_stop(kt_runtime *rt);

/* coord.c: ranks agreeing on keys (kt_options.coord, size > 1). */
static inline int kt__coord_on(const kt_runtime *rt) { return rt->coord.size > 1; }
/* Whether this rank is the owner of the key (json): the one that settles it. */
int kt__coord_owns(const kt_kernel *k, const char *json);
/* The coordinator's timeout in ms, as fetch takes it (at most INT_MAX). */
int kt__coord_wait_ms(const kt_runtime *rt);
/* The owner tells the others what it settled for c's key: cfg (with its
** variant's cubin when built here), or, with cfg NULL, why it has none.
** Returns 1 with *took when the store already held another message for the
** key with a config (another runtime of this rank published first): the
** caller launches that config instead of cfg. A failure is logged and
** counted (0). */
int kt__coord_publish(kt_kernel *k, const kt__call *c, const char *json, const int64_t *cfg, const char *why,
                      int64_t *took);
/* Wait up to wait_ms for what the owner published: 0 with cfg (valid for
** c; its cubin adopted when one came), 1 when nothing came in time, -1 when
** the owner had no config or the exchange failed; why says what. */
int kt__coord_fetch(kt_kernel *k, const kt__call *c, const char *json, int wait_ms, int64_t *cfg, char *why,
                    size_t n);

/* record.c: append the call of args as a --shapes line to the runtime's
** record file, once per line per process. */
void kt__record(kt_kernel *k, const kt_arg *args);

/* launch.c: the config of a call (tuned table, miss path, fallback), set
** into c and checked; *hit is the table's choice it came from, or NULL.
** rep as for kt__miss. */
kt_status kt__call_plan(kt_kernel *k, kt__call *c, kt_stream stream, const kt_arg *args, int64_t *cfg,
                        const kt__choice **hit, kt__report *rep);

/* staging.c: a call whose written arg overlaps another, made as if out of
** place (kt_options.stage_aliased): _begin redirects those args to
** temporaries (sg->args is the call to launch), _end copies them into the
** caller's outputs when st is KT_OK and frees them; it returns st, or the
** error of the copy. Call _end after any _begin, whatever it returned. */
typedef struct kt__staging {
  kt_arg args[KT_MAX_PARAMS];
  kt__range r[KT_MAX_PARAMS];
  kt__dptr tmp[KT_MAX_PARAMS];
  int n;
} kt__staging;
kt_status kt__stage_begin(kt_kernel *k, const kt__call *c, const kt_arg *args, kt_stream stream, kt__staging *sg);
kt_status kt__stage_end(kt_kernel *k, kt__staging *sg, kt_stream stream, kt_status st);

#endif
