#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "device/nvrtc.h"
#include "cache/store.h"
#include "dispatch/runtime.h"

kt_status kt_options_init(kt_options *o) {
  if (!o) return KT_ERR_INVALID;
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->log_level = -1;
  return KT_OK;
}

static kt_mode mode_from_env(void) {
  const char *m = getenv("KTUNE_MODE");
  if (m && !strcmp(m, "cache-only")) return KT_MODE_CACHE_ONLY;
  if (m && !strcmp(m, "off")) return KT_MODE_OFF;
  return KT_MODE_TUNE;
}

static int parse_arch(const char *arch, int *cc) {
  int major = 0;
  if (strncmp(arch, "sm_", 3) || strlen(arch) < 5 || strlen(arch) > 7) return -1;
  for (const char *p = arch + 3; *p; p++) {
    if (*p < '0' || *p > '9') return *p == 'a' && !p[1] && p > arch + 4 ? 0 : -1;
    major = major * 10 + (*p - '0');
  }
  *cc = major;
  return 0;
}

kt_status kt_runtime_open(kt_runtime **out, const kt_options *opts) {
  if (!out) return KT_ERR_INVALID;
  *out = NULL;
  kt_options o;
  kt_options_init(&o);
  if (opts) {
    if (opts->size < sizeof(size_t) || opts->size > sizeof o)
      return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: options size %zu is not a kt_options of this version",
                     opts->size);
    memcpy(&o, opts, opts->size);
  }
  if (o.strategy < KT_STRATEGY_AUTO || o.strategy > KT_STRATEGY_LOCAL || !(o.budget_s >= 0))
    return kt__err(0, KT_ERR_INVALID, "kt_runtime_open: strategy %d or budget %g is out of range", (int)o.strategy,
                   o.budget_s);
  kt_runtime *rt = kt__calloc(1, sizeof *rt);
  if (!rt) return kt__err(0, KT_ERR_NOMEM, "kt_runtime_open: out of memory");
  if (pthread_mutex_init(&rt->lock, NULL)) {
    kt__free(rt);
    return kt__err(0, KT_ERR_NOMEM, "kt_runtime_open: cannot create a mutex");
  }
  rt->id = kt__err_new_id();
  rt->log.fn = o.log ? o.log : kt__log_stderr;
  rt->log.user = o.log_user;
  rt->log.level = o.log_level >= 0 ? o.log_level : kt__log_level_from_env();
  rt->mode = o.mode ? o.mode : mode_from_env();
  rt->no_cache = o.no_cache;
  rt->stage_aliased = o.stage_aliased;
  rt->miss_runs_default = o.miss_runs_default;
  rt->retune = o.retune;
  rt->no_pdl = o.no_pdl;
  rt->strategy = o.strategy;
  rt->budget_s = o.budget_s;
  rt->progress = o.progress;
  rt->progress_user = o.progress_user;
  *out = rt;
  const char *home = o.cuda_home ? o.cuda_home : getenv("CUDA_HOME");
  if (!(rt->cuda_home = kt__strdup(home && *home ? home : "/usr/local/cuda")) ||
      (o.cache_path && !(rt->cache_path = kt__strdup(o.cache_path))))
    return kt__err(rt->id, KT_ERR_NOMEM, "kt_runtime_open: out of memory");
  const char *sys = o.system_cache_path ? o.system_cache_path : getenv("KTUNE_SYSTEM_CACHE");
  if (sys && *sys && !(rt->system_cache_path = kt__strdup(sys)))
    return kt__err(rt->id, KT_ERR_NOMEM, "kt_runtime_open: out of memory");
  if (!rt->no_cache) {
    /* A cache that cannot be used never stops the runtime: it tunes in
    ** memory and says why once. */
    if (kt__store_open(&rt->store, rt->cache_path, rt->system_cache_path, &rt->log, rt->cache_error,
                       sizeof rt->cache_error))
      kt__log(&rt->log, KT_LOG_WARN, "running without a config cache: %s", rt->cache_error);
  } else {
    snprintf(rt->cache_error, sizeof rt->cache_error, "the cache is disabled (no_cache)");
  }
  if (o.arch && parse_arch(o.arch, &rt->cc))
    return kt__err(rt->id, KT_ERR_INVALID, "kt_runtime_open: arch \"%s\" is not of the form sm_90",
                   o.arch);
  if (o.arch) snprintf(rt->arch, sizeof rt->arch, "%s", o.arch);
  if (o.no_device) return KT_OK;
  char err[KT_ERRMAX];
  kt_status st = kt__dev_open(o.device, &rt->dev, &rt->ctx, err, sizeof err);
  if (st) return kt__err(rt->id, st, "kt_runtime_open: %s", err);
  rt->have_device = 1;
  if (!o.arch) {
    rt->cc = rt->dev.cc_major * 10 + rt->dev.cc_minor;
    snprintf(rt->arch, sizeof rt->arch, "sm_%d", rt->cc);
  }
  snprintf(rt->fingerprint, sizeof rt->fingerprint, "%s/sm_%d%d/%d", rt->dev.name, rt->dev.cc_major,
           rt->dev.cc_minor, rt->dev.num_sms);
  kt__log(&rt->log, KT_LOG_INFO, "device %d: %s, %s, %d SMs, driver %d", o.device, rt->dev.name,
          rt->arch, rt->dev.num_sms, rt->dev.driver_version);
  return KT_OK;
}

static void kernel_free(kt_kernel *k) {
  if (!k) return;
  kt__free(k->hit_checks);
  if (atomic_load(&k->tuned.slots)) {
    kt__lfmap_free(&k->tuned, kt__tuned_free);
    pthread_mutex_destroy(&k->tune_lock);
  }
  kt__vtable_free(&k->vt);
  kt__spec_free(k->spec);
  kt__free(k);
}

kt_status kt_runtime_close(kt_runtime *rt) {
  if (!rt) return KT_OK;
  for (int i = 0; i < rt->nkernels; i++) kernel_free(rt->kernels[i]);
  kt__free(rt->kernels);
  if (rt->have_device) kt__dev_close(rt->dev.ordinal);
  pthread_mutex_destroy(&rt->lock);
  kt__err_clear(rt->id);
  kt__store_close(rt->store);
  kt__free(rt->cuda_home);
  kt__free(rt->cache_path);
  kt__free(rt->system_cache_path);
  kt__free(rt);
  return KT_OK;
}

const char *kt_errmsg(const kt_runtime *rt) { return kt__errmsg(rt ? rt->id : 0); }

const char *kt_runtime_arch(const kt_runtime *rt) { return rt ? rt->arch : ""; }

const char *kt_runtime_device_name(const kt_runtime *rt) {
  return rt && rt->have_device ? rt->dev.name : "";
}

const char *kt_kernel_name(const kt_kernel *k) { return k ? k->spec->name : ""; }

const char *kt_kernel_spec_hash(const kt_kernel *k) { return k ? k->spec_hash : ""; }

/* NVRTC options: fixed ones, then the spec's. All of them feed the variant
** seed, so a changed option never reuses a module. */
static kt_status kernel_options(kt_kernel *k) {
  kt_runtime *rt = k->rt;
  const kt__spec *s = k->spec;
  if (s->nflags > 10)
    return kt__err(rt->id, KT_ERR_SPEC, "%s: options.flags: at most 10 flags", s->path);
  snprintf(k->optbuf[0], sizeof k->optbuf[0], "--gpu-architecture=%s", rt->arch);
  snprintf(k->optbuf[1], sizeof k->optbuf[1], "-I%s/include", rt->cuda_home);
  k->opts[k->nopts++] = k->optbuf[0];
  k->opts[k->nopts++] = "-std=c++17";
  k->opts[k->nopts++] = k->optbuf[1];
  /* NVRTC keeps a precompiled form of the toolkit headers in the process:
  ** every variant after the first compiles about a third faster. */
  k->opts[k->nopts++] = "--pch";
  if (s->fast_math) k->opts[k->nopts++] = "--use_fast_math";
  for (int i = 0; i < s->nflags; i++) k->opts[k->nopts++] = s->flags[i];
  XXH3_state_t *h = XXH3_createState();
  if (!h) return kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", s->path);
  XXH3_64bits_reset(h);
  XXH3_64bits_update(h, &s->spec_hash, sizeof s->spec_hash);
  for (int i = 0; i < k->nopts; i++) {
    /* The include path names a machine's directory, not what is compiled. */
    if (i == 2) continue;
    XXH3_64bits_update(h, k->opts[i], strlen(k->opts[i]) + 1);
  }
  k->variant_seed = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return KT_OK;
}

/* Whether an expression's value follows from the tuning key and the config
** alone: then a config tuned for the key satisfies it on every call with
** that key, and the launch path need not evaluate it again. */
static int key_determines(const kt__spec *s, const kt__expr *e) {
  for (int sl = 0; sl < s->nslots; sl++) {
    if (!kt__expr_uses(e, sl)) continue;
    if (sl < s->nparams) {
      const kt__param *p = &s->params[sl];
      if (p->type != KT__P_PTR && p->key != KT__KEY_EXACT) return 0;
      continue;
    }
    if (sl == s->smem_slot && !key_determines(s, &s->smem)) return 0;
    for (int d = 0; d < s->nderived; d++)
      if (sl == s->derived[d].slot && !key_determines(s, &s->derived[d].e)) return 0;
  }
  return 1;
}

/* Opt-in shared memory per block by compute capability, for compiling
** without a device (from the CUDA programming guide's table). */
static int64_t offline_smem(int cc) {
  if (cc >= 90) return 232448;
  if (cc == 80 || cc == 87) return 166912;
  if (cc >= 86) return 101376;
  if (cc >= 75) return 65536;
  return 49152;
}

kt_status kt_kernel_load(kt_runtime *rt, const char *spec_path, kt_kernel **out) {
  if (!rt) return KT_ERR_INVALID;
  if (!spec_path || !out) return kt__err(rt->id, KT_ERR_INVALID, "kt_kernel_load: NULL argument");
  *out = NULL;
  kt_kernel *k = kt__calloc(1, sizeof *k);
  if (!k) return kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", spec_path);
  k->rt = rt;
  k->uid = kt__err_new_id();
  char err[KT_ERRMAX];
  kt_status st = kt__spec_load(spec_path, &k->spec, err, sizeof err);
  if (st) {
    kt__free(k);
    return kt__err(rt->id, st, "%s", err);
  }
  if (kt__vtable_init(&k->vt)) {
    kt__spec_free(k->spec);
    kt__free(k);
    return kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", spec_path);
  }
  if ((st = kernel_options(k))) {
    kernel_free(k);
    return st;
  }
  if (kt__key_define(k->spec, &k->keydef)) {
    kernel_free(k);
    return kt__err(rt->id, KT_ERR_SPEC, "%s: the tuning key would have more than %d fields", spec_path, KT_MAX_KEY);
  }
  if (!(k->hit_checks = kt__calloc((size_t)k->spec->nconstraints + 1, 1))) {
    kernel_free(k);
    return kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", spec_path);
  }
  for (int i = 0; i < k->spec->nconstraints; i++)
    k->hit_checks[i] = !key_determines(k->spec, &k->spec->constraints[i].e);
  if (kt__lfmap_init(&k->tuned)) {
    kernel_free(k);
    return kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", spec_path);
  }
  if (pthread_mutex_init(&k->tune_lock, NULL)) {
    kt__lfmap_free(&k->tuned, NULL);
    kernel_free(k);
    return kt__err(rt->id, KT_ERR_NOMEM, "%s: cannot create a mutex", spec_path);
  }
  snprintf(k->spec_hash, sizeof k->spec_hash, "%016llx", (unsigned long long)k->spec->spec_hash);
  k->builtins[KT__BUILTIN_NUM_SMS] = rt->dev.num_sms;
  k->builtins[KT__BUILTIN_CC] = rt->cc;
  k->builtins[KT__BUILTIN_MAX_SMEM] = rt->have_device ? rt->dev.smem_per_block_optin : offline_smem(rt->cc);
  k->builtins[KT__BUILTIN_L2_BYTES] = rt->dev.l2_bytes;
  /* The wait is compiled in only for sm_90+: the arch compiled for must
  ** have it, not just the device. */
  k->pdl = k->spec->pdl && !rt->no_pdl && rt->have_device && rt->cc >= 90 && rt->dev.cc_major >= 9;
  pthread_mutex_lock(&rt->lock);
  if (rt->nkernels == rt->capkernels) {
    int cap = rt->capkernels ? rt->capkernels * 2 : 8;
    kt_kernel **nk = kt__realloc(rt->kernels, (size_t)cap * sizeof *nk);
    if (!nk) {
      pthread_mutex_unlock(&rt->lock);
      kernel_free(k);
      return kt__err(rt->id, KT_ERR_NOMEM, "%s: out of memory", spec_path);
    }
    rt->kernels = nk;
    rt->capkernels = cap;
  }
  rt->kernels[rt->nkernels++] = k;
  pthread_mutex_unlock(&rt->lock);
  *out = k;
  return KT_OK;
}

kt_status kt_runtime_stats(kt_runtime *rt, kt_stats *out) {
  if (!rt || !out || out->size < sizeof *out) return KT_ERR_INVALID;
  memset(out, 0, sizeof *out);
  out->size = sizeof *out;
  pthread_mutex_lock(&rt->lock);
  for (int i = 0; i < rt->nkernels; i++) {
    out->launches += atomic_load_explicit(&rt->kernels[i]->n_launch, memory_order_relaxed);
    out->hits += atomic_load_explicit(&rt->kernels[i]->n_hit, memory_order_relaxed);
  }
  pthread_mutex_unlock(&rt->lock);
  out->misses = atomic_load(&rt->n_miss);
  out->tunings = atomic_load(&rt->n_tune);
  out->trials = atomic_load(&rt->n_trial);
  out->tuning_ms = (double)atomic_load(&rt->tune_us) / 1000.0;
  out->compiles = atomic_load(&rt->n_compile);
  out->compile_ms = (double)atomic_load(&rt->compile_us) / 1000.0;
  out->cache_loads = atomic_load(&rt->n_cache_load);
  out->binary_loads = atomic_load(&rt->n_binary_load);
  out->fallbacks = atomic_load(&rt->n_fallback);
  return KT_OK;
}

kt_status kt_runtime_get_info(kt_runtime *rt, kt_runtime_info *out) {
  if (!rt || !out) return KT_ERR_INVALID;
  char err[KT_ERRMAX];
  out->device_name = rt->have_device ? rt->dev.name : "";
  out->arch = rt->arch;
  out->fingerprint = rt->fingerprint;
  out->num_sms = rt->dev.num_sms;
  out->l2_bytes = rt->dev.l2_bytes;
  out->smem_per_block_optin = rt->dev.smem_per_block_optin;
  out->driver_version = rt->dev.driver_version;
  out->nvrtc_version = kt__nvrtc_load(rt->cuda_home, err, sizeof err) ? 0 : kt__nvrtc_version();
  out->cache_path = kt_cache_path(rt);
  out->cache_error = rt->store ? "" : rt->cache_error;
  return KT_OK;
}

kt_status kt_device_count(int *out) {
  if (!out) return KT_ERR_INVALID;
  char err[KT_ERRMAX];
  kt_status st = kt__dev_count(out, err, sizeof err);
  return st ? kt__err(0, st, "%s", err) : KT_OK;
}
