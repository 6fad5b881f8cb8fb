/* ktune: an autotuning GPU kernel runtime.
**
** Kernels are CUDA C++ sources described by JSON specs. ktune compiles one
** module per combination of compile-time constants (a "variant") through
** NVRTC, launches through the CUDA driver API, and, on the first call with a
** tuning key it has not seen, benchmarks the candidate configs on scratch
** copies of the caller's buffers (or, where the spec gives a size the key
** ignores a "tune_at", on inputs of that size it makes) and remembers the
** winner in SQLite.
**
** Conventions used throughout this header:
** - Every call returns a kt_status; KT_OK is zero. Details of the last failure
**   are in kt_errmsg(rt).
** - A NULL handle, a NULL pointer a call needs or an index out of range is
**   KT_ERR_INVALID, said as "kt_fn: what is wrong" ("kt_kernel_key: buf is
**   NULL or bufsize is 0") on the handle's runtime, or on kt_errmsg(NULL)
**   where the call was given no runtime or kernel.
** - Ownership is stated with three phrases: "borrowed; valid until X",
**   "caller owns; free with kt_free()", "copied; the caller may free it at once".
** - Destructors accept NULL and do nothing then.
** - The library never aborts. It reports through a log callback that the
**   embedder can replace (default: stderr, level from $KTUNE_LOG, else warn).
*/
#ifndef KTUNE_H
#define KTUNE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KT_VERSION_MAJOR 0
#define KT_VERSION_MINOR 1
#define KT_VERSION_PATCH 0
#define KT_VERSION_NUMBER \
  (KT_VERSION_MAJOR * 10000 + KT_VERSION_MINOR * 100 + KT_VERSION_PATCH)
#define KT_VERSION_STRING "0.1.0"

#if defined(KT_BUILDING_LIBRARY)
#define KT_API __attribute__((visibility("default")))
#else
#define KT_API
#endif

/* Opaque handles. A runtime owns everything made through it. */
typedef struct kt_runtime kt_runtime;
typedef struct kt_kernel kt_kernel;

/* A CUDA stream (CUstream) passed through as is; NULL is the legacy default
** stream. ktune never creates work on a stream other than the one it is given,
** except its own private stream during tuning. */
typedef void *kt_stream;

/* Status codes. Codes are append-only: a code keeps its number forever. */
#define KT_STATUS_MAP(X)                                                        \
  X(OK, 0, "success")                                                           \
  X(ERR_INVALID, 1, "invalid argument")                                         \
  X(ERR_NOMEM, 2, "out of memory")                                              \
  X(ERR_IO, 3, "file I/O failed")                                               \
  X(ERR_SPEC, 4, "invalid kernel spec")                                         \
  X(ERR_EVAL, 5, "expression evaluation failed")                                \
  X(ERR_NO_DRIVER, 6, "CUDA driver not available")                              \
  X(ERR_NO_DEVICE, 7, "no CUDA device")                                         \
  X(ERR_CUDA, 8, "CUDA driver call failed")                                     \
  X(ERR_NO_NVRTC, 9, "NVRTC not available")                                     \
  X(ERR_COMPILE, 10, "kernel compilation failed")                               \
  X(ERR_ARGS, 11, "arguments do not match the kernel spec")                     \
  X(ERR_CONSTRAINT, 12, "config violates the spec's constraints")               \
  X(ERR_ALIAS, 13, "output aliases an input of a kernel that cannot run in place") \
  X(ERR_DEVICE_FAULT, 14, "device fault; the CUDA context is unusable")         \
  X(ERR_CACHE, 15, "config cache error")                                        \
  X(ERR_NOT_FOUND, 16, "not found")                                             \
  X(ERR_READONLY, 17, "cache is read-only")                                     \
  X(ERR_NO_CONFIG, 18, "no valid config for this call")                         \
  X(ERR_CAPTURING, 19, "stream is capturing")                                  \
  X(ERR_TIMEOUT, 20, "timed out")                                               \
  X(ERR_CANCELLED, 21, "cancelled")

typedef enum kt_status {
#define KT__STATUS_ENUM(name, code, text) KT_##name = code,
  KT_STATUS_MAP(KT__STATUS_ENUM)
#undef KT__STATUS_ENUM
} kt_status;

/* "KT_ERR_SPEC" for KT_ERR_SPEC; "KT_UNKNOWN" for a code this version does
** not know. Static strings. */
KT_API const char *kt_status_name(kt_status s);
/* A sentence describing the status; "unknown status" when unknown. Static. */
KT_API const char *kt_status_str(kt_status s);

/* The library's version as "MAJOR.MINOR.PATCH" (static) and as a number. */
KT_API const char *kt_libversion(void);
KT_API int kt_libversion_number(void);

/* Element types of pointer params. Codes are append-only. */
typedef enum kt_dtype {
  KT_DTYPE_NONE = 0,
  KT_F32 = 1,
  KT_F16 = 2,
  KT_BF16 = 3,
  KT_F64 = 4,
  KT_I32 = 5,
  KT_I64 = 6,
  KT_U8 = 7,
  KT_I8 = 8,
  KT_I16 = 9,
  KT_U32 = 10
} kt_dtype;

/* "f32", "bf16", ...; NULL for an unknown code. Static strings. */
KT_API const char *kt_dtype_name(kt_dtype t);
/* Size in bytes of one element; 0 for an unknown code. */
KT_API size_t kt_dtype_size(kt_dtype t);
/* Parse "f32", "bf16", ... Returns KT_OK or KT_ERR_INVALID. */
KT_API kt_status kt_dtype_parse(const char *name, kt_dtype *out /* OUT */);
/* Element i of a host array of dtype t, written from or read as a double:
** bf16 and f16 rounded to nearest even (NaN and infinities kept), integers
** truncated. For host-side inputs and references. */
KT_API void kt_dtype_store(kt_dtype t, void *dst, size_t i, double v);
KT_API double kt_dtype_load(kt_dtype t, const void *src, size_t i);

/* One launch argument. Arguments are passed as an array in the spec's param
** order. Pointer arguments carry their element type so that the variant and
** the tuning key can depend on it; an optional pointer may be 0, and so may
** any pointer whose extent is 0 elements for the call (torch and XLA give a
** tensor of no elements a null address). */
typedef enum kt_arg_kind {
  KT_ARG_PTR = 1,
  KT_ARG_I32 = 2,
  KT_ARG_I64 = 3,
  KT_ARG_F32 = 4
} kt_arg_kind;

typedef struct kt_arg {
  kt_arg_kind kind;
  kt_dtype dtype; /* element type, for KT_ARG_PTR only */
  union {
    uint64_t ptr; /* a CUdeviceptr, aligned to its dtype's size (a call
                     with one that is not is KT_ERR_ARGS: its loads
                     would fault) */
    int32_t i32;
    int64_t i64;
    float f32;
  } v;
} kt_arg;

static inline kt_arg kt_arg_ptr(uint64_t devptr, kt_dtype dtype) {
  kt_arg a;
  a.kind = KT_ARG_PTR;
  a.dtype = dtype;
  a.v.ptr = devptr;
  return a;
}
static inline kt_arg kt_arg_i32(int32_t x) {
  kt_arg a;
  a.kind = KT_ARG_I32;
  a.dtype = KT_DTYPE_NONE;
  a.v.i64 = 0;
  a.v.i32 = x;
  return a;
}
static inline kt_arg kt_arg_i64(int64_t x) {
  kt_arg a;
  a.kind = KT_ARG_I64;
  a.dtype = KT_DTYPE_NONE;
  a.v.i64 = x;
  return a;
}
static inline kt_arg kt_arg_f32(float x) {
  kt_arg a;
  a.kind = KT_ARG_F32;
  a.dtype = KT_DTYPE_NONE;
  a.v.i64 = 0;
  a.v.f32 = x;
  return a;
}

typedef enum kt_log_level {
  KT_LOG_ERROR = 0,
  KT_LOG_WARN = 1,
  KT_LOG_INFO = 2,
  KT_LOG_DEBUG = 3
} kt_log_level;

/* A log sink. msg is borrowed; valid until the callback returns. Called from
** any thread that uses the runtime, so it must be thread-safe. msg ends
** without a newline but may quote text as it came (a path, a cached
** config, NVRTC's log), control characters and newlines included: the
** default sink writes them as \xNN, and a sink that writes to a terminal
** should too (kt_text_visible). msg is UTF-8: a quoted byte that is not is
** written \xNN.
** Callbacks that the runtime calls from inside its work (this one,
** kt_progress_fn, a kt_coordinator's publish and fetch) run while it may
** hold its locks: from one, a call that would take them (a launch past a
** table hit, a tuning or a lookup, a config_for, loading a kernel, timing,
** compiling, linting, the kt_cache_ calls, waiting for or stopping the
** tuner, closing the runtime) returns KT_ERR_INVALID saying so, where it
** would deadlock, whichever runtime it is for: some of the locks held then
** are the process's (the NVRTC helpers' pool logs under its own). Calls
** that take no lock (kt_errmsg, kt_kernel_key, the getters,
** kt_text_visible) are answered. */
typedef void (*kt_log_fn)(void *user, kt_log_level level, const char *msg);

/* What kt_text_visible writes as \xNN, besides the bytes of a malformed
** UTF-8 sequence (an overlong form, a surrogate, past U+10FFFF, cut). */
typedef enum kt_text_flag {
  KT_TEXT_CONTROLS = 1, /* each byte of a control character too: C0, DEL,
                           C1 (U+0080 to U+009F; U+009B starts a terminal's
                           escape sequence), and those that move text on a
                           terminal (U+061C, U+200E, U+200F, U+2028 to
                           U+202E, U+2066 to U+2069) */
  KT_TEXT_JSON = 2      /* the escape as \\xNN, for text inside a JSON
                           string (whose reader makes it \xNN again) */
} kt_text_flag;

/* s as a terminal or a JSON file may show it: copied into buf (n bytes;
** always terminated when n > 0, cut before a character or an escape that
** would not fit), each byte that flags (kt_text_flag, or-ed) name written
** as \xNN. A buf of 4 * strlen(s) + 1 bytes (5 * with KT_TEXT_JSON) holds
** any s whole. buf may be NULL with n 0, to count only. Returns how many
** bytes of s were (or would be) escaped: 0 when s shows as it is. The
** library's own messages, rows and log lines are UTF-8 already (they need
** no more than KT_TEXT_CONTROLS before a terminal). s NULL reads as "". */
KT_API size_t kt_text_visible(const char *s, unsigned flags, char *buf, size_t n);

/* Progress of a long operation, for a tool's display. A tuning: kernel
** name and key (JSON), candidates measured so far of those it will
** measure, the best time so far in microseconds (0 before the first),
** called on the tuning thread. Compiling ahead of use: key "compiling",
** variants done of total, best_us -1, called from the compiling threads.
** Strings borrowed; valid until the callback returns. What it may call
** back: as kt_log_fn says. */
typedef void (*kt_progress_fn)(void *user, const char *kernel, const char *key, int done, int total,
                               double best_us);

/* How a tuning picks the candidates it measures. */
typedef enum kt_strategy {
  KT_STRATEGY_AUTO = 0,       /* exhaustive up to 256 candidates, else random */
  KT_STRATEGY_EXHAUSTIVE = 1, /* every config the constraints allow */
  KT_STRATEGY_RANDOM = 2,     /* a seeded random order, in batches, until the
                                 budget (default 10 s) is spent; first the
                                 configs the kernel's other keys on this
                                 device chose (the user cache's) */
  KT_STRATEGY_LOCAL = 3       /* from the default config, to the best config
                                 at most one step away in each field, until
                                 none is better; where it stalls, a batch in
                                 the random order, and on from the best
                                 measured; it ends at the first batch that
                                 finds nothing better (or the budget) */
} kt_strategy;

/* What became of one candidate config in a tuning: the status column of
** the cache's trials table holds the name. Codes are append-only. */
#define KT_TRIAL_MAP(X)                                                         \
  X(OK, 0, "ok")                       /* valid, and timed */                   \
  X(MISMATCH, 1, "mismatch")           /* outputs differ from the reference */  \
  X(OOB_WRITE, 2, "oob_write")         /* wrote outside its buffers */          \
  X(FAULT, 3, "fault")                 /* a device fault; quarantined */        \
  X(COMPILE_ERROR, 4, "compile_error") /* NVRTC refused it */                   \
  X(RESOURCES, 5, "resources")         /* does not fit the device */            \
  X(TIMEOUT, 6, "timeout")             /* hung; quarantined */                  \
  X(PRUNED, 7, "pruned")               /* not compiled: predicted to lose */

typedef enum kt_trial_status {
#define KT__TRIAL_ENUM(name, code, text) KT_TRIAL_##name = code,
  KT_TRIAL_MAP(KT__TRIAL_ENUM)
#undef KT__TRIAL_ENUM
} kt_trial_status;

/* "mismatch" for KT_TRIAL_MISMATCH; NULL for a code this version does not
** know. Static strings. */
KT_API const char *kt_trial_status_name(kt_trial_status s);
/* Parse a name; KT_OK or KT_ERR_INVALID. */
KT_API kt_status kt_trial_status_parse(const char *name, kt_trial_status *out /* OUT */);

/* What kt_kernel_tune found or did for a key. Codes are append-only. */
typedef enum kt_tune_outcome {
  KT_TUNE_CACHED = 0,      /* the cache had a valid config: nothing measured */
  KT_TUNE_KNOWN = 1,       /* this process had settled the key before, without
                              a cache row (a local winner, the default) */
  KT_TUNE_TUNED = 2,       /* tuned now; the winner is stored when the cache
                              is writable */
  KT_TUNE_TUNED_LOCAL = 3, /* tuned now, but some rejections happened only on
                              this call's data: the winner serves this process,
                              nothing of it is stored */
  KT_TUNE_UNSTABLE = 4,    /* the default config gave different results in two
                              runs: nothing judged, the default used, nothing
                              stored */
  KT_TUNE_NO_VALID = 5,    /* every candidate was rejected: the default used,
                              nothing stored */
  KT_TUNE_NOT_TUNED = 6    /* the mode (or a capturing stream) allowed no
                              tuning and the cache had nothing: the default */
} kt_tune_outcome;

/* One candidate config of a tuning, as a kt_tune_report lists it. Strings
** borrowed from the report. */
typedef struct kt_candidate {
  const char *config;          /* canonical JSON: {"BLOCK":128,"VEC":8} */
  kt_trial_status status;
  int measured;                /* 1: measured by this call; 0: the result of an
                                  earlier tuning, from the cache, or pruned */
  int quarantined;             /* not run: it faulted or hung for this key */
  int stored;                  /* its result is in the cache (0: a rejection
                                  only this call's data caused, a compile
                                  that failed for a cause other than NVRTC
                                  refusing the source, or no cache) */
  double median_us, spread_us; /* when status is KT_TRIAL_OK; else -1 */
  const char *detail;          /* why it was rejected; "" when ok */
} kt_candidate;

/* What kt_kernel_tune did, as data. Strings borrowed from the report. */
typedef struct kt_tune_report {
  kt_tune_outcome outcome;
  const char *kernel;
  const char *key;             /* canonical JSON, as the cache stores it */
  const char *config;          /* the config calls of this key use now */
  const char *default_config;  /* the spec's default for this call */
  double time_us;              /* config's median, or -1 when unknown;
                                  at the sizes of the spec's tune_at, where
                                  it gives one (docs/tuning.md) */
  double default_us;           /* the default's median, or -1; the same */
  int tried, rejected;         /* candidates decided, and of them rejected */
  int ncandidates;
  const kt_candidate *candidates; /* every candidate the constraints allow
                                     for the call, in config-space order;
                                     status -1 for those never decided */
  double seconds;              /* the call's wall time */
  const char *timed_at;        /* where the spec's tune_at moves a size the
                                  key leaves out, the sizes time_us and
                                  default_us are timed at, as "N=16778 (the
                                  call's N=1)": where this call's tuning
                                  timed them, else where a tuning of this
                                  call would; NULL where at the call's own */
} kt_tune_report;

/* What a launch does on a tuning key it has never seen. */
typedef enum kt_mode {
  KT_MODE_DEFAULT = 0,    /* $KTUNE_MODE if set, else KT_MODE_TUNE */
  KT_MODE_TUNE = 1,       /* tune, store the winner, launch it */
  KT_MODE_CACHE_ONLY = 2, /* use a cached config, else the default config */
  KT_MODE_OFF = 3,        /* always the default config; the cache is not read */
  KT_MODE_ASYNC = 4       /* never wait for a tuning: a miss launches at once
                             with a stand-in (the cached winner of the nearest
                             key of the spec, else the default) and the key is
                             tuned on a background thread, on copies of the
                             call's inputs (none where the key is timed at
                             its tune_at sizes, on inputs the tuner makes);
                             the winner replaces the stand-in for later
                             launches (docs/tuning.md) */
} kt_mode;

/* How the ranks of a job agree on tunings, through the distributed engine
** the job already runs (torch.distributed's store, jax.distributed's
** key-value client, MPI): see docs/embedding.md. On a miss, one rank, the
** key's owner (a hash of the kernel, spec, device fingerprint and key,
** modulo size), settles the key as it would alone (its cache, else a
** tuning) and publishes the config and, when it has one, the cubin; every
** other rank waits for that and launches the same config, its cubin loaded
** when the owner sent one. An owner that finds the key's message published
** already (by another runtime of its rank: a process with several GPUs of
** one model) follows it; so does one whose publish the store refuses
** because another runtime of its rank published the name meanwhile. An
** owner whose tuning fails publishes why. A
** rank that waits longer than timeout_s, or whose publish or fetch fails,
** uses its cached config or the default, with a warning; it never hangs.
** In blocking modes the ranks must miss keys in the same order (as
** data-parallel ranks do) or they wait for each other until timeout_s; in
** async mode the waiting happens on the background tuner. publish and fetch
** may be called from any thread, including async mode's tuner, and may call
** back into ktune only as kt_log_fn says. The bytes come from ranks of the
** same job and are trusted as the process's own. */
typedef struct kt_coordinator {
  int rank;            /* this process's rank, 0 <= rank < size */
  int size;            /* ranks in the job; 0 or 1: no coordination */
  double timeout_s;    /* the longest a rank waits for an owner; 0: 300;
                          above INT_MAX ms (INFINITY, say) fetch gets
                          INT_MAX ms, 24 days */
  void *user;          /* passed to publish and fetch */
  /* Make len bytes visible to every rank under name (one name per key; a
  ** runtime publishes a name once, but several runtimes of one rank may
  ** publish the same name). The store must keep a name's first message:
  ** one that overwrites it would let ranks that fetched before and after
  ** run different configs. 0: done, or the name holds these very bytes;
  ** nonzero: failed, or the name holds other bytes (the runtime then
  ** fetches them and follows their config). */
  int (*publish)(void *user, const char *name, const void *bytes, size_t len);
  /* Wait up to timeout_ms for name. 0: found, its full length in *len and
  ** its first min(*len, cap) bytes in buf (the runtime calls again with a
  ** larger buffer when *len > cap); 1: not published within timeout_ms;
  ** anything else: failed. */
  int (*fetch)(void *user, const char *name, void *buf, size_t cap, size_t *len, int timeout_ms);
} kt_coordinator;

/* Options for kt_runtime_open(). Initialise with kt_options_init() so that
** fields added later get their defaults. */
typedef struct kt_options {
  size_t size;            /* sizeof(kt_options), set by kt_options_init() */
  int device;             /* CUDA device ordinal; default 0 */
  int no_device;          /* nonzero: never load the CUDA driver (compile and
                             cache work only; arch must then be given) */
  const char *arch;       /* "sm_90", "sm_90a" or "sm_100f"; NULL: the device's.
                             Copied. One older than the NVRTC found
                             compiles for, between the archs it lists, or
                             with a suffix it refuses (sm_90f) fails
                             kt_runtime_open (KT_ERR_INVALID); one newer
                             than all is compiled to PTX */
  const char *cuda_home;  /* toolkit root for NVRTC includes; NULL:
                             $CUDA_HOME, else /usr/local/cuda. Copied. */
  const char *cache_path; /* config cache file; NULL: $KTUNE_CACHE, else
                             $XDG_CACHE_HOME/ktune/ktune.db, else
                             ~/.cache/ktune/ktune.db (docs/cache.md). Copied. */
  int no_cache;           /* nonzero: keep tunings in memory only */
  kt_mode mode;           /* see kt_mode */
  kt_log_fn log;          /* NULL: the default stderr sink */
  void *log_user;         /* passed to log */
  int log_level;          /* messages above this level are dropped; -1: from
                             $KTUNE_LOG (error|warn|info|debug), else warn;
                             another value is KT_ERR_INVALID */
  const char *system_cache_path; /* read-only cache consulted after the
                             user's (e.g. shipped with a model); NULL:
                             $KTUNE_SYSTEM_CACHE. Never written. Copied. */
  int stage_aliased;      /* nonzero: a kernel whose spec cannot run in place,
                             called with an output overlapping an input, writes
                             to a stream-ordered temporary that is then copied
                             into the output; zero: such a call returns
                             KT_ERR_ALIAS */
  int miss_runs_default;  /* nonzero: a thread that misses a key while
                             another thread of this kernel is tuning launches
                             the default config instead of waiting */
  kt_progress_fn progress; /* NULL, or called after each trial of a tuning,
                             and by kt_kernel_compile_all/_for and
                             kt_kernel_lint (key "compiling": variants done
                             of total, first with 0, from several threads) */
  void *progress_user;    /* passed to progress */
  int retune;             /* nonzero: a key missed by this runtime is tuned
                             again even when the cache has its config (earlier
                             trials are measured again; quarantined configs
                             stay out) */
  kt_strategy strategy;   /* which candidates a tuning measures */
  double budget_s;        /* > 0: a tuning stops starting trials after this
                             many seconds (the best so far wins); 0: the
                             strategy's own (random: 10 s; exhaustive and
                             local: none) */
  int no_pdl;             /* nonzero: never launch early. By default a kernel
                             whose spec sets options.pdl starts on sm_90+
                             while the kernel before it in the stream drains
                             (programmatic dependent launch) and waits in its
                             first instructions for that kernel's results */
  int cache_readonly;     /* nonzero: open the cache for reading only: an
                             existing file, never created, changed or
                             converted; a missing one leaves the runtime
                             without a cache (kt_runtime_get_info says why;
                             the log says so at info, not warn) */
  size_t async_copy_limit; /* async mode: the most bytes a miss copies of the
                             call's inputs for its background tuning; a call
                             with more is tuned on inputs made from the spec's
                             "init" instead. 0: 512 MiB */
  kt_coordinator coord;   /* ranks that agree on tunings; size 0: none.
                             Copied; user must outlive the runtime */
  const char *record_path; /* append one --shapes line (JSON) per key missed
                             that the cache does not have, once per key per
                             process, for ktune tune --shapes; NULL:
                             $KTUNE_RECORD, else none. Copied; a relative
                             path is taken from the working directory of
                             kt_runtime_open, as cache_path is */
  int no_prune;           /* nonzero: a tuning compiles and measures every
                             candidate; zero: a candidate is not compiled
                             when a field value it has lost by 10% or more
                             in the 6 or more candidates measured with it,
                             and in 2 or more beside each of its other
                             values (docs/tuning.md, "Pruning") */
  int cache_required;     /* nonzero: a cache (the user's; a system cache
                             that cannot be read is still left out with a
                             warning) that cannot be opened as asked
                             (to be written: made where missing, and one that
                             would be read-only, not writable, with a foreign
                             -wal or -shm or a newer schema, refused; with
                             cache_readonly: an existing file, read) fails
                             kt_runtime_open with KT_ERR_CACHE and the reason,
                             creating nothing, where by default the runtime
                             runs without one, or reads one, and logs why.
                             With no_cache, KT_ERR_INVALID */
} kt_options;

/* Fill o with defaults: sizeof(kt_options) of this version of the library
** bytes are written, whatever the caller's header declared (a binding that
** declares the struct itself fills a buffer at least that large, then
** copies what it knows). Always KT_OK unless o is NULL (KT_ERR_INVALID). */
KT_API kt_status kt_options_init(kt_options *o);

/* Open a runtime for one device. On failure *out is still set when a handle
** could be made, so that kt_errmsg() can say why; close it in any case. The
** cache file is opened (and made, where there is none) last: an open that
** fails before it makes none.
** Returns KT_OK, KT_ERR_NO_DRIVER (libcuda.so.1 missing), KT_ERR_NO_DEVICE,
** KT_ERR_CUDA, KT_ERR_CACHE (cache_required), KT_ERR_INVALID or KT_ERR_NOMEM.
** Thread-safe. Caller owns *out; free with kt_runtime_close(). */
KT_API kt_status kt_runtime_open(kt_runtime **out /* OUT */,
                                 const kt_options *opts /* NULL: defaults */);

/* Free a runtime and every kernel loaded through it. Work already queued on
** streams is not waited for; the caller synchronises first. Accepts NULL.
** From inside a callback of one of its calls (a log line, a listed row, a
** lint message, a compile report, ...), which still uses the runtime, it
** returns KT_ERR_INVALID and frees nothing: close it once that call has
** returned. kt_runtime_wait_tuning and kt_runtime_stop_tuning refuse such
** a thread too: the tuner may be waiting for what the call holds. */
KT_API kt_status kt_runtime_close(kt_runtime *rt);

/* The last error message of this runtime in the calling thread: "" when
** none. Borrowed; valid until the next call on rt from this thread. Never
** NULL; kt_errmsg(NULL) explains why a runtime could not be made, or why a
** call given a NULL runtime or kernel failed. UTF-8, as kt_log_fn's msg. */
KT_API const char *kt_errmsg(const kt_runtime *rt);

/* The device this runtime targets, as "sm_90", and its name ("NVIDIA H100
** 80GB HBM3", or "" when no device is used). Borrowed; valid until
** kt_runtime_close(). */
KT_API const char *kt_runtime_arch(const kt_runtime *rt);
KT_API const char *kt_runtime_device_name(const kt_runtime *rt);

/* The mode in effect: kt_options' mode, or where that was KT_MODE_DEFAULT
** the one $KTUNE_MODE named when the runtime was opened (KT_MODE_TUNE
** where it was unset or not a mode); never KT_MODE_DEFAULT. A binding asks
** here instead of reading $KTUNE_MODE again. KT_MODE_DEFAULT for NULL. */
KT_API kt_mode kt_runtime_mode(const kt_runtime *rt);

/* What a runtime runs on, for tools and logs. Strings borrowed; valid until
** kt_runtime_close(). Fields of a runtime without a device are "" or 0.
** Set size to sizeof(kt_runtime_info) before the call (fields are only ever
** appended). */
typedef struct kt_runtime_info {
  size_t size;
  const char *device_name;
  const char *arch;        /* "sm_90" */
  const char *fingerprint; /* "NAME/sm_XY/SMS": the cache's device column */
  int num_sms;
  int l2_bytes;
  int smem_per_block_optin;
  int driver_version;      /* e.g. 13000 */
  int nvrtc_version;       /* e.g. 13000; 0 when NVRTC cannot be loaded */
  const char *cache_path;  /* "" without a cache */
  const char *cache_error; /* why there is no cache, or ""; UTF-8 */
  const char *cache_file;  /* the user cache's file as asked for (cache_path
                              where not empty, else $KTUNE_CACHE, else the
                              default), also where none opened or none is
                              there yet; as given, not made absolute (a
                              relative one is from kt_runtime_open's working
                              directory); "" with no_cache or where no path
                              resolves. Appended in the second version */
} kt_runtime_info;
/* Fill *out, up to out->size bytes (out->size then says how many): a
** caller built against an older header gets the fields it knows, and one
** built against a newer header nothing past this one's. Returns KT_OK or
** KT_ERR_INVALID (NULL, or out->size smaller than the first version's
** struct). */
KT_API kt_status kt_runtime_get_info(kt_runtime *rt, kt_runtime_info *out /* OUT */);

/* The number of CUDA devices; KT_ERR_NO_DRIVER (with the reason in
** kt_errmsg(NULL)) when the driver cannot be loaded. */
KT_API kt_status kt_device_count(int *out /* OUT */);

/* Counters since kt_runtime_open(), for a backend's metrics. Set size to
** sizeof(kt_stats) before the call (fields are only ever appended). */
typedef struct kt_stats {
  size_t size;
  uint64_t launches;     /* kernels launched (kt_launch, kt_launch_config) */
  uint64_t hits;         /* launches whose config came from the in-memory
                            table without a lookup elsewhere */
  uint64_t misses;       /* calls whose key was not in that table */
  uint64_t tunings;      /* keys benchmarked */
  uint64_t trials;       /* candidate configs run during tunings */
  double tuning_ms;      /* wall time spent benchmarking, compiles included */
  uint64_t compiles;     /* variants compiled by NVRTC */
  double compile_ms;     /* NVRTC time summed over compiles (some ran in
                            parallel, so it can exceed wall time) */
  uint64_t cache_loads;  /* configs found in the SQLite cache */
  uint64_t binary_loads; /* cubins read from the cache instead of compiled */
  uint64_t fallbacks;    /* misses answered with the default config: during
                            a capture, in cache-only mode, out of memory,
                            or while another thread tuned */
  uint64_t standins;     /* async mode: misses launched with a stand-in */
  uint64_t async_queued; /* keys queued for a background tuning */
  uint64_t async_done;   /* of them, tuned and their stand-in replaced */
  uint64_t async_failed; /* of them, not tuned (the log says why) */
  uint64_t async_pending;/* queued or running now */
  uint64_t published;    /* keys this rank settled and published to the
                            others (kt_options.coord) */
  uint64_t followed;     /* keys whose config came from their owner */
  uint64_t coord_failed; /* keys whose owner did not answer in time, or
                            whose exchange failed (the log says why) */
} kt_stats;

/* Fill *out (see kt_stats), up to out->size bytes: a caller built against
** an older header gets the fields it knows. Thread-safe; reads counters
** without stopping launches, so fields may be a few launches apart.
** Returns KT_OK or KT_ERR_INVALID (NULL, or out->size smaller than the
** first version's struct). */
KT_API kt_status kt_runtime_stats(kt_runtime *rt, kt_stats *out /* OUT */);

/* Wait until the background tuner of async mode has nothing queued or
** running, or timeout_s seconds pass (< 0: no limit). For tests and
** benchmarks; a server never needs it. Returns KT_OK (also in the other
** modes, at once), KT_ERR_TIMEOUT or KT_ERR_INVALID (NULL, a NaN timeout,
** or called from a callback of one of the runtime's calls: see
** kt_runtime_close). */
KT_API kt_status kt_runtime_wait_tuning(kt_runtime *rt, double timeout_s);

/* Stop tuning in this runtime for good, and return once the background
** tuner's thread has ended: what it has queued is dropped, a running
** tuning stops before its next trial or compile, and nothing of either is
** stored. Launches go on: a key without a config keeps its stand-in, a
** miss from now on runs untuned (async mode: a stand-in, not queued, with
** KT_ERR_CANCELLED logged; tune mode: the cached config or the default,
** as in cache-only mode), and kt_kernel_tune returns KT_ERR_CANCELLED.
** For a process about to exit: a compile or trial still running while
** the C library and the libraries loaded tear down can crash the exit
** (the Python package calls it when the interpreter exits). Thread-safe.
** In a child forked after the tuner started, the tuner is the parent's:
** this call and kt_runtime_wait_tuning return at once there, a miss
** queues nothing, and the child's exit does not wait for the tuner.
** Returns KT_OK, or KT_ERR_INVALID (NULL, or called from a callback of one
** of the runtime's calls: see kt_runtime_close). */
KT_API kt_status kt_runtime_stop_tuning(kt_runtime *rt);

/* Load a kernel spec and prepare it for launching. The spec file and its
** source are read and parsed now; variants are compiled on first use.
** Loading the same path twice gives two independent kernels.
** Returns KT_OK, KT_ERR_SPEC (message names file, field and column),
** KT_ERR_IO or KT_ERR_NOMEM. Thread-safe. The kernel is borrowed; valid until
** kt_runtime_close(). */
KT_API kt_status kt_kernel_load(kt_runtime *rt, const char *spec_path,
                                kt_kernel **out /* OUT */);

/* The spec's kernel name. Borrowed; valid until kt_runtime_close(). */
KT_API const char *kt_kernel_name(const kt_kernel *k);

/* Launch with the config chosen for this call's tuning key (tuned, cached or
** the default, as the runtime's mode says). args follow the spec's param
** order; nargs must equal the number of params. A call that writes no byte
** (every written arg's extent 0, a batch of no rows) launches nothing and
** tunes nothing: KT_OK. So does a call the default config launches no
** program for (a grid of 0, as N = 0 gives where the grid follows N): no
** config of its key is settled, so the key's first call with work tunes it.
** Returns KT_OK, KT_ERR_ARGS, KT_ERR_EVAL, KT_ERR_COMPILE, KT_ERR_CUDA,
** KT_ERR_NO_CONFIG, KT_ERR_ALIAS, KT_ERR_DEVICE_FAULT.
** Thread-safe; args is borrowed for the call only. */
KT_API kt_status kt_launch(kt_kernel *k, kt_stream stream, const kt_arg *args,
                           int nargs);

/* Launch with a config forced by the caller, as "BLOCK=256,VEC=4" (spaces
** and tabs around a name or a value are not part of it) or as JSON
** ({"BLOCK":256,"VEC":4}, as the cache and reports write it): every
** tunable field of the spec, each once. The config must lie in the spec's
** space and satisfy its constraints for this call (KT_ERR_CONSTRAINT names
** the first one violated), and the args the alias rules of kt_launch
** (KT_ERR_ALIAS, or staged with kt_options.stage_aliased). The string is
** parsed on every call.
** Thread-safe; args and config are borrowed for the call only. */
KT_API kt_status kt_launch_config(kt_kernel *k, kt_stream stream,
                                  const kt_arg *args, int nargs,
                                  const char *config);

/* Settle the tuning key of a call as kt_launch would (the cache, else a
** tuning when the mode allows one), without launching on the caller's
** buffers, and say what happened as data: outcome, winner, each candidate's
** status, time and reason. Caller owns *out; free with
** kt_tune_report_free(). *out is set on KT_OK and on KT_ERR_DEVICE_FAULT
** (the faulted candidate is marked). Returns what kt_launch returns, or
** KT_ERR_INVALID ("... nothing to time: the call launches no program ...")
** where the default config launches no program at the sizes the key would
** be timed at: launches of nothing cannot tell configs apart, and a winner
** picked from them would serve every size the key leaves out. */
KT_API kt_status kt_kernel_tune(kt_kernel *k, const kt_arg *args, int nargs,
                                kt_tune_report **out /* OUT */);
/* kt_kernel_tune of a call given by its shape alone: as for
** kt_kernel_lookup only the args' scalars and the placement of their
** pointers are read, so a program may pass made-up addresses (no two
** params' ranges overlapping where the call's do not). The tuning times
** inputs it makes from the spec's "init": at the sizes of the spec's
** tune_at where it gives them, so a long call's tuning never makes
** buffers as large as the call's, else at the call's own. What ktune tune
** pre-warms a cache with. Caller owns *out; free with
** kt_tune_report_free(). Returns what kt_kernel_tune returns. */
KT_API kt_status kt_kernel_tune_shape(kt_kernel *k, const kt_arg *args, int nargs,
                                      kt_tune_report **out /* OUT */);
/* What is known of a call's key without tuning or touching any buffer
** (only the args' scalars and the placement of their pointers are read,
** so a program may pass made-up addresses): KT_TUNE_KNOWN with the config
** this process uses, KT_TUNE_CACHED with the cache's row and trials, or
** KT_TUNE_NOT_TUNED with the default. Needs no device. Caller owns *out;
** free with kt_tune_report_free(). Returns KT_OK, KT_ERR_ARGS,
** KT_ERR_ALIAS, KT_ERR_EVAL, KT_ERR_INVALID or KT_ERR_NOMEM. */
KT_API kt_status kt_kernel_lookup(kt_kernel *k, const kt_arg *args, int nargs,
                                  kt_tune_report **out /* OUT */);
/* Accepts NULL. */
KT_API void kt_tune_report_free(kt_tune_report *r);

/* Bytes that hold any tuning key (kt_kernel_key) and any config
** (kt_kernel_config_for, kt_kernel_default_for, kt_kernel_config_json),
** NUL included. A buf too small for the text gets "" and KT_ERR_INVALID
** ("kt_kernel_key: the key needs 46 bytes, bufsize is 16"): never a cut
** key or config. */
#define KT_KEY_MAX 8451
#define KT_CONFIG_MAX 2115
/* The most characters of a name in a spec (the kernel's, kt_kernel_name). */
#define KT_NAME_MAX 64

/* The config kt_launch would use for these args, written as
** "BLOCK=256,VEC=4" into buf (bufsize bytes, KT_CONFIG_MAX hold any). Like
** kt_launch it may tune first, as the runtime's mode says, but it launches
** nothing on the caller's buffers. Returns what kt_launch returns. */
KT_API kt_status kt_kernel_config_for(kt_kernel *k, const kt_arg *args,
                                      int nargs, char *buf, size_t bufsize);

/* The config used for these args when nothing is tuned: the spec's default,
** or when a constraint refuses it, the valid config nearest it (the fewest
** fields changed, each nearest its default's value in the spec's list).
** Tunes nothing, needs no device. Returns KT_OK, KT_ERR_ARGS,
** KT_ERR_EVAL or KT_ERR_NO_CONFIG. */
KT_API kt_status kt_kernel_default_for(kt_kernel *k, const kt_arg *args, int nargs,
                                       char *buf, size_t bufsize);

/* Called once per variant by kt_kernel_compile_all(). name is the variant's
** file stem ("rmsnorm_fwd.T=bf16.BLOCK=256.VEC=4.HAS_RES=1"), status its
** compile result, cubin_bytes its size, ms the compile time, errmsg the
** reason when status is not KT_OK. All borrowed; valid until it returns. */
typedef void (*kt_variant_fn)(void *user, const char *name, kt_status status,
                              size_t cubin_bytes, double ms,
                              const char *errmsg);

/* The most variants one compile call takes on: a larger list is refused
** before anything compiles (at a second or more of NVRTC each, it would
** run for days). */
#define KT_COMPILE_MAX_VARIANTS 65536

/* Compile every variant the spec's space allows (every type, config and
** derived-constant value, less those a constraint on these alone excludes)
** for the runtime's arch, without a GPU. Each cubin is written to
** out_dir/<name>.cubin when out_dir is not NULL. fn may be NULL.
** Returns KT_OK when every variant compiled, else KT_ERR_COMPILE (the
** message names the first failure), KT_ERR_IO, or KT_ERR_INVALID before
** compiling anything: a specialized param, a space of more than
** KT_COMPILE_MAX_VARIANTS variants, or one too large to walk in seconds
** (2^27 values set while its constraints keep few); compile those of given
** calls with kt_kernel_compile_for. Not thread-safe for k. */
KT_API kt_status kt_kernel_compile_all(kt_kernel *k, const char *out_dir,
                                       kt_variant_fn fn, void *user);

/* Compile the variants that one call can use: those of every config that
** satisfies the constraints for args (as kt_launch would bind them; pointer
** values matter only for their null-ness and alignment, so a program
** without a GPU may pass made-up addresses). Needed for specs with
** specialized params, whose variants follow the values calls pass, and
** cheaper than kt_kernel_compile_all when the shapes are known. Other
** arguments and the result as for kt_kernel_compile_all (KT_ERR_INVALID
** when the call's configs make more than KT_COMPILE_MAX_VARIANTS variants),
** plus KT_ERR_ARGS (a pointer's extent below 0, as for kt_kernel_key) and
** KT_ERR_NO_CONFIG. */
KT_API kt_status kt_kernel_compile_for(kt_kernel *k, const kt_arg *args, int nargs,
                                       const char *out_dir, kt_variant_fn fn,
                                       void *user);


/* Device memory helpers, for programs that do not link the CUDA runtime
** (the CLI, tests, simple embedders). They use the runtime's device and
** context. kt_device_alloc: caller owns *out; free with kt_device_free().
** Copies are synchronous. Returns KT_OK, KT_ERR_NO_DEVICE, KT_ERR_NOMEM or
** KT_ERR_CUDA. Thread-safe. */
KT_API kt_status kt_device_alloc(kt_runtime *rt, size_t bytes,
                                 uint64_t *out /* OUT */);
KT_API kt_status kt_device_free(kt_runtime *rt, uint64_t devptr);
KT_API kt_status kt_device_upload(kt_runtime *rt, uint64_t dst,
                                  const void *src, size_t bytes);
KT_API kt_status kt_device_download(kt_runtime *rt, void *dst, uint64_t src,
                                    size_t bytes);
/* Fill bytes of device memory with one byte value (e.g. 0xFF to poison). */
KT_API kt_status kt_device_fill(kt_runtime *rt, uint64_t dst, uint8_t byte,
                                size_t bytes);
/* A non-blocking stream on the runtime's device, made current in the
** calling thread. Caller owns *out; free with kt_stream_destroy(). */
KT_API kt_status kt_stream_create(kt_runtime *rt, kt_stream *out /* OUT */);
KT_API kt_status kt_stream_destroy(kt_runtime *rt, kt_stream s);
/* Wait for all work queued on stream (NULL: the legacy default stream). */
KT_API kt_status kt_stream_sync(kt_runtime *rt, kt_stream stream);

/* Synthetic inputs for a call of k, as ktune tune and ktune bench make
** them: a device buffer for each non-null pointer arg, its extent long, at
** the arg's address modulo 256 (so the same alignment, key and variant),
** filled as the spec's "init" says from seed (outputs zeroed); args whose
** byte ranges are identical share one buffer, so an in-place call stays in
** place. Only the placement of args' pointers is read: they may be made up.
** Caller owns *out; free with kt_inputs_free(). Returns KT_OK,
** KT_ERR_INVALID, KT_ERR_ARGS, KT_ERR_EVAL, KT_ERR_NO_DEVICE, KT_ERR_NOMEM
** or KT_ERR_CUDA. */
typedef struct kt_inputs kt_inputs;
KT_API kt_status kt_inputs_make(kt_kernel *k, const kt_arg *args, int nargs,
                                uint64_t seed, kt_inputs **out /* OUT */);
/* The call with the inputs' device pointers, kt_kernel_nparams(k) entries.
** Borrowed; valid until kt_inputs_free(). */
KT_API const kt_arg *kt_inputs_args(const kt_inputs *in);
/* Free the buffers and the handle. Accepts NULL. */
KT_API void kt_inputs_free(kt_inputs *in);

/* Time the launch of k with args: warm-up, then repetitions of the launch
** on a private stream between CUDA events until both 20 repetitions and
** 100 ms are reached; the median and the spread (max - min) in
** microseconds. config may be NULL (the launch kt_launch would make).
** The args' buffers are written by the kernel as in a real call; args the
** alias rules refuse are refused (KT_ERR_ALIAS), never staged.
** Returns what kt_launch returns, KT_ERR_CUDA, or KT_ERR_INVALID where the
** launch runs no program (a grid of 0: nothing to time). */
KT_API kt_status kt_kernel_time(kt_kernel *k, const kt_arg *args, int nargs,
                                const char *config, double *median_us /* OUT */,
                                double *spread_us /* OUT */);

/* One param of a kernel's spec. Strings borrowed; valid until
** kt_runtime_close(). Set size to sizeof(kt_param_info) before the call
** (fields are only ever appended). */
typedef struct kt_param_info {
  size_t size;
  const char *name;
  kt_arg_kind kind;
  const char *dtype;  /* pointers: a dtype name or a type variable */
  const char *access; /* pointers: "in", "out", "inout" or "consumed" (read,
                         then undefined); else "" */
  int optional;       /* pointers: may be 0 */
  const char *key;    /* scalars: "exact", "pow2" or "ignore"; else "" */
  const char *init;   /* the spec's input generator ("randn", "permutation(N)",
                         "1"), or "" */
  const char *extent; /* pointers: the extent expression; else "" */
} kt_param_info;

/* The number of params, and one of them, filled up to out->size bytes as
** kt_runtime_get_info fills its struct (KT_ERR_INVALID out of range, or
** out->size smaller than the first version's struct). */
KT_API int kt_kernel_nparams(const kt_kernel *k);
KT_API kt_status kt_kernel_param(const kt_kernel *k, int i,
                                 kt_param_info *out /* OUT */);

/* For a call's args, the number of elements each pointer param may touch
** (its extent evaluated; 0 for scalars): elems has kt_kernel_nparams(k)
** entries. Only scalar args are read. Returns KT_OK, KT_ERR_ARGS (a count
** other than the spec's, or an extent below 0, which no buffer has) or
** KT_ERR_EVAL. */
KT_API kt_status kt_kernel_extents(kt_kernel *k, const kt_arg *args, int nargs,
                                   int64_t *elems /* OUT */);

/* The canonical tuning key of a call, as stored in the cache:
** {"D":256,"T":"bf16","res":0,"w":16,"x":16,"y":16}. Scalar params appear
** by their key policy (exact value, or power-of-two bucket), pointers by
** alignment class (0 when null), type variables by dtype, and derived
** constants that do not depend on the config by value; "ignore" params never.
** Written into buf (bufsize bytes, KT_KEY_MAX hold any). Sizes no launch
** takes (a pointer's extent below 0) have none: KT_ERR_ARGS, as kt_launch
** says it. Needs no device. */
KT_API kt_status kt_kernel_key(kt_kernel *k, const kt_arg *args, int nargs,
                               char *buf, size_t bufsize);

/* The canonical form of a key or config, as the cache stores and compares
** them: one JSON object of integers and strings, its fields sorted by name,
** no spaces, integers exact (64-bit), floats as their f32 value. A key
** written by hand (or by another tool) becomes the string the cache holds.
** Returns KT_OK, or KT_ERR_INVALID with the reason written into buf (as
** far as it fits) and kt_errmsg(NULL). */
KT_API kt_status kt_json_canonical(const char *json, char *buf, size_t bufsize);
/* A config of k in either form, "BLOCK=128,VEC=8" or JSON, as canonical
** JSON into buf (KT_CONFIG_MAX bytes hold any), once every field is in the
** spec's space. Returns KT_OK,
** KT_ERR_INVALID or KT_ERR_CONSTRAINT (the message names the field). */
KT_API kt_status kt_kernel_config_json(kt_kernel *k, const char *config, char *buf, size_t bufsize);

/* Called by kt_kernel_lint() once per problem and once per note (a msg
** that starts with "note: "); msg borrowed until it returns. */
typedef void (*kt_lint_fn)(void *user, const char *msg);

/* Check a spec for problems beyond its syntax: "phantom" key fields (a
** scalar in the key that neither the kernel source nor any expression of
** the spec reads, which would split tunings for nothing), and variants that
** do not compile (every variant is compiled for the runtime's arch).
** *problems counts them. Notes, not counted: a scalar the key ignores,
** without tune_at, that sets the grid beside a config field of several
** values (one tuning then serves every value of it); and a space that
** kt_kernel_compile_all refuses before compiling (a specialized param, a
** space too large: see there), whose variants lint does not compile; and a
** constraint that holds config fields against a scalar the key ignores (a
** call where it refuses the key's tuned config runs the fallback config).
** Returns KT_OK (even with problems) or an error. */
KT_API kt_status kt_kernel_lint(kt_kernel *k, kt_lint_fn fn, void *user,
                                int *problems /* OUT */);

/* The config cache. Results of tuning live in an SQLite file that many
** processes share (see docs/cache.md). When the file cannot be used (it is
** corrupt, say) the runtime works without it and says so once in the log;
** the calls below then return KT_ERR_CACHE with the reason. */

/* The user cache's path. Borrowed; valid until kt_runtime_close(). */
KT_API const char *kt_cache_path(const kt_runtime *rt);

/* One configs row. All strings borrowed; valid until the callback returns.
** key and config are canonical JSON in a row ktune wrote; a row another
** program wrote may hold any text there, which no lookup matches. Every
** string is UTF-8: a byte of the file that is not is written \xNN
** (kt_cache_trials given this very row from inside the callback looks its
** trials up by the file's own text; given a copy, by the text shown). */
typedef struct kt_cache_row {
  const char *kernel, *spec_hash, *device, *key, *config;
  double time_us;                 /* -1 where the row holds no time (text,
                                     a negative or non-finite number) */
  int candidates, rejected;
  const char *nvrtc_version, *driver_version;
  int64_t created_at, updated_at; /* seconds since the epoch */
  int from_system;                /* the row is in the system cache */
} kt_cache_row;
/* Return nonzero to stop the listing. */
typedef int (*kt_cache_row_fn)(void *user, const kt_cache_row *row);

/* Call fn for each configs row (user cache, then system cache) of kernel,
** or of every kernel when kernel is NULL. Returns KT_OK or KT_ERR_CACHE. */
KT_API kt_status kt_cache_list(kt_runtime *rt, const char *kernel,
                               kt_cache_row_fn fn, void *user);

/* One trials row; strings borrowed until the callback returns. median_us
** and spread_us are -1 when nothing was measured. */
typedef struct kt_trial_row {
  const char *config, *status, *detail;
  double median_us, spread_us;
  int registers, smem_bytes, spill_bytes;
} kt_trial_row;
typedef int (*kt_trial_row_fn)(void *user, const kt_trial_row *row);
/* The trials of one configs row, fastest first. */
KT_API kt_status kt_cache_trials(kt_runtime *rt, const kt_cache_row *of,
                                 kt_trial_row_fn fn, void *user);

/* A process that died in a trial (killed after hanging, or crashed) left
** its config quarantined as "in progress in pid PID": give those rows the
** reason (e.g. "hang: no progress for 60 s"); fn (may be NULL) sees each
** (kernel, key, config), borrowed until it returns. For a tool that runs
** tunings in worker processes. Returns KT_OK, KT_ERR_READONLY or
** KT_ERR_CACHE. */
typedef void (*kt_quarantine_fn)(void *user, const char *kernel, const char *key, const char *config);
KT_API kt_status kt_cache_quarantine_claim(kt_runtime *rt, long pid, const char *reason,
                                           kt_quarantine_fn fn, void *user);

/* Row counts of the user cache: configs, trials, binaries, quarantine. */
KT_API kt_status kt_cache_counts(kt_runtime *rt, long counts[4] /* OUT */);

/* Write configs (and, when with_binaries, cubins as base64) as JSON to path
** ("-": standard output). A regular file is written whole or not at all (a
** new file beside it, renamed over it): one that fails leaves the file as
** it was. Returns KT_OK, KT_ERR_IO, KT_ERR_CACHE, or KT_ERR_INVALID (path
** empty, or the cache's own file or the system cache's by any name, or a
** file SQLite keeps beside one: -wal, -shm, -journal). */
KT_API kt_status kt_cache_export(kt_runtime *rt, const char *path,
                                 int with_binaries);

/* Merge an export (path, or "-": standard input) into the user cache, all
** or nothing: a config replaces the cached one only when it is faster, or
** the cached row is damaged (docs/cache.md). An export's cubins run on the
** GPU as they are: with_binaries adds them, for an export of a source
** trusted like one's own code; without it they are checked and left out.
** counts: configs added, kept, replaced, binaries added, binaries left out.
** Returns KT_OK, KT_ERR_IO, KT_ERR_INVALID (not an export; the message says
** why), KT_ERR_READONLY or KT_ERR_CACHE. */
KT_API kt_status kt_cache_import(kt_runtime *rt, const char *path,
                                 int with_binaries,
                                 long counts[5] /* OUT */);

/* Remove configs (with their trials and quarantine rows) of the given
** kernels' names whose spec hash is none of the given kernels' current
** ones (a name given twice, with two specs, keeps the rows of both), then
** binaries no config refers to and no given kernel's spec is. kernels may
** be NULL when n is 0. */
KT_API kt_status kt_cache_gc(kt_runtime *rt, kt_kernel *const *kernels, int n,
                             long *configs_removed /* OUT */,
                             long *binaries_removed /* OUT */);

/* The spec hash of a kernel as 16 hex digits (what the cache rows carry).
** Borrowed; valid until kt_runtime_close(). */
KT_API const char *kt_kernel_spec_hash(const kt_kernel *k);

#ifdef __cplusplus
}
#endif
#endif
