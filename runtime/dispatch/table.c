/* The tuned table of a kernel: key -> config, read without a lock. */
#include <string.h>

#include "base/alloc.h"
#include "dispatch/runtime.h"

void kt__tuned_free(void *entry) { kt__free(entry); }

typedef struct keyref {
  const int64_t *v;
  int n;
} keyref;

static int same_key(const void *entry, const void *key) {
  const kt__tuned *e = entry;
  const keyref *r = key;
  return e->nkey == r->n && !memcmp(e->key, r->v, (size_t)r->n * sizeof *r->v);
}

const kt__tuned *kt__tuned_find(const kt_kernel *k, const int64_t *key, uint64_t h) {
  keyref r = {key, k->p.keydef.n};
  return kt__lfmap_find(&k->tuned, h, same_key, &r);
}

kt_status kt__tuned_insert(kt_kernel *k, const kt__call *c, const int64_t *key, uint64_t h, const int64_t *cfg,
                           const kt__tuned **out) {
  kt__tuned *e = kt__calloc(1, sizeof *e);
  if (!e) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  e->hash = h;
  e->nkey = k->p.keydef.n;
  memcpy(e->key, key, (size_t)e->nkey * sizeof *key);
  memcpy(e->cfg, cfg, (size_t)k->p.spec->ncfields * sizeof *cfg);
  /* The launch right after needs this variant anyway; a failure to make it
  ** is reported by that launch. */
  kt__call v = *c;
  if (k->rt->env.have_device && !kt__call_config(&k->p, &v, cfg) && !kt__variant_get(&k->p, &v, &e->fn))
    kt__variant_vals(&k->p, &v, e->vals);
  else
    e->fn = NULL;
  if (kt__lfmap_insert(&k->tuned, e)) {
    kt__free(e);
    return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  }
  *out = e;
  return KT_OK;
}

int kt__test_tuned_count(const kt_kernel *k);
int kt__test_tuned_count(const kt_kernel *k) { return (int)k->tuned.count; }
