/* A call that the alias rules refuse (call/alias.h), made as if out of
** place: each written arg that shares bytes it may not is redirected to a
** stream-ordered temporary before the launch, and the temporaries are
** copied into the caller's outputs after it, in param order, all on the
** caller's stream. The temporary of an arg that is also read (inout,
** consumed) starts as a copy of it. */
#include <string.h>

#include "dispatch/handles.h"

kt_status kt__stage_begin(kt_kernel *k, const kt__call *c, const kt_arg *args, kt_stream stream, kt__staging *sg) {
  kt__env *env = &k->rt->env;
  const char *name = k->p.spec->name;
  memset(sg, 0, sizeof *sg);
  int nargs = k->p.spec->nparams;
  memcpy(sg->args, args, (size_t)nargs * sizeof *args);
  if (!env->have_device) return kt__err(env->id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device", name);
  kt_status st = kt__call_ranges(&k->p, c, args, sg->r, &sg->n);
  char err[KT_ERRMAX];
  if (!st && (st = kt__dev_use(env->ctx, err, sizeof err))) return kt__err(env->id, st, "%s: %s", name, err);
  for (int i = 0; i < sg->n && !st; i++) {
    const kt__range *r = &sg->r[i];
    if (kt__alias_partner(sg->r, sg->n, i, k->p.spec->inplace) < 0) continue;
    size_t bytes = r->end - r->start;
    /* The same alignment class as the caller's pointer, so the call binds
    ** to the same key and variant. */
    st = kt__dev_malloc_async(&sg->tmp[i], bytes + 256, stream, err, sizeof err);
    kt__dptr p = sg->tmp[i] + r->start % 256;
    if (!st && KT__READS(k->p.spec->params[r->param].access))
      st = kt__dev_dtod_async(p, r->start, bytes, stream, err, sizeof err);
    sg->args[r->param].v.ptr = p;
    if (st) st = kt__err(env->id, st, "%s: staging: %s", name, err);
  }
  return st;
}

kt_status kt__stage_end(kt_kernel *k, kt__staging *sg, kt_stream stream, kt_status st) {
  kt__env *env = &k->rt->env;
  char err[KT_ERRMAX];
  for (int i = 0; i < sg->n; i++) {
    const kt__range *r = &sg->r[i];
    if (!sg->tmp[i]) continue;
    if (!st && kt__dev_dtod_async(r->start, sg->args[r->param].v.ptr, r->end - r->start, stream, err, sizeof err))
      st = kt__err(env->id, KT_ERR_CUDA, "%s: staging: %s", k->p.spec->name, err);
    kt__dev_free_async(sg->tmp[i], stream, err, sizeof err);
  }
  return st;
}
