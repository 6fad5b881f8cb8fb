/* Loading a kernel: its program, its tuned table, and which constraints a
** table hit must still check. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "dispatch/handles.h"

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

void kt__kernel_free(kt_kernel *k) {
  if (!k) return;
  kt__free(k->hit_checks);
  for (kt__choice *c = k->retired, *next; c; c = next) {
    next = c->retired;
    kt__free(c);
  }
  if (atomic_load(&k->tuned.slots)) {
    kt__lfmap_free(&k->tuned, kt__tuned_free);
    pthread_mutex_destroy(&k->tune_lock);
  }
  kt__prog_free(&k->p);
  kt__free(k);
}

/* The tuned table, its lock and the hit checks of a loaded program. */
static kt_status kernel_tables(kt_kernel *k) {
  const kt__spec *s = k->p.spec;
  if (!(k->hit_checks = kt__calloc((size_t)s->nconstraints + 1, 1))) return KT_ERR_NOMEM;
  for (int i = 0; i < s->nconstraints; i++) k->hit_checks[i] = !key_determines(s, &s->constraints[i].e);
  if (kt__lfmap_init(&k->tuned)) return KT_ERR_NOMEM;
  if (pthread_mutex_init(&k->tune_lock, NULL)) {
    kt__lfmap_free(&k->tuned, NULL);
    return KT_ERR_NOMEM;
  }
  return KT_OK;
}

static kt_status add_kernel(kt_runtime *rt, kt_kernel *k) {
  pthread_mutex_lock(&rt->lock);
  if (rt->nkernels == rt->capkernels) {
    int cap = rt->capkernels ? rt->capkernels * 2 : 8;
    kt_kernel **nk = kt__realloc(rt->kernels, (size_t)cap * sizeof *nk);
    if (!nk) {
      pthread_mutex_unlock(&rt->lock);
      return KT_ERR_NOMEM;
    }
    rt->kernels = nk;
    rt->capkernels = cap;
  }
  rt->kernels[rt->nkernels++] = k;
  pthread_mutex_unlock(&rt->lock);
  return KT_OK;
}

kt_status kt_kernel_load(kt_runtime *rt, const char *spec_path, kt_kernel **out) {
  if (!rt || !spec_path || !*spec_path || !out)
    return kt__misuse(rt, "kt_kernel_load",
                      !rt          ? "rt is NULL"
                      : !spec_path ? "spec_path is NULL"
                      : !out       ? "out is NULL"
                                   : "spec_path is empty");
  *out = NULL;
  kt_status st = kt__reentry(rt, "kt_kernel_load", KT__CB_LOCKED);
  if (st) return st;
  kt_kernel *k = kt__calloc(1, sizeof *k);
  if (!k) return kt__err(rt->env.id, KT_ERR_NOMEM, "%s: out of memory", spec_path);
  k->rt = rt;
  k->uid = kt__err_new_id();
  st = kt__prog_load(&k->p, &rt->env, spec_path, rt->no_pdl);
  if (st) {
    kt__free(k);
    return st;
  }
  if (kernel_tables(k) || add_kernel(rt, k)) {
    kt__kernel_free(k);
    return kt__err(rt->env.id, KT_ERR_NOMEM, "%s: out of memory", spec_path);
  }
  *out = k;
  return KT_OK;
}

const char *kt_kernel_name(const kt_kernel *k) { return k ? k->p.spec->name : ""; }

const char *kt_kernel_spec_hash(const kt_kernel *k) { return k ? k->p.spec_hash : ""; }
