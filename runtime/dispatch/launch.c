/* kt_launch and its siblings: a call's config from the tuned table (or the
** miss path), then the launch; and per-thread plans that launch a repeated
** call after one comparison. */
#include <stdio.h>
#include <string.h>


#include "call/alias.h"
#include "dispatch/handles.h"

/* The launches of the last few table hits of this thread, by kernel. A call
** whose signature (each arg's kind and dtype, each pointer's null-ness and
** alignment class, each scalar's value) equals a plan's is launched from
** the plan: its key, config, constants, grid and variant are all functions
** of the signature. Only pointer values change between such calls, the
** usual case of a framework calling one shape with new tensors; so the
** plan keeps each pointer's byte length, and the alias rules are checked
** again on the new pointers. With KTUNE_MODE=off the fallback is such a
** function too (the default, else the valid config nearest it: without a
** plan, a search of the space at every launch), so it makes plans as
** well; they launch without counting as hits. */
#define PLANS 4
typedef struct plan {
  uint64_t uid;
  unsigned gen;               /* the kernel's choices when it was made */
  int hit;                    /* from a table hit, not a fallback */
  int n, nptr;
  int64_t sig[2 * KT_MAX_PARAMS];
  kt__range r[KT_MAX_PARAMS]; /* the pointers' params, lengths, written */
  kt__dims d;
} plan;
static _Thread_local plan plans[PLANS];
static _Thread_local unsigned next_plan;

static void signature(const kt_arg *args, int n, int64_t *sig) {
  for (int i = 0; i < n; i++) {
    const kt_arg *a = &args[i];
    int64_t v;
    switch (a->kind) {
      case KT_ARG_PTR: v = !a->v.ptr ? 0 : (a->v.ptr & 15) ? (int64_t)1 << __builtin_ctzll(a->v.ptr) : 16; break;
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

static void remember(const kt_kernel *k, unsigned gen, int hit, const int64_t *sig, const kt__dims *d,
                     const kt__range *r, int nr) {
  plan *p = &plans[next_plan++ % PLANS];
  p->uid = k->uid;
  p->gen = gen;
  p->hit = hit;
  p->n = k->p.spec->nparams;
  memcpy(p->sig, sig, (size_t)(2 * p->n) * sizeof p->sig[0]);
  p->nptr = nr;
  for (int i = 0; i < nr; i++)
    p->r[i] = (kt__range){.end = r[i].end - r[i].start, .param = r[i].param, .written = r[i].written,
                          .consumed = r[i].consumed};
  p->d = *d;
}

/* The alias rules on a plan's lengths at the new pointers. */
static int aliases_allowed(const kt_kernel *k, plan *p, const kt_arg *args) {
  kt__range r[KT_MAX_PARAMS];
  for (int i = 0; i < p->nptr; i++) {
    uint64_t at = args[p->r[i].param].v.ptr, len = p->r[i].end;
    r[i] = p->r[i];
    r[i].start = at;
    r[i].end = len > UINT64_MAX - at ? UINT64_MAX : at + len;
  }
  for (int i = 0; i < p->nptr; i++)
    if (kt__alias_partner(r, p->nptr, i, k->p.spec->inplace) >= 0) return 0;
  return 1;
}

/* Launch from a plan when one matches: 0 when not launched, else 1, with
** *hit whether the plan came from a table hit. A driver error falls back
** to the full path, which reports it with context. */
static int launch_planned(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs, const int64_t *sig,
                          int *hit) {
  for (int i = 0; i < PLANS; i++) {
    plan *p = &plans[i];
    if (p->uid != k->uid || p->n != nargs || memcmp(p->sig, sig, (size_t)(2 * nargs) * sizeof sig[0])) continue;
    /* A choice replaced since (async mode) makes the plan stale. */
    if (p->gen != atomic_load_explicit(&k->gen, memory_order_relaxed)) return p->uid = 0, 0;
    /* A refused or staged call takes the full path, which says why. */
    if (!aliases_allowed(k, p, args)) return 0;
    char err[KT_ERRMAX];
    if (kt__dev_use(k->rt->env.ctx, err, sizeof err)) return 0;
    void *params[KT_MAX_PARAMS];
    for (int j = 0; j < nargs; j++) params[j] = (void *)&args[j].v;
    *hit = p->hit;
    if (kt__dev_launch(p->d.fn, p->d.grid, p->d.block, p->d.smem, stream, params, k->p.pdl) == 0) return 1;
    p->uid = 0;
    return 0;
  }
  return 0;
}

/* Choose the config of a call: the tuned table (no lock, no allocation, no
** SQLite), else the miss path; a config that a constraint refuses for this
** particular call (one on an ignored param, say) gives way to the fallback. */
kt_status kt__call_plan(kt_kernel *k, kt__call *c, kt_stream stream, const kt_arg *args, int64_t *cfg,
                        const kt__choice **hit, kt__report *rep) {
  kt__prog *p = &k->p;
  kt_status st;
  *hit = NULL;
  if (k->rt->mode == KT_MODE_OFF) return kt__call_fallback(p, c, cfg);
  int64_t key[KT_MAX_KEY];
  if ((st = kt__call_key(p, c, key))) return st;
  uint64_t h = kt__key_hash(k, key);
  const kt__tuned *t = kt__tuned_find(k, key, h);
  if (!t && (st = kt__miss(k, c, key, h, stream, args, &t, cfg, rep))) return st;
  const kt__choice *ch = t ? kt__tuned_choice(t) : NULL;
  if (ch) memcpy(cfg, ch->cfg, (size_t)p->spec->ncfields * sizeof *cfg);
  if ((st = kt__call_config_keyed(p, c, cfg))) return st;
  /* Constraints the key settles held when the entry was made. */
  const kt__spec *s = p->spec;
  for (int i = 0; i < s->nconstraints; i++) {
    int64_t v;
    if (ch && !k->hit_checks[i]) continue;
    if (kt__expr_eval(&s->constraints[i].e, c->slots, &v) || !v) return kt__call_fallback(p, c, cfg);
  }
  *hit = ch;
  return KT_OK;
}

/* The function of a hit's variant when the call's template values are the
** entry's, so that the launch skips the variant table. */
static void *hit_fn(const kt_kernel *k, const kt__call *c, const kt__choice *hit) {
  if (!hit || !hit->fn) return NULL;
  int64_t vals[KT_MAX_TARGS];
  kt__variant_vals(&k->p, c, vals);
  return memcmp(vals, hit->vals, (size_t)k->p.spec->ntargs * sizeof vals[0]) ? NULL : hit->fn;
}

/* Launch a bound call whose args pass the alias rules: its config, then
** the driver; a table hit with a signature becomes this thread's plan,
** with the call's ranges r. */
static kt_status launch_bound(kt_kernel *k, kt__call *c, kt_stream stream, const kt_arg *args, const int64_t *sig,
                              const kt__range *r, int nr) {
  int64_t cfg[KT_MAX_CFIELDS];
  const kt__choice *hit;
  kt__dims d;
  kt_status st;
  /* Read before the choice: a replacement after it leaves the plan stale. */
  unsigned gen = atomic_load_explicit(&k->gen, memory_order_acquire);
  if ((st = kt__call_plan(k, c, stream, args, cfg, &hit, NULL)) ||
      (st = kt__call_launch(&k->p, c, hit_fn(k, c, hit), stream, args, &d)))
    return st;
  if (!d.grid[0]) return KT_OK; /* a grid of 0: nothing launched */
  /* A fallback is this call's for good only where nothing is ever tuned. */
  int off = k->rt->mode == KT_MODE_OFF;
  if ((hit || off) && sig) remember(k, gen, hit != NULL, sig, &d, r, nr);
  atomic_fetch_add_explicit(&k->n_launch, 1, memory_order_relaxed);
  if (hit) atomic_fetch_add_explicit(&k->n_hit, 1, memory_order_relaxed);
  return KT_OK;
}

/* Whether a call whose ranges are r writes no byte: every written arg's
** extent is 0 (a batch of no rows). Such a call launches nothing and tunes
** nothing: no config could change what it does. */
static int writes_nothing(const kt_kernel *k, const kt__range *r, int nr) {
  for (int i = 0; i < nr; i++)
    if (r[i].written && r[i].end > r[i].start) return 0;
  return k->rt->env.have_device; /* without one, the launch says so */
}

kt_status kt_launch(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs) {
  if (!k) return kt__misuse(NULL, "kt_launch", "k is NULL");
  int64_t sig[2 * KT_MAX_PARAMS];
  /* Table hits make plans, and fallbacks where the mode is off. */
  int planned = args && nargs == k->p.spec->nparams && k->rt->env.have_device, hit = 0;
  if (planned) {
    signature(args, nargs, sig);
    if (launch_planned(k, stream, args, nargs, sig, &hit)) {
      atomic_fetch_add_explicit(&k->n_launch, 1, memory_order_relaxed);
      if (hit) atomic_fetch_add_explicit(&k->n_hit, 1, memory_order_relaxed);
      return KT_OK;
    }
  }
  kt__call c;
  kt__range r[KT_MAX_PARAMS];
  int nr;
  /* Past a table hit, a launch may tune and take locks a callback's
  ** caller holds. */
  kt_status st = kt__reentry(k->rt, "kt_launch", KT__CB_LOCKED);
  if (st || (st = kt__call_bind(&k->p, args, nargs, &c))) return st;
  st = kt__call_alias(&k->p, &c, args, r, &nr);
  if (!st && writes_nothing(k, r, nr)) return KT_OK;
  if (st != KT_ERR_ALIAS || !k->rt->stage_aliased)
    return st ? st : launch_bound(k, &c, stream, args, planned ? sig : NULL, r, nr);
  kt__staging sg;
  st = kt__stage_begin(k, &c, args, stream, &sg);
  if (!st) st = launch_bound(k, &c, stream, sg.args, NULL, NULL, 0);
  return kt__stage_end(k, &sg, stream, st);
}

/* A forced config obeys the alias rules as kt_launch does: a call they
** refuse is refused, or staged where the runtime stages such calls. The
** args are checked first, then the config, then the rules. */
kt_status kt_launch_config(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs, const char *config) {
  if (!k) return kt__misuse(NULL, "kt_launch_config", "k is NULL");
  kt__call c;
  kt__range r[KT_MAX_PARAMS];
  int nr;
  kt__dims d = {0};
  kt_status st = kt__reentry(k->rt, "kt_launch_config", KT__CB_LOCKED);
  if (!st) st = kt__call_bind(&k->p, args, nargs, &c);
  if (!st) st = kt__call_ranges(&k->p, &c, args, r, &nr);
  if (!st) st = kt__call_forced(&k->p, &c, config);
  if (!st) st = kt__alias_refuse(&k->p, r, nr);
  if (!st && writes_nothing(k, r, nr)) return KT_OK;
  if (!st) {
    st = kt__call_launch(&k->p, &c, NULL, stream, args, &d);
  } else if (st == KT_ERR_ALIAS && k->rt->stage_aliased) {
    kt__staging sg;
    st = kt__stage_begin(k, &c, args, stream, &sg);
    if (!st) st = kt__call_launch(&k->p, &c, NULL, stream, sg.args, &d);
    st = kt__stage_end(k, &sg, stream, st);
  }
  if (st) return st;
  if (d.grid[0]) atomic_fetch_add_explicit(&k->n_launch, 1, memory_order_relaxed);
  return KT_OK;
}

/* cfg as "BLOCK=256,VEC=4" into the caller's buf, whole or not at all. */
static kt_status config_out(kt_kernel *k, const char *fn, const int64_t *cfg, char *buf, size_t bufsize) {
  char text[KT_CONFIG_JSON_MAX];
  kt__config_format(&k->p, cfg, text, sizeof text);
  return kt__copy_out(k->rt, fn, "config", text, buf, bufsize);
}

kt_status kt_kernel_default_for(kt_kernel *k, const kt_arg *args, int nargs, char *buf, size_t bufsize) {
  if (!k || !buf || !bufsize)
    return kt__misuse(kt__rt_of(k), "kt_kernel_default_for", !k ? "k is NULL" : "buf is NULL or bufsize is 0");
  kt__call c;
  int64_t cfg[KT_MAX_CFIELDS];
  kt_status st;
  if ((st = kt__call_bind(&k->p, args, nargs, &c)) || (st = kt__call_fallback(&k->p, &c, cfg))) return st;
  return config_out(k, "kt_kernel_default_for", cfg, buf, bufsize);
}

kt_status kt_kernel_config_for(kt_kernel *k, const kt_arg *args, int nargs, char *buf, size_t bufsize) {
  if (!k || !buf || !bufsize)
    return kt__misuse(kt__rt_of(k), "kt_kernel_config_for", !k ? "k is NULL" : "buf is NULL or bufsize is 0");
  kt__call c;
  int64_t cfg[KT_MAX_CFIELDS];
  const kt__choice *hit;
  kt__range r[KT_MAX_PARAMS];
  int nr;
  kt_status st;
  if ((st = kt__reentry(k->rt, "kt_kernel_config_for", KT__CB_LOCKED)) ||
      (st = kt__call_bind(&k->p, args, nargs, &c)) || (st = kt__call_alias(&k->p, &c, args, r, &nr)) ||
      (st = kt__call_plan(k, &c, NULL, args, cfg, &hit, NULL)))
    return st;
  return config_out(k, "kt_kernel_config_for", cfg, buf, bufsize);
}
