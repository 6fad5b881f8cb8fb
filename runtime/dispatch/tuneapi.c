/* kt_kernel_tune, kt_kernel_tune_shape and kt_kernel_lookup: a call's key
** settled as kt_launch would settle it (or only looked at), and what
** happened said as data. */
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "cache/store.h"
#include "dispatch/report.h"
#include "spec/key.h"

/* Bind and check the call, then its key, default and where a tuning of it
** is timed as the report names them; *known: the table has the key
** already. */
static kt_status prepare(kt_kernel *k, const kt_arg *args, int nargs, kt__call *c, kt__report *r, int *known) {
  int64_t key[KT_MAX_KEY], dflt[KT_MAX_CFIELDS];
  kt__range rg[KT_MAX_PARAMS];
  int nr;
  kt_status st;
  if ((st = kt__call_bind(&k->p, args, nargs, c)) || (st = kt__call_alias(&k->p, c, args, rg, &nr)) ||
      (st = kt__call_key(&k->p, c, key)))
    return st;
  kt__key_json(&k->p.keydef, key, r->key, sizeof r->key);
  *known = kt__tuned_find(k, key, kt__key_hash(k, key)) != NULL;
  kt__call probe = *c;
  if ((st = kt__call_fallback(&k->p, &probe, dflt))) return st;
  kt__config_json(k->p.spec, dflt, r->dflt, sizeof r->dflt);
  kt__report_timed_at(r, k, c, args);
  return KT_OK;
}

/* The config the table or the cache has for the bound call c, into
** r->config; the default when neither has one. */
static void known_config(kt_kernel *k, kt__call *c, kt__report *r) {
  int64_t key[KT_MAX_KEY], cfg[KT_MAX_CFIELDS];
  snprintf(r->config, sizeof r->config, "%s", r->dflt);
  if (kt__call_key(&k->p, c, key)) return;
  const kt__tuned *t = kt__tuned_find(k, key, kt__key_hash(k, key));
  if (t) {
    kt__config_json(k->p.spec, kt__tuned_choice(t)->cfg, r->config, sizeof r->config);
  } else if (k->rt->mode != KT_MODE_OFF && kt__cached_config(k, c, r->key, cfg)) {
    kt__config_json(k->p.spec, cfg, r->config, sizeof r->config);
  }
}

/* The report a call of kt_kernel_lookup or kt_kernel_tune fills, once its
** arguments are checked (*r stays NULL on failure). */
static kt_status report_begin(kt_kernel *k, const char *fn, kt_tune_report **out, kt__report **r) {
  *r = NULL;
  if (!k || !out) return kt__misuse(kt__rt_of(k), fn, !k ? "k is NULL" : "out is NULL");
  *out = NULL;
  kt_status st = kt__reentry(k->rt, fn, KT__CB_LOCKED);
  if (st) return st;
  if (!(*r = kt__report_new(k))) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  return KT_OK;
}

kt_status kt_kernel_lookup(kt_kernel *k, const kt_arg *args, int nargs, kt_tune_report **out) {
  double t0 = kt__now_ms();
  kt__report *r;
  kt_status st = report_begin(k, "kt_kernel_lookup", out, &r);
  if (st) return st;
  kt__call c;
  int known = 0;
  st = prepare(k, args, nargs, &c, r, &known);
  if (st) {
    kt_tune_report_free(&r->pub);
    return st;
  }
  known_config(k, &c, r);
  kt__report_from_cache(k, r, known);
  *out = kt__report_done(r, t0);
  return KT_OK;
}

/* kt_kernel_tune, on the call's buffers or (own_inputs) on inputs the
** tuning makes. */
static kt_status tune_call(kt_kernel *k, const kt_arg *args, int nargs, int own_inputs, kt_tune_report **out) {
  double t0 = kt__now_ms();
  kt__report *r;
  kt_status st = report_begin(k, own_inputs ? "kt_kernel_tune_shape" : "kt_kernel_tune", out, &r);
  if (st) return st;
  r->own_inputs = own_inputs;
  kt__call c;
  int64_t cfg[KT_MAX_CFIELDS];
  const kt__choice *hit = NULL;
  int known = 0;
  st = prepare(k, args, nargs, &c, r, &known);
  if (!st) st = kt__call_plan(k, &c, NULL, args, cfg, &hit, r);
  if (st && !(st == KT_ERR_DEVICE_FAULT && r->tuned)) {
    kt_tune_report_free(&r->pub);
    return st;
  }
  if (!st) kt__config_json(k->p.spec, cfg, r->config, sizeof r->config);
  if (!r->tuned) kt__report_from_cache(k, r, known);
  *out = kt__report_done(r, t0);
  return st;
}

kt_status kt_kernel_tune(kt_kernel *k, const kt_arg *args, int nargs, kt_tune_report **out) {
  return tune_call(k, args, nargs, 0, out);
}

kt_status kt_kernel_tune_shape(kt_kernel *k, const kt_arg *args, int nargs, kt_tune_report **out) {
  return tune_call(k, args, nargs, 1, out);
}
