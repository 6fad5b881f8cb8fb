/* Spec introspection for tools: params, keys, and lint. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cache/codec.h"
#include "dispatch/handles.h"

int kt_kernel_nparams(const kt_kernel *k) { return k ? k->p.spec->nparams : 0; }

/* The size of kt_param_info's first version (this one; once fields are
** appended, the offset of the first of them). */
#define PARAM_V1 sizeof(kt_param_info)

kt_status kt_kernel_param(const kt_kernel *k, int i, kt_param_info *out) {
  const char *why = !k ? "k is NULL"
                    : !out ? "out is NULL"
                    : i < 0 || i >= k->p.spec->nparams ? "i is not a param's index"
                    : out->size < PARAM_V1 ? "out->size is smaller than kt_param_info's first version"
                    : NULL;
  if (why) return kt__misuse(kt__rt_of(k), "kt_kernel_param", why);
  static const char *access[] = {"", "in", "out", "inout", "consumed"};
  static const char *keys[] = {"exact", "pow2", "ignore"};
  static const kt_arg_kind kinds[] = {0, KT_ARG_PTR, KT_ARG_I32, KT_ARG_I64, KT_ARG_F32};
  const kt__param *p = &k->p.spec->params[i];
  int ptr = p->type == KT__P_PTR;
  kt_param_info all = {
      .name = p->name,
      .kind = kinds[p->type],
      .dtype = !ptr ? "" : p->tvar >= 0 ? k->p.spec->types[p->tvar].name : kt_dtype_name(p->dtype),
      .access = ptr ? access[p->access] : "",
      .optional = p->optional,
      .key = ptr ? "" : keys[p->key],
      .init = p->init ? p->init : "",
      .extent = ptr ? p->extent.text : "",
  };
  kt__copy_sized(out, &all, sizeof all);
  return KT_OK;
}

kt_status kt_kernel_extents(kt_kernel *k, const kt_arg *args, int nargs, int64_t *elems) {
  if (!k || !elems || (!args && nargs))
    return kt__misuse(kt__rt_of(k), "kt_kernel_extents", !k ? "k is NULL" : !elems ? "elems is NULL" : "args is NULL");
  const kt__spec *s = k->p.spec;
  if (nargs != s->nparams)
    return kt__err(k->rt->env.id, KT_ERR_ARGS, "%s: %d args given, the spec has %d params", s->name, nargs, s->nparams);
  int64_t slots[KT_MAX_SLOTS] = {0};
  for (int i = 0; i < s->nparams; i++) {
    const kt_arg *a = &args[i];
    slots[i] = a->kind == KT_ARG_I32 ? a->v.i32 : a->kind == KT_ARG_I64 ? a->v.i64 : a->kind == KT_ARG_PTR ? a->v.ptr != 0 : 0;
  }
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    elems[i] = 0;
    if (p->type != KT__P_PTR) continue;
    int rc = kt__expr_eval(&p->extent, slots, &elems[i]);
    if (rc)
      return kt__err(k->rt->env.id, KT_ERR_EVAL, "%s: params[%d] (%s).extent: %s in \"%s\"", s->name, i, p->name,
                     kt__eval_strerror(rc), p->extent.text);
    kt_status st = kt__extent_check(&k->p, i, elems[i]);
    if (st) return st;
  }
  return KT_OK;
}

kt_status kt_kernel_key(kt_kernel *k, const kt_arg *args, int nargs, char *buf, size_t n) {
  if (!k || !buf || !n)
    return kt__misuse(kt__rt_of(k), "kt_kernel_key", !k ? "k is NULL" : "buf is NULL or bufsize is 0");
  kt__call c;
  int64_t key[KT_MAX_KEY];
  char json[KT_KEY_JSON_MAX];
  kt__range r[KT_MAX_PARAMS];
  int nr;
  /* A call whose sizes no launch takes (an extent below 0) has no key. */
  kt_status st = kt__call_bind(&k->p, args, nargs, &c);
  if (!st) st = kt__call_ranges(&k->p, &c, args, r, &nr);
  if (!st) st = kt__call_key(&k->p, &c, key);
  if (st) return st;
  kt__key_json(&k->p.keydef, key, json, sizeof json);
  return kt__copy_out(k->rt, "kt_kernel_key", "key", json, buf, n);
}

kt_status kt_json_canonical(const char *json, char *buf, size_t n) {
  if (!json || !buf || !n)
    return kt__misuse(NULL, "kt_json_canonical", !json ? "json is NULL" : "buf is NULL or bufsize is 0");
  char why[256], canon[KT__JSON_MAX(KT__KV_MAX)];
  if (kt__codec_canon(json, 0, canon, sizeof canon, why, sizeof why)) {
    snprintf(buf, n, "%s", why);
    return kt__err(0, KT_ERR_INVALID, "kt_json_canonical: %s", why);
  }
  kt_status st = kt__copy_out(NULL, "kt_json_canonical", "canonical JSON", canon, buf, n);
  if (st) snprintf(buf, n, "%s", kt__errmsg(0)); /* the reason, as far as it fits */
  return st;
}

kt_status kt_kernel_config_json(kt_kernel *k, const char *config, char *buf, size_t n) {
  if (!k || !config || !buf || !n)
    return kt__misuse(kt__rt_of(k), "kt_kernel_config_json",
                      !k ? "k is NULL" : !config ? "config is NULL" : "buf is NULL or bufsize is 0");
  int64_t cfg[KT_MAX_CFIELDS];
  char json[KT_CONFIG_JSON_MAX];
  buf[0] = 0;
  kt_status st = kt__config_parse(&k->p, config, cfg);
  if (st) return st;
  kt__config_json(k->p.spec, cfg, json, sizeof json);
  return kt__copy_out(k->rt, "kt_kernel_config_json", "config", json, buf, n);
}

/* Whether name appears in text as a whole identifier. */
static int mentions(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
    int before = p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_');
    int after = isalnum((unsigned char)p[n]) || p[n] == '_';
    if (!before && !after) return 1;
  }
  return 0;
}

typedef struct lint_ctx {
  kt_lint_fn fn;
  void *user;
  int problems, variants, failed;
} lint_ctx;

/* Advice, not counted: msg starts with "note: ". */
static void note(const lint_ctx *l, const char *msg) {
  if (!l->fn) return;
  kt__callback_enter(KT__CB_ROWS);
  l->fn(l->user, msg);
  kt__callback_leave(KT__CB_ROWS);
}

static void report(lint_ctx *l, const char *msg) {
  l->problems++;
  note(l, msg);
}

static void on_variant(void *user, const char *name, kt_status st, size_t bytes, double ms, const char *err) {
  lint_ctx *l = user;
  (void)bytes;
  (void)ms;
  l->variants++;
  if (!st) return;
  l->failed++;
  char msg[KT_ERRMAX + 600];
  snprintf(msg, sizeof msg, "variant %s does not compile: %s", name, err);
  report(l, msg);
}

/* Scalars in the key that nothing reads: every new value tunes again. */
static void phantom_fields(const kt__spec *s, lint_ctx *l) {
  for (int i = 0; i < s->nparams; i++) {
    const kt__param *p = &s->params[i];
    if (p->type == KT__P_PTR || p->key == KT__KEY_IGNORE) continue;
    int used = mentions(s->source, p->name);
    const kt__expr *all[8 + 3 * 2];
    int n = 0;
    for (int d = 0; d < 3; d++) {
      all[n++] = &s->grid[d];
      all[n++] = &s->block[d];
    }
    all[n++] = &s->smem;
    for (int e = 0; e < n && !used; e++) used = kt__expr_uses(all[e], p->slot);
    for (int q = 0; q < s->nparams && !used; q++)
      if (s->params[q].type == KT__P_PTR) used = kt__expr_uses(&s->params[q].extent, p->slot);
    for (int d = 0; d < s->nderived && !used; d++) used = kt__expr_uses(&s->derived[d].e, p->slot);
    for (int c = 0; c < s->nconstraints && !used; c++) used = kt__expr_uses(&s->constraints[c].e, p->slot);
    if (used) continue;
    char msg[600];
    snprintf(msg, sizeof msg,
             "phantom key field: %s is in the tuning key (\"key\": \"%s\") but neither the kernel source nor any "
             "expression of the spec reads it, so every new value of %s would tune again for nothing; give it "
             "\"key\": \"ignore\"",
             p->name, p->key == KT__KEY_POW2 ? "pow2" : "exact", p->name);
    report(l, msg);
  }
}

/* Whether e reads slot, directly or through derived constants. */
static int reads(const kt__spec *s, const kt__expr *e, int slot, int depth) {
  if (kt__expr_uses(e, slot)) return 1;
  for (int d = 0; d < s->nderived && depth < 8; d++)
    if (kt__expr_uses(e, s->derived[d].slot) && reads(s, &s->derived[d].e, slot, depth + 1)) return 1;
  return 0;
}

/* Whether the grid reads slot. */
static int grid_reads(const kt__spec *s, int slot) {
  for (int g = 0; g < 3; g++)
    if (reads(s, &s->grid[g], slot, 0)) return 1;
  return 0;
}

/* A size the key ignores, with no tune_at, that sets the grid beside a
** config field: the key is tuned at its first call's value and serves
** every other, though the blocks a config launches follow the size (the
** bug: chunk_state_fwd's batch x heads, left out of its key, where a tile
** tuned at one value ran 3.9x slower at another). Advice, not a problem:
** a size that does not move the winner may be left out on purpose. */
static void grid_blind_fields(const kt__spec *s, lint_ctx *l) {
  const char *field = NULL;
  for (int c = 0; c < s->ncfields && !field; c++)
    if (s->cfields[c].n > 1 && grid_reads(s, s->cfields[c].slot)) field = s->cfields[c].name;
  for (int i = 0; i < s->nparams && field; i++) {
    const kt__param *p = &s->params[i];
    if (p->type == KT__P_PTR || p->key != KT__KEY_IGNORE || p->tune_at.text || !grid_reads(s, p->slot)) continue;
    char msg[700];
    snprintf(msg, sizeof msg,
             "note: %s is left out of the tuning key (\"key\": \"ignore\", no \"tune_at\") but sets the grid, as "
             "the config field %s does: a key tuned at its first call's %s serves every other %s; give %s a "
             "\"tune_at\" (the size to time the key at) or \"key\": \"pow2\" where the best config follows it",
             p->name, field, p->name, p->name, p->name);
    note(l, msg);
  }
}

/* A constraint on a config field that reads a size the key leaves out: a
** config tuned at one value serves every other, and where the constraint
** refuses it the call runs the fallback config, never tuned. Advice, not
** a problem: small calls may be meant to run a fallback. */
static void constraint_blind_fields(const kt__spec *s, lint_ctx *l) {
  for (int c = 0; c < s->nconstraints; c++) {
    if (!s->constraints[c].uses_config) continue;
    for (int i = 0; i < s->nparams; i++) {
      const kt__param *p = &s->params[i];
      if (p->type == KT__P_PTR || p->key != KT__KEY_IGNORE || !reads(s, &s->constraints[c].e, p->slot, 0)) continue;
      char msg[900];
      snprintf(msg, sizeof msg,
               "note: constraints[%d] (\"%.200s\") holds config fields against %s, which the key leaves out "
               "(\"key\": \"ignore\"): a key tuned at one %s serves every other, and a call whose %s refuses "
               "the tuned config runs the default config (or the valid one nearest it), never tuned; put %s in the "
               "key (\"pow2\" or \"exact\") or constrain what the key holds",
               c, s->constraints[c].e.text, p->name, p->name, p->name, p->name);
      note(l, msg);
    }
  }
}

kt_status kt_kernel_lint(kt_kernel *k, kt_lint_fn fn, void *user, int *problems) {
  if (!k || !problems) return kt__misuse(kt__rt_of(k), "kt_kernel_lint", !k ? "k is NULL" : "problems is NULL");
  if (kt__reentry(k->rt, "kt_kernel_lint", KT__CB_LOCKED)) return KT_ERR_INVALID;
  const kt__spec *s = k->p.spec;
  lint_ctx l = {fn, user, 0, 0, 0};
  phantom_fields(s, &l);
  grid_blind_fields(s, &l);
  constraint_blind_fields(s, &l);
  kt_status st = kt_kernel_compile_all(k, NULL, on_variant, &l);
  if (st == KT_ERR_INVALID) {
    /* A specialized param, or a space too large: the other checks stand. */
    char msg[KT_ERRMAX + 100];
    snprintf(msg, sizeof msg, "note: no variant was compiled: %s", kt__errmsg(k->rt->env.id));
    note(&l, msg);
    st = KT_OK;
  }
  if (l.failed * 2 > l.variants) {
    char msg[300];
    snprintf(msg, sizeof msg,
             "most of the space does not compile: %d of %d variants fail; constrain the template values so that "
             "they are never listed",
             l.failed, l.variants);
    report(&l, msg);
  }
  *problems = l.problems;
  return st == KT_ERR_COMPILE ? KT_OK : st;
}
