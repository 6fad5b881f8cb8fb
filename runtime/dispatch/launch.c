#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "dispatch/runtime.h"

kt_status kt__call_bind(kt_kernel *k, const kt_arg *args, int nargs,
                        kt__call *c) {
  const kt__spec *s = k->spec;
  uint64_t id = k->rt->id;
  if (!args && nargs) return kt__err(id, KT_ERR_INVALID, "%s: args is NULL", s->name);
  if (nargs != s->nparams)
    return kt__err(id, KT_ERR_ARGS, "%s: %d args given, the spec has %d params",
                   s->name, nargs, s->nparams);
  int from[KT_MAX_PARAMS];
  for (int t = 0; t < s->ntypes; t++) {
    c->tvals[t] = KT_DTYPE_NONE;
    from[t] = -1;
  }
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    const kt_arg *a = &args[i];
    static const int want[] = {0, KT_ARG_PTR, KT_ARG_I32, KT_ARG_I64, KT_ARG_F32};
    static const char *kname[] = {"?", "pointer", "i32", "i64", "f32"};
    if ((int)a->kind != want[p->type])
      return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s) must be %s, got %s", s->name, i,
                     p->name, kname[p->type],
                     a->kind >= 1 && a->kind <= 4 ? kname[a->kind] : "an unknown kind");
    switch (p->type) {
      case KT__P_I32: c->slots[i] = a->v.i32; continue;
      case KT__P_I64: c->slots[i] = a->v.i64; continue;
      case KT__P_F32: {
        /* The bits, for a key policy of "exact"; expressions never read it. */
        uint32_t bits;
        memcpy(&bits, &a->v.f32, 4);
        c->slots[i] = bits;
        continue;
      }
      default: break;
    }
    uint64_t ptr = a->v.ptr;
    if (!ptr && !p->optional)
      return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s) is null but not optional", s->name,
                     i, p->name);
    c->slots[i] = ptr != 0;
    /* The alignment class: the largest of 16, 8, 4, 2, 1 dividing the
    ** address. A null pointer is never read, so it limits nothing. */
    int64_t al = 16;
    while (ptr && al > 1 && ptr % (uint64_t)al) al /= 2;
    c->slots[p->align_slot] = al;
    kt_dtype dt = a->dtype;
    if (!ptr && dt == KT_DTYPE_NONE) {
      c->slots[p->esize_slot] = p->tvar < 0 ? (int64_t)kt_dtype_size(p->dtype) : 0;
      continue;
    }
    if (p->tvar < 0) {
      if (dt != p->dtype)
        return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s) must be %s, got %s", s->name, i,
                       p->name, kt_dtype_name(p->dtype),
                       kt_dtype_name(dt) ? kt_dtype_name(dt) : "no dtype");
    } else if (from[p->tvar] >= 0) {
      if (dt != c->tvals[p->tvar])
        return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s) is %s, but %s=%s from arg %d (%s)",
                       s->name, i, p->name, kt_dtype_name(dt) ? kt_dtype_name(dt) : "no dtype",
                       s->types[p->tvar].name, kt_dtype_name(c->tvals[p->tvar]),
                       from[p->tvar], s->params[from[p->tvar]].name);
    } else {
      const kt__typevar *tv = &s->types[p->tvar];
      int ok = 0;
      for (int t = 0; t < tv->n; t++) ok |= tv->types[t] == dt;
      if (!ok)
        return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s): dtype %s is not one of %s's types",
                       s->name, i, p->name, kt_dtype_name(dt) ? kt_dtype_name(dt) : "(none)",
                       tv->name);
      c->tvals[p->tvar] = dt;
      from[p->tvar] = i;
    }
    c->slots[p->esize_slot] = (int64_t)kt_dtype_size(dt);
  }
  for (int t = 0; t < s->ntypes; t++) {
    if (from[t] >= 0) continue;
    return kt__err(id, KT_ERR_ARGS, "%s: type %s cannot be inferred: every pointer of that type is null",
                   s->name, s->types[t].name);
  }
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    if (p->type == KT__P_PTR && p->tvar >= 0 && !c->slots[p->esize_slot])
      c->slots[p->esize_slot] = (int64_t)kt_dtype_size(c->tvals[p->tvar]);
  }
  memcpy(&c->slots[s->builtin_slot], k->builtins, sizeof k->builtins);
  c->hit = NULL;
  c->sig = NULL;
  return KT_OK;
}

/* A derived constant's value for a call; one outside the values the spec
** declares is refused (no variant was planned for it). */
static kt_status derived_eval(kt_kernel *k, const kt__derived *d, const int64_t *slots, int64_t *v) {
  int rc = kt__expr_eval(&d->e, slots, v);
  if (rc)
    return kt__err(k->rt->id, KT_ERR_EVAL, "%s: derived.%s: %s in \"%s\"", k->spec->name, d->name,
                   kt__eval_strerror(rc), d->e.text);
  if (!d->n) return KT_OK;
  for (int q = 0; q < d->n; q++)
    if (d->values[q] == *v) return KT_OK;
  char list[256];
  size_t u = 0;
  for (int q = 0; q < d->n && u < sizeof list; q++)
    u += (size_t)snprintf(list + u, sizeof list - u, "%s%lld", q ? ", " : "", (long long)d->values[q]);
  return kt__err(k->rt->id, KT_ERR_ARGS, "%s: derived.%s = %lld (\"%s\") is not one of its declared values %s",
                 k->spec->name, d->name, (long long)*v, d->e.text, list);
}

static kt_status call_config(kt_kernel *k, kt__call *c, const int64_t *cfg, int keyed) {
  const kt__spec *s = k->spec;
  for (int i = 0; i < s->ncfields; i++) c->slots[s->cfields[i].slot] = cfg[i];
  int64_t v;
  int rc;
  for (int i = 0; i < s->nderived; i++) {
    if (keyed && !s->derived[i].uses_config) continue;
    kt_status st = derived_eval(k, &s->derived[i], c->slots, &v);
    if (st) return st;
    c->slots[s->derived[i].slot] = v;
  }
  if ((rc = kt__expr_eval(&s->smem, c->slots, &v)))
    return kt__err(k->rt->id, KT_ERR_EVAL, "%s: smem: %s in \"%s\"", s->name,
                   kt__eval_strerror(rc), s->smem.text);
  c->slots[s->smem_slot] = v;
  return KT_OK;
}

kt_status kt__call_config(kt_kernel *k, kt__call *c, const int64_t *cfg) { return call_config(k, c, cfg, 0); }

kt_status kt__call_config_keyed(kt_kernel *k, kt__call *c, const int64_t *cfg) {
  return call_config(k, c, cfg, 1);
}

kt_status kt__call_check(kt_kernel *k, const kt__call *c, int *bad) {
  const kt__spec *s = k->spec;
  *bad = -1;
  for (int i = 0; i < s->nconstraints; i++) {
    int64_t v;
    int rc = kt__expr_eval(&s->constraints[i].e, c->slots, &v);
    if (rc) {
      *bad = i;
      return kt__err(k->rt->id, KT_ERR_EVAL, "%s: constraints[%d]: %s in \"%s\"", s->name, i,
                     kt__eval_strerror(rc), s->constraints[i].e.text);
    }
    if (!v) {
      *bad = i;
      return KT_OK;
    }
  }
  return KT_OK;
}

static kt_status dims(kt_kernel *k, const kt__call *c, uint32_t grid[3],
                      uint32_t block[3], uint32_t *smem) {
  const kt__spec *s = k->spec;
  uint64_t id = k->rt->id;
  static const int64_t gmax[3] = {2147483647, 65535, 65535};
  int64_t threads = 1;
  for (int i = 0; i < 3; i++) {
    int64_t g, b;
    int rc = kt__expr_eval(&s->grid[i], c->slots, &g);
    if (rc) return kt__err(id, KT_ERR_EVAL, "%s: grid[%d]: %s", s->name, i, kt__eval_strerror(rc));
    if ((rc = kt__expr_eval(&s->block[i], c->slots, &b)))
      return kt__err(id, KT_ERR_EVAL, "%s: block[%d]: %s", s->name, i, kt__eval_strerror(rc));
    if (g < 0 || g > gmax[i])
      return kt__err(id, KT_ERR_EVAL, "%s: grid[%d] = %lld is outside [0, %lld]", s->name, i,
                     (long long)g, (long long)gmax[i]);
    if (b < 1 || b > 1024)
      return kt__err(id, KT_ERR_EVAL, "%s: block[%d] = %lld is outside [1, 1024]", s->name, i,
                     (long long)b);
    threads *= b;
    grid[i] = (uint32_t)g;
    block[i] = (uint32_t)b;
  }
  if (threads > 1024)
    return kt__err(id, KT_ERR_EVAL, "%s: block has %lld threads, more than 1024", s->name,
                   (long long)threads);
  int64_t sm = c->slots[s->smem_slot];
  if (sm < 0 || sm > 0x7fffffff)
    return kt__err(id, KT_ERR_EVAL, "%s: smem = %lld bytes is invalid", s->name, (long long)sm);
  *smem = (uint32_t)sm;
  return KT_OK;
}

/* For make bench: everything kt_launch does but the driver call, to show
** ktune's own share of a launch. */
static int dry_run;
void kt__launch_dry(int on);
void kt__launch_dry(int on) { dry_run = on; }

/* The launches of the last few table hits of this thread, by kernel. A call
** whose signature (each arg's kind and dtype, each pointer's null-ness and
** alignment class, each scalar's value) equals a plan's is launched from
** the plan: its key, config, constants, grid and variant are all functions
** of the signature. Only pointer values change between such calls, the
** usual case of a framework calling one shape with new tensors. */
#define PLANS 4
typedef struct plan {
  uint64_t uid;
  int n;
  int64_t sig[2 * KT_MAX_PARAMS];
  void *fn;
  uint32_t grid[3], block[3], smem;
} plan;
static _Thread_local plan plans[PLANS];
static _Thread_local unsigned next_plan;

static void signature(const kt_arg *args, int n, int64_t *sig) {
  for (int i = 0; i < n; i++) {
    const kt_arg *a = &args[i];
    int64_t v;
    switch (a->kind) {
      case KT_ARG_PTR:
        v = !a->v.ptr ? 0 : (a->v.ptr & 15) ? (int64_t)1 << __builtin_ctzll(a->v.ptr) : 16;
        break;
      case KT_ARG_I32: v = a->v.i32; break;
      case KT_ARG_F32: {
        uint32_t bits;
        memcpy(&bits, &a->v.f32, 4);
        v = bits;
        break;
      }
      default: v = a->v.i64; break;
    }
    sig[2 * i] = (int64_t)a->kind << 16 | (int64_t)a->dtype;
    sig[2 * i + 1] = v;
  }
}

static void remember(const kt_kernel *k, const kt__call *c, void *fn, const uint32_t *grid,
                     const uint32_t *block, uint32_t smem) {
  plan *p = &plans[next_plan++ % PLANS];
  p->uid = k->uid;
  p->n = k->spec->nparams;
  memcpy(p->sig, c->sig, (size_t)(2 * p->n) * sizeof p->sig[0]);
  p->fn = fn;
  memcpy(p->grid, grid, sizeof p->grid);
  memcpy(p->block, block, sizeof p->block);
  p->smem = smem;
}

/* Launch from a plan when one matches; 1 when launched. A driver error
** falls back to the full path, which reports it with context. */
static int launch_planned(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs, const int64_t *sig) {
  for (int i = 0; i < PLANS; i++) {
    plan *p = &plans[i];
    if (p->uid != k->uid || p->n != nargs || memcmp(p->sig, sig, (size_t)(2 * nargs) * sizeof sig[0])) continue;
    char err[KT_ERRMAX];
    if (kt__dev_use(k->rt->ctx, err, sizeof err)) return 0;
    void *params[KT_MAX_PARAMS];
    for (int j = 0; j < nargs; j++) params[j] = (void *)&args[j].v;
    if ((dry_run ? 0 : kt__dev_launch(p->fn, p->grid, p->block, p->smem, stream, params, k->pdl)) == 0) return 1;
    p->uid = 0;
    return 0;
  }
  return 0;
}

kt_status kt__call_launch(kt_kernel *k, const kt__call *c, kt_stream stream, const kt_arg *args) {
  kt_runtime *rt = k->rt;
  if (!rt->have_device)
    return kt__err(rt->id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device",
                   k->spec->name);
  uint32_t grid[3], block[3], smem = 0;
  kt_status st = dims(k, c, grid, block, &smem);
  if (st) return st;
  if (!grid[0] || !grid[1] || !grid[2]) return KT_OK; /* nothing to do */
  void *fn = NULL;
  const kt__tuned *hit = c->hit;
  if (hit && hit->fn) {
    int64_t vals[KT_MAX_TARGS];
    kt__variant_vals(k, c, vals);
    if (!memcmp(vals, hit->vals, (size_t)k->spec->ntargs * sizeof vals[0])) fn = hit->fn;
  }
  if (!fn && (st = kt__variant_get(k, c, &fn))) return st;
  char err[KT_ERRMAX];
  if ((st = kt__dev_use(rt->ctx, err, sizeof err)))
    return kt__err(rt->id, st, "%s: %s", k->spec->name, err);
  void *params[KT_MAX_PARAMS];
  for (int i = 0; i < k->spec->nparams; i++) params[i] = (void *)&args[i].v;
  int r = dry_run ? 0 : kt__dev_launch(fn, grid, block, smem, stream, params, k->pdl);
  if (!r && hit && c->sig) remember(k, c, fn, grid, block, smem);
  if (r) {
    char name[512];
    kt__variant_name(k, c, ' ', name, sizeof name);
    st = kt__dev_error(r, k->pdl ? "cuLaunchKernelEx" : "cuLaunchKernel", err, sizeof err);
    return kt__err(rt->id, st, "%s: %s", name, err);
  }
  return KT_OK;
}

/* The default config, or else the first config of the space (in the order
** the spec lists values) that satisfies every constraint for this call. */
kt_status kt__call_fallback(kt_kernel *k, kt__call *c, int64_t *cfg) {
  const kt__spec *s = k->spec;
  c->hit = NULL;
  int idx[64] = {0};
  int bad;
  kt_status st;
  for (int i = 0; i < s->ncfields; i++) cfg[i] = s->cfields[i].dflt;
  if ((st = kt__call_config(k, c, cfg)) || (st = kt__call_check(k, c, &bad))) return st;
  if (bad < 0) return KT_OK;
  const int dflt_bad = bad;
  do {
    kt__spec_config_at(s, idx, cfg);
    if (!kt__call_config(k, c, cfg) && !kt__call_check(k, c, &bad) && bad < 0) return KT_OK;
  } while (kt__spec_config_next(s, idx));
  return kt__err(k->rt->id, KT_ERR_NO_CONFIG,
                 "%s: no config satisfies the constraints for this call (the default fails \"%s\")",
                 s->name, s->constraints[dflt_bad].e.text);
}

kt_status kt__call_key(kt_kernel *k, kt__call *c, int64_t *key) {
  const kt__spec *s = k->spec;
  for (int i = 0; i < s->nderived; i++) {
    if (s->derived[i].uses_config) continue;
    int64_t v;
    kt_status st = derived_eval(k, &s->derived[i], c->slots, &v);
    if (st) return st;
    c->slots[s->derived[i].slot] = v;
  }
  kt__key_vector(&k->keydef, s, c->slots, c->tvals, key);
  return KT_OK;
}

/* Choose the config of a call: the tuned table (no lock, no allocation, no
** SQLite), else the miss path; a config that a constraint refuses for this
** particular call (one on an ignored param, say) gives way to the fallback. */
kt_status kt__call_plan(kt_kernel *k, kt__call *c, kt_stream stream, const kt_arg *args, int64_t *cfg) {
  kt_status st;
  if (k->rt->mode == KT_MODE_OFF) return kt__call_fallback(k, c, cfg);
  int64_t key[KT_MAX_KEY];
  if ((st = kt__call_key(k, c, key))) return st;
  uint64_t h = XXH3_64bits(key, (size_t)k->keydef.n * sizeof key[0]);
  const kt__tuned *t = kt__tuned_find(k, key, h);
  if (!t && (st = kt__tune_miss(k, c, key, h, stream, args, &t, cfg))) return st;
  if (t) memcpy(cfg, t->cfg, (size_t)k->spec->ncfields * sizeof *cfg);
  if ((st = kt__call_config_keyed(k, c, cfg))) return st;
  c->hit = t;
  /* Constraints the key settles held when the entry was made. */
  const kt__spec *s = k->spec;
  for (int i = 0; i < s->nconstraints; i++) {
    int64_t v;
    if (t && !k->hit_checks[i]) continue;
    if (kt__expr_eval(&s->constraints[i].e, c->slots, &v) || !v) return kt__call_fallback(k, c, cfg);
  }
  return KT_OK;
}

kt_status kt_launch(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs) {
  if (!k) return KT_ERR_INVALID;
  int64_t sig[2 * KT_MAX_PARAMS];
  /* Plans skip the alias check, so only kernels that may run in place use
  ** them; and only table hits make them, never a fallback. */
  int planned = args && nargs == k->spec->nparams && k->spec->inplace && k->rt->mode != KT_MODE_OFF &&
                k->rt->have_device;
  if (planned) {
    signature(args, nargs, sig);
    if (launch_planned(k, stream, args, nargs, sig)) {
      atomic_fetch_add_explicit(&k->n_launch, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&k->n_hit, 1, memory_order_relaxed);
      return KT_OK;
    }
  }
  kt__call c;
  int64_t cfg[64];
  kt_status st;
  if ((st = kt__call_bind(k, args, nargs, &c))) return st;
  if (planned) c.sig = sig;
  if ((st = kt__call_alias(k, &c, args)))
    return st == KT_ERR_ALIAS && k->rt->stage_aliased ? kt__launch_staged(k, stream, args, nargs) : st;
  if ((st = kt__call_plan(k, &c, stream, args, cfg))) return st;
  if ((st = kt__call_launch(k, &c, stream, args))) return st;
  atomic_fetch_add_explicit(&k->n_launch, 1, memory_order_relaxed);
  if (c.hit) atomic_fetch_add_explicit(&k->n_hit, 1, memory_order_relaxed);
  return KT_OK;
}

/* Parse "BLOCK=256,VEC=4" into cfg (spec order); every field exactly once. */
kt_status kt__config_parse(kt_kernel *k, const char *text, int64_t *cfg) {
  const kt__spec *s = k->spec;
  uint64_t id = k->rt->id;
  int seen[64] = {0};
  const char *p = text ? text : "";
  while (*p) {
    const char *eq = strchr(p, '=');
    if (!eq) return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": expected NAME=VALUE", s->name, text);
    int f = kt__spec_cfield(s, p, (size_t)(eq - p));
    if (f < 0)
      return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": \"%.*s\" is not a config field",
                     s->name, text, (int)(eq - p), p);
    if (seen[f]) return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": %s given twice", s->name, text, s->cfields[f].name);
    char *end;
    long long v = strtoll(eq + 1, &end, 10);
    if (end == eq + 1 || (*end && *end != ','))
      return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": %s needs an integer", s->name, text,
                     s->cfields[f].name);
    int in = 0;
    for (int i = 0; i < s->cfields[f].n; i++) in |= s->cfields[f].values[i] == v;
    if (!in)
      return kt__err(id, KT_ERR_CONSTRAINT, "%s: config \"%s\": %s=%lld is not in the spec's space",
                     s->name, text, s->cfields[f].name, v);
    cfg[f] = v;
    seen[f] = 1;
    p = *end ? end + 1 : end;
  }
  for (int i = 0; i < s->ncfields; i++)
    if (!seen[i])
      return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": %s is missing", s->name, text,
                     s->cfields[i].name);
  return KT_OK;
}

kt_status kt__call_forced(kt_kernel *k, kt__call *c, const char *config) {
  int64_t cfg[64];
  int bad;
  kt_status st;
  if ((st = kt__config_parse(k, config, cfg)) || (st = kt__call_config(k, c, cfg)) ||
      (st = kt__call_check(k, c, &bad)))
    return st;
  if (bad >= 0)
    return kt__err(k->rt->id, KT_ERR_CONSTRAINT, "%s: config %s violates constraints[%d]: %s",
                   k->spec->name, config, bad, k->spec->constraints[bad].e.text);
  return KT_OK;
}

kt_status kt_launch_config(kt_kernel *k, kt_stream stream, const kt_arg *args,
                           int nargs, const char *config) {
  if (!k) return KT_ERR_INVALID;
  kt__call c;
  kt_status st;
  if ((st = kt__call_bind(k, args, nargs, &c)) || (st = kt__call_forced(k, &c, config)) ||
      (st = kt__call_launch(k, &c, stream, args)))
    return st;
  atomic_fetch_add_explicit(&k->n_launch, 1, memory_order_relaxed);
  return KT_OK;
}

void kt__config_format(const kt_kernel *k, const int64_t *cfg, char *buf, size_t n) {
  size_t used = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < k->spec->ncfields && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s=%lld", i ? "," : "",
                             k->spec->cfields[i].name, (long long)cfg[i]);
}

kt_status kt_kernel_default_for(kt_kernel *k, const kt_arg *args, int nargs, char *buf, size_t bufsize) {
  if (!k || !buf || !bufsize) return KT_ERR_INVALID;
  kt__call c;
  int64_t cfg[64];
  kt_status st;
  if ((st = kt__call_bind(k, args, nargs, &c)) || (st = kt__call_fallback(k, &c, cfg))) return st;
  kt__config_format(k, cfg, buf, bufsize);
  return KT_OK;
}

kt_status kt_kernel_config_for(kt_kernel *k, const kt_arg *args, int nargs, char *buf,
                               size_t bufsize) {
  if (!k || !buf || !bufsize) return KT_ERR_INVALID;
  kt__call c;
  int64_t cfg[64];
  kt_status st;
  if ((st = kt__call_bind(k, args, nargs, &c)) || (st = kt__call_alias(k, &c, args)) ||
      (st = kt__call_plan(k, &c, NULL, args, cfg)))
    return st;
  kt__config_format(k, cfg, buf, bufsize);
  return KT_OK;
}
