/* Lists of variants compiled ahead of use (ktune compile, ktune lint):
** every variant a spec's space allows, or those of given calls. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/fileio.h"
#include "base/outfile.h"
#include "base/pool.h"
#include "cache/store.h"
#include "device/variant.h"

struct kt__vlist {
  kt__call *calls;  /* one call per distinct variant */
  int n, cap;
  int *index;       /* open addressing over calls by template values: i + 1, 0 empty */
  int nindex;       /* a power of two, at least twice cap */
};

kt__vlist *kt__vlist_new(void) { return kt__calloc(1, sizeof(kt__vlist)); }

void kt__vlist_free(kt__vlist *l) {
  if (!l) return;
  kt__free(l->calls);
  kt__free(l->index);
  kt__free(l);
}

int kt__vlist_count(const kt__vlist *l) { return l->n; }

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

/* Whether an expression reads only slots that an offline variant fixes:
** config values, derived constants (each computed from what is fixed
** before it, or taken over its domain: either way fixed once the walk
** reaches it, and derived constants read only earlier ones), esize, cc.
** So a constraint on derived constants and config fields (BK <= KD) drops
** the variants no call can use. */
static int offline_known(const kt__spec *s, const kt__expr *e) {
  for (int sl = 0; sl < s->nslots; sl++) {
    if (!kt__expr_uses(e, sl)) continue;
    if (sl < s->builtin_slot) {
      /* esize(p) follows from p's dtype, which every variant fixes. */
      int esize = 0;
      for (int p = 0; p < s->nparams; p++) esize |= s->params[p].type == KT__P_PTR && s->params[p].esize_slot == sl;
      if (!esize) return 0;
      continue;
    }
    if (sl < s->builtin_slot + KT__NBUILTINS && sl != s->builtin_slot + KT__BUILTIN_CC) return 0;
    if (sl == s->smem_slot && !offline_known(s, &s->smem)) return 0;
  }
  return 1;
}

static uint64_t vals_hash(const int64_t *vals) { return XXH3_64bits(vals, KT_MAX_TARGS * sizeof *vals); }

/* The index slot of vals: where it is, or the empty slot it would take. */
static int *slot_of(const kt__prog *p, const kt__vlist *l, const int64_t *vals) {
  int64_t seen[KT_MAX_TARGS];
  size_t mask = (size_t)l->nindex - 1;
  for (size_t i = vals_hash(vals) & mask;; i = (i + 1) & mask) {
    if (!l->index[i]) return &l->index[i];
    kt__variant_vals(p, &l->calls[l->index[i] - 1], seen);
    if (!memcmp(seen, vals, sizeof seen)) return &l->index[i];
  }
}

/* Room for one more call, the index rebuilt at twice the size. A list of
** hundreds of thousands of variants stays linear to build. */
static int grow(const kt__prog *p, kt__vlist *l) {
  int cap = l->cap ? l->cap * 2 : 64;
  void *q = kt__realloc(l->calls, (size_t)cap * sizeof *l->calls);
  if (!q) return -1;
  l->calls = q;
  int *index = kt__calloc((size_t)cap * 2, sizeof *index);
  if (!index) return -1;
  kt__free(l->index);
  l->index = index;
  l->nindex = cap * 2;
  l->cap = cap;
  for (int i = 0; i < l->n; i++) {
    int64_t vals[KT_MAX_TARGS];
    kt__variant_vals(p, &l->calls[i], vals);
    *slot_of(p, l, vals) = i + 1;
  }
  return 0;
}

kt_status kt__vlist_add(kt__prog *p, kt__vlist *l, const kt__call *c) {
  const kt__spec *s = p->spec;
  int64_t vals[KT_MAX_TARGS];
  kt__variant_vals(p, c, vals);
  int *slot = l->n ? slot_of(p, l, vals) : NULL;
  if (slot && *slot) return KT_OK;
  if (l->n == KT_COMPILE_MAX_VARIANTS)
    return kt__err(p->env->id, KT_ERR_INVALID, "%s: more than %d variants to compile", s->name, KT_COMPILE_MAX_VARIANTS);
  if (l->n == l->cap) {
    /* The index is rebuilt larger: the empty slot found above moves. */
    if (grow(p, l)) return kt__err(p->env->id, KT_ERR_NOMEM, "%s: out of memory", s->name);
    slot = slot_of(p, l, vals);
  }
  l->calls[l->n++] = *c;
  *slot = l->n;
  return KT_OK;
}

/* The walk sets config fields 0..ncfields-1, then derived constants, in
** that order: position f is config field f, ncfields + d derived constant d,
** and ncfields + nderived the whole variant, its smem computed. */
typedef struct walk {
  kt__prog *p;
  kt__vlist *l;
  kt__call c;     /* the variant being enumerated */
  int *last;      /* per constraint: the position after which it is
                  ** checked, -1 where it is not checked offline */
  int64_t steps;  /* values set so far */
} walk;

/* The most values a walk sets (tens of nanoseconds each): a space whose
** constraints keep few of very many variants is refused in seconds rather
** than walked for hours. */
#define WALK_MAX_STEPS ((int64_t)1 << 27)

/* Whether the constraints that position pos settles allow the values set
** so far: a branch they refuse is cut before the positions after it. */
static int constraints_allow(const walk *w, int pos) {
  const kt__spec *s = w->p->spec;
  for (int i = 0; i < s->nconstraints; i++) {
    int64_t v;
    if (w->last[i] == pos && (kt__expr_eval(&s->constraints[i].e, w->c.slots, &v) || !v)) return 0;
  }
  return 1;
}

/* The same for a value just set at pos, counted against the bound: past
** it every branch is cut, so the walk unwinds at once. */
static int allowed_at(walk *w, int pos) { return ++w->steps <= WALK_MAX_STEPS && constraints_allow(w, pos); }

/* Walk derived constants d.. in order, each computed when the values it
** depends on are known offline, else taken over its domain. */
static kt_status walk_derived(walk *w, int d) {
  const kt__spec *s = w->p->spec;
  if (d == s->nderived) {
    int64_t v = 0;
    if (offline_known(s, &s->smem) && !kt__expr_eval(&s->smem, w->c.slots, &v)) w->c.slots[s->smem_slot] = v;
    return constraints_allow(w, s->ncfields + s->nderived) ? kt__vlist_add(w->p, w->l, &w->c) : KT_OK;
  }
  const kt__derived *dv = &s->derived[d];
  int pos = s->ncfields + d;
  if (offline_known(s, &dv->e)) {
    int64_t v;
    if (kt__expr_eval(&dv->e, w->c.slots, &v)) return KT_OK;
    if (!kt__derived_allows(dv, v)) return KT_OK; /* no call passes a value outside the list */
    w->c.slots[dv->slot] = v;
    return allowed_at(w, pos) ? walk_derived(w, d + 1) : KT_OK;
  }
  int64_t vals[64];
  int n = domain(dv, vals);
  for (int i = 0; i < n; i++) {
    w->c.slots[dv->slot] = vals[i];
    kt_status st = allowed_at(w, pos) ? walk_derived(w, d + 1) : KT_OK;
    if (st) return st;
  }
  return KT_OK;
}

static kt_status walk_config(walk *w, int f) {
  const kt__spec *s = w->p->spec;
  if (f == s->ncfields) return walk_derived(w, 0);
  for (int i = 0; i < s->cfields[f].n; i++) {
    w->c.slots[s->cfields[f].slot] = s->cfields[f].values[i];
    kt_status st = allowed_at(w, f) ? walk_config(w, f + 1) : KT_OK;
    if (st) return st;
  }
  return KT_OK;
}

/* For each constraint, the last position it reads: the whole variant for
** one that reads smem or only what every variant fixes (dtypes' sizes, cc);
** -1 for one that reads params, which no offline variant fixes. */
static void constraint_positions(const kt__spec *s, int *last) {
  const int whole = s->ncfields + s->nderived;
  for (int i = 0; i < s->nconstraints; i++) {
    const kt__expr *e = &s->constraints[i].e;
    last[i] = -1;
    if (!offline_known(s, e)) continue;
    for (int f = 0; f < s->ncfields; f++)
      if (kt__expr_uses(e, s->cfields[f].slot)) last[i] = f;
    for (int d = 0; d < s->nderived; d++)
      if (kt__expr_uses(e, s->derived[d].slot)) last[i] = s->ncfields + d;
    if (last[i] < 0 || kt__expr_uses(e, s->smem_slot)) last[i] = whole;
  }
}

static kt_status walk_types(walk *w, int t) {
  const kt__spec *s = w->p->spec;
  if (t == s->ntypes) return walk_config(w, 0);
  for (int i = 0; i < s->types[t].n; i++) {
    w->c.tvals[t] = s->types[t].types[i];
    for (int q = 0; q < s->nparams; q++)
      if (s->params[q].type == KT__P_PTR)
        w->c.slots[s->params[q].esize_slot] =
            (int64_t)kt_dtype_size(s->params[q].tvar >= 0 ? w->c.tvals[s->params[q].tvar] : s->params[q].dtype);
    kt_status st = walk_types(w, t + 1);
    if (st) return st;
  }
  return KT_OK;
}

kt_status kt__vlist_add_all(kt__prog *p, kt__vlist *l) {
  for (int q = 0; q < p->spec->nparams; q++)
    if (p->spec->params[q].specialize)
      return kt__err(p->env->id, KT_ERR_INVALID,
                     "%s: param %s is specialized: its variants follow the values calls pass; "
                     "compile them for given shapes",
                     p->spec->name, p->spec->params[q].name);
  walk *w = kt__calloc(1, sizeof *w);
  int *last = kt__calloc((size_t)p->spec->nconstraints + 1, sizeof *last);
  if (!w || !last) {
    kt__free(w);
    kt__free(last);
    return kt__err(p->env->id, KT_ERR_NOMEM, "%s: out of memory", p->spec->name);
  }
  w->p = p;
  w->l = l;
  w->last = last;
  constraint_positions(p->spec, last);
  memcpy(&w->c.slots[p->spec->builtin_slot], p->builtins, sizeof p->builtins);
  kt_status st = walk_types(w, 0);
  int too_long = w->steps > WALK_MAX_STEPS;
  kt__free(w);
  kt__free(last);
  if (st == KT_ERR_NOMEM) return st;
  /* Past the bound the walk cut every branch: what it listed is partial. */
  if (too_long)
    return kt__err(p->env->id, KT_ERR_INVALID,
                   "%s: the space is too large to walk (more than %lld values of config fields and constants "
                   "set, across every type); compile those of given shapes",
                   p->spec->name, (long long)WALK_MAX_STEPS);
  if (st == KT_ERR_INVALID)
    return kt__err(p->env->id, st,
                   "%s: the space holds more than %d variants (every type, config and constant value); "
                   "compile those of given shapes",
                   p->spec->name, KT_COMPILE_MAX_VARIANTS);
  return st;
}

typedef struct compiling {
  kt__prog *p;
  kt__vlist *l;
  kt_status *status;
  char (*errs)[KT_ERRMAX];
  kt_progress_fn progress;
  void *progress_user;
  atomic_int done;
} compiling;

static void compile_one(void *user, int i) {
  compiling *cp = user;
  void *fn;
  cp->status[i] = kt__variant_get(cp->p, &cp->l->calls[i], &fn);
  if (cp->status[i]) snprintf(cp->errs[i], KT_ERRMAX, "%s", kt__errmsg(cp->p->env->id));
  int done = atomic_fetch_add(&cp->done, 1) + 1;
  if (!cp->progress) return;
  kt__callback_enter(KT__CB_LOCKED);
  cp->progress(cp->progress_user, cp->p->spec->name, "compiling", done, cp->l->n, -1);
  kt__callback_leave(KT__CB_LOCKED);
}

/* DIR/NAME.EXT into path; -1 (with why in err) when it does not fit, so
** that a file is never written under a cut name. */
static int file_path(char *path, size_t n, const char *dir, const char *name, const char *ext, char *err,
                     size_t errlen) {
  int w = snprintf(path, n, "%s/%s.%s", dir, name, ext);
  if (w >= 0 && (size_t)w < n) return 0;
  snprintf(err, errlen, "%s.%s: its path in %.200s%s is longer than %zu bytes", name, ext, dir, strlen(dir) > 200 ? "..." : "",
           n - 1);
  return -1;
}

/* Write a cubin, then read it back: the file must hold the digest's bytes. */
static kt_status write_cubin(const char *dir, const char *name, const void *cubin, size_t size, const char *digest,
                             char *err, size_t errlen) {
  char path[PATH_MAX], back[33], buf[64];
  if (file_path(path, sizeof path, dir, name, "cubin", err, errlen)) return KT_ERR_IO;
  kt__outfile out;
  int e = kt__out_open(&out, path, 1);
  if (!e) {
    errno = 0;
    e = kt__out_end(&out, fwrite(cubin, 1, size, out.f) == size);
  }
  if (e) {
    snprintf(err, errlen, "%s: cannot write: %s", path, strerror(e));
    return KT_ERR_IO;
  }
  char *text;
  size_t len;
  int rc = kt__read_file(path, size, &text, &len);
  if (rc) {
    snprintf(err, errlen, "%s: cannot read back: %s", path, kt__read_strerror(rc, size, buf, sizeof buf));
    return rc == ENOMEM ? KT_ERR_NOMEM : KT_ERR_IO;
  }
  kt__store_digest(text, len, back);
  kt__free(text);
  if (len == size && !strcmp(back, digest)) return KT_OK;
  snprintf(err, errlen, "%s: the file read back does not match the cubin's size and digest", path);
  return KT_ERR_IO;
}

/* DIR/<kernel>.manifest.json: each cubin written, with its size and digest,
** so that whoever ships the files can check them. */
static kt_status write_manifest(kt__prog *p, const char *dir, cJSON *list) {
  char path[PATH_MAX], err[KT_ERRMAX];
  if (file_path(path, sizeof path, dir, p->spec->name, "manifest.json", err, sizeof err)) {
    cJSON_Delete(list);
    return kt__err(p->env->id, KT_ERR_IO, "%s", err);
  }
  cJSON *m = cJSON_CreateObject();
  int ok = m && cJSON_AddStringToObject(m, "kernel", p->spec->name) &&
           cJSON_AddStringToObject(m, "spec_hash", p->spec_hash) && cJSON_AddStringToObject(m, "arch", p->env->arch);
  if (ok) ok = cJSON_AddItemToObject(m, "cubins", list);
  else cJSON_Delete(list);
  char *text = ok ? cJSON_Print(m) : NULL;
  cJSON_Delete(m);
  if (!text) return kt__err(p->env->id, KT_ERR_NOMEM, "%s: out of memory", path);
  kt__outfile out;
  int e = kt__out_open(&out, path, 0);
  if (!e) {
    errno = 0;
    e = kt__out_end(&out, fputs(text, out.f) >= 0 && fputc('\n', out.f) != EOF);
  }
  cJSON_free(text);
  return e ? kt__err(p->env->id, KT_ERR_IO, "%s: cannot write: %s", path, strerror(e)) : KT_OK;
}

static int list_entry(cJSON *list, const char *name, size_t size, const char *digest) {
  cJSON *e = cJSON_CreateObject();
  char file[KT__VARIANT_NAME_MAX + 6];
  snprintf(file, sizeof file, "%s.cubin", name);
  if (e && cJSON_AddStringToObject(e, "file", file) && cJSON_AddNumberToObject(e, "size", (double)size) &&
      cJSON_AddStringToObject(e, "digest", digest) && cJSON_AddItemToArray(list, e))
    return 0;
  cJSON_Delete(e);
  return -1;
}

/* Each variant's outcome to fn (and its cubin to out_dir, with the
** manifest); the first failure's status. */
static kt_status report(compiling *cp, const char *out_dir, kt_variant_fn fn, void *user) {
  kt_status first = KT_OK;
  int first_i = -1;
  cJSON *list = out_dir ? cJSON_CreateArray() : NULL;
  if (out_dir && !list) return kt__err(cp->p->env->id, KT_ERR_NOMEM, "%s: out of memory", cp->p->spec->name);
  for (int i = 0; i < cp->l->n; i++) {
    char name[KT__VARIANT_NAME_MAX], digest[33];
    const void *cubin;
    size_t size;
    double ms;
    kt__variant_name(cp->p, &cp->l->calls[i], '.', name, sizeof name);
    kt__variant_cubin(cp->p, &cp->l->calls[i], &cubin, &size, &ms);
    kt_status vs = cp->status[i];
    if (!vs && out_dir) {
      kt__store_digest(cubin, size, digest);
      vs = write_cubin(out_dir, name, cubin, size, digest, cp->errs[i], KT_ERRMAX);
      if (!vs && list_entry(list, name, size, digest)) vs = KT_ERR_NOMEM, snprintf(cp->errs[i], KT_ERRMAX, "out of memory");
    }
    if (fn) {
      kt__callback_enter(KT__CB_ROWS);
      fn(user, name, vs, vs ? 0 : size, ms, cp->errs[i]);
      kt__callback_leave(KT__CB_ROWS);
    }
    if (vs && !first) first = vs, first_i = i;
  }
  if (first) {
    cJSON_Delete(list);
    return kt__err(cp->p->env->id, first, "%s", cp->errs[first_i]);
  }
  return out_dir ? write_manifest(cp->p, out_dir, list) : KT_OK;
}

kt_status kt__vlist_compile(kt__prog *p, kt__vlist *l, const char *out_dir, kt_variant_fn fn, void *user,
                            kt_progress_fn progress, void *progress_user) {
  compiling cp = {.p = p, .l = l, .progress = progress, .progress_user = progress_user};
  kt_status st = KT_OK;
  if (l->n && (!(cp.status = kt__calloc((size_t)l->n, sizeof *cp.status)) ||
               !(cp.errs = kt__calloc((size_t)l->n, sizeof *cp.errs))))
    st = kt__err(p->env->id, KT_ERR_NOMEM, "%s: out of memory", p->spec->name);
  if (!st) {
    if (progress) {
      kt__callback_enter(KT__CB_LOCKED);
      progress(progress_user, p->spec->name, "compiling", 0, l->n, -1);
      kt__callback_leave(KT__CB_LOCKED);
    }
    /* Several instances per NVRTC program, as a tuning builds them; each
    ** variant's own status and error are then read one by one. */
    kt__variant_build_all(p, l->calls, l->n, kt__ncpus());
    kt__parallel_for(l->n, kt__ncpus(), compile_one, &cp);
    st = report(&cp, out_dir, fn, user);
  }
  kt__free(cp.status);
  kt__free(cp.errs);
  kt__vlist_free(l);
  return st;
}
