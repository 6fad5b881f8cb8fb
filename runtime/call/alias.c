#include "call/alias.h"

#include <stdlib.h>

static int by_start(const void *a, const void *b) {
  const kt__range *x = *(const kt__range *const *)a, *y = *(const kt__range *const *)b;
  return (x->start > y->start) - (x->start < y->start);
}

int kt__alias_group(kt__range *r, int n) {
  kt__range *order[64];
  if (n > 64) n = 64;
  for (int i = 0; i < n; i++) order[i] = &r[i];
  qsort(order, (size_t)n, sizeof order[0], by_start);
  int groups = 0;
  uint64_t end = 0;
  for (int i = 0; i < n; i++) {
    kt__range *x = order[i];
    /* Overlap means sharing a byte: touching ranges stay apart. */
    if (i == 0 || x->start >= end || x->start == x->end) {
      x->group = groups++;
      end = x->end;
    } else {
      x->group = groups - 1;
      if (x->end > end) end = x->end;
    }
  }
  return groups;
}
