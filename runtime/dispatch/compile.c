/* Compiling ahead of use (ktune compile, ktune lint). */
#include "dispatch/handles.h"

kt_status kt_kernel_compile_all(kt_kernel *k, const char *out_dir, kt_variant_fn fn, void *user) {
  if (!k) return kt__misuse(NULL, "kt_kernel_compile_all", "k is NULL");
  if (kt__reentry(k->rt, "kt_kernel_compile_all", KT__CB_LOCKED)) return KT_ERR_INVALID;
  kt__vlist *l = kt__vlist_new();
  if (!l) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  kt_status st = kt__vlist_add_all(&k->p, l);
  if (st) {
    kt__vlist_free(l);
    return st;
  }
  return kt__vlist_compile(&k->p, l, out_dir, fn, user, k->rt->tune.progress, k->rt->tune.progress_user);
}

/* Every config the constraints allow for the call c, into l. */
static kt_status add_configs(kt_kernel *k, const kt__call *base, kt__vlist *l) {
  const kt__spec *s = k->p.spec;
  int idx[KT_MAX_CFIELDS] = {0}, any = 0;
  kt_status st = KT_OK;
  do {
    int64_t cfg[KT_MAX_CFIELDS];
    kt__call c = *base;
    int bad;
    kt__spec_config_at(s, idx, cfg);
    st = kt__call_config(&k->p, &c, cfg);
    if (!st) st = kt__call_check(&k->p, &c, &bad);
    if (st == KT_ERR_EVAL) st = KT_OK, bad = 0; /* this config cannot serve the call */
    if (!st && bad < 0) {
      any = 1;
      st = kt__vlist_add(&k->p, l, &c);
    }
  } while (!st && kt__spec_config_next(s, idx));
  if (!st && !any)
    st = kt__err(k->rt->env.id, KT_ERR_NO_CONFIG, "%s: no config satisfies the constraints for this call", s->name);
  return st;
}

kt_status kt_kernel_compile_for(kt_kernel *k, const kt_arg *args, int nargs, const char *out_dir, kt_variant_fn fn,
                                void *user) {
  if (!k || (!args && nargs))
    return kt__misuse(kt__rt_of(k), "kt_kernel_compile_for", !k ? "k is NULL" : "args is NULL");
  if (kt__reentry(k->rt, "kt_kernel_compile_for", KT__CB_LOCKED)) return KT_ERR_INVALID;
  kt__vlist *l = kt__vlist_new();
  if (!l) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  kt__call c;
  kt__range r[KT_MAX_PARAMS];
  int nr;
  kt_status st = kt__call_bind(&k->p, args, nargs, &c);
  if (!st) st = kt__call_ranges(&k->p, &c, args, r, &nr);
  if (!st) st = add_configs(k, &c, l);
  if (st) {
    kt__vlist_free(l);
    return st;
  }
  return kt__vlist_compile(&k->p, l, out_dir, fn, user, k->rt->tune.progress, k->rt->tune.progress_user);
}
