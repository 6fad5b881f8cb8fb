/* A call of a kernel that cannot run in place, with each written arg that
** overlaps another redirected to a stream-ordered temporary, launched, and
** the temporaries copied into the caller's outputs, all on the caller's
** stream. An inout arg's temporary starts as a copy of it. */
#include <string.h>

#include "call/alias.h"
#include "dispatch/runtime.h"

/* Temporaries for the written ranges of r that overlap another, with the
** caller's alignment class; staged gets their addresses. */
static kt_status make_temps(kt_kernel *k, const kt__range *r, int n, kt_stream stream, kt_arg *staged, kt__dptr *tmp,
                            char *err, size_t errlen) {
  kt_status st = KT_OK;
  for (int i = 0; i < n && !st; i++) {
    if (!r[i].written || kt__range_overlapping(r, n, i) < 0) continue;
    size_t bytes = r[i].end - r[i].start;
    st = kt__dev_malloc_async(&tmp[i], bytes + 256, stream, err, errlen);
    kt__dptr p = tmp[i] + r[i].start % 256;
    if (!st && k->p.spec->params[r[i].param].access == KT__INOUT)
      st = kt__dev_dtod_async(p, r[i].start, bytes, stream, err, errlen);
    staged[r[i].param].v.ptr = p;
  }
  return st;
}

kt_status kt__launch_staged(kt_kernel *k, kt_stream stream, const kt_arg *args, int nargs) {
  kt__env *env = &k->rt->env;
  const char *name = k->p.spec->name;
  kt__call c;
  kt_status st = kt__call_bind(&k->p, args, nargs, &c);
  if (st) return st;
  if (!env->have_device) return kt__err(env->id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device", name);
  kt__range r[KT_MAX_PARAMS];
  int n;
  if ((st = kt__call_ranges(&k->p, &c, args, r, &n))) return st;
  kt_arg staged[KT_MAX_PARAMS];
  kt__dptr tmp[KT_MAX_PARAMS] = {0};
  memcpy(staged, args, (size_t)nargs * sizeof *args);
  char err[KT_ERRMAX];
  if ((st = kt__dev_use(env->ctx, err, sizeof err))) return kt__err(env->id, st, "%s: %s", name, err);
  if ((st = make_temps(k, r, n, stream, staged, tmp, err, sizeof err)))
    st = kt__err(env->id, st, "%s: staging: %s", name, err);
  else
    st = kt_launch(k, stream, staged, nargs);
  for (int i = 0; i < n; i++) {
    if (!tmp[i]) continue;
    if (!st && kt__dev_dtod_async(r[i].start, staged[r[i].param].v.ptr, r[i].end - r[i].start, stream, err, sizeof err))
      st = kt__err(env->id, KT_ERR_CUDA, "%s: staging: %s", name, err);
    kt__dev_free_async(tmp[i], stream, err, sizeof err);
  }
  return st;
}
