/* What the cache has for a key of a kernel, as the miss policy, the
** background tuner and the reports ask it. */
#include "cache/store.h"
#include "dispatch/handles.h"

kt_status kt__cached_json(kt_kernel *k, const char *key, char *json, size_t n, char *err, size_t errlen) {
  const kt__env *env = &k->rt->env;
  return kt__store_get_config(env->store, k->p.spec->name, k->p.spec_hash, env->fingerprint, key, json, n, NULL, err,
                              errlen);
}

int kt__cached_config(kt_kernel *k, const kt__call *c, const char *key, int64_t *cfg) {
  char json[KT_CONFIG_JSON_MAX], err[KT_ERRMAX];
  return k->rt->env.store && !kt__cached_json(k, key, json, sizeof json, err, sizeof err) &&
         kt__call_config_valid(&k->p, c, json, cfg);
}
