/* Opening and closing a runtime; its description and counters. */
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cache/store.h"
#include "device/nvrtc.h"
#include "device/rcompile.h"
#include "dispatch/handles.h"

/* Runtimes open in the process: NVRTC's helpers end with the last. */
static atomic_int open_runtimes;

kt_status kt_options_init(kt_options *o) {
  if (!o) return kt__misuse(NULL, "kt_options_init", "o is NULL");
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->log_level = -1;
  return KT_OK;
}

/* $KTUNE_MODE, else tune; an unknown value is named in the log. */
static kt_mode mode_from_env(const kt__logger *log) {
  static const struct {
    const char *name;
    kt_mode mode;
  } modes[] = {{"tune", KT_MODE_TUNE}, {"cache-only", KT_MODE_CACHE_ONLY}, {"off", KT_MODE_OFF}, {"async", KT_MODE_ASYNC}};
  const char *m = getenv("KTUNE_MODE");
  if (!m || !*m) return KT_MODE_TUNE;
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
    if (!strcmp(m, modes[i].name)) return modes[i].mode;
  kt__log(log, KT_LOG_WARN, "KTUNE_MODE=%s is not a mode (tune, cache-only, off, async): tune is used", m);
  return KT_MODE_TUNE;
}

/* The options as given, over the defaults, checked. */
static kt_status read_options(const kt_options *opts, kt_options *o) {
  kt_options_init(o);
  if (opts) {
    if (opts->size < sizeof(size_t) || opts->size > sizeof *o)
      return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: options size %zu is not a kt_options of this version",
                     opts->size);
    memcpy(o, opts, opts->size);
  }
  if ((int)o->mode < KT_MODE_DEFAULT || o->mode > KT_MODE_ASYNC)
    return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: mode %d is not a kt_mode", (int)o->mode);
  if ((int)o->strategy < KT_STRATEGY_AUTO || o->strategy > KT_STRATEGY_LOCAL)
    return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: strategy %d is not a kt_strategy", (int)o->strategy);
  if (!(o->budget_s >= 0))
    return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: budget_s %g is not a number of seconds >= 0", o->budget_s);
  if (o->log_level < -1 || o->log_level > KT_LOG_DEBUG)
    return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: log_level %d is not a kt_log_level, nor -1 ($KTUNE_LOG)",
                   o->log_level);
  if (o->no_cache && o->cache_required)
    return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: no_cache and cache_required are both set");
  const kt_coordinator *c = &o->coord;
  if (c->size > 1 && (c->rank < 0 || c->rank >= c->size || !c->publish || !c->fetch || !(c->timeout_s >= 0)))
    return kt__err(0, KT_ERR_INVALID,
                   "kt_runtime_open: coord: rank %d of size %d, timeout %g s%s: a rank from 0 to size-1, a timeout "
                   ">= 0 and both publish and fetch are needed",
                   c->rank, c->size, c->timeout_s, !c->publish || !c->fetch ? ", a callback missing" : "");
  return KT_OK;
}

static void apply_options(kt_runtime *rt, const kt_options *o) {
  rt->env.log.fn = o->log ? o->log : kt__log_stderr;
  rt->env.log.user = o->log_user;
  int level = o->log_level >= 0 ? o->log_level : kt__log_level_from_env();
  rt->env.log.level = level >= 0 ? level : KT_LOG_WARN;
  if (level < 0)
    kt__log(&rt->env.log, KT_LOG_WARN, "KTUNE_LOG=%s is not a level (error, warn, info, debug): warn is used",
            getenv("KTUNE_LOG"));
  rt->mode = o->mode ? o->mode : mode_from_env(&rt->env.log);
  rt->no_cache = o->no_cache;
  rt->stage_aliased = o->stage_aliased;
  rt->miss_runs_default = o->miss_runs_default;
  rt->no_pdl = o->no_pdl;
  rt->tune = (kt__tuneopts){.strategy = o->strategy, .budget_s = o->budget_s, .retune = o->retune,
                            .no_prune = o->no_prune, .progress = o->progress, .progress_user = o->progress_user,
                            .cancel = &rt->closing};
  rt->async_copy_limit = o->async_copy_limit ? o->async_copy_limit : (size_t)512 << 20;
  if (o->coord.size > 1) rt->coord = o->coord;
  if (rt->coord.size > 1 && rt->coord.timeout_s == 0) rt->coord.timeout_s = 300;
}

/* The cache's results are kt_status codes; it does not include ktune.h. */
#define SAME(c, s) ((int)(c) == (int)(s))
_Static_assert(SAME(KT__C_OK, KT_OK) && SAME(KT__C_INVALID, KT_ERR_INVALID) && SAME(KT__C_NOMEM, KT_ERR_NOMEM) &&
                   SAME(KT__C_IO, KT_ERR_IO) && SAME(KT__C_CACHE, KT_ERR_CACHE) &&
                   SAME(KT__C_NOT_FOUND, KT_ERR_NOT_FOUND) && SAME(KT__C_READONLY, KT_ERR_READONLY),
               "cache results must be the kt_status codes of the same names");
#undef SAME

static void cache_log(void *user, int level, const char *msg) { kt__log(user, (kt_log_level)level, "%s", msg); }

/* The cache, or the reason there is none: a cache that cannot be used
** stops the runtime only where the caller requires one; otherwise it
** tunes in memory and says why once. Out of memory is not a cache
** problem: it fails the open. */
static kt_status open_cache(kt_runtime *rt, int readonly, int required) {
  if (rt->no_cache) {
    snprintf(rt->cache_error, sizeof rt->cache_error, "the cache is disabled (no_cache)");
    return KT_OK;
  }
  /* The file asked for, resolved once: the store opens it, and
  ** kt_runtime_info gives it also where none opens (a command that may make
  ** one asks where it would be). A path that does not resolve or fit is
  ** left to the store, which says why. */
  char e[KT_ERRMAX];
  const char *asked = rt->cache_path && *rt->cache_path ? rt->cache_path : NULL;
  if (asked ? strlen(asked) >= sizeof rt->cache_file
            : kt__store_default_path(rt->cache_file, sizeof rt->cache_file, e, sizeof e))
    rt->cache_file[0] = 0;
  else if (asked)
    strcpy(rt->cache_file, asked);
  kt__store_opts so = {rt->cache_file[0] ? rt->cache_file : rt->cache_path, rt->system_cache_path, readonly, required,
                       {cache_log, &rt->env.log, rt->env.log.level}};
  kt_status st = kt__store_open(&rt->env.store, &so, rt->cache_error, sizeof rt->cache_error);
  kt__as_utf8(rt->cache_error, sizeof rt->cache_error, 0); /* kt_runtime_info hands it out */
  if (st == KT_ERR_NOMEM || (st && required))
    return kt__err(rt->env.id, st == KT_ERR_NOMEM ? st : KT_ERR_CACHE, "kt_runtime_open: %s", rt->cache_error);
  /* A caller that asked only to read checks for the cache itself. */
  if (st) kt__log(&rt->env.log, readonly ? KT_LOG_INFO : KT_LOG_WARN, "running without a config cache: %s", rt->cache_error);
  return KT_OK;
}

/* No record into a cache file: lines appended to a database or its -wal
** would damage it. */
static void keep_record_off_the_cache(kt_runtime *rt) {
  if (!rt->record_path || !kt__store_is_own_file(rt->env.store, rt->record_path)) return;
  kt__log(&rt->env.log, KT_LOG_WARN, "KTUNE_RECORD %s: it is a cache file; missed keys are not recorded",
          rt->record_path);
  kt__free(rt->record_path);
  rt->record_path = NULL;
}

static kt_status open_device(kt_runtime *rt, const kt_options *o) {
  kt__env *env = &rt->env;
  char err[KT_ERRMAX];
  kt_status st = kt__dev_open(o->device, &env->dev, &env->ctx, err, sizeof err);
  if (st) return kt__err(env->id, st, "kt_runtime_open: %s", err);
  env->have_device = 1;
  if (!o->arch) {
    env->cc = env->dev.cc_major * 10 + env->dev.cc_minor;
    snprintf(env->arch, sizeof env->arch, "sm_%d", env->cc);
  }
  snprintf(env->fingerprint, sizeof env->fingerprint, "%s/sm_%d%d/%d", env->dev.name, env->dev.cc_major,
           env->dev.cc_minor, env->dev.num_sms);
  kt__log(&env->log, KT_LOG_INFO, "device %d: %s, %s, %d SMs, driver %d", o->device, env->dev.name, env->arch,
          env->dev.num_sms, env->dev.driver_version);
  return KT_OK;
}

/* A path the runtime opens again later, anchored to the working directory
** of its open: a process that changes directory keeps writing one file. A
** copy of path where the directory cannot be had. NULL: out of memory. */
static char *anchored(const char *path) {
  char cwd[PATH_MAX];
  if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) return kt__strdup(path);
  size_t n = strlen(cwd) + strlen(path) + 2;
  char *s = kt__malloc(n);
  if (s) snprintf(s, n, "%s/%s", cwd, path);
  return s;
}

kt_status kt_runtime_open(kt_runtime **out, const kt_options *opts) {
  if (!out) return kt__misuse(NULL, "kt_runtime_open", "out is NULL");
  *out = NULL;
  kt_options o;
  kt_status st = read_options(opts, &o);
  if (st) return st;
  kt_runtime *rt = kt__calloc(1, sizeof *rt);
  if (!rt) return kt__err(0, KT_ERR_NOMEM, "kt_runtime_open: out of memory");
  if (pthread_mutex_init(&rt->lock, NULL)) {
    kt__free(rt);
    return kt__err(0, KT_ERR_NOMEM, "kt_runtime_open: cannot create a mutex");
  }
  rt->env.id = kt__err_new_id();
  apply_options(rt, &o);
  *out = rt;
  atomic_fetch_add(&open_runtimes, 1);
  const char *home = o.cuda_home ? o.cuda_home : getenv("CUDA_HOME");
  const char *sys = o.system_cache_path ? o.system_cache_path : getenv("KTUNE_SYSTEM_CACHE");
  const char *rec = o.record_path ? o.record_path : getenv("KTUNE_RECORD");
  if (!(rt->env.cuda_home = kt__strdup(home && *home ? home : "/usr/local/cuda")) ||
      (rec && *rec && !(rt->record_path = anchored(rec))) ||
      (o.cache_path && !(rt->cache_path = kt__strdup(o.cache_path))) ||
      (sys && *sys && !(rt->system_cache_path = kt__strdup(sys))))
    return kt__err(rt->env.id, KT_ERR_NOMEM, "kt_runtime_open: out of memory");
  if (o.arch && (rt->env.cc = kt__arch_cc(o.arch)) < 0)
    return kt__err(rt->env.id, KT_ERR_INVALID, "kt_runtime_open: arch \"%s\" is not of the form sm_90, sm_90a or sm_100f",
                   o.arch);
  if (o.arch) snprintf(rt->env.arch, sizeof rt->env.arch, "%s", o.arch);
  /* An arch given to compile for, that NVRTC cannot: said once here, not
  ** by every variant. Without NVRTC the cache may still serve it. */
  char err[KT_ERRMAX];
  if (o.arch && kt__nvrtc_check_target(rt->env.cuda_home, o.arch, err, sizeof err) == KT_ERR_INVALID)
    return kt__err(rt->env.id, KT_ERR_INVALID, "kt_runtime_open: %s", err);
  /* The cache last: an open refused (no driver, no such GPU, a bad arch)
  ** leaves no cache file made for a runtime that never ran. */
  if (!o.no_device && (st = open_device(rt, &o))) return st;
  if ((st = open_cache(rt, o.cache_readonly, o.cache_required))) return st;
  keep_record_off_the_cache(rt);
  return KT_OK;
}

kt_status kt_runtime_close(kt_runtime *rt) {
  if (!rt) return KT_OK;
  /* From a callback: the caller's stack still uses what this frees. */
  kt_status st = kt__reentry(rt, "kt_runtime_close", KT__CB_ROWS);
  if (st) return st;
  /* The background tuner first: it uses the kernels. */
  atomic_store(&rt->closing, 1);
  kt__async_stop(rt);
  for (int i = 0; i < rt->nkernels; i++) kt__kernel_free(rt->kernels[i]);
  kt__free(rt->kernels);
  if (rt->env.have_device) kt__dev_close(rt->env.dev.ordinal);
  pthread_mutex_destroy(&rt->lock);
  kt__err_clear(rt->env.id);
  kt__store_close(rt->env.store);
  kt__free(rt->env.cuda_home);
  kt__free(rt->cache_path);
  kt__free(rt->system_cache_path);
  kt__free(rt->record_path);
  kt__free(rt);
  if (atomic_fetch_sub(&open_runtimes, 1) == 1) kt__rc_reset(0);
  return KT_OK;
}

const char *kt_errmsg(const kt_runtime *rt) { return kt__errmsg(rt ? rt->env.id : 0); }

const char *kt_runtime_arch(const kt_runtime *rt) { return rt ? rt->env.arch : ""; }

const char *kt_runtime_device_name(const kt_runtime *rt) { return rt && rt->env.have_device ? rt->env.dev.name : ""; }

kt_mode kt_runtime_mode(const kt_runtime *rt) { return rt ? rt->mode : KT_MODE_DEFAULT; }

/* The size of kt_stats before async mode added its fields. */
#define STATS_V1 offsetof(kt_stats, standins)

static void fill_stats(kt_runtime *rt, kt_stats *out) {
  memset(out, 0, sizeof *out);
  out->size = sizeof *out;
  pthread_mutex_lock(&rt->lock);
  for (int i = 0; i < rt->nkernels; i++) {
    out->launches += atomic_load_explicit(&rt->kernels[i]->n_launch, memory_order_relaxed);
    out->hits += atomic_load_explicit(&rt->kernels[i]->n_hit, memory_order_relaxed);
  }
  pthread_mutex_unlock(&rt->lock);
  const kt__counters *n = &rt->env.n;
  out->misses = atomic_load(&n->misses);
  out->tunings = atomic_load(&n->tunings);
  out->trials = atomic_load(&n->trials);
  out->tuning_ms = (double)atomic_load(&n->tune_us) / 1000.0;
  out->compiles = atomic_load(&n->compiles);
  out->compile_ms = (double)atomic_load(&n->compile_us) / 1000.0;
  out->cache_loads = atomic_load(&n->cache_loads);
  out->binary_loads = atomic_load(&n->binary_loads);
  out->fallbacks = atomic_load(&n->fallbacks);
  out->standins = atomic_load(&n->standins);
  out->async_queued = atomic_load(&n->async_queued);
  out->async_done = atomic_load(&n->async_done);
  out->async_failed = atomic_load(&n->async_failed);
  out->async_pending = kt__async_pending(rt);
  out->published = atomic_load(&n->published);
  out->followed = atomic_load(&n->followed);
  out->coord_failed = atomic_load(&n->coord_failed);
}

kt_status kt_runtime_stats(kt_runtime *rt, kt_stats *out) {
  if (!rt || !out || out->size < STATS_V1)
    return kt__misuse(rt, "kt_runtime_stats",
                      !rt ? "rt is NULL" : !out ? "out is NULL" : "out->size is smaller than kt_stats' first version");
  kt_stats all;
  fill_stats(rt, &all);
  kt__copy_sized(out, &all, sizeof all);
  return KT_OK;
}

/* The size of kt_runtime_info's first version: the offset of the first
** field appended since. */
#define INFO_V1 offsetof(kt_runtime_info, cache_file)

kt_status kt_runtime_get_info(kt_runtime *rt, kt_runtime_info *out) {
  const char *why = !rt ? "rt is NULL"
                    : !out ? "out is NULL"
                    : out->size < INFO_V1 ? "out->size is smaller than kt_runtime_info's first version"
                    : NULL;
  if (why) return kt__misuse(rt, "kt_runtime_get_info", why);
  char err[KT_ERRMAX];
  const kt__env *env = &rt->env;
  kt_runtime_info all = {
      .device_name = env->have_device ? env->dev.name : "",
      .arch = env->arch,
      .fingerprint = env->fingerprint,
      .num_sms = env->dev.num_sms,
      .l2_bytes = env->dev.l2_bytes,
      .smem_per_block_optin = env->dev.smem_per_block_optin,
      .driver_version = env->dev.driver_version,
      .nvrtc_version = kt__nvrtc_load(env->cuda_home, err, sizeof err) ? 0 : kt__nvrtc_version(),
      .cache_path = kt_cache_path(rt),
      .cache_error = env->store ? "" : rt->cache_error,
      .cache_file = rt->cache_file,
  };
  kt__copy_sized(out, &all, sizeof all);
  return KT_OK;
}

kt_status kt_device_count(int *out) {
  if (!out) return kt__misuse(NULL, "kt_device_count", "out is NULL");
  char err[KT_ERRMAX];
  kt_status st = kt__dev_count(out, err, sizeof err);
  return st ? kt__err(0, st, "%s", err) : KT_OK;
}
