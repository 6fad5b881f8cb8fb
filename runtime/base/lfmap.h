/* A hash map whose lookups take no lock, for the launch path. Entries are
** pointers to structs whose first member is their uint64_t hash; they never
** move and are never removed. Inserts are serialised by the caller. A grown
** slot array replaces the old one, which is kept until the map is freed, so
** a reader still walking it stays safe. */
#ifndef KT_LFMAP_H
#define KT_LFMAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kt__lfslots kt__lfslots;

typedef struct kt__lfmap {
  _Atomic(kt__lfslots *) slots;
  kt__lfslots *retired;
  size_t count;
} kt__lfmap;

int kt__lfmap_init(kt__lfmap *m);
/* The entry with hash h for which eq(entry, key) holds, or NULL. */
void *kt__lfmap_find(const kt__lfmap *m, uint64_t h, int (*eq)(const void *entry, const void *key),
                     const void *key);
/* Returns 0, or -1 when out of memory. The caller holds the writers' lock. */
int kt__lfmap_insert(kt__lfmap *m, void *entry);
/* Free the map, calling free_entry on each entry. */
void kt__lfmap_free(kt__lfmap *m, void (*free_entry)(void *entry));

#endif
