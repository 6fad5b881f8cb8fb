/* Which pointer args overlap: the tuner gives every group of overlapping
** byte ranges that contains a written arg one scratch allocation that
** mirrors the group's layout, so an in-place call is benchmarked in place. */
#ifndef KT_ALIAS_H
#define KT_ALIAS_H

#include <stdint.h>

typedef struct kt__range {
  uint64_t start, end;  /* bytes [start, end) */
  int param;
  int written;
  int group;            /* set by kt__alias_group */
} kt__range;

/* Assign group ids (0..n_groups-1) so that ranges that overlap, directly or
** through others, share one; ranges that merely touch do not. Empty ranges
** are alone. Returns the number of groups. O(n log n). */
int kt__alias_group(kt__range *r, int n);

#endif
