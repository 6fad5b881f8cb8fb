/* The tuned table of a kernel: key -> config, read without a lock. */
#include <string.h>

#include "base/alloc.h"
#include "dispatch/handles.h"

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

/* A choice for cfg: the variant the next launch needs is made now; a
** failure to make it is reported by that launch. */
static void choose(kt_kernel *k, const kt__call *c, const int64_t *cfg, int standin, kt__choice *ch) {
  memcpy(ch->cfg, cfg, (size_t)k->p.spec->ncfields * sizeof *cfg);
  ch->standin = standin;
  kt__call v = *c;
  if (k->rt->env.have_device && !kt__call_config(&k->p, &v, cfg) && !kt__variant_get(&k->p, &v, &ch->fn))
    kt__variant_vals(&k->p, &v, ch->vals);
  else
    ch->fn = NULL;
}

kt_status kt__tuned_insert(kt_kernel *k, const kt__call *c, const int64_t *key, uint64_t h, const int64_t *cfg,
                           int standin, const kt__tuned **out) {
  kt__tuned *e = kt__calloc(1, sizeof *e);
  if (!e) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  e->hash = h;
  e->nkey = k->p.keydef.n;
  memcpy(e->key, key, (size_t)e->nkey * sizeof *key);
  choose(k, c, cfg, standin, &e->first);
  atomic_init(&e->now, &e->first);
  if (kt__lfmap_insert(&k->tuned, e)) {
    kt__free(e);
    return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  }
  *out = e;
  return KT_OK;
}

kt_status kt__tuned_replace(kt_kernel *k, const kt__tuned *e, const kt__call *c, const int64_t *cfg) {
  kt__choice *ch = kt__calloc(1, sizeof *ch);
  if (!ch) return kt__err(k->rt->env.id, KT_ERR_NOMEM, "%s: out of memory", k->p.spec->name);
  choose(k, c, cfg, 0, ch);
  kt__choice *old = atomic_exchange_explicit(&((kt__tuned *)e)->now, ch, memory_order_acq_rel);
  if (old != &e->first) {
    old->retired = k->retired;
    k->retired = old;
  }
  atomic_fetch_add_explicit(&k->gen, 1, memory_order_release);
  return KT_OK;
}

void kt__tuned_free(void *entry) {
  kt__tuned *e = entry;
  kt__choice *now = atomic_load(&e->now);
  if (now != &e->first) kt__free(now);
  kt__free(e);
}

int kt__test_tuned_count(const kt_kernel *k);
int kt__test_tuned_count(const kt_kernel *k) { return (int)k->tuned.count; }
