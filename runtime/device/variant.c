#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/lfmap.h"
#include "base/pool.h"
#include "device/nvrtc.h"
#include "cache/store.h"
#include "dispatch/runtime.h"

enum { V_COMPILING = 0, V_READY = 1, V_FAILED = 2 };

struct kt__variant {
  uint64_t hash;
  int64_t vals[KT_MAX_TARGS];
  _Atomic int state;
  kt_status status;
  char *errmsg;
  void *cubin;
  size_t cubin_size;
  void *module, *func;
  kt__funcattrs attrs;
  double compile_ms;
};

static void variant_free(void *p) {
  kt__variant *v = p;
  kt__dev_module_unload(v->module);
  kt__free(v->cubin);
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

void kt__variant_vals(const kt_kernel *k, const kt__call *c, int64_t *vals) {
  const kt__spec *s = k->spec;
  for (int i = s->ntargs; i < KT_MAX_TARGS; i++) vals[i] = 0;
  for (int i = 0; i < s->ntargs; i++)
    vals[i] = s->targs[i].tvar >= 0 ? (int64_t)c->tvals[s->targs[i].tvar]
                                    : c->slots[s->targs[i].slot];
}

void kt__variant_name(const kt_kernel *k, const kt__call *c, char sep,
                      char *out, size_t n) {
  const kt__spec *s = k->spec;
  size_t used = (size_t)snprintf(out, n, "%s", s->name);
  for (int i = 0; i < s->ntargs && used < n; i++) {
    const kt__targ *t = &s->targs[i];
    if (t->tvar >= 0)
      used += (size_t)snprintf(out + used, n - used, "%c%s=%s", sep,
                               s->types[t->tvar].name,
                               kt_dtype_name(c->tvals[t->tvar]));
    else
      used += (size_t)snprintf(out + used, n - used, "%c%s=%lld", sep,
                               s->slot_names[t->slot], (long long)c->slots[t->slot]);
  }
}

static int same_vals(const void *entry, const void *vals) {
  return !memcmp(((const kt__variant *)entry)->vals, vals, sizeof ((const kt__variant *)entry)->vals);
}

static kt__variant *find(const kt__vtable *vt, uint64_t h, const int64_t *vals) {
  return kt__lfmap_find(&vt->map, h, same_vals, vals);
}


static kt_status build(kt_kernel *k, const kt__call *c, kt__variant *v,
                       char *err, size_t errlen) {
  kt_runtime *rt = k->rt;
  const kt__spec *s = k->spec;
  char expr[1024], vname[512], msg[KT_ERRMAX];
  size_t used = (size_t)snprintf(expr, sizeof expr, "%s<", s->entry);
  for (int i = 0; i < s->ntargs && used < sizeof expr; i++) {
    const kt__targ *t = &s->targs[i];
    if (t->tvar >= 0)
      used += (size_t)snprintf(expr + used, sizeof expr - used, "%s%s", i ? ", " : "",
                               ctype(c->tvals[t->tvar]));
    else
      used += (size_t)snprintf(expr + used, sizeof expr - used, "%s%lld", i ? ", " : "",
                               (long long)c->slots[t->slot]);
  }
  if (used < sizeof expr) snprintf(expr + used, sizeof expr - used, ">");
  kt__variant_name(k, c, ' ', vname, sizeof vname);
  if (!rt->arch[0]) {
    snprintf(err, errlen, "%s: this runtime has neither a device nor an arch to compile for", vname);
    return KT_ERR_INVALID;
  }
  char prog[300];
  snprintf(prog, sizeof prog, "%s.cu", s->name);
  char *lowered = NULL;
  double t0 = kt__now_ms();
  /* A cubin another process compiled: same source, constants, options,
  ** architecture and NVRTC version. The lowered name is the name expression
  ** as NVRTC mangles it, which a cubin from the cache does not carry, so it
  ** is stored beside the constants. */
  char hash[17], consts[1400];
  /* The hash names NVRTC by the ABI major version that is loaded
  ** (libnvrtc.so.13), so that a warm start never loads NVRTC just to ask
  ** its version; the exact version is recorded in the row. */
  snprintf(hash, sizeof hash, "%016llx",
           (unsigned long long)XXH3_64bits_withSeed(v->vals, sizeof v->vals, k->variant_seed ^ KT_NVRTC_ABI));
  kt_status st = KT_ERR_NOT_FOUND;
  if (rt->store && kt__store_binaries_trusted(rt->store)) {
    st = kt__store_get_binary(rt->store, hash, &v->cubin, &v->cubin_size, msg, sizeof msg);
    if (!st && !(lowered = kt__store_binary_lowered(rt->store, hash))) {
      kt__free(v->cubin);
      v->cubin = NULL;
      st = KT_ERR_NOT_FOUND;
    }
    if (!st) {
      atomic_fetch_add_explicit(&rt->n_binary_load, 1, memory_order_relaxed);
      kt__log(&rt->log, KT_LOG_DEBUG, "%s: cubin from the cache", vname);
    }
  }
  if (st) {
    st = kt__nvrtc_compile(s->source, prog, expr, k->opts, k->nopts, &v->cubin, &v->cubin_size, &lowered, msg,
                           sizeof msg);
    if (st) {
      v->compile_ms = kt__now_ms() - t0;
      snprintf(err, errlen, "%s: %s", vname, msg);
      return st;
    }
    double ms = kt__now_ms() - t0;
    atomic_fetch_add_explicit(&rt->n_compile, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rt->compile_us, (uint_fast64_t)(ms * 1000), memory_order_relaxed);
    kt__log(&rt->log, KT_LOG_DEBUG, "%s: compiled in %.1f ms (%zu bytes)", vname, ms, v->cubin_size);
    if (rt->store && !kt__store_readonly(rt->store)) {
      snprintf(consts, sizeof consts, "{\"entry\":\"%s\",\"lowered\":\"%s\"}", expr, lowered);
      char nv[16];
      snprintf(nv, sizeof nv, "%d", kt__nvrtc_version());
      kt__binrow b = {hash, s->name, k->spec_hash, rt->arch, nv, consts, 0, 0, 0, v->cubin, v->cubin_size};
      if (kt__store_put_binary(rt->store, &b, msg, sizeof msg)) kt__log(&rt->log, KT_LOG_WARN, "%s", msg);
    }
  }
  v->compile_ms = kt__now_ms() - t0;

  if (rt->have_device) {
    if (!(st = kt__dev_use(rt->ctx, msg, sizeof msg)) &&
        !(st = kt__dev_module_load(v->cubin, &v->module, msg, sizeof msg)) &&
        !(st = kt__dev_module_function(v->module, lowered, &v->func, msg, sizeof msg)) &&
        !(st = kt__dev_func_attrs(v->func, &v->attrs, msg, sizeof msg)) &&
        !(s->smem.is_const && s->smem.n == 1 && s->smem.code[0].imm == 0))
      st = kt__dev_func_set_max_smem(
          v->func, rt->dev.smem_per_block_optin - v->attrs.static_smem, msg, sizeof msg);
    if (st) snprintf(err, errlen, "%s: %s", vname, msg);
  }
  kt__free(lowered);
  return st;
}

kt_status kt__variant_get(kt_kernel *k, const kt__call *c, void **fn) {
  return kt__variant_info(k, c, fn, NULL);
}

kt_status kt__variant_info(kt_kernel *k, const kt__call *c, void **fn, kt__funcattrs *attrs) {
  int64_t vals[KT_MAX_TARGS];
  kt__variant_vals(k, c, vals);
  uint64_t h = XXH3_64bits_withSeed(vals, (size_t)k->spec->ntargs * sizeof vals[0], k->variant_seed);
  kt__vtable *vt = &k->vt;
  kt__variant *v = find(vt, h, vals);
  if (v && atomic_load_explicit(&v->state, memory_order_acquire) == V_READY) {
    *fn = v->func;
    if (attrs) *attrs = v->attrs;
    return KT_OK;
  }
  int mine = 0;
  pthread_mutex_lock(&vt->lock);
  if (!v) v = find(vt, h, vals);
  if (!v) {
    v = kt__calloc(1, sizeof *v);
    if (v) {
      v->hash = h;
      memcpy(v->vals, vals, sizeof vals);
    }
    if (!v || kt__lfmap_insert(&vt->map, v)) {
      pthread_mutex_unlock(&vt->lock);
      kt__free(v);
      return kt__err(k->rt->id, KT_ERR_NOMEM, "%s: out of memory", k->spec->name);
    }
    mine = 1;
  }
  pthread_mutex_unlock(&vt->lock);
  if (mine) {
    char err[KT_ERRMAX];
    kt_status st = build(k, c, v, err, sizeof err);
    pthread_mutex_lock(&vt->lock);
    v->status = st;
    if (st) v->errmsg = kt__strdup(err);
    atomic_store_explicit(&v->state, st ? V_FAILED : V_READY, memory_order_release);
    pthread_cond_broadcast(&vt->done);
    pthread_mutex_unlock(&vt->lock);
  } else {
    pthread_mutex_lock(&vt->lock);
    while (atomic_load(&v->state) == V_COMPILING) pthread_cond_wait(&vt->done, &vt->lock);
    pthread_mutex_unlock(&vt->lock);
  }
  if (v->status) {
    char name[512];
    kt__variant_name(k, c, ' ', name, sizeof name);
    return kt__err(k->rt->id, v->status, "%s", v->errmsg ? v->errmsg : name);
  }
  *fn = v->func;
  if (attrs) *attrs = v->attrs;
  return KT_OK;
}

/* The values a derived constant may take at compile time. */
static int domain(const kt__derived *d, int64_t *vals) {
  if (d->n) {
    memcpy(vals, d->values, (size_t)d->n * sizeof *vals);
    return d->n;
  }
  vals[0] = 0;
  vals[1] = 1;
  return 2;
}

/* Slots whose values are fixed by an offline variant: config, derived, cc. */
static int offline_known(const kt__spec *s, const kt__expr *e) {
  for (int sl = 0; sl < s->nslots; sl++) {
    if (!kt__expr_uses(e, sl)) continue;
    if (sl < s->builtin_slot) {
      /* esize(p) follows from p's dtype, which every variant fixes. */
      int esize = 0;
      for (int p = 0; p < s->nparams; p++)
        esize |= s->params[p].type == KT__P_PTR && s->params[p].esize_slot == sl;
      if (!esize) return 0;
      continue;
    }
    if (sl < s->builtin_slot + KT__NBUILTINS && sl != s->builtin_slot + KT__BUILTIN_CC)
      return 0;
    if (sl == s->smem_slot && !offline_known(s, &s->smem)) return 0;
    for (int d = 0; d < s->nderived; d++)
      if (sl == s->derived[d].slot && !offline_known(s, &s->derived[d].e)) return 0;
  }
  return 1;
}

typedef struct enum_state {
  kt_kernel *k;
  kt__call c;       /* the variant being enumerated */
  kt__call *calls;  /* distinct variants found */
  kt_status *status;
  char (*errs)[KT_ERRMAX];
  int n, cap;
} enum_state;

/* Record the variant of es->c unless a constraint that depends on config
** and constants alone rules it out, or it was seen already. */
static kt_status collect(enum_state *es) {
  kt_kernel *k = es->k;
  const kt__spec *s = k->spec;
  for (int i = 0; i < s->nconstraints; i++) {
    if (!offline_known(s, &s->constraints[i].e)) continue;
    int64_t v;
    if (kt__expr_eval(&s->constraints[i].e, es->c.slots, &v) || !v) return KT_OK;
  }
  int64_t vals[KT_MAX_TARGS], seen[KT_MAX_TARGS];
  kt__variant_vals(k, &es->c, vals);
  for (int i = 0; i < es->n; i++) {
    kt__variant_vals(k, &es->calls[i], seen);
    if (!memcmp(seen, vals, sizeof vals)) return KT_OK;
  }
  if (es->n == es->cap) {
    int cap = es->cap ? es->cap * 2 : 64;
    void *p = kt__realloc(es->calls, (size_t)cap * sizeof *es->calls);
    if (!p) return kt__err(k->rt->id, KT_ERR_NOMEM, "out of memory");
    es->calls = p;
    es->cap = cap;
  }
  es->calls[es->n++] = es->c;
  return KT_OK;
}

/* Walk derived constants d.. in order, each computed when the values it
** depends on are known offline, else taken over its domain. */
static kt_status walk_derived(enum_state *es, int d) {
  const kt__spec *s = es->k->spec;
  if (d == s->nderived) {
    int64_t v = 0;
    if (offline_known(s, &s->smem) && !kt__expr_eval(&s->smem, es->c.slots, &v))
      es->c.slots[s->smem_slot] = v;
    return collect(es);
  }
  const kt__derived *dv = &s->derived[d];
  if (offline_known(s, &dv->e)) {
    int64_t v;
    if (kt__expr_eval(&dv->e, es->c.slots, &v)) return KT_OK;
    es->c.slots[dv->slot] = v;
    return walk_derived(es, d + 1);
  }
  int64_t vals[64];
  int n = domain(dv, vals);
  for (int i = 0; i < n; i++) {
    es->c.slots[dv->slot] = vals[i];
    kt_status st = walk_derived(es, d + 1);
    if (st) return st;
  }
  return KT_OK;
}

static kt_status walk_config(enum_state *es, int f) {
  const kt__spec *s = es->k->spec;
  if (f == s->ncfields) return walk_derived(es, 0);
  for (int i = 0; i < s->cfields[f].n; i++) {
    es->c.slots[s->cfields[f].slot] = s->cfields[f].values[i];
    kt_status st = walk_config(es, f + 1);
    if (st) return st;
  }
  return KT_OK;
}

static kt_status walk_types(enum_state *es, int t) {
  const kt__spec *s = es->k->spec;
  if (t == s->ntypes) return walk_config(es, 0);
  for (int i = 0; i < s->types[t].n; i++) {
    es->c.tvals[t] = s->types[t].types[i];
    for (int p = 0; p < s->nparams; p++)
      if (s->params[p].type == KT__P_PTR)
        es->c.slots[s->params[p].esize_slot] = (int64_t)kt_dtype_size(
            s->params[p].tvar >= 0 ? es->c.tvals[s->params[p].tvar] : s->params[p].dtype);
    kt_status st = walk_types(es, t + 1);
    if (st) return st;
  }
  return KT_OK;
}

static void compile_one(void *user, int i) {
  enum_state *es = user;
  void *fn;
  es->status[i] = kt__variant_get(es->k, &es->calls[i], &fn);
  if (es->status[i]) snprintf(es->errs[i], KT_ERRMAX, "%s", kt__errmsg(es->k->rt->id));
}

static kt_status write_cubin(const char *dir, const char *name, const kt__variant *v,
                             char *err, size_t errlen) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.cubin", dir, name);
  FILE *fp = fopen(path, "wb");
  int ok = fp && fwrite(v->cubin, 1, v->cubin_size, fp) == v->cubin_size;
  if (fp && fclose(fp)) ok = 0;
  if (ok) return KT_OK;
  snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
  return KT_ERR_IO;
}

/* Compile the variants es->calls lists, in parallel, and report each. */
static kt_status compile_listed(enum_state *es, kt_status st, const char *out_dir,
                                kt_variant_fn fn, void *user) {
  kt_kernel *k = es->k;
  if (!st && es->n && (!(es->status = kt__calloc((size_t)es->n, sizeof *es->status)) ||
                       !(es->errs = kt__calloc((size_t)es->n, sizeof *es->errs))))
    st = kt__err(k->rt->id, KT_ERR_NOMEM, "out of memory");
  if (!st) kt__parallel_for(es->n, kt__ncpus(), compile_one, es);
  kt_status first = KT_OK;
  char first_err[KT_ERRMAX] = "";
  for (int i = 0; !st && i < es->n; i++) {
    char name[512];
    int64_t vals[KT_MAX_TARGS];
    kt__variant_name(k, &es->calls[i], '.', name, sizeof name);
    kt__variant_vals(k, &es->calls[i], vals);
    const kt__variant *v =
        find(&k->vt, XXH3_64bits_withSeed(vals, (size_t)k->spec->ntargs * sizeof vals[0], k->variant_seed), vals);
    kt_status vs = es->status[i];
    if (!vs && out_dir) vs = write_cubin(out_dir, name, v, es->errs[i], KT_ERRMAX);
    if (fn) fn(user, name, vs, v && !vs ? v->cubin_size : 0, v ? v->compile_ms : 0, es->errs[i]);
    if (vs && !first) {
      first = vs;
      snprintf(first_err, sizeof first_err, "%s", es->errs[i]);
    }
  }
  if (!st && first) st = kt__err(k->rt->id, first, "%s", first_err);
  kt__free(es->calls);
  kt__free(es->status);
  kt__free(es->errs);
  kt__free(es);
  return st;
}

kt_status kt_kernel_compile_all(kt_kernel *k, const char *out_dir,
                                kt_variant_fn fn, void *user) {
  if (!k) return KT_ERR_INVALID;
  for (int p = 0; p < k->spec->nparams; p++)
    if (k->spec->params[p].specialize)
      return kt__err(k->rt->id, KT_ERR_INVALID,
                     "%s: param %s is specialized: its variants follow the values calls pass; "
                     "compile them for given shapes", k->spec->name, k->spec->params[p].name);
  enum_state *es = kt__calloc(1, sizeof *es);
  if (!es) return kt__err(k->rt->id, KT_ERR_NOMEM, "out of memory");
  es->k = k;
  memcpy(&es->c.slots[k->spec->builtin_slot], k->builtins, sizeof k->builtins);
  return compile_listed(es, walk_types(es, 0), out_dir, fn, user);
}

kt_status kt_kernel_compile_for(kt_kernel *k, const kt_arg *args, int nargs, const char *out_dir,
                                kt_variant_fn fn, void *user) {
  if (!k || (!args && nargs)) return KT_ERR_INVALID;
  enum_state *es = kt__calloc(1, sizeof *es);
  if (!es) return kt__err(k->rt->id, KT_ERR_NOMEM, "out of memory");
  es->k = k;
  kt_status st = kt__call_bind(k, args, nargs, &es->c);
  const kt__spec *s = k->spec;
  int idx[64] = {0}, any = 0;
  kt__call base = es->c;
  if (!st) {
    do {
      int64_t cfg[64];
      kt__spec_config_at(s, idx, cfg);
      es->c = base;
      int bad;
      st = kt__call_config(k, &es->c, cfg);
      if (!st) st = kt__call_check(k, &es->c, &bad);
      if (st == KT_ERR_EVAL) st = KT_OK, bad = 0; /* this config cannot serve the call */
      if (!st && bad < 0) {
        any = 1;
        st = collect(es);
      }
    } while (!st && kt__spec_config_next(s, idx));
  }
  if (!st && !any) st = kt__err(k->rt->id, KT_ERR_NO_CONFIG, "%s: no config satisfies the constraints for this call", s->name);
  return compile_listed(es, st, out_dir, fn, user);
}
