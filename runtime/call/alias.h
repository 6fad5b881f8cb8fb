/* Which pointer args share bytes. The alias check refuses a call whose
** written arg overlaps another when the spec cannot run in place; the tuner
** gives every group of overlapping ranges that holds a written arg one
** scratch allocation that mirrors the group's layout, so an in-place call
** is benchmarked in place. */
#ifndef KT_ALIAS_H
#define KT_ALIAS_H

#include <stdint.h>

#include "call/call.h"

typedef struct kt__range {
  uint64_t start, end;  /* bytes [start, end) */
  int param;
  int written;
  int group;            /* set by kt__alias_group */
} kt__range;

/* Byte ranges of the non-null pointer args of a bound call (extent times
** element size); *n of them. KT_ERR_EVAL names an extent that fails. */
kt_status kt__call_ranges(kt__prog *p, const kt__call *c, const kt_arg *args, kt__range *r, int *n);
/* Index into r of a range that r[i] overlaps, or -1. */
int kt__range_overlapping(const kt__range *r, int n, int i);
/* KT_ERR_ALIAS when a spec that cannot run in place is called with a
** written arg overlapping another; KT_OK otherwise (always for in-place
** specs, without evaluating anything). */
kt_status kt__call_alias(kt__prog *p, const kt__call *c, const kt_arg *args);

/* Assign group ids (0..n_groups-1) so that ranges that overlap, directly or
** through others, share one; ranges that merely touch do not. Empty ranges
** are alone. Returns the number of groups. O(n log n). */
int kt__alias_group(kt__range *r, int n);

#endif
