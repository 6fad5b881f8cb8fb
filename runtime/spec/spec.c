#include "spec/spec.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/fileio.h"
#include "cache/codec.h"
#include "spec/jsoncheck.h"
#include "spec/source.h"

typedef struct ctx {
  const char *file;
  const cJSON *root;
  kt__spec *s;
  char *err;
  size_t errlen;
  kt_status st;
  int limit;       /* expressions see slots below this */
  const char *where;
} ctx;

static kt_status bad(ctx *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kt_status bad(ctx *c, const char *field, const char *fmt, ...) {
  if (c->st != KT_OK) return c->st;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->err, c->errlen, "%s: %s: %s", c->file, field, msg);
  c->st = KT_ERR_SPEC;
  return c->st;
}

static kt_status nomem(ctx *c) {
  if (c->st == KT_OK) {
    snprintf(c->err, c->errlen, "%s: out of memory", c->file);
    c->st = KT_ERR_NOMEM;
  }
  return c->st;
}

static int by_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* An identifier of at most KT__NAME_MAX characters (a key's and a config's
** JSON then fit their bounds: cache/codec.h). */
static int is_ident(const char *s) {
  if (!s || !(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
    return 0;
  const char *p = s;
  for (; *p; p++)
    if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          (*p >= '0' && *p <= '9')))
      return 0;
  return p - s <= KT__NAME_MAX;
}

/* Why name is not an identifier: too long, or not one at all. */
static kt_status not_ident(ctx *c, const char *field, const char *name) {
  if (name && strlen(name) > KT__NAME_MAX)
    return bad(c, field, "'%.*s...' is longer than %d characters", 16, name, KT__NAME_MAX);
  return bad(c, field, "'%s' is not an identifier", name ? name : "");
}

static const char *builtin_names[KT__NBUILTINS] = {"num_sms", "cc", "max_smem",
                                                   "l2_bytes"};
static const char *reserved[] = {"cdiv", "min", "max", "pow2ceil", "log2",
                                 "align_up", "align", "esize", "smem"};

static int find_slot(const kt__spec *s, const char *name, size_t len) {
  for (int i = 0; i < s->nslots; i++)
    if (s->slot_names[i] && strlen(s->slot_names[i]) == len &&
        !strncmp(s->slot_names[i], name, len))
      return i;
  return -1;
}

int kt__spec_param(const kt__spec *s, const char *name) {
  for (int i = 0; i < s->nparams; i++)
    if (!strcmp(s->params[i].name, name)) return i;
  return -1;
}

void kt__spec_config_at(const kt__spec *s, const int *idx, int64_t *cfg) {
  for (int i = 0; i < s->ncfields; i++) cfg[i] = s->cfields[i].values[idx[i]];
}

int kt__spec_config_next(const kt__spec *s, int *idx) {
  int i = s->ncfields - 1;
  while (i >= 0 && ++idx[i] == s->cfields[i].n) idx[i--] = 0;
  return i >= 0;
}

int kt__spec_cfield(const kt__spec *s, const char *name, size_t len) {
  for (int i = 0; i < s->ncfields; i++)
    if (strlen(s->cfields[i].name) == len && !strncmp(s->cfields[i].name, name, len))
      return i;
  return -1;
}

int kt__cfield_value(const kt__cfield *f, int64_t v) {
  for (int i = 0; i < f->n; i++)
    if (f->values[i] == v) return i;
  return -1;
}

int kt__derived_allows(const kt__derived *d, int64_t v) {
  for (int i = 0; i < d->n; i++)
    if (d->values[i] == v) return 1;
  return !d->n;
}

/* A new name for the slot namespace: an identifier, unique, not reserved. */
static kt_status new_name(ctx *c, const char *field, const char *name) {
  if (!is_ident(name)) return not_ident(c, field, name);
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
    if (!strcmp(reserved[i], name))
      return bad(c, field, "'%s' is reserved", name);
  for (int i = 0; i < KT__NBUILTINS; i++)
    if (!strcmp(builtin_names[i], name))
      return bad(c, field, "'%s' is a builtin", name);
  for (int i = 0; i < c->s->ntypes; i++)
    if (!strcmp(c->s->types[i].name, name))
      return bad(c, field, "'%s' is defined twice", name);
  if (find_slot(c->s, name, strlen(name)) >= 0)
    return bad(c, field, "'%s' is defined twice", name);
  return KT_OK;
}

static int resolve(void *user, int kind, const char *name, size_t len,
                   char *why, size_t whylen) {
  ctx *c = user;
  kt__spec *s = c->s;
  int slot = find_slot(s, name, len);
  if (slot < 0 && len == 4 && !strncmp(name, "smem", 4)) {
    if (s->smem_slot < 0) {
      snprintf(why, whylen, "'smem' cannot be used in %s", c->where);
      return -2;
    }
    slot = s->smem_slot;
  }
  if (slot < 0) return -1;
  if (slot < s->nparams) {
    kt__param *p = &s->params[slot];
    if (kind != KT__SYM_VALUE) {
      if (p->type != KT__P_PTR) return -1;
      return kind == KT__SYM_ALIGN ? p->align_slot : p->esize_slot;
    }
    if (p->type == KT__P_F32) {
      snprintf(why, whylen, "f32 param '%s' cannot be used in an integer expression",
               p->name);
      return -2;
    }
  } else if (kind != KT__SYM_VALUE) {
    return -1;
  }
  if (slot >= c->limit) {
    snprintf(why, whylen, "'%.*s' cannot be used in %s", (int)len, name,
             c->where);
    return -2;
  }
  return slot;
}

/* An integer a double holds exactly: a larger one in the text (2^53 + 1,
** say) reads as another number, so 2^53 and beyond are refused. */
static int get_int(const cJSON *j, int64_t *out) {
  if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || fabs(j->valuedouble) >= 9007199254740992.0)
    return 0;
  *out = (int64_t)j->valuedouble;
  return 1;
}

static kt_status parse_text(ctx *c, const char *field, const char *text,
                           kt__expr *e);

static kt_status parse_expr(ctx *c, const char *field, const cJSON *j,
                            kt__expr *e) {
  char buf[32];
  int64_t v;
  if (cJSON_IsString(j)) return parse_text(c, field, j->valuestring, e);
  if (get_int(j, &v)) {
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return parse_text(c, field, buf, e);
  }
  return bad(c, field, "expected an expression (a string, or an integer below 2^53)");
}


static kt_status check_fields(ctx *c, const cJSON *obj, const char *field,
                              const char *const *allowed) {
  for (const cJSON *it = obj->child; it; it = it->next) {
    int ok = 0;
    for (int i = 0; allowed[i] && !ok; i++) ok = !strcmp(allowed[i], it->string);
    if (!ok) return bad(c, field, "unknown field \"%s\"", it->string);
  }
  return KT_OK;
}

static kt_status parse_types(ctx *c, const cJSON *types) {
  if (!types) return KT_OK;
  if (!cJSON_IsObject(types)) return bad(c, "types", "expected an object");
  for (const cJSON *t = types->child; t; t = t->next) {
    char f[160];
    snprintf(f, sizeof f, "types.%s", t->string);
    if (new_name(c, f, t->string)) return c->st;
    if (c->s->ntypes == KT_MAX_PARAMS) return bad(c, f, "too many type variables");
    kt__typevar *tv = &c->s->types[c->s->ntypes];
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) == 0)
      return bad(c, f, "expected a non-empty array of dtype names");
    if (cJSON_GetArraySize(t) > KT_MAX_TYPES)
      return bad(c, f, "at most %d dtypes", KT_MAX_TYPES);
    if (!(tv->name = kt__strdup(t->string))) return nomem(c);
    c->s->ntypes++;
    for (const cJSON *d = t->child; d; d = d->next) {
      kt_dtype dt;
      if (!cJSON_IsString(d) || kt_dtype_parse(d->valuestring, &dt))
        return bad(c, f, "unknown dtype %s%s%s", cJSON_IsString(d) ? "\"" : "",
                   cJSON_IsString(d) ? d->valuestring : "(not a string)",
                   cJSON_IsString(d) ? "\"" : "");
      for (int k = 0; k < tv->n; k++)
        if (tv->types[k] == dt) return bad(c, f, "dtype \"%s\" listed twice", d->valuestring);
      tv->types[tv->n++] = dt;
    }
  }
  return KT_OK;
}

static const char *param_fields[] = {"name", "type", "dtype", "access", "extent",
                                     "optional", "key", "init", "atol", "rtol",
                                     "specialize", "tune_at", "doc", NULL};

typedef struct named {
  const char *name;
  int value;
} named;

static const named param_types[] = {
    {"ptr", KT__P_PTR}, {"i32", KT__P_I32}, {"i64", KT__P_I64}, {"f32", KT__P_F32}, {NULL, 0}};
static const named key_policies[] = {
    {"exact", KT__KEY_EXACT}, {"pow2", KT__KEY_POW2}, {"ignore", KT__KEY_IGNORE}, {NULL, 0}};
static const named accesses[] = {
    {"in", KT__IN}, {"out", KT__OUT}, {"inout", KT__INOUT}, {"consumed", KT__CONSUMED}, {NULL, 0}};

/* The value named by string item j in table t; -1 when j is not a string or
** names none of them. */
static int lookup(const named *t, const cJSON *j) {
  for (; cJSON_IsString(j) && t->name; t++)
    if (!strcmp(t->name, j->valuestring)) return t->value;
  return -1;
}

/* "key", "init" and "specialize": the fields any param may have. */
static kt_status parse_common(ctx *c, const cJSON *j, const char *f, kt__param *p) {
  const cJSON *key = cJSON_GetObjectItemCaseSensitive(j, "key");
  if (key) {
    if (p->type == KT__P_PTR)
      return bad(c, f, "\"key\" applies to scalars; pointers enter the key by null-ness and alignment");
    if ((p->key = lookup(key_policies, key)) < 0) return bad(c, f, "\"key\" must be \"exact\", \"pow2\" or \"ignore\"");
    if (p->type == KT__P_F32 && p->key == KT__KEY_POW2) return bad(c, f, "\"key\": \"pow2\" needs an integer param");
  }
  const cJSON *init = cJSON_GetObjectItemCaseSensitive(j, "init");
  if (init) {
    if (!cJSON_IsString(init)) return bad(c, f, "\"init\" must be a string");
    if (!(p->init = kt__strdup(init->valuestring))) return nomem(c);
  }
  const cJSON *spz = cJSON_GetObjectItemCaseSensitive(j, "specialize");
  if (!spz) return KT_OK;
  if (!cJSON_IsBool(spz)) return bad(c, f, "\"specialize\" must be true or false");
  p->specialize = cJSON_IsTrue(spz);
  if (p->specialize && p->type != KT__P_I32 && p->type != KT__P_I64)
    return bad(c, f, "\"specialize\" applies to integer params");
  /* A compile-time value must be in the key, or two values would share one
  ** tuning and one cached variant. */
  if (p->specialize && p->key != KT__KEY_EXACT) return bad(c, f, "a specialized param must have \"key\": \"exact\"");
  return KT_OK;
}

/* What only a pointer has: its dtype, access, optional-ness, tolerances. */
static kt_status parse_pointer(ctx *c, const cJSON *j, const char *f, kt__param *p) {
  const kt__spec *s = c->s;
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  if (!cJSON_IsString(dt)) return bad(c, f, "missing \"dtype\"");
  for (int t = 0; t < s->ntypes; t++)
    if (!strcmp(s->types[t].name, dt->valuestring)) p->tvar = t;
  if (p->tvar < 0 && kt_dtype_parse(dt->valuestring, &p->dtype))
    return bad(c, f, "\"dtype\": \"%s\" is neither a dtype nor a type variable", dt->valuestring);
  if ((int)(p->access = lookup(accesses, cJSON_GetObjectItemCaseSensitive(j, "access"))) < 0)
    return bad(c, f, "\"access\" must be \"in\", \"out\", \"inout\" or \"consumed\"");
  const cJSON *opt = cJSON_GetObjectItemCaseSensitive(j, "optional");
  if (opt && !cJSON_IsBool(opt)) return bad(c, f, "\"optional\" must be true or false");
  p->optional = cJSON_IsTrue(opt);
  static const char *tolname[2] = {"atol", "rtol"};
  double *tol[2] = {&p->atol, &p->rtol};
  for (int k = 0; k < 2; k++) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, tolname[k]);
    if (!t) continue;
    if (!cJSON_IsNumber(t) || t->valuedouble < 0) return bad(c, f, "\"%s\" must be a number >= 0", tolname[k]);
    if (!KT__COMPARED(p->access))
      return bad(c, f, "\"%s\" applies to outputs; this param is %s", tolname[k],
                 p->access == KT__IN ? "an input" : "consumed (never compared)");
    *tol[k] = t->valuedouble;
  }
  return KT_OK;
}

/* Param i from object j: its name, type and slot, then its fields. */
static kt_status parse_param(ctx *c, const cJSON *j, int i) {
  kt__spec *s = c->s;
  char f[64];
  snprintf(f, sizeof f, "params[%d]", i);
  if (!cJSON_IsObject(j)) return bad(c, f, "expected an object");
  if (check_fields(c, j, f, param_fields)) return c->st;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
  if (!cJSON_IsString(name)) return bad(c, f, "missing \"name\"");
  if (new_name(c, f, name->valuestring)) return c->st;
  kt__param *p = &s->params[i];
  p->tvar = -1;
  p->atol = p->rtol = -1;
  if (!(p->name = kt__strdup(name->valuestring))) return nomem(c);
  p->slot = i;
  s->slot_names[i] = p->name;
  s->nparams = s->nslots = i + 1;
  snprintf(f, sizeof f, "params[%d] (%s)", i, p->name);
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
  if ((p->type = lookup(param_types, type)) < 0) {
    const char *tn = cJSON_IsString(type) ? type->valuestring : "";
    return bad(c, f, "\"type\" must be \"ptr\", \"i32\", \"i64\" or \"f32\"%s%s%s", *tn ? ", not \"" : "", tn,
               *tn ? "\"" : "");
  }
  if (parse_common(c, j, f, p)) return c->st;
  if (p->type == KT__P_PTR) return parse_pointer(c, j, f, p);
  static const char *ptronly[] = {"dtype", "access", "extent", "optional", "atol", "rtol"};
  for (size_t k = 0; k < sizeof ptronly / sizeof ptronly[0]; k++)
    if (cJSON_GetObjectItemCaseSensitive(j, ptronly[k]))
      return bad(c, f, "\"%s\" applies to pointer params only", ptronly[k]);
  return KT_OK;
}

/* First pass over params: names, types and slots, so that extents may name
** any scalar param; then the hidden slots align(p) and esize(p) of each
** pointer, and the builtins. */
static kt_status parse_params(ctx *c, const cJSON *params) {
  kt__spec *s = c->s;
  if (!cJSON_IsArray(params) || cJSON_GetArraySize(params) == 0) return bad(c, "params", "expected a non-empty array");
  if (cJSON_GetArraySize(params) > KT_MAX_PARAMS) return bad(c, "params", "at most %d params", KT_MAX_PARAMS);
  int i = 0;
  for (const cJSON *j = params->child; j; j = j->next, i++)
    if (parse_param(c, j, i)) return c->st;
  for (int k = 0; k < s->nparams; k++) {
    kt__param *p = &s->params[k];
    if (p->type != KT__P_PTR) continue;
    if (s->nslots + 2 > KT_MAX_SLOTS) return bad(c, "params", "too many params");
    p->align_slot = s->nslots++;
    p->esize_slot = s->nslots++;
  }
  s->builtin_slot = s->nslots;
  for (int k = 0; k < KT__NBUILTINS; k++) s->slot_names[s->nslots++] = builtin_names[k];
  return KT_OK;
}

static kt_status parse_extents(ctx *c, const cJSON *params) {
  int i = 0;
  c->limit = c->s->builtin_slot;
  c->where = "an extent (extents may use scalar params only)";
  for (const cJSON *j = params->child; j; j = j->next, i++) {
    kt__param *p = &c->s->params[i];
    if (p->type != KT__P_PTR) continue;
    char f[96];
    snprintf(f, sizeof f, "params[%d] (%s).extent", i, p->name);
    const cJSON *ext = cJSON_GetObjectItemCaseSensitive(j, "extent");
    if (!ext) return bad(c, f, "missing: a pointer param needs its extent in elements");
    if (parse_expr(c, f, ext, &p->extent)) return c->st;
  }
  return KT_OK;
}

/* "tune_at": where a size the key leaves out decides which config is
** fastest (rows: one row times launch latency, not the config), the tuner
** times the key at this value instead of the first call's. */
static kt_status parse_tune_at(ctx *c, const cJSON *params) {
  int i = 0;
  c->limit = c->s->builtin_slot + KT__NBUILTINS;
  c->where = "tune_at (it may use params and builtins only)";
  for (const cJSON *j = params->child; j; j = j->next, i++) {
    kt__param *p = &c->s->params[i];
    const cJSON *at = cJSON_GetObjectItemCaseSensitive(j, "tune_at");
    if (!at) continue;
    char f[96];
    snprintf(f, sizeof f, "params[%d] (%s).tune_at", i, p->name);
    if (p->type != KT__P_I32 && p->type != KT__P_I64) return bad(c, f, "applies to integer scalar params only");
    if (p->key != KT__KEY_IGNORE)
      return bad(c, f, "applies to a size the key ignores (\"key\": \"ignore\"); this one is in the key");
    if (parse_expr(c, f, at, &p->tune_at)) return c->st;
  }
  return KT_OK;
}

/* "init", once every param's name is known (permutation(n) may name one). */
static kt_status parse_init(ctx *c, int i, kt__param *p) {
  char f[96];
  snprintf(f, sizeof f, "params[%d] (%s).init", i, p->name);
  if (kt__gen_parse(p->init, &p->gen))
    return bad(c, f,
               "\"%s\" is not a generator (randn, uniform(a,b), ones, zeros, arange, permutation(n), mask(p), or a "
               "number)",
               p->init);
  if (p->type != KT__P_PTR && p->gen.kind != KT__G_NUMBER)
    return bad(c, f, "a scalar's init is a number (its value when a shape leaves it out), not \"%s\"", p->init);
  if (p->gen.kind != KT__G_PERMUTATION) return KT_OK;
  int q = kt__spec_param(c->s, p->gen.arg);
  char *end;
  long long n = strtoll(p->gen.arg, &end, 10);
  if (q < 0 && (*end || n <= 0))
    return bad(c, f, "permutation(%s): expected a number > 0 or an integer scalar param", p->gen.arg);
  if (q >= 0 && c->s->params[q].type != KT__P_I32 && c->s->params[q].type != KT__P_I64)
    return bad(c, f, "permutation(%s): %s is not an integer scalar param", p->gen.arg, p->gen.arg);
  return KT_OK;
}

static kt_status parse_inits(ctx *c) {
  for (int i = 0; i < c->s->nparams; i++)
    if (c->s->params[i].init && parse_init(c, i, &c->s->params[i])) return c->st;
  return KT_OK;
}

static kt_status parse_config(ctx *c, const cJSON *cfg, const cJSON *dflt) {
  kt__spec *s = c->s;
  if (!cJSON_IsObject(cfg) || !cfg->child)
    return bad(c, "config", "expected an object of tunable fields, each a list of integers");
  int n = cJSON_GetArraySize(cfg);
  if (!(s->cfields = kt__calloc((size_t)n, sizeof *s->cfields))) return nomem(c);
  for (const cJSON *j = cfg->child; j; j = j->next) {
    char f[160];
    snprintf(f, sizeof f, "config.%s", j->string);
    if (new_name(c, f, j->string)) return c->st;
    if (s->nslots == KT_MAX_SLOTS) return bad(c, f, "too many names");
    kt__cfield *cf = &s->cfields[s->ncfields];
    if (!(cf->name = kt__strdup(j->string))) return nomem(c);
    s->ncfields++;
    cf->slot = s->nslots;
    s->slot_names[s->nslots++] = cf->name;
    int m = cJSON_IsArray(j) ? cJSON_GetArraySize(j) : 0;
    if (m == 0) return bad(c, f, "expected a non-empty array of integers");
    if (m > 64) return bad(c, f, "at most 64 values");
    if (!(cf->values = kt__calloc((size_t)m, sizeof *cf->values))) return nomem(c);
    for (const cJSON *v = j->child; v; v = v->next) {
      int64_t x;
      if (!get_int(v, &x)) return bad(c, f, "values must be integers below 2^53");
      for (int k = 0; k < cf->n; k++)
        if (cf->values[k] == x) return bad(c, f, "value %lld listed twice", (long long)x);
      cf->values[cf->n++] = x;
    }
  }
  /* A tuning lists every config to keep those valid for its call. */
  int64_t configs = 1;
  for (int i = 0; i < s->ncfields && configs <= KT_MAX_CONFIGS; i++) configs *= s->cfields[i].n;
  if (configs > KT_MAX_CONFIGS)
    return bad(c, "config", "the space holds more than %d configs (the product of the fields' value counts)",
               KT_MAX_CONFIGS);
  if (!cJSON_IsObject(dflt))
    return bad(c, "default", "missing: give the default config, one value per config field");
  for (const cJSON *j = dflt->child; j; j = j->next)
    if (kt__spec_cfield(s, j->string, strlen(j->string)) < 0)
      return bad(c, "default", "\"%s\" is not a config field", j->string);
  for (int i = 0; i < s->ncfields; i++) {
    kt__cfield *cf = &s->cfields[i];
    char f[160];
    snprintf(f, sizeof f, "default.%s", cf->name);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(dflt, cf->name);
    if (!v) return bad(c, f, "missing");
    if (!get_int(v, &cf->dflt)) return bad(c, f, "must be an integer below 2^53");
    int in = 0;
    for (int k = 0; k < cf->n; k++) in |= cf->values[k] == cf->dflt;
    if (!in) return bad(c, f, "%lld is not in config.%s", (long long)cf->dflt, cf->name);
  }
  return KT_OK;
}

/* Whether e reads a config field, directly or through one of the first nd
** derived constants (or smem, which a config sets). */
static int uses_config(const kt__spec *s, const kt__expr *e, int nd) {
  for (int k = 0; k < s->ncfields; k++)
    if (kt__expr_uses(e, s->cfields[k].slot)) return 1;
  for (int k = 0; k < nd; k++)
    if (kt__expr_uses(e, s->derived[k].slot) && s->derived[k].uses_config) return 1;
  return s->smem_slot >= 0 && kt__expr_uses(e, s->smem_slot);
}

static kt_status parse_derived(ctx *c, const cJSON *der) {
  kt__spec *s = c->s;
  if (!der) return KT_OK;
  if (!cJSON_IsObject(der)) return bad(c, "derived", "expected an object");
  int n = cJSON_GetArraySize(der);
  if (!(s->derived = kt__calloc((size_t)(n ? n : 1), sizeof *s->derived))) return nomem(c);
  for (const cJSON *j = der->child; j; j = j->next) {
    char f[160];
    snprintf(f, sizeof f, "derived.%s", j->string);
    if (new_name(c, f, j->string)) return c->st;
    if (s->nslots == KT_MAX_SLOTS) return bad(c, f, "too many names");
    kt__derived *d = &s->derived[s->nderived];
    if (!(d->name = kt__strdup(j->string))) return nomem(c);
    s->nderived++;
    d->slot = s->nslots;
    c->limit = d->slot;
    c->where = "this derived constant (it is defined later)";
    const cJSON *ex = j, *vals = NULL;
    if (cJSON_IsObject(j)) {
      static const char *fields[] = {"expr", "values", "doc", NULL};
      if (check_fields(c, j, f, fields)) return c->st;
      ex = cJSON_GetObjectItemCaseSensitive(j, "expr");
      vals = cJSON_GetObjectItemCaseSensitive(j, "values");
      if (!ex) return bad(c, f, "missing \"expr\"");
    }
    if (parse_expr(c, f, ex, &d->e)) return c->st;
    s->slot_names[s->nslots++] = d->name;
    if (vals) {
      int m = cJSON_IsArray(vals) ? cJSON_GetArraySize(vals) : 0;
      if (m == 0 || m > 64) return bad(c, f, "\"values\" must list 1 to 64 integers");
      if (!(d->values = kt__calloc((size_t)m, sizeof *d->values))) return nomem(c);
      for (const cJSON *v = vals->child; v; v = v->next)
        if (!get_int(v, &d->values[d->n++])) return bad(c, f, "\"values\" must be integers below 2^53");
    } else if (!d->e.is_bool) {
      return bad(c, f, "\"%s\" is not a boolean expression: list the values it can take, "
                 "{\"expr\": ..., \"values\": [...]}, so that every variant can be compiled ahead of time",
                 d->e.text);
    }
    d->uses_config = uses_config(s, &d->e, s->nderived - 1);
  }
  return KT_OK;
}

static kt_status parse_template(ctx *c, const cJSON *tpl) {
  kt__spec *s = c->s;
  int n = tpl ? cJSON_GetArraySize(tpl) : 0;
  if (tpl && !cJSON_IsArray(tpl)) return bad(c, "template", "expected an array of names");
  if (n > KT_MAX_TARGS) return bad(c, "template", "at most %d template arguments", KT_MAX_TARGS);
  int i = 0;
  for (const cJSON *j = tpl ? tpl->child : NULL; j; j = j->next, i++) {
    char f[64];
    snprintf(f, sizeof f, "template[%d]", i);
    if (!cJSON_IsString(j)) return bad(c, f, "expected a name");
    kt__targ *t = &s->targs[s->ntargs];
    t->tvar = -1;
    t->slot = -1;
    for (int k = 0; k < s->ntypes; k++)
      if (!strcmp(s->types[k].name, j->valuestring)) t->tvar = k;
    if (t->tvar < 0) {
      int sl = find_slot(s, j->valuestring, strlen(j->valuestring));
      int first_const = s->ncfields ? s->cfields[0].slot
                                    : (s->nderived ? s->derived[0].slot : s->nslots);
      if (sl < first_const && !(sl >= 0 && sl < s->nparams && s->params[sl].specialize))
        return bad(c, f, "\"%s\" is not a type variable, config field, derived constant or "
                   "specialized param", j->valuestring);
      t->slot = sl;
    }
    for (int k = 0; k < s->ntargs; k++)
      if (s->targs[k].tvar == t->tvar && s->targs[k].slot == t->slot)
        return bad(c, f, "\"%s\" listed twice", j->valuestring);
    s->ntargs++;
  }
  /* Every compile-time constant must reach the code: two variants that
  ** differ in one must never compile to the same instantiation. */
  for (int k = 0; k < s->ntypes; k++) {
    int in = 0;
    for (int t = 0; t < s->ntargs; t++) in |= s->targs[t].tvar == k;
    if (!in) return bad(c, "template", "type variable \"%s\" is not a template argument", s->types[k].name);
  }
  for (int k = 0; k < s->nparams; k++) {
    int in = !s->params[k].specialize;
    for (int t = 0; t < s->ntargs && !in; t++) in = s->targs[t].slot == k;
    if (!in)
      return bad(c, "template", "specialized param \"%s\" is not a template argument",
                 s->params[k].name);
  }
  for (int k = 0; k < s->ncfields + s->nderived; k++) {
    int sl = k < s->ncfields ? s->cfields[k].slot : s->derived[k - s->ncfields].slot;
    int in = 0;
    for (int t = 0; t < s->ntargs; t++) in |= s->targs[t].slot == sl;
    if (!in)
      return bad(c, "template", "compile-time constant \"%s\" is not a template argument",
                 s->slot_names[sl]);
  }
  return KT_OK;
}

static kt_status parse_text(ctx *c, const char *field, const char *text,
                           kt__expr *e) {
  kt__expr_error ee;
  int rc = kt__expr_parse(text, resolve, c, e, &ee);
  if (rc == -2) return nomem(c);
  if (rc) return bad(c, field, "column %d: %s in \"%s\"", ee.col, ee.msg, text);
  return KT_OK;
}

/* grid and block: one expression or an array of 1 to 3; missing ones are 1. */
static kt_status parse_dims(ctx *c, const char *field, const cJSON *j, kt__expr *dims) {
  if (!j) return bad(c, field, "missing");
  int arr = cJSON_IsArray(j);
  int n = arr ? cJSON_GetArraySize(j) : 1;
  if (n < 1 || n > 3) return bad(c, field, "expected 1 to 3 expressions (x, y, z)");
  const cJSON *d = arr ? j->child : j;
  for (int i = 0; i < 3; i++) {
    char f[64];
    snprintf(f, sizeof f, "%s[%d]", field, i);
    if (i < n ? parse_expr(c, arr ? f : field, d, &dims[i]) : parse_text(c, f, "1", &dims[i]))
      return c->st;
    if (i < n) d = d->next;
  }
  return KT_OK;
}

static void hash_str(XXH3_state_t *h, const char *s) {
  XXH3_64bits_update(h, s ? s : "", s ? strlen(s) + 1 : 1);
}

static kt_status compute_hashes(ctx *c) {
  kt__spec *s = c->s;
  XXH3_state_t *h = XXH3_createState();
  if (!h) return nomem(c);
  XXH3_64bits_reset(h);
  /* The source with the headers it includes (spec/source.h). */
  XXH3_64bits_update(h, &s->source_hash, sizeof s->source_hash);
  hash_str(h, s->entry);
  char buf[64];
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    hash_str(h, p->name);
    snprintf(buf, sizeof buf, "%d/%d/%d/%d/%d", p->type, p->access, p->optional,
             (int)p->dtype, p->tvar);
    hash_str(h, buf);
    hash_str(h, p->extent.text);
    /* Where the tuner times a key changes what a tuning found: rows tuned
    ** without it are tuned again. Absent, nothing is hashed, so the hashes
    ** of specs without it stay as they were. */
    if (p->tune_at.text) {
      hash_str(h, "tune_at");
      hash_str(h, p->tune_at.text);
    }
  }
  for (int i = 0; i < s->ntypes; i++) {
    hash_str(h, s->types[i].name);
    for (int k = 0; k < s->types[i].n; k++) hash_str(h, kt_dtype_name(s->types[i].types[k]));
  }
  for (int i = 0; i < s->ncfields; i++) hash_str(h, s->cfields[i].name);
  for (int i = 0; i < s->nderived; i++) {
    hash_str(h, s->derived[i].name);
    hash_str(h, s->derived[i].e.text);
  }
  for (int i = 0; i < s->ntargs; i++) {
    snprintf(buf, sizeof buf, "%d/%d", s->targs[i].tvar, s->targs[i].slot);
    hash_str(h, buf);
  }
  for (int i = 0; i < 3; i++) {
    hash_str(h, s->grid[i].text);
    hash_str(h, s->block[i].text);
  }
  hash_str(h, s->smem.text);
  hash_str(h, s->fast_math ? "fast_math" : "");
  if (s->pdl) hash_str(h, "pdl");
  for (int i = 0; i < s->nflags; i++) hash_str(h, s->flags[i]);
  s->spec_hash = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return KT_OK;
}

static kt_status parse_options(ctx *c, const cJSON *opt) {
  kt__spec *s = c->s;
  if (!opt) return KT_OK;
  static const char *fields[] = {"fast_math", "flags", "pdl", NULL};
  if (!cJSON_IsObject(opt)) return bad(c, "options", "expected an object");
  if (check_fields(c, opt, "options", fields)) return c->st;
  const cJSON *fm = cJSON_GetObjectItemCaseSensitive(opt, "fast_math");
  if (fm && !cJSON_IsBool(fm)) return bad(c, "options.fast_math", "must be true or false");
  s->fast_math = cJSON_IsTrue(fm);
  const cJSON *pdl = cJSON_GetObjectItemCaseSensitive(opt, "pdl");
  if (pdl && !cJSON_IsBool(pdl)) return bad(c, "options.pdl", "must be true or false");
  s->pdl = cJSON_IsTrue(pdl);
  /* Launched early, a kernel that never waits would read what the kernel
  ** before it has not finished writing. */
  if (s->pdl && !strstr(s->source, "griddepcontrol.wait") &&
      !strstr(s->source, "cudaGridDependencySynchronize"))
    return bad(c, "options.pdl", "%s never waits for the previous kernel (griddepcontrol.wait)",
               s->source_path);
  const cJSON *fl = cJSON_GetObjectItemCaseSensitive(opt, "flags");
  if (!fl) return KT_OK;
  int n = cJSON_IsArray(fl) ? cJSON_GetArraySize(fl) : -1;
  if (n < 0) return bad(c, "options.flags", "expected an array of strings");
  if (!(s->flags = kt__calloc((size_t)(n ? n : 1), sizeof *s->flags))) return nomem(c);
  for (const cJSON *j = fl->child; j; j = j->next) {
    if (!cJSON_IsString(j) || j->valuestring[0] != '-')
      return bad(c, "options.flags", "each flag must be a string starting with '-'");
    if (!strncmp(j->valuestring, "--gpu-architecture", 18) || !strncmp(j->valuestring, "-arch", 5))
      return bad(c, "options.flags", "the architecture comes from the device or --arch, not the spec");
    /* A header found through another directory would be compiled in
    ** without being in the spec hash: editing it would reuse old cubins. */
    static const char *const includes[] = {"-I", "--include-path", "-include", "--pre-include"};
    for (size_t i = 0; i < sizeof includes / sizeof includes[0]; i++)
      if (!strncmp(j->valuestring, includes[i], strlen(includes[i])))
        return bad(c, "options.flags", "\"%s\": headers come from the source's directory alone, so that every "
                   "header a variant is compiled from is in the spec hash", j->valuestring);
    if (!(s->flags[s->nflags++] = kt__strdup(j->valuestring))) return nomem(c);
  }
  return KT_OK;
}

static const char *top_fields[] = {
    "name", "doc", "source", "entry", "template", "types", "params", "derived",
    "config", "default", "constraints", "grid", "block", "smem", "inplace",
    "options", NULL};

/* name and entry: identifiers the cache and the compiled code use. */
static kt_status parse_names(ctx *c, const cJSON *root) {
  kt__spec *s = c->s;
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
  if (cJSON_IsString(name) && strlen(name->valuestring) > KT__NAME_MAX) return not_ident(c, "name", name->valuestring);
  if (!cJSON_IsString(name) || !is_ident(name->valuestring)) return bad(c, "name", "missing or not an identifier");
  if (!(s->name = kt__strdup(name->valuestring))) return nomem(c);
  const cJSON *entry = cJSON_GetObjectItemCaseSensitive(root, "entry");
  if (!cJSON_IsString(entry) || !entry->valuestring[0])
    return bad(c, "entry", "missing: the kernel function (a template) in the source");
  if (strlen(entry->valuestring) > KT__ENTRY_MAX)
    return bad(c, "entry", "\"%.*s...\" is longer than %d characters", 16, entry->valuestring, KT__ENTRY_MAX);
  for (const char *p = entry->valuestring; *p; p++)
    if (!(*p == '_' || *p == ':' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
          (*p >= '0' && *p <= '9')))
      return bad(c, "entry", "\"%s\" is not a C++ name", entry->valuestring);
  if (!(s->entry = kt__strdup(entry->valuestring))) return nomem(c);
  return KT_OK;
}

/* The source, relative to the spec's directory dir, read with its headers
** and hashed. */
static kt_status parse_source(ctx *c, const cJSON *root, const char *dir) {
  kt__spec *s = c->s;
  const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "source");
  if (!cJSON_IsString(src) || !src->valuestring[0])
    return bad(c, "source", "missing: the .cu file, relative to the spec");
  size_t pl = strlen(dir) + strlen(src->valuestring) + 2;
  if (!(s->source_path = kt__malloc(pl))) return nomem(c);
  if (src->valuestring[0] == '/') snprintf(s->source_path, pl, "%s", src->valuestring);
  else snprintf(s->source_path, pl, "%s/%s", dir, src->valuestring);
  kt__source text;
  char why[1024];
  int e = kt__source_read(s->source_path, &text, why, sizeof why);
  s->source_name = text.name;
  s->source = text.text;
  s->source_dir = text.dir;
  s->source_hash = text.hash;
  s->headers_hash = text.headers;
  s->nheaders = text.nheaders;
  if (e == ENOMEM) return nomem(c);
  if (e) {
    bad(c, "source", "%s", why);
    return c->st = e < 0 ? KT_ERR_SPEC : KT_ERR_IO;
  }
  return KT_OK;
}

/* smem, grid and block: expressions of every slot but smem itself. */
static kt_status parse_launch(ctx *c, const cJSON *root) {
  kt__spec *s = c->s;
  c->limit = s->nslots;
  c->where = "smem (it cannot refer to itself)";
  const cJSON *smem = cJSON_GetObjectItemCaseSensitive(root, "smem");
  if (smem ? parse_expr(c, "smem", smem, &s->smem) : parse_text(c, "smem", "0", &s->smem))
    return c->st;
  s->smem_slot = s->nslots++;
  s->slot_names[s->smem_slot] = "smem";
  c->limit = s->nslots;
  if (parse_dims(c, "grid", cJSON_GetObjectItemCaseSensitive(root, "grid"), s->grid) ||
      parse_dims(c, "block", cJSON_GetObjectItemCaseSensitive(root, "block"), s->block))
    return c->st;
  return KT_OK;
}

static kt_status parse_constraints(ctx *c, const cJSON *cons) {
  kt__spec *s = c->s;
  if (!cons) return KT_OK;
  int n = cJSON_IsArray(cons) ? cJSON_GetArraySize(cons) : -1;
  if (n < 0) return bad(c, "constraints", "expected an array of expressions");
  if (!(s->constraints = kt__calloc((size_t)(n ? n : 1), sizeof *s->constraints)))
    return nomem(c);
  int i = 0;
  for (const cJSON *j = cons->child; j; j = j->next, i++) {
    char f[64];
    snprintf(f, sizeof f, "constraints[%d]", i);
    kt__constraint *k = &s->constraints[s->nconstraints];
    if (parse_expr(c, f, j, &k->e)) return c->st;
    k->uses_config = uses_config(s, &k->e, s->nderived);
    s->nconstraints++;
  }
  return KT_OK;
}

static kt_status parse_root(ctx *c, const cJSON *root, const char *dir) {
  kt__spec *s = c->s;
  if (!cJSON_IsObject(root)) return bad(c, "(top level)", "expected a JSON object");
  if (check_fields(c, root, "(top level)", top_fields) || parse_names(c, root) || parse_source(c, root, dir))
    return c->st;
  const cJSON *ip = cJSON_GetObjectItemCaseSensitive(root, "inplace");
  if (ip && !cJSON_IsBool(ip)) return bad(c, "inplace", "must be true or false");
  s->inplace = !ip || cJSON_IsTrue(ip);

  if (parse_types(c, cJSON_GetObjectItemCaseSensitive(root, "types"))) return c->st;
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
  if (parse_params(c, params) || parse_extents(c, params) || parse_tune_at(c, params) || parse_inits(c))
    return c->st;
  for (int i = 0; i < s->nparams; i++)
    if (s->params[i].type == KT__P_PTR && s->params[i].tvar < 0 && s->params[i].dtype == KT_DTYPE_NONE)
      return bad(c, "params", "pointer without dtype");
  if (parse_config(c, cJSON_GetObjectItemCaseSensitive(root, "config"),
                   cJSON_GetObjectItemCaseSensitive(root, "default")))
    return c->st;
  if (parse_derived(c, cJSON_GetObjectItemCaseSensitive(root, "derived")) ||
      parse_template(c, cJSON_GetObjectItemCaseSensitive(root, "template")) ||
      parse_options(c, cJSON_GetObjectItemCaseSensitive(root, "options")) || parse_launch(c, root) ||
      parse_constraints(c, cJSON_GetObjectItemCaseSensitive(root, "constraints")))
    return c->st;
  return compute_hashes(c);
}

static void line_col(const char *text, const char *at, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (const char *p = text; p < at && *p; p++) {
    if (*p == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

/* A name given twice in an object of the spec (cJSON would keep the first
** and hide the second). Sorted names when there are many, so that a
** hostile file cannot make this quadratic. */
static kt_status unique_names(ctx *c, const cJSON *j, const char *where) {
  int n = cJSON_GetArraySize(j);
  const char *small[32], **names = n <= 32 ? small : kt__calloc((size_t)n, sizeof *names);
  if (!names) return nomem(c);
  int k = 0;
  for (const cJSON *it = j->child; it; it = it->next) names[k++] = it->string;
  qsort(names, (size_t)k, sizeof *names, by_str);
  const char *twice = NULL;
  for (int i = 1; i < k && !twice; i++)
    if (!strcmp(names[i - 1], names[i])) twice = names[i];
  if (twice) bad(c, where, "\"%s\" given twice", twice);
  if (names != small) kt__free(names);
  return c->st;
}

/* Every object of the tree, depth first; where names each in messages:
** "(top level)", "params[1]", "config". Depth is bounded by the JSON check. */
static kt_status no_duplicates(ctx *c, const cJSON *j, const char *where) {
  if (cJSON_IsObject(j) && unique_names(c, j, where)) return c->st;
  int i = 0;
  for (const cJSON *it = j->child; it && !c->st; it = it->next, i++) {
    char sub[256];
    if (!cJSON_IsObject(j)) snprintf(sub, sizeof sub, "%s[%d]", where, i);
    else if (j == c->root) snprintf(sub, sizeof sub, "%s", it->string);
    else snprintf(sub, sizeof sub, "%s.%s", where, it->string);
    no_duplicates(c, it, sub);
  }
  return c->st;
}

/* The tree of text[0..len): checked first, so that a NULL from cJSON can
** only mean out of memory. */
static cJSON *parse_json(ctx *c, const char *text, size_t len) {
  size_t at;
  char why[128];
  if (kt__json_check(text, len, &at, why, sizeof why)) {
    int line, col;
    line_col(text, text + at, &line, &col);
    snprintf(c->err, c->errlen, "%s: line %d, column %d: %s", c->file, line, col, why);
    c->st = KT_ERR_SPEC;
    return NULL;
  }
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root) nomem(c);
  return root;
}

kt_status kt__spec_parse(const char *path, const char *text, size_t len, const char *dir, kt__spec **out, char *err,
                         size_t errlen) {
  *out = NULL;
  ctx c;
  memset(&c, 0, sizeof c);
  c.file = path;
  c.err = err;
  c.errlen = errlen;
  cJSON *root = parse_json(&c, text, len);
  if (!root) return c.st;
  c.root = root;
  kt__spec *s = NULL;
  if (!no_duplicates(&c, root, "(top level)") && !(s = kt__calloc(1, sizeof *s))) nomem(&c);
  if (s && !(s->path = kt__strdup(path))) nomem(&c);
  if (!c.st) {
    s->smem_slot = -1;
    c.s = s;
    parse_root(&c, root, dir);
  }
  cJSON_Delete(root);
  if (c.st) {
    kt__spec_free(s);
    return c.st;
  }
  *out = s;
  return KT_OK;
}

kt_status kt__spec_load(const char *path, kt__spec **out, char *err, size_t errlen) {
  *out = NULL;
  char *text, buf[64];
  size_t len;
  int e = kt__read_file(path, KT__SPEC_MAX, &text, &len);
  if (e) {
    snprintf(err, errlen, "%s: cannot read: %s", path, kt__read_strerror(e, KT__SPEC_MAX, buf, sizeof buf));
    return e == ENOMEM ? KT_ERR_NOMEM : e < 0 ? KT_ERR_SPEC : KT_ERR_IO;
  }
  char *dir = kt__strdup(path);
  if (!dir) {
    kt__free(text);
    snprintf(err, errlen, "%s: out of memory", path);
    return KT_ERR_NOMEM;
  }
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  else strcpy(dir, ".");
  kt_status st = kt__spec_parse(path, text, len, dir, out, err, errlen);
  kt__free(dir);
  kt__free(text);
  return st;
}

void kt__spec_free(kt__spec *s) {
  if (!s) return;
  for (int i = 0; i < s->nparams; i++) {
    kt__free(s->params[i].name);
    kt__free(s->params[i].init);
    kt__expr_free(&s->params[i].extent);
    kt__expr_free(&s->params[i].tune_at);
  }
  for (int i = 0; i < s->ntypes; i++) kt__free(s->types[i].name);
  for (int i = 0; i < s->ncfields; i++) {
    kt__free(s->cfields[i].name);
    kt__free(s->cfields[i].values);
  }
  kt__free(s->cfields);
  for (int i = 0; i < s->nderived; i++) {
    kt__free(s->derived[i].name);
    kt__free(s->derived[i].values);
    kt__expr_free(&s->derived[i].e);
  }
  kt__free(s->derived);
  for (int i = 0; i < s->nconstraints; i++) kt__expr_free(&s->constraints[i].e);
  kt__free(s->constraints);
  for (int i = 0; i < 3; i++) {
    kt__expr_free(&s->grid[i]);
    kt__expr_free(&s->block[i]);
  }
  kt__expr_free(&s->smem);
  for (int i = 0; i < s->nflags; i++) kt__free(s->flags[i]);
  kt__free(s->flags);
  kt__free(s->path);
  kt__free(s->name);
  kt__free(s->source_path);
  kt__free(s->source);
  kt__free(s->source_dir);
  kt__free(s->entry);
  kt__free(s);
}
