/* The launch of a bound, configured call: its geometry, then the driver. */
#include <stdio.h>

#include "call/call.h"

kt_status kt__call_dims(kt__prog *p, const kt__call *c, kt__dims *d) {
  const kt__spec *s = p->spec;
  uint64_t id = p->env->id;
  static const int64_t gmax[3] = {2147483647, 65535, 65535};
  int64_t threads = 1;
  for (int i = 0; i < 3; i++) {
    int64_t g, b;
    int rc = kt__expr_eval(&s->grid[i], c->slots, &g);
    if (rc) return kt__err(id, KT_ERR_EVAL, "%s: grid[%d]: %s", s->name, i, kt__eval_strerror(rc));
    if ((rc = kt__expr_eval(&s->block[i], c->slots, &b)))
      return kt__err(id, KT_ERR_EVAL, "%s: block[%d]: %s", s->name, i, kt__eval_strerror(rc));
    if (g < 0 || g > gmax[i])
      return kt__err(id, KT_ERR_EVAL, "%s: grid[%d] = %lld is outside [0, %lld]", s->name, i, (long long)g,
                     (long long)gmax[i]);
    if (b < 1 || b > 1024)
      return kt__err(id, KT_ERR_EVAL, "%s: block[%d] = %lld is outside [1, 1024]", s->name, i, (long long)b);
    threads *= b;
    d->grid[i] = (uint32_t)g;
    d->block[i] = (uint32_t)b;
  }
  if (threads > 1024)
    return kt__err(id, KT_ERR_EVAL, "%s: block has %lld threads, more than 1024", s->name, (long long)threads);
  int64_t sm = c->slots[s->smem_slot];
  if (sm < 0 || sm > 0x7fffffff) return kt__err(id, KT_ERR_EVAL, "%s: smem = %lld bytes is invalid", s->name, (long long)sm);
  d->smem = (uint32_t)sm;
  return KT_OK;
}

int kt__call_empty_grid(kt__prog *p, const kt__call *c) {
  kt__dims d;
  if (kt__call_dims(p, c, &d)) return -1;
  for (int i = 0; i < 3; i++)
    if (!d.grid[i]) return i;
  return -1;
}

kt_status kt__call_timeable(kt__prog *p, const kt__call *c, const char *key, int dflt) {
  int dim = kt__call_empty_grid(p, c);
  if (dim < 0) return KT_OK;
  return kt__err(p->env->id, KT_ERR_INVALID,
                 "%s%s%s: nothing to time: the call launches no program (grid[%d], %s, is 0%s)", p->spec->name,
                 key ? " " : "", key ? key : "", dim, p->spec->grid[dim].text, dflt ? " under the default config" : "");
}

kt_status kt__call_launch(kt__prog *p, const kt__call *c, void *fn, kt_stream stream, const kt_arg *args,
                          kt__dims *out) {
  kt__env *env = p->env;
  if (out) out->grid[0] = 0;
  if (!env->have_device)
    return kt__err(env->id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device", p->spec->name);
  kt__dims d;
  kt_status st = kt__call_dims(p, c, &d);
  if (st) return st;
  if (!d.grid[0] || !d.grid[1] || !d.grid[2]) return KT_OK; /* nothing to do */
  if (!fn && (st = kt__variant_get(p, c, &fn))) return st;
  char err[KT_ERRMAX];
  if ((st = kt__dev_use(env->ctx, err, sizeof err))) return kt__err(env->id, st, "%s: %s", p->spec->name, err);
  void *params[KT_MAX_PARAMS];
  for (int i = 0; i < p->spec->nparams; i++) params[i] = (void *)&args[i].v;
  int r = kt__dev_launch(fn, d.grid, d.block, d.smem, stream, params, p->pdl);
  if (r) {
    char name[KT__VARIANT_NAME_MAX];
    kt__variant_name(p, c, ' ', name, sizeof name);
    st = kt__dev_error(r, p->pdl ? "cuLaunchKernelEx" : "cuLaunchKernel", err, sizeof err);
    return kt__err(env->id, st, "%s: %s", name, err);
  }
  d.fn = fn;
  if (out) *out = d;
  return KT_OK;
}
