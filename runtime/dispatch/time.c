/* Timing a call with the tuner's timer (ktune bench, embedders). */
#include "dispatch/handles.h"
#include "tune/timer.h"

kt_status kt_kernel_time(kt_kernel *k, const kt_arg *args, int nargs, const char *config, double *median_us,
                         double *spread_us) {
  if (!k || !median_us || !spread_us)
    return kt__misuse(kt__rt_of(k), "kt_kernel_time", !k ? "k is NULL" : "median_us or spread_us is NULL");
  if (kt__reentry(k->rt, "kt_kernel_time", KT__CB_LOCKED)) return KT_ERR_INVALID;
  kt__call c;
  int64_t cfg[KT_MAX_CFIELDS];
  const kt__choice *hit;
  kt__range r[KT_MAX_PARAMS];
  int nr;
  /* The alias rules as kt_launch's: the launches write the args' buffers. */
  kt_status st = kt__call_bind(&k->p, args, nargs, &c);
  if (!st) st = kt__call_ranges(&k->p, &c, args, r, &nr);
  if (!st && config) st = kt__call_forced(&k->p, &c, config);
  if (!st) st = kt__alias_refuse(&k->p, r, nr);
  if (!st && !config) st = kt__call_plan(k, &c, NULL, args, cfg, &hit, NULL);
  if (!st && !k->rt->env.have_device)
    st = kt__err(k->rt->env.id, KT_ERR_NO_DEVICE, "%s: this runtime was opened without a device", k->p.spec->name);
  if (!st) st = kt__call_timeable(&k->p, &c, NULL, 0);
  kt__benchopts o = {20, 100.0, 2000.0, 5000.0, NULL, NULL, NULL, NULL, 1};
  return st ? st : kt__bench(&k->p, &c, args, &o, median_us, spread_us);
}

/* For make bench: the function and dimensions kt_launch would use, so that
** the raw driver launch of the same work can be timed beside it. */
kt_status kt__bench_raw_fn(kt_kernel *k, const kt_arg *args, int nargs, void **fn, uint32_t grid[3],
                           uint32_t block[3]);
kt_status kt__bench_raw_fn(kt_kernel *k, const kt_arg *args, int nargs, void **fn, uint32_t grid[3],
                           uint32_t block[3]) {
  kt__call c;
  int64_t cfg[KT_MAX_CFIELDS];
  const kt__choice *hit;
  kt__dims d;
  kt_status st = kt__call_bind(&k->p, args, nargs, &c);
  if (!st) st = kt__call_plan(k, &c, NULL, args, cfg, &hit, NULL);
  if (!st) st = kt__variant_get(&k->p, &c, fn);
  if (!st) st = kt__call_dims(&k->p, &c, &d);
  for (int i = 0; !st && i < 3; i++) {
    grid[i] = d.grid[i];
    block[i] = d.block[i];
  }
  return st;
}
