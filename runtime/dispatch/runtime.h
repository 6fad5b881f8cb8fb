/* The runtime and kernel handles, shared by the files of runtime/. */
#ifndef KT_RUNTIME_H
#define KT_RUNTIME_H

#include <pthread.h>
#include <stdatomic.h>

#include "device/driver.h"
#include "base/error.h"
#include "spec/key.h"
#include "base/lfmap.h"
#include "spec/spec.h"

struct kt_runtime {
  uint64_t id;
  kt__logger log;
  kt_mode mode;
  int have_device;
  void *ctx;
  kt__devinfo dev;
  char arch[16];
  int cc;                 /* 90 for sm_90 */
  char fingerprint[300];  /* "NAME/sm_XY/SMS": GPUs of one model share rows */
  char *cuda_home;
  char *cache_path;
  int no_cache;
  char *system_cache_path;
  struct kt_store *store; /* NULL when no cache is used */
  char cache_error[KT_ERRMAX]; /* why, when the cache could not be opened */
  int stage_aliased, miss_runs_default, retune, no_pdl;
  kt_strategy strategy;
  double budget_s;
  kt_progress_fn progress;
  void *progress_user;
  /* kt_runtime_stats(); launches and hits are counted per kernel, so that
  ** threads launching different kernels do not share a cache line. */
  atomic_uint_fast64_t n_miss, n_tune, n_trial, n_compile, n_cache_load, n_binary_load, n_fallback;
  atomic_uint_fast64_t tune_us, compile_us;
  pthread_mutex_t lock;   /* kernels */
  kt_kernel **kernels;
  int nkernels, capkernels;
};

typedef struct kt__variant kt__variant;

/* Compiled variants of one kernel, found without a lock on the launch path. */
typedef struct kt__vtable {
  kt__lfmap map;
  pthread_mutex_t lock;   /* inserts and compile completion */
  pthread_cond_t done;
} kt__vtable;

struct kt_kernel {
  kt_runtime *rt;
  kt__spec *spec;
  kt__vtable vt;
  int64_t builtins[KT__NBUILTINS];
  uint64_t uid;           /* never reused in a process: names the kernel in
                             per-thread launch plans */
  uint64_t variant_seed;  /* hash of source, arch and compile options */
  int pdl;                /* launched with programmatic stream serialization */
  char spec_hash[17];
  kt__keydef keydef;
  unsigned char *hit_checks; /* per constraint: must be checked on a hit */
  kt__lfmap tuned;        /* key -> config, read without a lock */
  pthread_mutex_t tune_lock; /* one miss at a time: cache lookups, tuning */
  atomic_int logged_capture, logged_cache_only;
  atomic_uint_fast64_t n_launch, n_hit;
  const char *opts[16];   /* NVRTC options, borrowed from optbuf/spec */
  int nopts;
  char optbuf[3][1100];
};

/* One call being prepared: the slot environment and resolved type vars. */
typedef struct kt__call {
  int64_t slots[KT_MAX_SLOTS];
  kt_dtype tvals[KT_MAX_PARAMS];
  const struct kt__tuned *hit; /* the table entry the config came from */
  const int64_t *sig;          /* kt_launch's signature of the call, or NULL */
} kt__call;

/* A tuned (or cached, or fallback) config for one key. */
typedef struct kt__tuned {
  uint64_t hash;          /* first: the lfmap's convention */
  int nkey;
  int64_t key[KT_MAX_KEY];
  int64_t cfg[64];
  /* The variant of the call that made the entry: a later call whose
  ** template values are the same (nearly always) skips the variant table. */
  int64_t vals[KT_MAX_TARGS];
  void *fn;
} kt__tuned;

/* tune.c: the config for c's key when the table has none: from the cache,
** by tuning, or the fallback, as the mode and the stream allow. Serialised
** per kernel; *out stays valid until the kernel is freed. */
kt_status kt__tune_miss(kt_kernel *k, kt__call *c, const int64_t *key, uint64_t h,
                        kt_stream stream, const kt_arg *args, const kt__tuned **out, int64_t *cfg);
void kt__tuned_free(void *entry);
/* The table's entry for a key, without a lock. */
const kt__tuned *kt__tuned_find(const kt_kernel *k, const int64_t *key, uint64_t h);

/* variant.c */
int kt__vtable_init(kt__vtable *vt);
void kt__vtable_free(kt__vtable *vt);
/* The variant for the template values of c (compiling it on first use).
** *fn is the function to launch. Thread-safe; waits while another thread
** compiles the same variant. */
kt_status kt__variant_get(kt_kernel *k, const kt__call *c, void **fn);
/* The template values of c, in the spec's order (ntargs of them). */
void kt__variant_vals(const kt_kernel *k, const kt__call *c, int64_t *vals);
/* The same, with the function's resource use. */
kt_status kt__variant_info(kt_kernel *k, const kt__call *c, void **fn, kt__funcattrs *attrs);
/* "rmsnorm_fwd T=bf16 BLOCK=256 VEC=4" (sep ' ') or with '.' for files. */
void kt__variant_name(const kt_kernel *k, const kt__call *c, char sep,
                      char *out, size_t n);

/* launch.c */
kt_status kt__call_bind(kt_kernel *k, const kt_arg *args, int nargs,
                        kt__call *c);
/* Set config values and evaluate derived constants and smem. */
kt_status kt__call_config(kt_kernel *k, kt__call *c, const int64_t *cfg);
/* The same when kt__call_key has evaluated the param-only constants. */
kt_status kt__call_config_keyed(kt_kernel *k, kt__call *c, const int64_t *cfg);
/* Index of the first constraint violated, or -1; KT_ERR_EVAL sets *bad to
** the failing constraint too. */
kt_status kt__call_check(kt_kernel *k, const kt__call *c, int *bad);
/* The default config, else the first of the space valid for this call. */
kt_status kt__call_fallback(kt_kernel *k, kt__call *c, int64_t *cfg);
/* Parse "BLOCK=256,VEC=4" (every field once, values in the space). */
kt_status kt__config_parse(kt_kernel *k, const char *text, int64_t *cfg);
/* Parse, set and check a config given as text. */
kt_status kt__call_forced(kt_kernel *k, kt__call *c, const char *config);
/* cfg as "BLOCK=256,VEC=4". */
void kt__config_format(const kt_kernel *k, const int64_t *cfg, char *buf, size_t n);
/* Launch c's variant with its config already set. Allocates nothing. */
kt_status kt__call_launch(kt_kernel *k, const kt__call *c, kt_stream stream,
                          const kt_arg *args);

/* bench.c: median and spread of c's launch in microseconds, launched on a
** private stream that first waits for `after` (may be NULL). prep, when
** not NULL, runs before each repetition outside the timed region (the
** tuner restores in-place inputs there). */
typedef struct kt__timer kt__timer;
/* A private stream, two events and an L2-flush buffer, made once and used
** for many measurements. */
kt_status kt__timer_new(kt_kernel *k, kt__timer **out);
void kt__timer_free(kt__timer *t);
double kt__now_ms(void);

typedef struct kt__benchopts {
  int min_reps;
  double min_ms, max_ms; /* of kernel time */
  double max_wall_ms;    /* of wall time, once min_reps are done: short
                            kernels spend most of it between repetitions */
  kt_stream after;
  kt_status (*prep)(void *user, kt_stream s);
  void *user;
  kt__timer *timer; /* NULL: one for this measurement */
  int max_burst;    /* > 1: kernels under 0.2 ms are timed as this many
                       back-to-back launches per repetition */
} kt__benchopts;
kt_status kt__bench(kt_kernel *k, const kt__call *c, const kt_arg *args, const kt__benchopts *o,
                    double *median_us, double *spread_us);
/* tune.c: KT_ERR_ALIAS when a spec that cannot run in place is called with
** a written arg overlapping another; KT_OK otherwise (always for in-place
** specs, without evaluating anything). */
kt_status kt__call_alias(kt_kernel *k, const kt__call *c, const kt_arg *args);
/* kt_launch of such a call through temporaries (kt_options.stage_aliased). */
kt_status kt__launch_staged(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs);
/* launch.c: the config of a call (tuned table, miss path, fallback), set
** into c and checked. */
kt_status kt__call_plan(kt_kernel *k, kt__call *c, kt_stream stream, const kt_arg *args, int64_t *cfg);
/* launch.c: evaluate param-only derived constants and build the key. */
kt_status kt__call_key(kt_kernel *k, kt__call *c, int64_t *key);

#endif
