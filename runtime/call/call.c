/* Binding a call's args to the spec's slots, and choosing and checking a
** config for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call/call.h"

static const char *dtname(kt_dtype t) { return kt_dtype_name(t) ? kt_dtype_name(t) : "no dtype"; }

/* A pointer arg: null-ness, alignment class, dtype (fixed or through its
** type variable, which the first pointer of that variable sets). */
static kt_status bind_ptr(kt__prog *p, int i, const kt_arg *a, kt__call *c, int *from) {
  const kt__spec *s = p->spec;
  const kt__param *q = &s->params[i];
  uint64_t id = p->env->id, ptr = a->v.ptr;
  c->slots[i] = ptr != 0;
  /* The alignment class: the largest of 16, 8, 4, 2, 1 dividing the
  ** address. A null pointer is never read, so it limits nothing. */
  int64_t al = 16;
  while (ptr && al > 1 && ptr % (uint64_t)al) al /= 2;
  c->slots[q->align_slot] = al;
  kt_dtype dt = a->dtype;
  if (!ptr && dt == KT_DTYPE_NONE) {
    c->slots[q->esize_slot] = q->tvar < 0 ? (int64_t)kt_dtype_size(q->dtype) : 0;
    return KT_OK;
  }
  if (q->tvar < 0) {
    if (dt != q->dtype)
      return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s) must be %s, got %s", s->name, i, q->name,
                     kt_dtype_name(q->dtype), dtname(dt));
  } else if (from[q->tvar] >= 0) {
    if (dt != c->tvals[q->tvar])
      return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s) is %s, but %s=%s from arg %d (%s)", s->name, i, q->name,
                     dtname(dt), s->types[q->tvar].name, kt_dtype_name(c->tvals[q->tvar]), from[q->tvar],
                     s->params[from[q->tvar]].name);
  } else {
    const kt__typevar *tv = &s->types[q->tvar];
    int ok = 0;
    for (int t = 0; t < tv->n; t++) ok |= tv->types[t] == dt;
    if (!ok)
      return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s): dtype %s is not one of %s's types", s->name, i, q->name,
                     kt_dtype_name(dt) ? kt_dtype_name(dt) : "(none)", tv->name);
    c->tvals[q->tvar] = dt;
    from[q->tvar] = i;
  }
  /* An element the address does not align faults on the device, and the
  ** fault leaves the context unusable: refused here instead. */
  size_t es = kt_dtype_size(dt);
  if (ptr % es)
    return kt__err(id, KT_ERR_ARGS, "%s: arg %d (%s) at 0x%llx is not aligned to its %s elements (%zu bytes)", s->name,
                   i, q->name, (unsigned long long)ptr, kt_dtype_name(dt), es);
  c->slots[q->esize_slot] = (int64_t)es;
  return KT_OK;
}

static kt_status bind_arg(kt__prog *p, int i, const kt_arg *a, kt__call *c, int *from) {
  static const int want[] = {0, KT_ARG_PTR, KT_ARG_I32, KT_ARG_I64, KT_ARG_F32};
  static const char *kname[] = {"?", "pointer", "i32", "i64", "f32"};
  const kt__param *q = &p->spec->params[i];
  if ((int)a->kind != want[q->type])
    return kt__err(p->env->id, KT_ERR_ARGS, "%s: arg %d (%s) must be %s, got %s", p->spec->name, i, q->name,
                   kname[q->type], a->kind >= 1 && a->kind <= 4 ? kname[a->kind] : "an unknown kind");
  switch (q->type) {
    case KT__P_I32: c->slots[i] = a->v.i32; return KT_OK;
    case KT__P_I64: c->slots[i] = a->v.i64; return KT_OK;
    case KT__P_F32: {
      /* The bits, for a key policy of "exact"; expressions never read it. */
      uint32_t bits;
      memcpy(&bits, &a->v.f32, 4);
      c->slots[i] = bits;
      return KT_OK;
    }
    default: return bind_ptr(p, i, a, c, from);
  }
}

/* A null pointer where the spec does not make it optional is refused,
** unless its extent is 0 elements for this call: then it is never read
** or written (torch and XLA give a tensor of no elements a null address).
** Read once the scalars are bound. */
static kt_status nulls_allowed(kt__prog *p, const kt_arg *args, const kt__call *c) {
  const kt__spec *s = p->spec;
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *q = &s->params[i];
    int64_t ext;
    if (q->type != KT__P_PTR || q->optional || args[i].v.ptr) continue;
    if (kt__expr_eval(&q->extent, c->slots, &ext) || ext != 0)
      return kt__err(p->env->id, KT_ERR_ARGS, "%s: arg %d (%s) is null but not optional", s->name, i, q->name);
  }
  return KT_OK;
}

kt_status kt__call_bind(kt__prog *p, const kt_arg *args, int nargs, kt__call *c) {
  const kt__spec *s = p->spec;
  uint64_t id = p->env->id;
  if (!args && nargs) return kt__err(id, KT_ERR_INVALID, "%s: args is NULL", s->name);
  if (nargs != s->nparams)
    return kt__err(id, KT_ERR_ARGS, "%s: %d args given, the spec has %d params", s->name, nargs, s->nparams);
  int from[KT_MAX_PARAMS];
  for (int t = 0; t < s->ntypes; t++) {
    c->tvals[t] = KT_DTYPE_NONE;
    from[t] = -1;
  }
  kt_status st;
  for (int i = 0; i < s->nparams; i++)
    if ((st = bind_arg(p, i, &args[i], c, from))) return st;
  for (int t = 0; t < s->ntypes; t++)
    if (from[t] < 0)
      return kt__err(id, KT_ERR_ARGS, "%s: type %s cannot be inferred: every pointer of that type is null", s->name,
                     s->types[t].name);
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *q = &s->params[i];
    if (q->type == KT__P_PTR && q->tvar >= 0 && !c->slots[q->esize_slot])
      c->slots[q->esize_slot] = (int64_t)kt_dtype_size(c->tvals[q->tvar]);
  }
  memcpy(&c->slots[s->builtin_slot], p->builtins, sizeof p->builtins);
  return nulls_allowed(p, args, c);
}

/* A derived constant's value for a call; one outside the values the spec
** declares is refused (no variant was planned for it). */
static kt_status derived_eval(kt__prog *p, const kt__derived *d, const int64_t *slots, int64_t *v) {
  int rc = kt__expr_eval(&d->e, slots, v);
  if (rc)
    return kt__err(p->env->id, KT_ERR_EVAL, "%s: derived.%s: %s in \"%s\"", p->spec->name, d->name,
                   kt__eval_strerror(rc), d->e.text);
  if (kt__derived_allows(d, *v)) return KT_OK;
  char list[256];
  size_t u = 0;
  for (int q = 0; q < d->n && u < sizeof list; q++)
    u += (size_t)snprintf(list + u, sizeof list - u, "%s%lld", q ? ", " : "", (long long)d->values[q]);
  return kt__err(p->env->id, KT_ERR_ARGS, "%s: derived.%s = %lld (\"%s\") is not one of its declared values %s",
                 p->spec->name, d->name, (long long)*v, d->e.text, list);
}

static kt_status call_config(kt__prog *p, kt__call *c, const int64_t *cfg, int keyed) {
  const kt__spec *s = p->spec;
  for (int i = 0; i < s->ncfields; i++) c->slots[s->cfields[i].slot] = cfg[i];
  int64_t v;
  int rc;
  for (int i = 0; i < s->nderived; i++) {
    if (keyed && !s->derived[i].uses_config) continue;
    kt_status st = derived_eval(p, &s->derived[i], c->slots, &v);
    if (st) return st;
    c->slots[s->derived[i].slot] = v;
  }
  if ((rc = kt__expr_eval(&s->smem, c->slots, &v)))
    return kt__err(p->env->id, KT_ERR_EVAL, "%s: smem: %s in \"%s\"", s->name, kt__eval_strerror(rc), s->smem.text);
  c->slots[s->smem_slot] = v;
  return KT_OK;
}

kt_status kt__call_config(kt__prog *p, kt__call *c, const int64_t *cfg) { return call_config(p, c, cfg, 0); }

kt_status kt__call_config_keyed(kt__prog *p, kt__call *c, const int64_t *cfg) { return call_config(p, c, cfg, 1); }

kt_status kt__call_check(kt__prog *p, const kt__call *c, int *bad) {
  const kt__spec *s = p->spec;
  *bad = -1;
  for (int i = 0; i < s->nconstraints; i++) {
    int64_t v;
    int rc = kt__expr_eval(&s->constraints[i].e, c->slots, &v);
    if (rc) {
      *bad = i;
      return kt__err(p->env->id, KT_ERR_EVAL, "%s: constraints[%d]: %s in \"%s\"", s->name, i, kt__eval_strerror(rc),
                     s->constraints[i].e.text);
    }
    if (!v) {
      *bad = i;
      return KT_OK;
    }
  }
  return KT_OK;
}

/* The index of a field's k-th value other than its default's (at d, of
** n): the nearest first, the lower of two as near. */
static int near_index(int d, int n, int k) {
  for (int dist = 1;; dist++) {
    if (d - dist >= 0 && k-- == 0) return d - dist;
    if (d + dist < n && k-- == 0) return d + dist;
  }
}

/* Whether a config that differs from the default in exactly the fields
** f[0..nf) satisfies every constraint for this call; cfg: the first that
** does, each field's other values tried nearest the default's first (in
** the spec's list), the last field's fastest. */
static int valid_changing(kt__prog *p, kt__call *c, const int *f, int nf, int64_t *cfg) {
  const kt__spec *s = p->spec;
  int idx[KT_MAX_CFIELDS] = {0}, at[KT_MAX_CFIELDS], bad;
  for (int j = 0; j < nf; j++) {
    if (s->cfields[f[j]].n < 2) return 0;  /* no other value to give it */
    at[j] = kt__cfield_value(&s->cfields[f[j]], s->cfields[f[j]].dflt);
  }
  for (int i = 0; i < s->ncfields; i++) cfg[i] = s->cfields[i].dflt;
  for (;;) {
    for (int j = 0; j < nf; j++) {
      const kt__cfield *cf = &s->cfields[f[j]];
      cfg[f[j]] = cf->values[near_index(at[j], cf->n, idx[j])];
    }
    if (!kt__call_config(p, c, cfg) && !kt__call_check(p, c, &bad) && bad < 0) return 1;
    int j = nf - 1;
    while (j >= 0 && ++idx[j] == s->cfields[f[j]].n - 1) idx[j--] = 0;
    if (j < 0) return 0;
  }
}

/* The next nf of n fields after f (ascending indices, in lexicographic
** order); 0 after the last. */
static int next_fields(int *f, int nf, int n) {
  int j = nf - 1;
  while (j >= 0 && f[j] == n - nf + j) j--;
  if (j < 0) return 0;
  f[j]++;
  for (int i = j + 1; i < nf; i++) f[i] = f[i - 1] + 1;
  return 1;
}

/* The default config, or else the valid config nearest it: the fewest
** fields changed (the sets of fields in the spec's order), then each
** changed field's value nearest the default's in the spec's list (the
** lower of two as near), so that a default chosen for speed keeps what it
** can where a constraint refuses it for this call. Every config is tried
** at most once. */
kt_status kt__call_fallback(kt__prog *p, kt__call *c, int64_t *cfg) {
  const kt__spec *s = p->spec;
  int f[KT_MAX_CFIELDS];
  int bad;
  kt_status st;
  for (int i = 0; i < s->ncfields; i++) cfg[i] = s->cfields[i].dflt;
  if ((st = kt__call_config(p, c, cfg)) || (st = kt__call_check(p, c, &bad))) return st;
  if (bad < 0) return KT_OK;
  const int dflt_bad = bad;
  /* A constraint that no config field moves fails for every config: no
  ** search (which tries each config of the space once, milliseconds). */
  for (int i = 0; i < s->nconstraints; i++) {
    int64_t v = 1;
    if (!s->constraints[i].uses_config && !kt__expr_eval(&s->constraints[i].e, c->slots, &v) && !v) goto none;
  }
  for (int nf = 1; nf <= s->ncfields; nf++) {
    for (int i = 0; i < nf; i++) f[i] = i;
    do {
      if (valid_changing(p, c, f, nf, cfg)) return KT_OK;
    } while (next_fields(f, nf, s->ncfields));
  }
none:
  return kt__err(p->env->id, KT_ERR_NO_CONFIG,
                 "%s: no config satisfies the constraints for this call (the default fails \"%s\")", s->name,
                 s->constraints[dflt_bad].e.text);
}

kt_status kt__call_key(kt__prog *p, kt__call *c, int64_t *key) {
  const kt__spec *s = p->spec;
  for (int i = 0; i < s->nderived; i++) {
    if (s->derived[i].uses_config) continue;
    int64_t v;
    kt_status st = derived_eval(p, &s->derived[i], c->slots, &v);
    if (st) return st;
    c->slots[s->derived[i].slot] = v;
  }
  kt__key_vector(&p->keydef, s, c->slots, c->tvals, key);
  return KT_OK;
}

int kt__call_valid(kt__prog *p, const kt__call *c, const int64_t *cfg, kt__call *out) {
  int bad = 0;
  *out = *c;
  return !kt__call_config(p, out, cfg) && !kt__call_check(p, out, &bad) && bad < 0;
}

int kt__call_config_valid(kt__prog *p, const kt__call *c, const char *json, int64_t *cfg) {
  kt__call probe;
  return !kt__config_from_json(p->spec, json, cfg) && kt__call_valid(p, c, cfg, &probe);
}

/* Parse "BLOCK=256,VEC=4" into cfg (spec order); every field exactly once. */
kt_status kt__config_parse(kt__prog *p, const char *text, int64_t *cfg) {
  const kt__spec *s = p->spec;
  uint64_t id = p->env->id;
  int seen[KT_MAX_CFIELDS] = {0};
  const char *q = text ? text : "";
  if (q[strspn(q, " \t")] == '{')
    return kt__config_from_json(s, q, cfg)
               ? kt__err(id, KT_ERR_INVALID,
                         "%s: config %s: not an object of the spec's config fields, each once, with values in its "
                         "space",
                         s->name, q)
               : KT_OK;
  /* Spaces and tabs around a name or a value are not part of it. */
  while (*(q += strspn(q, " \t"))) {
    const char *eq = strchr(q, '='), *ne = eq;
    if (!eq) return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": expected NAME=VALUE", s->name, text);
    while (ne > q && (ne[-1] == ' ' || ne[-1] == '\t')) ne--;
    int f = kt__spec_cfield(s, q, (size_t)(ne - q));
    if (f < 0)
      return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": \"%.*s\" is not a config field", s->name, text,
                     (int)(ne - q), q);
    if (seen[f])
      return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": %s given twice", s->name, text, s->cfields[f].name);
    char *end;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    const char *after = end + strspn(end, " \t");
    if (end == eq + 1 || (*after && *after != ','))
      return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": %s needs an integer", s->name, text, s->cfields[f].name);
    /* Past the range strtoll saturates: the message quotes the digits given. */
    if (errno == ERANGE || kt__cfield_value(&s->cfields[f], v) < 0)
      return kt__err(id, KT_ERR_CONSTRAINT, "%s: config \"%s\": %s=%.*s is not in the spec's space", s->name, text,
                     s->cfields[f].name, (int)(end - eq - 1), eq + 1);
    cfg[f] = v;
    seen[f] = 1;
    q = *after ? after + 1 : after;
  }
  for (int i = 0; i < s->ncfields; i++)
    if (!seen[i]) return kt__err(id, KT_ERR_INVALID, "%s: config \"%s\": %s is missing", s->name, text, s->cfields[i].name);
  return KT_OK;
}

kt_status kt__call_forced(kt__prog *p, kt__call *c, const char *config) {
  int64_t cfg[KT_MAX_CFIELDS];
  int bad;
  kt_status st;
  if ((st = kt__config_parse(p, config, cfg)) || (st = kt__call_config(p, c, cfg)) || (st = kt__call_check(p, c, &bad)))
    return st;
  if (bad >= 0)
    return kt__err(p->env->id, KT_ERR_CONSTRAINT, "%s: config %s violates constraints[%d]: %s", p->spec->name, config,
                   bad, p->spec->constraints[bad].e.text);
  return KT_OK;
}

void kt__config_format(const kt__prog *p, const int64_t *cfg, char *buf, size_t n) {
  size_t used = 0;
  if (n) buf[0] = 0;
  for (int i = 0; i < p->spec->ncfields && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s=%lld", i ? "," : "", p->spec->cfields[i].name,
                             (long long)cfg[i]);
}
