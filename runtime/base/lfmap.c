#include "base/lfmap.h"

#include "base/alloc.h"

struct kt__lfslots {
  size_t cap;  /* a power of two, at most half full */
  kt__lfslots *next_retired;
  _Atomic(void *) e[];
};

static uint64_t hash_of(const void *entry) { return *(const uint64_t *)entry; }

static kt__lfslots *slots_new(size_t cap) {
  kt__lfslots *s = kt__calloc(1, sizeof *s + cap * sizeof s->e[0]);
  if (s) s->cap = cap;
  return s;
}

int kt__lfmap_init(kt__lfmap *m) {
  kt__lfslots *s = slots_new(64);
  if (!s) return -1;
  atomic_init(&m->slots, s);
  m->retired = NULL;
  m->count = 0;
  return 0;
}

void *kt__lfmap_find(const kt__lfmap *m, uint64_t h, int (*eq)(const void *, const void *),
                     const void *key) {
  kt__lfslots *s = atomic_load_explicit(&((kt__lfmap *)m)->slots, memory_order_acquire);
  for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
    void *e = atomic_load_explicit(&s->e[i], memory_order_acquire);
    if (!e) return NULL;
    if (hash_of(e) == h && eq(e, key)) return e;
  }
}

static void place(kt__lfslots *s, void *e) {
  size_t j = hash_of(e) & (s->cap - 1);
  while (atomic_load_explicit(&s->e[j], memory_order_relaxed)) j = (j + 1) & (s->cap - 1);
  atomic_store_explicit(&s->e[j], e, memory_order_release);
}

int kt__lfmap_insert(kt__lfmap *m, void *entry) {
  kt__lfslots *s = atomic_load(&m->slots);
  if ((m->count + 1) * 2 > s->cap) {
    kt__lfslots *g = slots_new(s->cap * 2);
    if (!g) return -1;
    for (size_t i = 0; i < s->cap; i++) {
      void *o = atomic_load(&s->e[i]);
      if (o) place(g, o);
    }
    s->next_retired = m->retired;
    m->retired = s;
    atomic_store_explicit(&m->slots, g, memory_order_release);
    s = g;
  }
  place(s, entry);
  m->count++;
  return 0;
}

void kt__lfmap_free(kt__lfmap *m, void (*free_entry)(void *)) {
  kt__lfslots *s = atomic_load(&m->slots);
  if (s)
    for (size_t i = 0; i < s->cap; i++) {
      void *e = atomic_load(&s->e[i]);
      if (e && free_entry) free_entry(e);
    }
  kt__free(s);
  for (kt__lfslots *r = m->retired; r;) {
    kt__lfslots *n = r->next_retired;
    kt__free(r);
    r = n;
  }
  atomic_store(&m->slots, NULL);
  m->retired = NULL;
}
