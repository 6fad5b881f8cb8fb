/* The variant table of a program: each tuple of template values compiled
** once (or read from the cache's binaries), loaded as a module, and found
** afterwards without a lock. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/pool.h"
#include "cache/codec.h"
#include "cache/store.h"
#include "device/nvrtc.h"
#include "device/rcompile.h"
#include "device/variant.h"
#include "spec/source.h"

/* UNBUILT: a background build claimed the variant and then skipped it
** (kt__variant_build_start); the next thread that wants it builds it.
** READY is final, and so is almost every FAILED: NVRTC's refusal, a
** helper that died on the source (never compiled in this process, which
** the same crash would take down), a header changed since the load, a
** module the driver refused. Only a want of memory (the host's, or the
** device's when a module loads) and NVRTC not loaded pass: such a variant
** is built again by the next thread that wants it once a pause has
** passed, 1 s, doubled at each failure up to a minute, so that a cause
** that lasts costs a build a pause, not one a launch. */
enum { V_COMPILING = 0, V_READY = 1, V_FAILED = 2, V_UNBUILT = 3 };
#define RETRY_FIRST_MS 1000.0
#define RETRY_MOST_MS 60000.0

typedef struct kt__variant {
  uint64_t hash;
  int64_t vals[KT_MAX_TARGS];
  _Atomic int state;
  kt_status status;
  int refused;            /* status is NVRTC's verdict on the source */
  char *errmsg;
  void *cubin;
  size_t cubin_size;
  char *lowered;          /* the entry's mangled name in cubin */
  void *module, *func;
  kt__funcattrs attrs;
  double compile_ms;
  int failures;           /* builds that failed, and when the last did */
  double failed_ms;
} kt__variant;

/* What a failed build said, copied under the table's lock (another thread
** may build the variant again, and free its message, once it is read). */
typedef struct vfail {
  kt_status status;
  int refused;
  char msg[KT_ERRMAX];
} vfail;

static void variant_free(void *p) {
  kt__variant *v = p;
  kt__dev_module_unload(v->module);
  kt__free(v->cubin);
  kt__free(v->lowered);
  kt__free(v->errmsg);
  kt__free(v);
}

int kt__vtable_init(kt__vtable *vt) {
  memset(vt, 0, sizeof *vt);
  if (kt__lfmap_init(&vt->map)) return -1;
  if (pthread_mutex_init(&vt->lock, NULL)) {
    kt__lfmap_free(&vt->map, NULL);
    return -1;
  }
  if (pthread_cond_init(&vt->done, NULL)) {
    pthread_mutex_destroy(&vt->lock);
    kt__lfmap_free(&vt->map, NULL);
    return -1;
  }
  return 0;
}

void kt__vtable_free(kt__vtable *vt) {
  if (!atomic_load(&vt->map.slots)) return;
  kt__lfmap_free(&vt->map, variant_free);
  pthread_cond_destroy(&vt->done);
  pthread_mutex_destroy(&vt->lock);
}

static const char *ctype(kt_dtype t) {
  switch (t) {
    case KT_F32: return "float";
    case KT_F16: return "__half";
    case KT_BF16: return "__nv_bfloat16";
    case KT_F64: return "double";
    case KT_I32: return "int";
    case KT_I64: return "long long";
    case KT_U8: return "unsigned char";
    case KT_I8: return "signed char";
    case KT_I16: return "short";
    case KT_U32: return "unsigned int";
    default: return "void";
  }
}

void kt__variant_vals(const kt__prog *p, const kt__call *c, int64_t *vals) {
  const kt__spec *s = p->spec;
  for (int i = s->ntargs; i < KT_MAX_TARGS; i++) vals[i] = 0;
  for (int i = 0; i < s->ntargs; i++)
    vals[i] = s->targs[i].tvar >= 0 ? (int64_t)c->tvals[s->targs[i].tvar] : c->slots[s->targs[i].slot];
}

void kt__variant_name(const kt__prog *p, const kt__call *c, char sep, char *out, size_t n) {
  const kt__spec *s = p->spec;
  size_t used = (size_t)snprintf(out, n, "%s", s->name);
  for (int i = 0; i < s->ntargs && used < n; i++) {
    const kt__targ *t = &s->targs[i];
    if (t->tvar >= 0)
      used += (size_t)snprintf(out + used, n - used, "%c%s=%s", sep, s->types[t->tvar].name,
                               kt_dtype_name(c->tvals[t->tvar]));
    else
      used += (size_t)snprintf(out + used, n - used, "%c%s=%lld", sep, s->slot_names[t->slot],
                               (long long)c->slots[t->slot]);
  }
}

static int same_vals(const void *entry, const void *vals) {
  return !memcmp(((const kt__variant *)entry)->vals, vals, sizeof((const kt__variant *)entry)->vals);
}

static kt__variant *find(const kt__vtable *vt, uint64_t h, const int64_t *vals) {
  return kt__lfmap_find(&vt->map, h, same_vals, vals);
}

/* "rmsnorm_fwd<__nv_bfloat16, 256, 4>": the instance NVRTC compiles, in at
** most KT__EXPR_NAME_MAX bytes (an entry of KT__ENTRY_MAX characters, each
** argument ", " and a C type or an int64). */
#define KT__EXPR_NAME_MAX (KT__ENTRY_MAX + 3 + KT_MAX_TARGS * 22)
static void name_expr(const kt__prog *p, const kt__call *c, char *expr, size_t n) {
  const kt__spec *s = p->spec;
  size_t used = (size_t)snprintf(expr, n, "%s<", s->entry);
  for (int i = 0; i < s->ntargs && used < n; i++) {
    const kt__targ *t = &s->targs[i];
    if (t->tvar >= 0)
      used += (size_t)snprintf(expr + used, n - used, "%s%s", i ? ", " : "", ctype(c->tvals[t->tvar]));
    else
      used += (size_t)snprintf(expr + used, n - used, "%s%lld", i ? ", " : "", (long long)c->slots[t->slot]);
  }
  if (used < n) snprintf(expr + used, n - used, ">");
}

typedef struct fetched {
  kt__variant *v;
  char *lowered;
  int nomem;
} fetched;

/* The row of a cubin whose size and digest the cache has checked: its
** bytes, and the lowered (mangled) entry name stored in its constants. */
static void on_binary(void *user, const kt__binrow *r) {
  fetched *f = user;
  kt__kv kv[8];
  char buf[2048], why[128];
  int n = kt__codec_read(r->constants, kv, 8, buf, sizeof buf, why, sizeof why);
  for (int i = 0; i < n && !f->lowered; i++)
    if (kv[i].kind == KT__V_STR && !strcmp(kv[i].name, "lowered") && !(f->lowered = kt__strdup(kv[i].s))) f->nomem = 1;
  if (!f->lowered || !(f->v->cubin = kt__malloc((size_t)r->size))) {
    f->nomem |= f->lowered != NULL;
    kt__free(f->lowered);
    f->lowered = NULL;
    return;
  }
  memcpy(f->v->cubin, r->cubin, (size_t)r->size);
  f->v->cubin_size = (size_t)r->size;
}

/* A cubin another process compiled: same source, constants, options,
** architecture and NVRTC ABI. One that fails the cache's size and digest
** check is never loaded: it is compiled again, and the fresh cubin
** replaces the row. KT_ERR_NOT_FOUND when the cache has none to offer. */
static kt_status from_cache(kt__prog *p, const char *hash, const char *vname, kt__variant *v, char **lowered) {
  kt__env *env = p->env;
  char msg[KT_ERRMAX];
  if (!env->store || !kt__store_binaries_trusted(env->store)) return KT_ERR_NOT_FOUND;
  fetched f = {v, NULL, 0};
  kt_status st = kt__store_get_binary(env->store, hash, on_binary, &f, msg, sizeof msg);
  if (st == KT_ERR_INVALID) kt__log(&env->log, KT_LOG_WARN, "%s: %s; it is compiled again", vname, msg);
  if (!st && f.nomem) return KT_ERR_NOMEM;
  if (st || !f.lowered) return KT_ERR_NOT_FOUND;
  *lowered = f.lowered;
  atomic_fetch_add_explicit(&env->n.binary_loads, 1, memory_order_relaxed);
  kt__log(&env->log, KT_LOG_DEBUG, "%s: cubin from the cache", vname);
  return KT_OK;
}

static void store_binary(kt__prog *p, const char *hash, const char *expr, const char *lowered, const kt__variant *v) {
  kt__env *env = p->env;
  if (!env->store || kt__store_readonly(env->store)) return;
  char consts[1400], nv[16], msg[KT_ERRMAX];
  kt__kv kv[2] = {{.name = "entry", .kind = KT__V_STR, .s = expr}, {.name = "lowered", .kind = KT__V_STR, .s = lowered}};
  snprintf(nv, sizeof nv, "%d", kt__nvrtc_version());
  kt__binrow b = {.hash = hash, .kernel = p->spec->name, .spec_hash = p->spec_hash, .arch = env->arch,
                  .nvrtc_version = nv, .constants = consts, .size = (int64_t)v->cubin_size, .cubin = v->cubin};
  if (kt__codec_write(kv, 2, consts, sizeof consts))
    kt__log(&env->log, KT_LOG_WARN, "%s: its cubin is not stored: its names are too long", expr);
  else if (kt__store_put_binary(env->store, &b, msg, sizeof msg))
    kt__log(&env->log, KT_LOG_WARN, "%s", msg);
}

/* Whether the headers NVRTC read from disk for a compile are those the
** spec hashed when it loaded: one edited since would be compiled in, and
** its cubin stored under the old hash, served again once the edit is
** undone. KT_OK, or KT_ERR_COMPILE naming what changed. */
static kt_status headers_unchanged(const kt__prog *p, char *err, size_t errlen) {
  const kt__spec *s = p->spec;
  if (!s->nheaders) return KT_OK;
  char why[KT_ERRMAX];
  uint64_t now;
  int rc = kt__source_headers(s->source, s->source_dir, s->source_name, &now, why, sizeof why);
  if (!rc && now == s->headers_hash) return KT_OK;
  if (rc == ENOMEM) {
    kt__fmt(err, errlen, "%s: out of memory", s->path);
    return KT_ERR_NOMEM;
  }
  kt__fmt(err, errlen, "the headers %s includes changed on disk after %s loaded%s%s: load the spec again to compile "
          "from them", s->source_path, s->path, rc ? ": " : "", rc ? why : "");
  return KT_ERR_COMPILE;
}

/* NVRTC's compile of exprs for the runtime's arch, or, on a GPU newer than
** NVRTC, to PTX of the newest arch it has (said once a process). *refused
** as kt__rc_compile_many's, and 0 where the headers changed: that failure
** is not the source's. */
static kt_status compile_many(kt__prog *p, const char *prog, const char *const *exprs, int n, void **cubin,
                              size_t *size, char **lowered, int *refused, char *err, size_t errlen) {
  static atomic_int said;
  kt__env *env = p->env;
  char target[64];
  const char *opts[sizeof p->opts / sizeof p->opts[0]];
  *cubin = NULL;
  *refused = 0;
  for (int i = 0; i < n; i++) lowered[i] = NULL;
  kt_status st = kt__nvrtc_target(env->cuda_home, env->arch, target, sizeof target, err, errlen);
  if (st) return st == KT_ERR_INVALID ? KT_ERR_COMPILE : st;
  for (int i = 0; i < p->nopts; i++) opts[i] = p->opts[i] == p->optbuf[0] ? target : p->opts[i];
  if (strcmp(target, p->optbuf[0]) && !atomic_exchange(&said, 1)) {
    char name[32];
    kt__nvrtc_name(name, sizeof name);
    kt__log(&env->log, KT_LOG_WARN, "%s does not compile for %s: kernels are compiled to PTX (%s), which the driver "
            "compiles for the device", name, env->arch, target + 19);
  }
  st = kt__rc_compile_many(&env->log, p->spec->source, prog, exprs, n, opts, p->nopts, cubin, size, lowered, refused,
                           err, errlen);
  if (!st && (st = headers_unchanged(p, err, errlen))) {
    kt__free(*cubin);
    *cubin = NULL;
    for (int i = 0; i < n; i++) {
      kt__free(lowered[i]);
      lowered[i] = NULL;
    }
  }
  return st;
}

static kt_status compile(kt__prog *p, const char *expr, const char *vname, kt__variant *v, char **lowered,
                         char *err, size_t errlen) {
  kt__env *env = p->env;
  char msg[KT_ERRMAX];
  double t0 = kt__now_ms();
  kt_status st =
      compile_many(p, p->prog_name, &expr, 1, &v->cubin, &v->cubin_size, lowered, &v->refused, msg, sizeof msg);
  double ms = kt__now_ms() - t0;
  if (st) {
    snprintf(err, errlen, "%s: %s", vname, msg);
    return st;
  }
  atomic_fetch_add_explicit(&env->n.compiles, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&env->n.compile_us, (uint_fast64_t)(ms * 1000), memory_order_relaxed);
  kt__log(&env->log, KT_LOG_DEBUG, "%s: compiled in %.1f ms (%zu bytes)", vname, ms, v->cubin_size);
  return KT_OK;
}

static kt_status load_module(kt__prog *p, kt__variant *v, const char *lowered, char *msg, size_t msglen) {
  kt__env *env = p->env;
  const kt__spec *s = p->spec;
  kt_status st;
  if ((st = kt__dev_use(env->ctx, msg, msglen)) || (st = kt__dev_module_load(v->cubin, &v->module, msg, msglen)) ||
      (st = kt__dev_module_function(v->module, lowered, &v->func, msg, msglen)) ||
      (st = kt__dev_func_attrs(v->func, &v->attrs, msg, msglen)))
    return st;
  if (s->smem.is_const && s->smem.n == 1 && s->smem.code[0].imm == 0) return KT_OK;
  return kt__dev_func_set_max_smem(v->func, env->dev.smem_per_block_optin - v->attrs.static_smem, msg, msglen);
}

/* What names a variant to build: its instance, its name for people, and
** the hash of its cubin row. */
typedef struct pending {
  kt__variant *v;
  const kt__call *c;
  int at;                 /* its index in the calls given to build */
  char expr[KT__EXPR_NAME_MAX], vname[KT__VARIANT_NAME_MAX], hash[17];
} pending;

static void describe(const kt__prog *p, const kt__call *c, kt__variant *v, pending *w) {
  w->v = v;
  w->c = c;
  name_expr(p, c, w->expr, sizeof w->expr);
  kt__variant_name(p, c, ' ', w->vname, sizeof w->vname);
  /* The hash names NVRTC by the ABI major version that is loaded
  ** (libnvrtc.so.13), so that a warm start never loads NVRTC just to ask
  ** its version; the exact version is recorded in the row. */
  snprintf(w->hash, sizeof w->hash, "%016llx",
           (unsigned long long)XXH3_64bits_withSeed(v->vals, sizeof v->vals, p->variant_seed ^ KT_NVRTC_ABI));
}

/* A cubin in hand (from the cache, NVRTC or another rank): loaded when
** there is a device. Its entry name is kept for kt__variant_binary (a
** variant without it is still launched; it is only never sent). */
static kt_status finish(kt__prog *p, const pending *w, const char *lowered, char *err, size_t errlen) {
  char msg[KT_ERRMAX];
  kt_status st = p->env->have_device ? load_module(p, w->v, lowered, msg, sizeof msg) : KT_OK;
  if (st) snprintf(err, errlen, "%s: %s", w->vname, msg);
  else if (!w->v->lowered) w->v->lowered = kt__strdup(lowered);
  return st;
}

static kt_status build(kt__prog *p, const kt__call *c, kt__variant *v, char *err, size_t errlen) {
  pending w;
  describe(p, c, v, &w);
  if (!p->env->arch[0]) {
    snprintf(err, errlen, "%s: this runtime has neither a device nor an arch to compile for", w.vname);
    return KT_ERR_INVALID;
  }
  char *lowered = NULL;
  double t0 = kt__now_ms();
  kt_status st = from_cache(p, w.hash, w.vname, v, &lowered);
  if (st == KT_ERR_NOMEM) {
    snprintf(err, errlen, "%s: out of memory", w.vname);
    return st;
  }
  if (st) {
    if ((st = compile(p, w.expr, w.vname, v, &lowered, err, errlen))) {
      v->compile_ms = kt__now_ms() - t0;
      return st;
    }
    store_binary(p, w.hash, w.expr, lowered, v);
  }
  v->compile_ms = kt__now_ms() - t0;
  st = finish(p, &w, lowered, err, errlen);
  kt__free(lowered);
  return st;
}

kt_status kt__variant_get(kt__prog *p, const kt__call *c, void **fn) { return kt__variant_info(p, c, fn, NULL); }

/* Whether v's failure may be built again now (the table's lock held). */
static int retry_due(const kt__variant *v) {
  double pause = RETRY_FIRST_MS;
  for (int i = 1; i < v->failures && pause < RETRY_MOST_MS; i++) pause *= 2;
  if (pause > RETRY_MOST_MS) pause = RETRY_MOST_MS;
  return (v->status == KT_ERR_NOMEM || v->status == KT_ERR_NO_NVRTC) && kt__now_ms() - v->failed_ms >= pause;
}

/* What a build left in v, gone, for another build (its failures kept). */
static void forget_build(kt__variant *v) {
  kt__dev_module_unload(v->module);
  kt__free(v->cubin);
  kt__free(v->lowered);
  kt__free(v->errmsg);
  v->module = v->func = v->cubin = v->lowered = NULL;
  v->errmsg = NULL;
  v->cubin_size = 0;
  v->status = KT_OK;
  v->refused = 0;
}

/* The table's entry for vals, made (state compiling) when absent, unbuilt
** or failed for a cause whose pause is over; *mine says whether this
** thread did so and must build it. */
static kt__variant *entry_for(kt__prog *p, uint64_t h, const int64_t *vals, int *mine) {
  kt__vtable *vt = &p->vt;
  *mine = 0;
  pthread_mutex_lock(&vt->lock);
  kt__variant *v = find(vt, h, vals);
  int state = v ? atomic_load(&v->state) : V_UNBUILT;
  if (v && (state == V_UNBUILT || (state == V_FAILED && retry_due(v)))) {
    forget_build(v);
    atomic_store(&v->state, V_COMPILING);
    *mine = 1;
  } else if (!v && (v = kt__calloc(1, sizeof *v))) {
    v->hash = h;
    memcpy(v->vals, vals, sizeof v->vals);
    if (kt__lfmap_insert(&vt->map, v)) {
      kt__free(v);
      v = NULL;
    } else {
      *mine = 1;
    }
  }
  pthread_mutex_unlock(&vt->lock);
  return v;
}

/* v's result (st, err) for every thread that waits for it. */
static void publish(kt__prog *p, kt__variant *v, kt_status st, const char *err) {
  pthread_mutex_lock(&p->vt.lock);
  v->status = st;
  if (st) {
    v->errmsg = kt__strdup(err);
    v->failures++;
    v->failed_ms = kt__now_ms();
  }
  atomic_store_explicit(&v->state, st ? V_FAILED : V_READY, memory_order_release);
  pthread_cond_broadcast(&p->vt.done);
  pthread_mutex_unlock(&p->vt.lock);
}

static void build_and_publish(kt__prog *p, const kt__call *c, kt__variant *v) {
  char err[KT_ERRMAX];
  kt_status st = build(p, c, v, err, sizeof err);
  publish(p, v, st, err);
}

/* A claimed variant given back unbuilt: whoever wants it next builds it. */
static void unclaim(kt__prog *p, kt__variant *v) {
  pthread_mutex_lock(&p->vt.lock);
  atomic_store_explicit(&v->state, V_UNBUILT, memory_order_release);
  pthread_cond_broadcast(&p->vt.done);
  pthread_mutex_unlock(&p->vt.lock);
}

/* Wait while v is being built; its state then, and where it failed and
** f is not NULL, what it said. */
static int wait_built(kt__vtable *vt, kt__variant *v, vfail *f) {
  pthread_mutex_lock(&vt->lock);
  while (atomic_load(&v->state) == V_COMPILING) pthread_cond_wait(&vt->done, &vt->lock);
  int state = atomic_load(&v->state);
  if (f && state == V_FAILED) {
    f->status = v->status;
    f->refused = v->refused;
    snprintf(f->msg, sizeof f->msg, "%s", v->errmsg ? v->errmsg : "");
  }
  pthread_mutex_unlock(&vt->lock);
  return state;
}

static uint64_t vals_hash(const kt__prog *p, const int64_t *vals) {
  return XXH3_64bits_withSeed(vals, (size_t)p->spec->ntargs * sizeof vals[0], p->variant_seed);
}

/* Built, or being built: nothing to claim (a failure is asked of
** entry_for, which knows under the lock whether it is built again). */
static int settled_for_good(const kt__variant *v) {
  int state = atomic_load_explicit(&v->state, memory_order_acquire);
  return state == V_READY || state == V_COMPILING;
}

/* c's variant in the table, or NULL; whatever its state. */
static kt__variant *find_call(const kt__prog *p, const kt__call *c) {
  int64_t vals[KT_MAX_TARGS];
  kt__variant_vals(p, c, vals);
  return find(&p->vt, vals_hash(p, vals), vals);
}

kt_status kt__variant_info(kt__prog *p, const kt__call *c, void **fn, kt__funcattrs *attrs) {
  int64_t vals[KT_MAX_TARGS];
  kt__variant_vals(p, c, vals);
  uint64_t h = vals_hash(p, vals);
  kt__variant *v = find(&p->vt, h, vals);
  int state = v ? atomic_load_explicit(&v->state, memory_order_acquire) : V_UNBUILT;
  vfail f;
  /* A variant given back unbuilt while this thread waited is built here. */
  while (state != V_READY) {
    int mine;
    if (!(v = entry_for(p, h, vals, &mine))) return kt__err(p->env->id, KT_ERR_NOMEM, "%s: out of memory", p->spec->name);
    if (mine) build_and_publish(p, c, v);
    if ((state = wait_built(&p->vt, v, &f)) != V_UNBUILT) break;
  }
  if (state == V_FAILED) {
    char name[KT__VARIANT_NAME_MAX];
    kt__variant_name(p, c, ' ', name, sizeof name);
    return kt__err(p->env->id, f.status, "%s", f.msg[0] ? f.msg : name);
  }
  *fn = v->func;
  if (attrs) *attrs = v->attrs;
  return KT_OK;
}

int kt__variant_refused(kt__prog *p, const kt__call *c) {
  kt__variant *v = find_call(p, c);
  vfail f;
  return v && wait_built(&p->vt, v, &f) == V_FAILED && f.refused;
}

int kt__variant_settled(kt__prog *p, const kt__call *c) {
  kt__variant *v = find_call(p, c);
  return v && wait_built(&p->vt, v, NULL) != V_UNBUILT;
}

/* Under the lock: a failed variant's fields change when it is built again. */
int kt__variant_cubin(kt__prog *p, const kt__call *c, const void **cubin, size_t *size, double *ms) {
  kt__variant *v = find_call(p, c);
  *cubin = NULL;
  *size = 0;
  *ms = 0;
  if (!v) return -1;
  pthread_mutex_lock(&p->vt.lock);
  int state = atomic_load(&v->state), ready = state == V_READY;
  if (state == V_READY || state == V_FAILED) *ms = v->compile_ms;
  if (ready) {
    *cubin = v->cubin;
    *size = v->cubin_size;
  }
  pthread_mutex_unlock(&p->vt.lock);
  return ready ? 0 : -1;
}

int kt__variant_binary(const kt__prog *p, const kt__call *c, const void **cubin, size_t *size, const char **lowered) {
  const kt__variant *v = find_call(p, c);
  if (!v || atomic_load_explicit(&v->state, memory_order_acquire) != V_READY || !v->lowered || !v->cubin_size) return -1;
  *cubin = v->cubin;
  *size = v->cubin_size;
  *lowered = v->lowered;
  return 0;
}

/* Build v from a cubin another rank sent; when it cannot be loaded, the
** variant is built as if nothing had been sent. */
static void adopt(kt__prog *p, const kt__call *c, kt__variant *v, const void *cubin, size_t size,
                  const char *lowered) {
  pending w;
  char err[KT_ERRMAX];
  describe(p, c, v, &w);
  kt_status st = KT_ERR_NOMEM;
  if ((v->cubin = kt__malloc(size))) {
    memcpy(v->cubin, cubin, size);
    v->cubin_size = size;
    st = finish(p, &w, lowered, err, sizeof err);
  }
  if (!st) {
    publish(p, v, KT_OK, "");
    return;
  }
  kt__log(&p->env->log, KT_LOG_WARN, "%s: the cubin another rank sent is not used (%s); it is built here",
          w.vname, st == KT_ERR_NOMEM ? "out of memory" : err);
  forget_build(v);
  build_and_publish(p, c, v);
}

kt_status kt__variant_adopt(kt__prog *p, const kt__call *c, const void *cubin, size_t size, const char *lowered) {
  int64_t vals[KT_MAX_TARGS];
  int mine = 0;
  kt__variant_vals(p, c, vals);
  uint64_t h = vals_hash(p, vals);
  kt__variant *v = find(&p->vt, h, vals);
  if (v && settled_for_good(v)) return KT_OK;
  v = entry_for(p, h, vals, &mine);
  if (!v) return kt__err(p->env->id, KT_ERR_NOMEM, "%s: out of memory", p->spec->name);
  if (mine) adopt(p, c, v, cubin, size, lowered);
  return KT_OK;
}

/* Building many at once (kt__variant_build_all and _start): the variants
** claimed, those the cache has loaded at once, the rest compiled a group
** per NVRTC program; a group is formed when a thread takes it, and skip
** may then give a variant back unbuilt. */
struct kt__build {
  kt__prog *p;
  kt__call *calls;        /* a copy: the build may outlive the caller's array */
  pending *w;
  int m, group, lead, threads; /* m: claimed, to compile */
  atomic_int next;        /* the next pending variant to take */
  kt__skip_fn skip;
  void *user;
  pthread_t thread;
  int started;
};

/* The next group of up to b->group pending variants (one while the first
** lead are taken), less those skip gives back; how many are in *out. */
static int take_group(kt__build *b, pending **out) {
  for (;;) {
    int size = atomic_load(&b->next) < b->lead ? 1 : b->group;
    int i = atomic_fetch_add(&b->next, size);
    if (i >= b->m) return 0;
    if (i + size > b->m) size = b->m - i;
    int k = 0;
    for (int j = i; j < i + size; j++) {
      if (b->skip && b->skip(b->user, b->w[j].at)) unclaim(b->p, b->w[j].v);
      else out[k++] = &b->w[j];
    }
    if (k) return k;
  }
}

/* One NVRTC program for a group; a group that fails is compiled again one
** variant at a time, so that each error names its own variant. */
static void compile_group(kt__prog *p, pending **w, int n) {
  const char *exprs[KT__GROUP_MAX];
  char *lowered[KT__GROUP_MAX], err[KT_ERRMAX];
  void *cubin = NULL;
  size_t size = 0;
  int refused;
  for (int i = 0; i < n; i++) exprs[i] = w[i]->expr;
  double t0 = kt__now_ms();
  kt_status st = compile_many(p, p->prog_name, exprs, n, &cubin, &size, lowered, &refused, err, sizeof err);
  double ms = (kt__now_ms() - t0) / n;
  for (int i = 0; i < n; i++) {
    kt__variant *v = w[i]->v;
    if (st && n == 1) { /* its own error already */
      char msg[KT_ERRMAX];
      v->compile_ms = ms;
      v->refused = refused;
      publish(p, v, st, kt__fmt(msg, sizeof msg, "%s: %s", w[i]->vname, err));
      continue;
    }
    if (st || !(v->cubin = kt__malloc(size))) {
      if (!st) kt__free(lowered[i]);
      build_and_publish(p, w[i]->c, v);
      continue;
    }
    memcpy(v->cubin, cubin, size);
    v->cubin_size = size;
    v->compile_ms = ms;
    atomic_fetch_add_explicit(&p->env->n.compiles, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->env->n.compile_us, (uint_fast64_t)(ms * 1000), memory_order_relaxed);
    store_binary(p, w[i]->hash, w[i]->expr, lowered[i], v);
    kt_status fs = finish(p, w[i], lowered[i], err, sizeof err);
    kt__free(lowered[i]);
    publish(p, v, fs, err);
  }
  kt__free(cubin);
}

/* A compiling thread: groups until none is left. */
static void compile_groups(void *user, int ti) {
  (void)ti;
  kt__build *b = user;
  pending *g[KT__GROUP_MAX];
  for (int n; (n = take_group(b, g)) > 0;) compile_group(b->p, g, n);
}

/* Claim the variants of calls that nobody has made or is making; those
** the cache has are loaded and published here. Returns how many are left
** in w to compile. */
static int claim(kt__prog *p, const kt__call *calls, int n, pending *w) {
  int m = 0;
  for (int i = 0; i < n; i++) {
    int64_t vals[KT_MAX_TARGS];
    kt__variant_vals(p, &calls[i], vals);
    uint64_t h = vals_hash(p, vals);
    int mine = 0;
    kt__variant *v = find(&p->vt, h, vals);
    if ((v && settled_for_good(v)) || !(v = entry_for(p, h, vals, &mine)) || !mine) continue;
    describe(p, &calls[i], v, &w[m]);
    w[m].at = i;
    char *lowered = NULL, err[KT_ERRMAX];
    kt_status st = p->env->arch[0] ? from_cache(p, w[m].hash, w[m].vname, v, &lowered) : KT_ERR_INVALID;
    if (st == KT_ERR_NOT_FOUND) {
      m++;
    } else if (st == KT_OK) {
      kt_status fs = finish(p, &w[m], lowered, err, sizeof err);
      kt__free(lowered);
      publish(p, v, fs, err);
    } else {
      build_and_publish(p, &calls[i], v); /* no arch, out of memory: it says so */
    }
  }
  return m;
}

/* $KTUNE_COMPILE_GROUP: the most instances per NVRTC program (1 to
** KT__GROUP_MAX; for measuring what grouping buys). */
static int group_max(const kt__prog *p) {
  static atomic_int warned;
  const char *e = getenv("KTUNE_COMPILE_GROUP");
  char *end = NULL;
  long g = e && *e ? strtol(e, &end, 10) : 4;
  if (g >= 1 && g <= KT__GROUP_MAX && (!end || !*end)) return (int)g;
  if (!atomic_exchange(&warned, 1))
    kt__log(&p->env->log, KT_LOG_WARN, "KTUNE_COMPILE_GROUP=%s is not a number from 1 to %d: 4 is used", e,
            KT__GROUP_MAX);
  return 4;
}

/* As many compiling threads as there are groups to take, at most b->threads. */
static void *build_thread(void *user) {
  kt__build *b = user;
  int lead = b->lead < b->m ? b->lead : b->m;
  int groups = lead + (b->m - lead + b->group - 1) / b->group;
  kt__parallel_for(groups, b->threads, compile_groups, b);
  return NULL;
}

/* The build's copy of calls, its claims, and its group size. */
static kt__build *build_new(kt__prog *p, const kt__call *calls, int n, int threads, const kt__buildopts *o) {
  kt__build *b = kt__calloc(1, sizeof *b);
  size_t k = (size_t)(n ? n : 1);
  if (!b || !(b->calls = kt__calloc(k, sizeof *b->calls)) || !(b->w = kt__calloc(k, sizeof *b->w))) {
    if (b) kt__free(b->calls);
    kt__free(b);
    return NULL; /* each variant is built alone when first used */
  }
  memcpy(b->calls, calls, (size_t)n * sizeof *calls);
  b->p = p;
  b->m = claim(p, b->calls, n, b->w);
  b->threads = threads < 1 ? 1 : threads;
  int group = (b->m + b->threads - 1) / b->threads, most = group_max(p);
  b->group = group > most ? most : group < 1 ? 1 : group;
  if (o) {
    b->lead = o->lead;
    b->skip = o->skip;
    b->user = o->user;
  }
  atomic_init(&b->next, 0);
  return b;
}

kt__build *kt__variant_build_start(kt__prog *p, const kt__call *calls, int n, int threads, const kt__buildopts *o) {
  kt__build *b = build_new(p, calls, n, threads, o);
  if (b && b->m && !pthread_create(&b->thread, NULL, build_thread, b)) b->started = 1;
  else if (b && b->m) build_thread(b); /* no thread: built before returning */
  return b;
}

void kt__variant_build_wait(kt__build *b) {
  if (!b) return;
  if (b->started) pthread_join(b->thread, NULL);
  kt__free(b->w);
  kt__free(b->calls);
  kt__free(b);
}

void kt__variant_build_all(kt__prog *p, const kt__call *calls, int n, int threads) {
  kt__build *b = build_new(p, calls, n, threads, NULL);
  if (b) build_thread(b);
  kt__variant_build_wait(b);
}
